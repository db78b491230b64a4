//! A mirrored (RAID1/RAID10) rebuild racing client writes: a write into a region being
//! copied must never leave the rebuilt member stale, and writes elsewhere are not held
//! by the copy. Afterwards every member holds exactly the bytes written, copy by copy.
//!
//! Deterministic: the source member is wrapped so that the rebuild's read of the first
//! region (while the region is held against client writes) starts two client writes, one
//! far from the regions in flight and one into the region read, and gives them time to
//! land before returning the bytes read *before* them. The far write must complete then
//! (writes elsewhere go on); the near one must wait until the region's copy is written
//! (else the rebuild writes the old bytes over it on the target).
//!
//! And a random mix: writer threads on their own pages during a rebuild, then every copy
//! of every page checked against the last write.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::sb::{probe, Role};
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::hooked::{Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

/// Each member's size (the array is smaller: data offset, and 2 copies).
const MEMBER_BYTES: u64 = 32 << 20;
const PAGE: usize = 4096;
/// The near write (into the first region) and the far one (beyond any region in flight).
const NEAR: u64 = 0;
const FAR: u64 = 28 << 20;

/// The array's bytes before the race: a pattern of the offset.
fn old_page(off: u64) -> Vec<u8> {
    let mut v = vec![0u8; PAGE];
    for (i, b) in v.iter_mut().enumerate() {
        *b = ((off / PAGE as u64) as u8) ^ (i as u8).wrapping_mul(31) ^ 0x5a;
    }
    v
}

/// The source member: when armed, its read of the array's first sectors launches the two
/// client writes and waits for them (the far one up to 10 s, the near one 300 ms).
struct Trigger {
    /// Byte offset on the device of array sector 0's copy.
    at: u64,
    armed: AtomicBool,
    array: OnceLock<Arc<Array>>,
    far_done: AtomicBool,
    near: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Trigger {
    /// `src` under a disarmed trigger for the copy of array sector 0 at byte `at`.
    fn over(src: FileDev, at: u64) -> Arc<Hooked<Trigger>> {
        let hooks = Trigger {
            at,
            armed: AtomicBool::new(false),
            array: OnceLock::new(),
            far_done: AtomicBool::new(false),
            near: Mutex::new(None),
        };
        Arc::new(Hooked::new(src, hooks))
    }
}

fn write_in_thread(arr: &Arc<Array>, off: u64, byte: u8) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    let arr = arr.clone();
    std::thread::spawn(move || {
        arr.write(off, &[byte; PAGE]).expect("client write");
        let _ = tx.send(());
    });
    rx
}

impl Hooks for Trigger {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], offset: u64) -> io::Result<()> {
        inner.read_at(buf, offset)?;
        let covers = offset <= self.at && self.at < offset + buf.len() as u64;
        if covers && self.armed.swap(false, Ordering::SeqCst) {
            if let Some(arr) = self.array.get() {
                let far = write_in_thread(arr, FAR, 0xFA);
                let done = far.recv_timeout(Duration::from_secs(10)).is_ok();
                self.far_done.store(done, Ordering::SeqCst);
                let near = write_in_thread(arr, NEAR, 0xAE);
                // Landed (no hold) or still waiting for the region's copy (held).
                if near.recv_timeout(Duration::from_millis(300)).is_err() {
                    *self.near.lock().expect("near") = Some(near);
                }
            }
        }
        Ok(())
    }
}

/// Create the array over `n` members (chunk 64 KiB), fill it with `old_page`, stop it.
/// Returns the members and the array's size in bytes.
fn make(dir: &TempDir, level: Level, layout: Option<&str>, n: usize) -> (Vec<PathBuf>, u64) {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    if let Some(l) = layout {
        o.layout = Some(names::parse_layout(level, l).expect("layout"));
    }
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 << 10);
    }
    o.create_size = Some(MEMBER_BYTES);
    o.assume_clean = true;
    o.name = "race".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes() / PAGE as u64 * PAGE as u64;
    assert!(size > FAR + PAGE as u64, "{level}: the array is too small");
    let mut all = Vec::with_capacity(size as usize);
    for off in (0..size).step_by(PAGE) {
        all.extend(old_page(off));
    }
    arr.write(0, &all).expect("old data");
    arr.stop().expect("stop");
    (ps, size)
}

/// A blank spare the size of member 0.
fn spare(dir: &TempDir, like: &Path) -> (PathBuf, Arc<dyn BlockDev>) {
    let p = dir.path().join("spare");
    let len = std::fs::metadata(like).expect("member size").len();
    std::fs::File::create(&p)
        .expect("spare")
        .set_len(len)
        .expect("spare size");
    let d: Arc<dyn BlockDev> = Arc::new(FileDev::open(&p, true).expect("open spare"));
    (p, d)
}

/// Every copy of every page on every member file equals `expect(page offset)`.
fn assert_members_hold(
    files: &[PathBuf],
    geo: &raidkit_layout::Geometry,
    size: u64,
    expect: &dyn Fn(u64) -> Vec<u8>,
    what: &str,
) {
    for f in files {
        let d = FileDev::open(f, false).expect("open member");
        let found = probe(&d).expect("probe");
        let sb = &found.found.first().expect("a superblock").0;
        let Role::Active(role) = sb.own_role() else {
            panic!("{what}: {} is not active", f.display());
        };
        let bytes = std::fs::read(f).expect("read member");
        let doff = sb.data_offset() * 512;
        for off in (0..size).step_by(PAGE) {
            let p = geo.locate(off / 512).expect("locate");
            for &(r, dsec) in &p.copies {
                if r != role {
                    continue;
                }
                let at = (doff + dsec * 512) as usize;
                assert!(
                    bytes[at..at + PAGE] == expect(off)[..],
                    "{what}: {} (role {role}) holds the wrong bytes for array offset {off}",
                    f.display()
                );
            }
        }
    }
}

fn deterministic_race(level: Level, layout: Option<&str>, n: usize) {
    let what = format!("{level} {}", layout.unwrap_or(""));
    let dir = TempDir::new("rk-rebuildrace").expect("temp dir");
    let (ps, size) = make(&dir, level, layout, n);
    // Role 1 is lost; role 0 holds the other copy of array sector 0.
    let src = FileDev::open(&ps[0], true).expect("open m0");
    let doff = probe(&src).expect("probe").found[0].0.data_offset() * 512;
    let trig = Trigger::over(src, doff);
    let mut devs: Vec<Arc<dyn BlockDev>> = vec![trig.clone()];
    for p in &ps[2..] {
        devs.push(Arc::new(FileDev::open(p, true).expect("open member")));
    }
    let opts = AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(devs, &opts).expect("assemble degraded"));
    assert_eq!(arr.missing_roles(), vec![1], "{what}");
    let _ = trig.array.set(arr.clone());
    let (sp, sd) = spare(&dir, &ps[1]);
    arr.add_spare(sd, false).expect("add spare");
    trig.armed.store(true, Ordering::SeqCst);
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    assert_eq!(rep.roles, vec![1], "{what}");
    let mut files = vec![ps[0].clone(), sp];
    files.extend(ps[2..].iter().cloned());
    race_outcome(&trig, &arr, &files, size, "rebuild", &what);
}

/// What a deterministic race must end with, after the `job` (rebuild or replace) that
/// copied the regions: the trigger fired, the near write finished, the far one was never
/// held, and every copy in `files` holds exactly the old pattern with both writes.
fn race_outcome(
    trig: &Hooked<Trigger>,
    arr: &Array,
    files: &[PathBuf],
    size: u64,
    job: &str,
    what: &str,
) {
    assert!(
        !trig.armed.load(Ordering::SeqCst),
        "{what}: the {job} never read the first region from member 0"
    );
    if let Some(rx) = trig.near.lock().expect("near").take() {
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the near write never finished");
    }
    assert!(
        trig.far_done.load(Ordering::SeqCst),
        "{what}: a client write far from the regions being copied was held by the {job}"
    );
    let geo = arr.geometry().clone();
    arr.flush().expect("flush");
    assert_members_hold(
        files,
        &geo,
        size,
        &|off| match off {
            NEAR => vec![0xAE; PAGE],
            FAR => vec![0xFA; PAGE],
            _ => old_page(off),
        },
        what,
    );
}

#[test]
fn a_write_into_a_region_being_rebuilt_reaches_the_target_and_others_are_not_held() {
    deterministic_race(Level::Raid1, None, 2);
    deterministic_race(Level::Raid1, None, 3);
    deterministic_race(Level::Raid10, Some("n2"), 4);
    deterministic_race(Level::Raid10, Some("f2"), 2);
    deterministic_race(Level::Raid10, Some("o2"), 3);
}

/// A tiny xorshift (deterministic per seed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn random_race(level: Level, layout: Option<&str>, n: usize) {
    const WRITERS: u64 = 4;
    let what = format!("{level} {} (random writes)", layout.unwrap_or(""));
    let dir = TempDir::new("rk-rebuildrace").expect("temp dir");
    let (ps, size) = make(&dir, level, layout, n);
    let mut devs: Vec<Arc<dyn BlockDev>> = vec![];
    for p in ps.iter().filter(|p| **p != ps[1]) {
        devs.push(Arc::new(FileDev::open(p, true).expect("open member")));
    }
    let opts = AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(devs, &opts).expect("assemble degraded"));
    let (sp, sd) = spare(&dir, &ps[1]);
    arr.add_spare(sd, false).expect("add spare");
    // The last version written to each page (0: none), each page owned by one writer.
    let pages = size / PAGE as u64;
    let last: Arc<Vec<AtomicU64>> = Arc::new((0..pages).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (arr, last, stop) = (arr.clone(), last.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + w * 7919);
                let mut version = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    // A page this writer owns (pages ≡ w mod WRITERS).
                    let first = (rng.next() % (pages / WRITERS)) * WRITERS + w;
                    version += 1;
                    let mut buf = vec![0u8; PAGE];
                    buf[..8].copy_from_slice(&version.to_le_bytes());
                    buf[8..16].copy_from_slice(&first.to_le_bytes());
                    buf[16..].fill((version as u8) ^ (w as u8));
                    arr.write(first * PAGE as u64, &buf).expect("client write");
                    last[first as usize].store(version | (w << 56), Ordering::SeqCst);
                }
            })
        })
        .collect();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    stop.store(true, Ordering::SeqCst);
    for t in writers {
        t.join().expect("writer");
    }
    assert_eq!(rep.roles, vec![1], "{what}");
    let geo = arr.geometry().clone();
    arr.flush().expect("flush");
    let mut files = vec![sp];
    files.extend(ps.iter().filter(|p| **p != ps[1]).cloned());
    let written = last
        .iter()
        .filter(|v| v.load(Ordering::SeqCst) != 0)
        .count();
    assert!(written > 0, "{what}: no client write during the rebuild");
    assert_members_hold(
        &files,
        &geo,
        size,
        &|off| {
            let page = off / PAGE as u64;
            let v = last[page as usize].load(Ordering::SeqCst);
            if v == 0 {
                return old_page(off);
            }
            let (version, w) = (v & ((1 << 56) - 1), v >> 56);
            let mut buf = vec![0u8; PAGE];
            buf[..8].copy_from_slice(&version.to_le_bytes());
            buf[8..16].copy_from_slice(&page.to_le_bytes());
            buf[16..].fill((version as u8) ^ (w as u8));
            buf
        },
        &what,
    );
}

#[test]
fn random_writes_during_a_mirrored_rebuild_leave_every_copy_exact() {
    random_race(Level::Raid1, None, 2);
    random_race(Level::Raid10, Some("n2"), 4);
    random_race(Level::Raid10, Some("f2"), 3);
}

/// The same race during a hot replace of role 0 (its old member wrapped): the old
/// member's read of the first region starts the two client writes; the far one must land
/// while the region is held, the near one only after the region's copy is written to the
/// replacement (else the copy writes the old bytes over it there).
fn deterministic_replace_race(level: Level, layout: Option<&str>, n: usize) {
    let what = format!("{level} {} (replace)", layout.unwrap_or(""));
    let dir = TempDir::new("rk-replacerace").expect("temp dir");
    let (ps, size) = make(&dir, level, layout, n);
    let src = FileDev::open(&ps[0], true).expect("open m0");
    let doff = probe(&src).expect("probe").found[0].0.data_offset() * 512;
    let old_name = src.name().to_string();
    let trig = Trigger::over(src, doff);
    let mut devs: Vec<Arc<dyn BlockDev>> = vec![trig.clone()];
    for p in &ps[1..] {
        devs.push(Arc::new(FileDev::open(p, true).expect("open member")));
    }
    let opts = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(devs, &opts).expect("assemble"));
    let _ = trig.array.set(arr.clone());
    let (sp, sd) = spare(&dir, &ps[0]);
    let new_name = sd.name().to_string();
    arr.add_spare(sd, false).expect("add spare");
    assert_eq!(
        arr.start_replace(&old_name, Some(&new_name))
            .expect("start replace"),
        0,
        "{what}"
    );
    trig.armed.store(true, Ordering::SeqCst);
    let rep = raidkit_engine::replace::replace(&arr, &RebuildOptions::default(), &mut |_, _| {})
        .expect("replace");
    assert_eq!(rep.roles, vec![0], "{what}");
    let mut files = vec![sp];
    files.extend(ps[1..].iter().cloned());
    race_outcome(&trig, &arr, &files, size, "replace", &what);
}

#[test]
fn a_write_into_a_region_being_replaced_reaches_the_replacement_and_others_are_not_held() {
    deterministic_replace_race(Level::Raid1, None, 2);
    deterministic_replace_race(Level::Raid10, Some("n2"), 4);
    deterministic_replace_race(Level::Raid10, Some("f2"), 2);
}
