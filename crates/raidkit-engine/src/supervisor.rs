//! The supervisor of a running array: the background jobs md runs in the kernel (resync
//! after an unclean stop, recovery onto spares, check/repair scrubs) with progress, speed
//! and ETA; member management (fail, remove, add, re-add); and an event stream for
//! monitors. Frontends (NBD, FUSE) own one supervisor per served array; the control socket
//! is a thin transport over these methods.

use crate::array::{lock, Array, ArrayEvent};
use crate::dev::{BlockDev, FileDev};
use crate::error::{EngineError, Result};
use crate::rebuild::{rebuild, RebuildOptions};
use crate::sync::{run_opts, SyncMode, SyncOptions};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One event for logs and monitors.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MonitorEvent {
    /// Unix time, seconds.
    pub time: u64,
    /// Array name.
    pub array: String,
    /// Event kind: `member_failed`, `member_removed`, `spare_added`, `degraded`,
    /// `rebuild_started`, `rebuild_progress`, `rebuild_finished`, `spare_activated`,
    /// `read_error_corrected`, `mismatches_found`, `sync_started`, `sync_finished`,
    /// `unclean_stop_detected`, `bad_block_recorded`, `bad_block_log_created`,
    /// `bad_block_not_persisted`, `bad_block_log_removed`, `slow_member`, `bitmap_added`,
    /// `bitmap_removed`, `replace_started`, `replace_finished`, `test`.
    pub kind: String,
    /// Details (member, role, ranges, progress...).
    pub detail: Value,
}

/// State of the current background job.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobStatus {
    /// `resync`, `recovery`, `check`, `repair`, or `idle`.
    pub action: String,
    /// Sectors done / total in the job's address space.
    pub done_sectors: u64,
    /// Total sectors of the job.
    pub total_sectors: u64,
    /// Current speed, bytes per second.
    pub speed_bytes_per_sec: u64,
    /// Estimated seconds left.
    pub eta_seconds: Option<u64>,
    /// Speed limit in bytes per second (0 = none).
    pub speed_limit: u64,
}

struct Job {
    status: JobStatus,
    started: Instant,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

/// Supervises one running array.
pub struct Supervisor {
    name: String,
    array: Arc<Array>,
    job: Mutex<Option<Job>>,
    speed_limit: Arc<AtomicU64>,
    listeners: Mutex<Vec<Sender<MonitorEvent>>>,
    log: Mutex<Vec<MonitorEvent>>,
    last_result: Mutex<Option<Value>>,
    shutting_down: AtomicBool,
    /// Where a stopped check/repair records its resume position (see
    /// [`Supervisor::set_scrub_state_file`]).
    scrub_state: Mutex<Option<std::path::PathBuf>>,
}

/// A scrub (check/repair) that was stopped before the end of its window: where to resume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ScrubResume {
    /// Array UUID (mdadm text form): a state file of another array is refused.
    pub uuid: String,
    /// `check` or `repair`.
    pub action: String,
    /// Array byte offset to continue from.
    pub next: u64,
    /// End of the window (array bytes, exclusive).
    pub to: u64,
}

/// Options of [`Supervisor::sync_action_with`].
#[derive(Clone, Debug, Default)]
pub struct ActionOptions {
    /// Limit a check/repair to array bytes `[from, to)` (rounded out to stripe rows or
    /// 4 KiB pages).
    pub window: Option<(u64, u64)>,
    /// Continue the last stopped check/repair where it stopped.
    pub resume: bool,
}

/// True if two member names denote the same file or device (compared as given, then by
/// canonical path, so `./b` and `/srv/raid/b` match).
pub fn same_device(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Supervisor {
    /// Supervise `array` under `name` (the stable name from the superblock). Starts the
    /// event watcher and whatever job the array needs (resync after an unclean stop,
    /// recovery of a partially rebuilt member, recovery onto a spare).
    pub fn start(name: &str, array: Arc<Array>) -> Arc<Supervisor> {
        let sup = Arc::new(Supervisor {
            name: name.to_string(),
            array,
            job: Mutex::new(None),
            speed_limit: Arc::new(AtomicU64::new(0)),
            listeners: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            last_result: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            scrub_state: Mutex::new(None),
        });
        let rx = sup.array.subscribe();
        let weak = Arc::downgrade(&sup);
        std::thread::Builder::new()
            .name(format!("raidkit-events-{name}"))
            .spawn(move || {
                while let Ok(e) = rx.recv() {
                    let Some(s) = weak.upgrade() else { break };
                    s.on_array_event(e);
                }
            })
            .ok();
        if sup.array.is_writable() {
            if sup.array.needs_resync() {
                sup.emit("unclean_stop_detected", json!({"note": "redundancy may be inconsistent; resyncing (only dirty bitmap regions if there is a bitmap)"}));
                let _ = sup.sync_action("resync");
            } else if sup.array.is_degraded() {
                sup.emit(
                    "degraded",
                    json!({"missing_roles": sup.array.missing_roles()}),
                );
                let _ = sup.sync_action("recover");
            } else if !sup.array.replacement_roles().is_empty() {
                let _ = sup.start_replace_job();
            }
        } else if sup.array.is_degraded() {
            sup.emit(
                "degraded",
                json!({"missing_roles": sup.array.missing_roles()}),
            );
        }
        sup
    }

    /// The array.
    pub fn array(&self) -> &Arc<Array> {
        &self.array
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Receive every future event.
    pub fn subscribe(&self) -> Receiver<MonitorEvent> {
        let (tx, rx) = channel();
        lock(&self.listeners).push(tx);
        rx
    }

    /// Recent events (the last 1000).
    pub fn recent_events(&self) -> Vec<MonitorEvent> {
        lock(&self.log).clone()
    }

    /// Emit an event to the log, stderr and every subscriber.
    pub fn emit(&self, kind: &str, detail: Value) {
        let e = MonitorEvent {
            time: now(),
            array: self.name.clone(),
            kind: kind.to_string(),
            detail,
        };
        eprintln!(
            "raidkit[{}]: {} {}",
            e.array,
            e.kind,
            serde_json::to_string(&e.detail).unwrap_or_default()
        );
        {
            let mut log = lock(&self.log);
            log.push(e.clone());
            let n = log.len();
            if n > 1000 {
                log.drain(..n - 1000);
            }
        }
        lock(&self.listeners).retain(|tx| tx.send(e.clone()).is_ok());
    }

    fn on_array_event(self: &Arc<Self>, e: ArrayEvent) {
        match &e {
            ArrayEvent::MemberFailed { .. } => {
                self.emit(
                    "member_failed",
                    serde_json::to_value(&e).unwrap_or(Value::Null),
                );
                if self.array.is_degraded() {
                    self.emit(
                        "degraded",
                        json!({"missing_roles": self.array.missing_roles()}),
                    );
                }
                if self.array.spare_count() > 0 && !self.array.missing_roles().is_empty() {
                    let _ = self.sync_action("recover");
                }
            }
            ArrayEvent::ReadErrorCorrected { .. } => self.emit(
                "read_error_corrected",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::SpareAdded { .. } => self.emit(
                "spare_added",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::RebuildStarted { .. } => self.emit(
                "rebuild_started",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::RebuildFinished { .. } => self.emit(
                "rebuild_finished",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::ReplaceStarted { .. } => self.emit(
                "replace_started",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::ReplaceFinished { .. } => self.emit(
                "replace_finished",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::BadBlockRecorded { .. } => self.emit(
                "bad_block_recorded",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::BadBlockCleared { .. } => self.emit(
                "bad_block_cleared",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::BadBlockLogCreated { .. } => self.emit(
                "bad_block_log_created",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::BadBlockNotPersisted { .. } => self.emit(
                "bad_block_not_persisted",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::BadBlockLogRemoved { .. } => self.emit(
                "bad_block_log_removed",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
            ArrayEvent::SlowMember { .. } => self.emit(
                "slow_member",
                serde_json::to_value(&e).unwrap_or(Value::Null),
            ),
        }
    }

    /// Keep the resume position of a stopped check/repair in `path` (a small JSON file;
    /// it survives a restart of the serving process). Without it, a stopped scrub cannot
    /// be resumed.
    pub fn set_scrub_state_file(&self, path: std::path::PathBuf) {
        *lock(&self.scrub_state) = Some(path);
    }

    /// Where the last stopped check/repair would resume, if one was stopped.
    pub fn scrub_resume(&self) -> Option<ScrubResume> {
        let path = lock(&self.scrub_state).clone()?;
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn save_scrub_resume(&self, r: Option<&ScrubResume>) {
        let Some(path) = lock(&self.scrub_state).clone() else {
            return;
        };
        let res = match r {
            Some(r) => {
                let tmp = path.with_extension("tmp");
                serde_json::to_vec(r)
                    .map_err(std::io::Error::other)
                    .and_then(|b| std::fs::write(&tmp, b))
                    .and_then(|_| std::fs::rename(&tmp, &path))
            }
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => r,
            },
        };
        if let Err(e) = res {
            eprintln!(
                "raidkit[{}]: cannot record the scrub position in {}: {e}",
                self.name,
                path.display()
            );
        }
    }

    /// Start a background action: `check`, `repair`, `resync`, `recover`, or `idle` (stop
    /// the current one). Refused while another action runs (except `idle`).
    pub fn sync_action(self: &Arc<Self>, action: &str) -> Result<()> {
        self.sync_action_with(action, &ActionOptions::default())
    }

    /// [`Supervisor::sync_action`] with a window or resume for check/repair.
    pub fn sync_action_with(self: &Arc<Self>, action: &str, o: &ActionOptions) -> Result<()> {
        if (o.window.is_some() || o.resume) && action != "check" && action != "repair" {
            return Err(EngineError::Invalid(format!(
                "--from/--to/--resume apply to check and repair, not {action}"
            )));
        }
        if o.window.is_some() && o.resume {
            return Err(EngineError::Invalid(
                "give either a window (--from/--to) or --resume, not both".into(),
            ));
        }
        let size = self.array.size_bytes();
        let window: Option<(u64, u64)> = if o.resume {
            let r = self.scrub_resume().ok_or_else(|| {
                EngineError::Invalid(format!(
                    "no stopped check or repair of {} to resume; start one with `sync-action {} check`",
                    self.name, self.name
                ))
            })?;
            if r.uuid != self.array.uuid_text() {
                return Err(EngineError::Invalid(format!(
                    "the recorded scrub position belongs to array {}, not {}; start a new check",
                    r.uuid,
                    self.array.uuid_text()
                )));
            }
            Some((r.next, r.to))
        } else {
            o.window
        };
        if let Some((f, t)) = window {
            if f >= t || f >= size {
                return Err(EngineError::Invalid(format!(
                    "empty scrub window {f}..{t} (the array has {size} bytes); give --from below --to and inside the array"
                )));
            }
        }
        if action == "idle" {
            self.stop_job();
            return Ok(());
        }
        let mode = match action {
            "check" => Some(SyncMode::Check),
            "repair" => Some(SyncMode::Repair),
            "resync" => Some(SyncMode::Resync),
            "recover" | "recovery" => None,
            other => {
                return Err(EngineError::Invalid(format!(
                    "unknown sync action {other:?}: use check, repair, resync, recover or idle"
                )))
            }
        };
        if mode != Some(SyncMode::Check) && !self.array.is_writable() {
            return Err(EngineError::Invalid(format!(
                "{action} needs the array writable; it is served read-only"
            )));
        }
        let mut job = lock(&self.job);
        if let Some(j) = job.as_ref() {
            if j.handle.as_ref().is_some_and(|h| !h.is_finished()) {
                return Err(EngineError::Invalid(format!(
                    "a {} is already running; stop it with `idle` first",
                    j.status.action
                )));
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let me = self.clone();
        let stop2 = stop.clone();
        let name = if mode.is_none() { "recovery" } else { action }.to_string();
        let status = JobStatus {
            action: name.clone(),
            speed_limit: self.speed_limit.load(Ordering::Relaxed),
            ..Default::default()
        };
        let handle = std::thread::Builder::new()
            .name(format!("raidkit-{name}-{}", self.name))
            .spawn(move || me.run_job(mode, stop2, window))
            .map_err(|e| EngineError::io("thread", "starting a background job", e))?;
        *job = Some(Job {
            status,
            started: Instant::now(),
            stop,
            handle: Some(handle),
        });
        Ok(())
    }

    fn progress(&self, done: u64, total: u64) {
        if let Some(j) = lock(&self.job).as_mut() {
            let el = j.started.elapsed().as_secs_f64().max(1e-3);
            let speed = ((done.saturating_sub(0) * 512) as f64 / el) as u64;
            j.status.done_sectors = done;
            j.status.total_sectors = total;
            j.status.speed_bytes_per_sec = speed;
            j.status.speed_limit = self.speed_limit.load(Ordering::Relaxed);
            j.status.eta_seconds = (speed > 0).then(|| (total.saturating_sub(done) * 512) / speed);
        }
    }

    fn run_job(
        self: Arc<Self>,
        mode: Option<SyncMode>,
        stop: Arc<AtomicBool>,
        window: Option<(u64, u64)>,
    ) {
        let arr = self.array.clone();
        let mut last_pct = 0u64;
        let mut progress = |d: u64, t: u64| {
            self.progress(d, t);
            let pct = (d * 100).checked_div(t).unwrap_or(100);
            if pct >= last_pct + 10 {
                last_pct = pct / 10 * 10;
                self.emit(
                    "rebuild_progress",
                    json!({"action": lock(&self.job).as_ref().map(|j| j.status.action.clone()), "percent": last_pct}),
                );
            }
        };
        let result: Value = match mode {
            Some(m) => {
                let name = match m {
                    SyncMode::Check => "check",
                    SyncMode::Repair => "repair",
                    SyncMode::Resync => "resync",
                };
                self.emit("sync_started", json!({"action": name, "window": window}));
                let opts = SyncOptions {
                    full: m != SyncMode::Resync,
                    window: window.map(|(f, t)| crate::sync::window_for_bytes(&arr, f, t)),
                    stop: Some(stop.clone()),
                    max_bytes_per_sec: Some(self.speed_limit.clone()),
                };
                match run_opts(&arr, m, &opts, &mut progress) {
                    Ok(rep) => {
                        if !rep.mismatches.is_empty() && m != SyncMode::Resync {
                            self.emit(
                                "mismatches_found",
                                json!({"action": name, "ranges": rep.mismatches, "verdicts": rep.verdicts, "covered": rep.covered}),
                            );
                        }
                        if m != SyncMode::Check && rep.stopped_at.is_none() {
                            let _ = arr.mark_clean();
                        }
                        if m != SyncMode::Resync {
                            let end = window
                                .map(|w| w.1.min(arr.size_bytes()))
                                .unwrap_or(arr.size_bytes());
                            let resume = rep.stopped_at.map(|_| ScrubResume {
                                uuid: arr.uuid_text(),
                                action: name.to_string(),
                                next: rep.covered.1,
                                to: end,
                            });
                            self.save_scrub_resume(resume.as_ref());
                        }
                        let v = json!({"action": name, "mismatch_ranges": rep.mismatches, "verdicts": rep.verdicts,
                            "stopped_at": rep.stopped_at, "sectors_done": rep.sectors_done,
                            "covered": rep.covered,
                            "resume_from": rep.stopped_at.map(|_| rep.covered.1)});
                        self.emit("sync_finished", v.clone());
                        v
                    }
                    Err(e) => {
                        let v = json!({"action": name, "error": e.to_string()});
                        self.emit("sync_finished", v.clone());
                        v
                    }
                }
            }
            None => {
                let opts = RebuildOptions {
                    stop: Some(stop.clone()),
                    max_bytes_per_sec: Some(self.speed_limit.clone()),
                    ..Default::default()
                };
                let had_spares = arr.spare_count();
                match rebuild(&arr, &opts, &mut progress) {
                    Ok(rep) => {
                        if had_spares > arr.spare_count() {
                            self.emit("spare_activated", json!({"roles": rep.roles}));
                        }
                        let _ = arr.mark_clean();
                        json!({"action": "recovery", "roles": rep.roles, "lost": rep.lost})
                    }
                    Err(e) => {
                        let v = json!({"action": "recovery", "error": e.to_string()});
                        self.emit("rebuild_finished", v.clone());
                        v
                    }
                }
            }
        };
        *lock(&self.last_result) = Some(result);
        // A replacement interrupted by a stop continues once redundancy is back.
        if !stop.load(Ordering::Relaxed)
            && !arr.replacement_roles().is_empty()
            && !arr.is_degraded()
            && !arr.needs_resync()
        {
            if let Some(j) = lock(&self.job).as_mut() {
                j.status = JobStatus {
                    action: "replace".into(),
                    ..Default::default()
                };
                j.started = Instant::now();
            }
            let v = self.run_replace(&stop);
            *lock(&self.last_result) = Some(v);
        }
        if let Some(j) = lock(&self.job).as_mut() {
            j.status.action = "idle".into();
        }
    }

    fn run_replace(&self, stop: &Arc<AtomicBool>) -> Value {
        let opts = RebuildOptions {
            stop: Some(stop.clone()),
            max_bytes_per_sec: Some(self.speed_limit.clone()),
            ..Default::default()
        };
        let arr = self.array.clone();
        match crate::replace::replace(&arr, &opts, &mut |d, t| self.progress(d, t)) {
            Ok(rep) => {
                if !rep.roles.is_empty() {
                    let _ = arr.mark_clean();
                }
                json!({"action": "replace", "roles": rep.roles, "lost": rep.lost})
            }
            Err(e) => {
                let v = json!({"action": "replace", "error": e.to_string()});
                self.emit("replace_finished", v.clone());
                v
            }
        }
    }

    fn start_replace_job(self: &Arc<Self>) -> Result<()> {
        let mut job = lock(&self.job);
        if let Some(j) = job.as_ref() {
            if j.handle.as_ref().is_some_and(|h| !h.is_finished()) {
                return Err(EngineError::Invalid(format!(
                    "a {} is running; stop it with `sync-action idle` first (the replacement then continues)",
                    j.status.action
                )));
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name(format!("raidkit-replace-{}", self.name))
            .spawn(move || {
                let v = me.run_replace(&stop2);
                *lock(&me.last_result) = Some(v);
                if let Some(j) = lock(&me.job).as_mut() {
                    j.status.action = "idle".into();
                }
            })
            .map_err(|e| EngineError::io("thread", "starting the replacement", e))?;
        *job = Some(Job {
            status: JobStatus {
                action: "replace".into(),
                speed_limit: self.speed_limit.load(Ordering::Relaxed),
                ..Default::default()
            },
            started: Instant::now(),
            stop,
            handle: Some(handle),
        });
        Ok(())
    }

    /// Hot-replace the active member `device` (md's `--replace`): with `with`, that device
    /// (a spare of the array, or a new device added as a spare first), else any spare.
    /// The member stays active until the copy is done; the copy runs in the background.
    pub fn replace(self: &Arc<Self>, device: &str, with: Option<&Path>, force: bool) -> Result<()> {
        if lock(&self.job)
            .as_ref()
            .and_then(|j| j.handle.as_ref())
            .is_some_and(|h| !h.is_finished())
        {
            return Err(EngineError::Invalid(
                "another job is running; wait for it or stop it with `sync-action idle` first"
                    .into(),
            ));
        }
        let member = self.canonical_member_name(device);
        let with_name = match with {
            None => None,
            Some(p) => {
                let ps = p.display().to_string();
                let spare = self
                    .array
                    .members()
                    .into_iter()
                    .find(|m| m.state == "spare" && same_device(&m.device, &ps))
                    .map(|m| m.device);
                match spare {
                    Some(n) => Some(n),
                    None => {
                        let dev: Arc<dyn BlockDev> = Arc::new(
                            FileDev::open(p, true)
                                .map_err(|e| EngineError::io(&ps, "opening the replacement", e))?,
                        );
                        let n = dev.name().to_string();
                        self.array.add_spare(dev, force)?;
                        Some(n)
                    }
                }
            }
        };
        self.array.start_replace(&member, with_name.as_deref())?;
        self.start_replace_job()
    }

    fn stop_job(&self) {
        let handle = {
            let mut job = lock(&self.job);
            job.as_mut().and_then(|j| {
                j.stop.store(true, Ordering::Relaxed);
                j.handle.take()
            })
        };
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Limit background work to this many bytes per second (0 = unlimited); takes effect
    /// immediately, also for the running job.
    pub fn set_speed_limit(&self, bytes_per_sec: u64) {
        self.speed_limit.store(bytes_per_sec, Ordering::Relaxed);
    }

    /// Wait until the current job (if any) has finished.
    pub fn wait_idle(&self) {
        let h = lock(&self.job).as_mut().and_then(|j| j.handle.take());
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Everything `raidkit status` shows about this array.
    pub fn status(&self) -> Value {
        let a = &self.array;
        let g = a.geometry();
        let job = lock(&self.job)
            .as_ref()
            .map(|j| j.status.clone())
            .filter(|s| s.action != "idle")
            .unwrap_or_else(|| JobStatus {
                action: "idle".into(),
                speed_limit: self.speed_limit.load(Ordering::Relaxed),
                ..Default::default()
            });
        let mut state = vec![if a.needs_resync() { "dirty" } else { "clean" }];
        if a.is_degraded() {
            state.push("degraded");
        }
        json!({
            "name": self.name,
            "uuid": a.uuid_text(),
            "level": g.level.to_string(),
            "layout": raidkit_layout::names::layout_name(g.level, g.layout),
            "chunk_bytes": g.chunk_sectors * 512,
            "raid_disks": g.raid_disks,
            "array_bytes": a.size_bytes(),
            "state": state.join(", "),
            "degraded": a.is_degraded(),
            "read_only": !a.is_writable(),
            "members": a.members(),
            "missing_roles": a.missing_roles(),
            "io": a.member_stats(),
            "sync": job,
            "last_result": *lock(&self.last_result),
            "lost_ranges": a.lost_ranges(),
            "lost_zeroed_ranges": a.lost_zeroed_ranges(),
            "bad_blocks": a.bad_blocks(),
        })
    }

    fn find_role(&self, device: &str) -> Option<usize> {
        self.array
            .members()
            .into_iter()
            .find(|m| same_device(&m.device, device))
            .and_then(|m| m.role)
    }

    fn canonical_member_name(&self, device: &str) -> String {
        self.array
            .members()
            .into_iter()
            .map(|m| m.device)
            .chain(self.array.device_names())
            .find(|d| same_device(d, device))
            .unwrap_or_else(|| device.to_string())
    }

    /// Fail a member.
    pub fn fail(&self, device: &str) -> Result<()> {
        let role = self.find_role(device).ok_or_else(|| {
            EngineError::Invalid(format!("{device} is not an active member of {}", self.name))
        })?;
        self.array.fail_member(role, "failed by the administrator")
    }

    /// Remove a failed member or a spare.
    pub fn remove(&self, device: &str) -> Result<()> {
        self.array
            .remove_member(&self.canonical_member_name(device))?;
        self.emit("member_removed", json!({"device": device}));
        Ok(())
    }

    /// Add a device as a spare; if a role is missing, recovery onto it starts.
    pub fn add(self: &Arc<Self>, path: &Path, force: bool) -> Result<()> {
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(path, true).map_err(|e| {
            EngineError::io(&path.display().to_string(), "opening the new member", e)
        })?);
        self.array.add_spare(dev, force)?;
        if !self.array.missing_roles().is_empty() {
            self.sync_action("recover")?;
        }
        Ok(())
    }

    /// Re-add a member that left (bitmap-guided when possible), in the background.
    pub fn re_add(self: &Arc<Self>, path: &Path) -> Result<()> {
        let dev: Arc<dyn BlockDev> =
            Arc::new(FileDev::open(path, true).map_err(|e| {
                EngineError::io(&path.display().to_string(), "opening the member", e)
            })?);
        let me = self.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let mut job = lock(&self.job);
        if job
            .as_ref()
            .and_then(|j| j.handle.as_ref())
            .is_some_and(|h| !h.is_finished())
        {
            return Err(EngineError::Invalid(
                "another job is running; stop it with `idle` first".into(),
            ));
        }
        let handle = std::thread::spawn(move || {
            let opts = RebuildOptions {
                stop: Some(stop2),
                max_bytes_per_sec: Some(me.speed_limit.clone()),
                ..Default::default()
            };
            let r = me.array.re_add(dev, &opts, &mut |d, t| me.progress(d, t));
            let v = match r {
                Ok(rep) => {
                    let _ = me.array.mark_clean();
                    json!({"action": "re-add", "roles": rep.roles, "sectors": rep.sectors, "lost": rep.lost})
                }
                Err(e) => json!({"action": "re-add", "error": e.to_string()}),
            };
            me.emit("rebuild_finished", v.clone());
            *lock(&me.last_result) = Some(v);
            if let Some(j) = lock(&me.job).as_mut() {
                j.status.action = "idle".into();
            }
        });
        *job = Some(Job {
            status: JobStatus {
                action: "recovery".into(),
                ..Default::default()
            },
            started: Instant::now(),
            stop,
            handle: Some(handle),
        });
        Ok(())
    }

    /// Add or remove the internal write-intent bitmap (writes pause while switching).
    pub fn set_bitmap(&self, mode: crate::grow::BitmapMode) -> Result<crate::grow::BitmapChange> {
        let ch = self.array.set_bitmap(mode)?;
        self.emit(
            if ch.bitmap {
                "bitmap_added"
            } else {
                "bitmap_removed"
            },
            serde_json::to_value(&ch).unwrap_or(Value::Null),
        );
        Ok(ch)
    }

    /// `--update no-bbl`: rewrite the bad-block entries from redundancy and remove the
    /// bad-block log from every member (see [`Array::remove_bbl`]). Refused while a
    /// background job runs.
    pub fn remove_bbl(&self, force: bool) -> Result<crate::bbl::BblRemoval> {
        if lock(&self.job)
            .as_ref()
            .and_then(|j| j.handle.as_ref())
            .is_some_and(|h| !h.is_finished())
        {
            return Err(EngineError::Invalid(
                "a background job (resync, recovery, check) is running; wait for it or stop it with `raidkit sync-action NAME idle`, then retry".into(),
            ));
        }
        self.array.remove_bbl(force)
    }

    /// Stop background work, flush and mark the array clean (graceful stop).
    pub fn shutdown(&self) -> Result<()> {
        if self.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_job();
        self.array.mark_clean()
    }
}
