//! The copy loop of rebuild (md's recovery) and hot replace: walk a member's data sectors
//! from a checkpoint, a stripe or a run of stripes (parity levels) or up to 1 MiB
//! (mirrors) at a time,
//! stopping when asked, throttled, with progress and periodic checkpoints. What one step
//! copies, and what a checkpoint writes, is the caller's.

use crate::array::member::Member;
use crate::error::{EngineError, Result};
use crate::jobs::pipeline;
use crate::jobs::rebuild::RebuildOptions;
use raidkit_layout::{Geometry, SECTOR};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Data sectors of `role` a rebuild or replace copies: whole stripes (parity levels),
/// the sectors the layout uses otherwise.
pub(crate) fn copy_sectors(geo: &Geometry, role: usize) -> u64 {
    if geo.level.has_parity() {
        geo.stripes() * geo.chunk_sectors
    } else {
        geo.used_dev_sectors(role)
    }
}

/// Sectors a mirrored step copies at most (1 MiB).
pub(crate) const MIRROR_STEP_SECTORS: u64 = 2048;

/// How a copy loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyEnd {
    /// Every range was copied.
    Done,
    /// Stopped on request before data sector `at` (a checkpoint may resume there).
    Stopped {
        /// The first data sector not copied.
        at: u64,
    },
}

/// What the loop needs besides its steps.
pub(crate) struct CopyLoop<'a> {
    /// Stop flag, throttle and checkpoint interval.
    pub opts: &'a RebuildOptions,
    /// The member written (the rebuild target, or the replacement).
    pub target: &'a Member,
    /// What the target is, for the error when it fails ("rebuild target", "replacement").
    pub target_is: &'static str,
    /// Data-sector ranges `[start, end)` to copy, in order.
    pub ranges: &'a [(u64, u64)],
    /// Checkpoint periodically (not for a bitmap-guided re-add, which stays unreadable
    /// until every range is done).
    pub checkpoints: bool,
}

impl CopyLoop<'_> {
    /// Sectors of all ranges.
    pub(crate) fn total(&self) -> u64 {
        self.ranges.iter().map(|(a, b)| b - a).sum()
    }

    /// Copy every range, with up to `depth` steps in flight (see [`pipeline`]). A step
    /// `(x, n)` copies `n` data sectors from `x`: up to `step_sectors`, ending at a
    /// multiple of `unit` sectors, cut at its range's end rounded up to a multiple of
    /// `unit` (parity levels: whole stripes, `unit` the chunk; mirrors: 1). `lock(x, n)` takes what a step holds (a stripe lock, a range
    /// hold), on the job's thread and in ascending order; `step(x, n)` copies on a worker;
    /// `copied(x + n, out)` takes each step's outcome in order, once every sector below
    /// `x + n` is copied, while its lock is still held (the recovery point moves there).
    /// A stop asked for ends the loop before the next step is handed out (the steps in
    /// flight finish: [`CopyEnd::Stopped`] says where); `checkpoint(x)` records that every
    /// sector below `x` is copied, at most every `checkpoint_every`; the speed limit holds
    /// the next step back.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_pipelined<L, T: Send>(
        &self,
        step_sectors: u64,
        unit: u64,
        depth: usize,
        progress: &mut dyn FnMut(u64, u64),
        lock: impl FnMut(u64, u64) -> L,
        step: impl Fn((u64, u64)) -> T + Sync,
        copied: impl FnMut(u64, T) -> Result<()>,
        checkpoint: impl FnMut(u64) -> Result<()>,
    ) -> Result<CopyEnd> {
        let mut steps = StripeSteps {
            copy: self,
            step_sectors,
            unit: unit.max(1),
            range: 0,
            x: self.ranges.first().map_or(0, |r| r.0),
            done: 0,
            handed: 0,
            total: self.total(),
            started: Instant::now(),
            last_checkpoint: Instant::now(),
            stopped: None,
            progress,
            lock,
            copied,
            checkpoint,
            out: std::marker::PhantomData,
        };
        pipeline::run(depth, &mut steps, step)?;
        Ok(match steps.stopped {
            Some(at) => CopyEnd::Stopped { at },
            None => CopyEnd::Done,
        })
    }

    /// Sleep so that `done` sectors since `started` stay within the speed limit.
    fn throttle(&self, done: u64, started: Instant) {
        let limit = self
            .opts
            .max_bytes_per_sec
            .as_ref()
            .map_or(0, |l| l.load(Ordering::Relaxed));
        if limit > 0 {
            let should = Duration::from_secs_f64((done * SECTOR) as f64 / limit as f64);
            let elapsed = started.elapsed();
            if should > elapsed {
                std::thread::sleep(should - elapsed);
            }
        }
    }
}

/// The coordinator's state of [`CopyLoop::run_pipelined`].
struct StripeSteps<'a, 'p, T, LF, CF, KF> {
    copy: &'a CopyLoop<'a>,
    /// Sectors per step at most, and what a step's end is a multiple of.
    step_sectors: u64,
    unit: u64,
    /// The range being handed out, and the next step's data sector in it.
    range: usize,
    x: u64,
    done: u64,
    /// Sectors handed out (the speed limit's count).
    handed: u64,
    total: u64,
    started: Instant,
    last_checkpoint: Instant,
    stopped: Option<u64>,
    progress: &'p mut dyn FnMut(u64, u64),
    lock: LF,
    copied: CF,
    checkpoint: KF,
    /// The steps' outcome type (taken by `copied`).
    out: std::marker::PhantomData<fn(T)>,
}

impl<L, T, LF, CF, KF> pipeline::Steps for StripeSteps<'_, '_, T, LF, CF, KF>
where
    T: Send,
    LF: FnMut(u64, u64) -> L,
    CF: FnMut(u64, T) -> Result<()>,
    KF: FnMut(u64) -> Result<()>,
{
    type Key = (u64, u64);
    type Held = L;
    type Out = T;

    fn next(&mut self) -> Result<Option<((u64, u64), L)>> {
        while self.x >= self.copy.ranges.get(self.range).map_or(u64::MAX, |r| r.1) {
            self.range += 1;
            match self.copy.ranges.get(self.range) {
                Some(r) => self.x = r.0,
                None => return Ok(None),
            }
        }
        let Some(&(_, range_end)) = self.copy.ranges.get(self.range) else {
            return Ok(None);
        };
        let x = self.x;
        let u = self.unit;
        let n = (x / u * u + self.step_sectors).min(range_end.div_ceil(u) * u) - x;
        let c = self.copy;
        if c.opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            self.stopped = Some(x);
            return Ok(None);
        }
        if c.target.is_failed() {
            return Err(EngineError::CopyTargetFailed {
                what: c.target_is,
                device: c.target.dev.name().to_string(),
            });
        }
        // Throttled by what is handed out, not what is done: the steps handed out at once
        // (two per worker) would otherwise all start before the limit applies.
        c.throttle(self.handed, self.started);
        self.handed += n;
        self.x += n;
        Ok(Some(((x, n), (self.lock)(x, n))))
    }

    fn commit(&mut self, (x, n): (u64, u64), out: T, held: L) -> Result<()> {
        let end = x + n;
        (self.copied)(end, out)?;
        drop(held);
        self.done += n;
        (self.progress)(self.done, self.total);
        if self.copy.checkpoints
            && self.last_checkpoint.elapsed()
                >= self
                    .copy
                    .opts
                    .checkpoint_every
                    .unwrap_or(Duration::from_secs(1))
        {
            (self.checkpoint)(end)?;
            self.last_checkpoint = Instant::now();
        }
        Ok(())
    }
}
