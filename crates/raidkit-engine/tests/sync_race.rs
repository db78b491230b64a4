//! Background sync (resync, repair) racing a client write on a running mirror: the write
//! must never be undone on any copy, and afterwards the copies agree.
//!
//! Deterministic: member 0 is wrapped so that the sync's first read of it launches a
//! client write into the very region being synced and gives it time to land between the
//! sync's reads and its rewrite. With writes held during the region (as they must be),
//! the write waits and lands after the rewrite; without, it lands in between and the
//! rewrite undoes it on one copy.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{Array, BlockDev, FileDev};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::hooked::{Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

/// Member 0: when armed, its next read starts the client write and waits (up to 500 ms)
/// for it to complete before returning the bytes read *before* the write.
struct Trigger {
    armed: AtomicBool,
    array: OnceLock<Arc<Array>>,
    done: Mutex<Option<mpsc::Receiver<()>>>,
}

const NEW: u8 = 0xA5;

impl Hooks for Trigger {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], offset: u64) -> io::Result<()> {
        inner.read_at(buf, offset)?;
        if self.armed.swap(false, Ordering::SeqCst) {
            if let Some(arr) = self.array.get().cloned() {
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    arr.write(0, &[NEW; 4096]).expect("client write");
                    let _ = tx.send(());
                });
                // Landed (no write hold) or still waiting for the sync (write hold).
                let _ = rx.recv_timeout(Duration::from_millis(500));
                *self.done.lock().expect("done") = Some(rx);
            }
        }
        Ok(())
    }
}

fn race(level: Level, layout: Option<&str>, n: usize, mode: SyncMode) {
    let dir = TempDir::new("rk-syncrace").expect("temp dir");
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    if let Some(l) = layout {
        o.layout = Some(names::parse_layout(level, l).expect("layout"));
    }
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 << 10);
    }
    o.create_size = Some(4 << 20);
    o.name = "race".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    arr.write(0, &[0x11; 4096]).expect("old data");
    arr.stop().expect("stop");

    let trig = Arc::new(Hooked::new(
        FileDev::open(&ps[0], true).expect("open m0"),
        Trigger {
            armed: AtomicBool::new(false),
            array: OnceLock::new(),
            done: Mutex::new(None),
        },
    ));
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
    trig.armed.store(true, Ordering::SeqCst);
    let sopts = sync::SyncOptions {
        full: true,
        window: Some((0, 2048)),
        ..Default::default()
    };
    sync::run_opts(&arr, mode, &sopts, &mut |_, _| {}).expect("sync pass");
    assert!(
        !trig.armed.load(Ordering::SeqCst),
        "the sync never read member 0"
    );
    if let Some(rx) = trig.done.lock().expect("done").take() {
        let _ = rx.recv_timeout(Duration::from_secs(30));
    }
    // Every copy of the first 4 KiB holds the client's write.
    assert_consistent(&arr, &format!("{level} {mode:?}: copies disagree"));
    let mut got = vec![0u8; 4096];
    arr.read(0, &mut got).expect("read back");
    assert!(
        got.iter().all(|&b| b == NEW),
        "{level} {mode:?}: the client write was undone"
    );
}

#[test]
fn resync_and_repair_never_undo_a_concurrent_write() {
    for mode in [SyncMode::Resync, SyncMode::Repair] {
        race(Level::Raid1, None, 2, mode);
        race(Level::Raid10, Some("n2"), 2, mode);
    }
}
