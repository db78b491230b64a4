//! Network members: an NBD export (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`,
//! and the TLS forms `nbds://`, `nbds+unix://`) as a member device, through raidkit's own
//! NBD client.
//!
//! The device is asynchronous ([`AsyncDev`]): an IO is sent at once and completed from the
//! client's reader thread, so a batch of member IOs has every network member's requests in
//! flight together, and a server that stops answering costs a batch its deadline and no
//! more (the batch gives up on the IO; its memory is never touched after that).
//!
//! The link. A connection that is lost (the server closed it, the network failed, a
//! request missed its deadline) is never silently replaced: acknowledged writes the
//! server had not made durable may be gone with it, so the array must fail the member
//! and take it back through a re-add, whose bitmap resync covers them. Until someone
//! calls [`NbdDev::reconnect`], every IO fails at once with `NotConnected`. The device
//! keeps the link's state, when it last changed and why, and request latency
//! ([`NbdDev::link_status`]).
//!
//! Credentials for `nbds` URIs come from the URI (`tls-psk-file`, `tls-certificates`, as
//! libnbd), else from [`set_default_tls`] (the command line's member TLS options).

use crate::dev::io::{self as mio, AsyncDev, AsyncIo, AsyncKind, Started, Submission};
use crate::dev::BlockDev;
use crate::locks::lock;
use raidkit_nbd::client::{Client, ClientError, ClientOptions, ExportInfo, NbdUri, ZeroFlags};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The deadline of a network member's IO unless `--member-timeout` says otherwise: a few
/// seconds (a local disk gets the SCSI layer's 30 s; a network peer that has not answered
/// in this long is better failed and resynced later than waited for).
pub const DEFAULT_NET_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a reconnection waits for the server to close the connections that were lost
/// (see [`NbdDev::reconnect`]).
pub const LOST_CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Time allowed to connect and finish the handshake (TLS included).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Credentials for `nbds` members whose URI names none, as the URI would name them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberTls {
    /// Pre-shared keys, `username:hexkey` lines (the URI's `tls-psk-file`). The identity is
    /// the URI's user name, else the local user's, else the file's only key.
    PskFile(PathBuf),
    /// A directory with `ca-cert.pem` and, for servers that ask for one, `client-cert.pem`
    /// and `client-key.pem` (the URI's `tls-certificates`).
    Certificates(PathBuf),
}

/// Credentials for `nbds` members whose URI names none.
static DEFAULT_TLS: RwLock<Option<MemberTls>> = RwLock::new(None);

/// TLS credentials for network members whose `nbds://` URI carries none (process-wide;
/// the command line's member TLS options set it, before any member is opened).
pub fn set_default_tls(tls: Option<MemberTls>) {
    *crate::locks::write(&DEFAULT_TLS) = tls;
}

/// `uri` with the default credentials ([`set_default_tls`]) filled in where a TLS URI
/// names none.
fn with_default_tls(mut uri: NbdUri) -> NbdUri {
    let from_uri = uri.tls_psk_file.is_some() || uri.tls_certificates.is_some();
    if uri.tls && !from_uri {
        match crate::locks::read(&DEFAULT_TLS).clone() {
            Some(MemberTls::PskFile(f)) => uri.tls_psk_file = Some(f),
            Some(MemberTls::Certificates(d)) => uri.tls_certificates = Some(d),
            None => {}
        }
    }
    uri
}

/// Is `spec` an NBD URI (a network member) rather than a path?
pub fn is_nbd_uri(spec: &str) -> bool {
    let lower = spec.get(..12).unwrap_or(spec).to_ascii_lowercase();
    ["nbd://", "nbds://", "nbd+unix://", "nbds+unix://"]
        .iter()
        .any(|s| lower.starts_with(s))
}

/// The state of a network member's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Connected; IOs go to the server.
    Connected,
    /// A connection attempt is under way.
    Connecting,
    /// Not connected: IOs fail at once until [`NbdDev::reconnect`] succeeds.
    Disconnected,
}

/// What `status` shows about a network member's link.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LinkStatus {
    /// The URI.
    pub uri: String,
    /// Connected, connecting or disconnected.
    pub state: LinkState,
    /// Unix time (seconds) of the last change of state.
    pub since: u64,
    /// Why it is not connected (the last error), if it is not.
    pub error: Option<String>,
    /// Successful connections so far (the first one included).
    pub connects: u64,
    /// Failed connection attempts since the last success.
    pub failed_attempts: u64,
    /// Requests in flight.
    pub in_flight: u64,
    /// Requests completed successfully.
    pub requests: u64,
    /// Request latency, microseconds: a moving average (1/8 weight per request).
    pub latency_us: u64,
    /// The last request's latency, microseconds.
    pub last_latency_us: u64,
    /// The connection is encrypted (TLS).
    pub tls: bool,
    /// The server offers FLUSH. Without it (as Linux's nbd driver does) it is taken to
    /// write through: a write it acknowledged counts as durable, and an array flush asks
    /// nothing of it — true only if the server really does (nbd-server without
    /// `flush = true` does not).
    pub flush: bool,
}

struct Link {
    client: Option<Arc<Client>>,
    /// Lost connections whose server has not yet closed its side: it may still carry out
    /// requests it read before the loss (a stopped process, a partition that heals), so
    /// no new connection is used until they are closed ([`NbdDev::reconnect`]).
    lost: Vec<Arc<Client>>,
    state: LinkState,
    since: u64,
    error: Option<String>,
    connects: u64,
    failed_attempts: u64,
    tls: bool,
    /// The server offers FLUSH.
    flush: bool,
}

/// Request counters shared with the completions.
#[derive(Default)]
struct Counters {
    in_flight: AtomicU64,
    requests: AtomicU64,
    ewma_ns: AtomicU64,
    last_ns: AtomicU64,
}

impl Counters {
    fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.last_ns.store(ns, Ordering::Relaxed);
        let old = self.ewma_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            ns
        } else {
            (old.saturating_mul(7).saturating_add(ns)) / 8
        };
        self.ewma_ns.store(new.max(1), Ordering::Relaxed);
    }
}

/// An NBD export as a member device.
pub struct NbdDev {
    uri: NbdUri,
    name: String,
    opts: ClientOptions,
    writable: bool,
    /// The export's size, bytes (0 until a member found unreachable at assembly first
    /// connects, see [`NbdDev::unreached`]; never changes after that).
    size: AtomicU64,
    /// The server's minimum block size, at least 512: requests are whole blocks of it.
    lbs: AtomicU32,
    link: Mutex<Link>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for NbdDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NbdDev({})", self.name)
    }
}

/// The smallest largest-request an export may have to be a member: a member IO of a
/// page or more is then a handful of requests, not thousands (each one a table entry, a
/// buffer and a system call, all in flight at once).
pub const MIN_MAX_BLOCK: u32 = 4096;

/// Refuse an export whose block sizes a member cannot live with: a minimum block larger
/// than MD's largest sector (4096), or a largest request below [`MIN_MAX_BLOCK`].
fn check_block_sizes(spec: &str, info: &ExportInfo) -> io::Result<()> {
    if info.min_block > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{spec}: the export's minimum block size is {} bytes; MD members need 512 or 4096",
                info.min_block
            ),
        ));
    }
    if info.max_block < MIN_MAX_BLOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{spec}: the export takes at most {} bytes per request; a member needs at least {MIN_MAX_BLOCK} (serve it with a larger maximum block size)",
                info.max_block
            ),
        ));
    }
    Ok(())
}

/// The io::Error of a client error: a lost connection, a missed deadline, or a server
/// going away (`ESHUTDOWN`: a restart, not a bad sector) is `NotConnected` / `TimedOut`
/// (the whole member is gone, see [`mio::is_gone`]: failed, then reconnected and caught
/// up); a server's other error replies keep their errno (a bad sector is a bad sector).
fn to_io(name: &str, e: &ClientError) -> io::Error {
    let kind = match e {
        ClientError::Timeout { .. } => io::ErrorKind::TimedOut,
        ClientError::Refused { .. } => io::ErrorKind::NotConnected,
        e if e.is_fatal() => io::ErrorKind::NotConnected,
        _ => return io::Error::new(e.to_io().kind(), format!("{name}: {e}")),
    };
    io::Error::new(kind, format!("{name}: {e}"))
}

fn unix_now() -> u64 {
    crate::util::now()
}

impl NbdDev {
    /// Connect to the export `spec` names (an NBD URI). With `write`, a read-only export is
    /// refused.
    pub fn open(spec: &str, write: bool) -> io::Result<NbdDev> {
        let uri = NbdUri::parse(spec)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let uri = with_default_tls(uri);
        let opts = ClientOptions {
            connect_timeout: CONNECT_TIMEOUT,
            ..ClientOptions::default()
        };
        let client = Client::connect_to(&uri, &opts).map_err(|e| to_io(spec, &e))?;
        let info = client.info().clone();
        if write && info.read_only() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{spec}: the export is read-only; serve it writable to use it as a member"),
            ));
        }
        check_block_sizes(spec, &info)?;
        Ok(NbdDev {
            name: spec.to_string(),
            opts,
            writable: write,
            size: AtomicU64::new(info.size),
            lbs: AtomicU32::new(info.min_block.max(512)),
            link: Mutex::new(Link {
                client: Some(Arc::new(client)),
                lost: Vec::new(),
                state: LinkState::Connected,
                since: unix_now(),
                error: None,
                connects: 1,
                failed_attempts: 0,
                tls: info.tls,
                flush: info.can_flush(),
            }),
            counters: Arc::new(Counters::default()),
            uri,
        })
    }

    /// A member that could not be reached (`error`, the failed connection's) when the array
    /// was assembled: not connected, its size unknown (0) until [`NbdDev::reconnect`]
    /// first succeeds. Only a URI that parses is accepted.
    pub fn unreached(spec: &str, write: bool, error: &io::Error) -> io::Result<NbdDev> {
        let uri = NbdUri::parse(spec)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let uri = with_default_tls(uri);
        Ok(NbdDev {
            name: spec.to_string(),
            opts: ClientOptions {
                connect_timeout: CONNECT_TIMEOUT,
                ..ClientOptions::default()
            },
            writable: write,
            size: AtomicU64::new(0),
            lbs: AtomicU32::new(512),
            link: Mutex::new(Link {
                client: None,
                lost: Vec::new(),
                state: LinkState::Disconnected,
                since: unix_now(),
                error: Some(error.to_string()),
                connects: 0,
                failed_attempts: 1,
                tls: uri.tls,
                flush: false,
            }),
            counters: Arc::new(Counters::default()),
            uri,
        })
    }

    /// The export's size, bytes (0 while never connected).
    fn size(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    /// The connection, if there is a live one.
    fn client(&self) -> Option<Arc<Client>> {
        let mut link = lock(&self.link);
        let c = link.client.clone()?;
        if let Some(e) = c.broken() {
            // Lost since the last look (the server closed it, a deadline passed).
            Self::set_down(&mut link, e.to_string());
            return None;
        }
        Some(c)
    }

    fn set_down(link: &mut Link, why: String) {
        if let Some(c) = link.client.take() {
            c.expire("the connection was dropped", Duration::ZERO);
            link.lost.push(c);
        }
        if link.state != LinkState::Disconnected {
            link.since = unix_now();
        }
        link.state = LinkState::Disconnected;
        link.error = Some(why);
    }

    /// The link's state now (a connection found broken is recorded as lost).
    pub fn link_state(&self) -> LinkState {
        let _ = self.client();
        lock(&self.link).state
    }

    /// Everything `status` shows about the link.
    pub fn link_status(&self) -> LinkStatus {
        let _ = self.client();
        let link = lock(&self.link);
        let c = &self.counters;
        LinkStatus {
            uri: self.name.clone(),
            state: link.state,
            since: link.since,
            error: link.error.clone(),
            connects: link.connects,
            failed_attempts: link.failed_attempts,
            in_flight: c.in_flight.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            latency_us: c.ewma_ns.load(Ordering::Relaxed) / 1000,
            last_latency_us: c.last_ns.load(Ordering::Relaxed) / 1000,
            tls: link.tls,
            flush: link.flush,
        }
    }

    /// Successful connections so far: a change means a new connection.
    pub fn connects(&self) -> u64 {
        lock(&self.link).connects
    }

    /// Drop the connection (requests in flight fail at once); IOs fail until
    /// [`NbdDev::reconnect`].
    pub fn disconnect(&self, why: &str) {
        Self::set_down(&mut lock(&self.link), why.to_string());
    }

    /// Connect again (after a loss). The export must still have the size it had, and the
    /// server must have closed the lost connections (it carries out what it had read from
    /// one before it closes it). Ok if a connection is up (a new one, or the one there was).
    pub fn reconnect(&self) -> io::Result<()> {
        {
            let mut link = lock(&self.link);
            if let Some(c) = &link.client {
                if c.broken().is_none() {
                    return Ok(());
                }
                Self::set_down(&mut link, "the connection was lost".into());
            }
            link.state = LinkState::Connecting;
        }
        let r = Client::connect_to(&self.uri, &self.opts)
            .map_err(|e| to_io(&self.name, &e))
            .and_then(|c| self.check_same_export(c))
            .and_then(|c| self.lost_connections_closed().map(|()| c));
        let mut link = lock(&self.link);
        match r {
            Ok(c) => {
                link.tls = c.info().tls;
                link.flush = c.info().can_flush();
                link.client = Some(Arc::new(c));
                link.state = LinkState::Connected;
                link.since = unix_now();
                link.error = None;
                link.connects += 1;
                link.failed_attempts = 0;
                Ok(())
            }
            Err(e) => {
                link.state = LinkState::Disconnected;
                link.error = Some(e.to_string());
                link.failed_attempts += 1;
                Err(e)
            }
        }
    }

    /// Ok once the server has closed every lost connection (waiting up to
    /// [`LOST_CLOSE_WAIT`]): until then a write sent on one before the loss may still
    /// land, after a catch-up has copied its region, and leave the member stale.
    fn lost_connections_closed(&self) -> io::Result<()> {
        let lost: Vec<Arc<Client>> = lock(&self.link).lost.clone();
        let until = Instant::now() + LOST_CLOSE_WAIT;
        let open = lost.iter().filter(|c| !c.wait_server_closed(until)).count();
        lock(&self.link)
            .lost
            .retain(|c| !c.wait_server_closed(Instant::now()));
        if open == 0 {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "{}: the server accepts connections again but has not closed {open} lost connection(s) in {} s: it may still carry out writes sent on them before the loss, so the member is not taken back until it does (a stopped server process must be resumed or killed)",
            self.name,
            LOST_CLOSE_WAIT.as_secs()
        )))
    }

    fn check_same_export(&self, c: Client) -> io::Result<Client> {
        let info = c.info();
        check_block_sizes(&self.name, info)?;
        let size = self.size();
        let lbs = self.lbs.load(Ordering::Relaxed);
        if size == 0 {
            // Its first connection (it could not be reached at assembly): what it is is
            // checked by its superblock before it is taken into the array.
            self.size.store(info.size, Ordering::Relaxed);
            self.lbs.store(info.min_block.max(512), Ordering::Relaxed);
        } else if info.min_block > lbs {
            // The array and its clients were told the smaller size: IO of that size would
            // now be refused by the server.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the export now needs requests in blocks of {} bytes, it took {lbs} \
                     when the array was assembled; restore the server's setting, or stop the \
                     array and assemble it again",
                    self.name, info.min_block
                ),
            ));
        } else if info.size != size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the export is now {} bytes, it was {size} bytes: not the same device",
                    self.name, info.size
                ),
            ));
        }
        if self.writable && info.read_only() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: the export came back read-only", self.name),
            ));
        }
        Ok(c)
    }

    /// Deadline of an IO started now.
    fn deadline(&self) -> (Instant, Duration) {
        let t = mio::member_timeout(self);
        (Instant::now() + t, t)
    }

    fn not_connected(&self) -> io::Error {
        let why = lock(&self.link)
            .error
            .clone()
            .unwrap_or_else(|| "not connected".into());
        io::Error::new(
            io::ErrorKind::NotConnected,
            format!("{}: not connected ({why})", self.name),
        )
    }

    /// The completion of a started IO: record latency, copy read data into the batch's
    /// buffer, complete it.
    fn completion(&self, io: AsyncIo, t0: Instant) -> raidkit_nbd::client::Completion {
        let counters = Arc::clone(&self.counters);
        let name = self.name.clone();
        counters.in_flight.fetch_add(1, Ordering::Relaxed);
        Box::new(move |r: Result<Vec<u8>, ClientError>| {
            counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            let res = match r {
                Ok(data) => {
                    counters.record(t0.elapsed());
                    if let AsyncKind::Read(len) = io.kind {
                        if data.len() == len {
                            io.with_read_buf(|b| b.copy_from_slice(&data));
                            Ok(())
                        } else {
                            Err(io::Error::other(format!(
                                "{name}: a read of {len} bytes returned {}",
                                data.len()
                            )))
                        }
                    } else {
                        Ok(())
                    }
                }
                Err(e) => Err(to_io(&name, &e)),
            };
            io.complete(res);
        })
    }

    fn zeroes(&self, offset: u64, len: u64) -> io::Result<bool> {
        let Some(c) = self.client() else {
            return Err(self.not_connected());
        };
        if !c.info().can_write_zeroes() {
            return Ok(false);
        }
        let (at, _) = self.deadline();
        c.write_zeroes(offset, len, ZeroFlags::default(), at)
            .map(|()| true)
            .map_err(|e| to_io(&self.name, &e))
    }
}

impl Drop for NbdDev {
    fn drop(&mut self) {
        // Never wait on a server that may not answer: close without the goodbye if
        // anything is still in flight.
        let link = lock(&self.link);
        if let Some(c) = &link.client {
            if self.counters.in_flight.load(Ordering::Relaxed) > 0 {
                c.expire("closing with requests in flight", Duration::ZERO);
            }
        }
    }
}

impl AsyncDev for NbdDev {
    fn start(&self, io: AsyncIo) -> Started {
        let Some(c) = self.client() else {
            return Started::Done(Err(self.not_connected()), None);
        };
        let (at, _) = self.deadline();
        let t0 = Instant::now();
        let offset = io.offset;
        let sent = match io.kind {
            AsyncKind::Read(len) => {
                if let Err(e) = crate::dev::check_bounds("read", offset, len, self.size()) {
                    return Started::Done(Err(e), None);
                }
                c.start_read(offset, len, at, self.completion(io, t0))
            }
            AsyncKind::Write(len) => {
                if let Err(e) = crate::dev::check_bounds("write", offset, len, self.size()) {
                    return Started::Done(Err(e), None);
                }
                // Sent from the caller's memory, no copy (`start_write` sends it before
                // it returns; a send that fails completes the IO at once).
                match io
                    .send_write_data(|d, io| c.start_write(offset, d, at, self.completion(io, t0)))
                {
                    Ok(sent) => sent,
                    Err(io) => {
                        // Not on the batch's thread: a copy, so the caller's memory is not
                        // borrowed while the request is sent (a send that fails completes
                        // the IO, which needs the lock `with_write_data` holds).
                        let mut data = Vec::new();
                        if !io.with_write_data(|d| data = d.to_vec()) {
                            return Started::Done(Err(io::Error::other("IO abandoned")), None);
                        }
                        c.start_write(offset, &data, at, self.completion(io, t0))
                    }
                }
            }
            AsyncKind::Flush if !c.info().can_flush() => {
                // The server has no volatile cache to flush (it says so).
                return Started::Done(Ok(()), None);
            }
            AsyncKind::Flush => c.start_flush(at, self.completion(io, t0)),
        };
        match sent {
            Ok(()) => Started::Pending,
            Err(e) => {
                // Not sent: the completion was dropped unused (undo its count).
                self.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
                if e.is_fatal() {
                    self.disconnect(&e.to_string());
                }
                Started::Done(Err(to_io(&self.name, &e)), None)
            }
        }
    }
}

impl BlockDev for NbdDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let align = u64::from(self.lbs.load(Ordering::Relaxed));
        let size = self.size();
        let end = offset.saturating_add(buf.len() as u64);
        if offset.is_multiple_of(align) && (end.is_multiple_of(align) || end == size) {
            return mio::run_one(self, offset, mio::IoOp::Read(buf));
        }
        // A server with a minimum block size may refuse anything else (EINVAL): a small
        // read (a probe for an old superblock's magic) reads the whole blocks around it.
        crate::dev::check_bounds("read", offset, buf.len(), size)?;
        let start = offset / align * align;
        let stop = end.div_ceil(align).saturating_mul(align).min(size);
        let mut whole = vec![0u8; (stop - start) as usize];
        mio::run_one(self, start, mio::IoOp::Read(&mut whole))?;
        let at = (offset - start) as usize;
        buf.copy_from_slice(&whole[at..at + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        mio::run_one(self, offset, mio::IoOp::Write(buf))
    }
    fn flush(&self) -> io::Result<()> {
        mio::run_one(self, 0, mio::IoOp::Flush)
    }
    fn size_bytes(&self) -> u64 {
        self.size()
    }
    fn logical_block_size(&self) -> u32 {
        self.lbs.load(Ordering::Relaxed)
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        self.zeroes(offset, len)
    }
    fn submission(&self) -> Submission<'_> {
        Submission::Async(self)
    }
    fn default_timeout(&self) -> Option<Duration> {
        Some(DEFAULT_NET_TIMEOUT)
    }
    fn network(&self) -> Option<&NbdDev> {
        Some(self)
    }
}
