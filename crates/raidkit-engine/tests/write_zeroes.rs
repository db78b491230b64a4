//! Zeroing a range of the array (WRITE_ZEROES and TRIM through `Array::write_zeroes`): on
//! every level, whole and degraded, a range starting and ending inside stripes reads as
//! zeros afterwards with every other byte unchanged, parity and mirrors check clean, and
//! the member files gave the storage back (holes punched) instead of storing zeros.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions};
use raidkit_engine::Array;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

const CHUNK: u64 = 64 << 10;

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// `level` over `n` 4 MiB members (64 KiB chunk), filled with a pattern; the model.
fn make(
    dir: &TempDir,
    level: Level,
    n: usize,
    o: impl FnOnce(&mut CreateOptions),
) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir.path(), n);
    let mut co = create_options(level, &ps);
    if level != Level::Raid1 {
        co.chunk_bytes = Some(CHUNK);
    }
    co.create_size = Some(4 << 20);
    co.assume_clean = true;
    o(&mut co);
    let arr = create(&co, &mut |_, _| {}).unwrap();
    let mut model = vec![0u8; arr.size_bytes() as usize];
    fill_tagged(7, 0, &mut model);
    arr.write(0, &model).unwrap();
    arr.stop().unwrap();
    (ps, model)
}

fn allocated(ps: &[PathBuf]) -> Vec<u64> {
    ps.iter()
        .map(|p| std::fs::metadata(p).unwrap().blocks() * 512)
        .collect()
}

fn read_all(arr: &Array) -> Vec<u8> {
    let mut got = vec![0u8; arr.size_bytes() as usize];
    arr.read(0, &mut got).unwrap();
    got
}

/// Zero a range that starts and ends inside stripes (and sectors) and covers at least
/// one whole stripe; check bytes, redundancy and punched storage. `gone`: a member left
/// out (degraded).
fn case(level: Level, n: usize, gone: Option<usize>) {
    let dir = TempDir::new("rk-zeroes").unwrap();
    let (ps, mut model) = make(&dir, level, n, |_| {});
    let size = model.len() as u64;
    let start = 3 * CHUNK / 2 + 1234;
    let len = (size / 2).min(6 * CHUNK * n as u64) + 777;
    let used: Vec<PathBuf> = ps
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != gone)
        .map(|(_, p)| p.clone())
        .collect();
    let before = allocated(&used);
    let arr = assemble_paths(&used, &rw()).unwrap();
    arr.write_zeroes(start, len).unwrap();
    model[start as usize..(start + len) as usize].fill(0);
    let got = read_all(&arr);
    assert!(
        got == model,
        "{level:?} ({gone:?} gone): bytes after zeroing"
    );
    arr.stop().unwrap();
    let after = allocated(&used);
    let freed: u64 = before.iter().zip(&after).map(|(b, a)| b - a.min(b)).sum();
    assert!(
        freed >= len / 2,
        "{level:?} ({gone:?} gone): only {freed} bytes of member storage given back for {len} zeroed ({before:?} -> {after:?})"
    );
    let arr = assemble_paths(&used, &rw()).unwrap();
    assert!(read_all(&arr) == model, "{level:?}: bytes after reassembly");
    if gone.is_none() && level != Level::Raid0 {
        assert_consistent(&arr, &format!("{level:?}: check after zeroing"));
    }
}

#[test]
fn raid0_zeroes_each_members_mapped_range() {
    case(Level::Raid0, 3, None);
}

#[test]
fn raid1_zeroes_every_copy() {
    case(Level::Raid1, 2, None);
    case(Level::Raid1, 3, Some(1));
}

#[test]
fn raid10_zeroes_every_copy() {
    case(Level::Raid10, 4, None);
    case(Level::Raid10, 4, Some(2));
}

#[test]
fn raid4_5_6_punch_whole_stripes_parity_included() {
    for (level, n) in [(Level::Raid4, 3), (Level::Raid5, 4), (Level::Raid6, 5)] {
        case(level, n, None);
        case(level, n, Some(1));
    }
}

/// A mirror with a write-mostly member written behind: the zeroing reaches it through
/// the queue, in order after the writes before it.
#[test]
fn write_behind_member_gets_the_zeroes_in_order() {
    let dir = TempDir::new("rk-zeroes").unwrap();
    let (ps, mut model) = make(&dir, Level::Raid1, 2, |o| {
        o.bitmap = true;
        o.bitmap_chunk_bytes = Some(CHUNK);
        o.write_mostly = vec![1];
        o.write_behind = 16;
    });
    let arr = assemble_paths(&ps, &rw()).unwrap();
    // A write queued behind, then zeros over part of it, then a write inside the zeros.
    arr.write(CHUNK, &[9u8; 2 * CHUNK as usize]).unwrap();
    model[CHUNK as usize..3 * CHUNK as usize].fill(9);
    arr.write_zeroes(CHUNK + 512, CHUNK).unwrap();
    model[(CHUNK + 512) as usize..(2 * CHUNK + 512) as usize].fill(0);
    arr.write(CHUNK + 4096, &[5u8; 4096]).unwrap();
    model[(CHUNK + 4096) as usize..(CHUNK + 8192) as usize].fill(5);
    arr.stop().unwrap();
    // Each member alone holds the model.
    for (keep, p) in ps.iter().enumerate() {
        let one = vec![p.clone()];
        let arr = assemble_paths(&one, &rw()).unwrap();
        assert!(read_all(&arr) == model, "member {keep} alone");
        arr.stop().unwrap();
    }
}
