//! What a RAID5/RAID6 write costs in member IOs, and full-stripe writes through the writer
//! lanes when one member's writes fail.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::dev::io::{Submission, LARGE_WRITE_BYTES};
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const CHUNK: u64 = 64 << 10;

fn make(dir: &TempDir, level: Level, n: usize) -> Vec<PathBuf> {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.chunk_bytes = Some(CHUNK);
    o.create_size = Some(8 << 20);
    o.assume_clean = true;
    drop(create(&o, &mut |_, _| {}).unwrap());
    ps
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(0x9e37_79b9) ^ seed.wrapping_mul(131)) as u8)
        .collect()
}

/// (reads, writes) over every member so far.
fn member_ios(arr: &Array) -> (u64, u64) {
    arr.member_stats()
        .iter()
        .fold((0, 0), |(r, w), m| (r + m.reads, w + m.writes))
}

/// A 4 KiB write inside one data block costs the member IOs of its plan and nothing else:
/// RAID5 2 reads + 2 writes, RAID6 3 + 3 (fewer reads where the stripe cache knows the old
/// data), whether small writes bypass the stripe cache or go through it.
#[test]
fn small_parity_writes_cost_exactly_their_member_ios() {
    for (level, n, per) in [(Level::Raid5, 4, 2u64), (Level::Raid6, 6, 3)] {
        for bypass in [Some(true), Some(false), None] {
            let dir = TempDir::new("rk-cost").unwrap();
            let opts = AssembleOptions {
                writable: true,
                ..Default::default()
            };
            let arr =
                raidkit_engine::assemble::assemble_paths(&make(&dir, level, n), &opts).unwrap();
            arr.force_stripe_cache_bypass(bypass);
            arr.write(0, &[1u8; 4096]).unwrap(); // marks the array dirty
            let size = arr.size_bytes();
            let writes = 300u64;
            let before = member_ios(&arr);
            let mut written = Vec::new();
            let mut x = 12345u64;
            for k in 0..writes {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // 4 KiB-aligned, never the last page of a chunk (a write ending on a
                // chunk boundary may be held for its neighbours).
                let mut off = (x >> 20) % (size / 4096) * 4096;
                if (off + 4096).is_multiple_of(CHUNK) {
                    off -= 4096;
                }
                let d = data(4096, k);
                arr.write(off, &d).unwrap();
                written.retain(|(o, _)| *o != off);
                written.push((off, d));
            }
            let after = member_ios(&arr);
            let (reads, wrote) = (after.0 - before.0, after.1 - before.1);
            let what = format!("{level:?}, bypass {bypass:?}");
            assert_eq!(wrote, per * writes, "{what}: member writes");
            if bypass == Some(true) {
                // One write in 128 still goes through the cache (which may know data).
                assert!(
                    reads <= per * writes && reads >= per * (writes - 3),
                    "{what}: {reads}"
                );
            } else {
                assert!(reads <= per * writes, "{what}: {reads} member reads");
            }
            for (off, d) in &written {
                let mut b = vec![0u8; 4096];
                arr.read(*off, &mut b).unwrap();
                assert!(&b == d, "{what}: bytes at {off}");
            }
            assert_consistent(&arr, &what);
        }
    }
}

/// A member file whose descriptor for batched IO can be switched to one opened read-only:
/// its writes then fail (EBADF) the way a member's writes fail, reads still work.
struct Breakable {
    ro: std::fs::File,
    broken: AtomicBool,
}

impl Hooks for Breakable {
    fn submission<'a>(&'a self, inner: &'a dyn BlockDev) -> Submission<'a> {
        match inner.submission() {
            Submission::Fd { fd, in_memory } if !self.broken.load(Ordering::Acquire) => {
                Submission::Fd { fd, in_memory }
            }
            Submission::Fd { in_memory, .. } => Submission::Fd {
                fd: self.ro.as_raw_fd(),
                in_memory,
            },
            other => other,
        }
    }
}

/// A full-stripe RAID6 write hands its large member writes to the writer lanes; one
/// member whose write fails is failed, the write succeeds on the others, and the data
/// reads back exactly (degraded) with parity consistent.
#[test]
fn a_full_stripe_write_survives_one_member_whose_lane_write_fails() {
    let dir = TempDir::new("rk-lane").unwrap();
    let ps = make(&dir, Level::Raid6, 6);
    let devs: Vec<Arc<Hooked<Breakable>>> = ps
        .iter()
        .map(|p| {
            let ro = std::fs::File::open(p).unwrap();
            let hooks = Breakable {
                ro,
                broken: AtomicBool::new(false),
            };
            Arc::new(Hooked::new(FileDev::open(p, true).unwrap(), hooks))
        })
        .collect();
    let arr = assemble(
        members(&devs),
        &AssembleOptions {
            writable: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        CHUNK as usize >= LARGE_WRITE_BYTES,
        "the chunk writes must be large"
    );
    let stripe = 4 * CHUNK as usize;
    let good = data(stripe, 1);
    arr.write(0, &good).unwrap();
    let broken_role = arr
        .members()
        .iter()
        .find(|m| m.device == devs[2].name())
        .and_then(|m| m.role)
        .unwrap();
    devs[2].broken.store(true, Ordering::Release);
    let d = data(2 * stripe, 2);
    arr.write(stripe as u64, &d).unwrap();
    assert_eq!(arr.missing_roles(), vec![broken_role]);
    let mut back = vec![0u8; 2 * stripe];
    arr.read(stripe as u64, &mut back).unwrap();
    assert!(back == d, "degraded read after the failed member write");
    let mut first = vec![0u8; stripe];
    arr.read(0, &mut first).unwrap();
    assert!(first == good);
}
