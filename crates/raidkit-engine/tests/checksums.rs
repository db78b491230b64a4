//! The checksum sidecar at engine level: every write (aligned or not, concurrent) keeps the
//! checksums equal to the data; an unclean stop makes exactly the regions being written
//! suspect; the sidecar follows the event count and goes stale without it.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::checksums::{Checksums, Judgement, BLOCK, REGION_BLOCKS};
use raidkit_engine::create::create;
use raidkit_engine::{Array, EngineError};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;
use std::sync::Arc;

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

fn make(dir: &TempDir, level: Level, n: usize, mib: u64) -> (Vec<PathBuf>, Array) {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 * 1024);
    }
    o.create_size = Some(mib << 20);
    o.name = "t".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    (ps, arr)
}

/// Every block of the array judged against the sidecar.
fn judge_all(arr: &Array, cs: &Checksums) -> Vec<(u64, Judgement)> {
    let size = arr.size_bytes();
    let mut out = Vec::new();
    let mut b = vec![0u8; BLOCK as usize];
    let mut off = 0;
    while off < size {
        let n = BLOCK.min(size - off) as usize;
        arr.read(off, &mut b[..n]).unwrap();
        let j = cs.judge(off / BLOCK, &b[..n]).unwrap();
        if j != Judgement::Match {
            out.push((off / BLOCK, j));
        }
        off += BLOCK;
    }
    out
}

#[test]
fn every_write_keeps_checksums_equal_to_the_data() {
    let dir = TempDir::new("rk-cs").unwrap();
    let (ps, arr) = make(&dir, Level::Raid5, 3, 6);
    let path = dir.path().join("s.csum");
    let cs = Arc::new(Checksums::init(&path, &arr, &mut |_, _| {}).unwrap());
    arr.attach_checksums(cs.clone()).unwrap();
    let arr = Arc::new(arr);
    let size = arr.size_bytes();
    // Two threads write odd-sized pieces that share 4 KiB blocks (sub-block writes are read
    // back; the last writer of a block records what is on disk).
    // Half of the writes land in the first 48 KiB, so writes sharing a block overlap in
    // time often (the checksum of the one that reached the array last must win).
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let arr = arr.clone();
            sc.spawn(move || {
                for i in 0..400u64 {
                    let w = pattern_word(t, i);
                    let len = 1 + w % 9000;
                    let span = if i % 2 == 0 { size - len } else { 48 << 10 };
                    let off = (pattern_word(t + 10, i) % span) / 512 * 512 + t * 512;
                    let off = off.min(size - len);
                    let data: Vec<u8> = (0..len).map(|k| pattern_word(w, k) as u8).collect();
                    arr.write(off, &data).unwrap();
                }
            });
        }
    });
    assert_eq!(judge_all(&arr, &cs), vec![]);
    let arr = Arc::into_inner(arr).unwrap();
    arr.stop().unwrap();
    // Reopened after a clean stop: usable, nothing suspect, still equal.
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let cs = Checksums::open(&path, &arr).unwrap();
    assert_eq!(cs.info().suspect, vec![]);
    assert_eq!(judge_all(&arr, &cs), vec![]);
}

#[test]
fn unclean_stop_makes_exactly_the_written_regions_suspect() {
    let dir = TempDir::new("rk-cs").unwrap();
    // 150 MiB members: three 64 MiB regions (the last one short).
    let (ps, arr) = make(&dir, Level::Raid1, 2, 150);
    let path = dir.path().join("m.csum");
    let cs = Arc::new(Checksums::init(&path, &arr, &mut |_, _| {}).unwrap());
    arr.attach_checksums(cs).unwrap();
    arr.stop().unwrap();

    let arr = assemble_paths(&ps, &rw()).unwrap();
    let cs = Arc::new(Checksums::open(&path, &arr).unwrap());
    arr.attach_checksums(cs).unwrap();
    let region = REGION_BLOCKS * BLOCK;
    arr.write(region + 12345, &[7u8; 5000]).unwrap();
    // "Crash": drop the array without marking it clean.
    drop(arr);

    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert!(arr.needs_resync());
    let cs = Checksums::open(&path, &arr).unwrap();
    assert_eq!(cs.info().suspect, vec![(region, region)]);
    let mut b = vec![0u8; BLOCK as usize];
    arr.read(region + 8192, &mut b).unwrap();
    assert_eq!(
        cs.judge((region + 8192) / BLOCK, &b).unwrap(),
        Judgement::Unknown
    );
    // Outside the region the checksums are trusted.
    arr.read(0, &mut b).unwrap();
    assert_eq!(cs.judge(0, &b).unwrap(), Judgement::Match);
    b[0] ^= 1;
    assert_eq!(cs.judge(0, &b).unwrap(), Judgement::Mismatch);
    // The suspect mark is persistent: it survives further clean runs.
    let cs = Arc::new(cs);
    arr.attach_checksums(cs).unwrap();
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let cs = Checksums::open(&path, &arr).unwrap();
    assert_eq!(cs.info().suspect, vec![(region, region)]);
    // Recomputing clears it.
    drop(cs);
    let cs = Checksums::init(&path, &arr, &mut |_, _| {}).unwrap();
    assert_eq!(cs.info().suspect, vec![]);
}

#[test]
fn running_without_the_sidecar_makes_it_stale() {
    let dir = TempDir::new("rk-cs").unwrap();
    let (ps, arr) = make(&dir, Level::Raid1, 2, 4);
    let path = dir.path().join("m.csum");
    Checksums::init(&path, &arr, &mut |_, _| {}).unwrap();
    let ev = arr.events();
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.write(0, &[1u8; 4096]).unwrap();
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    match Checksums::open(&path, &arr) {
        Err(EngineError::Sidecar {
            stale: true, why, ..
        }) => assert!(
            why.starts_with(&format!(
                "stale: it matches array event count {ev} but the members are at {}",
                arr.events()
            )),
            "{why}"
        ),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a stale sidecar was accepted"),
    }
}

/// The sidecar's own reads of the array (computing it, and reading back blocks a write
/// covered only in part) are not client IO: the array's statistics count the client's
/// requests alone.
#[test]
fn checksum_reads_are_not_client_io() {
    let dir = TempDir::new("rk-cs").unwrap();
    let (_ps, arr) = make(&dir, Level::Raid5, 3, 2);
    let before = arr.io.snapshot();
    let path = dir.path().join("s.csum");
    let cs = Arc::new(Checksums::init(&path, &arr, &mut |_, _| {}).unwrap());
    arr.attach_checksums(cs.clone()).unwrap();
    // Sub-block writes at both ends: both partial blocks are read back.
    arr.write(1536, &vec![7u8; 8192]).unwrap();
    let after = arr.io.snapshot();
    assert_eq!(after.read.count, before.read.count, "{after:?}");
    assert_eq!(after.read.bytes, before.read.bytes);
    assert_eq!(after.write.count, before.write.count + 1);
    assert_eq!(after.write.bytes, before.write.bytes + 8192);
    assert_eq!(judge_all(&arr, &cs), vec![]);
}
