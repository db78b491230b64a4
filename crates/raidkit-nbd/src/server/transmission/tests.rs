//! The read turn in a running server: short requests keep it (no hand-off per request),
//! and a request stuck in the backend does not hold up the ones behind it.

use crate::client::{Client, ClientOptions};
use crate::server::{Export, Listen, Server, ServerConfig};
use crate::{Backend, MemBackend};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Reads at `GATED` wait until the gate opens (at most 20 s); everything else is a
/// [`MemBackend`].
struct Gated {
    mem: MemBackend,
    open: Mutex<bool>,
    opened: Condvar,
}

const GATED: u64 = 64 << 10;

impl Gated {
    fn open(&self) {
        *crate::util::lock(&self.open) = true;
        self.opened.notify_all();
    }
}

impl Backend for Gated {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if offset == GATED {
            let g = crate::util::lock(&self.open);
            let _ = self
                .opened
                .wait_timeout_while(g, Duration::from_secs(20), |open| !*open);
        }
        self.mem.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> io::Result<()> {
        self.mem.write(offset, buf, fua)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool) -> io::Result<()> {
        self.mem.write_zeroes(offset, len, no_hole)
    }
    fn block_sizes(&self) -> (u32, u32, u32) {
        self.mem.block_sizes()
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn can_fast_zero(&self) -> bool {
        false
    }
    fn description(&self) -> String {
        "gated".into()
    }
}

struct Fixture {
    _dir: TempDir,
    server: Arc<super::super::Shared>,
    handle: crate::ShutdownHandle,
    backend: Arc<Gated>,
    client: Arc<Client>,
}

fn fixture(tag: &str, workers: usize) -> Fixture {
    let dir = TempDir::new(&format!("rk-turn-{tag}")).expect("a temporary directory");
    let path = dir.path().join("s.sock");
    let backend = Arc::new(Gated {
        mem: MemBackend::new(1 << 20, false),
        open: Mutex::new(false),
        opened: Condvar::new(),
    });
    let mut cfg = ServerConfig::new(vec![Export {
        name: "disk".into(),
        description: String::new(),
        backend: backend.clone() as Arc<dyn Backend>,
    }]);
    cfg.workers = workers;
    let server = Server::bind(cfg, &Listen::Unix(path.clone())).expect("bind");
    let shared = Arc::clone(&server.shared);
    let (handle, _join) = server.spawn();
    let uri = format!("nbd+unix:///disk?socket={}", path.display());
    let client = Client::connect(&uri, &ClientOptions::default()).expect("connect");
    Fixture {
        _dir: dir,
        server: shared,
        handle,
        backend,
        client: Arc::new(client),
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.backend.open();
        self.handle.shutdown();
    }
}

/// One request at a time (QD1): the worker that read a request finds the buffer drained
/// and keeps the turn while it answers, so the next request is read by the same worker
/// without waking another. Passing the turn after every request (the old server) hands
/// it over about once per request.
#[test]
fn short_requests_keep_the_read_turn() {
    let f = fixture("keep", 4);
    let mut buf = vec![0u8; 4096];
    let n = 400u64;
    for i in 0..n {
        f.client
            .read((i % 16) * 4096, &mut buf, Duration::from_secs(10))
            .expect("read");
    }
    let handoffs = f.server.turn_wakes.load(Ordering::Relaxed);
    eprintln!("{handoffs} workers woken for the read turn in {n} requests");
    // A few wake-ups start the crew (and the guard may take a turn from a worker that was
    // preempted for a millisecond on a loaded machine).
    assert!(
        handoffs < n as usize / 4,
        "{handoffs} workers woken for the read turn in {n} sequential requests"
    );
}

/// A request stuck in the backend while its worker kept the read turn: the guard takes
/// the turn from it, so the next request is read and answered while the first is still
/// stuck.
#[test]
fn a_request_behind_a_stuck_one_is_answered() {
    let f = fixture("stuck", 4);
    let mut buf = vec![0u8; 4096];
    // Short requests first: turns are being kept, and a guard waits.
    for i in 0..50u64 {
        f.client
            .read(i * 4096 % GATED, &mut buf, Duration::from_secs(10))
            .expect("read");
    }
    let c = Arc::clone(&f.client);
    let stuck = std::thread::spawn(move || {
        let mut b = vec![0u8; 4096];
        c.read(GATED, &mut b, Duration::from_secs(30))
    });
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let behind = f.client.read(0, &mut buf, Duration::from_secs(5));
    let took = t.elapsed();
    let still_stuck = !stuck.is_finished();
    f.backend.open();
    assert!(
        behind.is_ok(),
        "the request behind a stuck one was not answered: {behind:?}"
    );
    assert!(
        still_stuck,
        "the stuck request was answered before its gate opened"
    );
    eprintln!("answered in {took:?} behind a stuck request");
    stuck
        .join()
        .expect("join")
        .expect("the stuck read, once let go");
}
