//! A reshape as a supervisor job: started on a served array (`grow NAME ...`), continued
//! when the array is found mid-reshape, paused and resumed, its speed limit changed while
//! it runs, and reverted at any point. Clients keep reading and writing throughout (the
//! array routes their IO by position, [`crate::array::reshape`]); when a stage switches
//! the array to its next geometry, frontends see the new size on their next connection.

use super::{lock, Event, JobResult, JobStatus, Result, Supervisor};
use crate::array::reshape::{ReshapeStatus, ShapeInfo};
use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::EngineError;
use crate::jobs::reshape::{self as rs, ReshapeEnd, ReshapeOptions, ReshapePlan, ReshapeRequest};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Where a served array's reshape stands, for `status`.
#[derive(Clone, Debug, Serialize)]
pub struct ReshapeProgress {
    /// The engine's view: shapes, position, direction, room.
    #[serde(flatten)]
    pub status: ReshapeStatus,
    /// Paused by the administrator (resume to go on).
    pub paused: bool,
    /// No job moves the data now (stopped, failed, or waiting to be continued).
    pub running: bool,
}

/// How a reshape job ended, for the `reshape_finished` and `reshape_reverted` events.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReshapeReport {
    /// `reshape`, `reshape-continue` or `reshape-revert`.
    pub action: String,
    /// `finished`, `stopped` (at a safe position, recorded) or `failed`.
    pub end: String,
    /// Why it failed.
    pub error: Option<String>,
    /// The shape the job started from.
    pub from: ShapeInfo,
    /// The shape it reshapes to (the array has it if `end` is `finished`).
    pub to: ShapeInfo,
    /// Array bytes this job moved to their new place.
    pub bytes_moved: u64,
    /// Array bytes now.
    pub array_bytes: u64,
}

/// Bytes a reshape job moved: what its restripe stages advanced.
#[derive(Default)]
struct Moved {
    stage: usize,
    last: Option<u64>,
    bytes: u64,
}

impl Moved {
    fn add(&mut self, p: &rs::Progress) {
        if p.what != "restripe" {
            return;
        }
        if p.stage != self.stage {
            (self.stage, self.last) = (p.stage, None);
        }
        if let Some(l) = self.last {
            self.bytes += p.done.saturating_sub(l) * 512;
        }
        self.last = Some(p.done);
    }
}

/// What a reshape job ended with.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReshapeResult {
    /// `reshape`, `reshape-continue` or `reshape-revert`.
    pub action: String,
    /// `finished` or `stopped`.
    pub end: String,
    /// Array bytes afterwards.
    pub array_bytes: u64,
}

impl Supervisor {
    /// The array that serves now (after a reshape switched geometry, the newest one).
    pub(crate) fn cur(&self) -> Arc<crate::array::Array> {
        self.array.current()
    }

    /// The plan of a reshape of this array (nothing is changed).
    pub fn plan_reshape(&self, req: &ReshapeRequest) -> Result<ReshapePlan> {
        Ok(self.cur().plan_reshape(req)?)
    }

    /// Open the devices a reshape request adds.
    pub fn open_new_devices(paths: &[PathBuf]) -> Result<Vec<Arc<dyn BlockDev>>> {
        paths
            .iter()
            .map(|p| -> Result<Arc<dyn BlockDev>> {
                crate::dev::open_member(p, true).map_err(|e| {
                    EngineError::io(&p.display().to_string(), "opening the new member", e).into()
                })
            })
            .collect()
    }

    /// Start reshaping as `req` asks, in the background (refused while another job runs).
    pub fn start_reshape(self: &Arc<Self>, req: ReshapeRequest) -> Result<()> {
        let mut job = lock(&self.job);
        self.busy(&job)?;
        // Refusals (degraded, too small, room) come back to the caller, not as a failed
        // job: the plan runs every check the start does.
        let plan = self.cur().plan_reshape(&req)?;
        self.reshape_paused.store(false, Ordering::Relaxed);
        let shapes = (plan.from, plan.to);
        *job = Some(
            self.reshape_job("reshape", shapes, move |arr, opts, progress| {
                let opts = ReshapeOptions {
                    backup_file: req.backup_file.clone(),
                    ..opts.clone()
                };
                rs::reshape(arr, &req, &opts, progress).map(|(_, end)| end)
            })?,
        );
        Ok(())
    }

    /// Continue the reshape found on the members in the background (the array was
    /// assembled mid-reshape, or a reshape job was stopped).
    pub fn continue_reshape(self: &Arc<Self>) -> Result<()> {
        let mut job = lock(&self.job);
        self.busy(&job)?;
        let Some(st) = self.cur().reshape_status() else {
            return Err(
                EngineError::Invalid("no reshape is in progress on this array".into()).into(),
            );
        };
        *job =
            Some(self.reshape_job("reshape-continue", (st.old, st.new), rs::continue_reshape)?);
        Ok(())
    }

    /// Turn the reshape in progress around (whatever job moves it is stopped at a safe
    /// position first) and move the data back to the old shape, in the background.
    pub fn revert_reshape(self: &Arc<Self>) -> Result<()> {
        // A reshape job just started may not have written its first superblocks yet.
        let t0 = Instant::now();
        while self.cur().reshape_status().is_none()
            && self.reshape_job_running()
            && t0.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if self.cur().reshape_status().is_none() {
            return Err(
                EngineError::Invalid("no reshape is in progress on this array".into()).into(),
            );
        }
        let running = lock(&self.job)
            .as_ref()
            .is_some_and(|j| j.running() && j.status.action != "reshape");
        if running {
            self.busy(&lock(&self.job))?;
        }
        // Refused turns leave the reshape running.
        rs::can_revert(&self.array)?;
        self.stop_job();
        let mut job = lock(&self.job);
        self.busy(&job)?;
        self.reshape_paused.store(false, Ordering::Relaxed);
        // The turn itself may move data on to a position both shapes can record.
        let stop0 = Arc::new(AtomicBool::new(false));
        let mut seen = self.cur();
        rs::revert(&self.array, &self.reshape_options(&stop0, None))?;
        self.follow(&mut seen);
        let Some(st) = self.cur().reshape_status() else {
            return Err(EngineError::Invalid("the reverted reshape is gone".into()).into());
        };
        *job = Some(self.reshape_job("reshape-revert", (st.old, st.new), rs::continue_reshape)?);
        Ok(())
    }

    /// A reshape job: announce it (`reshape_started`), run `body` with the job's stop,
    /// pause and speed limit, follow the array through the stages' switches, count the
    /// bytes moved, and report the end (`reshape_finished` / `reshape_reverted`).
    fn reshape_job(
        self: &Arc<Self>,
        action: &'static str,
        (from, to): (ShapeInfo, ShapeInfo),
        body: impl FnOnce(
                &Arc<Array>,
                &ReshapeOptions,
                &mut dyn FnMut(&rs::Progress),
            ) -> crate::error::Result<ReshapeEnd>
            + Send
            + 'static,
    ) -> Result<super::Job> {
        self.emit(Event::ReshapeStarted {
            action: action.into(),
            from: from.clone(),
            to: to.clone(),
        });
        let me = self.clone();
        self.spawn_job("reshape", move |stop| {
            let opts = me.reshape_options(&stop, None);
            let arr = me.array.clone();
            let mut seen = me.cur();
            let mut count = Moved::default();
            let mut base: Option<(u64, Instant)> = None;
            let r = body(&arr, &opts, &mut |p| {
                me.follow(&mut seen);
                count.add(p);
                me.reshape_progress_at(p.done, p.total, &mut base);
            });
            me.follow(&mut seen);
            me.reshape_done(action, r, from, to, count.bytes);
        })
    }

    /// The job's progress, its speed counted from where this job started (a reshape
    /// continued half-way, or turned back, does not count what was moved before it).
    fn reshape_progress_at(&self, done: u64, total: u64, base: &mut Option<(u64, Instant)>) {
        let (b, since) = match *base {
            Some((b, t)) if b <= done => (b, t),
            _ => *base.insert((done, Instant::now())),
        };
        if let Some(j) = lock(&self.job).as_mut() {
            let el = since.elapsed().as_secs_f64().max(1e-3);
            let speed = (((done - b) * 512) as f64 / el) as u64;
            j.status.done_sectors = done;
            j.status.total_sectors = total;
            j.status.speed_bytes_per_sec = speed;
            j.status.speed_limit = self.speed_limit.load(Ordering::Relaxed);
            j.status.eta_seconds = (speed > 0).then(|| (total.saturating_sub(done) * 512) / speed);
        }
    }

    /// Pause (true) or resume (false) the reshape; it rests at the next safe position,
    /// recorded on the members.
    pub fn pause_reshape(&self, paused: bool) -> Result<()> {
        if self.cur().reshape_status().is_none() && !self.reshape_job_running() {
            return Err(
                EngineError::Invalid("no reshape is in progress on this array".into()).into(),
            );
        }
        self.reshape_paused.store(paused, Ordering::Relaxed);
        Ok(())
    }

    /// A reshape job is running (it may still be starting).
    fn reshape_job_running(&self) -> bool {
        lock(&self.job)
            .as_ref()
            .is_some_and(|j| j.running() && j.status.action == "reshape")
    }

    /// Where the reshape stands, if one is in progress.
    pub fn reshape_progress(&self) -> Option<ReshapeProgress> {
        let status = self.cur().reshape_status()?;
        let running = self.reshape_job_running();
        Some(ReshapeProgress {
            status,
            paused: self.reshape_paused.load(Ordering::Relaxed),
            running,
        })
    }

    /// After a reshape stage switched the array to its next geometry: relay the new
    /// array's events too (member failures during and after the reshape).
    fn follow(self: &Arc<Self>, seen: &mut Arc<crate::array::Array>) {
        let now = self.cur();
        if !Arc::ptr_eq(&now, seen) {
            self.watch_events(&now);
            *seen = now;
        }
    }

    fn reshape_options(&self, stop: &Arc<AtomicBool>, backup: Option<PathBuf>) -> ReshapeOptions {
        ReshapeOptions {
            stop: Some(stop.clone()),
            pause: Some(self.reshape_paused.clone()),
            max_bytes_per_sec: Some(self.speed_limit.clone()),
            backup_file: backup,
            ..Default::default()
        }
    }

    fn reshape_done(
        &self,
        action: &str,
        r: crate::error::Result<ReshapeEnd>,
        from: ShapeInfo,
        to: ShapeInfo,
        bytes_moved: u64,
    ) {
        let (v, end, error) = match r {
            Ok(end) => {
                let _ = self.cur().mark_clean();
                let end = match end {
                    ReshapeEnd::Finished => "finished",
                    ReshapeEnd::Stopped { .. } => "stopped",
                };
                let v = JobResult::Reshape(ReshapeResult {
                    action: action.into(),
                    end: end.into(),
                    array_bytes: self.cur().size_bytes(),
                });
                (v, end, None)
            }
            Err(e) => (JobResult::failed(action, &e), "failed", Some(e.to_string())),
        };
        let report = ReshapeReport {
            action: action.into(),
            end: end.into(),
            error,
            from,
            to,
            bytes_moved,
            array_bytes: self.cur().size_bytes(),
        };
        self.emit(if action == "reshape-revert" {
            Event::ReshapeReverted(report)
        } else {
            Event::ReshapeFinished(report)
        });
        *lock(&self.last_result) = Some(v);
        if let Some(j) = lock(&self.job).as_mut() {
            j.status = JobStatus {
                action: "idle".into(),
                ..Default::default()
            };
            j.started = Instant::now();
        }
    }

    /// Start continuing a reshape found at assembly, if the array is writable.
    pub(crate) fn continue_found_reshape(self: &Arc<Self>) -> bool {
        let a = self.cur();
        if !a.is_writable() || a.reshape_status().is_none() {
            return false;
        }
        if a.needs_resync() {
            self.emit(Event::UncleanStopDetected {
                note: "redundancy may be inconsistent; the reshape continues (it writes every stripe it moves with parity from the data), then the whole array is resynced".into(),
            });
        }
        let _ = self.continue_reshape();
        true
    }
}
