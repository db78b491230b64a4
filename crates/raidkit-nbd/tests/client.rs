//! The NBD client against real servers — raidkit's own (in-process), nbdkit (memory
//! and file plugins, delay filter, TLS PSK), qemu-nbd, nbd-server — and against a fake
//! server that lies. A missing tool prints SKIP and the test passes (scripts/deps.sh
//! installs them all in CI).

use raidkit_nbd::client::{Client, ClientError, ClientOptions, ClientTls, ZeroFlags};
use raidkit_nbd::proto::errno;
use raidkit_nbd::{Backend, Export, Listen, MemBackend, Server, ServerConfig, TlsConfig};
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const SIZE: usize = 8 << 20;
const T: Duration = Duration::from_secs(20);

fn tempdir(tag: &str) -> TempDir {
    TempDir::new(&format!("rk-nbdcl-{tag}")).unwrap()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    proc::xorshift_bytes(n, seed)
}

/// Wait until a server listens on `p` (the file exists from `bind`, before `listen`).
fn wait_socket(p: &Path) {
    proc::wait_for(&format!("socket {}", p.display()), 20, || {
        std::os::unix::net::UnixStream::connect(p).is_ok()
    });
}

// ------------------------------------------------------------------ servers

/// Our server, in process.
struct Ours {
    _dir: TempDir,
    sock: PathBuf,
    mem: Arc<MemBackend>,
    handle: raidkit_nbd::ShutdownHandle,
}

impl Ours {
    fn start(tag: &str, tls: Option<TlsConfig>, extra: Option<Arc<dyn Backend>>) -> Ours {
        let dir = tempdir(tag);
        let sock = dir.path().join("s.sock");
        let mem = Arc::new(
            MemBackend::new(SIZE, false)
                .with_block_sizes(512, 4096, 1 << 20)
                .with_fast_zero(false),
        );
        let mut exports = vec![
            Export {
                name: "disk".into(),
                description: "test disk".into(),
                backend: mem.clone() as Arc<dyn Backend>,
            },
            Export {
                name: "ro".into(),
                description: String::new(),
                backend: Arc::new(MemBackend::new(1 << 20, true)),
            },
        ];
        if let Some(b) = extra {
            exports.push(Export {
                name: "faulty".into(),
                description: String::new(),
                backend: b,
            });
        }
        let mut cfg = ServerConfig::new(exports);
        cfg.tls_required = tls.is_some();
        cfg.tls = tls;
        let (handle, _) = Server::bind(cfg, &Listen::Unix(sock.clone()))
            .unwrap()
            .spawn();
        Ours {
            _dir: dir,
            sock,
            mem,
            handle,
        }
    }
    fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// An external server process, killed on drop.
struct Ext {
    child: Child,
    _dir: TempDir,
    dir: PathBuf,
    sock: PathBuf,
}

impl Ext {
    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }
    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid(), sig) };
    }
    fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }
    /// SIGSTOP, and wait until every thread is stopped (delivery is asynchronous).
    fn stop(&self) {
        self.signal(libc::SIGSTOP);
        proc::wait_for("the server to stop", 20, || {
            std::fs::read_dir(format!("/proc/{}/task", self.pid()))
                .unwrap()
                .all(|t| {
                    let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap();
                    // The state follows the parenthesised command name.
                    stat.rsplit(") ").next().is_some_and(|r| r.starts_with('T'))
                })
        });
    }
}

impl Drop for Ext {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `nbdkit -U SOCK -f ARGS...` (None after SKIP).
fn nbdkit(tag: &str, args: &[&str]) -> Option<Ext> {
    let bin = proc::system_tool("nbdkit", tag)?;
    let d = tempdir(tag);
    let dir = d.path().to_path_buf();
    let sock = dir.join("k.sock");
    // nbdkit writes its pid file once it accepts connections.
    let pidfile = dir.join("k.pid");
    let child = Command::new(bin)
        .arg("-U")
        .arg(&sock)
        .arg("-P")
        .arg(&pidfile)
        .args(["-f", "--exit-with-parent"])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    proc::wait_for("nbdkit's pid file", 20, || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    Some(Ext {
        child,
        _dir: d,
        dir,
        sock,
    })
}

fn opts() -> ClientOptions {
    ClientOptions::default()
}

fn connect(uri: &str) -> Client {
    Client::connect(uri, &opts()).unwrap_or_else(|e| panic!("connecting to {uri}: {e}"))
}

/// Write, read back, FUA, flush, trim, write zeroes: exact bytes through `c`.
fn round_trips(c: &Client, seed: u32) {
    let size = c.info().size;
    let a = pattern(3 * 65536 + 512, seed);
    c.write(4096, &a, false, T).unwrap();
    let mut back = vec![0u8; a.len()];
    c.read(4096, &mut back, T).unwrap();
    assert!(back == a, "read back differs");
    let b = pattern(8192, seed + 1);
    c.write(size - 8192, &b, true, T).unwrap();
    c.flush(T).unwrap();
    let mut back = vec![0u8; 8192];
    c.read(size - 8192, &mut back, T).unwrap();
    assert!(back == b);
    if c.info().can_trim() {
        c.trim(1 << 20, 65536, false, T).unwrap();
    }
    if c.info().can_write_zeroes() {
        c.write_zeroes(4096 + 512, 4096, ZeroFlags::default(), T)
            .unwrap();
        let mut back = vec![1u8; 8192];
        c.read(4096, &mut back, T).unwrap();
        assert_eq!(&back[..512], &a[..512]);
        assert!(back[512..4608].iter().all(|&x| x == 0));
        assert_eq!(&back[4608..], &a[4608..8192]);
    }
    let mut end = [0u8; 1];
    assert!(matches!(
        c.read(size, &mut end, T),
        Err(ClientError::InvalidRequest(_))
    ));
}

// ------------------------------------------------------------------ our server

/// A backend failing reads and writes in its second MiB with EIO.
struct Faulty(MemBackend);

impl Backend for Faulty {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if (1 << 20..2 << 20).contains(&offset) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.0.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> io::Result<()> {
        if (1 << 20..2 << 20).contains(&offset) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.0.write(offset, buf, fua)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, o: u64, l: u64, n: bool) -> io::Result<()> {
        self.0.write_zeroes(o, l, n)
    }
    fn block_sizes(&self) -> (u32, u32, u32) {
        (512, 4096, 1 << 20)
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
}

#[test]
fn ours_round_trips_errors_and_splits() {
    let faulty = Arc::new(Faulty(MemBackend::new(4 << 20, false)));
    let s = Ours::start("ours", None, Some(faulty));
    for structured in [true, false] {
        let o = ClientOptions {
            structured_replies: structured,
            ..opts()
        };
        let c = Client::connect(&s.uri("disk"), &o).unwrap();
        let i = c.info();
        assert_eq!(
            (i.size, i.structured, i.tls),
            (SIZE as u64, structured, false)
        );
        assert_eq!(
            (i.min_block, i.preferred_block, i.max_block),
            (512, 4096, 1 << 20)
        );
        assert_eq!(
            i.description.as_deref(),
            None,
            "description is not asked for"
        );
        assert!(i.can_flush() && i.can_fua() && i.can_trim() && i.can_write_zeroes());
        let flushes = s.mem.flushes.load(Ordering::SeqCst);
        round_trips(&c, 1);
        assert!(s.mem.flushes.load(Ordering::SeqCst) >= flushes + 2);
        assert_eq!(&s.mem.contents()[4096..4096 + 512], &pattern(512, 1)[..]);
        // 3 MiB: three requests of the server's 1 MiB maximum, all in flight at once.
        let big = pattern(3 << 20, 9);
        let before = c.stats().requests;
        c.write(512, &big, false, T).unwrap();
        let mut back = vec![0u8; big.len()];
        c.read(512, &mut back, T).unwrap();
        assert!(back == big);
        assert_eq!(c.stats().requests - before, 6);
        // One thread sends: it never waits for its turn to write, so no sender ever wakes
        // another (a wake-up is a system call even with nobody waiting).
        assert_eq!(c.stats().writer_wakeups, 0);
        // Server errors carry the errno (and the message, with structured replies).
        let f = Client::connect(&s.uri("faulty"), &o).unwrap();
        let mut b = vec![0u8; 4096];
        match f.read(1 << 20, &mut b, T) {
            Err(ClientError::Server { errno: e, message }) => {
                assert_eq!(e, errno::EIO);
                assert_eq!(message.is_empty(), !structured, "{message}");
            }
            r => panic!("{r:?}"),
        }
        let e = f.write(1 << 20, &b, false, T).unwrap_err();
        assert_eq!(e.errno(), Some(errno::ENOSPC));
        // The connection goes on after server errors.
        f.read(0, &mut b, T).unwrap();
        assert!(f.broken().is_none());
        // Read-only export.
        let ro = Client::connect(&s.uri("ro"), &o).unwrap();
        assert!(ro.info().read_only());
        assert!(matches!(
            ro.write(0, &b, false, T),
            Err(ClientError::Unsupported(_))
        ));
    }
    // Unknown export: the server's refusal, with its message.
    match Client::connect(&s.uri("nope"), &opts()) {
        Err(ClientError::Refused { reply, message, .. }) => {
            assert_eq!(reply, "NBD_REP_ERR_UNKNOWN");
            assert!(message.contains("nope"), "{message}");
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn many_threads_many_requests_in_flight() {
    let s = Ours::start("threads", None, None);
    let c = Arc::new(connect(&s.uri("disk")));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..8u32)
        .map(|t| {
            let (c, done) = (Arc::clone(&c), Arc::clone(&done));
            thread::spawn(move || {
                // Each thread owns a 1 MiB region: writes then reads back, 100 times.
                let base = u64::from(t) << 20;
                for i in 0..100u32 {
                    let len = 512 * (1 + (i as usize * 7 + t as usize) % 64);
                    let off = base + u64::from((i * 4096) % ((1 << 20) - 32768));
                    let data = pattern(len, t * 1000 + i);
                    c.write(off, &data, i % 10 == 0, T).unwrap();
                    let mut back = vec![0u8; len];
                    c.read(off, &mut back, T).unwrap();
                    assert!(back == data, "thread {t} op {i}");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(done.load(Ordering::Relaxed), 800);
    assert!(c.stats().requests >= 1600);
}

fn make_psk(dir: &Path) -> PathBuf {
    let p = dir.join("keys.psk");
    std::fs::write(&p, "alice:0123456789abcdef0123456789abcdef\n").unwrap();
    p
}

#[test]
fn tls_psk_and_x509_with_our_server() {
    let d = tempdir("tls");
    let psk = make_psk(d.path());
    let s = Ours::start("tlsp", Some(TlsConfig::from_psk_file(&psk).unwrap()), None);
    let uri = format!(
        "nbds+unix://alice@/disk?socket={}&tls-psk-file={}",
        s.sock.display(),
        psk.display()
    );
    let c = connect(&uri);
    assert!(c.info().tls);
    round_trips(&c, 5);
    // Without TLS the server refuses; a wrong key fails the TLS handshake.
    match Client::connect(&s.uri("disk"), &opts()) {
        Err(ClientError::Refused { reply, .. }) => assert_eq!(reply, "NBD_REP_ERR_TLS_REQD"),
        r => panic!("{r:?}"),
    }
    let bad = d.path().join("bad.psk");
    std::fs::write(&bad, "alice:00000000000000000000000000000000\n").unwrap();
    let o = ClientOptions {
        tls: Some(ClientTls::psk_from_file(&bad, "alice").unwrap()),
        ..opts()
    };
    assert!(matches!(
        Client::connect(&uri, &o),
        Err(ClientError::Tls(_) | ClientError::Disconnected(_))
    ));
    // X.509: a self-signed certificate as its own CA, checked against tls-hostname.
    let Some(openssl) = proc::system_tool("openssl", "x509") else {
        return;
    };
    let (cert, key) = (d.path().join("ca-cert.pem"), d.path().join("key.pem"));
    proc::self_signed_cert(&openssl, &cert, &key, &[]);
    let s = Ours::start(
        "tlsx",
        Some(TlsConfig::from_x509(&cert, &key).unwrap()),
        None,
    );
    let base = format!(
        "nbds+unix:///disk?socket={}&tls-certificates={}",
        s.sock.display(),
        d.path().display()
    );
    let c = connect(&format!("{base}&tls-hostname=localhost"));
    round_trips(&c, 6);
    // The wrong name is refused; without verification it is accepted.
    assert!(matches!(
        Client::connect(&format!("{base}&tls-hostname=example.org"), &opts()),
        Err(ClientError::Tls(_))
    ));
    connect(&format!(
        "{base}&tls-hostname=example.org&tls-verify-peer=false"
    ));
}

// ------------------------------------------------------------------ other servers

#[test]
fn nbdkit_memory_sparse_reads_and_tls() {
    let Some(k) = nbdkit("kmem", &["memory", "size=64M"]) else {
        return;
    };
    let c = connect(&k.uri(""));
    assert_eq!(c.info().size, 64 << 20);
    assert!(c.info().structured);
    round_trips(&c, 11);
    // A read over written data and untouched (sparse) space.
    let data = pattern(4096, 12);
    c.write(32 << 20, &data, false, T).unwrap();
    let mut back = vec![7u8; 4 << 20];
    c.read((32 << 20) - (1 << 20), &mut back, T).unwrap();
    assert!(back[..1 << 20].iter().all(|&x| x == 0));
    assert_eq!(&back[1 << 20..(1 << 20) + 4096], &data[..]);
    assert!(back[(1 << 20) + 4096..].iter().all(|&x| x == 0));
    eprintln!("nbdkit memory: {:?}", c.stats());
    drop(c);
    // TLS PSK against nbdkit (GnuTLS).
    let d = tempdir("kpsk");
    let psk = make_psk(d.path());
    let psk_arg = format!("--tls-psk={}", psk.display());
    let Some(k) = nbdkit("kpsk", &["--tls=require", &psk_arg, "memory", "size=16M"]) else {
        return;
    };
    let uri = format!(
        "nbds+unix://alice@/?socket={}&tls-psk-file={}",
        k.sock.display(),
        psk.display()
    );
    let c = connect(&uri);
    assert!(c.info().tls);
    round_trips(&c, 13);
    drop((c, k));
    // X.509 against nbdkit: a self-signed certificate as CA and server certificate.
    let Some(openssl) = proc::system_tool("openssl", "x509") else {
        return;
    };
    let certs = d.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let (cert, key) = (certs.join("server-cert.pem"), certs.join("server-key.pem"));
    proc::self_signed_cert(&openssl, &cert, &key, &[]);
    std::fs::copy(certs.join("server-cert.pem"), certs.join("ca-cert.pem")).unwrap();
    let arg = format!("--tls-certificates={}", certs.display());
    let Some(k) = nbdkit("kx509", &["--tls=require", &arg, "memory", "size=16M"]) else {
        return;
    };
    let uri = format!(
        "nbds+unix:///?socket={}&tls-certificates={}&tls-hostname=localhost",
        k.sock.display(),
        certs.display()
    );
    let c = connect(&uri);
    assert!(c.info().tls);
    round_trips(&c, 14);
}

#[test]
fn qemu_nbd_sparse_file() {
    let Some(q) = proc::system_tool("qemu-nbd", "qemu-nbd") else {
        return;
    };
    let d = tempdir("qemu");
    let img = d.path().join("disk.img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(SIZE as u64).unwrap();
    drop(f);
    let sock = d.path().join("q.sock");
    let child = Command::new(q)
        .args(["-k", sock.to_str().unwrap(), "-f", "raw", "-x", "q", "-t"])
        .arg(&img)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_socket(&sock);
    let q = Ext {
        child,
        dir: d.path().to_path_buf(),
        _dir: d,
        sock,
    };
    let c = connect(&q.uri("q"));
    round_trips(&c, 21);
    let mut back = vec![9u8; 2 << 20];
    c.read(4 << 20, &mut back, T).unwrap();
    assert!(back.iter().all(|&x| x == 0));
    eprintln!("qemu-nbd: {:?}", c.stats());
    assert!(
        c.stats().hole_chunks > 0,
        "qemu-nbd sends holes for a sparse file"
    );
    drop(c);
    let disk = std::fs::read(q.dir.join("disk.img")).unwrap();
    assert_eq!(&disk[4096..4096 + 512], &pattern(512, 21)[..]);
}

#[test]
fn nbd_server_round_trip() {
    let Some(bin) = proc::system_tool("nbd-server", "nbd-server") else {
        return;
    };
    let d = tempdir("nbdsrv");
    let img = d.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(SIZE as u64)
        .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let conf = d.path().join("config");
    std::fs::write(
        &conf,
        format!(
            "[generic]\nlistenaddr = 127.0.0.1\nport = {port}\nallowlist = true\n[disk]\nexportname = {}\nflush = true\nfua = true\ntrim = true\n",
            img.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin)
        .args(["-C", conf.to_str().unwrap(), "-d"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let uri = format!("nbd://127.0.0.1:{port}/disk");
    let start = Instant::now();
    let c = loop {
        match Client::connect(&uri, &opts()) {
            Ok(c) => break c,
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("nbd-server: {e}"),
        }
    };
    round_trips(&c, 31);
    drop(c);
    let _ = child.kill();
    let _ = child.wait();
    let disk = std::fs::read(&img).unwrap();
    assert_eq!(&disk[4096..4096 + 512], &pattern(512, 31)[..]);
}

// ------------------------------------------------------------------ deadlines

/// Slack allowed past a deadline on a loaded machine.
const SLACK: Duration = Duration::from_millis(1500);

fn within(start: Instant, deadline: Duration) {
    let el = start.elapsed();
    assert!(
        el >= deadline && el < deadline + SLACK,
        "returned after {el:?} for a {deadline:?} deadline"
    );
}

#[test]
fn deadline_on_a_slow_server_fails_everything_in_flight() {
    let Some(k) = nbdkit(
        "kdelay",
        &["--filter=delay", "memory", "size=16M", "rdelay=4"],
    ) else {
        return;
    };
    let c = Arc::new(connect(&k.uri("")));
    // A write (no delay) works.
    c.write(0, &[1u8; 512], false, T).unwrap();
    // A second read in flight with a longer deadline fails too when the first times out.
    let c2 = Arc::clone(&c);
    let other = thread::spawn(move || {
        let mut b = vec![0u8; 512];
        c2.read(512, &mut b, Duration::from_secs(30))
    });
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let mut b = vec![0u8; 512];
    let d = Duration::from_millis(800);
    match c.read(0, &mut b, d) {
        Err(ClientError::Timeout { after, .. }) => assert_eq!(after, d),
        r => panic!("{r:?}"),
    }
    within(start, d);
    let r = other.join().unwrap();
    assert!(matches!(r, Err(ClientError::Disconnected(_))), "{r:?}");
    assert!(start.elapsed() < d + SLACK);
    // Later requests fail at once; a new connection works.
    assert!(matches!(c.flush(T), Err(ClientError::Disconnected(_))));
    assert!(c.broken().is_some());
    let again = connect(&k.uri(""));
    again.write(4096, &[2u8; 512], false, T).unwrap();
}

#[test]
fn stopped_server_never_blocks_past_the_deadline() {
    let Some(k) = nbdkit("kstop", &["memory", "size=64M"]) else {
        return;
    };
    let reader = connect(&k.uri(""));
    let writer = connect(&k.uri(""));
    k.stop();
    let d = Duration::from_millis(800);
    // A read gets no reply.
    let start = Instant::now();
    let mut b = vec![0u8; 4096];
    assert!(reader.read(0, &mut b, d).unwrap_err().is_timeout());
    within(start, d);
    // A large write blocks on a full socket.
    let big = vec![5u8; 32 << 20];
    let start = Instant::now();
    assert!(writer.write(0, &big, false, d).unwrap_err().is_timeout());
    within(start, d);
    // Connecting: the kernel accepts, the greeting never comes.
    let o = ClientOptions {
        connect_timeout: d,
        ..opts()
    };
    let start = Instant::now();
    match Client::connect(&k.uri(""), &o) {
        Err(ClientError::Timeout { .. }) => {}
        r => panic!("{r:?}"),
    }
    within(start, d);
    k.signal(libc::SIGCONT);
}

#[test]
fn server_killed_mid_request() {
    let Some(mut k) = nbdkit(
        "kkill",
        &["--filter=delay", "memory", "size=16M", "rdelay=10"],
    ) else {
        return;
    };
    let c = Arc::new(connect(&k.uri("")));
    let c2 = Arc::clone(&c);
    let start = Instant::now();
    let t = thread::spawn(move || {
        let mut b = vec![0u8; 4096];
        c2.read(0, &mut b, Duration::from_secs(30))
    });
    thread::sleep(Duration::from_millis(300));
    k.child.kill().unwrap();
    let r = t.join().unwrap();
    assert!(matches!(r, Err(ClientError::Disconnected(_))), "{r:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let _ = k.child.wait();
}

/// A write sent to a stopped server is carried out when it resumes, even though the
/// client gave up on it: the client says when that can no longer happen (the server has
/// closed the lost connection), and not before.
#[test]
fn a_lost_connection_is_closed_only_after_the_server_ran_what_it_read() {
    // One nbdkit worker: it runs the write it read before it reads the client's end of
    // input. With several, one may see the end first, and nbdkit then answers the write
    // with an error without running it (whether it lands is a race inside nbdkit; what
    // the client must get right is only when it can no longer land).
    let Some(k) = nbdkit("klost", &["--threads", "1", "memory", "size=16M"]) else {
        return;
    };
    let c = connect(&k.uri(""));
    k.stop();
    let d = Duration::from_millis(500);
    assert!(c.write(0, &[7u8; 4096], false, d).unwrap_err().is_timeout());
    assert!(c.broken().is_some());
    // Still stopped: the request sits unread in its socket.
    assert!(!c.wait_server_closed(Instant::now() + Duration::from_millis(300)));
    k.signal(libc::SIGCONT);
    assert!(c.wait_server_closed(Instant::now() + Duration::from_secs(10)));
    // It ran the write before it closed.
    let again = connect(&k.uri(""));
    let mut b = vec![0u8; 4096];
    again.read(0, &mut b, T).unwrap();
    assert_eq!(b, vec![7u8; 4096]);
}
