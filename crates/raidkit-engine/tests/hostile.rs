//! Hostile metadata at assembly (issue 14, items 4 and 5): crossed fields between members,
//! counters at their limits, a damaged bitmap. Nothing a member's metadata says is used
//! before it is checked; a bad bitmap is a note, never an error.

use raidkit_engine::array::AssemblyNote;
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::grow::BitmapMode;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_format::v1::SuperblockV1;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::superblock::{patch_v1, read_v1};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// A RAID1 of `n` 16 MiB member files (1.2 metadata).
fn raid1(dir: &TempDir, n: usize, bitmap: bool) -> Vec<PathBuf> {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(16 << 20);
    o.name = "t".into();
    o.bitmap = bitmap;
    // 1 MiB per bit: a bitmap-guided resync visits 1 MiB per dirty bit, not everything.
    o.bitmap_chunk_bytes = bitmap.then_some(1 << 20);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    ps
}

/// Rewrite the 1.2 superblock of `p` through `f`, checksum fixed.
fn patch(p: &Path, f: impl FnOnce(&mut SuperblockV1)) {
    patch_v1(p, f);
}

fn events(p: &Path) -> u64 {
    read_v1(p).events
}

#[test]
fn event_counts_at_their_maximum_neither_overflow_nor_look_stale() {
    let t = TempDir::new("rk-hostile").unwrap();
    let ps = raid1(&t, 3, false);
    patch(&ps[0], |sb| sb.events = u64::MAX);
    patch(&ps[1], |sb| sb.events = u64::MAX);
    // One event behind the newest is not stale (md's rule).
    patch(&ps[2], |sb| sb.events = u64::MAX - 1);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert!(arr.missing_roles().is_empty());
    // Superblock writes keep the counter at its maximum (md never lets it wrap).
    arr.write(0, &[0x5a; 4096]).unwrap();
    arr.stop().unwrap();
    for p in &ps {
        assert_eq!(events(p), u64::MAX);
    }
    let mut buf = vec![0u8; 4096];
    let arr = assemble_paths(&ps, &AssembleOptions::default()).unwrap();
    arr.read(0, &mut buf).unwrap();
    assert_eq!(buf, vec![0x5a; 4096]);
    drop(arr);
    // Far behind is stale, and refused as such.
    patch(&ps[2], |sb| sb.events = 7);
    let e = assemble_paths(&ps, &rw()).unwrap_err().to_string();
    assert!(e.contains("(events 7): out of date"), "{e}");
}

#[test]
fn a_member_whose_data_area_is_smaller_than_the_array_uses_is_refused() {
    let t = TempDir::new("rk-hostile").unwrap();
    let ps = raid1(&t, 2, false);
    // Self-consistent on its own (size <= data_size), but smaller than its peer says.
    patch(&ps[1], |sb| {
        sb.size -= 2048;
        sb.data_size -= 2048;
    });
    let e = assemble_paths(&ps, &AssembleOptions::default())
        .unwrap_err()
        .to_string();
    let want = format!(
        "{}: its data area holds 28672 sectors but the array's members hold 30720 (size in {}'s superblock)",
        ps[1].display(),
        ps[0].display()
    );
    assert!(e.contains(&want), "{e}");
}

#[test]
fn a_damaged_bitmap_is_ignored_and_a_dirty_array_resyncs_in_full() {
    let t = TempDir::new("rk-hostile").unwrap();
    let ps = raid1(&t, 2, true);
    // A write, then no clean stop: the superblocks say dirty.
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.write(1 << 20, &[0xa5; 8192]).unwrap();
    std::mem::forget(arr);
    // sync_size of m0's bitmap (1.2: bitmap at sector 16, sync_size at byte 40).
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ps[0])
        .unwrap()
        .write_all_at(&[0xc7], 16 * 512 + 46)
        .unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert!(!arr.has_bitmap());
    let notes = arr.assembly_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let AssemblyNote::BitmapIgnored {
        device,
        why,
        full_resync,
    } = &notes[0]
    else {
        panic!("{notes:?}");
    };
    assert_eq!(device, &ps[0].display().to_string());
    assert!(why.starts_with("bitmap sync_size 5601352036"), "{why}");
    assert!(why.contains("needs 3418793967874 bytes on disk"), "{why}");
    assert!(full_resync);
    assert!(arr.needs_resync());
    // Without the bitmap the resync covers everything, not only what it marked.
    let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
    assert_eq!(rep.sectors_done, arr.size_bytes() / 512, "{rep:?}");
    arr.write(2 << 20, &[0x3c; 4096]).unwrap();
    // The remedy: remove the bitmap the superblocks still record, then add one.
    arr.set_bitmap(BitmapMode::None).unwrap();
    arr.set_bitmap(BitmapMode::Internal { chunk_bytes: None })
        .unwrap();
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert!(arr.has_bitmap());
    assert!(arr.assembly_notes().is_empty());
    let mut buf = vec![0u8; 4096];
    arr.read(2 << 20, &mut buf).unwrap();
    assert_eq!(buf, vec![0x3c; 4096]);
}

#[test]
fn a_bitmap_of_another_array_is_ignored_not_fatal() {
    let t = TempDir::new("rk-hostile").unwrap();
    let ps = raid1(&t, 2, true);
    // The bitmap's UUID (byte 8 of its superblock) changed on every member: flipped, so
    // it differs whatever the array's UUID (a fixed 0xee matched it 1 time in 256).
    for p in &ps {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, 16 * 512 + 8).unwrap();
        f.write_all_at(&[!b[0]], 16 * 512 + 8).unwrap();
    }
    let arr = assemble_paths(&ps, &AssembleOptions::default()).unwrap();
    assert!(!arr.has_bitmap());
    let AssemblyNote::BitmapIgnored {
        why, full_resync, ..
    } = &arr.assembly_notes()[0]
    else {
        panic!("{:?}", arr.assembly_notes());
    };
    assert_eq!(why, "it belongs to another array (its UUID differs)");
    assert!(!full_resync);
}
