//! A parity (RAID5/RAID6) hot replace copies runs of stripes: the old member's chunks of
//! 16 stripes (64 KiB chunks) read with one IO and written to the replacement with one,
//! byte for byte — a read error on the old member inside a run taken stripe by stripe
//! from redundancy — and a client write into a run being copied is never undone on the
//! replacement, while a write far from the runs in flight is not held.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::RebuildOptions;
use raidkit_engine::replace::replace;
use raidkit_engine::{Array, BlockDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, data_offset_bytes, member_files};
use raidkit_testkit::hooked::{Hooked, Recorder};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const CHUNK: u64 = 64 << 10;
const PAGE: u64 = 4096;
/// Each member's size: 17 MiB, more than 16 runs of 16 stripes (so runs are whole).
const MEMBER_BYTES: u64 = 17 << 20;
/// The role replaced.
const ROLE: usize = 1;

/// A member file that records its IOs (from the start), fails reads over one byte range
/// and runs a race once when a read covers a given offset.
type RecDev = Hooked<Recorder>;

fn rec(p: &Path) -> Arc<RecDev> {
    Arc::new(Recorder::open(p, true))
}

/// The array's bytes: a pattern of the offset (no page like another).
fn pattern(off: u64, len: usize) -> Vec<u8> {
    raidkit_testkit::pattern::mdref_bytes(29, off, len)
}

/// A RAID5 (4 members) or RAID6 (6) of 64 KiB chunks filled with `pattern`, assembled
/// over recording members, with a blank spare (recording) added and `ROLE`'s replace
/// started onto it. Returns the array, its members, the spare, the member files, the
/// spare's path and the array's size.
struct Setup {
    arr: Arc<Array>,
    recs: Vec<Arc<RecDev>>,
    spare: Arc<RecDev>,
    ps: Vec<PathBuf>,
    sp: PathBuf,
    size: u64,
}

fn setup(dir: &TempDir, level: Level) -> Setup {
    let n = if level == Level::Raid6 { 6 } else { 4 };
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.chunk_bytes = Some(CHUNK);
    o.create_size = Some(MEMBER_BYTES);
    o.assume_clean = true;
    o.name = "repl".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes();
    arr.write(0, &pattern(0, size as usize)).expect("fill");
    arr.stop().expect("stop");
    let recs: Vec<Arc<RecDev>> = ps.iter().map(|p| rec(p)).collect();
    let devs: Vec<Arc<dyn BlockDev>> = recs
        .iter()
        .map(|r| r.clone() as Arc<dyn BlockDev>)
        .collect();
    let opts = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(devs, &opts).expect("assemble"));
    let sp = dir.path().join("spare");
    std::fs::File::create(&sp)
        .expect("spare")
        .set_len(std::fs::metadata(&ps[0]).expect("size").len())
        .expect("spare size");
    let spare = rec(&sp);
    arr.add_spare(spare.clone(), false).expect("add spare");
    let old = recs[ROLE].name().to_string();
    let role = arr
        .start_replace(&old, Some(spare.name()))
        .expect("start replace");
    assert_eq!(role, ROLE);
    Setup {
        arr,
        recs,
        spare,
        ps,
        sp,
        size,
    }
}

/// The replacement's data area equals the old member file's, byte for byte, over the
/// stripes.
fn assert_same_data(s: &Setup, what: &str) {
    let stripes = s.arr.geometry().stripes();
    let len = (stripes * CHUNK) as usize;
    let (od, nd) = (
        data_offset_bytes(&s.ps[ROLE]) as usize,
        data_offset_bytes(&s.sp) as usize,
    );
    let old = std::fs::read(&s.ps[ROLE]).expect("old member");
    let new = std::fs::read(&s.sp).expect("replacement");
    let (o, n) = (&old[od..][..len], &new[nd..][..len]);
    if let Some(i) = (0..len).find(|&i| o[i] != n[i]) {
        panic!(
            "{what}: the replacement differs from the old member at data byte {i} (stripe {})",
            i as u64 / CHUNK
        );
    }
}

/// Replace `ROLE` (a read error on it inside the second run, which redundancy covers):
/// the replacement holds the old member's bytes and was written 1 MiB at a time.
fn replace_exact(level: Level) {
    let dir = TempDir::new("rk-preplace").expect("temp dir");
    let s = setup(&dir, level);
    let doff = data_offset_bytes(&s.ps[ROLE]);
    let at = doff + 21 * CHUNK + 8192;
    *s.recs[ROLE].bad.lock().unwrap() = Some((at, at + PAGE));
    s.spare.writes.lock().unwrap().clear();
    let rep = replace(&s.arr, &RebuildOptions::default(), &mut |_, _| {}).expect("replace");
    assert_eq!(rep.roles, vec![ROLE], "{level}");
    assert_eq!(rep.lost, vec![], "{level}");
    s.arr.flush().expect("flush");
    assert_same_data(&s, &format!("{level}"));
    let stripes = s.arr.geometry().stripes();
    let big = s
        .spare
        .writes
        .lock()
        .unwrap()
        .iter()
        .filter(|&&(_, l)| l == 16 * CHUNK as usize)
        .count() as u64;
    assert!(
        big + 2 >= stripes / 16,
        "{level}: {big} writes of 1 MiB to the replacement for {stripes} stripes"
    );
}

#[test]
fn a_parity_replace_copies_runs_of_stripes_byte_for_byte() {
    replace_exact(Level::Raid5);
    replace_exact(Level::Raid6);
}

/// The old member's read of the run holding stripe 5 writes stripe 5's whole row (it
/// includes `ROLE`'s block there, data or parity) and a row far beyond the runs in
/// flight, from client threads. The far write must land while the run is being copied;
/// the near one only after the run's copy is written to the replacement (else the copy
/// writes the old bytes over it there): afterwards the array, on the replacement, reads
/// both writes and its parity agrees.
fn write_race(level: Level) {
    let dir = TempDir::new("rk-preplace").expect("temp dir");
    let s = setup(&dir, level);
    let data_blocks = (s.ps.len() - if level == Level::Raid6 { 2 } else { 1 }) as u64;
    let row = data_blocks * CHUNK;
    let (near, far) = (5 * row, 200 * row);
    assert!(far + row <= s.size, "{level}: the array is too small");
    let (tx, rx) = mpsc::channel();
    let rx = Mutex::new(Some(rx));
    let far_done = Arc::new(AtomicBool::new(false));
    let fd = far_done.clone();
    let weak = Arc::downgrade(&s.arr);
    let tx = Mutex::new(tx);
    let _ = s.recs[ROLE].race.set(Box::new(move || {
        let Some(arr) = weak.upgrade() else { return };
        let write = |off: u64, byte: u8| {
            let (arr, tx) = (arr.clone(), tx.lock().unwrap().clone());
            std::thread::spawn(move || {
                arr.write(off, &vec![byte; row as usize])
                    .expect("client write");
                let _ = tx.send(off);
            });
        };
        write(far, 0xFA);
        // The far write is not held: it lands within 10 s (it would wait forever if the
        // replace held every write until this read returned).
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if far_done.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        write(near, 0xAE);
        // Landed (no hold) or waiting for the run's copy (held).
        std::thread::sleep(Duration::from_millis(300));
    }));
    let doff = data_offset_bytes(&s.ps[ROLE]);
    *s.recs[ROLE].trigger.lock().unwrap() = Some(doff + 5 * CHUNK);
    // The far write is seen done by the race closure through `far_done`: a watcher
    // takes the completions from the channel.
    let rx = rx.lock().unwrap().take().expect("rx");
    let watcher = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok(off) = rx.recv_timeout(Duration::from_secs(30)) {
            if off == far {
                fd.store(true, Ordering::SeqCst);
            }
            seen.push(off);
            if seen.len() == 2 {
                break;
            }
        }
        seen
    });
    let rep = replace(&s.arr, &RebuildOptions::default(), &mut |_, _| {}).expect("replace");
    assert_eq!(rep.roles, vec![ROLE], "{level}");
    assert!(
        s.recs[ROLE].trigger.lock().unwrap().is_none(),
        "{level}: the replace never read stripe 5 from the old member"
    );
    let seen = watcher.join().expect("watcher");
    assert_eq!(
        seen,
        vec![far, near],
        "{level}: the far write must land first, while the run is copied, and the near one after"
    );
    for (off, byte) in [(near, 0xAE), (far, 0xFA)] {
        let mut got = vec![0u8; row as usize];
        s.arr.read(off, &mut got).expect("read");
        assert!(
            got.iter().all(|&b| b == byte),
            "{level}: the client write at {off} was undone on the replacement"
        );
    }
    let mut next = vec![0u8; PAGE as usize];
    s.arr.read(near + row, &mut next).expect("read");
    assert!(next == pattern(near + row, PAGE as usize), "{level}");
    assert_consistent(&s.arr, &format!("{level}"));
}

#[test]
fn a_client_write_into_a_run_being_replaced_is_not_undone_and_others_are_not_held() {
    write_race(Level::Raid5);
    write_race(Level::Raid6);
}
