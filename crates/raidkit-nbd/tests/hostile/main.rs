//! Hostile clients against the server, with its memory and threads measured.
//!
//! The server runs in a child process (this test binary re-executed with
//! `RK_NBD_HOSTILE_CHILD` set, running only `child_server`), so `/proc/PID/status` and
//! `/proc/PID/task` are the server's alone. Each test asserts a bound that the server
//! broke before the fix it covers (see docs/ARCHITECTURE.md, raidkit-nbd).

mod child;
mod raw;

use child::{spawn, status_kib, threads, Spec, DISK};
use raidkit_nbd::proto::{self, errno, Request};
use raidkit_nbd::{Backend, Export, Listen, MemBackend, Server, ServerConfig};
use raidkit_testkit::tempdir::TempDir;
use raw::{tcp_from, Conn};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Not a test of its own: the server process of the tests below.
#[test]
fn child_server() {
    child::serve();
}

/// Requests in the flood: more than any socket buffers hold (the measured defect was
/// 75,000 over Unix; loopback TCP buffers up to ~12 MB here).
const FLOOD: u64 = 1_500_000;

/// The measured defect: READ headers of 65,024 bytes sent without ever reading a reply
/// made the server buffer every reply (4.6 GB RSS in 12 s over Unix, 1.9 GB in 2 s over
/// TCP). Now the server stops reading at its in-flight budget (32 MiB / 64 requests):
/// its memory stays bounded and the client's sends stall.
#[test]
fn read_flood_without_reading_replies_is_bounded() {
    for spec in [Spec::unix(), Spec::tcp()] {
        let tcp = spec.tcp;
        let c = spawn("flood", spec);
        let pid = c.child.id();
        let mut s = Conn::open_go(&c);
        let base = status_kib(pid, "VmRSS:");
        let mut w = s.try_clone();
        w.set_timeout(Duration::from_millis(200));
        let sent = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (sent, stop) = (Arc::clone(&sent), Arc::clone(&stop));
            thread::spawn(move || {
                let mut pending = Vec::new();
                for i in 0..FLOOD {
                    let off = (i * 65024) % (DISK as u64 - 65024);
                    pending.extend_from_slice(&proto::encode_request(&Request {
                        flags: 0,
                        typ: proto::CMD_READ,
                        cookie: i,
                        offset: off,
                        len: 65024,
                    }));
                }
                let mut at = 0;
                while at < pending.len() && !stop.load(Ordering::Relaxed) {
                    match w.write(&pending[at..]) {
                        Ok(n) => at += n,
                        Err(_) => continue,
                    }
                    sent.store((at / proto::REQUEST_LEN) as u64, Ordering::Relaxed);
                }
            })
        };
        // Watch the server for 3 s (it grew by gigabytes in that time before).
        let limit_kib = 64 << 10;
        let start = Instant::now();
        let mut peak = 0;
        while start.elapsed() < Duration::from_secs(3) {
            peak = peak.max(status_kib(pid, "VmRSS:").saturating_sub(base));
            if peak > limit_kib {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        let hwm = status_kib(pid, "VmHWM:").saturating_sub(base);
        let n = sent.load(Ordering::Relaxed);
        eprintln!("flood (tcp={tcp}): {n} requests sent, RSS +{peak} KiB, peak +{hwm} KiB");
        assert!(
            peak < limit_kib && hwm < limit_kib,
            "server memory grew by {peak} KiB (peak {hwm} KiB) under a read flood"
        );
        assert!(
            n < FLOOD,
            "the server kept reading a client that reads nothing"
        );
        // The connection still works once the client reads: the first replies are intact.
        s.set_timeout(Duration::from_secs(20));
        let (e, cookie, d) = s.simple_reply(65024);
        assert_eq!((e, d.len()), (0, 65024));
        assert!(cookie < n);
    }
}

/// Slowloris: clients that send one byte at a time never finish the handshake. Beyond
/// the handshake slots they are closed at once; the others are dropped at the deadline;
/// a client already transmitting is served all along, and a new one gets in after.
#[test]
fn slowloris_dropped_at_handshake_deadline() {
    let spec = Spec::unix()
        .set("hs", 16)
        .set("hs_ms", 2000)
        .set("peer", 100)
        .set("conns", 100);
    let c = spawn("slow", spec);
    let mut good = Conn::open_go(&c);
    // One round trip: the server frees the handshake slot after it sends the GO reply, so
    // only once a request is answered is `good` surely out of the handshake slots.
    good.request(proto::CMD_READ, 0, 0, 4096);
    assert_eq!(good.simple_reply(4096).0, 0);
    let started = Instant::now();
    let slow: Vec<Conn> = (0..40).map(|_| Conn::open(&c)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Each slow client: read the greeting when it comes, then a byte every 300 ms.
    let handles: Vec<_> = slow
        .into_iter()
        .map(|mut s| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || -> Option<Duration> {
                s.set_timeout(Duration::from_millis(300));
                let junk = proto::option_request(proto::OPT_LIST, &[]);
                let mut bytes = 3u32.to_be_bytes().to_vec();
                bytes.extend(junk.iter().cycle().take(100));
                let mut b = [0u8; 64];
                for byte in bytes {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    match s.read(&mut b) {
                        Ok(0) => return Some(started.elapsed()),
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                            return Some(started.elapsed())
                        }
                        _ => {}
                    }
                    if s.write_all(&[byte]).is_err() {
                        return Some(started.elapsed());
                    }
                }
                None
            })
        })
        .collect();
    // The transmitting client is served during the storm.
    for i in 0..20u64 {
        let t = Instant::now();
        good.request(proto::CMD_READ, i, i * 4096, 4096);
        assert_eq!(good.simple_reply(4096).0, 0);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "read took {:?}",
            t.elapsed()
        );
        thread::sleep(Duration::from_millis(100));
    }
    let mut closed: Vec<Duration> = Vec::new();
    for h in handles {
        match h.join().unwrap() {
            Some(at) => closed.push(at),
            None => panic!("a slow client was never dropped"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    closed.sort();
    eprintln!("slow clients dropped at {closed:?}");
    let at_once = closed
        .iter()
        .filter(|d| **d < Duration::from_millis(1500))
        .count();
    assert_eq!(
        at_once,
        40 - 16,
        "clients beyond the 16 handshake slots close at once"
    );
    for d in &closed[at_once..] {
        assert!(
            *d >= Duration::from_millis(1900) && *d < Duration::from_secs(5),
            "dropped at {d:?}, deadline 2 s"
        );
    }
    // A new client gets in once the slow ones are gone.
    let mut late = Conn::open_go(&c);
    late.request(proto::CMD_READ, 1, 0, 512);
    assert_eq!(late.simple_reply(512).0, 0);
}

/// 3,000 idle connections made 3,006 threads. Now connections are capped (64 by
/// default), handshakes too (16), worker threads beyond each connection's first too
/// (here 100), and a transmitting connection keeps one thread once idle (workers start
/// with requests and stop after 2 idle seconds).
#[test]
fn many_connections_keep_threads_bounded() {
    let spec = Spec::unix()
        .set("peer", 1000)
        .set("hs_ms", 30_000)
        .set("extra_workers", 100);
    let c = spawn("many", spec);
    let pid = c.child.id();
    let base = threads(pid);
    // 60 clients in transmission, each with a burst of 32 reads in flight.
    let mut busy: Vec<Conn> = (0..60).map(|_| Conn::open_go(&c)).collect();
    for s in busy.iter_mut() {
        for i in 0..32u64 {
            s.request(proto::CMD_READ, i, i * 65536, 65536);
        }
    }
    for s in busy.iter_mut() {
        for _ in 0..32 {
            assert_eq!(s.simple_reply(65536).0, 0);
        }
    }
    // 300 more that connect and say nothing.
    let idle: Vec<Conn> = (0..300).map(|_| Conn::open(&c)).collect();
    thread::sleep(Duration::from_millis(500));
    let during = threads(pid);
    eprintln!("threads: {base} at start, {during} with 360 clients");
    assert!(
        during <= base + 64 + 100 + 16,
        "{during} threads for 64 connections, 100 extra workers, 16 handshakes at most"
    );
    // Idle: extra workers stop within their 2 s; one thread per connection remains.
    let t = Instant::now();
    let settled = loop {
        let n = threads(pid);
        if n <= base + 64 + 2 || t.elapsed() > Duration::from_secs(10) {
            break n;
        }
        thread::sleep(Duration::from_millis(100));
    };
    eprintln!("threads once idle: {settled}");
    assert!(
        settled <= base + 64 + 2,
        "{settled} threads for 64 idle connections"
    );
    // The idle ones beyond the limit were closed.
    let refused = idle
        .into_iter()
        .filter_map(|mut s| s.closed_within(Duration::from_millis(100)).then_some(()))
        .count();
    assert!(
        refused >= 300 - 4 - 16,
        "only {refused} of 300 excess clients closed"
    );
    drop(busy);
}

/// One peer may hold 8 connections (default); the next is told why in
/// `NBD_REP_ERR_POLICY`, and another peer still gets in.
#[test]
fn connections_per_peer_are_limited() {
    let c = spawn("peer", Spec::tcp());
    let port = c.addr.rsplit(':').next().unwrap();
    let to = format!("127.0.0.1:{port}");
    let mut mine: Vec<Conn> = (0..8)
        .map(|_| {
            let mut s = tcp_from([127, 0, 0, 1], &to);
            s.set_timeout(Duration::from_secs(20));
            s.hello();
            s.go(false);
            s
        })
        .collect();
    let mut ninth = tcp_from([127, 0, 0, 1], &to);
    ninth.set_timeout(Duration::from_secs(20));
    ninth.hello();
    ninth.opt(proto::OPT_GO, &proto::go_data(b"disk", &[]));
    let (t, msg) = ninth.opt_reply();
    assert_eq!(t, proto::REP_ERR_POLICY);
    let msg = String::from_utf8(msg).unwrap();
    assert!(msg.contains("maximum of 8 connections"), "{msg}");
    assert!(ninth.closed_within(Duration::from_secs(3)));
    let mut other = tcp_from([127, 0, 0, 2], &to);
    other.set_timeout(Duration::from_secs(20));
    other.hello();
    other.go(false);
    other.request(proto::CMD_READ, 7, 0, 512);
    assert_eq!(other.simple_reply(512).0, 0);
    // One of the first peer's connections closes: the peer may connect again.
    mine.pop();
    let mut again = tcp_from([127, 0, 0, 1], &to);
    again.set_timeout(Duration::from_secs(20));
    again.hello();
    again.go(false);
}

/// A transmitting client idle past the idle timeout is disconnected (when configured).
#[test]
fn idle_timeout_closes_idle_clients() {
    let c = spawn("idle", Spec::unix().set("idle_ms", 700));
    let mut s = Conn::open_go(&c);
    s.request(proto::CMD_READ, 1, 0, 512);
    assert_eq!(s.simple_reply(512).0, 0);
    let t = Instant::now();
    assert!(s.closed_within(Duration::from_secs(5)));
    assert!(
        t.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );
}

/// Under `umask 000` the socket was `srwxrwxrwx`: any local user could use the array.
#[test]
fn unix_socket_mode_ignores_umask() {
    let mut spec = Spec::unix();
    spec.umask = Some(0);
    let c = spawn("mode", spec);
    let mode = std::fs::metadata(&c.addr).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
    let mut spec = Spec::unix();
    spec.umask = Some(0o277);
    // SAFETY: getegid cannot fail.
    let gid = unsafe { libc::getegid() };
    spec.group = Some(gid);
    let c = spawn("mode-g", spec);
    let md = std::fs::metadata(&c.addr).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o660);
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&md), gid);
    // Still usable by its owner.
    let mut s = Conn::open_go(&c);
    s.request(proto::CMD_FLUSH, 1, 0, 0);
    assert_eq!(s.simple_reply(0).0, 0);
}

// ------------------------------------------------------------------ malformed input

fn in_process(tag: &str) -> (TempDir, PathBuf, raidkit_nbd::ShutdownHandle) {
    let dir = TempDir::new(&format!("rk-hostile-{tag}")).unwrap();
    let sock = dir.path().join("s.sock");
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new(DISK, false));
    let cfg = ServerConfig::new(vec![Export {
        name: "disk".into(),
        description: String::new(),
        backend: mem,
    }]);
    let (h, _) = Server::bind(cfg, &Listen::Unix(sock.clone()))
        .unwrap()
        .spawn();
    (dir, sock, h)
}

fn unix(p: &Path) -> Conn {
    let s = UnixStream::connect(p).unwrap();
    let c = Conn::Unix(s);
    c.set_timeout(Duration::from_secs(20));
    c
}

/// Malformed, oversized and abusive options get exact refusals, and the connection (or
/// at least the server) lives on.
#[test]
fn malformed_options() {
    let (_d, p, h) = in_process("opts");
    let mut c = unix(&p);
    c.hello();
    // Unknown options, and known ones with malformed data.
    for (o, data, want) in [
        (0x7fff_0000u32, &b"x"[..], proto::REP_ERR_UNSUP),
        (10, &[][..], proto::REP_ERR_UNSUP),
        (proto::OPT_LIST, &b"junk"[..], proto::REP_ERR_INVALID),
        (proto::OPT_STARTTLS, &b"x"[..], proto::REP_ERR_INVALID),
        (proto::OPT_STARTTLS, &[][..], proto::REP_ERR_POLICY),
        (
            proto::OPT_STRUCTURED_REPLY,
            &b"x"[..],
            proto::REP_ERR_INVALID,
        ),
        (
            proto::OPT_INFO,
            &[0xff, 0xff, 0xff, 0xff, 0, 0][..],
            proto::REP_ERR_INVALID,
        ),
        (
            proto::OPT_GO,
            &[0, 0, 0, 1, b'd', 0, 5, 0, 1][..],
            proto::REP_ERR_INVALID,
        ),
        (proto::OPT_GO, &[0, 0][..], proto::REP_ERR_INVALID),
    ] {
        c.opt(o, data);
        assert_eq!(c.opt_reply().0, want, "option {o} data {data:?}");
    }
    // GO for an unknown export: ERR_UNKNOWN, and the message names it.
    c.opt(proto::OPT_GO, &proto::go_data(b"nope\x01", &[]));
    let (t, msg) = c.opt_reply();
    assert_eq!(t, proto::REP_ERR_UNKNOWN);
    assert_eq!(String::from_utf8(msg).unwrap(), "no export named \"nope?\"");
    // Oversized option: drained and refused; the connection is still in step.
    c.opt(42, &vec![0xAB; 200_000]);
    assert_eq!(c.opt_reply().0, proto::REP_ERR_TOO_BIG);
    // Structured replies asked twice: fine; then GO, and replies are structured.
    for _ in 0..2 {
        c.opt(proto::OPT_STRUCTURED_REPLY, &[]);
        assert_eq!(c.opt_reply().0, proto::REP_ACK);
    }
    c.go(false);
    c.request(proto::CMD_READ, 5, 0, 0);
    let mut ch = [0u8; 20];
    c.read_exact(&mut ch).unwrap();
    assert_eq!(proto::get32(&ch, 0), proto::STRUCTURED_REPLY_MAGIC);
    assert_eq!(proto::get16(&ch, 6), proto::REPLY_TYPE_NONE);
    // Options that close: a 4 GiB length, a bad option magic, EXPORT_NAME of an
    // unknown export, unknown client flags.
    for bytes in [
        {
            let mut v = proto::IHAVEOPT.to_be_bytes().to_vec();
            v.extend_from_slice(&99u32.to_be_bytes());
            v.extend_from_slice(&u32::MAX.to_be_bytes());
            v
        },
        b"IHAVEOPX\0\0\0\x03\0\0\0\0".to_vec(),
        proto::option_request(proto::OPT_EXPORT_NAME, b"nope"),
    ] {
        let mut c = unix(&p);
        c.hello();
        c.write_all(&bytes).unwrap();
        assert!(c.closed_within(Duration::from_secs(5)));
    }
    let mut c = unix(&p);
    let mut g = [0u8; 18];
    c.read_exact(&mut g).unwrap();
    c.write_all(&0x8000_0000u32.to_be_bytes()).unwrap();
    assert!(c.closed_within(Duration::from_secs(5)));
    // Truncated headers (handshake and transmission), then hang-ups: the server lives.
    for cut in [3usize, 10, 15] {
        let mut c = unix(&p);
        c.hello();
        c.write_all(&proto::option_request(proto::OPT_LIST, &[])[..cut])
            .unwrap();
    }
    let mut c = unix(&p);
    c.hello();
    c.go(false);
    c.write_all(
        &proto::encode_request(&Request {
            flags: 0,
            typ: proto::CMD_READ,
            cookie: 1,
            offset: 0,
            len: 512,
        })[..13],
    )
    .unwrap();
    drop(c);
    let mut c = unix(&p);
    c.hello();
    c.go(false);
    c.write_all(b"\x25\x60\x95\x14 bad request magic......")
        .unwrap();
    assert!(c.closed_within(Duration::from_secs(5)));
    let mut c = unix(&p);
    c.hello();
    c.go(false);
    c.request(proto::CMD_READ, 9, 512, 512);
    assert_eq!(c.simple_reply(512).0, 0);
    h.shutdown();
}

/// Requests past the end and huge lengths are refused before anything is allocated; a
/// write whose payload is too large to drain closes the connection.
#[test]
fn requests_past_the_end_and_huge_lengths() {
    let (_d, p, h) = in_process("huge");
    let mut c = unix(&p);
    c.hello();
    c.go(false);
    let end = DISK as u64;
    for (typ, off, len, want) in [
        (proto::CMD_READ, end, 1, errno::EINVAL),
        (proto::CMD_READ, u64::MAX, 1, errno::EINVAL),
        (proto::CMD_READ, 0, u32::MAX, errno::EINVAL),
        (proto::CMD_READ, end - 512, 1024, errno::EINVAL),
        (proto::CMD_TRIM, u64::MAX - 1, u32::MAX, errno::EINVAL),
        (proto::CMD_WRITE_ZEROES, end - 1, u32::MAX, errno::ENOSPC),
        (proto::CMD_WRITE_ZEROES, u64::MAX, 1, errno::ENOSPC),
        (99, 0, u32::MAX, errno::EINVAL),
    ] {
        c.request(typ, 1, off, len);
        assert_eq!(c.simple_reply(0).0, want, "type {typ} at {off} len {len}");
    }
    c.request(proto::CMD_WRITE, 2, end - 1, 2);
    c.write_all(&[1, 2]).unwrap();
    assert_eq!(c.simple_reply(0).0, errno::ENOSPC);
    c.request(proto::CMD_READ, 3, end - 512, 512);
    assert_eq!(c.simple_reply(512).0, 0);
    c.request(proto::CMD_WRITE, 4, 0, u32::MAX);
    assert!(c.closed_within(Duration::from_secs(5)));
    h.shutdown();
}

/// WRITE headers announcing 32 MiB (the maximum payload) followed by a few bytes and
/// then nothing: the server zero-filled a 32 MiB buffer for each before its payload came
/// (8 connections of one peer: +256 MiB for 224 bytes sent). Now the buffer is filled
/// only as the payload arrives; the connections stay served once it does.
#[test]
fn stalled_write_payloads_pin_little_memory() {
    let c = spawn("stallw", Spec::unix());
    let pid = c.child.id();
    let mut conns: Vec<Conn> = (0..8).map(|_| Conn::open_go(&c)).collect();
    let base = status_kib(pid, "VmRSS:");
    for (i, s) in conns.iter_mut().enumerate() {
        s.request(proto::CMD_WRITE, i as u64, 0, 32 << 20);
        s.write_all(&[0xA5; 1000]).unwrap();
    }
    thread::sleep(Duration::from_millis(1500));
    let grown = status_kib(pid, "VmRSS:").saturating_sub(base);
    eprintln!("8 stalled 32 MiB writes: RSS +{grown} KiB");
    assert!(grown < 48 << 10, "server memory grew by {grown} KiB");
    // A payload that does arrive, whole, is written and answered.
    let s = &mut conns[0];
    s.set_timeout(Duration::from_secs(20));
    let rest = vec![0xA5u8; (32 << 20) - 1000];
    s.write_all(&rest).unwrap();
    assert_eq!(s.simple_reply(0).0, errno::ENOSPC);
    s.request(proto::CMD_WRITE, 99, 4096, 8192);
    s.write_all(&[0x5A; 8192]).unwrap();
    assert_eq!(s.simple_reply(0), (0, 99, Vec::new()));
    s.request(proto::CMD_READ, 100, 4096, 8192);
    assert_eq!(s.simple_reply(8192), (0, 100, vec![0x5A; 8192]));
}
