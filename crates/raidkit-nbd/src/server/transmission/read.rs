//! Reading requests off the socket: waiting for one between requests (watching the stop
//! flag and the idle timeout), then the header and a write's payload, validated before
//! anything is allocated, with budget taken before the request is accepted.

use super::flight::Cost;
use super::Conn;
use crate::proto::{self, errno, Cmd, Request};
use crate::server::stream::{is_tick, InReader};
use crate::util::drain;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Oversized WRITE payloads up to this size are drained (and refused); larger ones close
/// the connection.
const WRITE_DRAIN_LIMIT: u32 = 64 << 20;
/// A write's payload buffer grows at most this far ahead of the bytes received.
const PAYLOAD_STEP: usize = 1 << 20;
/// Receive buffer of the request reader (many small request headers per `recv`).
pub(super) const READ_BUF: usize = 256 << 10;

/// The socket as read during transmission. `patient`: inside a request, the reader's
/// ticks are retried (for at most `stall_limit`, when there is one); between requests
/// they are reported, so the waiting worker can look at the stop flag.
pub(super) struct Patient {
    pub(super) inner: InReader,
    pub(super) patient: bool,
    pub(super) stall_limit: Option<Duration>,
}

impl Read for Patient {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut stalled: Option<Instant> = None;
        loop {
            match self.inner.read(buf) {
                Err(e) if self.patient && is_tick(&e) => {
                    let since = *stalled.get_or_insert_with(Instant::now);
                    if self.stall_limit.is_some_and(|l| since.elapsed() > l) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "client stalled in the middle of a request",
                        ));
                    }
                }
                r => return r,
            }
        }
    }
}

/// What the worker whose turn it was takes away.
pub(super) enum Next {
    /// A request to process, with the budget it holds.
    Request(Request, Cmd, Cost),
    /// A request was refused and answered; read the next.
    Again,
    /// No more requests (disconnect, error, shutdown, idle timeout).
    Done,
    /// Nothing to do for a while: this worker stops (it was not the last).
    Retire,
}

/// How waiting for a request ended.
enum Wait {
    Ready,
    Stop,
    Retire,
}

/// The reading side of a connection, used by the worker whose turn it is.
pub(super) struct ReadSide {
    pub(super) reader: BufReader<Patient>,
    /// No more requests are read (disconnect, error, shutdown, idle).
    pub(super) done: bool,
    /// When the last request arrived (stamped by the worker that read it, see `Conn::work`).
    pub(super) last_request: Instant,
    /// The client sends requests ahead of their replies (queue depth > 1): set to
    /// [`PIPELINED_FOR`] when a request is read with more bytes buffered behind it (one
    /// receive brought more than one request, which never happens at queue depth 1),
    /// counted down by each request read with nothing behind it. (How long a receive
    /// waited tells nothing: a client at queue depth 1 answers a reply within 2 µs.)
    pub(super) pipelined: u32,
}

/// Requests arriving alone after which a client no longer counts as pipelining.
pub(super) const PIPELINED_FOR: u32 = 64;

impl ReadSide {
    /// The next request is wholly buffered (header, and a write's payload): reading it
    /// waits for nothing.
    pub(super) fn whole_request_buffered(&self) -> bool {
        let b = self.reader.buffer();
        let Some(h) = b
            .get(..proto::REQUEST_LEN)
            .and_then(|h| <&[u8; proto::REQUEST_LEN]>::try_from(h).ok())
        else {
            return false;
        };
        match proto::parse_request(h) {
            Some(r) if r.typ == proto::CMD_WRITE => b.len() - proto::REQUEST_LEN >= r.len as usize,
            _ => true,
        }
    }

    /// Note what reading a request showed of the client's queue depth (`ahead`: the
    /// bytes buffered behind it).
    pub(super) fn note_depth(&mut self, ahead: usize) {
        if ahead > 0 {
            self.pipelined = PIPELINED_FOR;
        } else {
            self.pipelined = self.pipelined.saturating_sub(1);
        }
    }
}

impl Conn {
    /// Take a request's budget, waiting while there is none (false: the connection
    /// died meanwhile). Replies this worker deferred hold budget: they go out first.
    fn budget(&self, cost: Cost) -> bool {
        self.flight.acquire(
            cost,
            || self.dead.load(Ordering::Relaxed),
            || self.flush_out(),
        )
    }

    /// Wait until a request starts to arrive: `Stop` on shutdown, hang-up, error, a
    /// dead connection, or idle past the idle timeout; `Retire` if this worker is not
    /// needed (no request for `RETIRE_AFTER`, and it was not the last).
    fn wait_request(&self, rd: &mut ReadSide) -> Wait {
        if !rd.reader.buffer().is_empty() {
            return Wait::Ready;
        }
        rd.reader.get_mut().patient = false;
        let w = loop {
            match rd.reader.fill_buf() {
                Ok([]) => break Wait::Stop,
                Ok(_) => break Wait::Ready,
                Err(e) if is_tick(&e) => {
                    if self.sh.stopping() || self.dead.load(Ordering::Relaxed) {
                        break Wait::Stop;
                    }
                    let quiet = rd.last_request.elapsed();
                    let idle = self.sh.limits.idle_timeout.is_some_and(|t| quiet > t);
                    if idle && self.flight.held().requests == 0 {
                        break Wait::Stop;
                    }
                    if quiet > super::RETIRE_AFTER && self.leave(true) {
                        break Wait::Retire;
                    }
                }
                Err(_) => break Wait::Stop,
            }
        };
        rd.reader.get_mut().patient = true;
        w
    }

    /// Take the next request off the socket (its payload, for a write, into `buf`) with
    /// the budget it holds. Requests refused at once are answered here.
    pub(super) fn read_next(&self, rd: &mut ReadSide, buf: &mut Vec<u8>) -> Next {
        if rd.done || self.dead.load(Ordering::Relaxed) {
            return Next::Done;
        }
        match self.wait_request(rd) {
            Wait::Ready => {}
            Wait::Stop => return Next::Done,
            Wait::Retire => return Next::Retire,
        }
        self.read_request(rd, buf)
    }

    /// Read the request that has started to arrive.
    fn read_request(&self, rd: &mut ReadSide, buf: &mut Vec<u8>) -> Next {
        let mut h = [0u8; proto::REQUEST_LEN];
        if rd.reader.read_exact(&mut h).is_err() {
            return Next::Done;
        }
        let Some(req) = proto::parse_request(&h) else {
            return Next::Done;
        };
        if req.typ == proto::CMD_WRITE {
            return self.read_write(rd, &req, buf);
        }
        match proto::validate(&req, &self.limits) {
            Ok(Cmd::Disc) => Next::Done,
            Ok(cmd) => {
                let bytes = if cmd == Cmd::Read { req.len } else { 0 };
                let cost = Cost::request(u64::from(bytes));
                if self.budget(cost) {
                    Next::Request(req, cmd, cost)
                } else {
                    Next::Done
                }
            }
            Err(r) => {
                let cost = Cost::request(0);
                if !self.budget(cost) {
                    return Next::Done;
                }
                self.reply_error(req.cookie, r.errno, r.msg, None, cost);
                Next::Again
            }
        }
    }

    /// A write's payload (refused and answered at once if it is too large or invalid).
    fn read_write(&self, rd: &mut ReadSide, req: &Request, buf: &mut Vec<u8>) -> Next {
        if req.len > self.limits.max_payload {
            if req.len > WRITE_DRAIN_LIMIT || drain(&mut rd.reader, u64::from(req.len)).is_err() {
                return Next::Done;
            }
            let cost = Cost::request(0);
            if !self.budget(cost) {
                return Next::Done;
            }
            self.reply_error(
                req.cookie,
                errno::EINVAL,
                "write length exceeds the advertised maximum block size",
                None,
                cost,
            );
            return Next::Again;
        }
        let n = req.len as usize;
        let cost = Cost::request(u64::from(req.len));
        if !self.budget(cost) {
            return Next::Done;
        }
        if read_payload(&mut rd.reader, buf, n).is_err() {
            self.flight.release(cost);
            return Next::Done;
        }
        match proto::validate(req, &self.limits) {
            Ok(cmd) => Next::Request(*req, cmd, cost),
            Err(r) => {
                self.reply_error(req.cookie, r.errno, r.msg, None, cost);
                Next::Again
            }
        }
    }
}

/// Read a write's `n`-byte payload into `buf[..n]`, filling (touching) `buf` only as the
/// bytes arrive, at most [`PAYLOAD_STEP`] ahead: a client that announces 32 MiB and sends
/// nothing more pins 1 MiB of memory, not 32. The room is reserved at once (one
/// allocation, as before; its untouched pages cost nothing).
fn read_payload(r: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    buf.reserve(n.saturating_sub(buf.len()));
    let mut have = 0;
    while have < n {
        let end = n.min(have + PAYLOAD_STEP);
        if buf.len() < end {
            buf.resize(end, 0);
        }
        let part = buf
            .get_mut(have..end)
            .ok_or_else(|| io::Error::other("buffer"))?;
        r.read_exact(part)?;
        have = end;
    }
    Ok(())
}
