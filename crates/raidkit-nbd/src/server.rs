//! The server: listener, handshake, transmission, shutdown.

use crate::proto::{self, errno, get16, get32, Cmd, Limits, Refusal, Request};
use crate::{Backend, NbdError, TlsConfig};
use openssl::ssl::{ErrorCode, Ssl, SslStream};
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Largest READ/WRITE payload the server accepts (and advertises at most): 32 MiB.
pub const DEFAULT_MAX_PAYLOAD: u32 = 32 << 20;
/// Options longer than this are refused with `NBD_REP_ERR_TOO_BIG`.
const MAX_OPTION_LEN: u32 = 64 << 10;
/// Options longer than this close the connection instead of being drained.
const OPTION_DRAIN_LIMIT: u32 = 16 << 20;
/// Oversized WRITE payloads up to this size are drained (and refused); larger ones close
/// the connection.
const WRITE_DRAIN_LIMIT: u32 = 64 << 20;
/// Payload bytes in flight per connection before the reader stops reading.
const MAX_BYTES_IN_FLIGHT: u64 = 64 << 20;
/// Socket buffer size requested.
const SOCK_BUF: libc::c_int = 4 << 20;
/// How long a shutdown waits for clients before closing their sockets.
const GRACE: Duration = Duration::from_secs(3);
/// Poll interval for the stop flag.
const TICK_MS: libc::c_int = 100;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One named export.
#[derive(Clone)]
pub struct Export {
    /// Name clients ask for (the first export is also the default, empty name).
    pub name: String,
    /// Description (`NBD_INFO_DESCRIPTION`); empty: the backend's.
    pub description: String,
    /// The storage.
    pub backend: Arc<dyn Backend>,
}

/// Server configuration.
#[derive(Clone)]
pub struct ServerConfig {
    /// Exports, at least one; names must be distinct.
    pub exports: Vec<Export>,
    /// TLS credentials; `None`: `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_POLICY`.
    pub tls: Option<TlsConfig>,
    /// Refuse every option but STARTTLS and ABORT until TLS is up (`NBD_REP_ERR_TLS_REQD`).
    pub tls_required: bool,
    /// Worker threads per connection (requests processed concurrently).
    pub workers: usize,
}

impl ServerConfig {
    /// A configuration with these exports, no TLS, 16 workers per connection.
    pub fn new(exports: Vec<Export>) -> ServerConfig {
        ServerConfig {
            exports,
            tls: None,
            tls_required: false,
            workers: 16,
        }
    }
}

/// Where to listen.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A Unix socket path (a stale socket file is replaced; a live one is an error).
    Unix(PathBuf),
    /// `HOST:PORT` (IPv6 as `[::1]:10809`); port 0 picks a free port.
    Tcp(String),
}

struct ExportEntry {
    name: String,
    description: String,
    backend: Arc<dyn Backend>,
    flags: u16,
    limits: Limits,
    sizes: (u32, u32, u32),
}

/// Make block sizes legal: minimum a power of two ≤ 64 KiB, preferred a power of two
/// between minimum and maximum, maximum a multiple of the minimum ≤ the payload cap.
fn legal_sizes((min, pref, max): (u32, u32, u32)) -> (u32, u32, u32) {
    let min = if min.is_power_of_two() && min <= 65536 {
        min
    } else {
        512
    };
    let mut max = max.clamp(min, DEFAULT_MAX_PAYLOAD);
    max -= max % min;
    let mut pref = if pref == 0 {
        4096
    } else if pref.is_power_of_two() {
        pref
    } else {
        1 << (31 - pref.leading_zeros())
    };
    pref = pref.max(min);
    while pref > max && pref > min {
        pref /= 2;
    }
    (min, pref, max)
}

impl ExportEntry {
    fn new(e: &Export) -> ExportEntry {
        let b = &e.backend;
        let ro = b.read_only();
        let sizes = legal_sizes(b.block_sizes());
        let mut flags = proto::TF_HAS_FLAGS | proto::TF_SEND_FLUSH;
        if ro {
            flags |= proto::TF_READ_ONLY;
        } else {
            flags |= proto::TF_SEND_FUA
                | proto::TF_SEND_TRIM
                | proto::TF_SEND_WRITE_ZEROES
                | proto::TF_SEND_FAST_ZERO;
        }
        if b.can_multi_conn() {
            flags |= proto::TF_CAN_MULTI_CONN;
        }
        let description = if e.description.is_empty() {
            b.description()
        } else {
            e.description.clone()
        };
        ExportEntry {
            name: e.name.clone(),
            description,
            backend: Arc::clone(b),
            flags,
            limits: Limits {
                size: b.size(),
                read_only: ro,
                max_payload: sizes.2,
                fast_zero: b.can_fast_zero(),
            },
            sizes,
        }
    }
}

// ------------------------------------------------------------------ streams

enum RawStream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl RawStream {
    fn try_clone(&self) -> io::Result<RawStream> {
        Ok(match self {
            RawStream::Unix(s) => RawStream::Unix(s.try_clone()?),
            RawStream::Tcp(s) => RawStream::Tcp(s.try_clone()?),
        })
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            RawStream::Unix(s) => s.shutdown(how),
            RawStream::Tcp(s) => s.shutdown(how),
        };
    }
    fn fd(&self) -> RawFd {
        match self {
            RawStream::Unix(s) => s.as_raw_fd(),
            RawStream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl Read for RawStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            RawStream::Unix(s) => s.read(buf),
            RawStream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for RawStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            RawStream::Unix(s) => s.write(buf),
            RawStream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The stream during the handshake: plain, or TLS after STARTTLS.
enum Stream {
    Plain(RawStream),
    Tls(Box<SslStream<RawStream>>),
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

type SharedTls = Arc<Mutex<SslStream<RawStream>>>;

/// Wait until `fd` is readable (or hung up). `timeout_ms < 0` waits forever.
/// Returns false on timeout.
fn poll_in(fd: RawFd, timeout_ms: libc::c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is a valid, initialised pollfd that lives across the call; we
        // pass a count of exactly one.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r > 0 {
            return true;
        }
        if r == 0 {
            return false;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // Let the following read report the problem.
            return true;
        }
    }
}

/// Reads application data from a TLS stream shared with the reply writers: the lock is
/// only held while a record is being read, never while waiting for one.
struct TlsReader {
    tls: SharedTls,
    fd: RawFd,
}

impl Read for TlsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut g = lock(&self.tls);
                if g.ssl().pending() == 0 {
                    drop(g);
                    poll_in(self.fd, -1);
                    g = lock(&self.tls);
                }
                match g.ssl_read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) => match e.code() {
                        ErrorCode::ZERO_RETURN => return Ok(0),
                        ErrorCode::WANT_READ | ErrorCode::WANT_WRITE if e.io_error().is_none() => {}
                        ErrorCode::SYSCALL if e.io_error().is_none() => return Ok(0),
                        _ => {
                            return Err(e.into_io_error().unwrap_or_else(io::Error::other));
                        }
                    },
                }
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

fn tune_socket(fd: RawFd) {
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        let v: libc::c_int = SOCK_BUF;
        // SAFETY: `fd` is an open socket owned by the caller; the option value points to
        // a live c_int and its exact size is passed. Failure is harmless (kernel limits).
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

// ------------------------------------------------------------------ server

struct ConnEntry {
    raw: RawStream,
    transmitting: Arc<AtomicBool>,
}

struct Shared {
    exports: Vec<Arc<ExportEntry>>,
    tls: Option<TlsConfig>,
    tls_required: bool,
    workers: usize,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, ConnEntry>>,
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

/// A bound NBD server. [`Server::run`] serves until [`ShutdownHandle::shutdown`].
pub struct Server {
    listener: Listener,
    shared: Arc<Shared>,
}

/// Stops a running [`Server`] gracefully: no new connections, in-flight requests are
/// finished and answered, every backend is flushed, then `run` returns.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// Ask the server to stop (returns at once; `run` returns when done).
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
    /// True once a shutdown was asked for.
    pub fn is_stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }
}

/// Call `handle.shutdown()` on the first SIGINT or SIGTERM (after `on_signal(signo)`);
/// a second signal exits the process at once with status 130.
pub fn shutdown_on_signals(
    handle: ShutdownHandle,
    on_signal: impl Fn(i32) + Send + 'static,
) -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    thread::Builder::new()
        .name("nbd-signals".into())
        .spawn(move || {
            let mut seen = 0;
            for sig in signals.forever() {
                seen += 1;
                if seen == 1 {
                    on_signal(sig);
                    handle.shutdown();
                } else {
                    std::process::exit(130);
                }
            }
        })?;
    Ok(())
}

impl Server {
    /// Validate the configuration and bind the listener.
    pub fn bind(cfg: ServerConfig, listen: &Listen) -> Result<Server, NbdError> {
        if cfg.exports.is_empty() {
            return Err(NbdError::Config("no exports configured".into()));
        }
        for (i, e) in cfg.exports.iter().enumerate() {
            if e.name.len() > 4096 || e.name.contains('\0') {
                return Err(NbdError::Config(format!(
                    "export name {:?} is not a valid NBD string",
                    e.name
                )));
            }
            if cfg.exports[..i].iter().any(|o| o.name == e.name) {
                return Err(NbdError::Config(format!(
                    "export name {:?} is used twice",
                    e.name
                )));
            }
        }
        if cfg.tls_required && cfg.tls.is_none() {
            return Err(NbdError::Config(
                "TLS is required but no certificate or PSK file was given".into(),
            ));
        }
        let listener = match listen {
            Listen::Unix(p) => {
                if let Ok(md) = std::fs::symlink_metadata(p) {
                    if !md.file_type().is_socket() {
                        return Err(NbdError::Config(format!(
                            "{} exists and is not a socket; choose another path",
                            p.display()
                        )));
                    }
                    if UnixStream::connect(p).is_ok() {
                        return Err(NbdError::Config(format!(
                            "{} is in use by a running server",
                            p.display()
                        )));
                    }
                    let _ = std::fs::remove_file(p);
                }
                let l = UnixListener::bind(p).map_err(|source| NbdError::Listen {
                    what: "binding Unix socket",
                    addr: p.display().to_string(),
                    source,
                })?;
                Listener::Unix(l, p.clone())
            }
            Listen::Tcp(a) => {
                let err = |source| NbdError::Listen {
                    what: "listening on",
                    addr: a.clone(),
                    source,
                };
                let addrs: Vec<_> = a.to_socket_addrs().map_err(err)?.collect();
                let l = TcpListener::bind(&addrs[..]).map_err(err)?;
                Listener::Tcp(l)
            }
        };
        let exports = cfg
            .exports
            .iter()
            .map(|e| Arc::new(ExportEntry::new(e)))
            .collect();
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                exports,
                tls: cfg.tls,
                tls_required: cfg.tls_required,
                workers: cfg.workers.clamp(1, 64),
                stop: AtomicBool::new(false),
                conns: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The socket path, or the bound `IP:PORT`.
    pub fn local_addr(&self) -> String {
        match &self.listener {
            Listener::Unix(_, p) => p.display().to_string(),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into()),
        }
    }

    /// A handle to stop the server.
    pub fn handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Run `run` on a thread of its own.
    pub fn spawn(self) -> (ShutdownHandle, JoinHandle<Result<(), NbdError>>) {
        let h = self.handle();
        (h, thread::spawn(move || self.run()))
    }

    /// Accept and serve connections until shut down; then finish in-flight requests,
    /// flush every backend and return.
    pub fn run(self) -> Result<(), NbdError> {
        let sh = &self.shared;
        let lfd = match &self.listener {
            Listener::Unix(l, _) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        };
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut next_id = 0u64;
        while !sh.stop.load(Ordering::SeqCst) {
            threads.retain(|t| !t.is_finished());
            if !poll_in(lfd, TICK_MS) {
                continue;
            }
            let accepted = match &self.listener {
                Listener::Unix(l, _) => l.accept().map(|(s, _)| RawStream::Unix(s)),
                Listener::Tcp(l) => l.accept().map(|(s, _)| {
                    let _ = s.set_nodelay(true);
                    RawStream::Tcp(s)
                }),
            };
            let raw = match accepted {
                Ok(r) => r,
                Err(_) => {
                    // EMFILE, ECONNABORTED...: keep serving the others.
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            tune_socket(raw.fd());
            let Ok(reg) = raw.try_clone() else { continue };
            let id = next_id;
            next_id += 1;
            let transmitting = Arc::new(AtomicBool::new(false));
            lock(&sh.conns).insert(
                id,
                ConnEntry {
                    raw: reg,
                    transmitting: Arc::clone(&transmitting),
                },
            );
            let sh2 = Arc::clone(sh);
            let t = thread::Builder::new()
                .name(format!("nbd-conn-{id}"))
                .spawn(move || {
                    let _ = serve_conn(&sh2, raw, &transmitting);
                    lock(&sh2.conns).remove(&id);
                });
            match t {
                Ok(t) => threads.push(t),
                Err(_) => {
                    if let Some(c) = lock(&sh.conns).remove(&id) {
                        c.raw.shutdown(Shutdown::Both);
                    }
                }
            }
        }
        // Stop accepting.
        if let Listener::Unix(_, p) = &self.listener {
            let _ = std::fs::remove_file(p);
        }
        drop(self.listener);
        // Connections still negotiating are dropped; transmitting ones stop reading new
        // requests (their readers watch the stop flag) and finish those in flight.
        for c in lock(&sh.conns).values() {
            if !c.transmitting.load(Ordering::SeqCst) {
                c.raw.shutdown(Shutdown::Both);
            }
        }
        let start = Instant::now();
        let mut stage = 0;
        while threads.iter().any(|t| !t.is_finished()) {
            let el = start.elapsed();
            if stage == 0 && el > GRACE {
                // A client stalled in the middle of a request.
                for c in lock(&sh.conns).values() {
                    c.raw.shutdown(Shutdown::Read);
                }
                stage = 1;
            } else if stage == 1 && el > 2 * GRACE {
                // A client that does not read its replies.
                for c in lock(&sh.conns).values() {
                    c.raw.shutdown(Shutdown::Both);
                }
                stage = 2;
            }
            thread::sleep(Duration::from_millis(10));
        }
        for t in threads {
            let _ = t.join();
        }
        let mut first = None;
        for e in &sh.exports {
            if let Err(source) = e.backend.flush() {
                first.get_or_insert(NbdError::Flush {
                    export: e.name.clone(),
                    source,
                });
            }
        }
        first.map_or(Ok(()), Err)
    }
}

// ------------------------------------------------------------------ handshake

struct NegState {
    tls_active: bool,
    structured: bool,
    no_zeroes: bool,
}

enum Outcome {
    Close,
    StartTls,
    Transmit(Arc<ExportEntry>),
}

fn serve_conn(sh: &Arc<Shared>, raw: RawStream, transmitting: &AtomicBool) -> io::Result<()> {
    let ctl = raw.try_clone()?;
    let mut s = Stream::Plain(raw);
    let mut hello = [0u8; 18];
    hello[0..8].copy_from_slice(&proto::NBDMAGIC.to_be_bytes());
    hello[8..16].copy_from_slice(&proto::IHAVEOPT.to_be_bytes());
    hello[16..18]
        .copy_from_slice(&(proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let mut cf = [0u8; 4];
    s.read_exact(&mut cf)?;
    let cflags = u32::from_be_bytes(cf);
    if cflags & !(proto::FLAG_C_FIXED_NEWSTYLE | proto::FLAG_C_NO_ZEROES) != 0 {
        return Ok(());
    }
    let mut st = NegState {
        tls_active: false,
        structured: false,
        no_zeroes: cflags & proto::FLAG_C_NO_ZEROES != 0,
    };
    let export = loop {
        match negotiate(&mut s, sh, &mut st)? {
            Outcome::Close => return Ok(()),
            Outcome::Transmit(e) => break e,
            Outcome::StartTls => {
                let (Stream::Plain(p), Some(tls)) = (s, &sh.tls) else {
                    return Ok(());
                };
                let ssl = Ssl::new(&tls.ctx).map_err(io::Error::other)?;
                match ssl.accept(p) {
                    Ok(t) => {
                        s = Stream::Tls(Box::new(t));
                        st.tls_active = true;
                    }
                    Err(_) => return Ok(()),
                }
            }
        }
    };
    transmitting.store(true, Ordering::SeqCst);
    transmission(sh, s, export, st.structured, ctl)
}

fn opt_reply(s: &mut dyn Write, opt: u32, typ: u32, data: &[u8]) -> io::Result<()> {
    let len = u32::try_from(data.len()).map_err(io::Error::other)?;
    let mut h = Vec::with_capacity(20 + data.len());
    h.extend_from_slice(&proto::REPLY_MAGIC.to_be_bytes());
    h.extend_from_slice(&opt.to_be_bytes());
    h.extend_from_slice(&typ.to_be_bytes());
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(data);
    s.write_all(&h)?;
    s.flush()
}

fn drain(s: &mut dyn Read, mut n: u64) -> io::Result<()> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        s.read_exact(&mut buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}

fn find_export(sh: &Shared, name: &[u8]) -> Option<Arc<ExportEntry>> {
    if name.is_empty() {
        return sh.exports.first().cloned();
    }
    sh.exports
        .iter()
        .find(|e| e.name.as_bytes() == name)
        .cloned()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Process options until the client enters transmission, upgrades to TLS or leaves.
fn negotiate(s: &mut dyn ReadWrite, sh: &Shared, st: &mut NegState) -> io::Result<Outcome> {
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let mut m = [0u8; 8];
        m.copy_from_slice(&h[0..8]);
        if u64::from_be_bytes(m) != proto::IHAVEOPT {
            return Ok(Outcome::Close);
        }
        let opt = get32(&h, 8);
        let len = get32(&h, 12);
        if len > MAX_OPTION_LEN {
            if len > OPTION_DRAIN_LIMIT || opt == proto::OPT_EXPORT_NAME {
                return Ok(Outcome::Close);
            }
            drain(s, u64::from(len))?;
            opt_reply(s, opt, proto::REP_ERR_TOO_BIG, b"option data too long")?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data)?;
        if sh.tls_required
            && !st.tls_active
            && opt != proto::OPT_STARTTLS
            && opt != proto::OPT_ABORT
        {
            if opt == proto::OPT_EXPORT_NAME {
                return Ok(Outcome::Close);
            }
            opt_reply(
                s,
                opt,
                proto::REP_ERR_TLS_REQD,
                b"this server requires TLS: send NBD_OPT_STARTTLS first",
            )?;
            continue;
        }
        if sh.stop.load(Ordering::SeqCst) && opt != proto::OPT_ABORT {
            if opt == proto::OPT_EXPORT_NAME {
                return Ok(Outcome::Close);
            }
            opt_reply(s, opt, proto::REP_ERR_SHUTDOWN, b"server is shutting down")?;
            continue;
        }
        match opt {
            proto::OPT_ABORT => {
                let _ = opt_reply(s, opt, proto::REP_ACK, &[]);
                return Ok(Outcome::Close);
            }
            proto::OPT_LIST => {
                if len != 0 {
                    opt_reply(
                        s,
                        opt,
                        proto::REP_ERR_INVALID,
                        b"NBD_OPT_LIST takes no data",
                    )?;
                    continue;
                }
                for e in &sh.exports {
                    let mut d = Vec::with_capacity(4 + e.name.len() + e.description.len());
                    d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                    d.extend_from_slice(e.name.as_bytes());
                    d.extend_from_slice(e.description.as_bytes());
                    opt_reply(s, opt, proto::REP_SERVER, &d)?;
                }
                opt_reply(s, opt, proto::REP_ACK, &[])?;
            }
            proto::OPT_STARTTLS => {
                if len != 0 {
                    opt_reply(
                        s,
                        opt,
                        proto::REP_ERR_INVALID,
                        b"NBD_OPT_STARTTLS takes no data",
                    )?;
                } else if st.tls_active {
                    opt_reply(s, opt, proto::REP_ERR_INVALID, b"TLS is already active")?;
                } else if sh.tls.is_none() {
                    opt_reply(s, opt, proto::REP_ERR_POLICY, b"TLS is not configured")?;
                } else {
                    opt_reply(s, opt, proto::REP_ACK, &[])?;
                    return Ok(Outcome::StartTls);
                }
            }
            proto::OPT_STRUCTURED_REPLY => {
                if len != 0 {
                    opt_reply(
                        s,
                        opt,
                        proto::REP_ERR_INVALID,
                        b"NBD_OPT_STRUCTURED_REPLY takes no data",
                    )?;
                } else {
                    st.structured = true;
                    opt_reply(s, opt, proto::REP_ACK, &[])?;
                }
            }
            proto::OPT_EXPORT_NAME => {
                let Some(e) = find_export(sh, &data) else {
                    return Ok(Outcome::Close);
                };
                let mut r = Vec::with_capacity(134);
                r.extend_from_slice(&e.limits.size.to_be_bytes());
                r.extend_from_slice(&e.flags.to_be_bytes());
                if !st.no_zeroes {
                    r.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&r)?;
                s.flush()?;
                return Ok(Outcome::Transmit(e));
            }
            proto::OPT_INFO | proto::OPT_GO => {
                // u32 name length, name, u16 count, count × u16 info type.
                let nlen = get32(&data, 0) as usize;
                let parsed = data
                    .get(4..)
                    .and_then(|rest| rest.get(..nlen).map(|n| (n, rest.get(nlen..))))
                    .and_then(|(name, tail)| {
                        let tail = tail?;
                        let count = get16(tail, 0) as usize;
                        (tail.len() == 2 + 2 * count).then_some((name, tail.get(2..)?))
                    });
                let Some((name, reqs)) = parsed else {
                    opt_reply(
                        s,
                        opt,
                        proto::REP_ERR_INVALID,
                        b"malformed NBD_OPT_INFO/GO data",
                    )?;
                    continue;
                };
                let Some(e) = find_export(sh, name) else {
                    let msg = format!(
                        "no export named {:?}",
                        String::from_utf8_lossy(&name[..name.len().min(256)])
                    );
                    opt_reply(s, opt, proto::REP_ERR_UNKNOWN, msg.as_bytes())?;
                    continue;
                };
                let mut info = Vec::with_capacity(16);
                info.extend_from_slice(&proto::INFO_EXPORT.to_be_bytes());
                info.extend_from_slice(&e.limits.size.to_be_bytes());
                info.extend_from_slice(&e.flags.to_be_bytes());
                opt_reply(s, opt, proto::REP_INFO, &info)?;
                let wants = |t: u16| reqs.chunks_exact(2).any(|c| get16(c, 0) == t);
                if wants(proto::INFO_NAME) {
                    let mut d = proto::INFO_NAME.to_be_bytes().to_vec();
                    d.extend_from_slice(e.name.as_bytes());
                    opt_reply(s, opt, proto::REP_INFO, &d)?;
                }
                if wants(proto::INFO_DESCRIPTION) && !e.description.is_empty() {
                    let mut d = proto::INFO_DESCRIPTION.to_be_bytes().to_vec();
                    d.extend_from_slice(e.description.as_bytes());
                    opt_reply(s, opt, proto::REP_INFO, &d)?;
                }
                let mut d = proto::INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                d.extend_from_slice(&e.sizes.0.to_be_bytes());
                d.extend_from_slice(&e.sizes.1.to_be_bytes());
                d.extend_from_slice(&e.sizes.2.to_be_bytes());
                opt_reply(s, opt, proto::REP_INFO, &d)?;
                opt_reply(s, opt, proto::REP_ACK, &[])?;
                if opt == proto::OPT_GO {
                    return Ok(Outcome::Transmit(e));
                }
            }
            _ => {
                opt_reply(s, opt, proto::REP_ERR_UNSUP, b"option not supported")?;
            }
        }
    }
}

// ------------------------------------------------------------------ transmission
//
// nbdkit's model: every worker of a connection takes its turn at the socket (under the
// read lock) to read one request header and payload, then processes the request and
// writes the reply (under the write lock) itself. No hand-off between threads, one
// reply write per request, and the buffered reader takes many small request headers
// with one `recv`.

/// Largest request buffer kept for reuse.
const KEEP_BUF: usize = 4 << 20;
/// Request buffers kept for reuse per connection.
const KEEP_BUFS: usize = 16;
/// Replies up to this size are coalesced with others (larger ones are written alone).
const COALESCE_MAX: usize = 64 << 10;
/// Out queue capacity kept between bursts.
const KEEP_OUT: usize = 1 << 20;

struct Flight {
    bytes: u64,
    /// The reading worker waits for bytes to be released.
    waiting: bool,
}

/// Replies waiting for the worker that is writing.
struct OutQueue {
    buf: Vec<u8>,
    /// A worker is writing (and will send whatever is queued before it stops).
    busy: bool,
}

/// The socket as read during transmission.
enum InReader {
    /// A plain socket with a receive timeout of one tick (so an idle reader can watch the
    /// stop flag without a `poll` per request). `patient`: timeouts are retried (inside a
    /// request); otherwise they are reported (between requests).
    Plain {
        s: RawStream,
        patient: bool,
    },
    Tls(TlsReader),
}

impl Read for InReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            InReader::Plain { s, patient } => loop {
                match s.read(buf) {
                    Err(e)
                        if *patient
                            && matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                            ) => {}
                    r => return r,
                }
            },
            InReader::Tls(t) => t.read(buf),
        }
    }
}

/// The reading side of a connection, taken in turn by the workers.
struct ReadSide {
    reader: BufReader<InReader>,
    tls: Option<SharedTls>,
    /// No more requests are read (disconnect, error, shutdown).
    done: bool,
}

struct Conn {
    rd: Mutex<ReadSide>,
    out: Mutex<OutQueue>,
    writer: Mutex<Box<dyn Write + Send>>,
    structured: bool,
    export: Arc<ExportEntry>,
    limits: Limits,
    fd: RawFd,
    /// Payload bytes in flight (requests in flight are bounded by the workers).
    flight: Mutex<Flight>,
    flight_cv: Condvar,
    /// Request buffers, reused last-in first-out so the ones in use stay in cache
    /// (whichever worker takes the next request).
    pool: Mutex<Vec<Vec<u8>>>,
    dead: AtomicBool,
    ctl: RawStream,
}

fn truncate_msg(m: &str) -> &str {
    let mut end = m.len().min(1024);
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    m.get(..end).unwrap_or("")
}

impl Conn {
    /// Send one whole reply. Small replies are coalesced: while one worker is writing,
    /// others append theirs to the out queue and return; the writing worker sends what
    /// has queued up with its next write (fewer writes, fewer client wake-ups).
    fn send(&self, data: &[u8]) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        if data.len() > COALESCE_MAX {
            let mut w = lock(&self.writer);
            let r = w.write_all(data).and_then(|_| w.flush());
            drop(w);
            if r.is_err() {
                self.die();
            }
            return;
        }
        let mut batch = {
            let mut q = lock(&self.out);
            q.buf.extend_from_slice(data);
            if q.busy {
                return;
            }
            q.busy = true;
            std::mem::take(&mut q.buf)
        };
        loop {
            let r = {
                let mut w = lock(&self.writer);
                w.write_all(&batch).and_then(|_| w.flush())
            };
            batch.clear();
            let mut q = lock(&self.out);
            if r.is_err() {
                q.busy = false;
                q.buf.clear();
                drop(q);
                self.die();
                return;
            }
            if q.buf.is_empty() {
                q.busy = false;
                if batch.capacity() <= KEEP_OUT {
                    q.buf = batch;
                }
                return;
            }
            std::mem::swap(&mut q.buf, &mut batch);
        }
    }

    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.ctl.shutdown(Shutdown::Both);
    }

    fn simple_header(errno: u32, cookie: u64) -> [u8; 16] {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&proto::SIMPLE_REPLY_MAGIC.to_be_bytes());
        h[4..8].copy_from_slice(&errno.to_be_bytes());
        h[8..16].copy_from_slice(&cookie.to_be_bytes());
        h
    }

    fn chunk_header(flags: u16, typ: u16, cookie: u64, len: u32) -> [u8; 20] {
        let mut h = [0u8; 20];
        h[0..4].copy_from_slice(&proto::STRUCTURED_REPLY_MAGIC.to_be_bytes());
        h[4..6].copy_from_slice(&flags.to_be_bytes());
        h[6..8].copy_from_slice(&typ.to_be_bytes());
        h[8..16].copy_from_slice(&cookie.to_be_bytes());
        h[16..20].copy_from_slice(&len.to_be_bytes());
        h
    }

    fn reply_ok(&self, cookie: u64) {
        self.send(&Self::simple_header(0, cookie));
    }

    /// An error reply: a structured ERROR (or ERROR_OFFSET with `offset`) chunk if
    /// structured replies were negotiated, else a simple reply.
    fn reply_error(&self, cookie: u64, errno: u32, msg: &str, offset: Option<u64>) {
        if !self.structured {
            self.send(&Self::simple_header(errno, cookie));
            return;
        }
        let msg = truncate_msg(msg).as_bytes();
        let mut p = Vec::with_capacity(20 + 14 + msg.len());
        p.extend_from_slice(&[0u8; 20]);
        p.extend_from_slice(&errno.to_be_bytes());
        p.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        p.extend_from_slice(msg);
        let typ = match offset {
            Some(o) => {
                p.extend_from_slice(&o.to_be_bytes());
                proto::REPLY_TYPE_ERROR_OFFSET
            }
            None => proto::REPLY_TYPE_ERROR,
        };
        let h = Self::chunk_header(proto::REPLY_FLAG_DONE, typ, cookie, (p.len() - 20) as u32);
        p[..20].copy_from_slice(&h);
        self.send(&p);
    }

    fn refuse(&self, req: &Request, r: Refusal) {
        self.reply_error(req.cookie, r.errno, r.msg, None);
    }

    fn acquire(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut f = lock(&self.flight);
        while !self.dead.load(Ordering::Relaxed)
            && f.bytes > 0
            && f.bytes + bytes > MAX_BYTES_IN_FLIGHT
        {
            f.waiting = true;
            f = self
                .flight_cv
                .wait_timeout(f, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        f.waiting = false;
        f.bytes += bytes;
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut f = lock(&self.flight);
        f.bytes = f.bytes.saturating_sub(bytes);
        // Only the worker holding the read side ever waits; a notify is a system call
        // even without waiters, so only when one is.
        if f.waiting {
            self.flight_cv.notify_one();
        }
    }

    /// Wait until a request starts to arrive. False: stop reading (shutdown, hang-up,
    /// error or a dead connection).
    fn wait_request(&self, sh: &Shared, rd: &mut ReadSide) -> bool {
        if !rd.reader.buffer().is_empty() {
            return true;
        }
        if let Some(t) = &rd.tls {
            if lock(t).ssl().pending() > 0 {
                return true;
            }
            while !poll_in(self.fd, TICK_MS) {
                if sh.stop.load(Ordering::Relaxed) || self.dead.load(Ordering::Relaxed) {
                    return false;
                }
            }
            return true;
        }
        set_patient(&mut rd.reader, false);
        let ok = loop {
            match std::io::BufRead::fill_buf(&mut rd.reader) {
                Ok(b) => break !b.is_empty(),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    if sh.stop.load(Ordering::Relaxed) || self.dead.load(Ordering::Relaxed) {
                        break false;
                    }
                }
                Err(_) => break false,
            }
        };
        set_patient(&mut rd.reader, true);
        ok
    }

    /// Take the next request off the socket (its payload, for a write, into `buf`).
    /// Requests refused at once are answered here. None: no more requests.
    fn next_request(&self, sh: &Shared, buf: &mut Vec<u8>) -> Option<(Request, Cmd)> {
        let mut rd = lock(&self.rd);
        let next = self.read_next(sh, &mut rd, buf);
        if next.is_none() {
            rd.done = true;
        }
        next
    }

    fn read_next(
        &self,
        sh: &Shared,
        rd: &mut ReadSide,
        buf: &mut Vec<u8>,
    ) -> Option<(Request, Cmd)> {
        let lim = &self.limits;
        loop {
            if rd.done || self.dead.load(Ordering::Relaxed) || !self.wait_request(sh, rd) {
                return None;
            }
            let mut h = [0u8; proto::REQUEST_LEN];
            rd.reader.read_exact(&mut h).ok()?;
            let req = proto::parse_request(&h)?;
            if req.typ == proto::CMD_WRITE {
                if req.len > lim.max_payload {
                    if req.len > WRITE_DRAIN_LIMIT
                        || drain(&mut rd.reader, u64::from(req.len)).is_err()
                    {
                        return None;
                    }
                    self.reply_error(
                        req.cookie,
                        errno::EINVAL,
                        "write length exceeds the advertised maximum block size",
                        None,
                    );
                    continue;
                }
                let n = req.len as usize;
                let bytes = u64::from(req.len);
                self.acquire(bytes);
                if buf.len() < n {
                    buf.resize(n, 0);
                }
                let got = match buf.get_mut(..n) {
                    Some(b) => rd.reader.read_exact(b),
                    None => Err(io::Error::other("buffer")),
                };
                if got.is_err() {
                    self.release(bytes);
                    return None;
                }
                match proto::validate(&req, lim) {
                    Ok(cmd) => return Some((req, cmd)),
                    Err(r) => {
                        self.refuse(&req, r);
                        self.release(bytes);
                    }
                }
                continue;
            }
            match proto::validate(&req, lim) {
                Ok(Cmd::Disc) => return None,
                Ok(cmd) => {
                    if cmd == Cmd::Read {
                        self.acquire(u64::from(req.len));
                    }
                    return Some((req, cmd));
                }
                Err(r) => self.refuse(&req, r),
            }
        }
    }

    /// A worker: read a request, process it, reply; until the read side is done.
    fn work(&self, sh: &Shared) {
        loop {
            let mut buf = lock(&self.pool).pop().unwrap_or_default();
            let Some((req, cmd)) = self.next_request(sh, &mut buf) else {
                break;
            };
            self.execute(req, cmd, &mut buf);
            let mut pool = lock(&self.pool);
            if pool.len() < KEEP_BUFS && buf.capacity() > 0 && buf.capacity() <= KEEP_BUF {
                pool.push(buf);
            }
        }
    }

    fn execute(&self, req: Request, cmd: Cmd, buf: &mut Vec<u8>) {
        let b = &self.export.backend;
        let Request {
            cookie,
            offset,
            len,
            ..
        } = req;
        let n = len as usize;
        let res = match cmd {
            Cmd::Read => {
                self.read(cookie, offset, n, buf);
                self.release(u64::from(len));
                return;
            }
            Cmd::Write { fua } => match buf.get(..n) {
                Some(_) if n == 0 => Ok(()),
                Some(data) => b.write(offset, data, fua),
                None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            },
            Cmd::Flush => b.flush(),
            Cmd::Trim { fua } => {
                if n == 0 {
                    Ok(())
                } else {
                    b.trim(offset, u64::from(len))
                        .and_then(|_| if fua { b.flush() } else { Ok(()) })
                }
            }
            Cmd::WriteZeroes { fua, no_hole } => {
                if n == 0 {
                    Ok(())
                } else {
                    b.write_zeroes(offset, u64::from(len), no_hole)
                        .and_then(|_| if fua { b.flush() } else { Ok(()) })
                }
            }
            Cmd::Disc => Ok(()),
        };
        match res {
            Ok(()) => self.reply_ok(cookie),
            Err(e) => self.reply_error(cookie, proto::errno_of(&e), &e.to_string(), None),
        }
        if matches!(cmd, Cmd::Write { .. }) {
            self.release(u64::from(len));
        }
    }

    /// Read into `buf` after room for the reply header, so header and data go out with
    /// one write.
    fn read(&self, cookie: u64, offset: u64, n: usize, buf: &mut Vec<u8>) {
        let hdr = if self.structured { 28 } else { 16 };
        if n == 0 {
            if self.structured {
                let h =
                    Self::chunk_header(proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_NONE, cookie, 0);
                self.send(&h);
            } else {
                self.reply_ok(cookie);
            }
            return;
        }
        if buf.len() < hdr + n {
            buf.resize(hdr + n, 0);
        }
        let res = match buf.get_mut(hdr..hdr + n) {
            Some(data) => self.export.backend.read(offset, data),
            None => Err(io::Error::from_raw_os_error(libc::ENOMEM)),
        };
        match res {
            Ok(()) => {
                if self.structured {
                    let h = Self::chunk_header(
                        proto::REPLY_FLAG_DONE,
                        proto::REPLY_TYPE_OFFSET_DATA,
                        cookie,
                        (8 + n) as u32,
                    );
                    buf[..20].copy_from_slice(&h);
                    buf[20..28].copy_from_slice(&offset.to_be_bytes());
                } else {
                    buf[..16].copy_from_slice(&Self::simple_header(0, cookie));
                }
                if let Some(all) = buf.get(..hdr + n) {
                    self.send(all);
                }
            }
            Err(e) => {
                self.reply_error(cookie, proto::errno_of(&e), &e.to_string(), Some(offset));
            }
        }
    }
}

fn set_patient(r: &mut BufReader<InReader>, p: bool) {
    if let InReader::Plain { patient, .. } = r.get_mut() {
        *patient = p;
    }
}

fn transmission(
    sh: &Arc<Shared>,
    s: Stream,
    export: Arc<ExportEntry>,
    structured: bool,
    ctl: RawStream,
) -> io::Result<()> {
    let fd = ctl.fd();
    let (reader, writer, tls): (InReader, Box<dyn Write + Send>, Option<SharedTls>) = match s {
        Stream::Plain(p) => {
            let r = p.try_clone()?;
            let tick = Some(Duration::from_millis(TICK_MS as u64));
            match &r {
                RawStream::Unix(u) => u.set_read_timeout(tick)?,
                RawStream::Tcp(t) => t.set_read_timeout(tick)?,
            }
            (
                InReader::Plain {
                    s: r,
                    patient: true,
                },
                Box::new(p),
                None,
            )
        }
        Stream::Tls(t) => {
            let t: SharedTls = Arc::new(Mutex::new(*t));
            (
                InReader::Tls(TlsReader {
                    tls: Arc::clone(&t),
                    fd,
                }),
                Box::new(TlsWriter {
                    tls: Arc::clone(&t),
                }),
                Some(t),
            )
        }
    };
    let limits = export.limits;
    let conn = Arc::new(Conn {
        rd: Mutex::new(ReadSide {
            reader: BufReader::with_capacity(256 << 10, reader),
            tls: tls.clone(),
            done: false,
        }),
        out: Mutex::new(OutQueue {
            buf: Vec::new(),
            busy: false,
        }),
        writer: Mutex::new(writer),
        structured,
        export,
        limits,
        fd,
        flight: Mutex::new(Flight {
            bytes: 0,
            waiting: false,
        }),
        flight_cv: Condvar::new(),
        pool: Mutex::new(Vec::new()),
        dead: AtomicBool::new(false),
        ctl: ctl.try_clone()?,
    });
    // This thread is one of the workers.
    let mut workers = Vec::with_capacity(sh.workers.saturating_sub(1));
    for i in 1..sh.workers {
        let conn = Arc::clone(&conn);
        let sh2 = Arc::clone(sh);
        match thread::Builder::new()
            .name(format!("nbd-worker-{i}"))
            .spawn(move || conn.work(&sh2))
        {
            Ok(w) => workers.push(w),
            Err(_) => break,
        }
    }
    conn.work(sh);
    // Finish what is in flight, then close.
    for w in workers {
        let _ = w.join();
    }
    if let Some(t) = tls {
        let _ = lock(&t).shutdown();
    }
    ctl.shutdown(Shutdown::Both);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemBackend;

    #[test]
    fn block_sizes_made_legal() {
        assert_eq!(
            legal_sizes((512, 192 << 10, 32 << 20)),
            (512, 128 << 10, 32 << 20)
        );
        assert_eq!(legal_sizes((4096, 0, u32::MAX)), (4096, 4096, 32 << 20));
        assert_eq!(legal_sizes((3, 1 << 30, 1000)), (512, 512, 512));
        assert_eq!(legal_sizes((512, 65536, 1 << 20)), (512, 65536, 1 << 20));
    }

    struct Duplex {
        input: io::Cursor<Vec<u8>>,
        out: Vec<u8>,
    }
    impl Read for Duplex {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.input.read(b)
        }
    }
    impl Write for Duplex {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.out.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn shared(tls_required: bool) -> Shared {
        let b: Arc<dyn Backend> = Arc::new(MemBackend::new(1 << 20, false));
        let e = Export {
            name: "disk".into(),
            description: String::new(),
            backend: b,
        };
        Shared {
            exports: vec![Arc::new(ExportEntry::new(&e))],
            tls: None,
            tls_required,
            workers: 1,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
        }
    }

    fn opt(o: u32, data: &[u8]) -> Vec<u8> {
        let mut v = proto::IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&o.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    fn run(input: Vec<u8>, tls_required: bool) -> (Vec<u8>, &'static str) {
        let sh = shared(tls_required);
        let mut d = Duplex {
            input: io::Cursor::new(input),
            out: Vec::new(),
        };
        let mut st = NegState {
            tls_active: false,
            structured: false,
            no_zeroes: true,
        };
        let o = match negotiate(&mut d, &sh, &mut st) {
            Ok(Outcome::Close) => "close",
            Ok(Outcome::StartTls) => "starttls",
            Ok(Outcome::Transmit(_)) => "transmit",
            Err(_) => "eof",
        };
        (d.out, o)
    }

    fn reply_types(out: &[u8]) -> Vec<u32> {
        let mut v = Vec::new();
        let mut i = 0;
        while i + 20 <= out.len() {
            v.push(get32(out, i + 12));
            i += 20 + get32(out, i + 16) as usize;
        }
        v
    }

    #[test]
    fn options() {
        let mut go = 4u32.to_be_bytes().to_vec();
        go.extend_from_slice(b"disk");
        go.extend_from_slice(&[0, 1, 0, 3]);
        let mut input = opt(99, b"xyz");
        input.extend(opt(proto::OPT_LIST, &[]));
        input.extend(opt(proto::OPT_LIST, b"x"));
        input.extend(opt(proto::OPT_STARTTLS, &[]));
        input.extend(opt(proto::OPT_GO, &go[..7]));
        input.extend(opt(proto::OPT_GO, &go));
        let (out, o) = run(input, false);
        assert_eq!(o, "transmit");
        assert_eq!(
            reply_types(&out),
            vec![
                proto::REP_ERR_UNSUP,
                proto::REP_SERVER,
                proto::REP_ACK,
                proto::REP_ERR_INVALID,
                proto::REP_ERR_POLICY,
                proto::REP_ERR_INVALID,
                proto::REP_INFO,
                proto::REP_INFO,
                proto::REP_ACK
            ]
        );
        let (out, o) = run([opt(proto::OPT_LIST, &[]), opt(2, &[])].concat(), true);
        assert_eq!(o, "close");
        assert_eq!(
            reply_types(&out),
            vec![proto::REP_ERR_TLS_REQD, proto::REP_ACK]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn negotiate_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
                                  opt_no in 0u32..12, tls in proptest::prelude::any::<bool>()) {
            // Random option bodies behind a valid option header, and raw random bytes.
            let _ = run(opt(opt_no, &bytes), tls);
            let _ = run(bytes.clone(), tls);
        }
    }
}
