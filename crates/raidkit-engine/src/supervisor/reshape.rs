//! A reshape as a supervisor job: started on a served array (`grow NAME ...`), continued
//! when the array is found mid-reshape, paused and resumed, its speed limit changed while
//! it runs, and reverted at any point. Clients keep reading and writing throughout (the
//! array routes their IO by position, [`crate::array::reshape`]); when a stage switches
//! the array to its next geometry, frontends see the new size on their next connection.

use super::{lock, Event, JobResult, JobStatus, Result, Supervisor};
use crate::array::reshape::ReshapeStatus;
use crate::dev::{BlockDev, FileDev};
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
                Ok(Arc::new(FileDev::open(p, true).map_err(|e| {
                    EngineError::io(&p.display().to_string(), "opening the new member", e)
                })?))
            })
            .collect()
    }

    /// Start reshaping as `req` asks, in the background (refused while another job runs).
    pub fn start_reshape(self: &Arc<Self>, req: ReshapeRequest) -> Result<()> {
        let mut job = lock(&self.job);
        self.busy(&job)?;
        // Refusals (degraded, too small, room) come back to the caller, not as a failed
        // job: the plan runs every check the start does.
        self.cur().plan_reshape(&req)?;
        self.reshape_paused.store(false, Ordering::Relaxed);
        let me = self.clone();
        *job = Some(self.spawn_job("reshape", move |stop| {
            let opts = me.reshape_options(&stop, req.backup_file.clone());
            let arr = me.array.clone();
            let r = rs::reshape(&arr, &req, &opts, &mut |p| me.progress(p.done, p.total))
                .map(|(_, end)| end);
            me.reshape_done("reshape", r);
        })?);
        Ok(())
    }

    /// Continue the reshape found on the members in the background (the array was
    /// assembled mid-reshape, or a reshape job was stopped).
    pub fn continue_reshape(self: &Arc<Self>) -> Result<()> {
        let mut job = lock(&self.job);
        self.busy(&job)?;
        if self.cur().reshape_status().is_none() {
            return Err(
                EngineError::Invalid("no reshape is in progress on this array".into()).into(),
            );
        }
        let me = self.clone();
        *job = Some(self.spawn_job("reshape", move |stop| {
            let opts = me.reshape_options(&stop, None);
            let arr = me.array.clone();
            let r = rs::continue_reshape(&arr, &opts, &mut |p| me.progress(p.done, p.total));
            me.reshape_done("reshape-continue", r);
        })?);
        Ok(())
    }

    /// Turn the reshape in progress around (whatever job moves it is stopped at a safe
    /// position first) and move the data back to the old shape, in the background.
    pub fn revert_reshape(self: &Arc<Self>) -> Result<()> {
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
        self.stop_job();
        let mut job = lock(&self.job);
        self.busy(&job)?;
        self.reshape_paused.store(false, Ordering::Relaxed);
        // The turn itself may move data on to a position both shapes can record.
        let stop0 = Arc::new(AtomicBool::new(false));
        let back = rs::revert(&self.array, &self.reshape_options(&stop0, None))?;
        drop(back);
        let me = self.clone();
        *job = Some(self.spawn_job("reshape", move |stop| {
            let opts = me.reshape_options(&stop, None);
            let arr = me.array.clone();
            let r = rs::continue_reshape(&arr, &opts, &mut |p| me.progress(p.done, p.total));
            me.reshape_done("reshape-revert", r);
        })?);
        Ok(())
    }

    /// Pause (true) or resume (false) the reshape; it rests at the next safe position,
    /// recorded on the members.
    pub fn pause_reshape(&self, paused: bool) -> Result<()> {
        if self.cur().reshape_status().is_none() {
            return Err(
                EngineError::Invalid("no reshape is in progress on this array".into()).into(),
            );
        }
        self.reshape_paused.store(paused, Ordering::Relaxed);
        Ok(())
    }

    /// Where the reshape stands, if one is in progress.
    pub fn reshape_progress(&self) -> Option<ReshapeProgress> {
        let status = self.cur().reshape_status()?;
        let running = lock(&self.job)
            .as_ref()
            .is_some_and(|j| j.running() && j.status.action == "reshape");
        Some(ReshapeProgress {
            status,
            paused: self.reshape_paused.load(Ordering::Relaxed),
            running,
        })
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

    fn reshape_done(&self, action: &str, r: crate::error::Result<ReshapeEnd>) {
        let v = match r {
            Ok(end) => {
                let _ = self.cur().mark_clean();
                JobResult::Reshape(ReshapeResult {
                    action: action.into(),
                    end: match end {
                        ReshapeEnd::Finished => "finished".into(),
                        ReshapeEnd::Stopped { .. } => "stopped".into(),
                    },
                    array_bytes: self.cur().size_bytes(),
                })
            }
            Err(e) => JobResult::failed(action, e),
        };
        self.emit(Event::RebuildFinished(v.clone()));
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
        let _ = self.continue_reshape();
        true
    }
}
