//! Writes queued behind keep the caller's own buffer ([`SharedBuf`], as the NBD server
//! hands its request buffers to the array), not a copy: the buffer stays alive while its
//! write is queued and goes back to its owner once the slow member has it — or once the
//! member fails; both legs hold the exact bytes; and the queue's byte limit counts each
//! buffer's whole memory, so a client cannot make it keep more.

use raidkit_engine::array::{BufOwner, SharedBuf, MAX_WRITE_BEHIND_BYTES as MAX_QUEUED_BYTES};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::sb::probe;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{assemble, Array, AssembleOptions, BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// What the slow member does with data writes (64 KiB and more: its superblock and
/// bitmap writes are smaller and always pass).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hold,
    Pass,
    Fail,
}

struct Gate {
    mode: Mutex<Mode>,
    changed: Condvar,
}

impl Gate {
    fn set(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
        self.changed.notify_all();
    }
}

impl Hooks for Gate {
    fn write(&self, inner: &dyn BlockDev, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.len() >= 64 << 10 {
            let mut m = self.mode.lock().unwrap();
            while *m == Mode::Hold {
                m = self.changed.wait(m).unwrap();
            }
            if *m == Mode::Fail {
                return Err(io::Error::other("the link is down"));
            }
        }
        inner.write_at(buf, offset)
    }
}

/// A caller's buffer that counts the bytes of memory alive in buffers like it.
struct Counted {
    data: Vec<u8>,
    footprint: usize,
    live: Arc<AtomicI64>,
}

impl Counted {
    /// `data` in a buffer of `footprint` bytes (a reused pool buffer can be larger).
    fn shared(data: Vec<u8>, footprint: usize, live: &Arc<AtomicI64>) -> SharedBuf {
        live.fetch_add(footprint as i64, Ordering::SeqCst);
        SharedBuf::new(Counted {
            data,
            footprint,
            live: live.clone(),
        })
    }
}

impl BufOwner for Counted {
    fn bytes(&self) -> &[u8] {
        &self.data
    }
    fn footprint(&self) -> usize {
        self.footprint
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(self.footprint as i64, Ordering::SeqCst);
    }
}

struct Rig {
    _dir: TempDir,
    files: Vec<PathBuf>,
    data_byte: u64,
    arr: Arc<Array>,
    gate: Arc<Hooked<Gate>>,
}

/// A RAID1 of a local member and a write-mostly member behind a gate, write-behind
/// `n`, `size` bytes.
fn rig(n: u32, size: u64) -> Rig {
    rig_of(2, n, size)
}

/// A RAID1 of `count` members: role 1 write-mostly behind a gate, the others local;
/// write-behind `n`, `size` bytes.
fn rig_of(count: usize, n: u32, size: u64) -> Rig {
    let dir = TempDir::new("rk-wbshared").unwrap();
    let files = member_files(dir.path(), count);
    let mut o = create_options(Level::Raid1, &files);
    o.create_size = Some(size);
    o.assume_clean = true;
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(1 << 20);
    o.write_mostly = vec![1];
    o.write_behind = n;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let d = FileDev::open(&files[0], false).unwrap();
    let (sb, _) = probe(&d).unwrap().found.into_iter().next().unwrap();
    let gate = Arc::new(Hooked::new(
        FileDev::open(&files[1], true).unwrap(),
        Gate {
            mode: Mutex::new(Mode::Hold),
            changed: Condvar::new(),
        },
    ));
    let local =
        |i: usize| -> Arc<dyn BlockDev> { Arc::new(FileDev::open(&files[i], true).unwrap()) };
    let mut devs = vec![local(0)];
    devs.extend(members(std::slice::from_ref(&gate)));
    devs.extend((2..count).map(local));
    let opts = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(devs, &opts).unwrap());
    arr.watch_write_behind();
    Rig {
        _dir: dir,
        files,
        data_byte: sb.data_offset() * 512,
        arr,
        gate,
    }
}

impl Rig {
    /// Fail and remove member 0 (the gate passing), and add a blank spare of its size in
    /// its place; the spare's file.
    fn spare_for_first_member(&self) -> PathBuf {
        self.gate.set(Mode::Pass);
        let first = self.arr.members()[0].device.clone();
        self.arr.fail_member(0, "test").expect("fail member 0");
        self.arr.remove_member(&first).expect("remove it");
        let spare_path = self.files[0].with_extension("spare");
        let len = std::fs::metadata(&self.files[0]).expect("size").len();
        std::fs::File::create(&spare_path)
            .and_then(|f| f.set_len(len))
            .expect("spare");
        let spare: Arc<dyn BlockDev> = Arc::new(FileDev::open(&spare_path, true).expect("open"));
        self.arr.add_spare(spare, false).expect("add the spare");
        spare_path
    }

    /// `len` bytes of member `m`'s data area at array byte `off`.
    fn member_data(&self, m: usize, off: u64, len: usize) -> Vec<u8> {
        let d = FileDev::open(&self.files[m], false).unwrap();
        let mut b = vec![0u8; len];
        d.read_at(&mut b, self.data_byte + off).unwrap();
        b
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(30), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_tagged(tag, 0, &mut v);
    v
}

#[test]
fn a_queued_write_keeps_the_callers_buffer_until_the_member_has_it_or_fails() {
    let r = rig(16, 16 << 20);
    let live = Arc::new(AtomicI64::new(0));
    let a = pattern(1, MIB);
    r.arr
        .write_shared(0, &Counted::shared(a.clone(), MIB, &live))
        .unwrap();
    // Acknowledged with the remote held: the queue keeps the caller's buffer itself (a
    // copy would have let it go with the caller's reference), and is charged it once.
    assert_eq!(r.arr.write_behind_backlog(), 1);
    assert_eq!(
        live.load(Ordering::SeqCst),
        MIB as i64,
        "the queue copied the buffer"
    );
    assert_eq!(r.arr.write_behind_bytes(), MIB as u64);
    assert!(r.member_data(0, 0, MIB) == a, "local leg");
    // The remote takes it: the buffer goes back, and the remote has the exact bytes.
    r.gate.set(Mode::Pass);
    wait_for("queue drained", || r.arr.write_behind_backlog() == 0);
    assert_eq!(live.load(Ordering::SeqCst), 0, "buffer not given back");
    assert_eq!(r.arr.write_behind_bytes(), 0);
    assert!(r.member_data(1, 0, MIB) == a, "remote leg");

    // A slice of a larger buffer (a mirror run of it) is kept without a copy too, and
    // given back when the remote fails while it is queued.
    r.gate.set(Mode::Hold);
    let big = pattern(2, 2 * MIB);
    let whole = Counted::shared(big.clone(), 2 * MIB, &live);
    let part = whole.slice(MIB / 2, MIB / 2 + 1536 * 1024);
    drop(whole);
    r.arr.write_shared(4 << 20, &part).unwrap();
    drop(part);
    assert_eq!(live.load(Ordering::SeqCst), 2 * MIB as i64);
    assert_eq!(r.arr.write_behind_bytes(), 2 * MIB as u64);
    r.gate.set(Mode::Fail);
    wait_for("remote failed", || r.arr.missing_roles() == vec![1]);
    wait_for("queue drained", || r.arr.write_behind_backlog() == 0);
    assert_eq!(live.load(Ordering::SeqCst), 0, "buffer not given back");
    assert_eq!(r.arr.write_behind_bytes(), 0);
    let want = &big[MIB / 2..MIB / 2 + 1536 * 1024];
    assert!(r.member_data(0, 4 << 20, want.len()) == want, "local leg");
    let mut back = vec![0u8; want.len()];
    r.arr.read(4 << 20, &mut back).unwrap();
    assert!(back == want, "array read");
}

#[test]
fn the_queue_counts_each_buffers_whole_memory_against_its_limit() {
    // 3 MiB writes, each in a 5 MiB buffer (kept whole: a pool buffer keeps the size of
    // the largest request it held). 12 fit in 64 MiB; counting only their data would let
    // 21 in, keeping 105 MiB.
    const WRITES: usize = 16;
    let (len, footprint) = (3 * MIB, 5 * MIB);
    let r = rig(1000, (WRITES * len) as u64 + (4 << 20));
    let live = Arc::new(AtomicI64::new(0));
    let writer = {
        let (arr, live) = (r.arr.clone(), live.clone());
        std::thread::spawn(move || {
            for k in 0..WRITES {
                let b = Counted::shared(pattern(k as u64, len), footprint, &live);
                arr.write_shared((k * len) as u64, &b).unwrap();
            }
        })
    };
    let fit = (MAX_QUEUED_BYTES as usize / footprint) as i64;
    // The writer fills the queue, then waits with one more buffer in its hands.
    wait_for("queue full", || {
        live.load(Ordering::SeqCst) == (fit + 1) * footprint as i64
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(r.arr.write_behind_backlog() as i64, fit);
    assert_eq!(r.arr.write_behind_bytes(), fit as u64 * footprint as u64);
    assert!(r.arr.write_behind_bytes() <= MAX_QUEUED_BYTES);
    assert_eq!(live.load(Ordering::SeqCst), (fit + 1) * footprint as i64);
    r.gate.set(Mode::Pass);
    writer.join().unwrap();
    wait_for("queue drained", || r.arr.write_behind_backlog() == 0);
    assert_eq!(live.load(Ordering::SeqCst), 0);
    assert_eq!(r.arr.write_behind_bytes(), 0);
    for k in 0..WRITES {
        let want = pattern(k as u64, len);
        let off = (k * len) as u64;
        assert!(r.member_data(0, off, len) == want, "local leg, write {k}");
        assert!(r.member_data(1, off, len) == want, "remote leg, write {k}");
    }
}

/// The queue's thread wakes the threads waiting on the queue only when there are any: a
/// stream of writes that never fills the queue, with nobody waiting for a drain, costs
/// no wake-ups (it was one `notify_all`, a system call, per batch written); a writer that
/// does wait for room is woken.
#[test]
fn the_queue_wakes_waiters_only_when_there_are_some() {
    let r = rig(4, 16 << 20);
    r.gate.set(Mode::Pass);
    for i in 0..8u64 {
        r.arr.write(i * MIB as u64, &pattern(10 + i, MIB)).unwrap();
        wait_for("queue drained", || r.arr.write_behind_backlog() == 0);
    }
    assert_eq!(r.arr.write_behind_wakeups(), 0, "woke nobody's waiters");
    for i in 0..8u64 {
        assert!(
            r.member_data(1, i * MIB as u64, MIB) == pattern(10 + i, MIB),
            "remote leg {i}"
        );
    }
    // Held: four writes fill the queue (limit 4); the fifth waits for room and is woken.
    r.gate.set(Mode::Hold);
    for i in 0..4u64 {
        r.arr
            .write((8 + i) * MIB as u64, &pattern(20 + i, MIB))
            .unwrap();
    }
    let arr = r.arr.clone();
    let fifth = std::thread::spawn(move || arr.write(12 * MIB as u64, &pattern(24, MIB)));
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !fifth.is_finished(),
        "the fifth write did not wait for room"
    );
    r.gate.set(Mode::Pass);
    fifth.join().unwrap().unwrap();
    wait_for("queue drained", || r.arr.write_behind_backlog() == 0);
    assert!(
        r.arr.write_behind_wakeups() >= 1,
        "the waiting writer was not woken"
    );
    assert!(
        r.member_data(1, 12 * MIB as u64, MIB) == pattern(24, MIB),
        "remote leg 12"
    );
}

/// A check compares the write-mostly copy only after the writes queued behind to it
/// have landed: an acknowledged write still queued is not a mismatch (the check used
/// to read the old bytes there and report one; a rebuild from that copy would have
/// copied them).
#[test]
fn a_check_waits_for_the_writes_queued_behind_before_it_compares() {
    let r = rig(16, 16 << 20);
    let a = pattern(7, MIB);
    r.arr.write(2 << 20, &a).unwrap();
    assert_eq!(
        r.arr.write_behind_backlog(),
        1,
        "queued behind the held member"
    );
    let arr = r.arr.clone();
    let check = std::thread::spawn(move || {
        sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).expect("check")
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !check.is_finished(),
        "the check did not wait for the queued write"
    );
    r.gate.set(Mode::Pass);
    let rep = check.join().expect("check thread");
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert!(r.member_data(1, 2 << 20, MIB) == a, "the write-mostly copy");
}

/// While a spare is being rebuilt, a client write beyond the rebuild's progress is not
/// queued behind to the write-mostly member on the strength of the spare alone (not in
/// sync there: a crash would leave the write only on it and in the lost queue): it is
/// written to the write-mostly member at once. And the rebuilt spare ends with the bytes
/// written.
#[test]
fn a_spare_being_rebuilt_does_not_let_a_write_go_behind() {
    let r = rig(16, 16 << 20);
    let spare_path = r.spare_for_first_member();
    // A slow rebuild (4 MiB/s over 16 MiB): the write below lands beyond its progress.
    let opts = RebuildOptions {
        max_bytes_per_sec: Some(Arc::new(AtomicU64::new(4 << 20))),
        ..Default::default()
    };
    let arr = r.arr.clone();
    let rebuild = std::thread::spawn(move || rebuild(&arr, &opts, &mut |_, _| {}));
    wait_for("the spare in its role", || {
        r.arr.members().iter().any(|m| m.state == "recovering")
    });
    r.gate.set(Mode::Hold);
    let a = pattern(9, MIB);
    let arr = r.arr.clone();
    let data = a.clone();
    let write = std::thread::spawn(move || arr.write(12 << 20, &data));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !write.is_finished(),
        "the write was acknowledged with the write-mostly member's part queued behind"
    );
    assert_eq!(r.arr.write_behind_backlog(), 0);
    r.gate.set(Mode::Pass);
    write.join().expect("write thread").expect("write");
    rebuild.join().expect("rebuild thread").expect("rebuild");
    let d = FileDev::open(&spare_path, false).expect("open");
    let mut got = vec![0u8; MIB];
    d.read_at(&mut got, r.data_byte + (12 << 20)).expect("read");
    assert!(got == a, "the rebuilt spare");
    assert!(
        r.member_data(1, 12 << 20, MIB) == a,
        "the write-mostly member"
    );
}

/// A rebuild whose source is a write-mostly member reads it only once the writes queued
/// behind to it there have landed. A three-way RAID1 (local, write-mostly, local) loses its
/// first member; the rebuild onto a spare reads the write-mostly member (the first other
/// copy). A client write ahead of the rebuild goes behind to it (the third member is in sync
/// there) and is acknowledged; the rebuild must copy those bytes, not the ones under them.
#[test]
fn a_rebuild_reads_its_write_mostly_source_only_after_the_writes_queued_behind_land() {
    let r = rig_of(3, 16, 16 << 20);
    let spare_path = r.spare_for_first_member();
    // 16 MiB/s over 16 MiB: the write below at 12 MiB is ahead of the rebuild when made.
    let opts = RebuildOptions {
        max_bytes_per_sec: Some(Arc::new(AtomicU64::new(16 << 20))),
        ..Default::default()
    };
    r.gate.set(Mode::Hold);
    let arr = r.arr.clone();
    let rebuild = std::thread::spawn(move || rebuild(&arr, &opts, &mut |_, _| {}));
    let a = pattern(11, MIB);
    r.arr
        .write(12 << 20, &a)
        .expect("the write is acknowledged (queued behind)");
    assert_eq!(r.arr.write_behind_backlog(), 1, "the write went behind");
    // Long enough for the rebuild to pass 12 MiB if it did not wait for the queue.
    std::thread::sleep(Duration::from_millis(1500));
    r.gate.set(Mode::Pass);
    rebuild.join().expect("rebuild thread").expect("rebuild");
    let d = FileDev::open(&spare_path, false).expect("open");
    let mut got = vec![0u8; MIB];
    d.read_at(&mut got, r.data_byte + (12 << 20)).expect("read");
    assert!(got == a, "the rebuilt spare holds the acknowledged write");
}
