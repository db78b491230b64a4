//! A check over blank (sparse) members asks each member's device about holes a bounded
//! number of times, not once per step (a file's `SEEK_DATA` walks to the next data: on a
//! blank preallocated tmpfs member, every page to its end, each time); and a write to a
//! member during the pass makes the hole it landed in be asked about again.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::dev::io::Submission;
use raidkit_engine::sync::{self, SyncMode, SyncOptions};
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const CHUNK: u64 = 64 << 10;
/// Each member's size: 17 MiB (256 stripes of 64 KiB chunks in its data area).
const MEMBER_BYTES: u64 = 17 << 20;

/// A member file that counts the hole queries it is asked (either kind).
struct Counting {
    inner: FileDev,
    queries: AtomicU64,
}

impl BlockDev for Counting {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        self.queries.fetch_add(1, Ordering::SeqCst);
        self.inner.is_hole(offset, len)
    }
    fn hole_end(&self, offset: u64) -> Option<u64> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        self.inner.hole_end(offset)
    }
    fn submission(&self) -> Submission<'_> {
        self.inner.submission()
    }
}

/// A RAID5 of 4 blank members (nothing written but the metadata), assembled writable
/// over counting devices.
fn blank_raid5(dir: &TempDir) -> (Array, Vec<Arc<Counting>>) {
    let ps: Vec<PathBuf> = member_files(dir.path(), 4);
    let mut o = create_options(Level::Raid5, &ps);
    o.chunk_bytes = Some(CHUNK);
    o.create_size = Some(MEMBER_BYTES);
    o.assume_clean = true;
    o.name = "holes".into();
    create(&o, &mut |_, _| {})
        .expect("create")
        .stop()
        .expect("stop");
    let devs: Vec<Arc<Counting>> = ps
        .iter()
        .map(|p| {
            Arc::new(Counting {
                inner: FileDev::open(p, true).expect("open"),
                queries: AtomicU64::new(0),
            })
        })
        .collect();
    let members = devs
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn BlockDev>)
        .collect();
    let opts = AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    (assemble(members, &opts).expect("assemble"), devs)
}

fn full() -> SyncOptions {
    SyncOptions {
        full: true,
        ..Default::default()
    }
}

#[test]
fn a_blank_member_is_asked_about_holes_a_few_times_per_pass() {
    let dir = TempDir::new("rk-holes").expect("temp dir");
    let (arr, devs) = blank_raid5(&dir);
    let stripes = arr.geometry().stripes();
    let rep = sync::run_opts(&arr, SyncMode::Check, &full(), &mut |_, _| {}).expect("check");
    assert_eq!(rep.mismatches, vec![]);
    // Every stripe is a hole on every member (the file system reports holes), and was
    // skipped without a read.
    assert_eq!(
        rep.sectors_skipped_holes,
        stripes * CHUNK / 512,
        "skipped of {stripes} stripes"
    );
    for (m, d) in devs.iter().enumerate() {
        let q = d.queries.load(Ordering::SeqCst);
        // One query finds the hole to the end; asked per stripe it was one a stripe (256).
        // Any member write during the pass (a superblock update: the array marked active,
        // or clean again when idle) makes the member be asked once more: a few queries.
        assert!(q <= 8, "member {m}: {q} hole queries for {stripes} stripes");
    }
    // A second pass asks again (files may change between passes), once more.
    let before: Vec<u64> = devs
        .iter()
        .map(|d| d.queries.load(Ordering::SeqCst))
        .collect();
    sync::run_opts(&arr, SyncMode::Check, &full(), &mut |_, _| {}).expect("check");
    for (m, d) in devs.iter().enumerate() {
        let q = d.queries.load(Ordering::SeqCst) - before[m];
        assert!((1..=8).contains(&q), "member {m}: second pass {q} queries");
    }
}

#[test]
fn a_write_during_the_pass_is_not_skipped_as_a_hole() {
    let dir = TempDir::new("rk-holes").expect("temp dir");
    let (arr, _devs) = blank_raid5(&dir);
    let stripes = arr.geometry().stripes();
    let data_blocks = 3;
    let row = data_blocks * CHUNK;
    let last = stripes - 1;
    // After the first step is done (its hole queries found every member blank to its
    // end), a client write into the last stripe: it holds data now and must be checked.
    let mut wrote = false;
    let rep = sync::run_opts(&arr, SyncMode::Check, &full(), &mut |done, _| {
        if !wrote && done > 0 {
            wrote = true;
            arr.write(last * row, &vec![0xa5; row as usize])
                .expect("client write");
        }
    })
    .expect("check");
    assert!(wrote);
    assert_eq!(rep.mismatches, vec![]);
    assert_eq!(
        rep.sectors_skipped_holes,
        (stripes - 1) * CHUNK / 512,
        "the written stripe was skipped as a hole"
    );
    let mut back = vec![0u8; row as usize];
    arr.read(last * row, &mut back).expect("read back");
    assert!(back.iter().all(|&b| b == 0xa5));
}
