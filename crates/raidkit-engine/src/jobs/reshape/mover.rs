//! Moving a reshape's data, md's way: ask the checkpoint rule what comes next
//! ([`Reshape::next_step`]), move batches of steps (read through the old geometry, write
//! through the new one), record the position when the rule needs it, when client writes
//! wait for it, and every [`super::CHECKPOINT_EVERY`] (the kernel's 10 s), back a critical
//! section up when nothing else makes it safe, and write the final superblocks at the end.
//! Stopping or pausing happens at a position where no client write waits (no old stripe
//! cut by it, everything recorded), so IO goes on while the reshape rests.

use crate::array::reshape::Route;
use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::jobs::reshape::finish::{checkpoint, finish};
use crate::jobs::reshape::{backup, start, ReshapeEnd, ReshapeOptions};
use crate::locks::lock;
use raidkit_layout::reshape::{Direction, Reshape, Step};
use raidkit_layout::SECTOR;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A batch of moves: array sectors `[lo, hi)`, and the progress after it.
struct Batch {
    lo: u64,
    hi: u64,
    progress: u64,
}

/// Moves from `progress` while the rule allows them without a checkpoint or a backup, up
/// to `budget` sectors (at least one step): the batch, or the step that is not a move.
fn plan_batch(
    plan: &Reshape,
    progress: u64,
    recorded: u64,
    backup: Option<(u64, u64)>,
    budget: u64,
) -> Result<std::result::Result<Batch, Step>> {
    let mut b: Option<Batch> = None;
    let mut p = progress;
    loop {
        let step = plan
            .next_step(p, recorded, backup)
            .map_err(|e| EngineError::Invalid(format!("the reshape cannot go on: {e}")))?;
        let Step::Move { from, to } = step else {
            return Ok(b.ok_or(step));
        };
        p = match plan.direction() {
            Direction::Forwards => to,
            Direction::Backwards => from,
        };
        let cur = b.get_or_insert(Batch {
            lo: from,
            hi: to,
            progress: p,
        });
        cur.lo = cur.lo.min(from);
        cur.hi = cur.hi.max(to);
        cur.progress = p;
        if cur.hi - cur.lo >= budget {
            return Ok(Ok(b.unwrap_or(Batch {
                lo: from,
                hi: to,
                progress: p,
            })));
        }
    }
}

/// Is `p` a position to rest at: no old-geometry stripe is cut by it (a write there would
/// wait for the mover), or nothing old is left past it?
fn quiet(plan: &Reshape, p: u64) -> bool {
    let old = plan.old();
    if p == plan.end_position() || p >= old.array_sectors() {
        return true;
    }
    match old.full_stripe_sectors() {
        Some(w) if old.level.has_parity() && w > 0 => p.is_multiple_of(w),
        _ => true,
    }
}

/// Run the reshape of `arr` until it is finished or stopped. `progress(done, total)` in
/// array sectors.
pub(crate) fn run(
    arr: &Array,
    opts: &ReshapeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ReshapeEnd> {
    let r = arr
        .route()
        .ok_or_else(|| EngineError::Invalid("no reshape is in progress on this array".into()))?;
    if !arr.writable {
        return Err(EngineError::Invalid(
            "the array was assembled read-only; reassemble it for writing to continue the reshape"
                .into(),
        ));
    }
    if let Some(f) = &opts.backup_file {
        *lock(&r.backup_file) = Some(f.clone());
    }
    r.window.claim_mover();
    let res = Mover::new(arr, &r, opts).run(progress);
    r.window.release_mover();
    arr.sync_failures(&r);
    res
}

/// Move a reshape that nothing is moving on to the next position where no client write
/// waits, and record it there: what a client write does when it lands in the window of
/// an array assembled mid-reshape before anything continues it (a position that cuts an
/// old stripe, as the kernel and a crash leave them, or data moved past the record). md's
/// reshape thread would move that window; the write waits while it moves, as in md.
/// Returns at once if another mover has the window (the caller waits for it instead).
pub(crate) fn settle(arr: &Array, r: &Route) -> Result<()> {
    if !arr.writable {
        return Err(EngineError::Invalid(
            "the array was assembled read-only".into(),
        ));
    }
    if !r.window.try_claim_mover() {
        return Ok(());
    }
    let opts = ReshapeOptions {
        stop: Some(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            true,
        ))),
        ..Default::default()
    };
    let mut m = Mover::new(arr, r, &opts);
    m.settling = true;
    let res = m.run(&mut |_, _| {});
    r.window.release_mover();
    arr.sync_failures(r);
    res.map(|_| ())
}

struct Mover<'a> {
    arr: &'a Array,
    r: &'a Route,
    opts: &'a ReshapeOptions,
    buf: Vec<u8>,
    budget: u64,
    last_checkpoint: Instant,
    /// Throttle: sectors moved since `since`.
    moved: u64,
    since: Instant,
    /// Settling for a client write: rest only where no write waits (no retained backup
    /// either).
    settling: bool,
}

impl<'a> Mover<'a> {
    fn new(arr: &'a Array, r: &'a Route, opts: &'a ReshapeOptions) -> Mover<'a> {
        let step = r.plan.step_sectors().max(1);
        let budget = opts
            .buffer_sectors
            .unwrap_or_else(|| start::buffer_sectors(&r.plan))
            .max(step);
        Mover {
            arr,
            r,
            opts,
            buf: Vec::new(),
            budget,
            last_checkpoint: Instant::now(),
            moved: 0,
            since: Instant::now(),
            settling: false,
        }
    }

    fn flag(f: &Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) -> bool {
        f.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }

    fn run(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<ReshapeEnd> {
        let plan = &self.r.plan;
        let (start, end) = self.r.span();
        let total = end.abs_diff(start);
        self.refresh_unrecorded()?;
        loop {
            let (p, recorded) = self.r.window.positions();
            progress(p.abs_diff(start), total);
            let reached = self.opts.stop_at.is_some_and(|t| match plan.direction() {
                Direction::Forwards => p >= t,
                Direction::Backwards => p <= t,
            });
            let stop = Self::flag(&self.opts.stop) || reached;
            let pause = Self::flag(&self.opts.pause);
            let held = self.settling && self.r.window.with(|st| st.backup.is_some());
            if (stop || pause) && quiet(plan, p) && !held {
                if recorded != p {
                    self.checkpoint(p)?;
                }
                if stop {
                    return Ok(ReshapeEnd::Stopped { position: p });
                }
                std::thread::sleep(Duration::from_millis(50));
                self.moved = 0;
                self.since = Instant::now();
                continue;
            }
            let due = self.last_checkpoint.elapsed() >= self.opts.checkpoint_every;
            if recorded != p && (due || self.r.window.waiting() > 0) {
                self.checkpoint(p)?;
                continue;
            }
            let backup = self.r.window.with(|st| st.backup);
            let mut budget = if stop || pause { 1 } else { self.budget };
            if let Some(t) = self.opts.stop_at {
                budget = budget.min(t.abs_diff(p).max(1));
            }
            if let Some(l) = self.limit_sectors() {
                budget = budget.min(l);
            }
            if self.behind() {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            match plan_batch(plan, p, recorded, backup, budget)? {
                Ok(b) => {
                    self.move_batch(&b, p)?;
                    self.throttle(b.hi - b.lo);
                }
                Err(Step::Checkpoint { position }) => self.checkpoint(position)?,
                Err(Step::Backup { from, to }) => self.back_up(from, to)?,
                Err(Step::Done) => {
                    finish(self.arr, self.r)?;
                    progress(total, total);
                    return Ok(ReshapeEnd::Finished);
                }
                Err(Step::Move { .. }) => unreachable!("plan_batch returns moves as a batch"),
            }
        }
    }

    /// A checkpoint; a retained backup the position has passed is retired.
    fn checkpoint(&mut self, position: u64) -> Result<()> {
        checkpoint(self.arr, self.r, position)?;
        self.last_checkpoint = Instant::now();
        let fwd = self.r.plan.direction() == Direction::Forwards;
        self.r.window.with(|st| {
            let passed = st
                .backup
                .is_some_and(|(a, b)| if fwd { position >= b } else { position <= a });
            if passed {
                st.backup = None;
            }
        });
        Ok(())
    }

    /// Read array sectors `[lo, hi)` through the old geometry (zeros past its end).
    fn read_old(&mut self, lo: u64, hi: u64) -> Result<()> {
        let n = (hi - lo) as usize * SECTOR as usize;
        self.buf.clear();
        self.buf.resize(n, 0);
        let old_end = self.r.plan.old().array_sectors();
        let read_end = hi.min(old_end);
        if lo < read_end {
            let len = ((read_end - lo) * SECTOR) as usize;
            self.r.old.read_sectors(lo, &mut self.buf[..len])?;
        }
        Ok(())
    }

    /// Move one batch: hold IO off it, read it through the old geometry, write it through
    /// the new one, then advance the progress (unchanged if anything failed).
    fn move_batch(&mut self, b: &Batch, before: u64) -> Result<()> {
        self.r.window.begin_move(b.lo, b.hi);
        let res = self.read_old(b.lo, b.hi).and_then(|()| {
            let _gate = self.arr.write_gate();
            self.arr.write_serial(b.lo, &self.buf)
        });
        self.r
            .window
            .end_move(if res.is_ok() { b.progress } else { before });
        self.arr.sync_failures(self.r);
        res
    }

    /// md's critical section: save `[from, to)`'s old data in the backup file first.
    fn back_up(&mut self, from: u64, to: u64) -> Result<()> {
        let path = lock(&self.r.backup_file).clone().ok_or_else(|| {
            EngineError::Invalid(format!(
                "the reshape moves data in place and array sectors {from}..{to} (the critical section) must be saved first: give a backup file"
            ))
        })?;
        self.r.window.begin_move(from, to);
        let res = self
            .read_old(from, to)
            .and_then(|()| backup::save(&path, &self.arr.uuid, from, &self.buf));
        self.r.window.with(|st| {
            st.moving = None;
            if res.is_ok() {
                st.backup = Some((from, to));
            }
        });
        res
    }

    /// After a restart whose progress was found past the record (md moved more than it
    /// recorded): rewrite the new stripes in between from their new copies (their
    /// parity may not have been written), then record the progress.
    fn refresh_unrecorded(&mut self) -> Result<()> {
        let (p, recorded) = self.r.window.positions();
        if p == recorded {
            return Ok(());
        }
        let (lo, hi) = (p.min(recorded), p.max(recorded));
        let n = ((hi - lo) * SECTOR) as usize;
        self.buf.clear();
        self.buf.resize(n, 0);
        self.arr.read_sectors_plain(lo, &mut self.buf)?;
        {
            let _gate = self.arr.write_gate();
            self.arr.write_serial(lo, &self.buf)?;
        }
        self.checkpoint(p)
    }

    fn limit(&self) -> u64 {
        self.opts
            .max_bytes_per_sec
            .as_ref()
            .map_or(0, |l| l.load(Ordering::Relaxed))
    }

    /// With a speed limit, batches of about half a second's worth (whole steps).
    fn limit_sectors(&self) -> Option<u64> {
        let l = self.limit();
        (l > 0).then(|| (l / 2 / SECTOR).max(1))
    }

    /// Count moved sectors for the speed limit.
    fn throttle(&mut self, sectors: u64) {
        self.moved += sectors;
        if self.limit() == 0 {
            self.moved = 0;
            self.since = Instant::now();
        }
    }

    /// Ahead of the speed limit (wait before moving more)?
    fn behind(&mut self) -> bool {
        let limit = self.limit();
        if limit == 0 {
            return false;
        }
        let should = Duration::from_secs_f64((self.moved * SECTOR) as f64 / limit as f64);
        let el = self.since.elapsed();
        if el > Duration::from_secs(10) && should < el {
            // Restart the accounting now and then so a raised limit takes effect.
            self.moved = 0;
            self.since = Instant::now();
        }
        should > el
    }
}
