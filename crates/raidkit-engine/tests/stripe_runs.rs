//! Parity passes (check, repair, rebuild) over runs of stripes read with one IO per member
//! (64 KiB chunks: 16 stripes, 1 MiB per member IO): the member IOs are large, and what
//! the passes find and write is exact at every edge of a run — its first and last stripe,
//! a run cut short by the end of the array, a window or a stop point, a read error inside
//! a run — and a client write racing a run is neither reported nor undone.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::sync::{self, SyncMode, SyncOptions};
use raidkit_engine::Array;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, data_offset_bytes, member_files};
use raidkit_testkit::hooked::{members, Hooked, Recorder};
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const CHUNK: u64 = 64 << 10;
const PAGE: u64 = 4096;
/// Each member's size: 17 MiB, more than 16 runs of 16 stripes (so runs are whole).
const MEMBER_BYTES: u64 = 17 << 20;

/// A member file that records its IOs (while its `record` is on), fails reads over one
/// byte range and can start a client write when a read covers a given offset.
type RecDev = Hooked<Recorder>;

/// The array's bytes: a pattern of the offset (no page like another).
fn pattern(off: u64, len: usize) -> Vec<u8> {
    raidkit_testkit::pattern::mdref_bytes(3, off, len)
}

/// Create a RAID5 (4 members) or RAID6 (6 members) of 64 KiB chunks over files, filled
/// with `pattern`, stopped. Returns the member files, the array size and the data offset
/// (bytes).
fn make(dir: &TempDir, level: Level) -> (Vec<PathBuf>, u64, u64) {
    let n = if level == Level::Raid6 { 6 } else { 4 };
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.chunk_bytes = Some(CHUNK);
    o.create_size = Some(MEMBER_BYTES);
    o.assume_clean = true;
    o.name = "runs".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes();
    arr.write(0, &pattern(0, size as usize)).expect("fill");
    arr.stop().expect("stop");
    let doff = data_offset_bytes(&ps[0]);
    (ps, size, doff)
}

fn open(ps: &[PathBuf], writable: bool) -> (Arc<Array>, Vec<Arc<RecDev>>) {
    let recs: Vec<Arc<RecDev>> = ps
        .iter()
        .map(|p| Arc::new(Recorder::open(p, false)))
        .collect();
    let devs = members(&recs);
    let opts = AssembleOptions {
        writable,
        force: true,
        ..Default::default()
    };
    (Arc::new(assemble(devs, &opts).expect("assemble")), recs)
}

/// Flip a byte of member `m`'s chunk of `stripe` at chunk byte `at`, on the file.
fn corrupt(ps: &[PathBuf], doff: u64, m: usize, stripe: u64, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ps[m])
        .expect("open member file");
    let pos = doff + stripe * CHUNK + at;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, pos).expect("read byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, pos).expect("write byte");
}

/// What a check reports for planted pages `(stripe, chunk byte)` (in order): every data
/// block's page of the row, adjacent ranges merged.
fn expected(data_blocks: u64, planted: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(s, at) in planted {
        let page = at / PAGE * PAGE;
        for k in 0..data_blocks {
            let off = (s * data_blocks + k) * CHUNK + page;
            match out.last_mut() {
                Some(l) if l.0 + l.1 == off => l.1 += PAGE,
                _ => out.push((off, PAGE)),
            }
        }
    }
    out
}

fn check(arr: &Array, opts: &SyncOptions) -> sync::SyncReport {
    sync::run_opts(arr, SyncMode::Check, opts, &mut |_, _| {}).expect("check")
}

fn full() -> SyncOptions {
    SyncOptions {
        full: true,
        ..Default::default()
    }
}

fn planted_check(level: Level) {
    let dir = TempDir::new("rk-runs").expect("temp dir");
    let (ps, _, doff) = make(&dir, level);
    let n = ps.len();
    let data_blocks = (n - if level == Level::Raid6 { 2 } else { 1 }) as u64;
    let (arr, recs) = open(&ps, false);
    let stripes = arr.geometry().stripes();
    assert!(
        stripes >= 16 * 16,
        "{level}: {stripes} stripes, runs would be cut"
    );
    let last = stripes - 1;
    // (stripe, chunk byte, member): the first and last stripe of the first run (first and
    // last page), the first stripe of the next one, both sides of a window's end (20), and
    // the last page of the array (a run cut short by its end).
    let plant = [
        (0, 0, 0),
        (15, CHUNK - 1, 1),
        (16, 0, 2),
        (19, CHUNK - PAGE, 3 % n),
        (20, 7, n - 1),
        (last, CHUNK - 1, 0),
    ];
    drop(arr);
    drop(recs);
    for &(s, at, m) in &plant {
        corrupt(&ps, doff, m, s, at);
    }
    let (arr, recs) = open(&ps, false);
    let all: Vec<(u64, u64)> = plant.iter().map(|&(s, at, _)| (s, at)).collect();
    for r in &recs {
        r.record.store(true, Ordering::SeqCst);
    }
    let rep = check(&arr, &full());
    assert_eq!(
        rep.mismatches,
        expected(data_blocks, &all),
        "{level}: whole array"
    );
    if level == Level::Raid6 {
        // P and Q tell the member: the one corrupted, each time.
        let roles: Vec<Option<usize>> = rep.verdicts.iter().map(|v| v.role).collect();
        let want: Vec<Option<usize>> = plant.iter().map(|&(.., m)| Some(m)).collect();
        assert_eq!(roles, want, "{level}: verdicts {:?}", rep.verdicts);
    }
    // One IO per member per run: 1 MiB each, only the last run shorter.
    for (m, r) in recs.iter().enumerate() {
        let reads: Vec<(u64, usize)> = std::mem::take(&mut *r.reads.lock().unwrap());
        let data: Vec<usize> = reads
            .iter()
            .filter(|&&(o, _)| o >= doff)
            .map(|&(_, l)| l)
            .collect();
        let short = data.iter().filter(|&&l| l != 16 * CHUNK as usize).count();
        assert!(
            !data.is_empty() && short <= 1,
            "{level}: member {m} read {} times, {short} of them not 1 MiB: {:?}",
            data.len(),
            &data[..data.len().min(20)]
        );
        r.record.store(false, Ordering::SeqCst);
    }
    // A window ending inside a run: stripes [0, 20) only.
    let w = check(
        &arr,
        &SyncOptions {
            window: Some((0, 20 * CHUNK / 512)),
            ..full()
        },
    );
    assert_eq!(
        w.mismatches,
        expected(data_blocks, &all[..4]),
        "{level}: window"
    );
    // Stopped after the first step, resumed where it says: the two parts make the whole.
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let first = sync::run_opts(
        &arr,
        SyncMode::Check,
        &SyncOptions {
            stop: Some(stop),
            ..full()
        },
        &mut |d, _| {
            if d > 0 {
                st.store(true, Ordering::SeqCst);
            }
        },
    )
    .expect("check");
    let at = first.stopped_at.expect("stopped");
    assert!(
        at > 0 && at.is_multiple_of(CHUNK / 512) && at < stripes * CHUNK / 512,
        "{level}: stopped at {at}"
    );
    let cut = at / (CHUNK / 512);
    let before: Vec<(u64, u64)> = all.iter().copied().filter(|&(s, _)| s < cut).collect();
    let after: Vec<(u64, u64)> = all.iter().copied().filter(|&(s, _)| s >= cut).collect();
    assert_eq!(
        first.mismatches,
        expected(data_blocks, &before),
        "{level}: before {at}"
    );
    let rest = check(
        &arr,
        &SyncOptions {
            window: Some((at, stripes * CHUNK / 512)),
            ..full()
        },
    );
    assert_eq!(
        rest.mismatches,
        expected(data_blocks, &after),
        "{level}: from {at}"
    );
}

#[test]
fn a_check_finds_exactly_the_planted_mismatches_at_the_edges_of_runs() {
    planted_check(Level::Raid5);
    planted_check(Level::Raid6);
}

/// Rebuild the last member onto a spare (with a read error inside the second run on
/// member 0 for RAID6, which P+Q survive): the spare's data area equals the lost
/// member's, byte for byte, and it was written 1 MiB at a time.
fn rebuild_exact(level: Level) {
    let dir = TempDir::new("rk-runs").expect("temp dir");
    let (ps, _, doff) = make(&dir, level);
    let n = ps.len();
    let (arr, recs) = open(&ps[..n - 1], true);
    assert_eq!(arr.missing_roles(), vec![n - 1], "{level}");
    if level == Level::Raid6 {
        let at = doff + 21 * CHUNK + 8192;
        *recs[0].bad.lock().unwrap() = Some((at, at + PAGE));
    }
    let sp = dir.path().join("spare");
    std::fs::File::create(&sp)
        .expect("spare")
        .set_len(std::fs::metadata(&ps[0]).expect("size").len())
        .expect("spare size");
    let spare = Arc::new(Recorder::open(&sp, false));
    spare.record.store(true, Ordering::SeqCst);
    arr.add_spare(spare.clone(), false).expect("add spare");
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    assert_eq!(rep.lost, vec![], "{level}");
    assert_eq!(arr.missing_roles(), Vec::<usize>::new(), "{level}");
    let stripes = arr.geometry().stripes();
    drop(recs);
    match Arc::try_unwrap(arr) {
        Ok(arr) => arr.stop().expect("stop"),
        Err(_) => panic!("{level}: the array is still shared"),
    }
    let len = (stripes * CHUNK) as usize;
    let want = std::fs::read(&ps[n - 1]).expect("lost member");
    let got = std::fs::read(&sp).expect("spare");
    let sdoff = data_offset_bytes(&sp) as usize;
    let (w, g) = (&want[doff as usize..][..len], &got[sdoff..][..len]);
    if let Some(i) = (0..len).find(|&i| w[i] != g[i]) {
        panic!(
            "{level}: the spare differs from the lost member at data byte {i} (stripe {})",
            i as u64 / CHUNK
        );
    }
    let big = spare
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|&&(_, l)| l == 16 * CHUNK as usize)
        .count() as u64;
    assert!(
        big + 2 >= stripes / 16,
        "{level}: {big} writes of 1 MiB for {stripes} stripes"
    );
}

#[test]
fn a_rebuild_of_64k_chunks_writes_the_lost_member_byte_for_byte() {
    rebuild_exact(Level::Raid5);
    rebuild_exact(Level::Raid6);
}

/// A repair of a run racing a client write into a stripe inside it (the run's sixth
/// stripe, whose parity is planted wrong): the write lands before the stripe is read or
/// after it is fixed, never in between, so afterwards the array reads the write and
/// parity agrees.
#[test]
fn a_client_write_into_a_run_being_repaired_is_not_undone() {
    let dir = TempDir::new("rk-runs").expect("temp dir");
    let (ps, _, doff) = make(&dir, Level::Raid5);
    // Stripe 5's first page made inconsistent (whichever block member 0 holds there).
    corrupt(&ps, doff, 0, 5, 100);
    let (arr, recs) = open(&ps, true);
    let stripe5 = 5 * 3 * CHUNK;
    let (tx, rx) = mpsc::channel();
    let rx = Mutex::new(Some(rx));
    let weak = Arc::downgrade(&arr);
    let tx = Mutex::new(tx);
    let _ = recs[1].race.set(Box::new(move || {
        let Some(arr) = weak.upgrade() else { return };
        let tx = tx.lock().unwrap().clone();
        std::thread::spawn(move || {
            arr.write(stripe5, &[0xC3; PAGE as usize])
                .expect("client write");
            let _ = tx.send(());
        });
        // Landed, or waiting for the stripe's fix.
        std::thread::sleep(Duration::from_millis(300));
    }));
    *recs[1].trigger.lock().unwrap() = Some(doff + 5 * CHUNK);
    let rep = sync::run_opts(&arr, SyncMode::Repair, &full(), &mut |_, _| {}).expect("repair");
    assert!(
        recs[1].trigger.lock().unwrap().is_none(),
        "the repair never read the stripe"
    );
    assert_eq!(rep.mismatches, expected(3, &[(5, 100)]));
    let done = rx.lock().unwrap().take().expect("rx");
    done.recv_timeout(Duration::from_secs(30))
        .expect("the client write finished");
    let again = check(&arr, &full());
    assert_eq!(again.mismatches, vec![], "parity disagrees after the race");
    let mut got = vec![0u8; PAGE as usize];
    arr.read(stripe5, &mut got).expect("read");
    assert!(
        got.iter().all(|&b| b == 0xC3),
        "the client write was undone"
    );
    let mut next = vec![0u8; PAGE as usize];
    arr.read(stripe5 + PAGE, &mut next).expect("read");
    assert!(next == pattern(stripe5 + PAGE, PAGE as usize));
}
