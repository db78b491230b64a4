//! A network member ([`NbdDev`]) against a small fake NBD server that serves memory
//! honestly and then answers as told: what each kind of answer means to the array (a
//! whole member gone, or one bad request), and which exports are refused as members.

use raidkit_engine::dev::io::is_gone;
use raidkit_engine::dev::nbd::{LinkState, NbdDev};
use raidkit_engine::dev::BlockDev;
use raidkit_nbd::proto::{self, errno};
use raidkit_testkit::tempdir::TempDir;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;

const SIZE: u64 = 4 << 20;

/// How the fake server sets up an export.
#[derive(Clone, Copy)]
struct Export {
    /// Minimum, preferred and maximum block size it advertises.
    block_size: (u32, u32, u32),
}

const PLAIN: Export = Export {
    block_size: (512, 4096, 32 << 20),
};

/// The error the fake server answers every request with from now on (0: it serves).
type Answer = Arc<AtomicU32>;

fn handshake(s: &mut UnixStream, e: Export) -> std::io::Result<()> {
    s.write_all(&proto::greeting(1))?;
    let mut f = [0u8; 4];
    s.read_exact(&mut f)?;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let (opt, len) = proto::parse_option_header(&h).expect("option magic");
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d)?;
        if opt != proto::OPT_GO {
            s.write_all(&proto::option_reply(opt, proto::REP_ERR_UNSUP, &[]))?;
            continue;
        }
        let flags = proto::TF_HAS_FLAGS | proto::TF_SEND_FLUSH;
        let (min, pref, max) = e.block_size;
        for info in [
            proto::info_export(SIZE, flags),
            proto::info_block_size(min, pref, max),
        ] {
            s.write_all(&proto::option_reply(opt, proto::REP_INFO, &info))?;
        }
        return s.write_all(&proto::option_reply(opt, proto::REP_ACK, &[]));
    }
}

/// Serve memory to one connection; answer with the error in `answer` once it is set.
fn serve(mut s: UnixStream, e: Export, answer: &Answer) -> std::io::Result<()> {
    handshake(&mut s, e)?;
    let mut disk = vec![0u8; SIZE as usize];
    loop {
        let mut h = [0u8; proto::REQUEST_LEN];
        s.read_exact(&mut h)?;
        let r = proto::parse_request(&h).expect("request magic");
        let range = r.offset as usize..r.offset as usize + r.len as usize;
        let mut err = answer.load(Ordering::SeqCst);
        let min = u64::from(e.block_size.0);
        let data = matches!(r.typ, proto::CMD_READ | proto::CMD_WRITE);
        if data && !(r.offset.is_multiple_of(min) && u64::from(r.len).is_multiple_of(min)) {
            // As a strict server does: requests are whole blocks of its minimum.
            err = errno::EINVAL;
        }
        let mut reply = proto::simple_reply(err, r.cookie).to_vec();
        match r.typ {
            proto::CMD_DISC => return Ok(()),
            proto::CMD_WRITE => {
                let mut d = vec![0u8; r.len as usize];
                s.read_exact(&mut d)?;
                if err == 0 {
                    disk[range].copy_from_slice(&d);
                }
            }
            // An error reply carries no data.
            proto::CMD_READ if err == 0 => reply.extend_from_slice(&disk[range]),
            _ => {}
        }
        s.write_all(&reply)?;
    }
}

/// A fake server on a new socket: its URI, and the error it answers with (0 at first).
fn fake(e: Export) -> (TempDir, String, Answer) {
    let dir = TempDir::new("rk-nbd-member-replies").unwrap();
    let sock: PathBuf = dir.path().join("f.sock");
    let l = UnixListener::bind(&sock).unwrap();
    let answer: Answer = Arc::new(AtomicU32::new(0));
    let a = Arc::clone(&answer);
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            let a = Arc::clone(&a);
            thread::spawn(move || serve(s, e, &a));
        }
    });
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    (dir, uri, answer)
}

/// A server that is shutting down answers `ESHUTDOWN` (nbdkit does, to every request in
/// flight when it is told to stop): the member is gone as a whole — the array fails it and
/// takes it back with a catch-up once the server is back — not a bad sector, which the
/// array would record in the member's bad-block log or try to correct by rewriting.
#[test]
fn eshutdown_means_the_member_is_gone_not_a_bad_sector() {
    let (_d, uri, answer) = fake(PLAIN);
    let dev = NbdDev::open(&uri, true).unwrap();
    dev.write_at(&[7u8; 4096], 8192).unwrap();
    let mut back = vec![0u8; 4096];
    dev.read_at(&mut back, 8192).unwrap();
    assert!(back == [7u8; 4096]);

    answer.store(errno::ESHUTDOWN, Ordering::SeqCst);
    let e = dev.write_at(&[8u8; 4096], 8192).unwrap_err();
    assert!(is_gone(&e), "{e:?}");
    assert_eq!(e.kind(), std::io::ErrorKind::NotConnected, "{e}");
    assert_eq!(dev.link_state(), LinkState::Disconnected);
    let why = dev.link_status().error.unwrap_or_default();
    assert!(why.contains("ESHUTDOWN"), "{why}");

    // A read answered so is the same.
    let (_d, uri, answer) = fake(PLAIN);
    let dev = NbdDev::open(&uri, true).unwrap();
    answer.store(errno::ESHUTDOWN, Ordering::SeqCst);
    let e = dev.read_at(&mut back, 0).unwrap_err();
    assert!(is_gone(&e), "{e:?}");

    // Any other error is about the request: the connection stays.
    let (_d, uri, answer) = fake(PLAIN);
    let dev = NbdDev::open(&uri, true).unwrap();
    answer.store(errno::EIO, Ordering::SeqCst);
    let e = dev.write_at(&[8u8; 4096], 0).unwrap_err();
    assert!(!is_gone(&e), "{e:?}");
    assert_eq!(dev.link_state(), LinkState::Connected);
    answer.store(0, Ordering::SeqCst);
    dev.write_at(&[9u8; 4096], 0).unwrap();
}

/// An export that takes a byte per request (legal NBD) would turn every member IO into
/// as many requests as bytes — a table entry, a buffer and a system call each, all in
/// flight at once: refused as a member, saying what to change.
#[test]
fn an_export_with_tiny_requests_is_refused() {
    let (_d, uri, _) = fake(Export {
        block_size: (1, 4096, 1),
    });
    let e = NbdDev::open(&uri, true).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(
        e.to_string()
            .contains("takes at most 1 bytes per request; a member needs at least 4096"),
        "{e}"
    );
    // One page per request is enough.
    let (_d, uri, _) = fake(Export {
        block_size: (512, 4096, 4096),
    });
    let dev = NbdDev::open(&uri, true).unwrap();
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    dev.write_at(&data, 4096).unwrap();
    let mut back = vec![0u8; data.len()];
    dev.read_at(&mut back, 4096).unwrap();
    assert!(back == data);
}

/// A server with a minimum block size (4096: a 4Kn disk behind it, say) may refuse
/// anything smaller (EINVAL). A small read — creating an array probes 8 bytes for an old
/// superblock's magic — reads the whole block around it, and gets the right bytes.
#[test]
fn small_reads_are_whole_blocks_of_the_servers_minimum() {
    let (_d, uri, _) = fake(Export {
        block_size: (4096, 4096, 32 << 20),
    });
    let dev = NbdDev::open(&uri, true).unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
    dev.write_at(&data, 4096).unwrap();
    let mut b = [0u8; 8];
    dev.read_at(&mut b, 4096 + 4090).unwrap();
    assert_eq!(b[..], data[4090..4098]);
    let mut b = vec![0u8; 100];
    dev.read_at(&mut b, 8).unwrap();
    assert!(b == [0u8; 100]);
    assert_eq!(dev.link_state(), LinkState::Connected);
}

/// The array's logical block size is its largest member's, an NBD member's too (its
/// server's minimum block size): frontends advertise it, so clients do not send IO the
/// server would refuse.
#[test]
fn an_arrays_block_size_is_its_largest_members_nbd_members_included() {
    use raidkit_engine::create::{create, CreateOptions, MemberSpec};
    let (d, uri, _) = fake(Export {
        block_size: (4096, 4096, 32 << 20),
    });
    let local = d.path().join("local.img");
    std::fs::File::create(&local)
        .unwrap()
        .set_len(SIZE)
        .unwrap();
    let mk = |members: Vec<PathBuf>| {
        let mut o = CreateOptions::new(
            raidkit_layout::Level::Raid1,
            members.into_iter().map(MemberSpec::Path).collect(),
        );
        o.create_size = Some(2 << 20);
        create(&o, &mut |_, _| {}).unwrap()
    };
    let arr = mk(vec![local, PathBuf::from(&uri)]);
    assert_eq!(arr.logical_block_size(), 4096);
    arr.stop().unwrap();
    let files: Vec<PathBuf> = ["a.img", "b.img"].map(|n| d.path().join(n)).into();
    for f in &files {
        std::fs::File::create(f).unwrap().set_len(SIZE).unwrap();
    }
    let arr = mk(files);
    assert_eq!(arr.logical_block_size(), 512);
    arr.stop().unwrap();
}
