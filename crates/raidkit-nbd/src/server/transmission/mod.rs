//! The transmission phase.
//!
//! nbdkit's model: every worker of a connection takes its turn at the socket to read one
//! request header and payload, then processes the request and writes the reply itself.
//! No hand-off between threads, one reply write per request, and the buffered reader
//! takes many small request headers with one `recv`.
//!
//! A worker passes the read turn on ([`turn::Turn`]) before it processes the request it
//! read, so requests run in parallel and a slow one holds up nothing. But when the
//! client pipelines (more requests are buffered behind the one just read, or were
//! recently) and requests are short and small, the worker keeps the turn while it
//! processes its request, then reads the next one itself: no wake-up and no futex call
//! per request, and its small replies are deferred and sent together, one write per
//! run of requests (see `reply`). A guard takes a kept turn after [`turn::KEEP_BOUND`],
//! so a stuck request holds up the ones behind it (and deferred replies) for about that
//! long. A client at queue depth 1 is served exactly as before: the turn is passed on
//! after every request.
//!
//! Workers are started as requests arrive (when the worker that just read one finds
//! nobody waiting for the next turn) up to the configured number. A worker holding the
//! turn with no request for `RETIRE_AFTER` stops, unless it is the last one; the next
//! waiting worker then takes the turn and, the connection still idle, stops after a tick:
//! an idle connection costs one thread. The last worker to leave closes the connection.

mod flight;
mod read;
mod reply;
#[cfg(test)]
mod tests;
mod turn;

use super::config::ExportEntry;
use super::stream::{SharedTls, Sock, Transport};
use super::Shared;
use crate::pool::BufPool;
use crate::proto::{self, Cmd, Limits, Request};
use crate::util::lock;
use flight::{Cost, Flight};
use read::{Next, Patient, ReadSide};
pub(crate) use reply::reply_batch;

use reply::OutQueue;
use std::io::{self, BufReader, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use turn::Turn;

/// How long the last request may have taken (µs) for the read turn to be kept over the
/// next: a quarter of the guard's bound, or `RAIDKIT_NBD_KEEP_US` (for measurements; 0:
/// never keep, every request is handed off).
pub(crate) fn keep_us() -> u64 {
    let bound_us = u64::try_from(turn::KEEP_BOUND.as_micros()).unwrap_or(u64::MAX);
    std::env::var("RAIDKIT_NBD_KEEP_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(bound_us / 4)
        .min(bound_us / 4)
}

/// A connection without a request for this long lets its extra workers stop.
pub(super) const RETIRE_AFTER: Duration = Duration::from_secs(2);
/// A worker passes the read turn on before processing a request, whatever its length,
/// when this much of the following requests is buffered: the client is far ahead, and
/// the requests are better run in parallel.
const PASS_BACKLOG: usize = read::READ_BUF / 2;
/// Largest request processed with the read turn kept (larger ones run in parallel).
const KEEP_MAX_LEN: u32 = 64 << 10;

/// What the transmission phase did, across a server's connections (for tests).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Counts {
    /// Workers woken to take the read turn, and turns the guard took.
    pub(crate) wakes: AtomicUsize,
    /// Requests processed with the read turn kept.
    pub(crate) keeps: AtomicUsize,
    /// Reply writes to the socket (each of one or more replies).
    pub(crate) writes: AtomicUsize,
}

pub(crate) struct Conn {
    sh: Arc<Shared>,
    /// Workers alive.
    alive: AtomicUsize,
    max_workers: usize,
    /// Which worker reads next; only the holder locks `rd`.
    turn: Turn,
    rd: Mutex<ReadSide>,
    /// How long the last request took to process (µs): turns are kept only while
    /// requests are short.
    last_request_us: AtomicU64,
    out: Mutex<OutQueue>,
    writer: Mutex<Box<dyn Write + Send>>,
    flight: Flight,
    structured: bool,
    export: Arc<ExportEntry>,
    limits: Limits,
    /// Request buffers, reused last-in first-out so the ones in use stay in cache
    /// (whichever worker takes the next request); a write's is lent to the backend.
    pool: Arc<BufPool>,
    dead: AtomicBool,
    closer: Option<Sock>,
    tls: Option<SharedTls>,
    /// Dropped with the connection: its admission slots and registration.
    _guards: Box<dyn Send + Sync>,
}

impl Drop for Conn {
    /// The last worker is gone: close the TLS session and the socket.
    fn drop(&mut self) {
        if let Some(t) = &self.tls {
            let _ = lock(t).shutdown();
        }
        if let Some(c) = &self.closer {
            c.shutdown(Shutdown::Both);
        }
    }
}

/// Serve requests until the client leaves, the connection breaks or the server stops.
/// Returns once this thread's work is done; other workers may still be finishing, and
/// the last one closes the connection and drops `guards`.
pub(crate) fn run(
    sh: &Arc<Shared>,
    t: Transport,
    export: Arc<ExportEntry>,
    structured: bool,
    guards: Box<dyn Send + Sync>,
) {
    let limits = export.limits;
    let lim = &sh.limits;
    let conn = Arc::new(Conn {
        sh: Arc::clone(sh),
        alive: AtomicUsize::new(1),
        max_workers: sh.workers,
        turn: Turn::default(),
        last_request_us: AtomicU64::new(0),
        rd: Mutex::new(ReadSide {
            reader: BufReader::with_capacity(
                read::READ_BUF,
                Patient {
                    inner: t.reader,
                    patient: true,
                    stall_limit: lim.idle_timeout,
                },
            ),
            done: false,
            last_request: Instant::now(),
            pipelined: 0,
        }),
        out: Mutex::new(OutQueue::default()),
        writer: Mutex::new(t.writer),
        flight: Flight::new(lim.max_requests_in_flight, lim.max_bytes_in_flight),
        structured,
        export,
        limits,
        pool: Arc::default(),
        dead: AtomicBool::new(false),
        closer: t.closer,
        tls: t.tls,
        _guards: guards,
    });
    #[cfg(test)]
    conn.turn.count_in(&sh.counts);
    conn.work();
}

impl Conn {
    /// A worker leaves, unless it is the last one (`only_extra`). True if it left; all but
    /// the last one held a server-wide worker slot.
    fn leave(&self, only_extra: bool) -> bool {
        let left = self
            .alive
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 1 || !only_extra).then(|| n - 1)
            });
        match left {
            Ok(n) if n > 1 => {
                self.sh.free_worker_slot();
                true
            }
            Ok(_) => true,
            Err(_) => false,
        }
    }

    /// After reading a request: start one more worker if nobody waits for the next turn
    /// (and the limits allow).
    fn maybe_spawn(self: &Arc<Self>) {
        if self.turn.waiting() > 0
            || self.alive.load(Ordering::Acquire) >= self.max_workers
            || !self.sh.take_worker_slot()
        {
            return;
        }
        self.alive.fetch_add(1, Ordering::AcqRel);
        let me = Arc::clone(self);
        let started = thread::Builder::new()
            .name("nbd-worker".into())
            .spawn(move || me.work());
        if started.is_err() {
            self.leave(false);
        }
    }

    /// A worker: take the read turn, read a request, process it (keeping the turn while
    /// the client pipelines short requests), reply; until the read side is done.
    fn work(self: &Arc<Self>) {
        let mut holding = false;
        loop {
            let mut buf = self.pool.take();
            if !holding && self.turn.take() {
                // Taken from a keeper stuck in a request: its deferred replies go now.
                self.flush_out();
            }
            holding = true;
            let (next, ahead, pipelined, t) = {
                let mut rd = lock(&self.rd);
                if !rd.whole_request_buffered() {
                    // About to wait for the client: deferred replies go first.
                    self.flush_out();
                }
                let next = self.read_next(&mut rd, &mut buf);
                // One clock read per request: when it arrived (idle and retire times) is
                // also when its processing starts (how long it took decides keeping).
                let t = Instant::now();
                match next {
                    Next::Done => rd.done = true,
                    Next::Request(..) | Next::Again => rd.last_request = t,
                    Next::Retire => {}
                }
                let ahead = rd.reader.buffer().len();
                rd.note_depth(ahead);
                (next, ahead, rd.pipelined > 0, t)
            };
            match next {
                Next::Request(req, cmd, cost) => {
                    let keep = if (ahead > 0 || pipelined) && self.keepable(&req, ahead) {
                        self.turn.keep()
                    } else {
                        None
                    };
                    if keep.is_none() {
                        self.turn.release(false);
                        holding = false;
                    }
                    self.maybe_spawn();
                    self.execute(req, cmd, cost, &mut buf, keep.is_some());
                    let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                    self.last_request_us.store(us, Ordering::Relaxed);
                    if let Some(n) = keep {
                        #[cfg(test)]
                        self.sh.counts.keeps.fetch_add(1, Ordering::Relaxed);
                        holding = self.turn.unkeep(n);
                        if !holding {
                            // The guard took the turn meanwhile.
                            self.flush_out();
                        }
                    }
                }
                Next::Again => {}
                Next::Retire => {
                    self.turn.release(false);
                    // Keep the pool as small as the crew.
                    self.pool.shrink();
                    return;
                }
                Next::Done => {
                    self.flush_out();
                    self.turn.release(true);
                    self.leave(false);
                    return;
                }
            }
            self.pool.put(buf);
        }
    }

    /// `req` may be processed with the read turn kept: it is small, recent requests were
    /// short (the last took under a quarter of the guard's bound, see [`keep_us`]), and
    /// the client is not far ahead (`ahead` bytes buffered).
    fn keepable(&self, req: &Request, ahead: usize) -> bool {
        req.len <= KEEP_MAX_LEN
            && ahead < PASS_BACKLOG
            && self.last_request_us.load(Ordering::Relaxed) < self.sh.keep_us
    }

    /// Process one request and reply (`defer`: a small reply may wait in the out queue,
    /// see `reply`).
    fn execute(&self, req: Request, cmd: Cmd, cost: Cost, buf: &mut Vec<u8>, defer: bool) {
        let b = &self.export.backend;
        let Request {
            cookie,
            offset,
            len,
            ..
        } = req;
        let n = len as usize;
        let then_flush =
            |r: io::Result<()>, fua: bool| r.and_then(|_| if fua { b.flush() } else { Ok(()) });
        let res = match cmd {
            Cmd::Read => return self.read(cookie, offset, n, buf, cost, defer),
            Cmd::Write { fua } => match buf.get(..n) {
                Some(_) if n == 0 => Ok(()),
                // Lent: back in the pool when the backend drops it.
                Some(_) => b.write_buf(offset, self.pool.lend(std::mem::take(buf), n), fua),
                None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            },
            Cmd::Flush => b.flush(),
            Cmd::Trim { .. } | Cmd::WriteZeroes { .. } if n == 0 => Ok(()),
            Cmd::Trim { fua } => then_flush(b.trim(offset, u64::from(len)), fua),
            Cmd::WriteZeroes { fua, no_hole } => {
                then_flush(b.write_zeroes(offset, u64::from(len), no_hole), fua)
            }
            Cmd::Disc => Ok(()),
        };
        match res {
            Ok(()) => self.reply_ok(cookie, cost, defer),
            Err(e) => self.reply_error(cookie, proto::errno_of(&e), &e.to_string(), None, cost),
        }
    }

    /// Read into `buf` after room for the reply header, so header and data go out with
    /// one write.
    fn read(&self, cookie: u64, offset: u64, n: usize, buf: &mut Vec<u8>, cost: Cost, defer: bool) {
        let hdr = if self.structured {
            proto::CHUNK_HEADER_LEN + 8
        } else {
            proto::SIMPLE_REPLY_LEN
        };
        if n == 0 {
            if self.structured {
                let h =
                    proto::chunk_header(proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_NONE, cookie, 0);
                self.send(&h, cost, defer);
            } else {
                self.reply_ok(cookie, cost, defer);
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
        if let Err(e) = res {
            let msg = e.to_string();
            return self.reply_error(cookie, proto::errno_of(&e), &msg, Some(offset), cost);
        }
        if self.structured {
            let typ = proto::REPLY_TYPE_OFFSET_DATA;
            let h = proto::chunk_header(proto::REPLY_FLAG_DONE, typ, cookie, (8 + n) as u32);
            buf[..20].copy_from_slice(&h);
            buf[20..28].copy_from_slice(&offset.to_be_bytes());
        } else {
            buf[..16].copy_from_slice(&proto::simple_reply(0, cookie));
        }
        match buf.get(..hdr + n) {
            Some(all) => self.send(all, cost, defer),
            None => self.flight.release(cost),
        }
    }
}
