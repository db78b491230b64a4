//! Wire-level protocol tests against an in-memory backend, with a minimal client written
//! here (exact bytes), including hostile input.

use raidkit_nbd::proto::{self, errno, Request};
use raidkit_nbd::{Backend, Export, Listen, MemBackend, Server, ServerConfig};
use raidkit_testkit::tempdir::TempDir;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const SIZE: usize = 4 << 20;

struct Fixture {
    path: PathBuf,
    _dir: TempDir,
    mem: Arc<MemBackend>,
    ro: Arc<MemBackend>,
    handle: raidkit_nbd::ShutdownHandle,
    join: Option<std::thread::JoinHandle<Result<(), raidkit_nbd::NbdError>>>,
}

fn tempdir(tag: &str) -> TempDir {
    TempDir::new(&format!("rk-nbd-{tag}")).expect("create a temporary directory")
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let dir = tempdir(tag);
        let path = dir.path().join("s.sock");
        let mem = Arc::new(MemBackend::new(SIZE, false).with_fast_zero(false));
        let ro = Arc::new(MemBackend::new(1 << 20, true));
        let cfg = ServerConfig::new(vec![
            Export {
                name: "disk".into(),
                description: "test disk".into(),
                backend: mem.clone() as Arc<dyn Backend>,
            },
            Export {
                name: "ro".into(),
                description: String::new(),
                backend: ro.clone() as Arc<dyn Backend>,
            },
        ]);
        let server = Server::bind(cfg, &Listen::Unix(path.clone())).unwrap();
        let (handle, join) = server.spawn();
        Fixture {
            path,
            _dir: dir,
            mem,
            ro,
            handle,
            join: Some(join),
        }
    }
    fn stop(&mut self) {
        self.handle.shutdown();
        if let Some(j) = self.join.take() {
            j.join().unwrap().unwrap();
        }
    }
}
impl Drop for Fixture {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

struct Client {
    s: UnixStream,
    structured: bool,
}

fn rd<const N: usize>(s: &mut UnixStream) -> [u8; N] {
    let mut b = [0u8; N];
    s.read_exact(&mut b).unwrap();
    b
}

fn u32be(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

impl Client {
    /// Connect and do the greeting; returns the handshake flags.
    fn hello(path: &PathBuf) -> (Client, u16) {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let g: [u8; 18] = rd(&mut s);
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        let hf = u16::from_be_bytes([g[16], g[17]]);
        s.write_all(&3u32.to_be_bytes()).unwrap();
        (
            Client {
                s,
                structured: false,
            },
            hf,
        )
    }
    fn send_opt(&mut self, opt: u32, data: &[u8]) {
        let mut v = proto::IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&opt.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        self.s.write_all(&v).unwrap();
    }
    /// Read one option reply: (type, data).
    fn opt_reply(&mut self, opt: u32) -> (u32, Vec<u8>) {
        let h: [u8; 20] = rd(&mut self.s);
        assert_eq!(
            u64::from_be_bytes(h[..8].try_into().unwrap()),
            proto::REPLY_MAGIC
        );
        assert_eq!(u32be(&h[8..]), opt);
        let mut d = vec![0u8; u32be(&h[16..]) as usize];
        self.s.read_exact(&mut d).unwrap();
        (u32be(&h[12..]), d)
    }
    fn go(path: &PathBuf, name: &str, structured: bool) -> (Client, u64, u16) {
        let (mut c, _) = Client::hello(path);
        if structured {
            c.send_opt(proto::OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(c.opt_reply(proto::OPT_STRUCTURED_REPLY).0, proto::REP_ACK);
            c.structured = true;
        }
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        c.send_opt(proto::OPT_GO, &d);
        let (mut size, mut flags) = (0, 0);
        loop {
            let (t, d) = c.opt_reply(proto::OPT_GO);
            if t == proto::REP_ACK {
                break;
            }
            assert_eq!(t, proto::REP_INFO);
            if d[..2] == [0, 0] {
                size = u64::from_be_bytes(d[2..10].try_into().unwrap());
                flags = u16::from_be_bytes([d[10], d[11]]);
            }
        }
        (c, size, flags)
    }
    fn request(&mut self, typ: u16, flags: u16, cookie: u64, offset: u64, len: u32) {
        let h = proto::encode_request(&Request {
            flags,
            typ,
            cookie,
            offset,
            len,
        });
        self.s.write_all(&h).unwrap();
    }
    /// Read one reply: (cookie, errno, data). Structured replies are collected until DONE.
    fn reply(&mut self, read_len: usize) -> (u64, u32, Vec<u8>) {
        let m: [u8; 4] = rd(&mut self.s);
        if u32be(&m) == proto::SIMPLE_REPLY_MAGIC {
            let r: [u8; 12] = rd(&mut self.s);
            let err = u32be(&r);
            let cookie = u64::from_be_bytes(r[4..12].try_into().unwrap());
            let mut d = vec![0u8; if err == 0 { read_len } else { 0 }];
            self.s.read_exact(&mut d).unwrap();
            return (cookie, err, d);
        }
        assert_eq!(u32be(&m), proto::STRUCTURED_REPLY_MAGIC);
        assert!(self.structured);
        let r: [u8; 16] = rd(&mut self.s);
        let flags = u16::from_be_bytes([r[0], r[1]]);
        let typ = u16::from_be_bytes([r[2], r[3]]);
        let cookie = u64::from_be_bytes(r[4..12].try_into().unwrap());
        let mut p = vec![0u8; u32be(&r[12..]) as usize];
        self.s.read_exact(&mut p).unwrap();
        assert_eq!(
            flags,
            proto::REPLY_FLAG_DONE,
            "single-chunk replies expected"
        );
        match typ {
            proto::REPLY_TYPE_NONE => (cookie, 0, Vec::new()),
            proto::REPLY_TYPE_OFFSET_DATA => (cookie, 0, p[8..].to_vec()),
            proto::REPLY_TYPE_ERROR | proto::REPLY_TYPE_ERROR_OFFSET => {
                let ml = u16::from_be_bytes([p[4], p[5]]) as usize;
                assert!(std::str::from_utf8(&p[6..6 + ml]).is_ok());
                (cookie, u32be(&p), Vec::new())
            }
            t => panic!("unexpected chunk type {t}"),
        }
    }
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

#[test]
fn handshake_options_exact() {
    let f = Fixture::new("hs");
    let (mut c, hf) = Client::hello(&f.path);
    assert_eq!(hf, proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES);
    // LIST: both exports, in order, then ACK.
    c.send_opt(proto::OPT_LIST, &[]);
    let (t, d) = c.opt_reply(proto::OPT_LIST);
    assert_eq!(t, proto::REP_SERVER);
    assert_eq!(&d[..8], &[0, 0, 0, 4, b'd', b'i', b's', b'k']);
    assert_eq!(c.opt_reply(proto::OPT_LIST).0, proto::REP_SERVER);
    assert_eq!(c.opt_reply(proto::OPT_LIST).0, proto::REP_ACK);
    // Unknown option, STARTTLS without TLS, metadata contexts: refused, connection lives.
    for (o, want) in [
        (42, proto::REP_ERR_UNSUP),
        (proto::OPT_STARTTLS, proto::REP_ERR_POLICY),
        (10, proto::REP_ERR_UNSUP),
    ] {
        c.send_opt(o, &[]);
        assert_eq!(c.opt_reply(o).0, want);
    }
    // INFO with all four info types on an unknown export, then on "disk".
    let info = |name: &str| {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&[0, 4, 0, 0, 0, 1, 0, 2, 0, 3]);
        d
    };
    c.send_opt(proto::OPT_INFO, &info("nope"));
    assert_eq!(c.opt_reply(proto::OPT_INFO).0, proto::REP_ERR_UNKNOWN);
    c.send_opt(proto::OPT_INFO, &info("disk"));
    let mut got = Vec::new();
    loop {
        let (t, d) = c.opt_reply(proto::OPT_INFO);
        if t == proto::REP_ACK {
            break;
        }
        got.push(d);
    }
    let flags = proto::TF_HAS_FLAGS
        | proto::TF_SEND_FLUSH
        | proto::TF_SEND_FUA
        | proto::TF_SEND_TRIM
        | proto::TF_SEND_WRITE_ZEROES
        | proto::TF_SEND_FAST_ZERO
        | proto::TF_CAN_MULTI_CONN;
    let mut exp = vec![0, 0];
    exp.extend_from_slice(&(SIZE as u64).to_be_bytes());
    exp.extend_from_slice(&flags.to_be_bytes());
    assert_eq!(got[0], exp);
    assert_eq!(got[1], b"\0\x01disk");
    assert_eq!(got[2], b"\0\x02test disk");
    assert_eq!(
        got[3],
        [0, 3, 0, 0, 2, 0, 0, 0, 16, 0, 2, 0, 0, 0].to_vec(),
        "block sizes 512/4096/32M"
    );
    assert_eq!(got.len(), 4);
    // Malformed INFO (count says 1, no entry).
    c.send_opt(proto::OPT_INFO, &[0, 0, 0, 0, 0, 1]);
    assert_eq!(c.opt_reply(proto::OPT_INFO).0, proto::REP_ERR_INVALID);
    // Option too long: drained, ERR_TOO_BIG, still usable.
    c.send_opt(99, &vec![7u8; 100_000]);
    assert_eq!(c.opt_reply(99).0, proto::REP_ERR_TOO_BIG);
    // EXPORT_NAME to the read-only export (NO_ZEROES negotiated: 10 bytes).
    c.send_opt(proto::OPT_EXPORT_NAME, b"ro");
    let r: [u8; 10] = rd(&mut c.s);
    assert_eq!(u64::from_be_bytes(r[..8].try_into().unwrap()), 1 << 20);
    assert_eq!(
        u16::from_be_bytes([r[8], r[9]]),
        proto::TF_HAS_FLAGS | proto::TF_READ_ONLY | proto::TF_SEND_FLUSH | proto::TF_CAN_MULTI_CONN
    );
    c.request(proto::CMD_READ, 0, 5, 0, 512);
    assert_eq!(c.reply(512), (5, 0, vec![0u8; 512]));
    // ABORT gets an ACK; EXPORT_NAME of an unknown export closes; bad client flags close.
    let (mut c, _) = Client::hello(&f.path);
    c.send_opt(proto::OPT_ABORT, &[]);
    assert_eq!(c.opt_reply(proto::OPT_ABORT).0, proto::REP_ACK);
    assert!(c.closed());
    let (mut c, _) = Client::hello(&f.path);
    c.send_opt(proto::OPT_EXPORT_NAME, b"nope");
    assert!(c.closed());
    let mut s = UnixStream::connect(&f.path).unwrap();
    let _: [u8; 18] = rd(&mut s);
    s.write_all(&0x80u32.to_be_bytes()).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
}

#[test]
fn transmission_simple_and_structured() {
    let f = Fixture::new("tx");
    for structured in [false, true] {
        let (mut c, size, _) = Client::go(&f.path, "disk", structured);
        assert_eq!(size, SIZE as u64);
        let pat: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
        c.request(proto::CMD_WRITE, proto::CMD_FLAG_FUA, 1, 12345, 3000);
        c.s.write_all(&pat).unwrap();
        assert_eq!(c.reply(0), (1, 0, vec![]));
        c.request(proto::CMD_READ, 0, 2, 12345, 3000);
        assert_eq!(c.reply(3000), (2, 0, pat.clone()));
        // Zero-length requests are successful no-ops, also at the very end.
        c.request(proto::CMD_READ, 0, 3, SIZE as u64, 0);
        assert_eq!(c.reply(0), (3, 0, vec![]));
        c.request(proto::CMD_WRITE, 0, 4, SIZE as u64, 0);
        assert_eq!(c.reply(0), (4, 0, vec![]));
        // Out of range.
        c.request(proto::CMD_READ, 0, 5, SIZE as u64 - 100, 101);
        assert_eq!(c.reply(101), (5, errno::EINVAL, vec![]));
        c.request(proto::CMD_READ, 0, 6, u64::MAX - 10, 512);
        assert_eq!(c.reply(512), (6, errno::EINVAL, vec![]));
        c.request(proto::CMD_WRITE, 0, 7, SIZE as u64 - 1, 2);
        c.s.write_all(&[1, 2]).unwrap();
        assert_eq!(c.reply(0), (7, errno::ENOSPC, vec![]));
        c.request(proto::CMD_TRIM, 0, 8, SIZE as u64, 1);
        assert_eq!(c.reply(0), (8, errno::EINVAL, vec![]));
        c.request(proto::CMD_WRITE_ZEROES, 0, 9, SIZE as u64 - 1, 4096);
        assert_eq!(c.reply(0), (9, errno::ENOSPC, vec![]));
        // Unknown command (no payload), CACHE and BLOCK_STATUS are not offered.
        for (i, t) in [5u16, 7, 8, 200, 0xffff].into_iter().enumerate() {
            c.request(t, 0, 100 + i as u64, 0, 512);
            assert_eq!(c.reply(0), (100 + i as u64, errno::EINVAL, vec![]));
        }
        // Oversized read; oversized write (drained, connection still in sync).
        c.request(proto::CMD_READ, 0, 10, 0, (32 << 20) + 1);
        assert_eq!(c.reply(0), (10, errno::EINVAL, vec![]));
        c.request(proto::CMD_WRITE, 0, 11, 0, (32 << 20) + 512);
        c.s.write_all(&vec![0xEE; (32 << 20) + 512]).unwrap();
        assert_eq!(c.reply(0), (11, errno::EINVAL, vec![]));
        // Write zeroes, FAST_ZERO refused (backend is not fast), NO_HOLE accepted.
        c.request(
            proto::CMD_WRITE_ZEROES,
            proto::CMD_FLAG_FAST_ZERO,
            12,
            12345,
            1000,
        );
        assert_eq!(c.reply(0), (12, errno::ENOTSUP, vec![]));
        c.request(
            proto::CMD_WRITE_ZEROES,
            proto::CMD_FLAG_NO_HOLE,
            13,
            12345,
            1000,
        );
        assert_eq!(c.reply(0), (13, 0, vec![]));
        c.request(proto::CMD_READ, 0, 14, 12345, 3000);
        let mut want = pat.clone();
        want[..1000].fill(0);
        assert_eq!(c.reply(3000), (14, 0, want));
        let flushes = f.mem.flushes.load(Ordering::SeqCst);
        c.request(proto::CMD_FLUSH, 0, 15, 0, 0);
        assert_eq!(c.reply(0), (15, 0, vec![]));
        c.request(proto::CMD_TRIM, proto::CMD_FLAG_FUA, 16, 0, 4096);
        assert_eq!(c.reply(0), (16, 0, vec![]));
        assert_eq!(f.mem.flushes.load(Ordering::SeqCst), flushes + 2);
        // Oversized beyond the drain limit: the connection is closed.
        c.request(proto::CMD_WRITE, 0, 17, 0, u32::MAX);
        assert!(c.closed());
    }
    // Read-only export.
    let (mut c, _, flags) = Client::go(&f.path, "ro", true);
    assert_ne!(flags & proto::TF_READ_ONLY, 0);
    c.request(proto::CMD_WRITE, 0, 1, 0, 512);
    c.s.write_all(&[1u8; 512]).unwrap();
    assert_eq!(c.reply(0), (1, errno::EPERM, vec![]));
    c.request(proto::CMD_TRIM, 0, 2, 0, 512);
    assert_eq!(c.reply(0), (2, errno::EPERM, vec![]));
    c.request(proto::CMD_WRITE_ZEROES, 0, 3, 0, 512);
    assert_eq!(c.reply(0), (3, errno::EPERM, vec![]));
    assert_eq!(f.ro.contents(), vec![0u8; 1 << 20]);
    // DISC closes after answering what is in flight.
    c.request(proto::CMD_READ, 0, 4, 0, 4096);
    c.request(proto::CMD_DISC, 0, 5, 0, 0);
    assert_eq!(c.reply(4096), (4, 0, vec![0u8; 4096]));
    assert!(c.closed());
}

#[test]
fn pipelined_requests_all_answered() {
    let f = Fixture::new("pipe");
    let (mut c, _, _) = Client::go(&f.path, "disk", true);
    let mut w = c.s.try_clone().unwrap();
    // 200 writes of 16 KiB each (distinct patterns) sent without waiting.
    let writer = std::thread::spawn(move || {
        for i in 0..200u64 {
            let h = proto::encode_request(&Request {
                flags: 0,
                typ: proto::CMD_WRITE,
                cookie: 1000 + i,
                offset: i * 16384,
                len: 16384,
            });
            w.write_all(&h).unwrap();
            w.write_all(&vec![i as u8; 16384]).unwrap();
        }
    });
    let mut seen: Vec<u64> = (0..200)
        .map(|_| c.reply(0))
        .map(|(k, e, _)| {
            assert_eq!(e, 0);
            k
        })
        .collect();
    writer.join().unwrap();
    seen.sort();
    assert_eq!(seen, (1000..1200).collect::<Vec<_>>());
    let data = f.mem.contents();
    for i in 0..200usize {
        assert!(data[i * 16384..(i + 1) * 16384]
            .iter()
            .all(|&b| b == i as u8));
    }
}

#[test]
fn hostile_bytes_never_kill_the_server() {
    let f = Fixture::new("fuzz");
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..60 {
        let (mut c, _, _) = Client::go(&f.path, "disk", round % 2 == 0);
        // Valid magic with random fields (small lengths so writes complete), then junk.
        for _ in 0..20 {
            let mut h = [0u8; 28];
            for b in h.iter_mut() {
                *b = next() as u8;
            }
            h[..4].copy_from_slice(&proto::REQUEST_MAGIC.to_be_bytes());
            h[6] = 0;
            h[7] = (next() % 10) as u8;
            h[24] = 0;
            h[25] = 0;
            if c.s.write_all(&h).is_err() {
                break;
            }
            if h[7] == 1 {
                let n = u16::from_be_bytes([h[26], h[27]]) as usize;
                let _ = c.s.write_all(&vec![0u8; n]);
            }
        }
        let junk: Vec<u8> = (0..(next() % 300)).map(|_| next() as u8).collect();
        let _ = c.s.write_all(&junk);
        drop(c);
    }
    // The server still serves.
    let (mut c, _, _) = Client::go(&f.path, "disk", false);
    c.request(proto::CMD_READ, 0, 1, 0, 16);
    assert_eq!(c.reply(16).1, 0);
}

#[test]
fn graceful_shutdown_finishes_in_flight_and_flushes() {
    let mut f = Fixture::new("stop");
    let (mut c, _, _) = Client::go(&f.path, "disk", false);
    let before = f.mem.flushes.load(Ordering::SeqCst);
    for i in 0..32u64 {
        c.request(proto::CMD_WRITE, 0, i, i * 65536, 65536);
        c.s.write_all(&vec![0x5A; 65536]).unwrap();
    }
    f.handle.shutdown();
    let mut n = 0;
    while n < 32 {
        assert_eq!(c.reply(0).1, 0);
        n += 1;
    }
    f.stop();
    assert!(c.closed());
    assert!(f.mem.flushes.load(Ordering::SeqCst) > before);
    assert!(f.mem.contents()[..32 * 65536].iter().all(|&b| b == 0x5A));
    assert!(!f.path.exists(), "socket file removed");
    assert!(UnixStream::connect(&f.path).is_err());
    assert!(f.mem.writes.load(Ordering::SeqCst) >= 32);
}
