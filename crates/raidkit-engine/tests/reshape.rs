//! Reshapes raidkit starts itself, engine level, on small arrays: every kind md supports
//! (grow, shrink, chunk, layout, level changes), 1.x and 0.90 metadata, data offset moved
//! or a backup file; afterwards the data is intact, the new tail reads zeros, redundancy
//! checks clean and the array assembles with the new shape. Crashes at random moments
//! (writes after the crash never land) are continued to the same result.

use raidkit_engine::assemble::{assemble, assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::jobs::reshape::{
    continue_reshape, reshape, ReshapeEnd, ReshapeOptions, ReshapeRequest,
};
use raidkit_engine::sb::Metadata;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{Array, BlockDev, FileDev, MemDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A device that stops storing writes once its budget is spent: the machine died then.
struct CrashDev {
    inner: Arc<dyn BlockDev>,
    budget: Arc<AtomicI64>,
}

impl BlockDev for CrashDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.budget.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Ok(());
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// An array made by raidkit and filled with the pattern of `seed`.
struct Made {
    _dir: TempDir,
    members: Vec<PathBuf>,
    extra: Vec<PathBuf>,
    bytes: u64,
    seed: u64,
}

fn make(level: Level, layout: &str, n: usize, meta: &str, chunk_k: u64, extra: usize) -> Made {
    let dir = TempDir::new("rk-reshape").unwrap();
    let ps: Vec<PathBuf> = (0..n).map(|i| dir.path().join(format!("m{i}.img"))).collect();
    let mut o = CreateOptions::new(level, ps.iter().cloned().map(MemberSpec::Path).collect());
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

fn open(p: &PathBuf) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, true).unwrap())
}

/// The pattern up to `bytes` (or the array's end), zeros after.
fn check(name: &str, arr: &Array, seed: u64, bytes: u64) {
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

fn clean_check(name: &str, arr: &Array) {
    let rep = sync::run(arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    assert!(
        rep.mismatches.is_empty(),
        "{name}: mismatches {:?}",
        rep.mismatches
    );
}

struct Want {
    level: Level,
    n: usize,
    layout: &'static str,
    chunk_k: u64,
}

/// Reshape a made array as `req` asks; check data, redundancy and the new shape.
fn run(name: &str, m: &Made, req: ReshapeRequest, want: Want) {
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
        (g.level, g.raid_disks, names::layout_name(g.level, g.layout), g.chunk_sectors),
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

fn add(m: &Made) -> Vec<Arc<dyn BlockDev>> {
    m.extra.iter().map(open).collect()
}

#[test]
fn grow_raid456_and_raid10_by_offset_change() {
    for (level, layout, n, add_n, want_layout) in [
        (Level::Raid5, "left-symmetric", 4, 1, "left-symmetric"),
        (Level::Raid5, "left-symmetric", 3, 2, "left-symmetric"),
        (Level::Raid6, "left-symmetric", 4, 1, "left-symmetric"),
        (Level::Raid4, "parity-last", 3, 1, "parity-last"),
        (Level::Raid10, "n2", 4, 1, "n2"),
    ] {
        let name = format!("{level} {n}+{add_n}");
        let m = make(level, layout, n, "1.2", 64, add_n);
        let req = ReshapeRequest {
            raid_disks: Some(n + add_n),
            add: add(&m),
            ..Default::default()
        };
        run(&name, &m, req, Want { level, n: n + add_n, layout: want_layout, chunk_k: 64 });
    }
}

#[test]
fn chunk_and_layout_changes() {
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let req = ReshapeRequest {
        chunk_sectors: Some(256),
        ..Default::default()
    };
    run("raid5 chunk 64K->128K", &m, req, Want { level: Level::Raid5, n: 5, layout: "left-symmetric", chunk_k: 128 });
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        layout: Some(names::parse_layout(Level::Raid5, "left-asymmetric").unwrap()),
        ..Default::default()
    };
    run("raid5 ls->la", &m, req, Want { level: Level::Raid5, n: 4, layout: "left-asymmetric", chunk_k: 64 });
    let m = make(Level::Raid6, "left-symmetric", 5, "1.2", 128, 0);
    let req = ReshapeRequest {
        chunk_sectors: Some(64),
        layout: Some(names::parse_layout(Level::Raid6, "right-asymmetric").unwrap()),
        ..Default::default()
    };
    run("raid6 chunk 128K->32K + ra", &m, req, Want { level: Level::Raid6, n: 5, layout: "right-asymmetric", chunk_k: 32 });
    let m = make(Level::Raid10, "n2", 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        chunk_sectors: Some(256),
        ..Default::default()
    };
    run("raid10 chunk 64K->128K", &m, req, Want { level: Level::Raid10, n: 4, layout: "n2", chunk_k: 128 });
}

#[test]
fn shrink_needs_the_array_size_first() {
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let req = ReshapeRequest {
        raid_disks: Some(4),
        ..Default::default()
    };
    let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
        .err()
        .expect("a shrink without the array size is refused");
    assert!(e.to_string().contains("confirm the new size"), "{e}");
    drop(arr);
    // The full new capacity: no room after the data, so the critical section at the end
    // needs a backup file.
    let full = m.bytes / 4 * 3;
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let req = ReshapeRequest {
        raid_disks: Some(4),
        array_sectors: Some(full / 512),
        ..Default::default()
    };
    let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
        .err()
        .expect("no room after the data and no backup file");
    assert!(e.to_string().contains("backup file"), "{e}");
    drop(arr);
    let req = ReshapeRequest {
        raid_disks: Some(4),
        array_sectors: Some(full / 512),
        backup_file: Some(m._dir.path().join("backup")),
        ..Default::default()
    };
    run("raid5 5->4 backup", &m, req, Want { level: Level::Raid5, n: 4, layout: "left-symmetric", chunk_k: 64 });
    // Three chunks less per member (mdadm's minimum offset change for 4→3 data members):
    // the component size shrinks and the data moves up, no backup needed.
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let smaller = full - 9 * 64 * 1024;
    let req = ReshapeRequest {
        raid_disks: Some(4),
        array_sectors: Some(smaller / 512),
        ..Default::default()
    };
    run("raid5 5->4 offset", &m, req, Want { level: Level::Raid5, n: 4, layout: "left-symmetric", chunk_k: 64 });
}

#[test]
fn in_place_with_a_backup_file_on_090_and_10() {
    for (meta, level, n) in [("0.90", Level::Raid5, 3), ("1.0", Level::Raid5, 4), ("0.90", Level::Raid6, 4)] {
        let name = format!("{meta} {level} {n}+1");
        let m = make(level, "left-symmetric", n, meta, 64, 1);
        let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
        let req = ReshapeRequest {
            raid_disks: Some(n + 1),
            add: add(&m),
            ..Default::default()
        };
        let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
            .err()
            .expect("no room and no backup file");
        assert!(e.to_string().contains("backup file"), "{name}: {e}");
        drop(arr);
        let backup = m._dir.path().join("backup");
        let req = ReshapeRequest {
            raid_disks: Some(n + 1),
            add: add(&m),
            backup_file: Some(backup),
            ..Default::default()
        };
        run(&name, &m, req, Want { level, n: n + 1, layout: "left-symmetric", chunk_k: 64 });
    }
}

#[test]
fn level_changes() {
    let ls = "left-symmetric";
    // RAID5 -> RAID6 with one more member (takeover to left-symmetric-6, then restripe).
    let m = make(Level::Raid5, ls, 4, "1.2", 64, 1);
    let req = ReshapeRequest { level: Some(Level::Raid6), add: add(&m), ..Default::default() };
    run("raid5->6", &m, req, Want { level: Level::Raid6, n: 5, layout: ls, chunk_k: 64 });
    // RAID6 -> RAID5 (restripe to left-symmetric-6, then drop Q).
    let m = make(Level::Raid6, ls, 5, "1.2", 64, 0);
    let req = ReshapeRequest { level: Some(Level::Raid5), ..Default::default() };
    run("raid6->5", &m, req, Want { level: Level::Raid5, n: 4, layout: ls, chunk_k: 64 });
    // RAID0 -> RAID5 (parity-last, parity built).
    let m = make(Level::Raid0, "default", 3, "1.2", 64, 1);
    let req = ReshapeRequest { level: Some(Level::Raid5), add: add(&m), ..Default::default() };
    run("raid0->5", &m, req, Want { level: Level::Raid5, n: 4, layout: "parity-last", chunk_k: 64 });
    // RAID5 -> RAID0.
    let m = make(Level::Raid5, ls, 4, "1.2", 64, 0);
    let req = ReshapeRequest { level: Some(Level::Raid0), ..Default::default() };
    run("raid5->0", &m, req, Want { level: Level::Raid0, n: 3, layout: "", chunk_k: 64 });
    // RAID0 grow (through RAID4).
    let m = make(Level::Raid0, "default", 3, "1.2", 64, 1);
    let req = ReshapeRequest { raid_disks: Some(4), add: add(&m), ..Default::default() };
    run("raid0 3->4", &m, req, Want { level: Level::Raid0, n: 4, layout: "", chunk_k: 64 });
    // RAID0 -> RAID10 near=2 and back.
    let m = make(Level::Raid0, "default", 2, "1.2", 64, 2);
    let req = ReshapeRequest { level: Some(Level::Raid10), add: add(&m), ..Default::default() };
    run("raid0->10", &m, req, Want { level: Level::Raid10, n: 4, layout: "n2", chunk_k: 64 });
    let m = make(Level::Raid10, "n2", 4, "1.2", 64, 0);
    let req = ReshapeRequest { level: Some(Level::Raid0), ..Default::default() };
    run("raid10->0", &m, req, Want { level: Level::Raid0, n: 2, layout: "", chunk_k: 64 });
    // RAID1 member count, and RAID1(2) -> RAID5.
    let m = make(Level::Raid1, "default", 2, "1.2", 64, 1);
    let req = ReshapeRequest { raid_disks: Some(3), add: add(&m), ..Default::default() };
    run("raid1 2->3", &m, req, Want { level: Level::Raid1, n: 3, layout: "", chunk_k: 64 });
    // RAID4 <-> RAID5.
    let m = make(Level::Raid4, "parity-last", 4, "1.2", 64, 0);
    let req = ReshapeRequest { level: Some(Level::Raid5), ..Default::default() };
    run("raid4->5", &m, req, Want { level: Level::Raid5, n: 4, layout: "parity-last", chunk_k: 64 });
}
