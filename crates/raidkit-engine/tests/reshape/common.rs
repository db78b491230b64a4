//! Helpers of the reshape tests: arrays made and filled by raidkit, checks of data,
//! redundancy and shape.

#![allow(dead_code)]

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::jobs::reshape::{reshape, ReshapeEnd, ReshapeOptions, ReshapeRequest};
use raidkit_engine::sb::Metadata;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::fill_tagged;
pub use raidkit_testkit::superblock::{patch_v1, read_v1};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// An array made by raidkit and filled with the pattern of `seed`.
pub struct Made {
    pub _dir: TempDir,
    pub members: Vec<PathBuf>,
    pub extra: Vec<PathBuf>,
    pub bytes: u64,
    pub seed: u64,
}

pub fn make(level: Level, layout: &str, n: usize, meta: &str, chunk_k: u64, extra: usize) -> Made {
    let dir = TempDir::new("rk-reshape").unwrap();
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.layout = Some(names::parse_layout(level, layout).unwrap());
    if level != Level::Raid1 {
        o.chunk_bytes = Some(chunk_k * 1024);
    }
    o.metadata = Metadata::parse(meta).unwrap();
    o.create_size = Some(6 << 20);
    o.assume_clean = true;
    o.name = "r".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let seed = n as u64 * 1000 + chunk_k;
    let bytes = arr.size_bytes();
    let mut buf = vec![0u8; bytes as usize];
    fill_tagged(seed, 0, &mut buf);
    arr.write(0, &buf).unwrap();
    arr.stop().unwrap();
    // The array was written whole: make its redundancy right before reshaping.
    let arr = assemble_paths(&ps, &rw()).unwrap();
    sync::run(&arr, SyncMode::Repair, true, &mut |_, _| {}).unwrap();
    arr.stop().unwrap();
    let size = std::fs::metadata(&ps[0]).unwrap().len();
    let extra: Vec<PathBuf> = (0..extra)
        .map(|i| {
            let p = dir.path().join(format!("x{i}.img"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p
        })
        .collect();
    Made {
        _dir: dir,
        members: ps,
        extra,
        bytes,
        seed,
    }
}

pub fn open(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, true).unwrap())
}

/// The pattern up to `bytes` (or the array's end), zeros after.
pub fn check(name: &str, arr: &Array, seed: u64, bytes: u64) {
    let size = arr.size_bytes();
    let mut got = vec![0u8; 1 << 20];
    let mut want = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < size {
        let len = (size - off).min(got.len() as u64) as usize;
        arr.read(off, &mut got[..len]).unwrap();
        want[..len].fill(0);
        if off < bytes {
            let k = ((bytes - off) as usize).min(len);
            fill_tagged(seed, off, &mut want[..k]);
        }
        if got[..len] != want[..len] {
            let bad = (0..len).find(|&i| got[i] != want[i]).unwrap();
            panic!("{name}: array byte {} is wrong", off + bad as u64);
        }
        off += len as u64;
    }
}

pub fn clean_check(name: &str, arr: &Array) {
    let rep = sync::run(arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    assert!(
        rep.mismatches.is_empty(),
        "{name}: mismatches {:?}",
        rep.mismatches
    );
}

pub struct Want {
    pub level: Level,
    pub n: usize,
    pub layout: &'static str,
    pub chunk_k: u64,
}

/// What a reshape must have made (see [`Want`]).
pub fn want(level: Level, n: usize, layout: &'static str, chunk_k: u64) -> Want {
    Want {
        level,
        n,
        layout,
        chunk_k,
    }
}

/// Reshape a made array as `req` asks; check data, redundancy and the new shape.
pub fn run(name: &str, m: &Made, req: ReshapeRequest, want: Want) {
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let (cur, end) = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(end, ReshapeEnd::Finished, "{name}");
    let keep = m.bytes.min(cur.size_bytes());
    check(name, &cur, m.seed, keep);
    clean_check(name, &cur);
    drop(cur);
    drop(arr);
    let mut all = m.members.clone();
    all.extend(m.extra.iter().cloned());
    let arr = assemble_paths(&all, &rw()).unwrap_or_else(|e| panic!("{name}: reassembly: {e}"));
    assert!(arr.reshape_status().is_none(), "{name}");
    let g = arr.geometry();
    assert_eq!(
        (
            g.level,
            g.raid_disks,
            names::layout_name(g.level, g.layout),
            g.chunk_sectors
        ),
        (
            want.level,
            want.n,
            if want.level.has_parity() || want.level == Level::Raid10 {
                want.layout.to_string()
            } else {
                names::layout_name(g.level, g.layout)
            },
            want.chunk_k * 2
        ),
        "{name}: shape"
    );
    check(name, &arr, m.seed, keep);
    clean_check(name, &arr);
    arr.stop().unwrap();
}

pub fn add(m: &Made) -> Vec<Arc<dyn BlockDev>> {
    m.extra.iter().map(|p| open(p)).collect()
}

/// `m` reshaped as `req` asks (moving `buffer_sectors` at a time, if given) and stopped
/// half-way: the members (the spares last) and where it stopped.
pub fn half_way(m: &Made, req: ReshapeRequest, buffer_sectors: Option<u64>) -> (Vec<PathBuf>, u64) {
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let opts = ReshapeOptions {
        buffer_sectors,
        stop_at: Some(m.bytes / 512 / 2),
        ..Default::default()
    };
    let (cur, end) = reshape(&arr, &req, &opts, &mut |_| {}).unwrap();
    let ReshapeEnd::Stopped { position } = end else {
        panic!("not stopped: {end:?}");
    };
    drop(cur);
    drop(arr);
    let mut all = m.members.clone();
    all.extend(m.extra.iter().cloned());
    (all, position)
}
