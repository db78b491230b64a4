//! One connection shared by many threads: requests are written under one writer lock
//! (with the caller's deadline), a reader thread matches replies to requests by cookie
//! and wakes each waiter. Every field from the wire is checked against the request it
//! answers before anything is allocated or copied. When a deadline passes, the server
//! breaks the protocol or the connection drops, the connection is closed and every
//! request in flight fails at once.

use super::coverage::Coverage;
use super::wire::{Wire, WireError};
use super::ClientError;
use crate::proto::{self, ChunkHeader, Request};
use crate::util::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why the connection ended (the first reason wins).
#[derive(Clone, Debug)]
pub(crate) enum Death {
    /// A request's deadline passed.
    Timeout { what: String, after: Duration },
    /// The socket closed or failed.
    Closed(String),
    /// The server broke the protocol.
    Protocol(String),
    /// The server answered `ESHUTDOWN`: it is going away, and the protocol has the
    /// client disconnect.
    Shutdown,
    /// The client closed it.
    ByUser,
}

impl Death {
    /// The error for requests caught in flight (or sent later).
    fn error(&self) -> ClientError {
        match self {
            Death::Timeout { what, after } => ClientError::Disconnected(format!(
                "closed because a request got no answer in time ({what}: {after:?})"
            )),
            Death::Closed(m) => ClientError::Disconnected(m.clone()),
            Death::Protocol(m) => ClientError::Protocol(m.clone()),
            Death::Shutdown => ClientError::Disconnected(
                "the server is shutting down (it answered ESHUTDOWN); connect again once it is back"
                    .into(),
            ),
            Death::ByUser => ClientError::Disconnected("closed by this client".into()),
        }
    }
}

/// What an asynchronous request calls when it ends, from whichever thread ends it (the
/// reader thread, or the one that closes the connection): the data of a read (empty for
/// other requests), or the error.
pub type Completion = Box<dyn FnOnce(Result<Vec<u8>, ClientError>) + Send>;

/// Where a request's reply lands: in the slot for a waiter, or handed to its completion.
pub(crate) struct Slot {
    result: Mutex<Option<Result<Vec<u8>, ClientError>>>,
    ready: Condvar,
    on_done: Mutex<Option<Completion>>,
}

impl Slot {
    fn new(on_done: Option<Completion>) -> Slot {
        Slot {
            result: Mutex::new(None),
            ready: Condvar::new(),
            on_done: Mutex::new(on_done),
        }
    }

    fn set(&self, r: Result<Vec<u8>, ClientError>) {
        let done = lock(&self.on_done).take();
        if let Some(done) = done {
            // Called outside every lock of the connection: it may submit again.
            done(r);
            return;
        }
        let mut g = lock(&self.result);
        if g.is_none() {
            *g = Some(r);
        }
        self.ready.notify_all();
    }
}

/// A request waiting for its reply.
struct Entry {
    req: Request,
    /// READ: the data as it arrives.
    buf: Vec<u8>,
    covered: Coverage,
    error: Option<ClientError>,
    slot: Arc<Slot>,
}

/// Counters of one connection.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent.
    pub requests: u64,
    /// Simple replies received.
    pub simple_replies: u64,
    /// `NBD_REPLY_TYPE_OFFSET_DATA` chunks received.
    pub data_chunks: u64,
    /// `NBD_REPLY_TYPE_OFFSET_HOLE` chunks received.
    pub hole_chunks: u64,
    /// Error chunks received.
    pub error_chunks: u64,
    /// Times a sender woke another that waited for its turn to write.
    pub writer_wakeups: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    simple: AtomicU64,
    data: AtomicU64,
    holes: AtomicU64,
    errors: AtomicU64,
}

/// Receive buffer: one `recv` brings many small replies.
const RX_BUF: usize = 64 << 10;

/// Bytes received and not yet consumed by the reader thread.
struct Rx {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Rx {
    /// Fill `out` from the buffer, then the socket (large remainders directly).
    fn read_exact(&mut self, wire: &Wire, out: &mut [u8]) -> Result<(), WireError> {
        let mut at = 0;
        loop {
            let n = (self.end - self.start).min(out.len() - at);
            out[at..at + n].copy_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            at += n;
            if at == out.len() {
                return Ok(());
            }
            if out.len() - at >= self.buf.len() / 2 {
                return wire.read_exact(&mut out[at..], None);
            }
            self.end = wire.read_some(&mut self.buf, None)?;
            self.start = 0;
        }
    }
}

/// The writer lock: waiting for it has a deadline too.
#[derive(Default)]
struct WriterLock {
    busy: Mutex<Turn>,
    freed: Condvar,
    /// Times a sender that finished woke one waiting for its turn (see
    /// [`Inner::give_writer`]).
    handoffs: AtomicU64,
}

/// Whose turn it is to write, and who waits for it.
#[derive(Default)]
struct Turn {
    busy: bool,
    /// Senders waiting in [`Inner::take_writer`]: a sender that finishes wakes one only
    /// if there is one (a notify is a system call even when nobody waits).
    waiting: usize,
}

pub(crate) struct Inner {
    pub(crate) wire: Wire,
    structured: bool,
    pending: Mutex<HashMap<u64, Entry>>,
    /// The reader thread's receive buffer.
    rx: Mutex<Rx>,
    writer: WriterLock,
    next_cookie: AtomicU64,
    death: Mutex<Option<Death>>,
    counters: Counters,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Inner {
    pub(crate) fn new(wire: Wire, structured: bool) -> Inner {
        Inner {
            wire,
            structured,
            pending: Mutex::new(HashMap::new()),
            rx: Mutex::new(Rx {
                buf: vec![0u8; RX_BUF].into_boxed_slice(),
                start: 0,
                end: 0,
            }),
            writer: WriterLock::default(),
            next_cookie: AtomicU64::new(1),
            death: Mutex::new(None),
            counters: Counters::default(),
        }
    }

    pub(crate) fn stats(&self) -> ClientStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClientStats {
            requests: g(&c.requests),
            simple_replies: g(&c.simple),
            data_chunks: g(&c.data),
            hole_chunks: g(&c.holes),
            error_chunks: g(&c.errors),
            writer_wakeups: g(&self.writer.handoffs),
        }
    }

    /// Why the connection is closed, if it is.
    pub(crate) fn death(&self) -> Option<ClientError> {
        lock(&self.death).as_ref().map(Death::error)
    }

    /// Close the connection and fail every request in flight.
    pub(crate) fn kill(&self, why: Death) {
        {
            let mut d = lock(&self.death);
            if d.is_none() {
                *d = Some(why);
            }
        }
        self.wire.close();
        let err = lock(&self.death).as_ref().map(Death::error);
        let entries: Vec<Entry> = lock(&self.pending).drain().map(|(_, e)| e).collect();
        for e in entries {
            e.slot
                .set(Err(err.clone().unwrap_or_else(|| Death::ByUser.error())));
        }
        let _g = lock(&self.writer.busy);
        self.writer.freed.notify_all();
    }

    fn timeout(&self, what: String, after: Duration) -> ClientError {
        self.kill(Death::Timeout {
            what: what.clone(),
            after,
        });
        ClientError::Timeout { what, after }
    }

    fn take_writer(&self, until: Instant, what: &str, after: Duration) -> Result<(), ClientError> {
        let mut turn = lock(&self.writer.busy);
        while turn.busy {
            if let Some(e) = self.death() {
                return Err(e);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(turn);
                return Err(self.timeout(what.to_string(), after));
            }
            turn.waiting += 1;
            turn = self
                .writer
                .freed
                .wait_timeout(turn, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
            turn.waiting -= 1;
        }
        turn.busy = true;
        Ok(())
    }

    /// End this sender's turn; wake a waiting one, if any.
    fn give_writer(&self) {
        let waiting = {
            let mut turn = lock(&self.writer.busy);
            turn.busy = false;
            turn.waiting > 0
        };
        if waiting {
            bump(&self.writer.handoffs);
            self.writer.freed.notify_one();
        }
    }

    /// Send a request (and its payload); its reply will land in the returned slot.
    /// `what` names it in errors; `after` is the time it was given.
    pub(crate) fn submit(
        &self,
        req: Request,
        payload: &[u8],
        until: Instant,
        what: &str,
        after: Duration,
    ) -> Result<Arc<Slot>, ClientError> {
        self.submit_with(req, payload, until, what, after, None)
    }

    /// [`Inner::submit`] whose reply goes to `on_done` instead of the slot. If this
    /// returns an error, `on_done` has not been called and never will be, unless the
    /// request was already in the table: then the connection is dead and `on_done` got
    /// that error.
    pub(crate) fn submit_with(
        &self,
        mut req: Request,
        payload: &[u8],
        until: Instant,
        what: &str,
        after: Duration,
        on_done: Option<Completion>,
    ) -> Result<Arc<Slot>, ClientError> {
        if let Some(e) = self.death() {
            return Err(e);
        }
        req.cookie = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        let is_async = on_done.is_some();
        let slot = Arc::new(Slot::new(on_done));
        let reads = req.typ == proto::CMD_READ;
        let cookie = req.cookie;
        lock(&self.pending).insert(
            cookie,
            Entry {
                req,
                buf: if reads {
                    vec![0u8; req.len as usize]
                } else {
                    Vec::new()
                },
                covered: Coverage::default(),
                error: None,
                slot: Arc::clone(&slot),
            },
        );
        // A connection that died before the entry went in will never fail it: take it
        // back. From here on, every error kills the connection, which fails the entry
        // (an asynchronous request then has its answer through its completion).
        if let Some(e) = self.death() {
            if lock(&self.pending).remove(&cookie).is_some() || !is_async {
                return Err(e);
            }
            return Ok(slot);
        }
        let delivered = |e: ClientError| {
            if is_async {
                Ok(Arc::clone(&slot))
            } else {
                Err(e)
            }
        };
        if let Err(e) = self.take_writer(until, what, after) {
            return delivered(e);
        }
        // Header and payload in one system call (see `Wire::write_all2`).
        let head = proto::encode_request(&req);
        let r = self.wire.write_all2(&head, payload, Some(until));
        self.give_writer();
        bump(&self.counters.requests);
        match r {
            Ok(()) => Ok(slot),
            Err(WireError::Timeout) => delivered(self.timeout(what.to_string(), after)),
            Err(WireError::Closed(m)) => {
                self.kill(Death::Closed(m));
                delivered(self.death().unwrap_or_else(|| Death::ByUser.error()))
            }
        }
    }

    /// Close the connection because a request got no answer in time (a caller that
    /// keeps its own deadlines, for asynchronous requests): every request in flight
    /// fails at once.
    pub(crate) fn expire(&self, what: String, after: Duration) {
        self.kill(Death::Timeout { what, after });
    }

    /// Send `NBD_CMD_DISC` (it has no reply).
    pub(crate) fn submit_disc(&self, mut req: Request, until: Instant) -> Result<(), ClientError> {
        req.cookie = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        self.take_writer(until, "disconnect", Duration::from_secs(1))?;
        let r = self
            .wire
            .write_all(&proto::encode_request(&req), Some(until));
        self.give_writer();
        r.map_err(|e| ClientError::Disconnected(format!("sending NBD_CMD_DISC: {e:?}")))
    }

    /// Wait for a submitted request's reply until `until`.
    pub(crate) fn wait(
        &self,
        slot: &Slot,
        until: Instant,
        what: &str,
        after: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let mut g = lock(&slot.result);
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(g);
                return Err(self.timeout(what.to_string(), after));
            }
            g = slot
                .ready
                .wait_timeout(g, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Read exactly `out.len()` bytes (the reader thread only).
    fn recv(&self, out: &mut [u8]) -> Result<(), WireError> {
        lock(&self.rx).read_exact(&self.wire, out)
    }

    /// The reader thread: replies until the connection ends.
    pub(crate) fn read_replies(&self) {
        loop {
            let mut magic = [0u8; 4];
            let r = match self.recv(&mut magic) {
                Err(e) => Err(closed(e)),
                Ok(()) => match proto::get32(&magic, 0) {
                    proto::SIMPLE_REPLY_MAGIC => self.simple_reply(),
                    proto::STRUCTURED_REPLY_MAGIC => self.chunk(),
                    m => Err(Death::Protocol(format!("bad reply magic 0x{m:08x}"))),
                },
            };
            if let Err(why) = r {
                self.kill(why);
                // Until the server has closed its side it may still carry out requests
                // it read before our close: see when it does.
                self.wire.drain_until_peer_closes();
                return;
            }
        }
    }

    /// The connection ends because of `e`'s reply: close it first (so the caller sees
    /// it broken when it wakes), then fail `e` (out of the table, `kill` misses it).
    fn fail(&self, e: &Entry, why: &Death) {
        self.kill(why.clone());
        e.slot.set(Err(why.error()));
    }

    fn take_entry(&self, cookie: u64) -> Result<Entry, Death> {
        lock(&self.pending)
            .remove(&cookie)
            .ok_or_else(|| Death::Protocol(format!("reply for unknown handle {cookie}")))
    }

    /// Read into `buf` for `e`; a failure fails `e` too (it is out of the table).
    fn read_for(&self, e: &Entry, buf: &mut [u8]) -> Result<(), Death> {
        self.recv(buf).map_err(|err| {
            let why = closed(err);
            self.fail(e, &why);
            why
        })
    }

    fn simple_reply(&self) -> Result<(), Death> {
        let mut b = [0u8; 12];
        self.recv(&mut b).map_err(closed)?;
        let r = proto::parse_simple_reply(&b);
        let mut e = self.take_entry(r.cookie)?;
        bump(&self.counters.simple);
        if !e.covered.is_empty() || e.error.is_some() {
            let why = Death::Protocol(format!("simple reply after chunks for handle {}", r.cookie));
            self.fail(&e, &why);
            return Err(why);
        }
        if r.errno != 0 {
            let shutdown = r.errno == proto::errno::ESHUTDOWN;
            if shutdown {
                // A server going away: the protocol has the client disconnect. Closed
                // first, so the caller sees the connection broken when it wakes.
                self.kill(Death::Shutdown);
            }
            e.slot.set(Err(ClientError::Server {
                errno: r.errno,
                message: String::new(),
            }));
            return if shutdown {
                Err(Death::Shutdown)
            } else {
                Ok(())
            };
        }
        let mut buf = std::mem::take(&mut e.buf);
        self.read_for(&e, &mut buf)?;
        e.slot.set(Ok(buf));
        Ok(())
    }

    fn chunk(&self) -> Result<(), Death> {
        let mut b = [0u8; 16];
        self.recv(&mut b).map_err(closed)?;
        let h = proto::parse_chunk_header(&b);
        if !self.structured {
            return Err(Death::Protocol(
                "structured reply without structured replies negotiated".into(),
            ));
        }
        let mut e = self.take_entry(h.cookie)?;
        if let Err(why) = self.chunk_body(&h, &mut e) {
            self.fail(&e, &why);
            return Err(why);
        }
        if !h.done() {
            lock(&self.pending).insert(h.cookie, e);
            return Ok(());
        }
        let total = e.req.len;
        let result = match e.error.take() {
            Some(err) => Err(err),
            None if e.req.typ == proto::CMD_READ && e.covered.total() != u64::from(total) => {
                let why = Death::Protocol(format!(
                    "read reply done after {} of {total} bytes",
                    e.covered.total()
                ));
                self.fail(&e, &why);
                return Err(why);
            }
            None => Ok(std::mem::take(&mut e.buf)),
        };
        e.slot.set(result);
        Ok(())
    }

    /// Check and read one chunk's payload into its entry.
    fn chunk_body(&self, h: &ChunkHeader, e: &mut Entry) -> Result<(), Death> {
        let bad = |m: String| Err(Death::Protocol(format!("handle {}: {m}", h.cookie)));
        let reads = e.req.typ == proto::CMD_READ;
        match h.typ {
            proto::REPLY_TYPE_NONE if h.len != 0 => bad(format!("NONE chunk of length {}", h.len)),
            proto::REPLY_TYPE_NONE if !h.done() => bad("NONE chunk without the DONE flag".into()),
            proto::REPLY_TYPE_NONE => Ok(()),
            proto::REPLY_TYPE_OFFSET_DATA if reads && h.len <= 8 => {
                bad(format!("data chunk of length {}", h.len))
            }
            proto::REPLY_TYPE_OFFSET_DATA if reads && h.len - 8 > e.req.len => bad(format!(
                "data chunk of {} bytes for a read of {}",
                h.len - 8,
                e.req.len
            )),
            proto::REPLY_TYPE_OFFSET_DATA if reads => {
                let mut off = [0u8; 8];
                self.read_for(e, &mut off)?;
                let off = u64::from_be_bytes(off);
                let n = u64::from(h.len - 8);
                let rel = self.place(e, off, n)?;
                bump(&self.counters.data);
                let mut buf = std::mem::take(&mut e.buf);
                let r = self.read_for(e, &mut buf[rel..rel + n as usize]);
                e.buf = buf;
                r
            }
            proto::REPLY_TYPE_OFFSET_HOLE if reads && h.len == 12 => {
                let mut p = [0u8; 12];
                self.read_for(e, &mut p)?;
                let (off, n) = proto::parse_hole(&p).map_err(|m| Death::Protocol(m.into()))?;
                let rel = self.place(e, off, u64::from(n))?;
                bump(&self.counters.holes);
                e.buf[rel..rel + n as usize].fill(0);
                Ok(())
            }
            t if t & proto::REPLY_TYPE_ERROR_BIT != 0 => self.error_chunk(h, e),
            t => bad(format!(
                "unexpected chunk type {t} (length {}) for command {}",
                h.len, e.req.typ
            )),
        }
    }

    /// Where a content chunk goes in the request's buffer (checked: within the request,
    /// not overlapping earlier chunks).
    fn place(&self, e: &mut Entry, off: u64, n: u64) -> Result<usize, Death> {
        let r = &e.req;
        if !proto::within(r.offset, r.len, off, n) {
            return Err(Death::Protocol(format!(
                "chunk at {off}+{n} outside the request {}+{}",
                r.offset, r.len
            )));
        }
        let rel = off - r.offset;
        e.covered
            .add(rel, n)
            .map_err(|m| Death::Protocol(format!("chunk at {off}+{n}: {m}")))?;
        Ok(rel as usize)
    }

    fn error_chunk(&self, h: &ChunkHeader, e: &mut Entry) -> Result<(), Death> {
        if h.len < 6 || h.len > proto::MAX_ERROR_PAYLOAD {
            return Err(Death::Protocol(format!("error chunk of length {}", h.len)));
        }
        let mut p = vec![0u8; h.len as usize];
        self.read_for(e, &mut p)?;
        bump(&self.counters.errors);
        let ec = proto::parse_error_chunk(h.typ, &p).map_err(|m| Death::Protocol(m.into()))?;
        if ec.errno == proto::errno::ESHUTDOWN {
            // A server going away: the protocol has the client disconnect (this request
            // and every other in flight fail, as on any lost connection).
            return Err(Death::Shutdown);
        }
        if let Some(off) = ec.offset {
            if !proto::within(e.req.offset, e.req.len, off, 0)
                || off == e.req.offset + u64::from(e.req.len)
            {
                return Err(Death::Protocol(format!(
                    "error offset {off} outside the request"
                )));
            }
        }
        e.error.get_or_insert(ClientError::Server {
            errno: ec.errno,
            message: ec.message,
        });
        Ok(())
    }
}

fn closed(e: WireError) -> Death {
    match e {
        WireError::Closed(m) => Death::Closed(m),
        WireError::Timeout => Death::Closed("timed out".into()),
    }
}
