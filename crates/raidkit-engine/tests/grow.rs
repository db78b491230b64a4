//! Adding and removing the write-intent bitmap of an array (live), and hot replacement.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::grow::BitmapMode;
use raidkit_engine::sb::{probe, Metadata};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern_word(seed, i as u64) as u8).collect()
}

fn make(
    dir: &TempDir,
    level: Level,
    layout: &str,
    n: usize,
    meta: &str,
    mib: u64,
) -> (Vec<PathBuf>, Vec<u8>) {
    let ps: Vec<PathBuf> = (0..n)
        .map(|i| dir.path().join(format!("m{i}.img")))
        .collect();
    let mut o = CreateOptions::new(level, ps.iter().cloned().map(MemberSpec::Path).collect());
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

fn bitmap_sector(p: &PathBuf) -> Option<u64> {
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
        assert_eq!(ch.dirty, Some(0), "{level:?} {meta}: clean array, no dirty bits");
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
        assert_eq!(rep.sectors_done, 2 * 256, "{level:?} {meta}: resync of dirty chunks only");
        assert!(read_all(&arr) == model, "{level:?} {meta}");
        // Remove it live, write, crash: a full resync.
        let ch = arr.set_bitmap(BitmapMode::None).unwrap();
        assert!(!ch.bitmap && !arr.has_bitmap());
        assert_eq!(bitmap_sector(&ps[0]), None, "{level:?} {meta}: feature cleared");
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
        assert_eq!(arr.bitmap_chunk_sectors(), Some((64 << 20) / 512), "mdadm's default chunk");
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
