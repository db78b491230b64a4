//! Adding and removing the write-intent bitmap of an array (live), and hot replacement.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::grow::BitmapMode;
use raidkit_engine::sb::{probe, Metadata};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| pattern_word(seed, i as u64) as u8)
        .collect()
}

fn make(
    dir: &TempDir,
    level: Level,
    layout: &str,
    n: usize,
    meta: &str,
    mib: u64,
) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.layout = Some(names::parse_layout(level, layout).unwrap());
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 * 1024);
    }
    o.metadata = Metadata::parse(meta).unwrap();
    o.create_size = Some(mib << 20);
    o.name = "g".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let model = data(n as u64 + mib, arr.size_bytes() as usize);
    arr.write(0, &model).unwrap();
    arr.stop().unwrap();
    (ps, model)
}

fn bitmap_sector(p: &Path) -> Option<u64> {
    let d = FileDev::open(p, false).unwrap();
    let pr = probe(&d).unwrap();
    let (sb, _) = pr.found.into_iter().next().unwrap();
    sb.bitmap_sector(d.size_bytes() / 512)
}

fn read_all(arr: &raidkit_engine::Array) -> Vec<u8> {
    let mut out = vec![0u8; arr.size_bytes() as usize];
    arr.read(0, &mut out).unwrap();
    out
}

/// Add a bitmap to a live array, write, crash: only the dirty chunks are resynced. Remove
/// it, write, crash: everything is. Data is exact throughout.
#[test]
fn bitmap_added_and_removed_live() {
    for (level, layout, n, meta, want_sector) in [
        (Level::Raid5, "left-symmetric", 4usize, "1.2", 8 + 8u64),
        (Level::Raid1, "default", 2, "1.0", 0),
        (Level::Raid10, "n2", 4, "1.1", 8),
        (Level::Raid6, "left-symmetric", 4, "0.90", 0),
    ] {
        let dir = TempDir::new("rk-grow").unwrap();
        let (ps, mut model) = make(&dir, level, layout, n, meta, 8);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(!arr.has_bitmap());
        // Writes before, then the switch while the array is dirty but consistent.
        let w = data(7, 8192);
        arr.write(1 << 20, &w).unwrap();
        model[1 << 20..(1 << 20) + 8192].copy_from_slice(&w);
        let ch = arr
            .set_bitmap(BitmapMode::Internal {
                chunk_bytes: Some(128 * 1024),
            })
            .unwrap();
        assert_eq!(
            ch.dirty,
            Some(0),
            "{level:?} {meta}: clean array, no dirty bits"
        );
        assert_eq!(ch.chunk_bytes, Some(128 * 1024));
        assert!(arr.has_bitmap());
        assert_eq!(arr.bitmap_chunk_sectors(), Some(256));
        // Where mdadm puts a bitmap added later.
        let sec = bitmap_sector(&ps[0]).expect("superblock points at the bitmap");
        let d = FileDev::open(&ps[0], false).unwrap();
        let ds = d.size_bytes() / 512;
        let expect = match meta {
            "0.90" => (ds & !127) - 128 + 8,
            "1.0" => ((ds - 16) & !7) - 16, // below the 8-sector bad-block log
            _ => want_sector,
        };
        assert_eq!(sec, expect, "{level:?} {meta}");
        // Two writes → two dirty 128 KiB chunks (in the bitmap's address space).
        for (k, off) in [(1u64, 0usize), (2, 3 << 20)] {
            let w = data(k + 10, 4096);
            arr.write(off as u64, &w).unwrap();
            model[off..off + 4096].copy_from_slice(&w);
        }
        arr.flush().unwrap();
        drop(arr); // crash
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(arr.has_bitmap() && arr.needs_resync(), "{level:?} {meta}");
        let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
        assert_eq!(
            rep.sectors_done,
            2 * 256,
            "{level:?} {meta}: resync of dirty chunks only"
        );
        assert!(read_all(&arr) == model, "{level:?} {meta}");
        // Remove it live, write, crash: a full resync.
        let ch = arr.set_bitmap(BitmapMode::None).unwrap();
        assert!(!ch.bitmap && !arr.has_bitmap());
        assert_eq!(
            bitmap_sector(&ps[0]),
            None,
            "{level:?} {meta}: feature cleared"
        );
        let w = data(99, 4096);
        arr.write(5 << 20, &w).unwrap();
        model[5 << 20..(5 << 20) + 4096].copy_from_slice(&w);
        arr.flush().unwrap();
        let g = arr.geometry().clone();
        drop(arr);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(!arr.has_bitmap() && arr.needs_resync());
        let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
        let full = if level == Level::Raid10 {
            g.array_sectors()
        } else {
            g.dev_sectors
        };
        assert_eq!(rep.sectors_done, full, "{level:?} {meta}: full resync");
        assert!(read_all(&arr) == model);
        // Removing twice is refused; so is adding twice.
        let e = arr.set_bitmap(BitmapMode::None).unwrap_err().to_string();
        assert!(e.contains("no bitmap"), "{e}");
        arr.set_bitmap(BitmapMode::Internal { chunk_bytes: None })
            .unwrap();
        let e = arr
            .set_bitmap(BitmapMode::Internal { chunk_bytes: None })
            .unwrap_err()
            .to_string();
        assert!(e.contains("already has"), "{e}");
        arr.stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(!arr.needs_resync());
        assert_eq!(
            arr.bitmap_chunk_sectors(),
            Some((64 << 20) / 512),
            "mdadm's default chunk"
        );
        assert!(sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})
            .unwrap()
            .mismatches
            .is_empty());
    }
}

/// A bitmap added while the array is degraded keeps every bit set (a returning member
/// must be resynced in full), and a too-small chunk is refused with the minimum.
#[test]
fn bitmap_added_degraded_is_all_dirty_and_chunk_checked() {
    let dir = TempDir::new("rk-grow").unwrap();
    let (ps, model) = make(&dir, Level::Raid5, "left-symmetric", 3, "1.2", 4);
    let arr = assemble_paths(&ps[1..], &rw()).unwrap();
    let ch = arr
        .set_bitmap(BitmapMode::Internal { chunk_bytes: None })
        .unwrap();
    assert_eq!(ch.dirty, ch.chunks);
    assert_eq!(ch.chunks, Some(1));
    assert!(read_all(&arr) == model);
    let e = arr.set_bitmap(BitmapMode::None).unwrap();
    assert!(!e.bitmap);
    // 4 MiB members, 1.2 with 8 sectors of room: 3840 bytes of bits, 4 KiB chunks need
    // 1025 bits — fits; 512-byte chunks are not a valid choice.
    let e = arr
        .set_bitmap(BitmapMode::Internal {
            chunk_bytes: Some(512),
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("between 4 KiB and 2 GiB"), "{e}");
}

fn spare(dir: &TempDir, name: &str, mib: u64) -> std::sync::Arc<dyn BlockDev> {
    let p = dir.path().join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    std::sync::Arc::new(FileDev::open(&p, true).unwrap())
}

fn sb_of(p: &Path) -> raidkit_format::v1::SuperblockV1 {
    let d = FileDev::open(p, false).unwrap();
    match probe(&d).unwrap().found.into_iter().next().unwrap().0 {
        raidkit_engine::sb::Super::V1(s) => s,
        _ => panic!("not 1.x"),
    }
}

/// Replace member 1 while another thread writes; every byte is verified afterwards, the
/// replacement alone (with the minimum of the others) serves the data, and the on-disk
/// state is md's: the old member's role entry is 0xffff, the new one has the role and no
/// REPLACEMENT/RECOVERY_OFFSET bits.
#[test]
fn replace_under_writes_every_level() {
    use raidkit_engine::rebuild::RebuildOptions;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    for (level, layout, n) in [
        (Level::Raid1, "default", 2usize),
        (Level::Raid5, "left-symmetric", 4),
        (Level::Raid6, "left-symmetric", 5),
        (Level::Raid10, "n2", 4),
    ] {
        let dir = TempDir::new("rk-replace").unwrap();
        let (ps, model) = make(&dir, level, layout, n, "1.2", 4);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        let ev = arr.subscribe();
        arr.add_spare(spare(&dir, "new.img", 4), false).unwrap();
        let old = arr
            .members()
            .into_iter()
            .find(|m| m.role == Some(1))
            .unwrap()
            .device;
        let new_name = dir.path().join("new.img").display().to_string();
        assert_eq!(arr.start_replace(&old, Some(&new_name)).unwrap(), 1);
        let st = arr.members();
        assert!(
            st.iter()
                .any(|m| m.device == new_name && m.role == Some(1) && m.state == "replacement"),
            "{st:?}"
        );
        assert!(!arr.is_degraded(), "redundancy is never reduced");
        let model = Mutex::new(model);
        let done = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let size = arr.size_bytes();
                let mut k = 0u64;
                while !done.load(Ordering::Relaxed) || k < 8 {
                    let len = [4096usize, 700, 65536 + 512, 3 * 65536][k as usize % 4];
                    let off = pattern_word(77, k) % (size - len as u64);
                    let w = data(1000 + k, len);
                    arr.write(off, &w).unwrap();
                    model.lock().unwrap()[off as usize..off as usize + len].copy_from_slice(&w);
                    k += 1;
                }
            });
            let rep = raidkit_engine::replace::replace(
                &arr,
                &RebuildOptions {
                    checkpoint_every: Some(std::time::Duration::ZERO),
                    ..Default::default()
                },
                &mut |_, _| {},
            )
            .unwrap();
            done.store(true, Ordering::Relaxed);
            assert_eq!(rep.roles, vec![1]);
            assert!(rep.lost.is_empty());
        });
        let model = model.into_inner().unwrap();
        assert!(read_all(&arr) == model, "{level:?}");
        let st = arr.members();
        assert!(
            st.iter()
                .any(|m| m.device == new_name && m.role == Some(1) && m.state == "in_sync"),
            "{st:?}"
        );
        assert!(
            !st.iter().any(|m| m.device == old),
            "old member removed: {st:?}"
        );
        let evs: Vec<_> = ev.try_iter().collect();
        use raidkit_engine::array::ArrayEvent;
        assert!(evs.iter().any(|e| matches!(
            e,
            ArrayEvent::ReplaceStarted {
                role: 1,
                from: 0,
                ..
            }
        )));
        assert!(evs.iter().any(
            |e| matches!(e, ArrayEvent::ReplaceFinished { role: 1, lost, .. } if lost.is_empty())
        ));
        assert!(
            !evs.iter()
                .any(|e| matches!(e, ArrayEvent::MemberFailed { .. })),
            "{evs:?}"
        );
        arr.stop().unwrap();
        // On disk.
        let newp = dir.path().join("new.img");
        let ns = sb_of(&newp);
        let flags =
            raidkit_format::v1::feature::REPLACEMENT | raidkit_format::v1::feature::RECOVERY_OFFSET;
        assert_eq!(ns.feature_map & flags, 0);
        assert_eq!(ns.dev_roles[ns.dev_number as usize], 1);
        let old_devnum = sb_of(&ps[1]).dev_number as usize;
        assert_eq!(ns.dev_roles[old_devnum], 0xffff);
        // The array without the old member: complete, consistent, exact.
        let mut set: Vec<PathBuf> = ps.clone();
        set[1] = newp.clone();
        let a2 = assemble_paths(&set, &AssembleOptions::default()).unwrap();
        assert!(!a2.is_degraded(), "{level:?}");
        assert!(sync::run(&a2, SyncMode::Check, true, &mut |_, _| {})
            .unwrap()
            .mismatches
            .is_empty());
        assert!(read_all(&a2) == model, "{level:?}");
        drop(a2);
        // The replacement really holds role 1's data: drop another member that shares it.
        let minimal: Vec<PathBuf> = match level {
            Level::Raid1 => vec![newp.clone()],
            Level::Raid10 => vec![ps[2].clone(), ps[3].clone(), newp.clone()],
            _ => set
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != 0)
                .map(|(_, p)| p.clone())
                .collect(),
        };
        let a3 = assemble_paths(&minimal, &AssembleOptions::default()).unwrap();
        assert!(read_all(&a3) == model, "{level:?} via the replacement");
    }
}

/// The old member cannot read some sectors: those come from redundancy and the
/// replacement completes with nothing lost.
#[test]
fn replace_completes_over_unreadable_sectors_of_the_old_member() {
    use raidkit_engine::rebuild::RebuildOptions;
    for (level, layout, n) in [
        (Level::Raid5, "left-symmetric", 3usize),
        (Level::Raid1, "default", 2),
    ] {
        let dir = TempDir::new("rk-replace").unwrap();
        let (ps, model) = make(&dir, level, layout, n, "1.2", 2);
        // Member 0 cannot read 16 device sectors in its data area (data starts at 2048).
        let bad = PathBuf::from(format!("fault:reio@3000-3015:{}", ps[0].display()));
        let mut set = ps.clone();
        set[0] = bad;
        let arr = assemble_paths(&set, &rw()).unwrap();
        arr.add_spare(spare(&dir, "new.img", 2), false).unwrap();
        let old = arr
            .members()
            .into_iter()
            .find(|m| m.role == Some(0))
            .unwrap()
            .device;
        arr.start_replace(&old, None).unwrap();
        let rep =
            raidkit_engine::replace::replace(&arr, &RebuildOptions::default(), &mut |_, _| {})
                .unwrap();
        assert_eq!(rep.roles, vec![0], "{level:?}");
        assert!(rep.lost.is_empty(), "{level:?}: {:?}", rep.lost);
        arr.stop().unwrap();
        let mut good = ps.clone();
        good[0] = dir.path().join("new.img");
        let a2 = assemble_paths(&good, &AssembleOptions::default()).unwrap();
        assert!(!a2.is_degraded());
        assert!(read_all(&a2) == model, "{level:?}");
        assert!(sync::run(&a2, SyncMode::Check, true, &mut |_, _| {})
            .unwrap()
            .mismatches
            .is_empty());
    }
}

/// Stopped part-way, the replacement's superblock records REPLACEMENT + recovery_offset;
/// re-assembled, it is a replacement again (the array is complete without it) and the
/// copy resumes from the checkpoint.
#[test]
fn replace_stopped_midway_resumes() {
    use raidkit_engine::array::ArrayEvent;
    use raidkit_engine::rebuild::RebuildOptions;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = TempDir::new("rk-replace").unwrap();
    let (ps, mut model) = make(&dir, Level::Raid6, "left-symmetric", 4, "1.2", 4);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.add_spare(spare(&dir, "new.img", 4), false).unwrap();
    let old = arr
        .members()
        .into_iter()
        .find(|m| m.role == Some(2))
        .unwrap()
        .device;
    arr.start_replace(&old, None).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let opts = RebuildOptions {
        stop: Some(stop.clone()),
        checkpoint_every: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    let mut seen = 0;
    let rep = raidkit_engine::replace::replace(&arr, &opts, &mut |d, t| {
        seen = d;
        if d * 3 >= t {
            st.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert!(rep.roles.is_empty(), "stopped");
    // A write above and below the checkpoint while stopped.
    let w = data(5, 3 * 65536);
    arr.write(0, &w).unwrap();
    model[..w.len()].copy_from_slice(&w);
    arr.stop().unwrap();
    let newp = dir.path().join("new.img");
    let ns = sb_of(&newp);
    use raidkit_format::v1::feature;
    assert_eq!(
        ns.feature_map & (feature::REPLACEMENT | feature::RECOVERY_OFFSET),
        feature::REPLACEMENT | feature::RECOVERY_OFFSET
    );
    assert_eq!(ns.recovery_offset, seen);
    assert_eq!(ns.dev_roles[ns.dev_number as usize], 2);
    assert_eq!(
        sb_of(&ps[0]).dev_roles[ns.dev_number as usize],
        2,
        "two devices in role 2"
    );
    let mut all = ps.clone();
    all.push(newp.clone());
    let a2 = assemble_paths(&all, &rw()).unwrap();
    assert!(!a2.is_degraded());
    assert_eq!(a2.replacement_roles(), vec![2]);
    assert!(read_all(&a2) == model);
    let ev = a2.subscribe();
    let rep =
        raidkit_engine::replace::replace(&a2, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(rep.roles, vec![2]);
    let from = ev.try_iter().find_map(|e| match e {
        ArrayEvent::ReplaceStarted { from, .. } => Some(from),
        _ => None,
    });
    assert_eq!(from, Some(seen));
    a2.stop().unwrap();
    let mut set = ps.clone();
    set[2] = newp;
    let a3 = assemble_paths(&set, &AssembleOptions::default()).unwrap();
    assert!(!a3.is_degraded());
    assert!(read_all(&a3) == model);
    assert!(sync::run(&a3, SyncMode::Check, true, &mut |_, _| {})
        .unwrap()
        .mismatches
        .is_empty());
}
