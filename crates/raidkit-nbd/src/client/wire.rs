//! The client's socket: non-blocking, plain or TLS, where every read and write has a
//! deadline (or watches for the connection being closed) and never blocks past it —
//! a black-holed or stopped server costs a caller its deadline, no more.

use crate::util::{lock, poll_in, poll_out};
use openssl::ssl::{ErrorCode, SslStream};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often a wait without a deadline looks at the closed flag.
const TICK: Duration = Duration::from_millis(100);
/// The send buffer asked for on a Unix socket (a 1 MiB write request and then some).
const UNIX_SNDBUF: usize = 2 << 20;
/// Through TLS, a request's header and a payload up to this size go out as one record.
const TLS_JOIN: usize = 64 << 10;

/// Why an IO did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The deadline passed.
    Timeout,
    /// The connection ended (EOF, reset, TLS error) or was closed by this side.
    Closed(String),
}

/// A connected socket in non-blocking mode.
pub(crate) enum Sock {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Sock {
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tcp(s) => s.as_raw_fd(),
        }
    }
    fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
        })
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Sock::Unix(s) => s.shutdown(how),
            Sock::Tcp(s) => s.shutdown(how),
        };
    }
    /// One non-blocking read from the socket itself (under any TLS session).
    fn read_raw(&self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => {
                let mut r: &UnixStream = s;
                r.read(b)
            }
            Sock::Tcp(s) => {
                let mut r: &TcpStream = s;
                r.read(b)
            }
        }
    }
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.read(b),
            Sock::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.write(b),
            Sock::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a non-blocking step needs before it can go on.
pub(crate) enum Want {
    Read,
    Write,
}

type Step<T> = Result<Result<T, Want>, WireError>;

fn io_step<T>(r: io::Result<T>, want: Want) -> Step<T> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Err(want)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Err(want)),
        Err(e) => Err(WireError::Closed(e.to_string())),
    }
}

fn ssl_step<T>(r: Result<T, openssl::ssl::Error>) -> Step<T> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => match e.code() {
            ErrorCode::WANT_READ => Ok(Err(Want::Read)),
            ErrorCode::WANT_WRITE => Ok(Err(Want::Write)),
            ErrorCode::ZERO_RETURN => Err(WireError::Closed("the server closed TLS".into())),
            ErrorCode::SYSCALL => match e.io_error() {
                Some(io) if io.kind() == io::ErrorKind::WouldBlock => Ok(Err(Want::Read)),
                Some(io) => Err(WireError::Closed(io.to_string())),
                None => Err(WireError::Closed("connection closed".into())),
            },
            _ => Err(WireError::Closed(format!("TLS: {e}"))),
        },
    }
}

/// The connection: a socket, and the TLS session over it once STARTTLS is done.
pub(crate) struct Wire {
    sock: Sock,
    tls: Option<Mutex<SslStream<Sock>>>,
    closed: AtomicBool,
    /// Set by [`Wire::abandon`]: stop waiting for the server's side to close.
    abandoned: AtomicBool,
    /// The server has closed its side after ours ([`Wire::drain_until_peer_closes`]).
    peer_closed: Mutex<bool>,
    peer_closed_cv: Condvar,
}

impl Wire {
    /// Take a connected socket (it is made non-blocking).
    pub(crate) fn new(sock: Sock) -> io::Result<Wire> {
        match &sock {
            Sock::Unix(s) => {
                s.set_nonblocking(true)?;
                grow_send_buffer(s.as_raw_fd());
            }
            Sock::Tcp(s) => {
                s.set_nonblocking(true)?;
                let _ = s.set_nodelay(true);
            }
        }
        Ok(Wire {
            sock,
            tls: None,
            closed: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            peer_closed: Mutex::new(false),
            peer_closed_cv: Condvar::new(),
        })
    }

    /// A second handle to the socket, for a TLS session to own.
    pub(crate) fn raw_clone(&self) -> io::Result<Sock> {
        self.sock.try_clone()
    }

    /// From now on, data goes through this TLS session.
    pub(crate) fn set_tls(&mut self, s: SslStream<Sock>) {
        self.tls = Some(Mutex::new(s));
    }

    /// Close the connection: every wait in progress returns `Closed` promptly. Only our
    /// sending side is shut: the server still reads what was sent (then end of file) and
    /// answers it, and [`Wire::drain_until_peer_closes`] sees when it has closed too.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.sock.shutdown(Shutdown::Write);
    }

    /// Close both directions and stop waiting for the server (the connection is being
    /// dropped and nobody will ask whether the server has closed).
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
        self.closed.store(true, Ordering::SeqCst);
        self.sock.shutdown(Shutdown::Both);
    }

    /// After [`Wire::close`]: read and discard the server's answers until it closes its
    /// side (end of file or an error), then record that. Returns early, recording
    /// nothing, once [`Wire::abandon`] is called.
    pub(crate) fn drain_until_peer_closes(&self) {
        let mut scratch = vec![0u8; 64 * 1024];
        loop {
            if self.abandoned.load(Ordering::SeqCst) {
                return;
            }
            if !poll_in(self.sock.fd(), TICK) {
                continue;
            }
            match self.sock.read_raw(&mut scratch) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => break,
            }
        }
        if self.abandoned.load(Ordering::SeqCst) {
            return;
        }
        *lock(&self.peer_closed) = true;
        self.peer_closed_cv.notify_all();
    }

    /// Whether the server closed its side (see [`Wire::drain_until_peer_closes`]) by
    /// `until`.
    pub(crate) fn wait_peer_closed(&self, until: Instant) -> bool {
        let mut closed = lock(&self.peer_closed);
        while !*closed {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            closed = self
                .peer_closed_cv
                .wait_timeout(closed, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }

    /// Wait for the socket as `want` says, until `until` (or a tick, without one).
    pub(crate) fn wait(&self, want: Want, until: Option<Instant>) -> Result<(), WireError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(WireError::Closed("connection closed".into()));
        }
        let left = match until {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(WireError::Timeout);
                }
                left.min(TICK)
            }
            None => TICK,
        };
        match want {
            Want::Read => poll_in(self.sock.fd(), left),
            Want::Write => poll_out(self.sock.fd(), left),
        };
        Ok(())
    }

    /// Read some bytes (at least one). EOF is `Closed`.
    pub(crate) fn read_some(
        &self,
        buf: &mut [u8],
        until: Option<Instant>,
    ) -> Result<usize, WireError> {
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(WireError::Closed("connection closed".into()));
            }
            let step = match &self.tls {
                None => io_step((&self.sock).read_nb(buf), Want::Read)?,
                Some(t) => ssl_step(lock(t).ssl_read(buf))?,
            };
            match step {
                Ok(0) => return Err(WireError::Closed("the server closed the connection".into())),
                Ok(n) => return Ok(n),
                Err(want) => self.wait(want, until)?,
            }
        }
    }

    /// Read exactly `buf.len()` bytes.
    pub(crate) fn read_exact(
        &self,
        buf: &mut [u8],
        until: Option<Instant>,
    ) -> Result<(), WireError> {
        let mut at = 0;
        while at < buf.len() {
            at += self.read_some(&mut buf[at..], until)?;
        }
        Ok(())
    }

    /// Write all of `buf`.
    pub(crate) fn write_all(&self, buf: &[u8], until: Option<Instant>) -> Result<(), WireError> {
        let mut at = 0;
        while at < buf.len() {
            if self.closed.load(Ordering::SeqCst) {
                return Err(WireError::Closed("connection closed".into()));
            }
            let rest = &buf[at..];
            let step = match &self.tls {
                None => io_step((&self.sock).write_nb(rest), Want::Write)?,
                Some(t) => ssl_step(lock(t).ssl_write(rest))?,
            };
            match step {
                Ok(0) => return Err(WireError::Closed("write returned 0".into())),
                Ok(n) => at += n,
                Err(want) => self.wait(want, until)?,
            }
        }
        Ok(())
    }

    /// Write all of `head`, then all of `body` (a request's header and payload). On a
    /// plain socket both go out through one `writev` per try, with no copy. Through TLS
    /// (which copies every byte it encrypts anyway) a small pair is joined into one
    /// record, a large one written in turn.
    pub(crate) fn write_all2(
        &self,
        head: &[u8],
        body: &[u8],
        until: Option<Instant>,
    ) -> Result<(), WireError> {
        if self.tls.is_some() {
            if body.len() <= TLS_JOIN {
                return self.write_all(&[head, body].concat(), until);
            }
            self.write_all(head, until)?;
            return self.write_all(body, until);
        }
        let total = head.len() + body.len();
        let mut at = 0;
        while at < total {
            if self.closed.load(Ordering::SeqCst) {
                return Err(WireError::Closed("connection closed".into()));
            }
            let r = match head.get(at..) {
                Some(h) if !h.is_empty() => {
                    (&self.sock).write_parts_nb(&[IoSlice::new(h), IoSlice::new(body)])
                }
                _ => (&self.sock).write_parts_nb(&[IoSlice::new(&body[at - head.len()..])]),
            };
            match io_step(r, Want::Write)? {
                Ok(0) => return Err(WireError::Closed("write returned 0".into())),
                Ok(n) => at += n,
                Err(want) => self.wait(want, until)?,
            }
        }
        Ok(())
    }

    /// Send TLS close_notify (best effort, never waits).
    pub(crate) fn tls_shutdown(&self) {
        if let Some(t) = &self.tls {
            let _ = lock(t).shutdown();
        }
    }
}

/// Ask for a Unix socket send buffer of [`UNIX_SNDBUF`] (best effort: the kernel caps it
/// at `net.core.wmem_max`), so a large write request usually goes out with one call
/// instead of a few, each after a wait for the server to read. Not for TCP, whose buffer
/// the kernel sizes itself (setting one turns that off).
fn grow_send_buffer(fd: RawFd) {
    let v = UNIX_SNDBUF as libc::c_int;
    // SAFETY: `fd` is an open socket; the option value is a c_int that lives across the
    // call, and its size is passed.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Reads and writes on a shared socket reference.
trait SockIo {
    fn read_nb(self, b: &mut [u8]) -> io::Result<usize>;
    fn write_nb(self, b: &[u8]) -> io::Result<usize>;
    /// One gathering write (`writev`).
    fn write_parts_nb(self, parts: &[IoSlice<'_>]) -> io::Result<usize>;
}

impl SockIo for &Sock {
    fn read_nb(self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).read(b),
            Sock::Tcp(s) => (&*s).read(b),
        }
    }
    fn write_nb(self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).write(b),
            Sock::Tcp(s) => (&*s).write(b),
        }
    }
    fn write_parts_nb(self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => (&*s).write_vectored(parts),
            Sock::Tcp(s) => (&*s).write_vectored(parts),
        }
    }
}

/// Drive a non-blocking TLS handshake step: map its error to what to wait for.
pub(crate) fn handshake_want(e: &openssl::ssl::Error) -> Option<Want> {
    match e.code() {
        ErrorCode::WANT_READ => Some(Want::Read),
        ErrorCode::WANT_WRITE => Some(Want::Write),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Header and payload arrive whole and in order, whatever the socket takes per call
    /// (both are larger than a Unix socket's buffer, so the gathering write is cut inside
    /// the header and inside the payload).
    #[test]
    fn a_gathered_write_survives_partial_writes() {
        let (a, b) = UnixStream::pair().unwrap();
        let wire = Wire::new(Sock::Unix(a)).unwrap();
        let head: Vec<u8> = (0..(1 << 20) + 7).map(|i| (i % 253) as u8).collect();
        let body: Vec<u8> = (0..(3 << 20) + 5).map(|i| (i % 241) as u8).collect();
        let want = [head.as_slice(), body.as_slice()].concat();
        let n = want.len();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; n];
            let mut b = b;
            b.read_exact(&mut got).unwrap();
            got
        });
        let until = Instant::now() + Duration::from_secs(30);
        wire.write_all2(&head, &body, Some(until)).unwrap();
        wire.write_all2(&[], &[], Some(until)).unwrap();
        assert!(reader.join().unwrap() == want, "bytes differ");
    }
}
