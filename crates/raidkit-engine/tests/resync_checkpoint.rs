//! A resync checkpoint found on the members (md stopped cleanly half-way through a resync:
//! `resync_offset` = X, everything below X in sync) must never be written back while the
//! array is being written: writes below X may be torn by a crash, and md resyncs only
//! from the recorded offset on (with a bitmap too: md keeps no dirty bit below it). While
//! dirty the superblocks say 0, as md's do; after a clean stop they say X again. On 0.90
//! metadata the checkpoint counts only if `cp_events` equals `events`.

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::sb::{probe, write_super, Metadata};
use raidkit_engine::FileDev;
use raidkit_format::MAX_SECTOR;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;

mod cases;
use cases::rw;

/// Sectors of the checkpoint md left.
const X: u64 = 2048;

fn resync_offsets(ps: &[PathBuf]) -> Vec<u64> {
    ps.iter()
        .map(|p| {
            let d = FileDev::open(p, false).unwrap();
            probe(&d).unwrap().found[0].0.resync_offset()
        })
        .collect()
}

/// A clean RAID5 whose superblocks say a resync stopped at `X`, as md leaves it.
fn half_resynced(dir: &TempDir, meta: &str, bitmap: bool) -> Vec<PathBuf> {
    let ps = member_files(dir.path(), 3);
    let mut o = create_options(Level::Raid5, &ps);
    o.chunk_bytes = Some(64 * 1024);
    o.create_size = Some(4 << 20);
    o.metadata = Metadata::parse(meta).unwrap();
    o.bitmap = bitmap;
    o.bitmap_chunk_bytes = bitmap.then_some(64 * 1024);
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    for p in &ps {
        let d = FileDev::open(p, true).unwrap();
        let mut sb = probe(&d).unwrap().found.remove(0).0;
        sb.set_resync_offset(X);
        write_super(&d, &sb).unwrap();
    }
    assert_eq!(resync_offsets(&ps), vec![X; 3], "{meta}");
    ps
}

#[test]
fn dirty_superblocks_say_zero_not_the_checkpoint() {
    for (meta, bitmap) in [
        ("1.2", false),
        ("1.2", true),
        ("0.90", false),
        ("1.0", true),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = half_resynced(&dir, meta, bitmap);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(arr.needs_resync());
        // A write below the checkpoint, then a crash (no clean stop).
        arr.write(0, &[0x77; 4096]).unwrap();
        drop(arr);
        assert_eq!(
            resync_offsets(&ps),
            vec![0; 3],
            "{meta} bitmap={bitmap}: a crash now must resync from the start"
        );
    }
}

#[test]
fn a_clean_stop_keeps_the_checkpoint() {
    for meta in ["1.2", "0.90"] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = half_resynced(&dir, meta, false);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        arr.write(0, &[0x77; 4096]).unwrap();
        arr.stop().unwrap();
        assert_eq!(resync_offsets(&ps), vec![X; 3], "{meta}");
        // A resync to the end then leaves the array clean.
        let arr = assemble_paths(&ps, &rw()).unwrap();
        raidkit_engine::sync::run(
            &arr,
            raidkit_engine::sync::SyncMode::Resync,
            false,
            &mut |_, _| {},
        )
        .unwrap();
        arr.stop().unwrap();
        assert_eq!(resync_offsets(&ps), vec![MAX_SECTOR; 3], "{meta}");
    }
}
