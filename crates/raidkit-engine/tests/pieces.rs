//! Parity check and rebuild over members in memory (tmpfs) take the piecewise paths
//! (`jobs::pieces`): a check still finds exactly every planted mismatch — a single bit
//! flipped in a data block, P or Q, at the first and last byte of a piece and of a chunk —
//! and a rebuild writes the lost member byte for byte, RAID5 and RAID6, with chunks
//! larger and smaller than a piece.

use raidkit_engine::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::jobs::pieces::piece_bytes_read;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{AssembleOptions, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, data_offset_bytes, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const PAGE: u64 = 4096;

/// The tests tell which path a pass took by a process-wide count of bytes read in
/// pieces: one test at a time, so that one's reads do not count for the other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An array of `n` members with `chunk` byte chunks on tmpfs, filled with a pattern and
/// stopped: its member files and their data offset.
fn make(dir: &Path, level: Level, n: usize, chunk: u64) -> (Vec<PathBuf>, u64) {
    make_sized(dir, level, n, chunk, 20 << 20)
}

/// [`make`] with members of `bytes` bytes.
fn make_sized(dir: &Path, level: Level, n: usize, chunk: u64, bytes: u64) -> (Vec<PathBuf>, u64) {
    let ps = member_files(dir, n);
    let mut o = create_options(level, &ps);
    o.create_size = Some(bytes);
    o.chunk_bytes = Some(chunk);
    o.assume_clean = true;
    o.name = "pc".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes();
    let model: Vec<u8> = (0..size)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect();
    arr.write(0, &model).expect("fill");
    arr.stop().expect("stop");
    let doff = data_offset_bytes(&ps[0]);
    (ps, doff)
}

fn check(ps: &[PathBuf]) -> sync::SyncReport {
    let arr = assemble_paths(ps, &AssembleOptions::default()).expect("assemble");
    let before = piece_bytes_read();
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).expect("check");
    assert!(
        piece_bytes_read() > before,
        "the check did not read in pieces"
    );
    rep
}

fn flip(p: &Path, at: u64, bit: u8) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .expect("open");
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= bit;
    f.write_all_at(&b, at).expect("write");
}

fn planted(level: Level, n: usize, chunk: u64, tag: &str) {
    let Some(dir) = TempDir::in_memory("rk-pc") else {
        return;
    };
    let (ps, doff) = make(dir.path(), level, n, chunk);
    let data_blocks = (n - if level == Level::Raid6 { 2 } else { 1 }) as u64;
    let clean = check(&ps);
    assert_eq!(clean.mismatches, vec![], "{tag}: clean array");
    // (stripe, byte in the chunk, member): every member role over the stripes (data, P,
    // Q), the first and last byte of a chunk, both sides of 64 KiB boundaries (pieces of
    // 64 KiB and more), a bit of every position in the byte.
    let mut plant: Vec<(u64, u64, usize)> = Vec::new();
    let cands = [
        0,
        chunk - 1,
        (64 << 10) % chunk,
        ((64 << 10) - 1) % chunk,
        chunk / 2 + 17,
    ];
    for (k, &at) in cands.iter().enumerate() {
        for m in 0..n {
            let s = (k * n + m) as u64;
            plant.push((s, at, m));
        }
    }
    for (k, &(s, at, m)) in plant.iter().enumerate() {
        flip(&ps[m], doff + s * chunk + at, 1 << (k % 8));
    }
    let rep = check(&ps);
    let want: Vec<(u64, u64)> = plant
        .iter()
        .map(|&(s, at, _)| {
            let page = at / PAGE * PAGE;
            ((s * data_blocks) * chunk + page, PAGE)
        })
        .collect();
    // A row's mismatch is reported as every data block's page of it.
    let got: Vec<(u64, u64)> = rep.verdicts.iter().map(|v| (v.offset, v.len)).collect();
    assert_eq!(got, want, "{tag}: verdicts {:?}", rep.verdicts);
    let pages: u64 = rep.mismatches.iter().map(|&(_, l)| l / PAGE).sum();
    assert_eq!(
        pages,
        plant.len() as u64 * data_blocks,
        "{tag}: mismatched pages"
    );
    if level == Level::Raid6 {
        let roles: Vec<Option<usize>> = rep.verdicts.iter().map(|v| v.role).collect();
        let want: Vec<Option<usize>> = plant.iter().map(|&(.., m)| Some(m)).collect();
        assert_eq!(roles, want, "{tag}: the member found wrong");
    }
}

#[test]
fn a_check_in_pieces_finds_every_planted_bit() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    planted(Level::Raid5, 4, 512 << 10, "r5");
    planted(Level::Raid6, 6, 512 << 10, "r6");
    planted(Level::Raid5, 3, 16 << 10, "r5s");
    planted(Level::Raid6, 5, 32 << 10, "r6s");
    planted(Level::Raid4, 4, 64 << 10, "r4");
}

fn rebuilt(level: Level, n: usize, chunk: u64, lost: usize, tag: &str) {
    let Some(dir) = TempDir::in_memory("rk-pc") else {
        return;
    };
    let (ps, doff) = make(dir.path(), level, n, chunk);
    let orig = std::fs::read(&ps[lost]).expect("read");
    let rw = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let others: Vec<PathBuf> = (0..n)
        .filter(|&m| m != lost)
        .map(|m| ps[m].clone())
        .collect();
    let arr = assemble_paths(&others, &rw).expect("assemble degraded");
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .and_then(|f| f.set_len(orig.len() as u64))
        .expect("spare");
    arr.add_spare(Arc::new(FileDev::open(&spare, true).expect("open")), false)
        .expect("add");
    let before = piece_bytes_read();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    assert_eq!(
        (rep.roles.clone(), rep.lost.clone()),
        (vec![lost], vec![]),
        "{tag}"
    );
    assert!(piece_bytes_read() > before, "{tag}: not rebuilt in pieces");
    arr.stop().expect("stop");
    let got = std::fs::read(&spare).expect("read spare");
    let end = orig.len() - (doff as usize) % 4096;
    let from = doff as usize;
    assert!(
        got[from..end] == orig[from..end],
        "{tag}: rebuilt data area differs at byte {:?}",
        (from..end).find(|&i| got[i] != orig[i])
    );
}

#[test]
fn a_rebuild_in_pieces_writes_the_lost_member_byte_for_byte() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    rebuilt(Level::Raid5, 4, 512 << 10, 1, "b5");
    rebuilt(Level::Raid5, 3, 16 << 10, 2, "b5s");
    // RAID6: a member holding data, P and Q in turn (rotating), with chunks larger and
    // smaller than a piece.
    rebuilt(Level::Raid6, 6, 512 << 10, 5, "b6");
    rebuilt(Level::Raid6, 5, 32 << 10, 0, "b6s");
    // RAID4: the parity member, and a data member.
    rebuilt(Level::Raid4, 4, 64 << 10, 3, "b4p");
    rebuilt(Level::Raid4, 4, 64 << 10, 0, "b4d");
}

/// Member bytes read so far by every member of `arr`.
fn member_bytes_read(arr: &raidkit_engine::Array) -> u64 {
    arr.member_stats().iter().map(|m| m.read_bytes).sum()
}

/// Garbage over every member's data area (a pseudo-random stream per member): no stripe
/// is consistent, as on members that held something else before the array was created.
fn scramble(ps: &[PathBuf], doff: u64, bytes: u64) {
    for (m, p) in ps.iter().enumerate() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (m as u64 + 1);
        let junk: Vec<u8> = (0..bytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .expect("open");
        f.write_all_at(&junk, doff).expect("scramble");
    }
}

/// A resync of an array whose stripes are all inconsistent (never synced) reads each
/// member byte about once (the first piece of a few runs more), fixes every stripe, and
/// a check then finds nothing; before it, a check reports every page.
fn resync_once(level: Level, n: usize, chunk: u64, tag: &str) {
    let Some(dir) = TempDir::in_memory("rk-pc") else {
        return;
    };
    let (ps, doff) = make(dir.path(), level, n, chunk);
    let rw = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = assemble_paths(&ps, &rw).expect("assemble");
    let geo = arr.geometry().clone();
    arr.stop().expect("stop");
    let area = geo.stripes() * chunk;
    scramble(&ps, doff, area);
    let data_blocks = (n - if level == Level::Raid6 { 2 } else { 1 }) as u64;
    let rep = check(&ps);
    let pages: u64 = rep.mismatches.iter().map(|&(_, l)| l / PAGE).sum();
    assert_eq!(
        pages,
        geo.stripes() * data_blocks * (chunk / PAGE),
        "{tag}: a check of the scrambled array"
    );
    let arr = assemble_paths(&ps, &rw).expect("assemble");
    let before = member_bytes_read(&arr);
    sync::run(&arr, SyncMode::Resync, true, &mut |_, _| {}).expect("resync");
    let read = member_bytes_read(&arr) - before;
    arr.stop().expect("stop");
    let once = area * n as u64;
    assert!(
        read >= once && read < once + once / 10,
        "{tag}: the resync read {read} member bytes, {:.3}× the members' {once}",
        read as f64 / once as f64
    );
    let clean = check(&ps);
    assert_eq!(clean.mismatches, vec![], "{tag}: after the resync");
}

#[test]
fn a_resync_of_a_never_synced_array_reads_each_member_byte_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Chunks larger than a piece (a stripe in several pieces) and smaller (a piece of
    // several stripes).
    resync_once(Level::Raid5, 4, 512 << 10, "s5");
    resync_once(Level::Raid5, 3, 16 << 10, "s5s");
    resync_once(Level::Raid6, 6, 512 << 10, "s6");
    resync_once(Level::Raid6, 5, 32 << 10, "s6s");
}

/// A resync of an array whose first half was never synced reads each member byte about
/// once, and verifies the consistent second half in pieces again (the run path's hint does
/// not outlive the stretch that did not verify).
#[test]
fn after_a_stretch_that_does_not_verify_the_pieces_come_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dir) = TempDir::in_memory("rk-pc") else {
        return;
    };
    let (n, chunk) = (4usize, 64u64 << 10);
    let (ps, doff) = make_sized(dir.path(), Level::Raid5, n, chunk, 64 << 20);
    let rw = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = assemble_paths(&ps, &rw).expect("assemble");
    let area = arr.geometry().stripes() * chunk;
    arr.stop().expect("stop");
    scramble(&ps, doff, area / 2);
    let arr = assemble_paths(&ps, &rw).expect("assemble");
    let (before, pieces_before) = (member_bytes_read(&arr), piece_bytes_read());
    sync::run(&arr, SyncMode::Resync, true, &mut |_, _| {}).expect("resync");
    let read = member_bytes_read(&arr) - before;
    let in_pieces = piece_bytes_read() - pieces_before;
    arr.stop().expect("stop");
    let once = area * n as u64;
    assert!(
        read >= once && read < once + once / 10,
        "the resync read {read} member bytes, {:.3}× the members' {once}",
        read as f64 / once as f64
    );
    // (The runs that start while a run of the stretch is still in flight take the run
    // path still: a few per worker, of this array's 60 or so.)
    assert!(
        in_pieces >= once / 4,
        "{in_pieces} of {once} member bytes read in pieces: the consistent half was not"
    );
    let clean = check(&ps);
    assert_eq!(clean.mismatches, vec![], "after the resync");
}
