//! A connection's byte stream: a Unix or TCP socket, plain or TLS, with a deadline
//! during the handshake; and, for transmission, the stream split into the reading side
//! (taken in turn by the workers) and the writing side (shared by them).

use crate::util::{lock, poll_in};
use openssl::ssl::{ErrorCode, SslStream};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Poll interval of an idle reader (it watches the stop flag and the idle timeout).
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// Socket buffer size requested.
const SOCK_BUF: libc::c_int = 4 << 20;

enum SockKind {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// An accepted socket. With a deadline, every read and write fails with `TimedOut`
/// once it has passed (the socket's timeouts are set to the time left before each call).
pub(crate) struct Sock {
    kind: SockKind,
    deadline: Option<Instant>,
}

impl Sock {
    pub(crate) fn unix(s: UnixStream) -> Sock {
        Sock {
            kind: SockKind::Unix(s),
            deadline: None,
        }
    }
    pub(crate) fn tcp(s: TcpStream) -> Sock {
        let _ = s.set_nodelay(true);
        Sock {
            kind: SockKind::Tcp(s),
            deadline: None,
        }
    }
    /// Another handle to the same socket, without a deadline.
    pub(crate) fn try_clone(&self) -> io::Result<Sock> {
        let kind = match &self.kind {
            SockKind::Unix(s) => SockKind::Unix(s.try_clone()?),
            SockKind::Tcp(s) => SockKind::Tcp(s.try_clone()?),
        };
        Ok(Sock {
            kind,
            deadline: None,
        })
    }
    pub(crate) fn shutdown(&self, how: Shutdown) {
        let _ = match &self.kind {
            SockKind::Unix(s) => s.shutdown(how),
            SockKind::Tcp(s) => s.shutdown(how),
        };
    }
    pub(crate) fn fd(&self) -> RawFd {
        match &self.kind {
            SockKind::Unix(s) => s.as_raw_fd(),
            SockKind::Tcp(s) => s.as_raw_fd(),
        }
    }
    /// Set or clear the deadline (clearing it also clears the socket's timeouts).
    pub(crate) fn set_deadline(&mut self, at: Option<Instant>) -> io::Result<()> {
        self.deadline = at;
        if at.is_none() {
            self.set_timeouts(None, None)?;
        }
        Ok(())
    }
    fn set_timeouts(&self, rd: Option<Duration>, wr: Option<Duration>) -> io::Result<()> {
        match &self.kind {
            SockKind::Unix(s) => {
                s.set_read_timeout(rd)?;
                s.set_write_timeout(wr)
            }
            SockKind::Tcp(s) => {
                s.set_read_timeout(rd)?;
                s.set_write_timeout(wr)
            }
        }
    }
    /// The time left before the deadline, as a socket timeout; `TimedOut` if none is.
    fn time_left(&self) -> io::Result<Option<Duration>> {
        let Some(at) = self.deadline else {
            return Ok(None);
        };
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "handshake deadline passed",
            ));
        }
        Ok(Some(left))
    }
    /// Make a socket timeout past the deadline read as `TimedOut`.
    fn timed<T>(&self, r: io::Result<T>) -> io::Result<T> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.deadline.is_some() => Err(
                io::Error::new(io::ErrorKind::TimedOut, "handshake deadline passed"),
            ),
            r => r,
        }
    }
    /// Larger socket buffers (failure is harmless: kernel limits apply).
    pub(crate) fn tune(&self) {
        for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
            let v: libc::c_int = SOCK_BUF;
            // SAFETY: the fd is an open socket owned by `self`; the option value points
            // to a live c_int and its exact size is passed.
            unsafe {
                libc::setsockopt(
                    self.fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        if let SockKind::Tcp(s) = &self.kind {
            // Dead peers on idle connections are found by TCP keepalive.
            let on: libc::c_int = 1;
            // SAFETY: as above.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_KEEPALIVE,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(left) = self.time_left()? {
            self.set_timeouts(Some(left), Some(left))?;
        }
        let r = match &mut self.kind {
            SockKind::Unix(s) => s.read(buf),
            SockKind::Tcp(s) => s.read(buf),
        };
        self.timed(r)
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(left) = self.time_left()? {
            self.set_timeouts(Some(left), Some(left))?;
        }
        let r = match &mut self.kind {
            SockKind::Unix(s) => s.write(buf),
            SockKind::Tcp(s) => s.write(buf),
        };
        self.timed(r)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The stream during the handshake: plain, or TLS after STARTTLS.
pub(crate) enum Stream {
    Plain(Sock),
    Tls(Box<SslStream<Sock>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub(crate) type SharedTls = Arc<Mutex<SslStream<Sock>>>;

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no data yet")
}

/// Reads application data from a TLS stream shared with the reply writers: the lock is
/// only held while a record is being read, never while waiting for one. Returns
/// `TimedOut` after a tick without data.
pub(crate) struct TlsReader {
    tls: SharedTls,
    fd: RawFd,
}

impl Read for TlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut g = lock(&self.tls);
            if g.ssl().pending() == 0 {
                drop(g);
                if !poll_in(self.fd, TICK) {
                    return Err(timed_out());
                }
                g = lock(&self.tls);
            }
            match g.ssl_read(buf) {
                Ok(n) => return Ok(n),
                Err(e) => match e.code() {
                    ErrorCode::ZERO_RETURN => return Ok(0),
                    ErrorCode::WANT_READ | ErrorCode::WANT_WRITE if e.io_error().is_none() => {}
                    ErrorCode::SYSCALL if e.io_error().is_none() => return Ok(0),
                    _ => return Err(e.into_io_error().unwrap_or_else(io::Error::other)),
                },
            }
        }
    }
}

struct TlsWriter {
    tls: SharedTls,
}

impl Write for TlsWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        lock(&self.tls).write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        lock(&self.tls).flush()
    }
}

/// The reading side during transmission. Plain and TLS sockets return `TimedOut` (or
/// `WouldBlock`) after a tick without data, so an idle reader can watch the stop flag
/// and the idle timeout without a `poll` per request.
pub(crate) enum InReader {
    Plain(Sock),
    Tls(TlsReader),
    /// Any other byte source (in-memory streams: the fuzzer).
    Other(Box<dyn Read + Send>),
}

impl Read for InReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            InReader::Plain(s) => s.read(buf),
            InReader::Tls(t) => t.read(buf),
            InReader::Other(r) => r.read(buf),
        }
    }
}

/// True for the errors an idle reader sees at each tick.
pub(crate) fn is_tick(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// A connection ready for transmission.
pub(crate) struct Transport {
    pub(crate) reader: InReader,
    pub(crate) writer: Box<dyn Write + Send>,
    /// Shuts the socket down (a dead connection, a stalled client at shutdown).
    pub(crate) closer: Option<Sock>,
    /// The TLS session, to close it cleanly at the end.
    pub(crate) tls: Option<SharedTls>,
}

impl Transport {
    /// Split a handshaken stream (its deadline cleared) for transmission.
    pub(crate) fn from_stream(s: Stream) -> io::Result<Transport> {
        match s {
            Stream::Plain(mut p) => {
                p.set_deadline(None)?;
                let r = p.try_clone()?;
                r.set_timeouts(Some(TICK), None)?;
                let closer = p.try_clone()?;
                Ok(Transport {
                    reader: InReader::Plain(r),
                    writer: Box::new(p),
                    closer: Some(closer),
                    tls: None,
                })
            }
            Stream::Tls(mut t) => {
                t.get_mut().set_deadline(None)?;
                let fd = t.get_ref().fd();
                let closer = t.get_ref().try_clone()?;
                let t: SharedTls = Arc::new(Mutex::new(*t));
                Ok(Transport {
                    reader: InReader::Tls(TlsReader {
                        tls: Arc::clone(&t),
                        fd,
                    }),
                    writer: Box::new(TlsWriter {
                        tls: Arc::clone(&t),
                    }),
                    closer: Some(closer),
                    tls: Some(t),
                })
            }
        }
    }
}
