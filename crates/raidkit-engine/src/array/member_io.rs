//! Member IO: every member read and write of the engine goes through
//! [`Array::member_io`] (or its one-IO forms `member_read` / `member_write`), which submits
//! a batch at once through the member IO layer, mirrors writes to a replacement being
//! built, records counters and latencies, and turns each outcome into what it means to
//! the array (a failed member, a bad block, a repaired read error).

use crate::array::member::Member;
use crate::array::Array;
use crate::dev::io::{self, IoOp, IoReq};
use crate::error::EngineError;
use crate::error::Result;
use raidkit_layout::SECTOR;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Ops of a batch kept inline, without an allocation: a mirrored write of one chunk (two
/// to four copies) or a RAID10 read of two runs fits.
const INLINE_OPS: usize = 4;

/// A member (or none) for each op of a batch.
type PerOp = SmallVec<[Option<Arc<Member>>; INLINE_OPS]>;

/// The buffer of a member IO.
pub(crate) enum OpBuf<'a> {
    /// Read into it.
    Read(&'a mut [u8]),
    /// Write it.
    Write(&'a [u8]),
}

/// One member IO of a batch ([`Array::member_io`]): role, data sector, buffer, and once
/// run its outcome (reads: `Ok(true)`; writes: `Ok(true)` written, `Ok(false)` the member
/// is missing or was failed by this write).
pub(crate) struct MemberOp<'a> {
    pub(crate) role: usize,
    pub(crate) dsec: u64,
    pub(crate) buf: OpBuf<'a>,
    pub(crate) outcome: Option<Result<bool>>,
}

impl<'a> MemberOp<'a> {
    /// Read `buf.len()` bytes of `role` at data sector `dsec`.
    pub(crate) fn read(role: usize, dsec: u64, buf: &'a mut [u8]) -> MemberOp<'a> {
        MemberOp {
            role,
            dsec,
            buf: OpBuf::Read(buf),
            outcome: None,
        }
    }

    /// Write `buf` to `role` at data sector `dsec`.
    pub(crate) fn write(role: usize, dsec: u64, buf: &'a [u8]) -> MemberOp<'a> {
        MemberOp {
            role,
            dsec,
            buf: OpBuf::Write(buf),
            outcome: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match &self.buf {
            OpBuf::Read(b) => b.len(),
            OpBuf::Write(b) => b.len(),
        }
    }

    /// A read's outcome.
    pub(crate) fn read_result(self) -> Result<()> {
        self.outcome
            .unwrap_or_else(|| Err(EngineError::Invalid("member read not run".into())))
            .map(drop)
    }

    /// A write's outcome (`Ok(false)`: not written, the member is missing or failed).
    pub(crate) fn write_result(self) -> Result<bool> {
        self.outcome
            .unwrap_or_else(|| Err(EngineError::Invalid("member write not run".into())))
    }

    /// Did this IO succeed (read, or written)?
    pub(crate) fn ok(&self) -> bool {
        matches!(self.outcome, Some(Ok(true)))
    }
}

impl Array {
    /// Read from one member's data area; any failure is returned (the member is not failed
    /// for read errors here — callers reconstruct — but it is for a missed deadline).
    pub(crate) fn member_read(&self, role: usize, dsec: u64, buf: &mut [u8]) -> Result<()> {
        let mut ops = [MemberOp::read(role, dsec, buf)];
        self.member_io(&mut ops);
        let [op] = ops;
        op.read_result()
    }

    /// Write to one member; a failure fails the member (md behaviour) and is reported
    /// as `Ok(false)`. Missing members are skipped (`Ok(false)`).
    pub(crate) fn member_write(&self, role: usize, dsec: u64, buf: &[u8]) -> Result<bool> {
        let mut ops = [MemberOp::write(role, dsec, buf)];
        self.member_io(&mut ops);
        let [op] = ops;
        op.write_result()
    }

    /// Carry out member reads and writes together: every IO is submitted at once (and
    /// writes also go to the role's replacement, if one is being built) and waited for
    /// together, each until the member's deadline ([`crate::dev::io`]). Outcomes as
    /// [`Array::member_read`] / [`Array::member_write`] give them, in each op. A member
    /// that misses its deadline is failed at once (through [`Array::fail_member`]).
    pub(crate) fn member_io(&self, ops: &mut [MemberOp<'_>]) {
        debug_assert!(
            ops.iter().all(|o| o.len().is_multiple_of(SECTOR as usize)),
            "member IO not in whole sectors"
        );
        let (members, reps) = self.batch_members(ops);
        self.settle_reads_behind(ops, &members);
        let t0 = Instant::now();
        let (mut reqs, mut whose) = batch_ios(ops, &members, &reps, t0);
        io::run(&mut reqs, &mut |i| {
            // The kernel still holds the IO: fail the member now, so nothing else waits
            // for it, and wait for the memory.
            let w = &whose[i];
            if !w.on_rep {
                let _ = self.fail_member(w.role, "no answer within the member timeout");
            }
        });
        // The outcomes move into `whose` (the requests borrow the ops' buffers until
        // dropped; one list per batch, not three).
        for (w, r) in whose.iter_mut().zip(reqs.iter_mut()) {
            w.outcome = Some((r.take_result(), r.done_at));
        }
        drop(reqs);
        for w in whose {
            let (k, on_rep) = (w.op, w.on_rep);
            let (res, done_at) = w
                .outcome
                .unwrap_or_else(|| (Err(std::io::Error::other("IO not run")), None));
            let op = &mut ops[k];
            if on_rep {
                if let Some(Some(r)) = reps.get(k) {
                    self.settle_replacement_write(op, r, res);
                }
            } else if let Some(m) = &members[k] {
                self.settle_member_io(op, m, res, t0, done_at);
            }
        }
        self.check_slow_reads(ops, &members);
    }

    /// Slow-member detection ([`crate::array::slow`]) after each of the batch's successful
    /// reads: one look at the slots for the batch; events raised after it.
    fn check_slow_reads(&self, ops: &[MemberOp<'_>], members: &[Option<Arc<Member>>]) {
        let read_ok = |o: &MemberOp<'_>| matches!(o.buf, OpBuf::Read(_)) && o.ok();
        if !ops.iter().any(read_ok) {
            return;
        }
        let mut events = Vec::new();
        {
            let slots = self.slots();
            for (op, m) in ops.iter().zip(members) {
                if let (true, Some(m)) = (read_ok(op), m) {
                    events.extend(crate::array::slow::slow_read(&slots, op.role, m));
                }
            }
        }
        for e in events {
            self.emit(e);
        }
    }

    /// The live member of each op's role (`None`: missing or failed) and, for writes while
    /// a replacement is being built, the role's replacement; one look at the slots for the
    /// whole batch.
    /// Before reading a write-mostly member, let the writes queued behind to it over the
    /// range land: every read of a member (a client's, a rebuild's source, a check's
    /// comparison) must see every write acknowledged to a client. (A job's range hold
    /// waits for client writes only until they are acknowledged, and a write-mostly
    /// member's part may still be queued then.)
    fn settle_reads_behind(&self, ops: &[MemberOp<'_>], members: &[Option<Arc<Member>>]) {
        for (op, m) in ops.iter().zip(members) {
            if matches!(op.buf, OpBuf::Read(_)) && m.as_ref().is_some_and(|m| m.is_write_mostly()) {
                self.wait_write_behind(op.role, op.dsec, op.len() as u64 / SECTOR);
            }
        }
    }

    fn batch_members(&self, ops: &[MemberOp<'_>]) -> (PerOp, PerOp) {
        let members = {
            let slots = self.slots();
            ops.iter()
                .map(|o| {
                    slots
                        .get(o.role)
                        .and_then(|m| m.clone())
                        .filter(|m| !m.is_failed())
                })
                .collect()
        };
        let replacing = self.members.replacing.load(Ordering::Acquire)
            && ops.iter().any(|o| matches!(o.buf, OpBuf::Write(_)));
        let reps = if replacing {
            ops.iter()
                .map(|o| match o.buf {
                    OpBuf::Write(_) => self.replacement(o.role),
                    OpBuf::Read(_) => None,
                })
                .collect()
        } else {
            SmallVec::new()
        };
        (members, reps)
    }

    /// One write to a replacement done: a failure abandons the replacement (an error only
    /// if that itself fails); a success is counted.
    fn settle_replacement_write(
        &self,
        op: &mut MemberOp<'_>,
        r: &Arc<Member>,
        res: std::io::Result<()>,
    ) {
        r.holes.wrote();
        match res {
            Err(e) => {
                if let Err(fatal) = self.abort_replacement(op.role, r, &format!("write error: {e}"))
                {
                    op.outcome = Some(Err(fatal));
                }
            }
            Ok(()) => r.stats.count_write(op.len(), None),
        }
    }

    /// One member IO done: what it means to the array becomes the op's outcome, unless
    /// the op already failed (its replacement's write could not be abandoned).
    fn settle_member_io(
        &self,
        op: &mut MemberOp<'_>,
        m: &Arc<Member>,
        res: std::io::Result<()>,
        t0: Instant,
        done_at: Option<Instant>,
    ) {
        let outcome = match op.buf {
            OpBuf::Read(_) => self.after_read(op.role, m, op.len(), res, t0, done_at),
            OpBuf::Write(_) => {
                let elapsed = done_at.map(|d| d.saturating_duration_since(t0));
                self.after_write(op.role, m, op.dsec, op.len(), res, elapsed)
            }
        };
        if op.outcome.as_ref().is_none_or(|o| o.is_ok()) {
            op.outcome = Some(outcome);
        }
    }

    /// What a member read's outcome means to the array (see [`Array::member_io`]).
    fn after_read(
        &self,
        role: usize,
        m: &Arc<Member>,
        len: usize,
        res: std::io::Result<()>,
        t0: Instant,
        done_at: Option<Instant>,
    ) -> Result<bool> {
        // The completion time stamps the balancer's sample too (no clock read of its own).
        let elapsed = done_at.map(|d| d.saturating_duration_since(t0));
        let sampled = res.is_ok().then_some(elapsed.zip(done_at)).flatten();
        m.load.end_at(len, sampled);
        match res {
            Ok(()) => {
                m.stats.count_read(len, elapsed);
                Ok(true)
            }
            Err(e) => {
                if io::is_gone(&e) {
                    // Kept if the array cannot run without it: the read fails, and its
                    // link comes back through the reconnector.
                    let _ = self.fail_gone(role, m, &format!("read: {e}"));
                }
                Err(EngineError::io(m.dev.name(), "reading member data", e))
            }
        }
    }

    /// What a member write's outcome means to the array (see [`Array::member_io`]).
    fn after_write(
        &self,
        role: usize,
        m: &Arc<Member>,
        dsec: u64,
        len: usize,
        res: std::io::Result<()>,
        elapsed: Option<std::time::Duration>,
    ) -> Result<bool> {
        m.holes.wrote();
        let n = len as u64 / SECTOR;
        match res {
            Ok(()) => {
                m.stats.count_write(len, elapsed);
                if m.has_bad.load(Ordering::Relaxed) {
                    // md's "made good": bad blocks under a successful write hold valid
                    // data again.
                    self.made_good(role, m, dsec, n);
                }
                Ok(true)
            }
            // A member that does not answer, or whose connection is lost, is failed (no
            // bad block: the whole member is gone, not a sector) — unless the array cannot
            // run without it: then it is kept and the write fails (see `failing`).
            Err(e) if io::is_gone(&e) => {
                if self.fail_gone(role, m, &format!("write: {e}"))? {
                    return Ok(false);
                }
                self.kept_write_failed(role, dsec, n);
                Err(EngineError::io(m.dev.name(), "writing member data", e))
            }
            Err(e) => {
                // md records a bad block instead of failing the member when the member
                // has a bad-block log; otherwise the member is failed — unless it holds
                // the last copy of some data (see `fail_after_write_error`).
                if !self.bad_block_instead_of_fail(role, m, dsec, n) {
                    self.fail_after_write_error(role, &format!("write error: {e}"))?;
                }
                Ok(false)
            }
        }
    }

    /// Copy `sectors` from role `src` at data sector `src_dsec` to role `dst` at
    /// `dst_dsec` inside the kernel ([`io::copy_in_kernel`]: no buffer, one copy instead
    /// of two), where the pair allows it: both members live, the source readable there,
    /// no replacement of `dst` being built (its writes would have to go there too). True
    /// once written, the outcome counted as a member read and a member write are. False:
    /// nothing settled (not possible here, or an IO failed: the range may be partly
    /// written), and the caller copies through a buffer — which reads and writes again,
    /// and so meets any failure with the member IO path's handling of it.
    pub(crate) fn copy_member_range(
        &self,
        src: usize,
        src_dsec: u64,
        dst: usize,
        dst_dsec: u64,
        sectors: u64,
    ) -> bool {
        let (Some(s), Some(d)) = (self.member(src), self.member(dst)) else {
            return false;
        };
        if !io::can_copy_in_kernel(s.dev.as_ref(), d.dev.as_ref())
            || !self.readable(src, src_dsec, sectors)
            || (self.replacing() && self.replacement(dst).is_some())
        {
            return false;
        }
        if s.is_write_mostly() {
            self.wait_write_behind(src, src_dsec, sectors);
        }
        let len = (sectors * SECTOR) as usize;
        s.load.begin();
        let t0 = Instant::now();
        let r = io::copy_in_kernel(
            s.dev.as_ref(),
            (s.data_offset + src_dsec) * SECTOR,
            d.dev.as_ref(),
            (d.data_offset + dst_dsec) * SECTOR,
            len,
        );
        let Some(Ok(took)) = r else {
            s.load.end_at(len, None);
            return false;
        };
        let read_done = t0 + took.read;
        s.load.end_at(len, Some((took.read, read_done)));
        s.stats.count_read(len, Some(took.read));
        let slow = crate::array::slow::slow_read(&self.slots(), src, &s);
        if let Some(e) = slow {
            self.emit(e);
        }
        // A successful write: counted, and bad blocks under it made good.
        matches!(
            self.after_write(dst, &d, dst_dsec, len, Ok(()), Some(took.write)),
            Ok(true)
        )
    }

    /// Write raw parity/data blocks for a stripe row range (used by sync/repair).
    pub(crate) fn write_block(&self, role: usize, dsec: u64, buf: &[u8]) -> Result<bool> {
        self.member_write(role, dsec, buf)
    }

    /// Read raw blocks (used by sync/check).
    pub(crate) fn read_block(&self, role: usize, dsec: u64, buf: &mut [u8]) -> Result<()> {
        self.member_read(role, dsec, buf)
    }
}

/// The IOs of a batch, or what is kept per IO (inline up to [`INLINE_OPS`]).
type Batch<T> = SmallVec<[T; INLINE_OPS]>;

/// Which op of a batch an IO is for, and (once run) its outcome.
struct Whose {
    /// Index of the op.
    op: usize,
    /// The op's role.
    role: usize,
    /// The IO is the write to the role's replacement.
    on_rep: bool,
    /// Result and completion time.
    outcome: Option<(std::io::Result<()>, Option<std::time::Instant>)>,
}

/// The IOs of a batch: each op on its live member (and each write also on the role's
/// replacement, first), with which op each IO is for and whether on the replacement. An
/// op whose member is missing, or whose read would find no valid data there, gets its
/// outcome now and no IO.
fn batch_ios<'a>(
    ops: &'a mut [MemberOp<'_>],
    members: &'a [Option<Arc<Member>>],
    reps: &'a [Option<Arc<Member>>],
    t0: std::time::Instant,
) -> (Batch<IoReq<'a>>, Batch<Whose>) {
    let mut reqs: Batch<IoReq<'a>> = SmallVec::with_capacity(ops.len());
    let mut whose: Batch<Whose> = SmallVec::with_capacity(ops.len());
    let who = |op: usize, role: usize, on_rep: bool| Whose {
        op,
        role,
        on_rep,
        outcome: None,
    };
    for (k, op) in ops.iter_mut().enumerate() {
        let Some(m) = &members[k] else {
            op.outcome = Some(match op.buf {
                OpBuf::Read(_) => Err(EngineError::Unreadable {
                    offset: 0,
                    end: 0,
                    why: format!("role {} is missing", op.role),
                }),
                OpBuf::Write(_) => Ok(false),
            });
            continue;
        };
        let at = (m.data_offset + op.dsec) * SECTOR;
        let timeout = io::member_timeout(m.dev.as_ref());
        match &mut op.buf {
            OpBuf::Read(b) => {
                if !m.readable(op.dsec, b.len() as u64 / SECTOR) {
                    op.outcome = Some(Err(EngineError::Unreadable {
                        offset: 0,
                        end: 0,
                        why: format!(
                            "role {} ({}) has no valid data there",
                            op.role,
                            m.dev.name()
                        ),
                    }));
                    continue;
                }
                m.load.begin();
                reqs.push(IoReq::new_at(
                    m.dev.as_ref(),
                    at,
                    IoOp::Read(b),
                    timeout,
                    t0,
                ));
            }
            OpBuf::Write(b) => {
                if let Some(Some(r)) = reps.get(k) {
                    let rat = (r.data_offset + op.dsec) * SECTOR;
                    let t = io::member_timeout(r.dev.as_ref());
                    reqs.push(IoReq::new_at(r.dev.as_ref(), rat, IoOp::Write(b), t, t0));
                    whose.push(who(k, op.role, true));
                }
                reqs.push(IoReq::new_at(
                    m.dev.as_ref(),
                    at,
                    IoOp::Write(b),
                    timeout,
                    t0,
                ));
            }
        }
        whose.push(who(k, op.role, false));
    }
    (reqs, whose)
}
