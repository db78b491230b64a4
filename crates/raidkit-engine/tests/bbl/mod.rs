//! What the bad-block tests share: a RAID5 with a tagged pattern, its members' superblocks
//! and logs, a rebuild onto a spare, and the bad-block events.
#![allow(dead_code)] // each test crate uses its own part

use raidkit_engine::array::ArrayEvent;
use raidkit_engine::assemble::AssembleOptions;
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions, RebuildReport};
use raidkit_engine::Array;
use raidkit_format::badblocks;
use raidkit_format::v1::SuperblockV1;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// A 3-member 1.2 RAID5 (16 KiB chunks) of `mib` MiB members holding a tagged pattern.
pub fn make_raid5(dir: &TempDir, mib: u64, bbl: bool) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir.path(), 3);
    let mut o = create_options(Level::Raid5, &ps);
    o.chunk_bytes = Some(16 * 1024);
    o.create_size = Some(mib << 20);
    o.name = "t".into();
    o.bbl = bbl;
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let mut model = vec![0u8; arr.size_bytes() as usize];
    fill_tagged(7, 0, &mut model);
    arr.write(0, &model).unwrap();
    arr.stop().unwrap();
    (ps, model)
}

/// The 1.2 superblock of a member and its decoded bad-block log (None: no log).
pub fn sb_and_log(p: &Path) -> (SuperblockV1, Option<Vec<(u64, u64)>>) {
    let f = std::fs::File::open(p).unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 8 * 512).unwrap();
    let sb = SuperblockV1::parse(&b).unwrap();
    if sb.bblog_size == 0 || sb.bblog_offset == 0 {
        return (sb, None);
    }
    let at = (sb.super_offset as i64 + i64::from(sb.bblog_offset)) as u64;
    let mut log = vec![0u8; usize::from(sb.bblog_size) * 512];
    f.read_exact_at(&mut log, at * 512).unwrap();
    let list = badblocks::parse(&log, sb.bblog_shift)
        .unwrap()
        .into_iter()
        .map(|r| (r.start, r.len))
        .collect();
    (sb, Some(list))
}

pub fn drain(rx: &std::sync::mpsc::Receiver<ArrayEvent>) -> Vec<ArrayEvent> {
    rx.try_iter().collect()
}

pub fn spare(dir: &TempDir, name: &str, mib: u64) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    p
}

/// Add a blank 2 MiB spare `s.img` in `dir` to `arr` and rebuild onto it: the spare's
/// path and the rebuild's report.
pub fn rebuild_onto_spare(arr: &Array, dir: &TempDir) -> (PathBuf, RebuildReport) {
    let sp = spare(dir, "s.img", 2);
    arr.add_spare(
        std::sync::Arc::new(raidkit_engine::FileDev::open(&sp, true).unwrap()),
        false,
    )
    .unwrap();
    let rep = rebuild(arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    (sp, rep)
}

/// (role, sector, sectors) of each bad-block event: those recorded, or those cleared.
pub fn bad_block_events(ev: &[ArrayEvent], want_recorded: bool) -> Vec<(usize, u64, u64)> {
    ev.iter()
        .filter_map(|e| match (e, want_recorded) {
            (
                ArrayEvent::BadBlockRecorded {
                    role,
                    sector,
                    sectors,
                    ..
                },
                true,
            )
            | (
                ArrayEvent::BadBlockCleared {
                    role,
                    sector,
                    sectors,
                    ..
                },
                false,
            ) => Some((*role, *sector, *sectors)),
            _ => None,
        })
        .collect()
}

pub fn cleared(ev: &[ArrayEvent]) -> Vec<(usize, u64, u64)> {
    bad_block_events(ev, false)
}

pub fn recorded(ev: &[ArrayEvent]) -> Vec<(usize, u64, u64)> {
    bad_block_events(ev, true)
}
