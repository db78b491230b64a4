//! A raw NBD client for hostile tests: exact bytes, any misbehaviour.

use crate::child::Child_;
use raidkit_nbd::proto::{self, Request};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A connected socket, Unix or TCP.
pub enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    pub fn open(c: &Child_) -> Conn {
        if c.tcp {
            Conn::Tcp(TcpStream::connect(&c.addr).unwrap())
        } else {
            Conn::Unix(UnixStream::connect(&c.addr).unwrap())
        }
    }
    pub fn set_timeout(&self, d: Duration) {
        match self {
            Conn::Unix(s) => {
                s.set_read_timeout(Some(d)).unwrap();
                s.set_write_timeout(Some(d)).unwrap();
            }
            Conn::Tcp(s) => {
                s.set_read_timeout(Some(d)).unwrap();
                s.set_write_timeout(Some(d)).unwrap();
            }
        }
    }
    pub fn try_clone(&self) -> Conn {
        match self {
            Conn::Unix(s) => Conn::Unix(s.try_clone().unwrap()),
            Conn::Tcp(s) => Conn::Tcp(s.try_clone().unwrap()),
        }
    }
    /// Greeting read and client flags sent.
    pub fn hello(&mut self) {
        let mut g = [0u8; 18];
        self.read_exact(&mut g).unwrap();
        assert_eq!(proto::parse_greeting(&g), Ok(3));
        self.write_all(&3u32.to_be_bytes()).unwrap();
    }
    pub fn opt(&mut self, opt: u32, data: &[u8]) {
        self.write_all(&proto::option_request(opt, data)).unwrap();
    }
    pub fn opt_reply(&mut self) -> (u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.read_exact(&mut h).unwrap();
        let r = proto::parse_option_reply_header(&h).unwrap();
        assert!(r.len < 1 << 20);
        let mut d = vec![0u8; r.len as usize];
        self.read_exact(&mut d).unwrap();
        (r.typ, d)
    }
    /// GO to "disk"; the option replies are read up to the ACK.
    pub fn go(&mut self, structured: bool) {
        if structured {
            self.opt(proto::OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(self.opt_reply().0, proto::REP_ACK);
        }
        self.opt(proto::OPT_GO, &proto::go_data(b"disk", &[]));
        loop {
            let (t, _) = self.opt_reply();
            if t == proto::REP_ACK {
                break;
            }
            assert_eq!(t, proto::REP_INFO);
        }
    }
    pub fn open_go(c: &Child_) -> Conn {
        let mut s = Conn::open(c);
        s.set_timeout(Duration::from_secs(20));
        s.hello();
        s.go(false);
        s
    }
    pub fn request(&mut self, typ: u16, cookie: u64, offset: u64, len: u32) {
        let h = proto::encode_request(&Request {
            flags: 0,
            typ,
            cookie,
            offset,
            len,
        });
        self.write_all(&h).unwrap();
    }
    /// A simple reply: (errno, cookie), with `data_len` bytes of data after a success.
    pub fn simple_reply(&mut self, data_len: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.read_exact(&mut h).unwrap();
        assert_eq!(proto::get32(&h, 0), proto::SIMPLE_REPLY_MAGIC);
        let (e, cookie) = (proto::get32(&h, 4), proto::get64(&h, 8));
        let mut d = vec![0u8; if e == 0 { data_len } else { 0 }];
        self.read_exact(&mut d).unwrap();
        (e, cookie, d)
    }
    /// True if the server closed the connection (EOF or reset) within `within`.
    pub fn closed_within(&mut self, within: Duration) -> bool {
        self.set_timeout(within);
        let mut b = [0u8; 4096];
        loop {
            match self.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b),
            Conn::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(b),
            Conn::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A TCP connection from a chosen local address (127.0.0.x are all loopback), so
/// one machine can play several peers.
pub fn tcp_from(local: [u8; 4], to: &str) -> Conn {
    let to: std::net::SocketAddrV4 = to.parse().unwrap();
    let sa = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls with fully initialised sockaddr_in values of `len`
    // bytes; the descriptor is handed to TcpStream, which owns it from then on.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let me = sa(local, 0);
        assert_eq!(
            libc::bind(fd, (&me as *const libc::sockaddr_in).cast(), len),
            0
        );
        let peer = sa(to.ip().octets(), to.port());
        assert_eq!(
            libc::connect(fd, (&peer as *const libc::sockaddr_in).cast(), len),
            0
        );
        Conn::Tcp(TcpStream::from_raw_fd(fd))
    }
}
