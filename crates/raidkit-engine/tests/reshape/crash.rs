//! Crashes at random moments of a reshape raidkit runs: every write after the crash is
//! lost (the machine died), the array is assembled again from what the members hold and
//! the reshape continued; the data is intact, redundancy checks clean and the shape is the
//! new one. `RAIDKIT_RESHAPE_CRASHES=N` tries N moments spread over the run per kind
//! (default 2), `RAIDKIT_RESHAPE_CRASH_EDGES=E` E more at each end (default 1): among the
//! superblock writes that start and finish it.

use crate::common::*;
use raidkit_engine::assemble::{assemble, assemble_paths, AssembleOptions};
use raidkit_engine::jobs::reshape::{
    continue_reshape, reshape, ReshapeEnd, ReshapeOptions, ReshapeRequest,
};
use raidkit_engine::sb::probe;
use raidkit_engine::{BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::hooked::{Hooked, Hooks};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A copy of a made array's files into a fresh directory.
fn copy(m: &Made, into: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let cp = |ps: &[PathBuf]| -> Vec<PathBuf> {
        ps.iter()
            .map(|p| {
                let d = into.join(p.file_name().unwrap());
                std::fs::copy(p, &d).unwrap();
                d
            })
            .collect()
    };
    (cp(&m.members), cp(&m.extra))
}

type Req = dyn Fn(Vec<Arc<dyn BlockDev>>, Option<PathBuf>) -> ReshapeRequest + Send + Sync;

/// Member hooks that stop once the shared write budget is spent: the next write never
/// returns (the machine died there; the test copies what the members hold at that moment).
struct Crash(Arc<AtomicI64>);

impl Hooks for Crash {
    fn write(&self, inner: &dyn BlockDev, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.0.fetch_sub(1, Ordering::SeqCst) <= 0 {
            loop {
                std::thread::park();
            }
        }
        inner.write_at(buf, offset)
    }
}

/// Run the reshape on devices that freeze after `budget` writes (its IO threads are left
/// hanging); when they froze (or the run ended), copy the members and the backup file as
/// they are into `snap`. Returns how many writes were issued.
fn run_until(
    members: &[PathBuf],
    extra: &[PathBuf],
    budget: i64,
    req: Arc<Req>,
    backup: Option<PathBuf>,
    snap: Option<&Path>,
) -> i64 {
    let b = Arc::new(AtomicI64::new(budget));
    let wrap = |p: &PathBuf| -> Arc<dyn BlockDev> {
        let file = FileDev::open(p, true).unwrap();
        Arc::new(Hooked::new(file, Crash(b.clone())))
    };
    let devs: Vec<Arc<dyn BlockDev>> = members.iter().map(wrap).collect();
    let add: Vec<Arc<dyn BlockDev>> = extra.iter().map(wrap).collect();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d2, bk) = (done.clone(), backup.clone());
    std::thread::spawn(move || {
        let arr = Arc::new(assemble(devs, &rw()).unwrap());
        let _ = reshape(&arr, &req(add, bk), &ReshapeOptions::default(), &mut |_| {});
        drop(arr);
        d2.store(true, Ordering::SeqCst);
    });
    while !done.load(Ordering::SeqCst) && b.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // Writes that had started when the budget ran out land first.
    std::thread::sleep(std::time::Duration::from_millis(100));
    if let Some(snap) = snap {
        for p in members.iter().chain(extra).chain(backup.iter()) {
            if p.exists() {
                std::fs::copy(p, snap.join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    budget - b.load(Ordering::SeqCst).max(0)
}

fn ours(p: &Path) -> bool {
    let d = FileDev::open(p, false).unwrap();
    !probe(&d).unwrap().found.is_empty()
}

/// After the crash: assemble what is there and finish the reshape (continue it if it had
/// started, start it again if not).
fn recover(
    name: &str,
    members: &[PathBuf],
    extra: &[PathBuf],
    req: Arc<Req>,
    backup: Option<PathBuf>,
) -> Arc<raidkit_engine::Array> {
    let (known, new): (Vec<PathBuf>, Vec<PathBuf>) = extra.iter().cloned().partition(|p| ours(p));
    let mut all = members.to_vec();
    all.extend(known);
    let o = AssembleOptions {
        writable: true,
        backup_file: backup.clone().filter(|b| b.exists()),
        ..Default::default()
    };
    let arr = Arc::new(
        assemble_paths(&all, &o)
            .unwrap_or_else(|e| panic!("{name}: assembly after the crash: {e}")),
    );
    if let Some(st) = arr.reshape_status() {
        eprintln!(
            "{name}: recorded {} progress {} notes {:?}",
            st.recorded_sectors, st.progress_sectors, st.notes
        );
        let o = ReshapeOptions {
            backup_file: backup,
            ..Default::default()
        };
        let end = continue_reshape(&arr, &o, &mut |_| {})
            .unwrap_or_else(|e| panic!("{name}: continuing after the crash: {e}"));
        assert_eq!(end, ReshapeEnd::Finished, "{name}");
        return arr.current();
    }
    let add: Vec<Arc<dyn BlockDev>> = new.iter().map(|p| open(p)).collect();
    let r = req(add, backup.filter(|b| !b.exists()));
    match reshape(&arr, &r, &ReshapeOptions::default(), &mut |_| {}) {
        Ok((cur, end)) => {
            assert_eq!(end, ReshapeEnd::Finished, "{name}");
            cur
        }
        // It had finished before the crash.
        Err(e) if e.to_string().contains("nothing to change") => arr,
        Err(e) => panic!("{name}: reshaping again after the crash: {e}"),
    }
}

fn crashes() -> usize {
    std::env::var("RAIDKIT_RESHAPE_CRASHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// Crash points at each end of the run (`RAIDKIT_RESHAPE_CRASH_EDGES`, default 1).
fn edges() -> i64 {
    std::env::var("RAIDKIT_RESHAPE_CRASH_EDGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn crash_case(name: &str, m: &Made, req: Arc<Req>, backup: bool, want: Want) {
    let scratch = raidkit_testkit::tempdir::TempDir::new("rk-crash").unwrap();
    let bk = |d: &Path| backup.then(|| d.join("backup"));
    let (ms, xs) = copy(m, scratch.path());
    let total = run_until(
        &ms,
        &xs,
        i64::MAX / 4,
        req.clone(),
        bk(scratch.path()),
        None,
    );
    assert!(total > 10, "{name}: {total} writes");
    let k = crashes();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ total as u64;
    let mut points: Vec<i64> = (0..k)
        .map(|i| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Spread over the run, jittered.
            ((total as u64 * i as u64) / k as u64 + seed % (total as u64 / k as u64).max(1)) as i64
                + 1
        })
        .collect();
    // Among the superblock writes that start and finish it.
    let edges = edges();
    points.extend(
        (1..=edges)
            .map(|e| 2 + e * 2)
            .chain((1..=edges).map(|e| total - e)),
    );
    for point in points {
        let dir = raidkit_testkit::tempdir::TempDir::new("rk-crash-at").unwrap();
        let (ms, xs) = copy(m, dir.path());
        let snap = raidkit_testkit::tempdir::TempDir::new("rk-crash-snap").unwrap();
        run_until(
            &ms,
            &xs,
            point,
            req.clone(),
            bk(dir.path()),
            Some(snap.path()),
        );
        let at = |ps: &[PathBuf]| -> Vec<PathBuf> {
            ps.iter()
                .map(|p| snap.path().join(p.file_name().unwrap()))
                .collect()
        };
        let what = format!("{name}, crash after {point} of {total} writes");
        let arr = recover(&what, &at(&ms), &at(&xs), req.clone(), bk(snap.path()));
        let g = arr.geometry().clone();
        assert_eq!(
            (g.level, g.raid_disks, g.chunk_sectors),
            (want.level, want.n, want.chunk_k * 2),
            "{what}"
        );
        if want.level.has_parity() {
            assert_eq!(names::layout_name(g.level, g.layout), want.layout, "{what}");
        }
        check(&what, &arr, m.seed, m.bytes.min(arr.size_bytes()));
        clean_check(&what, &arr);
    }
}

#[test]
fn crashes_at_random_moments_are_continued() {
    let grow_by_one = |n: usize| -> Arc<Req> {
        Arc::new(move |add, _| ReshapeRequest {
            raid_disks: Some(n + 1),
            add,
            ..Default::default()
        })
    };
    for (level, layout, n) in [
        (Level::Raid5, "left-symmetric", 4),
        (Level::Raid6, "left-symmetric", 4),
        (Level::Raid10, "n2", 4),
    ] {
        let m = make(level, layout, n, "1.2", 64, 1);
        let name = format!("{level} {n}->{}", n + 1);
        let to = want(level, n + 1, layout, 64);
        crash_case(&name, &m, grow_by_one(n), false, to);
    }
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    crash_case(
        "raid5 chunk 64K->128K",
        &m,
        Arc::new(|_, _| ReshapeRequest {
            chunk_sectors: Some(256),
            ..Default::default()
        }),
        false,
        want(Level::Raid5, 5, "left-symmetric", 128),
    );
    let m = make(Level::Raid5, "left-symmetric", 3, "0.90", 64, 1);
    crash_case(
        "0.90 raid5 3->4 backup",
        &m,
        Arc::new(|add, b| ReshapeRequest {
            raid_disks: Some(4),
            add,
            backup_file: b,
            ..Default::default()
        }),
        true,
        want(Level::Raid5, 4, "left-symmetric", 64),
    );
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let full = m.bytes / 4 * 3 / 512;
    crash_case(
        "raid5 5->4 backup",
        &m,
        Arc::new(move |_, b| ReshapeRequest {
            raid_disks: Some(4),
            array_sectors: Some(full),
            backup_file: b,
            ..Default::default()
        }),
        true,
        want(Level::Raid5, 4, "left-symmetric", 64),
    );
}
