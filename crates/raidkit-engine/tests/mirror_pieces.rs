//! A mirrored check over members in memory (tmpfs) compares the copies in small pieces
//! (`sync::mirror_piece_bytes` counts what that path vouched for) and still finds exactly
//! every planted difference — a byte flipped in one copy at the first and last byte of a
//! piece, of a step and of a chunk, and at the array's end — in RAID1 of 2 and 3 copies
//! and RAID10 near, far and offset; a repair leaves every copy alike (3 copies: the
//! majority's bytes); a mirrored rebuild there, stopped and resumed, leaves every copy
//! alike.

use raidkit_engine::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::sync::{self, mirror_piece_bytes, SyncMode, SyncReport};
use raidkit_engine::AssembleOptions;
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{assert_consistent, create_options, data_offset_bytes, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const PAGE: u64 = 4096;
const PIECE: u64 = 256 << 10;
/// A mirrored step over members in memory.
const STEP: u64 = 4 << 20;

/// The tests tell which path a pass took by a process-wide count: one test at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An array on tmpfs filled with a pattern and stopped: its member files, its size in
/// bytes and its contents.
fn make(
    dir: &Path,
    level: Level,
    n: usize,
    layout: Option<&str>,
    member_bytes: u64,
) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir, n);
    let mut o = create_options(level, &ps);
    o.create_size = Some(member_bytes);
    o.chunk_bytes = (level == Level::Raid10).then_some(512 << 10);
    o.layout = layout.map(|l| names::parse_layout(level, l).expect("layout"));
    o.assume_clean = true;
    o.name = "mp".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes() / PAGE * PAGE;
    let model: Vec<u8> = (0..size)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect();
    arr.write(0, &model).expect("fill");
    arr.stop().expect("stop");
    (ps, model)
}

/// Flip a byte of array offset `at` in its `copy`-th copy (member file bytes).
fn flip(ps: &[PathBuf], at: u64, copy: usize) {
    let arr = assemble_paths(ps, &AssembleOptions::default()).expect("assemble");
    let p = arr.geometry().locate(at / 512).expect("in the array");
    let (role, dsec) = p.copies[copy];
    drop(arr);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ps[role])
        .expect("open member");
    let off = data_offset_bytes(&ps[role]) + dsec * 512 + at % 512;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, off).expect("read");
    b[0] ^= 0x10;
    f.write_all_at(&b, off).expect("write");
}

/// A pass over the array; the bytes the piecewise compare vouched for in it.
fn pass(ps: &[PathBuf], mode: SyncMode) -> (SyncReport, u64) {
    let opts = AssembleOptions {
        writable: mode == SyncMode::Repair,
        ..AssembleOptions::default()
    };
    let arr = assemble_paths(ps, &opts).expect("assemble");
    let before = mirror_piece_bytes();
    let rep = sync::run(&arr, mode, true, &mut |_, _| {}).expect("pass");
    arr.stop().expect("stop");
    (rep, mirror_piece_bytes() - before)
}

/// The pages a report's mismatched ranges cover.
fn pages(rep: &SyncReport) -> BTreeSet<u64> {
    rep.mismatches
        .iter()
        .flat_map(|&(off, len)| (off / PAGE..(off + len).div_ceil(PAGE)).map(|p| p * PAGE))
        .collect()
}

fn case(level: Level, n: usize, layout: Option<&str>, copies: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = TempDir::in_memory("rk-mirrorpieces") else {
        eprintln!("no tmpfs: skipped");
        return;
    };
    let tag = format!("{level:?} {n} {layout:?}");
    let (ps, model) = make(dir.path(), level, n, layout, 18 << 20);
    let size = model.len() as u64;
    // Healthy: every copy of every byte compared in pieces, nothing found.
    let (rep, vouched) = pass(&ps, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{tag}: {:?}", rep.mismatches);
    assert_eq!(
        vouched,
        copies as u64 * size,
        "{tag}: not compared in pieces"
    );
    // (array offset, copy): piece, step and chunk edges, in every copy, and the end.
    let last = copies - 1;
    let planted = [
        (PIECE - 1, 0),
        (PIECE + 1, last),
        (3 * PIECE + 511, 1 % copies),
        (STEP - 1, last),
        (STEP, 0),
        (2 * STEP + 3 * PIECE + 5 * PAGE + 7, 1 % copies),
        (size - 1, last),
    ];
    for &(at, copy) in &planted {
        flip(&ps, at, copy);
    }
    let want: BTreeSet<u64> = planted.iter().map(|&(at, _)| at / PAGE * PAGE).collect();
    let (rep, vouched) = pass(&ps, SyncMode::Check);
    assert_eq!(pages(&rep), want, "{tag}: mismatched pages");
    let bytes: u64 = rep.mismatches.iter().map(|m| m.1).sum();
    assert_eq!(bytes, want.len() as u64 * PAGE, "{tag}: mismatched bytes");
    assert!(
        vouched > 0 && vouched < copies as u64 * size,
        "{tag}: {vouched} bytes vouched for in pieces"
    );
    if copies >= 3 {
        // The copy outvoted is the one planted.
        for v in &rep.verdicts {
            let (at, copy) = planted
                .iter()
                .find(|&&(at, _)| at / PAGE * PAGE == v.offset)
                .expect("a verdict on a planted page");
            let arr = assemble_paths(&ps, &AssembleOptions::default()).expect("assemble");
            let role = arr.geometry().locate(at / 512).expect("placed").copies[*copy].0;
            assert_eq!(v.role, Some(role), "{tag}: verdict {v:?}");
            assert_eq!(v.decided_by, "majority", "{tag}");
        }
    }
    let (rep, _) = pass(&ps, SyncMode::Repair);
    assert_eq!(pages(&rep), want, "{tag}: repaired pages");
    let (rep, vouched) = pass(&ps, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{tag}: after repair {:?}", rep);
    assert_eq!(vouched, copies as u64 * size, "{tag}: after repair");
    if copies >= 3 {
        let arr = assemble_paths(&ps, &AssembleOptions::default()).expect("assemble");
        let mut got = vec![0u8; model.len()];
        arr.read(0, &mut got).expect("read");
        assert!(got == model, "{tag}: the majority's bytes were not kept");
    }
}

#[test]
fn raid1_two_copies_compared_in_pieces_find_exactly_the_planted_pages() {
    case(Level::Raid1, 2, None, 2);
}

#[test]
fn raid1_three_copies_compared_in_pieces_find_and_outvote_the_planted_pages() {
    case(Level::Raid1, 3, None, 3);
}

#[test]
fn raid10_near_far_offset_compared_in_pieces_find_exactly_the_planted_pages() {
    case(Level::Raid10, 4, Some("n2"), 2);
    case(Level::Raid10, 4, Some("f2"), 2);
    case(Level::Raid10, 3, Some("o2"), 2);
    case(Level::Raid10, 4, Some("n3"), 3);
}

/// A member of a mirrored array on tmpfs lost and rebuilt onto a blank spare (copied in
/// the kernel), stopped and resumed: every copy alike afterwards (the check compares
/// them in pieces) and the array's bytes kept.
fn rebuild_case(level: Level, n: usize, layout: Option<&str>, lost: usize) {
    // (Its check counts in the piecewise compare's bytes too.)
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = TempDir::in_memory("rk-mirrorrebuild") else {
        eprintln!("no tmpfs: skipped");
        return;
    };
    let tag = format!("{level:?} {n} {layout:?}");
    // Larger than the steps in flight at once (8 of 1 MiB), so that a stop takes effect.
    let (ps, model) = make(dir.path(), level, n, layout, 40 << 20);
    let rw = AssembleOptions {
        writable: true,
        ..AssembleOptions::default()
    };
    let rest: Vec<PathBuf> = (0..n)
        .filter(|&i| i != lost)
        .map(|i| ps[i].clone())
        .collect();
    let arr = assemble_paths(&rest, &rw).expect("assemble degraded");
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .and_then(|f| f.set_len(std::fs::metadata(&ps[lost])?.len()))
        .expect("spare");
    let dev = raidkit_engine::FileDev::open(&spare, true).expect("open the spare");
    arr.add_spare(std::sync::Arc::new(dev), false).expect("add");
    // Stopped after its first step, then resumed from the checkpoint.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opts = RebuildOptions {
        stop: Some(stop.clone()),
        ..RebuildOptions::default()
    };
    let mut steps = 0;
    rebuild(&arr, &opts, &mut |done, total| {
        steps += 1;
        if done < total {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    })
    .expect("rebuild, stopped");
    assert!(arr.is_degraded(), "{tag}: stopped after {steps} steps");
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    assert_eq!(
        (rep.roles.clone(), rep.lost.clone()),
        (vec![lost], vec![]),
        "{tag}"
    );
    assert!(!arr.is_degraded(), "{tag}");
    assert_consistent(&arr, &tag);
    let mut got = vec![0u8; model.len()];
    arr.read(0, &mut got).expect("read");
    assert!(got == model, "{tag}: the array's bytes");
    arr.stop().expect("stop");
}

#[test]
fn mirrored_rebuilds_on_tmpfs_leave_every_copy_alike() {
    rebuild_case(Level::Raid1, 3, None, 1);
    rebuild_case(Level::Raid10, 4, Some("n2"), 2);
    rebuild_case(Level::Raid10, 4, Some("f2"), 1);
    rebuild_case(Level::Raid10, 3, Some("o2"), 0);
}
