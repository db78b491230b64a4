//! 0.90 superblocks carry the array's device counts (nr, active, working, failed, spare
//! disks); md recomputes them from its devices on every write, and so must raidkit. The
//! expected values were read with `mdadm -E` from the kernel (6.1) doing the same steps:
//! a 3-member RAID5 with a bitmap and a spare; a member failed and removed, writes; the
//! member re-added (bitmap-guided catch-up) while the spare stays a spare.

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::rebuild::RebuildOptions;
use raidkit_engine::sb::{probe, Metadata, Super};
use raidkit_engine::Array;
use raidkit_engine::{BlockDev, FileDev};
use raidkit_format::v090::SuperblockV090;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

mod cases;
use cases::rw;

fn sb090(p: &Path) -> SuperblockV090 {
    let d = FileDev::open(p, false).unwrap();
    match &probe(&d).unwrap().found[0].0 {
        Super::V090(s) => s.clone(),
        _ => panic!("not 0.90"),
    }
}

/// (nr, active, working, failed, spare) disks.
fn counts(s: &SuperblockV090) -> [u32; 5] {
    [
        s.nr_disks,
        s.active_disks,
        s.working_disks,
        s.failed_disks,
        s.spare_disks,
    ]
}

/// (number, raid_disk, state) of the first `n` descriptors.
fn table(s: &SuperblockV090, n: usize) -> Vec<(u32, u32, u32)> {
    s.disks[..n]
        .iter()
        .map(|d| (d.number, d.raid_disk, d.state))
        .collect()
}

/// The 3-member 0.90 RAID5 with a bitmap and a spare, member 2 failed and removed and
/// the array written: its members' paths (member 2's included) and the running array.
fn degraded_with_spare(dir: &TempDir) -> (Vec<PathBuf>, Array) {
    let ps = member_files(dir.path(), 4);
    let mut o = create_options(Level::Raid5, &ps[..3]);
    o.create_size = Some(4 << 20);
    o.metadata = Metadata::parse("0.90").unwrap();
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let len = std::fs::metadata(&ps[0]).unwrap().len();
    std::fs::File::create(&ps[3]).unwrap().set_len(len).unwrap();
    let arr = assemble_paths(&ps[..3], &rw()).unwrap();
    let spare: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[3], true).unwrap());
    arr.add_spare(spare, false).unwrap();
    // ACTIVE|SYNC = 6, spare = 0, FAULTY|REMOVED = 9.
    for p in [&ps[0], &ps[3]] {
        let s = sb090(p);
        assert_eq!(counts(&s), [4, 3, 4, 0, 1], "with a spare: {}", p.display());
        assert_eq!(table(&s, 4), [(0, 0, 6), (1, 1, 6), (2, 2, 6), (3, 3, 0)]);
    }
    arr.fail_member(2, "test").unwrap();
    arr.write(0, &[7; 1 << 16]).unwrap();
    // Failed, not removed: md still counts the device.
    for p in [&ps[0], &ps[3]] {
        let s = sb090(p);
        assert_eq!(counts(&s), [4, 2, 3, 1, 1], "failed: {}", p.display());
    }
    arr.remove_member(&ps[2].display().to_string()).unwrap();
    for p in [&ps[0], &ps[3]] {
        let s = sb090(p);
        assert_eq!(counts(&s), [3, 2, 3, 1, 1], "degraded: {}", p.display());
        assert_eq!(table(&s, 4), [(0, 0, 6), (1, 1, 6), (2, 2, 9), (3, 3, 0)]);
    }
    (ps, arr)
}

#[test]
fn counts_through_spare_fail_and_re_add_match_md() {
    let dir = TempDir::new("rk-engine").unwrap();
    let (ps, arr) = degraded_with_spare(&dir);
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[2], true).unwrap());
    arr.re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    arr.stop().unwrap();
    for p in &ps {
        let s = sb090(p);
        assert_eq!(counts(&s), [4, 3, 4, 0, 1], "caught up: {}", p.display());
        assert_eq!(table(&s, 4), [(0, 0, 6), (1, 1, 6), (2, 2, 6), (3, 3, 0)]);
    }
}

/// While the re-added member is caught up md counts it as a spare (not in sync) and its
/// role as failed.
#[test]
fn counts_while_a_re_added_member_is_caught_up_match_md() {
    let dir = TempDir::new("rk-engine").unwrap();
    let (ps, arr) = degraded_with_spare(&dir);
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[2], true).unwrap());
    let opts = RebuildOptions {
        stop: Some(Arc::new(AtomicBool::new(true))),
        ..Default::default()
    };
    let _ = arr.re_add(dev, &opts, &mut |_, _| {});
    drop(arr);
    for p in &ps {
        assert_eq!(counts(&sb090(p)), [4, 2, 4, 1, 2], "{}", p.display());
    }
}

/// A removed spare leaves every table and the counts (md lists the devices it has).
#[test]
fn a_removed_spare_leaves_the_table() {
    let dir = TempDir::new("rk-engine").unwrap();
    let ps = member_files(dir.path(), 3);
    let mut o = create_options(Level::Raid1, &ps[..2]);
    o.create_size = Some(4 << 20);
    o.metadata = Metadata::parse("0.90").unwrap();
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let len = std::fs::metadata(&ps[0]).unwrap().len();
    std::fs::File::create(&ps[2]).unwrap().set_len(len).unwrap();
    let arr = assemble_paths(&ps[..2], &rw()).unwrap();
    let spare: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[2], true).unwrap());
    arr.add_spare(spare, false).unwrap();
    assert_eq!(counts(&sb090(&ps[0])), [3, 2, 3, 0, 1]);
    arr.remove_member(&ps[2].display().to_string()).unwrap();
    arr.stop().unwrap();
    let s = sb090(&ps[0]);
    assert_eq!(counts(&s), [2, 2, 2, 0, 0]);
    assert_eq!(table(&s, 3), [(0, 0, 6), (1, 1, 6), (0, 0, 0)]);
}
