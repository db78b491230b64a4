//! The client against a fake server that lies: every bad length, handle, offset or
//! magic from the wire is a typed error (`Protocol`), never a panic or a huge
//! allocation, and never a hang; valid but unusual replies (chunks out of order, holes,
//! error chunks) are reassembled exactly.

use raidkit_nbd::client::{Client, ClientError, ClientOptions};
use raidkit_nbd::proto::{self, errno};
use raidkit_testkit::tempdir::TempDir;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const SIZE: u64 = 1 << 20;
const T: Duration = Duration::from_secs(10);

/// What the fake server does after the greeting.
#[derive(Clone, Copy)]
enum Hs {
    /// A correct handshake (structured replies agreed).
    Good,
    /// An option reply claiming 100 MB of data.
    HugeOptionReply,
    /// GO acknowledged with no NBD_INFO_EXPORT.
    NoExportInfo,
    /// Block sizes the protocol forbids.
    BadBlockSizes,
    /// An oldstyle greeting.
    Oldstyle,
}

fn handshake(s: &mut UnixStream, hs: Hs) -> bool {
    handshake_io(s, hs).unwrap_or(false)
}

/// The client may hang up at any point (it refuses lies): IO errors end the script.
fn handshake_io(s: &mut UnixStream, hs: Hs) -> std::io::Result<bool> {
    if let Hs::Oldstyle = hs {
        let mut g = proto::NBDMAGIC.to_be_bytes().to_vec();
        g.extend_from_slice(&proto::OLDSTYLE_MAGIC.to_be_bytes());
        g.extend_from_slice(&[0; 2]);
        s.write_all(&g)?;
        return Ok(false);
    }
    s.write_all(&proto::greeting(3))?;
    let mut f = [0u8; 4];
    s.read_exact(&mut f)?;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let (opt, len) = proto::parse_option_header(&h).unwrap();
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d)?;
        match (opt, hs) {
            (proto::OPT_STRUCTURED_REPLY, _) => {
                s.write_all(&proto::option_reply(opt, proto::REP_ACK, &[]))?;
            }
            (proto::OPT_GO, Hs::HugeOptionReply) => {
                let mut r = proto::option_reply(opt, proto::REP_INFO, &[]);
                r[16..20].copy_from_slice(&100_000_000u32.to_be_bytes());
                s.write_all(&r)?;
                return Ok(false);
            }
            (proto::OPT_GO, _) => {
                let flags = proto::TF_HAS_FLAGS | proto::TF_SEND_FLUSH;
                if !matches!(hs, Hs::NoExportInfo) {
                    let i = proto::info_export(SIZE, flags);
                    s.write_all(&proto::option_reply(opt, proto::REP_INFO, &i))?;
                }
                let bs = match hs {
                    Hs::BadBlockSizes => proto::info_block_size(3, 4096, 1 << 20),
                    _ => proto::info_block_size(512, 4096, 1 << 20),
                };
                s.write_all(&proto::option_reply(opt, proto::REP_INFO, &bs))?;
                s.write_all(&proto::option_reply(opt, proto::REP_ACK, &[]))?;
                return Ok(matches!(hs, Hs::Good));
            }
            _ => {
                s.write_all(&proto::option_reply(opt, proto::REP_ERR_UNSUP, &[]))?;
            }
        }
    }
}

/// A request as the fake server read it.
struct Req {
    typ: u16,
    cookie: u64,
    offset: u64,
    len: u32,
}

fn read_req(s: &mut UnixStream) -> Option<Req> {
    let mut h = [0u8; proto::REQUEST_LEN];
    s.read_exact(&mut h).ok()?;
    let r = proto::parse_request(&h)?;
    if r.typ == proto::CMD_WRITE {
        let mut d = vec![0u8; r.len as usize];
        s.read_exact(&mut d).ok()?;
    }
    Some(Req {
        typ: r.typ,
        cookie: r.cookie,
        offset: r.offset,
        len: r.len,
    })
}

type Script = Box<dyn FnMut(&Req) -> Vec<u8> + Send>;

/// A fake server answering every request with `reply(request)`.
fn fake(hs: Hs, mut reply: Script) -> (TempDir, PathBuf, JoinHandle<()>) {
    let dir = TempDir::new("rk-nbd-lies").unwrap();
    let sock = dir.path().join("f.sock");
    let l = UnixListener::bind(&sock).unwrap();
    let h = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        if !handshake(&mut s, hs) {
            thread::sleep(Duration::from_millis(200));
            return;
        }
        while let Some(r) = read_req(&mut s) {
            if r.typ == proto::CMD_DISC || s.write_all(&reply(&r)).is_err() {
                break;
            }
        }
    });
    (dir, sock, h)
}

fn uri(sock: &Path) -> String {
    format!("nbd+unix:///?socket={}", sock.display())
}

fn chunk(flags: u16, typ: u16, cookie: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = proto::chunk_header(flags, typ, cookie, payload.len() as u32).to_vec();
    v.extend_from_slice(payload);
    v
}

fn data(off: u64, bytes: &[u8]) -> Vec<u8> {
    let mut p = off.to_be_bytes().to_vec();
    p.extend_from_slice(bytes);
    p
}

fn hole(off: u64, len: u32) -> Vec<u8> {
    let mut p = off.to_be_bytes().to_vec();
    p.extend_from_slice(&len.to_be_bytes());
    p
}

const DONE: u16 = proto::REPLY_FLAG_DONE;

/// Read 4096 bytes at 8192 from a fake server answering with `script`; the result.
fn read_from(script: Script) -> Result<Vec<u8>, ClientError> {
    let (_d, sock, h) = fake(Hs::Good, script);
    let c = Client::connect(&uri(&sock), &ClientOptions::default()).unwrap();
    let mut b = vec![0u8; 4096];
    let start = Instant::now();
    let r = c.read(8192, &mut b, T).map(|_| b);
    assert!(start.elapsed() < Duration::from_secs(5), "no hang on lies");
    if r.is_err() {
        assert!(c.broken().is_some() || matches!(r, Err(ClientError::Server { .. })));
    }
    drop(c);
    h.join().unwrap();
    r
}

fn protocol_error(name: &str, script: Script) {
    match read_from(script) {
        Err(ClientError::Protocol(m)) => eprintln!("{name}: {m}"),
        r => panic!("{name}: {:?}", r.map(|v| v.len())),
    }
}

#[test]
fn lying_replies_are_protocol_errors() {
    protocol_error(
        "unknown handle",
        Box::new(|r| proto::simple_reply(0, r.cookie + 1000).to_vec()),
    );
    protocol_error(
        "bad magic",
        Box::new(|_| b"\x12\x34\x56\x78whatever-follows".to_vec()),
    );
    protocol_error(
        "data outside the request",
        Box::new(|r| {
            chunk(
                DONE,
                proto::REPLY_TYPE_OFFSET_DATA,
                r.cookie,
                &data(r.offset + 4096, &[1]),
            )
        }),
    );
    protocol_error(
        "4 GiB data chunk",
        Box::new(|r| {
            proto::chunk_header(DONE, proto::REPLY_TYPE_OFFSET_DATA, r.cookie, u32::MAX).to_vec()
        }),
    );
    protocol_error(
        "huge error chunk",
        Box::new(|r| {
            proto::chunk_header(DONE, proto::REPLY_TYPE_ERROR, r.cookie, 1 << 20).to_vec()
        }),
    );
    protocol_error(
        "error message longer than its chunk",
        Box::new(|r| {
            chunk(
                DONE,
                proto::REPLY_TYPE_ERROR,
                r.cookie,
                &[0, 0, 0, 5, 0, 200, b'x'],
            )
        }),
    );
    protocol_error(
        "error offset outside the request",
        Box::new(|r| {
            let mut p = vec![0, 0, 0, 5, 0, 0];
            p.extend_from_slice(&(r.offset + u64::from(r.len)).to_be_bytes());
            chunk(DONE, proto::REPLY_TYPE_ERROR_OFFSET, r.cookie, &p)
        }),
    );
    protocol_error(
        "done with half the data",
        Box::new(|r| {
            let mut v = chunk(
                0,
                proto::REPLY_TYPE_OFFSET_DATA,
                r.cookie,
                &data(r.offset, &[7; 2048]),
            );
            v.extend(chunk(DONE, proto::REPLY_TYPE_NONE, r.cookie, &[]));
            v
        }),
    );
    protocol_error(
        "overlapping chunks",
        Box::new(|r| {
            let mut v = chunk(
                0,
                proto::REPLY_TYPE_OFFSET_DATA,
                r.cookie,
                &data(r.offset, &[7; 2048]),
            );
            v.extend(chunk(
                DONE,
                proto::REPLY_TYPE_OFFSET_HOLE,
                r.cookie,
                &hole(r.offset + 2047, 2049),
            ));
            v
        }),
    );
    protocol_error(
        "hole of length 0",
        Box::new(|r| {
            chunk(
                DONE,
                proto::REPLY_TYPE_OFFSET_HOLE,
                r.cookie,
                &hole(r.offset, 0),
            )
        }),
    );
    protocol_error(
        "NONE chunk with a payload",
        Box::new(|r| chunk(DONE, proto::REPLY_TYPE_NONE, r.cookie, &[1, 2, 3])),
    );
    protocol_error(
        "NONE chunk not last",
        Box::new(|r| chunk(0, proto::REPLY_TYPE_NONE, r.cookie, &[])),
    );
    protocol_error(
        "unknown chunk type",
        Box::new(|r| chunk(DONE, 77, r.cookie, &[0; 4])),
    );
}

#[test]
fn unusual_but_valid_replies_reassemble() {
    // Out of order: a hole, then data at the end, then data at the start.
    let got = read_from(Box::new(|r| {
        let o = r.offset;
        let mut v = chunk(
            0,
            proto::REPLY_TYPE_OFFSET_HOLE,
            r.cookie,
            &hole(o + 1024, 2048),
        );
        v.extend(chunk(
            0,
            proto::REPLY_TYPE_OFFSET_DATA,
            r.cookie,
            &data(o + 3072, &[3; 1024]),
        ));
        v.extend(chunk(
            DONE,
            proto::REPLY_TYPE_OFFSET_DATA,
            r.cookie,
            &data(o, &[1; 1024]),
        ));
        v
    }))
    .unwrap();
    let mut want = vec![1u8; 1024];
    want.extend(vec![0u8; 2048]);
    want.extend(vec![3u8; 1024]);
    assert!(got == want);
    // An error chunk after data: a server error (with its message); the connection lives.
    let (_d, sock, h) = fake(
        Hs::Good,
        Box::new(|r| {
            if r.typ == proto::CMD_READ {
                let mut p = errno::EIO.to_be_bytes().to_vec();
                p.extend_from_slice(&6u16.to_be_bytes());
                p.extend_from_slice(b"broken");
                p.extend_from_slice(&(r.offset + 512).to_be_bytes());
                let mut v = chunk(
                    0,
                    proto::REPLY_TYPE_OFFSET_DATA,
                    r.cookie,
                    &data(r.offset, &[1; 512]),
                );
                v.extend(chunk(DONE, proto::REPLY_TYPE_ERROR_OFFSET, r.cookie, &p));
                v
            } else {
                proto::simple_reply(0, r.cookie).to_vec()
            }
        }),
    );
    let c = Client::connect(&uri(&sock), &ClientOptions::default()).unwrap();
    let mut b = vec![0u8; 1024];
    match c.read(0, &mut b, T) {
        Err(ClientError::Server { errno: e, message }) => {
            assert_eq!((e, message.as_str()), (errno::EIO, "broken"));
        }
        r => panic!("{r:?}"),
    }
    c.flush(T).unwrap();
    c.write(4096, &[5; 512], false, T).unwrap();
    drop(c);
    h.join().unwrap();
}

#[test]
fn lying_handshakes_are_refused() {
    for (hs, want) in [
        (Hs::HugeOptionReply, "option reply of 100000000 bytes"),
        (Hs::NoExportInfo, "without the export's size"),
        (Hs::BadBlockSizes, "NBD_INFO_BLOCK_SIZE"),
        (Hs::Oldstyle, "oldstyle"),
    ] {
        let (_d, sock, h) = fake(hs, Box::new(|_| Vec::new()));
        match Client::connect(&uri(&sock), &ClientOptions::default()) {
            Err(ClientError::Protocol(m)) => assert!(m.contains(want), "{m}"),
            r => panic!("{want}: {r:?}"),
        }
        h.join().unwrap();
    }
}

/// A server going away answers `ESHUTDOWN` (nbdkit does, to what is in flight when it is
/// told to stop), and the protocol has the client disconnect: the request fails (with
/// the server's error, or as disconnected), the connection is closed, and the next
/// request fails at once without being sent — the error a server restart deserves, not a
/// per-request one a caller could take for a bad sector.
#[test]
fn eshutdown_closes_the_connection() {
    let error_chunk = |r: &Req| {
        let mut p = errno::ESHUTDOWN.to_be_bytes().to_vec();
        p.extend_from_slice(&0u16.to_be_bytes());
        chunk(DONE, proto::REPLY_TYPE_ERROR, r.cookie, &p)
    };
    let simple = |r: &Req| proto::simple_reply(errno::ESHUTDOWN, r.cookie).to_vec();
    for (name, script) in [
        ("simple reply to a write", Box::new(simple) as Script),
        ("error chunk to a write", Box::new(error_chunk) as Script),
    ] {
        let (_d, sock, h) = fake(Hs::Good, script);
        let c = Client::connect(&uri(&sock), &ClientOptions::default()).unwrap();
        let e = c.write(0, &[1; 512], false, T).unwrap_err();
        assert!(e.is_fatal(), "{name}: {e:?}");
        let broken = c.broken();
        assert!(
            matches!(&broken, Some(ClientError::Disconnected(m)) if m.contains("ESHUTDOWN")),
            "{name}: {broken:?}"
        );
        let t0 = Instant::now();
        let e = c.write(512, &[2; 512], false, T).unwrap_err();
        assert!(
            matches!(&e, ClientError::Disconnected(m) if m.contains("shutting down")),
            "{name}: {e:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(1), "{name}: not at once");
        assert_eq!(c.stats().requests, 1, "{name}: the second request was sent");
        drop(c);
        h.join().unwrap();
    }
}
