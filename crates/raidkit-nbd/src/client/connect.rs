//! Connecting: the socket (with a deadline, even for a server that accepts and never
//! answers), then the fixed newstyle handshake from the client's side: STARTTLS when
//! asked for, structured replies when offered, `NBD_OPT_GO` (falling back to
//! `NBD_OPT_EXPORT_NAME` for servers without it).

use super::tls::ClientTls;
use super::uri::{Endpoint, NbdUri};
use super::wire::{Sock, Wire, WireError};
use super::{ClientError, ClientOptions, ExportInfo};
use crate::proto::{self, printable, GreetingError, Info};
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest option reply data accepted (info items are at most 4 KiB + 2).
const MAX_OPTION_REPLY: u32 = 64 << 10;

/// A connection that has finished the handshake.
pub(crate) struct Negotiated {
    pub(crate) wire: Wire,
    pub(crate) info: ExportInfo,
}

/// Connect to `uri` and finish the handshake, all within `opts.connect_timeout`.
pub(crate) fn connect(uri: &NbdUri, opts: &ClientOptions) -> Result<Negotiated, ClientError> {
    let until = Instant::now() + opts.connect_timeout;
    let tls = match &opts.tls {
        Some(t) => Some(t.clone()),
        None => ClientTls::from_uri(uri)?,
    };
    let sock = open(&uri.endpoint, until, opts.connect_timeout)?;
    let wire = Wire::new(sock).map_err(|e| connect_err(&uri.endpoint, &e))?;
    let mut hs = Handshake {
        wire,
        until,
        budget: opts.connect_timeout,
    };
    let info = hs.run(uri, tls.as_ref(), opts.structured_replies)?;
    Ok(Negotiated {
        wire: hs.wire,
        info,
    })
}

fn addr_text(e: &Endpoint) -> String {
    match e {
        Endpoint::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
        Endpoint::Tcp { host, port } => format!("{host}:{port}"),
        Endpoint::Unix(p) => p.display().to_string(),
    }
}

fn connect_err(e: &Endpoint, err: &io::Error) -> ClientError {
    ClientError::Connect {
        addr: addr_text(e),
        message: err.to_string(),
        kind: err.kind(),
    }
}

fn timeout(what: &str, after: Duration) -> ClientError {
    ClientError::Timeout {
        what: what.into(),
        after,
    }
}

fn open(e: &Endpoint, until: Instant, budget: Duration) -> Result<Sock, ClientError> {
    match e {
        Endpoint::Unix(p) => open_unix(p, until)
            .map(Sock::Unix)
            .map_err(|err| match err.kind() {
                io::ErrorKind::TimedOut => {
                    timeout(&format!("connecting to {}", p.display()), budget)
                }
                _ => connect_err(e, &err),
            }),
        Endpoint::Tcp { host, port } => {
            let addrs = resolve(host, *port, until).map_err(|err| match err.kind() {
                io::ErrorKind::TimedOut => timeout(&format!("resolving {host}"), budget),
                _ => connect_err(e, &err),
            })?;
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            for a in addrs {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timeout(&format!("connecting to {}", addr_text(e)), budget));
                }
                match TcpStream::connect_timeout(&a, left) {
                    Ok(s) => return Ok(Sock::Tcp(s)),
                    Err(err) => last = err,
                }
            }
            Err(match last.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                    timeout(&format!("connecting to {}", addr_text(e)), budget)
                }
                _ => connect_err(e, &last),
            })
        }
    }
}

/// Resolve a host name; a resolver that hangs costs no more than the deadline (the
/// lookup finishes on its own thread).
fn resolve(host: &str, port: u16, until: Instant) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let (tx, rx) = mpsc::channel();
    let h = host.to_string();
    std::thread::Builder::new()
        .name("nbd-resolve".into())
        .spawn(move || {
            let _ = tx.send((h.as_str(), port).to_socket_addrs().map(|a| a.collect()));
        })?;
    match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "name lookup")),
    }
}

/// A non-blocking Unix connect, retried while the server's backlog is full (a stopped
/// server), until `until`.
fn open_unix(p: &Path, until: Instant) -> io::Result<UnixStream> {
    let bytes = p.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain system call; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    loop {
        // SAFETY: `addr` is a fully initialised sockaddr_un of `len` bytes.
        let r = unsafe {
            libc::connect(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r == 0 {
            return Ok(UnixStream::from(fd));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Some(libc::EAGAIN) => return Err(io::Error::new(io::ErrorKind::TimedOut, e)),
            _ => return Err(e),
        }
    }
}

struct Handshake {
    wire: Wire,
    until: Instant,
    budget: Duration,
}

impl Handshake {
    fn io_err(&self, e: WireError) -> ClientError {
        match e {
            WireError::Timeout => timeout("NBD handshake", self.budget),
            WireError::Closed(m) => ClientError::Disconnected(format!("during the handshake: {m}")),
        }
    }
    fn read(&self, buf: &mut [u8]) -> Result<(), ClientError> {
        self.wire
            .read_exact(buf, Some(self.until))
            .map_err(|e| self.io_err(e))
    }
    fn write(&self, buf: &[u8]) -> Result<(), ClientError> {
        self.wire
            .write_all(buf, Some(self.until))
            .map_err(|e| self.io_err(e))
    }

    /// Read one option reply to `opt`: (type, data), lengths checked before allocating.
    fn reply(&self, opt: u32) -> Result<(u32, Vec<u8>), ClientError> {
        let mut h = [0u8; proto::OPTION_REPLY_HEADER_LEN];
        self.read(&mut h)?;
        let r = proto::parse_option_reply_header(&h)
            .ok_or_else(|| ClientError::Protocol("bad option reply magic".into()))?;
        if r.opt != opt {
            return Err(ClientError::Protocol(format!(
                "reply to option {} while {opt} was asked",
                r.opt
            )));
        }
        if r.len > MAX_OPTION_REPLY {
            return Err(ClientError::Protocol(format!(
                "option reply of {} bytes",
                r.len
            )));
        }
        let mut d = vec![0u8; r.len as usize];
        self.read(&mut d)?;
        Ok((r.typ, d))
    }

    fn refused(option: &'static str, typ: u32, data: &[u8]) -> ClientError {
        ClientError::Refused {
            option,
            reply: proto::rep_name(typ),
            message: printable(data, proto::MAX_STRING_LEN),
        }
    }

    fn run(
        &mut self,
        uri: &NbdUri,
        tls: Option<&ClientTls>,
        structured: bool,
    ) -> Result<ExportInfo, ClientError> {
        let mut g = [0u8; proto::GREETING_LEN];
        self.read(&mut g)?;
        let hflags = proto::parse_greeting(&g).map_err(|e| match e {
            GreetingError::NotNbd => ClientError::Protocol("not an NBD server".into()),
            GreetingError::Oldstyle => {
                ClientError::Protocol("oldstyle NBD server (no export names): not supported".into())
            }
            GreetingError::NotFixedNewstyle => {
                ClientError::Protocol("server without fixed newstyle negotiation".into())
            }
        })?;
        let no_zeroes = hflags & proto::FLAG_NO_ZEROES != 0;
        let mut cflags = proto::FLAG_C_FIXED_NEWSTYLE;
        if no_zeroes {
            cflags |= proto::FLAG_C_NO_ZEROES;
        }
        self.write(&cflags.to_be_bytes())?;
        if let Some(t) = tls {
            self.starttls(t)?;
        }
        let structured = structured && self.structured_replies()?;
        let mut info = self.go(&uri.export, no_zeroes)?;
        info.structured = structured;
        info.tls = tls.is_some();
        Ok(info)
    }

    fn starttls(&mut self, t: &ClientTls) -> Result<(), ClientError> {
        self.write(&proto::option_request(proto::OPT_STARTTLS, &[]))?;
        let (typ, d) = self.reply(proto::OPT_STARTTLS)?;
        if typ != proto::REP_ACK {
            return Err(ClientError::Tls(format!(
                "the server does not offer TLS ({}{})",
                proto::rep_name(typ),
                if d.is_empty() {
                    String::new()
                } else {
                    format!(": {}", printable(&d, 256))
                }
            )));
        }
        t.start(&mut self.wire, self.until).map_err(|e| match e {
            ClientError::Timeout { .. } => timeout("TLS handshake", self.budget),
            e => e,
        })
    }

    /// Ask for structured replies: true if the server agreed.
    fn structured_replies(&self) -> Result<bool, ClientError> {
        self.write(&proto::option_request(proto::OPT_STRUCTURED_REPLY, &[]))?;
        let (typ, d) = self.reply(proto::OPT_STRUCTURED_REPLY)?;
        match typ {
            proto::REP_ACK => Ok(true),
            proto::REP_ERR_TLS_REQD => Err(Self::refused("NBD_OPT_STRUCTURED_REPLY", typ, &d)),
            t if t & proto::REP_FLAG_ERROR != 0 => Ok(false),
            t => Err(ClientError::Protocol(format!(
                "reply {t} to NBD_OPT_STRUCTURED_REPLY"
            ))),
        }
    }

    /// `NBD_OPT_GO`, or `NBD_OPT_EXPORT_NAME` if the server does not know GO.
    fn go(&self, export: &str, no_zeroes: bool) -> Result<ExportInfo, ClientError> {
        let data = proto::go_data(export.as_bytes(), &[proto::INFO_BLOCK_SIZE]);
        self.write(&proto::option_request(proto::OPT_GO, &data))?;
        let mut info = ExportInfo::new(export);
        let mut have_export = false;
        loop {
            let (typ, d) = self.reply(proto::OPT_GO)?;
            match typ {
                proto::REP_INFO => {
                    let item =
                        proto::parse_info(&d).map_err(|m| ClientError::Protocol(m.into()))?;
                    have_export |= matches!(item, Info::Export { .. });
                    info.apply(item);
                }
                proto::REP_ACK if have_export => return Ok(info.finish()),
                proto::REP_ACK => {
                    return Err(ClientError::Protocol(
                        "NBD_OPT_GO acknowledged without the export's size".into(),
                    ))
                }
                proto::REP_ERR_UNSUP => return self.export_name(export, no_zeroes),
                t if t & proto::REP_FLAG_ERROR != 0 => {
                    return Err(Self::refused("NBD_OPT_GO", t, &d))
                }
                t => return Err(ClientError::Protocol(format!("reply {t} to NBD_OPT_GO"))),
            }
        }
    }

    fn export_name(&self, export: &str, no_zeroes: bool) -> Result<ExportInfo, ClientError> {
        self.write(&proto::option_request(
            proto::OPT_EXPORT_NAME,
            export.as_bytes(),
        ))?;
        let mut r = [0u8; 134];
        let n = if no_zeroes { 10 } else { 134 };
        self.read(&mut r[..n])?;
        let mut info = ExportInfo::new(export);
        info.apply(Info::Export {
            size: proto::get64(&r, 0),
            flags: proto::get16(&r, 8),
        });
        Ok(info.finish())
    }
}
