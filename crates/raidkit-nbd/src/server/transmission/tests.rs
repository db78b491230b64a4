//! Slow-request isolation in a running server: a request stuck in the backend does not
//! hold up the ones behind it, whether they arrive after it (queue depth 1) or with it
//! (buffered together). Guards for any change to how workers take the read turn (the
//! `hand-turn` experiment kept the turn while processing short requests, under a guard:
//! these tests bound what that guard must do).

use crate::client::{Client, ClientOptions};
use crate::proto;
use crate::server::{Export, Listen, Server, ServerConfig};
use crate::{Backend, MemBackend};
use raidkit_testkit::tempdir::TempDir;
use std::io;
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
    path: std::path::PathBuf,
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
    let (handle, _join) = server.spawn();
    let uri = format!("nbd+unix:///disk?socket={}", path.display());
    let client = Client::connect(&uri, &ClientOptions::default()).expect("connect");
    Fixture {
        _dir: dir,
        path,
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

/// A request stuck in the backend: the next request, sent after it, is read and
/// answered while the first is still stuck.
#[test]
fn a_request_behind_a_stuck_one_is_answered() {
    let f = fixture("stuck", 4);
    let mut buf = vec![0u8; 4096];
    // Short requests first (a crew of workers is running).
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

/// A raw connection (fixed newstyle, NBD_OPT_EXPORT_NAME, no zeroes) to `disk`.
fn raw(f: &Fixture) -> std::os::unix::net::UnixStream {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(&f.path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello).expect("greeting");
    s.write_all(&3u32.to_be_bytes()).expect("flags");
    let mut opt = Vec::new();
    opt.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
    opt.extend_from_slice(&proto::OPT_EXPORT_NAME.to_be_bytes());
    opt.extend_from_slice(&4u32.to_be_bytes());
    opt.extend_from_slice(b"disk");
    s.write_all(&opt).expect("export name");
    let mut info = [0u8; 10];
    s.read_exact(&mut info).expect("export info");
    s
}

fn read_request(cookie: u64, offset: u64) -> [u8; proto::REQUEST_LEN] {
    proto::encode_request(&proto::Request {
        flags: 0,
        typ: proto::CMD_READ,
        cookie,
        offset,
        len: 4096,
    })
}

/// Two requests arrive together (one `recv` buffers both), the first stuck in the
/// backend: the second is answered while the first is still stuck.
#[test]
fn a_buffered_request_behind_a_stuck_one_is_answered() {
    use std::io::{Read, Write};
    let f = fixture("pipelined", 4);
    let mut s = raw(&f);
    // Short requests first, in pairs (buffered together).
    for i in 0..50u64 {
        let mut two = read_request(2 * i, 0).to_vec();
        two.extend_from_slice(&read_request(2 * i + 1, 4096));
        s.write_all(&two).expect("requests");
        let mut r = vec![0u8; 2 * (16 + 4096)];
        s.read_exact(&mut r).expect("replies");
    }
    let mut two = read_request(1000, GATED).to_vec();
    two.extend_from_slice(&read_request(1001, 0));
    let t = Instant::now();
    s.write_all(&two).expect("requests");
    let mut r = vec![0u8; 16 + 4096];
    let got = s.read_exact(&mut r);
    let took = t.elapsed();
    f.backend.open();
    assert!(
        got.is_ok(),
        "no reply while the first request was stuck: {got:?}"
    );
    let cookie = u64::from_be_bytes(r[8..16].try_into().expect("8 bytes"));
    assert_eq!(
        cookie, 1001,
        "the request behind the stuck one answered first"
    );
    eprintln!("answered in {took:?} behind a stuck request");
    s.read_exact(&mut r)
        .expect("the stuck request's reply, once let go");
    assert_eq!(
        u64::from_be_bytes(r[8..16].try_into().expect("8 bytes")),
        1000
    );
}
