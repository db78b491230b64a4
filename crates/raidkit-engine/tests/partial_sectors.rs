//! Writes that begin or end inside a 512-byte sector (a FUSE file written with parallel
//! direct writes sends them): writes of disjoint bytes sharing sectors, in flight together
//! from several threads, all land, on every level and through the stripe cache's
//! write-back; the member files alone hold them afterwards.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::Array;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;
use std::sync::Arc;

/// Record sizes: none a multiple of 512, so neighbours share sectors.
const RECORDS: [usize; 4] = [100, 700, 1337, 4097];
const THREADS: usize = 4;

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

fn make(dir: &TempDir, level: Level, n: usize) -> Vec<PathBuf> {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 << 10);
    }
    o.create_size = Some(4 << 20);
    o.name = "partial".into();
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    ps
}

fn byte(seed: u64, at: usize) -> u8 {
    (pattern_word(seed, at as u64 / 8) >> (8 * (at % 8))) as u8
}

/// `THREADS` threads write records of `rec` bytes from `base`, record `i` by thread
/// `i % THREADS`, each record its own bytes of round `seed`.
fn write_records(arr: &Array, model: &mut [u8], base: usize, rec: usize, n: usize, seed: u64) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in (t..n).step_by(THREADS) {
                    let at = base + i * rec;
                    let data: Vec<u8> = (at..at + rec).map(|b| byte(seed, b)).collect();
                    arr.write(at as u64, &data).unwrap();
                }
            });
        }
    });
    for (b, m) in model[base..base + n * rec].iter_mut().enumerate() {
        *m = byte(seed, base + b);
    }
}

fn check(arr: &Array, model: &[u8], what: &str) {
    let mut got = vec![0u8; model.len()];
    arr.read(0, &mut got).unwrap();
    if let Some(d) = got.iter().zip(model).position(|(a, b)| a != b) {
        panic!("{what}: byte {d} is {:#x}, written {:#x}", got[d], model[d]);
    }
}

fn run(level: Level, n: usize) {
    let dir = TempDir::new("rk-partial").unwrap();
    let ps = make(&dir, level, n);
    let arr = Arc::new(assemble_paths(&ps, &rw()).unwrap());
    arr.start_writeback();
    let size = arr.size_bytes() as usize;
    let mut model = vec![0u8; size];
    for round in 0..24 {
        let rec = RECORDS[round % RECORDS.len()];
        let count = 512.min((size - 4096) / rec);
        let base = 1 + (pattern_word(99, round as u64) as usize % (size - count * rec - 1));
        write_records(&arr, &mut model, base, rec, count, round as u64 + 1);
        check(
            &arr,
            &model,
            &format!("{level:?} round {round} ({rec}-byte records)"),
        );
    }
    arr.flush().unwrap();
    drop(arr);
    let again = assemble_paths(&ps, &rw()).unwrap();
    check(&again, &model, &format!("{level:?} reassembled"));
}

#[test]
fn disjoint_writes_sharing_sectors_all_land_raid5() {
    run(Level::Raid5, 4);
}

#[test]
fn disjoint_writes_sharing_sectors_all_land_raid6() {
    run(Level::Raid6, 5);
}

#[test]
fn disjoint_writes_sharing_sectors_all_land_raid1_and_raid0() {
    run(Level::Raid1, 2);
    run(Level::Raid0, 3);
}
