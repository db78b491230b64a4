//! Group commit of write-intent bitmap bits (issue 16): writers that need new bits at the
//! same time join one bitmap write per member instead of one each, and still no data write
//! reaches a member before its bit is on every live member's bitmap — also when a member
//! fails during the shared bitmap write (the bits are then on the members that stay).

use raidkit_engine::create::create;
use raidkit_engine::sb::probe;
use raidkit_engine::{assemble, Array, AssembleOptions, BlockDev, FileDev};
use raidkit_format::bitmap::{bit_is_set, BitmapSuper, BITMAP_SB_BYTES};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

const CHUNK: u64 = 64 << 10;

/// Where the bitmap and the data live on every member (the same for all here).
struct Layout {
    files: Vec<PathBuf>,
    bitmap_byte: u64,
    data_byte: u64,
}

impl Layout {
    /// Is bit `i` set in the bitmap stored on member `m`?
    fn bit_on(&self, m: usize, i: u64) -> bool {
        let mut b = [0u8; 1];
        std::fs::File::open(&self.files[m])
            .unwrap()
            .read_exact_at(&mut b, self.bitmap_byte + BITMAP_SB_BYTES as u64 + i / 8)
            .unwrap();
        bit_is_set(&b, i % 8)
    }
}

/// A member that checks, at every data write, that the bits covering it are on every
/// member's bitmap (`live` ones), counts its bitmap writes, and takes a while to flush
/// (so writers arriving meanwhile have to wait for a bitmap write).
struct Watch {
    role: usize,
    layout: Arc<Layout>,
    live: Arc<Mutex<Vec<bool>>>,
    bitmap_writes: AtomicU64,
    violations: Arc<Mutex<Vec<String>>>,
    fail_flushes: AtomicBool,
}

impl Hooks for Watch {
    fn write(&self, inner: &dyn BlockDev, buf: &[u8], offset: u64) -> io::Result<()> {
        let l = &self.layout;
        if offset == l.bitmap_byte {
            self.bitmap_writes.fetch_add(1, Ordering::SeqCst);
        } else if offset >= l.data_byte {
            let first = (offset - l.data_byte) / CHUNK;
            let last = (offset - l.data_byte + buf.len() as u64 - 1) / CHUNK;
            let live = self.live.lock().unwrap().clone();
            for i in first..=last {
                for (m, _) in live.iter().enumerate().filter(|(_, on)| **on) {
                    if !l.bit_on(m, i) {
                        self.violations.lock().unwrap().push(format!(
                            "data write to chunk {i} on role {} before its bit was on role {m}",
                            self.role
                        ));
                    }
                }
            }
        }
        inner.write_at(buf, offset)
    }
    fn flush(&self, inner: &dyn BlockDev) -> io::Result<()> {
        std::thread::sleep(Duration::from_millis(30));
        if self.fail_flushes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected flush failure"));
        }
        inner.flush()
    }
}

struct Rig {
    _dir: TempDir,
    arr: Arc<Array>,
    watch: Vec<Arc<Hooked<Watch>>>,
    layout: Arc<Layout>,
    live: Arc<Mutex<Vec<bool>>>,
    violations: Arc<Mutex<Vec<String>>>,
}

/// A 2-member RAID1 with a 64 KiB bitmap chunk, assembled over watched members, with one
/// write done (the array is active and chunk 0's bit is set).
fn rig() -> Rig {
    let dir = TempDir::new("rk-bmgc").unwrap();
    let files = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &files);
    o.create_size = Some(8 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(CHUNK);
    o.assume_clean = true;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let d = FileDev::open(&files[0], false).unwrap();
    let (sb, _) = probe(&d).unwrap().found.into_iter().next().unwrap();
    let loc = sb.bitmap_sector(d.size_bytes() / 512).unwrap();
    let mut head = vec![0u8; BITMAP_SB_BYTES];
    d.read_at(&mut head, loc * 512).unwrap();
    assert_eq!(
        u64::from(BitmapSuper::parse(&head).unwrap().chunksize),
        CHUNK
    );
    let layout = Arc::new(Layout {
        files: files.clone(),
        bitmap_byte: loc * 512,
        data_byte: sb.data_offset() * 512,
    });
    let live = Arc::new(Mutex::new(vec![true, true]));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let watch: Vec<Arc<Hooked<Watch>>> = files
        .iter()
        .enumerate()
        .map(|(role, p)| {
            let hooks = Watch {
                role,
                layout: layout.clone(),
                live: live.clone(),
                bitmap_writes: AtomicU64::new(0),
                violations: violations.clone(),
                fail_flushes: AtomicBool::new(false),
            };
            Arc::new(Hooked::new(FileDev::open(p, true).unwrap(), hooks))
        })
        .collect();
    let opts = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(members(&watch), &opts).unwrap());
    arr.write(0, &[1; 4096]).unwrap();
    Rig {
        _dir: dir,
        arr,
        watch,
        layout,
        live,
        violations,
    }
}

/// `n` writers at once, writer `k` writing 4 KiB into the new bitmap chunk `k + 1`.
fn concurrent_writes(arr: &Arc<Array>, n: u64) {
    let go = Arc::new(Barrier::new(n as usize));
    let ts: Vec<_> = (0..n)
        .map(|k| {
            let arr = arr.clone();
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                arr.write((k + 1) * CHUNK, &[k as u8 + 2; 4096])
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap().unwrap();
    }
}

#[test]
fn concurrent_writers_to_new_chunks_share_bitmap_writes_and_wait_for_their_bits() {
    const N: u64 = 8;
    let r = rig();
    let before: Vec<u64> = r
        .watch
        .iter()
        .map(|w| w.bitmap_writes.load(Ordering::SeqCst))
        .collect();
    let rounds_before = r.arr.bitmap_flushes();
    concurrent_writes(&r.arr, N);
    for (w, b) in r.watch.iter().zip(before) {
        let writes = w.bitmap_writes.load(Ordering::SeqCst) - b;
        assert!(
            (1..N).contains(&writes),
            "role {}: {writes} bitmap writes for {N} writers of new chunks (one each without group commit)",
            w.role
        );
    }
    assert!(r.arr.bitmap_flushes() - rounds_before < N);
    assert_eq!(*r.violations.lock().unwrap(), Vec::<String>::new());
    for m in 0..2 {
        for i in 0..=N {
            assert!(r.layout.bit_on(m, i), "bit {i} on role {m}");
        }
    }
    let mut b = vec![0u8; 4096];
    for k in 0..N {
        r.arr.read((k + 1) * CHUNK, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == k as u8 + 2), "data of writer {k}");
    }
}

#[test]
fn a_member_failing_during_a_shared_bitmap_write_leaves_every_bit_on_the_survivor() {
    const N: u64 = 6;
    let r = rig();
    // Role 1 stops flushing: the next bitmap round fails on it, so it is failed and
    // every write of the round goes on with its bit on role 0.
    *r.live.lock().unwrap() = vec![true, false];
    r.watch[1].fail_flushes.store(true, Ordering::SeqCst);
    concurrent_writes(&r.arr, N);
    assert_eq!(r.arr.missing_roles(), vec![1]);
    assert_eq!(*r.violations.lock().unwrap(), Vec::<String>::new());
    for i in 0..=N {
        assert!(r.layout.bit_on(0, i), "bit {i} on the survivor");
    }
    let mut b = vec![0u8; 4096];
    for k in 0..N {
        r.arr.read((k + 1) * CHUNK, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == k as u8 + 2), "data of writer {k}");
    }
}
