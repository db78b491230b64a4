//! An NBD client: fixed newstyle, `NBD_OPT_GO` (or `EXPORT_NAME`), structured replies
//! (data, holes, errors), TLS (PSK or X.509), many requests in flight from many
//! threads, and a deadline on everything.
//!
//! ```no_run
//! use raidkit_nbd::client::{Client, ClientOptions};
//! use std::time::Duration;
//! let c = Client::connect("nbd+unix:///disk?socket=/run/nbd.sock", &ClientOptions::default())?;
//! let mut buf = vec![0u8; 4096];
//! c.read(0, &mut buf, Duration::from_secs(5))?;
//! c.write(4096, &buf, true, Duration::from_secs(5))?;
//! # Ok::<(), raidkit_nbd::client::ClientError>(())
//! ```
//!
//! Every request takes a deadline (a [`Duration`] from now or an [`Instant`]). If its
//! reply is not there in time — a black-holed or stopped server, a socket that does
//! not drain — the call returns [`ClientError::Timeout`] at the deadline, the
//! connection is closed, and every other request in flight fails at once with
//! [`ClientError::Disconnected`]; so do later calls. Reconnecting is the caller's job:
//! [`Client::connect`] again (it is cheap: one socket and a handshake).
//!
//! Asynchronous requests ([`Client::start_read`], [`Client::start_write`],
//! [`Client::start_flush`]) are answered through a [`Completion`] instead; their caller
//! keeps the deadlines and calls [`Client::expire`] when one passes.
//!
//! Layers: [`uri`] (NBD URIs), `wire` (the non-blocking socket, plain or TLS),
//! `connect` (socket and handshake), `demux` (requests in flight, the reader thread),
//! `start` (asynchronous requests).

mod connect;
mod coverage;
mod demux;
mod error;
mod start;
mod tls;
pub mod uri;
mod wire;

pub use demux::{ClientStats, Completion};
pub use error::ClientError;
pub use tls::ClientTls;
pub use uri::{Endpoint, NbdUri};

use crate::proto::{self, Info, Request};
use demux::{Death, Inner, Slot};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request sent: bigger reads and writes are split (also at the server's
/// maximum block size, when smaller).
pub const MAX_REQUEST: u32 = 32 << 20;

/// Connection settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Time allowed for connecting and the whole handshake (TLS included).
    pub connect_timeout: Duration,
    /// Ask for structured replies (sparse reads, error messages).
    pub structured_replies: bool,
    /// TLS credentials, overriding the URI's (`nbds://` still decides whether TLS
    /// is used).
    pub tls: Option<ClientTls>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            connect_timeout: Duration::from_secs(10),
            structured_replies: true,
            tls: None,
        }
    }
}

/// A request's deadline: a time from now, or an instant.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    allowed: Duration,
}

impl From<Duration> for Deadline {
    fn from(d: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + d,
            allowed: d,
        }
    }
}

impl From<Instant> for Deadline {
    fn from(at: Instant) -> Deadline {
        Deadline {
            at,
            allowed: at.saturating_duration_since(Instant::now()),
        }
    }
}

/// What the server said about the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// Export name asked for.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags (`proto::TF_*`).
    pub flags: u16,
    /// Minimum block size (requests should be aligned to it).
    pub min_block: u32,
    /// Preferred block size.
    pub preferred_block: u32,
    /// Largest payload of one request.
    pub max_block: u32,
    /// The server's description, if it sent one.
    pub description: Option<String>,
    /// Structured replies are in use.
    pub structured: bool,
    /// The connection is encrypted.
    pub tls: bool,
}

impl ExportInfo {
    fn new(name: &str) -> ExportInfo {
        ExportInfo {
            name: name.to_string(),
            size: 0,
            flags: 0,
            min_block: 0,
            preferred_block: 0,
            max_block: 0,
            description: None,
            structured: false,
            tls: false,
        }
    }
    fn apply(&mut self, i: Info) {
        match i {
            Info::Export { size, flags } => {
                self.size = size;
                self.flags = flags;
            }
            Info::Description(d) => self.description = Some(d),
            Info::BlockSize { min, pref, max } => {
                self.min_block = min;
                self.preferred_block = pref;
                self.max_block = max;
            }
            Info::Name(_) | Info::Unknown(_) => {}
        }
    }
    /// Defaults for what the server did not say (the protocol's: 1 / 4096 / 32 MiB).
    fn finish(mut self) -> ExportInfo {
        if self.min_block == 0 {
            self.min_block = 1;
            self.preferred_block = 4096;
            self.max_block = MAX_REQUEST;
        }
        self
    }
    fn has(&self, f: u16) -> bool {
        self.flags & proto::TF_HAS_FLAGS != 0 && self.flags & f != 0
    }
    /// Writes are refused.
    pub fn read_only(&self) -> bool {
        self.has(proto::TF_READ_ONLY)
    }
    /// FLUSH is offered.
    pub fn can_flush(&self) -> bool {
        self.has(proto::TF_SEND_FLUSH)
    }
    /// FUA is offered.
    pub fn can_fua(&self) -> bool {
        self.has(proto::TF_SEND_FUA)
    }
    /// TRIM is offered.
    pub fn can_trim(&self) -> bool {
        self.has(proto::TF_SEND_TRIM)
    }
    /// WRITE_ZEROES is offered.
    pub fn can_write_zeroes(&self) -> bool {
        self.has(proto::TF_SEND_WRITE_ZEROES)
    }
    /// WRITE_ZEROES with FAST_ZERO is offered.
    pub fn can_fast_zero(&self) -> bool {
        self.has(proto::TF_SEND_FAST_ZERO)
    }
    /// A flush on one connection covers writes on all (several connections may be used).
    pub fn can_multi_conn(&self) -> bool {
        self.has(proto::TF_CAN_MULTI_CONN)
    }
    /// Largest payload this client sends in one request.
    fn chunk(&self) -> u32 {
        let max = self.max_block.clamp(1, MAX_REQUEST);
        // Keep pieces aligned to the minimum block size.
        (max - max % self.min_block.max(1)).max(self.min_block.max(1))
    }
}

/// Flags of [`Client::write_zeroes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroFlags {
    /// Persist before the reply.
    pub fua: bool,
    /// Keep the range allocated (no hole).
    pub no_hole: bool,
    /// Fail with `ENOTSUP` unless zeroing is fast (no data written).
    pub fast: bool,
}

/// A connection to one export. `Sync`: share it between threads (`Arc<Client>`); each
/// call is one or more requests in flight, answered in any order.
pub struct Client {
    inner: Arc<Inner>,
    info: ExportInfo,
    uri: String,
    reader: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({})", self.uri)
    }
}

impl Client {
    /// Connect to an NBD URI (see [`uri`]) and enter transmission.
    pub fn connect(uri: &str, opts: &ClientOptions) -> Result<Client, ClientError> {
        Self::connect_to(&NbdUri::parse(uri)?, opts)
    }

    /// Connect to a parsed URI.
    pub fn connect_to(uri: &NbdUri, opts: &ClientOptions) -> Result<Client, ClientError> {
        let n = connect::connect(uri, opts)?;
        let inner = Arc::new(Inner::new(n.wire, n.info.structured));
        let rd = Arc::clone(&inner);
        let reader = std::thread::Builder::new()
            .name("nbd-client-rx".into())
            .spawn(move || rd.read_replies())
            .map_err(|e| ClientError::Disconnected(format!("starting the reader thread: {e}")))?;
        Ok(Client {
            inner,
            info: n.info,
            uri: uri.to_string(),
            reader: Some(reader),
        })
    }

    /// The export's size, flags and block sizes.
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// The URI this client connected to.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Counters of this connection.
    pub fn stats(&self) -> ClientStats {
        self.inner.stats()
    }

    /// None while the connection is usable; else the error every request now gets.
    pub fn broken(&self) -> Option<ClientError> {
        self.inner.death()
    }

    fn check_range(&self, what: &str, offset: u64, len: u64) -> Result<(), ClientError> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.info.size)
        {
            return Err(ClientError::InvalidRequest(format!(
                "{what} of {len} bytes at offset {offset} goes past the end of the export ({} bytes)",
                self.info.size
            )));
        }
        Ok(())
    }

    /// Send the pieces of one call (all in flight together), then wait for them all.
    fn run(
        &self,
        pieces: Vec<(Request, &[u8])>,
        d: Deadline,
        what: &str,
    ) -> Result<Vec<Vec<u8>>, ClientError> {
        let mut slots: Vec<Arc<Slot>> = Vec::with_capacity(pieces.len());
        for (req, payload) in pieces {
            slots.push(self.inner.submit(req, payload, d.at, what, d.allowed)?);
        }
        let mut out = Vec::with_capacity(slots.len());
        let mut first_err = None;
        for s in &slots {
            match self.inner.wait(s, d.at, what, d.allowed) {
                Ok(v) => out.push(v),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(out), Err)
    }

    fn pieces(&self, typ: u16, flags: u16, offset: u64, len: u64, step: u64) -> Vec<Request> {
        let mut v = Vec::new();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(step);
            v.push(Request {
                flags,
                typ,
                cookie: 0,
                offset: offset + at,
                len: n as u32,
            });
            at += n;
        }
        v
    }

    /// Read `buf.len()` bytes at `offset`.
    pub fn read(
        &self,
        offset: u64,
        buf: &mut [u8],
        deadline: impl Into<Deadline>,
    ) -> Result<(), ClientError> {
        let d = deadline.into();
        let len = buf.len() as u64;
        let what = format!("read of {len} bytes at offset {offset}");
        self.check_range(&what, offset, len)?;
        let step = u64::from(self.info.chunk());
        let reqs = self.pieces(proto::CMD_READ, 0, offset, len, step);
        let datas = self.run(reqs.into_iter().map(|r| (r, &[][..])).collect(), d, &what)?;
        let mut at = 0;
        for data in datas {
            buf[at..at + data.len()].copy_from_slice(&data);
            at += data.len();
        }
        debug_assert_eq!(at, buf.len());
        Ok(())
    }

    /// Write `data` at `offset`; with `fua`, persisted before this returns (FUA if the
    /// server offers it, else a FLUSH after the write).
    pub fn write(
        &self,
        offset: u64,
        data: &[u8],
        fua: bool,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ClientError> {
        let d = deadline.into();
        let len = data.len() as u64;
        let what = format!("write of {len} bytes at offset {offset}");
        if self.info.read_only() {
            return Err(ClientError::Unsupported("writes (the export is read-only)"));
        }
        self.check_range(&what, offset, len)?;
        let native_fua = fua && self.info.can_fua();
        let flags = if native_fua { proto::CMD_FLAG_FUA } else { 0 };
        let step = u64::from(self.info.chunk());
        let reqs = self.pieces(proto::CMD_WRITE, flags, offset, len, step);
        let pieces = reqs
            .into_iter()
            .map(|r| {
                let at = (r.offset - offset) as usize;
                (r, &data[at..at + r.len as usize])
            })
            .collect();
        self.run(pieces, d, &what)?;
        if fua && !native_fua {
            self.flush(d)?;
        }
        Ok(())
    }

    /// Persist every write this server has acknowledged.
    pub fn flush(&self, deadline: impl Into<Deadline>) -> Result<(), ClientError> {
        if !self.info.can_flush() {
            return Err(ClientError::Unsupported("FLUSH"));
        }
        let req = Request {
            flags: 0,
            typ: proto::CMD_FLUSH,
            cookie: 0,
            offset: 0,
            len: 0,
        };
        self.run(vec![(req, &[][..])], deadline.into(), "flush")
            .map(drop)
    }

    fn range_cmd(
        &self,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u64,
        d: Deadline,
        what: String,
    ) -> Result<(), ClientError> {
        self.check_range(&what, offset, len)?;
        // Up to 1 GiB per request, kept aligned to the minimum block size.
        let step = u64::from((1u32 << 30) - (1u32 << 30) % self.info.min_block.max(1));
        let reqs = self.pieces(typ, flags, offset, len, step);
        self.run(reqs.into_iter().map(|r| (r, &[][..])).collect(), d, &what)
            .map(drop)
    }

    /// Discard a range (a hint: it may read back as before, or as zeroes).
    pub fn trim(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ClientError> {
        if !self.info.can_trim() {
            return Err(ClientError::Unsupported("TRIM"));
        }
        let flags = if fua && self.info.can_fua() {
            proto::CMD_FLAG_FUA
        } else {
            0
        };
        let what = format!("trim of {len} bytes at offset {offset}");
        self.range_cmd(proto::CMD_TRIM, flags, offset, len, deadline.into(), what)
    }

    /// Make a range read as zeroes.
    pub fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        f: ZeroFlags,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ClientError> {
        if !self.info.can_write_zeroes() {
            return Err(ClientError::Unsupported("WRITE_ZEROES"));
        }
        if f.fast && !self.info.can_fast_zero() {
            return Err(ClientError::Unsupported("WRITE_ZEROES with FAST_ZERO"));
        }
        if f.fua && !self.info.can_fua() {
            return Err(ClientError::Unsupported("FUA"));
        }
        let mut flags = 0;
        if f.fua {
            flags |= proto::CMD_FLAG_FUA;
        }
        if f.no_hole {
            flags |= proto::CMD_FLAG_NO_HOLE;
        }
        if f.fast {
            flags |= proto::CMD_FLAG_FAST_ZERO;
        }
        let what = format!("write zeroes of {len} bytes at offset {offset}");
        self.range_cmd(
            proto::CMD_WRITE_ZEROES,
            flags,
            offset,
            len,
            deadline.into(),
            what,
        )
    }

    /// After the connection was lost or closed: wait until the server has closed its side
    /// too (true), or until `until` (false). A server that stopped answering (a stopped
    /// process, a network partition) may still carry out the requests it had read when it
    /// comes back; once it has closed the connection, none can land any more.
    pub fn wait_server_closed(&self, until: Instant) -> bool {
        self.inner.wire.wait_peer_closed(until)
    }

    /// Disconnect: `NBD_CMD_DISC` (after which the server finishes what is in flight),
    /// close. Requests still waiting fail with `Disconnected`. Dropping the client does
    /// the same.
    pub fn close(&self) {
        if self.inner.death().is_none() {
            let req = Request {
                flags: 0,
                typ: proto::CMD_DISC,
                cookie: 0,
                offset: 0,
                len: 0,
            };
            let d = Deadline::from(Duration::from_secs(1));
            let _ = self.inner.submit_disc(req, d.at);
            self.inner.wire.tls_shutdown();
        }
        self.inner.kill(Death::ByUser);
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
        self.inner.wire.abandon();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
