//! Writing replies. Every reply carries the budget its request holds, given back once
//! the reply is on the socket (or the connection is dead), so replies queued for a
//! client that does not read are bounded by the in-flight budget.
//!
//! Small replies are coalesced: while one worker is writing, others append theirs to the
//! out queue and return; the writing worker sends what has queued up with its next write
//! (fewer writes, fewer client wake-ups). A worker that keeps the read turn through a run
//! of pipelined requests defers its small replies (they wait in the out queue) and sends
//! them together when it is about to wait for the socket, passes the turn on, or has
//! `COALESCE_MAX` queued; if the guard takes the turn from it (a request stuck), the
//! guard sends them.

use super::flight::Cost;
use super::Conn;
use crate::proto;
use crate::util::lock;
use std::io::Write;
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// Replies up to this size are coalesced with others (larger ones are written alone).
const COALESCE_MAX: usize = 64 << 10;
/// Out queue capacity kept between bursts.
const KEEP_OUT: usize = 1 << 20;

/// Replies waiting for the worker that is writing.
#[derive(Default)]
pub(super) struct OutQueue {
    buf: Vec<u8>,
    /// The budget the queued replies hold.
    cost: Cost,
    /// A worker is writing (and will send whatever is queued before it stops).
    busy: bool,
    /// Replies deferred since the last write.
    deferred: usize,
}

/// Replies a worker that keeps the read turn defers into one write, at most (1: none
/// deferred). `RAIDKIT_NBD_REPLY_BATCH=N` sets it, for measurements.
pub(crate) fn reply_batch() -> usize {
    std::env::var("RAIDKIT_NBD_REPLY_BATCH")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(REPLY_BATCH)
        .clamp(1, 64)
}

/// Default of [`reply_batch`].
const REPLY_BATCH: usize = 16;

impl Conn {
    /// Send one whole reply (or, `defer`, queue a small one for [`Conn::flush_out`]);
    /// then give back `cost`.
    pub(super) fn send(&self, data: &[u8], cost: Cost, defer: bool) {
        if self.dead.load(Ordering::Relaxed) {
            self.flight.release(cost);
            return;
        }
        if data.len() > COALESCE_MAX {
            let mut w = lock(&self.writer);
            let r = w.write_all(data).and_then(|_| w.flush());
            drop(w);
            self.flight.release(cost);
            if r.is_err() {
                self.die();
            }
            return;
        }
        let mut q = lock(&self.out);
        q.buf.extend_from_slice(data);
        q.cost.add(cost);
        if q.busy {
            return;
        }
        if defer && q.deferred + 1 < self.sh.reply_batch && q.buf.len() < COALESCE_MAX {
            q.deferred += 1;
            return;
        }
        self.write_queued(q);
    }

    /// Send the replies deferred in the out queue, if no other worker is writing (it
    /// will send them).
    pub(super) fn flush_out(&self) {
        let q = lock(&self.out);
        if q.busy || q.buf.is_empty() {
            return;
        }
        self.write_queued(q);
    }

    /// Become the out queue's writer: write what is queued, and what queues up
    /// meanwhile, until it is empty.
    fn write_queued(&self, mut q: MutexGuard<'_, OutQueue>) {
        q.busy = true;
        q.deferred = 0;
        let mut batch = std::mem::take(&mut q.buf);
        let mut batch_cost = std::mem::take(&mut q.cost);
        drop(q);
        loop {
            #[cfg(test)]
            self.sh.counts.writes.fetch_add(1, Ordering::Relaxed);
            let r = {
                let mut w = lock(&self.writer);
                w.write_all(&batch).and_then(|_| w.flush())
            };
            self.flight.release(batch_cost);
            batch.clear();
            let mut q = lock(&self.out);
            if r.is_err() {
                q.busy = false;
                q.buf.clear();
                let queued = std::mem::take(&mut q.cost);
                drop(q);
                self.flight.release(queued);
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
            batch_cost = std::mem::take(&mut q.cost);
        }
    }

    /// The connection is broken: stop reading and writing it.
    pub(super) fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        if let Some(c) = &self.closer {
            c.shutdown(Shutdown::Both);
        }
    }

    pub(super) fn reply_ok(&self, cookie: u64, cost: Cost, defer: bool) {
        self.send(&proto::simple_reply(0, cookie), cost, defer);
    }

    /// An error reply: a structured ERROR (or ERROR_OFFSET with `offset`) chunk if
    /// structured replies were negotiated, else a simple reply.
    pub(super) fn reply_error(
        &self,
        cookie: u64,
        errno: u32,
        msg: &str,
        offset: Option<u64>,
        cost: Cost,
    ) {
        if self.structured {
            self.send(&proto::error_chunk(cookie, errno, msg, offset), cost, false);
        } else {
            self.send(&proto::simple_reply(errno, cookie), cost, false);
        }
    }
}
