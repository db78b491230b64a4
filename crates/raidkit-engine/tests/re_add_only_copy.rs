//! A member that holds the only copy of (some of) its data is taken back as it is only if
//! it was the last of its holders to leave and still holds what the array last wrote to
//! it; else the one that left last is named and must come back first. A parity array
//! taken back so owes a resync (its last member usually left mid-stripe-write).

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{RebuildOptions, RebuildReport};
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod cases;
use cases::rw;

const MIB: u64 = 1 << 20;

fn make(level: Level, layout: &str, n: usize, bitmap: bool) -> (TempDir, Vec<PathBuf>, Array) {
    let dir = TempDir::new("rk-onlycopy").unwrap();
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.layout = Some(names::parse_layout(level, layout).unwrap());
    o.create_size = Some(4 * MIB);
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 * 1024);
    }
    o.bitmap = bitmap;
    if bitmap {
        o.bitmap_chunk_bytes = Some(64 * 1024);
    }
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    (dir, ps, arr)
}

fn re_add(arr: &Array, p: &Path) -> raidkit_engine::Result<RebuildReport> {
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(p, true).unwrap());
    arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
}

fn read(arr: &Array, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    arr.read(at, &mut b).unwrap();
    b
}

/// RAID1: role 0 leaves, role 1 takes a write alone and leaves. Role 0 coming back
/// first is refused, naming role 1; role 1 is taken back as it is; role 0 is then caught
/// up from it.
#[test]
fn mirror_member_that_left_first_is_refused_until_the_last_is_back() {
    for bitmap in [false, true] {
        let (_dir, ps, arr) = make(Level::Raid1, "default", 2, bitmap);
        arr.write(MIB, &[1; 4096]).unwrap();
        arr.fail_member(0, "test").unwrap();
        arr.write(MIB, &[2; 4096]).unwrap();
        arr.flush().unwrap();
        arr.fail_member(1, "test").unwrap();
        let err = re_add(&arr, &ps[0]).unwrap_err().to_string();
        let last = ps[1].display().to_string();
        assert!(
            err.contains(&format!("role 1 ({last}) left after it")),
            "bitmap {bitmap}: {err}"
        );
        assert!(!err.contains("discard"), "{err}");
        let rep = re_add(&arr, &ps[1]).unwrap();
        assert_eq!(rep.sectors, 0, "bitmap {bitmap}: taken back as it is");
        assert_eq!(read(&arr, MIB, 4096), vec![2; 4096], "bitmap {bitmap}");
        // Role 0 comes back now: caught up from role 1, not taken back as it is.
        let rep = re_add(&arr, &ps[0]).unwrap();
        assert!(rep.sectors > 0, "bitmap {bitmap}: {rep:?}");
        assert!(!arr.is_degraded());
        arr.fail_member(1, "test").unwrap();
        assert_eq!(read(&arr, MIB, 4096), vec![2; 4096], "bitmap {bitmap}");
    }
}

/// The last leg comes back restored from a snapshot taken before the array last wrote
/// to it: refused (it would serve old data), though the bitmap still covers it.
#[test]
fn last_leg_restored_from_an_older_snapshot_is_refused() {
    let (dir, ps, arr) = make(Level::Raid1, "default", 2, true);
    arr.write(MIB, &[1; 4096]).unwrap();
    arr.flush().unwrap();
    let snap = dir.path().join("snap.img");
    std::fs::copy(&ps[1], &snap).unwrap();
    arr.fail_member(0, "test").unwrap();
    arr.write(MIB, &[2; 4096]).unwrap();
    arr.flush().unwrap();
    arr.fail_member(1, "test").unwrap();
    std::fs::copy(&snap, &ps[1]).unwrap();
    let err = re_add(&arr, &ps[1]).unwrap_err().to_string();
    assert!(
        err.contains("is not the last one this array wrote to it"),
        "{err}"
    );
    assert!(err.contains("older"), "{err}");
}

/// RAID5 of 3: role 0 leaves, 1 MiB is written, role 1 leaves. Role 0 is refused;
/// role 1 is taken back as it is and a resync is owed (a stripe write may have been cut
/// when it left); role 0 is then rebuilt and everything reads back.
#[test]
fn parity_member_taken_back_as_it_is_owes_a_resync() {
    let (_dir, ps, arr) = make(Level::Raid5, "left-symmetric", 3, false);
    // The array is clean before (marked so after its first writes).
    arr.mark_clean().unwrap();
    assert!(!arr.needs_resync());
    arr.fail_member(0, "test").unwrap();
    let data: Vec<u8> = (0..MIB).map(|i| (i * 7 % 251) as u8).collect();
    arr.write(MIB, &data).unwrap();
    arr.flush().unwrap();
    arr.mark_clean().unwrap();
    arr.fail_member(1, "test").unwrap();
    let err = re_add(&arr, &ps[0]).unwrap_err().to_string();
    assert!(err.contains("role 1 ("), "{err}");
    let rep = re_add(&arr, &ps[1]).unwrap();
    assert_eq!(rep.sectors, 0);
    assert!(arr.needs_resync(), "no resync owed after the take-back");
    for p in &ps[1..] {
        let d = FileDev::open(p, false).unwrap();
        let sb = &raidkit_engine::sb::probe(&d).unwrap().found[0].0;
        assert_eq!(sb.resync_offset(), 0, "{}", p.display());
    }
    assert!(read(&arr, MIB, data.len()) == data, "read back differs");
    raidkit_engine::sync::run(
        &arr,
        raidkit_engine::sync::SyncMode::Resync,
        false,
        &mut |_, _| {},
    )
    .unwrap();
    re_add(&arr, &ps[0]).unwrap();
    assert!(!arr.is_degraded());
    arr.fail_member(2, "test").unwrap();
    assert!(read(&arr, MIB, data.len()) == data, "read back differs");
}

/// RAID10 n2 over 3 (chunk c on roles 2c and 2c+1, mod 3): role 1 leaves, everything is
/// written, role 0 leaves, chunk 1 (roles 0 and 2) is written again. Role 0 comes back:
/// chunk 1 is caught up from role 2, chunk 0 (roles 0 and 1: role 1 left first) is kept
/// as it is, nothing is lost.
#[test]
fn raid10_keeps_the_chunks_it_alone_holds_and_catches_up_the_others() {
    let chunk = 64 * 1024usize;
    let (_dir, ps, arr) = make(Level::Raid10, "n2", 3, false);
    arr.fail_member(1, "test").unwrap();
    let all: Vec<u8> = (0..6 * chunk).map(|i| (i % 253) as u8).collect();
    arr.write(0, &all).unwrap();
    arr.flush().unwrap();
    arr.fail_member(0, "test").unwrap();
    let again = vec![9u8; chunk];
    arr.write(chunk as u64, &again).unwrap();
    arr.flush().unwrap();
    let rep = re_add(&arr, &ps[0]).unwrap();
    assert_eq!(rep.lost, vec![], "{rep:?}");
    let mut want = all.clone();
    want[chunk..2 * chunk].copy_from_slice(&again);
    assert!(read(&arr, 0, want.len()) == want, "read back differs");
    // Role 0 alone now holds chunks 0 and 1.
    arr.fail_member(2, "test").unwrap();
    assert!(
        read(&arr, 0, 2 * chunk) == want[..2 * chunk],
        "role 0 differs"
    );
}

/// RAID10 n2 over 3: role 0 leaves, then role 1 (role 2 in sync). Role 0 holds chunks
/// whose other copy is on role 1, which left after it: refused, naming role 1.
#[test]
fn raid10_member_that_left_before_its_chunk_partner_is_refused() {
    let (_dir, ps, arr) = make(Level::Raid10, "n2", 3, false);
    arr.fail_member(0, "test").unwrap();
    arr.write(0, &[3; 4096]).unwrap();
    arr.flush().unwrap();
    arr.fail_member(1, "test").unwrap();
    let err = re_add(&arr, &ps[0]).unwrap_err().to_string();
    let last = ps[1].display().to_string();
    assert!(
        err.contains(&format!("role 1 ({last}) left after it")),
        "{err}"
    );
}
