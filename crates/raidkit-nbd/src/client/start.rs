//! Asynchronous requests: sent at once, answered through a [`Completion`] called from the
//! reader thread (or from whichever thread closes the connection), so a caller can keep
//! many requests in flight without a thread each — a RAID engine's member IO, say.
//!
//! The caller keeps the deadlines: the connection does not time these requests out by
//! itself (nobody waits in it). When one is due and unanswered, [`Client::expire`]
//! closes the connection, and every request in flight then fails at once.

use super::demux::Completion;
use super::{Client, ClientError, Deadline};
use crate::proto::{self, Request};
use crate::util::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The pieces of one asynchronous call: their answers gathered, the caller's completion
/// called once, when the last one is in.
struct Join {
    st: Mutex<JoinState>,
}

struct JoinState {
    left: usize,
    /// Reads: the data, filled piece by piece (empty for other requests).
    buf: Vec<u8>,
    err: Option<ClientError>,
    done: Option<Completion>,
}

impl Join {
    fn new(pieces: usize, read_len: usize, done: Completion) -> Arc<Join> {
        Arc::new(Join {
            st: Mutex::new(JoinState {
                left: pieces,
                buf: vec![0u8; read_len],
                err: None,
                done: Some(done),
            }),
        })
    }

    /// Piece answered: `rel` is where its data goes in a read.
    fn piece_done(&self, rel: usize, r: Result<Vec<u8>, ClientError>) {
        let mut st = lock(&self.st);
        match r {
            Ok(data) => {
                if let Some(dst) = st.buf.get_mut(rel..rel + data.len()) {
                    dst.copy_from_slice(&data);
                }
            }
            Err(e) => {
                st.err.get_or_insert(e);
            }
        }
        st.left -= 1;
        if st.left > 0 {
            return;
        }
        let done = st.done.take();
        let result = match st.err.take() {
            Some(e) => Err(e),
            None => Ok(std::mem::take(&mut st.buf)),
        };
        drop(st);
        if let Some(done) = done {
            done(result);
        }
    }

    /// Pieces that were never sent (the connection died on an earlier one): answered
    /// with that error.
    fn unsent(&self, pieces: usize, e: &ClientError) {
        for _ in 0..pieces {
            self.piece_done(0, Err(e.clone()));
        }
    }
}

impl Client {
    /// Start a read of `len` bytes at `offset`; `done` gets the data. Err (and `done`
    /// never called) if it could not be sent at all; once it is sent, every outcome
    /// goes to `done`.
    pub fn start_read(
        &self,
        offset: u64,
        len: usize,
        deadline: impl Into<Deadline>,
        done: Completion,
    ) -> Result<(), ClientError> {
        let what = format!("read of {len} bytes at offset {offset}");
        self.check_range(&what, offset, len as u64)?;
        let step = u64::from(self.info.chunk());
        let reqs = self.pieces(proto::CMD_READ, 0, offset, len as u64, step);
        self.start_pieces(reqs, None, offset, len, deadline.into(), &what, done)
    }

    /// Start a write of `data` at `offset` (no FUA: flush to make it durable). The data
    /// is sent before this returns; see [`Client::start_read`] for `done`.
    pub fn start_write(
        &self,
        offset: u64,
        data: &[u8],
        deadline: impl Into<Deadline>,
        done: Completion,
    ) -> Result<(), ClientError> {
        let what = format!("write of {} bytes at offset {offset}", data.len());
        if self.info.read_only() {
            return Err(ClientError::Unsupported("writes (the export is read-only)"));
        }
        self.check_range(&what, offset, data.len() as u64)?;
        let step = u64::from(self.info.chunk());
        let reqs = self.pieces(proto::CMD_WRITE, 0, offset, data.len() as u64, step);
        self.start_pieces(reqs, Some(data), offset, 0, deadline.into(), &what, done)
    }

    /// Start a flush (every write acknowledged so far made durable). Unsupported if the
    /// server offers no FLUSH.
    pub fn start_flush(
        &self,
        deadline: impl Into<Deadline>,
        done: Completion,
    ) -> Result<(), ClientError> {
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
        self.start_pieces(vec![req], None, 0, 0, deadline.into(), "flush", done)
    }

    /// Close the connection because a request got no answer by its deadline (the
    /// caller's; see the module docs): every request in flight fails at once with
    /// [`ClientError::Disconnected`], and so do later calls.
    pub fn expire(&self, what: &str, after: Duration) {
        self.inner.expire(what.to_string(), after);
    }

    /// Send the pieces of one call, all answering into one [`Join`].
    #[allow(clippy::too_many_arguments)]
    fn start_pieces(
        &self,
        reqs: Vec<Request>,
        data: Option<&[u8]>,
        offset: u64,
        read_len: usize,
        d: Deadline,
        what: &str,
        done: Completion,
    ) -> Result<(), ClientError> {
        let n = reqs.len();
        if n == 0 {
            done(Ok(Vec::new()));
            return Ok(());
        }
        let join = Join::new(n, read_len, done);
        for (k, req) in reqs.into_iter().enumerate() {
            let rel = (req.offset - offset) as usize;
            let payload = match data {
                Some(d) => &d[rel..rel + req.len as usize],
                None => &[][..],
            };
            let j = Arc::clone(&join);
            let on_done: Completion = Box::new(move |r| j.piece_done(rel, r));
            if let Err(e) =
                self.inner
                    .submit_with(req, payload, d.at, what, d.allowed, Some(on_done))
            {
                if k == 0 {
                    // Nothing was sent: the caller hears it from the error, not `done`.
                    lock(&join.st).done = None;
                    return Err(e);
                }
                join.unsent(n - k, &e);
                return Ok(());
            }
        }
        Ok(())
    }
}
