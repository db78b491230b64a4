//! Small RAID5/RAID6 writes on their cheap paths: straight to the members into reused
//! (uncleared) buffers, and through the stripe cache onto rows it holds whole. Parity stays
//! byte-exact, a failed member read never lets stale buffer bytes reach a member or a
//! client, and rows completed by cached data are hits, not merges.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const CHUNK: u64 = 64 << 10;
const PAGE: u64 = 4096;

/// Fails the next member read of any member once armed, leaving garbage in the buffer
/// (as a failed read may).
struct FailNext {
    armed: Arc<AtomicBool>,
}

impl Hooks for FailNext {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            buf.fill(0xEE);
            return Err(io::Error::from_raw_os_error(5));
        }
        inner.read_at(buf, offset)
    }
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) ^ seed.wrapping_mul(0x2545_f491)) as u8 | 1)
        .collect()
}

/// A RAID5 or RAID6 of `n` members, 64 KiB chunks, filled with a pattern; reopened over
/// hooked members. Returns the array, the model of its contents and the arming flag.
fn open(dir: &TempDir, level: Level, n: usize) -> (Arc<Array>, Vec<u8>, Arc<AtomicBool>) {
    let ps: Vec<PathBuf> = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.chunk_bytes = Some(CHUNK);
    o.create_size = Some(2 << 20);
    o.assume_clean = true;
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let model = bytes(arr.size_bytes() as usize, 7);
    arr.write(0, &model).expect("fill");
    arr.stop().expect("stop");
    let armed = Arc::new(AtomicBool::new(false));
    let devs: Vec<Arc<Hooked<FailNext>>> = ps
        .iter()
        .map(|p| {
            let hooks = FailNext {
                armed: Arc::clone(&armed),
            };
            Arc::new(Hooked::new(FileDev::open(p, true).expect("open"), hooks))
        })
        .collect();
    let opts = AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(members(&devs), &opts).expect("assemble"));
    (arr, model, armed)
}

fn member_reads(arr: &Array) -> u64 {
    arr.member_stats().iter().map(|m| m.reads).sum()
}

fn assert_reads_back(arr: &Array, model: &[u8], what: &str) {
    let mut got = vec![0u8; model.len()];
    arr.read(0, &mut got).expect("read back");
    if let Some(i) = got.iter().zip(model).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {i} reads {:#04x}, written {:#04x}",
            got[i], model[i]
        );
    }
}

/// A 4 KiB write whose first member read fails (garbage left in the buffer): the write
/// reconstructs instead, the new data and every other byte read back exactly, and parity
/// is consistent — straight to the members (reused, uncleared buffers) and through the
/// stripe cache, after earlier writes have left other data in the reused buffers. With 4
/// and 6 members the plan reads the other data blocks (reconstruct-write), with 5 and 7
/// the old data and parity (read-modify-write).
#[test]
fn a_failed_member_read_during_a_small_write_exposes_no_stale_bytes() {
    for (level, n) in [
        (Level::Raid5, 4),
        (Level::Raid5, 5),
        (Level::Raid6, 6),
        (Level::Raid6, 7),
    ] {
        for bypass in [true, false] {
            let what = format!("{level:?} of {n}, bypass {bypass}");
            let dir = TempDir::new("rk-spw").unwrap();
            let (arr, mut model, armed) = open(&dir, level, n);
            arr.force_stripe_cache_bypass(Some(bypass));
            let kc = n as u64 - if level == Level::Raid6 { 2 } else { 1 };
            let stripe_bytes = kc * CHUNK;
            let mut failed = 0;
            for k in 0..24u64 {
                // Earlier writes: other data left in the reused buffers.
                let off = (k * 5 % 7) * stripe_bytes + (k % kc) * CHUNK + (k % 15) * PAGE;
                let d = bytes(PAGE as usize, 100 + k);
                arr.write(off, &d).unwrap();
                model[off as usize..(off + PAGE) as usize].copy_from_slice(&d);
                // Then one whose first member read fails.
                let off = (k % 6) * stripe_bytes + ((k + 1) % kc) * CHUNK + (k % 14 + 1) * PAGE;
                let d = bytes(PAGE as usize, 200 + k);
                armed.store(true, Ordering::SeqCst);
                arr.write(off, &d).unwrap();
                // Through the cache a write onto rows it holds reads nothing.
                if !armed.swap(false, Ordering::SeqCst) {
                    failed += 1;
                }
                model[off as usize..(off + PAGE) as usize].copy_from_slice(&d);
            }
            assert!(
                failed >= 12,
                "{what}: only {failed} writes met a failed read"
            );
            assert!(
                arr.missing_roles().is_empty(),
                "{what}: a member was failed"
            );
            assert_reads_back(&arr, &model, &what);
            assert_consistent(&arr, &what);
        }
    }
}

/// Through the stripe cache, a row whose data blocks it holds whole takes 4 KiB writes
/// with no member reads (P/Q computed from the cached pages), parity stays exact, and
/// such write-outs are counted as hits, not as merges (merges make partial stripes wait
/// for the rest of a stream, which scattered writes never send).
#[test]
fn writes_onto_rows_the_cache_holds_read_nothing_and_are_not_merges() {
    for level in [Level::Raid5, Level::Raid6] {
        let what = format!("{level:?}");
        let dir = TempDir::new("rk-spw").unwrap();
        let n = if level == Level::Raid6 { 6 } else { 4 };
        let (arr, mut model, _) = open(&dir, level, n);
        arr.force_stripe_cache_bypass(Some(false));
        let (kc, parity) = if level == Level::Raid6 {
            (4, 2)
        } else {
            (3, 1)
        };
        let stripe_bytes = kc * CHUNK;
        let rows = [(0u64, 3u64), (2, 0), (5, 15)];
        let mut seed = 1000;
        let mut round = |arr: &Array, model: &mut Vec<u8>, sectors: u64| {
            for &(stripe, row) in &rows {
                for block in 0..kc {
                    // Whole pages, and partial ones (a sector range inside the page).
                    let at = if sectors == 8 {
                        0
                    } else {
                        (block + row) % (8 - sectors + 1)
                    };
                    let off = stripe * stripe_bytes + block * CHUNK + row * PAGE + at * 512;
                    let d = bytes((sectors * 512) as usize, seed);
                    seed += 1;
                    arr.write(off, &d).unwrap();
                    model[off as usize..off as usize + d.len()].copy_from_slice(&d);
                }
            }
        };
        // Two rounds over every data block of the rows: the cache learns them whole.
        round(&arr, &mut model, 8);
        round(&arr, &mut model, 8);
        let writes_before: u64 = arr.member_stats().iter().map(|m| m.writes).sum();
        let reads = member_reads(&arr);
        let hits = arr.stripe_cache_stats().unwrap().hits;
        round(&arr, &mut model, 8);
        round(&arr, &mut model, 3);
        let n = 2 * rows.len() as u64 * kc;
        assert_eq!(member_reads(&arr) - reads, 0, "{what}: member reads");
        let writes: u64 = arr.member_stats().iter().map(|m| m.writes).sum();
        assert_eq!(
            writes - writes_before,
            n * (1 + parity),
            "{what}: member writes"
        );
        let stats = arr.stripe_cache_stats().unwrap();
        assert!(stats.hits >= hits + n, "{what}: {} hits", stats.hits - hits);
        assert_eq!(
            stats.full_stripe_merges, 0,
            "{what}: cache hits counted as merges"
        );
        assert_reads_back(&arr, &model, &what);
        assert_consistent(&arr, &what);
    }
}
