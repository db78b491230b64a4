//! The supervisor of a running array: the background jobs md runs in the kernel (resync
//! after an unclean stop, recovery onto spares, check/repair scrubs) with progress, speed
//! and ETA; member management (fail, remove, add, re-add, replace); typed status and a
//! typed event stream for monitors; and md's safe mode ([`IdleClean`]). Frontends (NBD,
//! FUSE) own one supervisor per served array, and word and print what it reports; the
//! control socket is a thin transport over these methods.

mod error;
mod event;
mod idle;
mod members;
mod reconnect;
mod reshape;
mod state_file;
mod status;

pub use error::{Result, SupervisorError};
pub use event::{Event, MonitorEvent};
pub(crate) use idle::coarse_ms;
pub use idle::{IdleClean, Watched, WriteActivity};
pub use reshape::{ReshapeProgress, ReshapeReport, ReshapeResult};
pub use status::{
    ArrayStats, ArrayStatus, JobFailure, JobResult, JobStatus, RebuildResult, SyncResult,
};

use crate::array::{lock, Array, ArrayEvent};

use crate::error::EngineError;
use crate::rebuild::{rebuild, RebuildOptions};
use crate::sync::{run_opts, SyncMode, SyncOptions, SyncReport};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Events kept for [`Supervisor::recent_events`].
const EVENT_LOG_LEN: usize = 1000;

struct Job {
    status: JobStatus,
    started: Instant,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Job {
    fn running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }
}

/// The event log and the subscribers, under one lock so a subscriber joining gets every
/// event exactly once (history, then live).
#[derive(Default)]
struct Events {
    log: Vec<MonitorEvent>,
    listeners: Vec<Listener>,
}

/// A subscriber: its channel, and (for [`Supervisor::subscribe_while`]) the token whose
/// drop ends the subscription.
struct Listener {
    tx: Sender<MonitorEvent>,
    alive: Option<Weak<()>>,
}

impl Listener {
    /// False once the subscriber dropped its token (its channel may still be open).
    fn wanted(&self) -> bool {
        self.alive.as_ref().is_none_or(|w| w.strong_count() > 0)
    }
}

/// Supervises one running array.
pub struct Supervisor {
    name: String,
    array: Arc<Array>,
    job: Mutex<Option<Job>>,
    speed_limit: Arc<AtomicU64>,
    events: Mutex<Events>,
    last_result: Mutex<Option<JobResult>>,
    shutting_down: AtomicBool,
    /// The thread that brings failed network members back is running.
    reconnecting: AtomicBool,
    /// Where a stopped check/repair records its resume position (see
    /// [`Supervisor::set_scrub_state_file`]).
    scrub_state: Mutex<Option<PathBuf>>,
    /// Set to pause a reshape at its next safe position.
    reshape_paused: Arc<AtomicBool>,
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

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn sync_name(m: SyncMode) -> &'static str {
    match m {
        SyncMode::Check => "check",
        SyncMode::Repair => "repair",
        SyncMode::Resync => "resync",
    }
}

impl Supervisor {
    /// Supervise `array` under `name` (the stable name from the superblock). Starts the
    /// event watcher and whatever job the array needs (resync after an unclean stop,
    /// recovery of a partially rebuilt member, recovery onto a spare). Events emitted here
    /// are in [`Supervisor::subscribe_with_history`].
    pub fn start(name: &str, array: Arc<Array>) -> Arc<Supervisor> {
        let sup = Arc::new(Supervisor {
            name: name.to_string(),
            array,
            job: Mutex::new(None),
            speed_limit: Arc::new(AtomicU64::new(0)),
            events: Mutex::new(Events::default()),
            last_result: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            reconnecting: AtomicBool::new(false),
            scrub_state: Mutex::new(None),
            reshape_paused: Arc::new(AtomicBool::new(false)),
        });
        sup.watch_events(&sup.array);
        sup.start_needed_job();
        // Network members away from the start (not reached at assembly), or whose link
        // may go down while the array cannot do without them, are brought back by it.
        if sup.array.has_network_members() {
            sup.start_reconnector();
        }
        sup
    }

    /// Relay the events of `arr` (the array, or the one a reshape switched to) to this
    /// supervisor, on a thread of its own.
    pub(crate) fn watch_events(self: &Arc<Self>, arr: &Arc<Array>) {
        arr.watch_write_behind();
        let rx = arr.subscribe();
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name(format!("raidkit-events-{}", self.name))
            .spawn(move || {
                while let Ok(e) = rx.recv() {
                    let Some(s) = weak.upgrade() else { break };
                    s.on_array_event(e);
                }
            })
            .ok();
    }

    fn start_needed_job(self: &Arc<Self>) {
        if self.continue_found_reshape() {
            return;
        }
        let a = &self.cur();
        if a.is_writable() && a.needs_resync() {
            self.emit(Event::UncleanStopDetected {
                note: "redundancy may be inconsistent; resyncing (only dirty bitmap regions if there is a bitmap)".into(),
            });
            if a.is_degraded() {
                // Started dirty and degraded (a missing role that holds only parity, or
                // forced): said now; the recovery follows the resync.
                self.emit(Event::Degraded {
                    missing_roles: a.missing_roles(),
                });
            }
            let _ = self.sync_action("resync");
        } else if a.is_degraded() {
            self.emit(Event::Degraded {
                missing_roles: a.missing_roles(),
            });
            if a.is_writable() {
                let _ = self.sync_action("recover");
            }
        } else if a.is_writable() && !a.replacement_roles().is_empty() {
            let _ = self.start_replace_job();
        }
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
        self.subscribe_with_history().1
    }

    /// The events so far (the last 1000) and every future one, with none missed or
    /// repeated in between.
    pub fn subscribe_with_history(&self) -> (Vec<MonitorEvent>, Receiver<MonitorEvent>) {
        let (tx, rx) = channel();
        let mut ev = lock(&self.events);
        ev.listeners.retain(Listener::wanted);
        ev.listeners.push(Listener { tx, alive: None });
        (ev.log.clone(), rx)
    }

    /// Send every future event into `tx` for as long as `alive` lives. A subscriber that
    /// goes away drops `alive`: its entry is forgotten at the next subscription or event,
    /// so subscribers that come and go between events (control clients) pile up nothing.
    pub fn subscribe_while(&self, tx: Sender<MonitorEvent>, alive: &Arc<()>) {
        let mut ev = lock(&self.events);
        ev.listeners.retain(Listener::wanted);
        ev.listeners.push(Listener {
            tx,
            alive: Some(Arc::downgrade(alive)),
        });
    }

    /// Subscriptions held now (for tests: not part of the API).
    #[doc(hidden)]
    pub fn subscribers(&self) -> usize {
        let mut ev = lock(&self.events);
        ev.listeners.retain(Listener::wanted);
        ev.listeners.len()
    }

    /// Recent events (the last 1000).
    pub fn recent_events(&self) -> Vec<MonitorEvent> {
        lock(&self.events).log.clone()
    }

    /// Record an event and send it to every subscriber.
    pub fn emit(&self, event: Event) {
        let e = MonitorEvent {
            time: now(),
            array: self.name.clone(),
            event,
        };
        let mut ev = lock(&self.events);
        ev.log.push(e.clone());
        let n = ev.log.len();
        if n > EVENT_LOG_LEN {
            ev.log.drain(..n - EVENT_LOG_LEN);
        }
        ev.listeners
            .retain(|l| l.wanted() && l.tx.send(e.clone()).is_ok());
    }

    fn emit_degraded(&self) {
        self.emit(Event::Degraded {
            missing_roles: self.cur().missing_roles(),
        });
    }

    fn on_array_event(self: &Arc<Self>, e: ArrayEvent) {
        let failed = matches!(e, ArrayEvent::MemberFailed { .. });
        let network = self.network_member_failed(&e);
        self.emit(Event::Array(e));
        if let Some(ev) = network {
            self.emit(ev);
            self.start_reconnector();
        }
        if failed {
            if self.cur().is_degraded() {
                self.emit_degraded();
            }
            if self.cur().spare_count() > 0 && !self.cur().missing_roles().is_empty() {
                let _ = self.sync_action("recover");
            }
        }
    }

    /// Keep the resume position of a stopped check/repair in `path` (a small JSON file,
    /// mode 0600, never written through a symlink; it survives a restart of the serving
    /// process). Without it, a stopped scrub cannot be resumed. The caller must have made
    /// sure no other user can write the directory.
    pub fn set_scrub_state_file(&self, path: PathBuf) {
        *lock(&self.scrub_state) = Some(path);
    }

    /// Where the last stopped check/repair would resume, if one was stopped.
    pub fn scrub_resume(&self) -> Option<ScrubResume> {
        let path = lock(&self.scrub_state).clone()?;
        state_file::read(&path)
    }

    fn save_scrub_resume(&self, r: Option<&ScrubResume>) -> std::io::Result<()> {
        match lock(&self.scrub_state).clone() {
            Some(path) => state_file::write(&path, r),
            None => Ok(()),
        }
    }

    /// Start a background action: `check`, `repair`, `resync`, `recover`, or `idle` (stop
    /// the current one). Refused while another action runs (except `idle`).
    pub fn sync_action(self: &Arc<Self>, action: &str) -> Result<()> {
        self.sync_action_with(action, &ActionOptions::default())
    }

    /// The check/repair window of a request: given, resumed, or none.
    fn window_of(&self, action: &str, o: &ActionOptions) -> Result<Option<(u64, u64)>> {
        if (o.window.is_some() || o.resume) && action != "check" && action != "repair" {
            return Err(SupervisorError::WindowNeedsScrub(action.to_string()));
        }
        if o.window.is_some() && o.resume {
            return Err(SupervisorError::WindowAndResume);
        }
        let window = if o.resume {
            let r = self
                .scrub_resume()
                .ok_or_else(|| SupervisorError::NothingToResume {
                    array: self.name.clone(),
                })?;
            if r.uuid != self.cur().uuid_text() {
                return Err(SupervisorError::ResumeOtherArray {
                    recorded: r.uuid,
                    array: self.cur().uuid_text(),
                });
            }
            Some((r.next, r.to))
        } else {
            o.window
        };
        let size = self.cur().size_bytes();
        if let Some((from, to)) = window {
            if from >= to || from >= size {
                // An open end (`--from` alone) is said as the array's end, not 2^64-1.
                let to = to.min(size);
                return Err(SupervisorError::EmptyWindow { from, to, size });
            }
        }
        Ok(window)
    }

    fn busy(&self, job: &Option<Job>) -> Result<()> {
        match job.as_ref().filter(|j| j.running()) {
            Some(j) => Err(SupervisorError::Busy {
                array: self.name.clone(),
                running: j.status.action.clone(),
            }),
            None => Ok(()),
        }
    }

    /// [`Supervisor::sync_action`] with a window or resume for check/repair.
    pub fn sync_action_with(self: &Arc<Self>, action: &str, o: &ActionOptions) -> Result<()> {
        let window = self.window_of(action, o)?;
        if action == "idle" {
            self.stop_job();
            return Ok(());
        }
        let mode = match action {
            "check" => Some(SyncMode::Check),
            "repair" => Some(SyncMode::Repair),
            "resync" => Some(SyncMode::Resync),
            "recover" | "recovery" => None,
            other => return Err(SupervisorError::UnknownAction(other.to_string())),
        };
        if mode != Some(SyncMode::Check) && !self.cur().is_writable() {
            return Err(SupervisorError::ReadOnly(action.to_string()));
        }
        let mut job = lock(&self.job);
        self.busy(&job)?;
        let name = mode.map_or("recovery", sync_name).to_string();
        let me = self.clone();
        *job = Some(self.spawn_job(&name, move |stop| me.run_job(mode, stop, window))?);
        Ok(())
    }

    /// Start a job thread running `body` with the job's stop flag.
    fn spawn_job(
        &self,
        action: &str,
        body: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) -> Result<Job> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("raidkit-{action}-{}", self.name))
            .spawn(move || body(stop2))
            .map_err(|e| EngineError::io("thread", "starting a background job", e))?;
        Ok(Job {
            status: JobStatus {
                action: action.to_string(),
                speed_limit: self.speed_limit.load(Ordering::Relaxed),
                ..Default::default()
            },
            started: Instant::now(),
            stop,
            handle: Some(handle),
        })
    }

    fn progress(&self, done: u64, total: u64) {
        if let Some(j) = lock(&self.job).as_mut() {
            let el = j.started.elapsed().as_secs_f64().max(1e-3);
            let speed = ((done * 512) as f64 / el) as u64;
            j.status.done_sectors = done;
            j.status.total_sectors = total;
            j.status.speed_bytes_per_sec = speed;
            j.status.speed_limit = self.speed_limit.load(Ordering::Relaxed);
            j.status.eta_seconds = (speed > 0).then(|| (total.saturating_sub(done) * 512) / speed);
        }
    }

    fn set_idle(&self) {
        if let Some(j) = lock(&self.job).as_mut() {
            j.status.action = "idle".into();
        }
    }

    fn run_job(
        self: Arc<Self>,
        mode: Option<SyncMode>,
        stop: Arc<AtomicBool>,
        window: Option<(u64, u64)>,
    ) {
        let mut last_pct = 0u64;
        let mut progress = |d: u64, t: u64| {
            self.progress(d, t);
            let pct = (d * 100).checked_div(t).unwrap_or(100);
            if pct >= last_pct + 10 {
                last_pct = pct / 10 * 10;
                let action = lock(&self.job).as_ref().map(|j| j.status.action.clone());
                self.emit(Event::RebuildProgress {
                    action,
                    percent: last_pct,
                });
            }
        };
        let result = match mode {
            Some(m) => self.run_sync(m, &stop, window, &mut progress),
            None => self.run_recovery(&stop, &mut progress),
        };
        *lock(&self.last_result) = Some(result);
        let arr = &self.cur();
        // A dirty degraded array's resync is followed by its recovery (onto a spare, or
        // of a member part-way rebuilt), as the recovery follows assembly otherwise.
        if !stop.load(Ordering::Relaxed)
            && mode == Some(SyncMode::Resync)
            && arr.is_writable()
            && !arr.needs_resync()
            && arr.is_degraded()
            && (arr.spare_count() > 0 || arr.missing_roles().is_empty())
        {
            if let Some(j) = lock(&self.job).as_mut() {
                j.status = JobStatus {
                    action: "recover".into(),
                    ..Default::default()
                };
                j.started = Instant::now();
            }
            let v = self.run_recovery(&stop, &mut progress);
            *lock(&self.last_result) = Some(v);
        }
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
        self.set_idle();
    }

    fn run_sync(
        &self,
        m: SyncMode,
        stop: &Arc<AtomicBool>,
        window: Option<(u64, u64)>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> JobResult {
        let arr = &self.cur();
        let name = sync_name(m);
        self.emit(Event::SyncStarted {
            action: name.into(),
            window,
        });
        let opts = SyncOptions {
            full: m != SyncMode::Resync,
            window: window.map(|(f, t)| crate::sync::window_for_bytes(arr, f, t)),
            stop: Some(stop.clone()),
            max_bytes_per_sec: Some(self.speed_limit.clone()),
        };
        let result = match run_opts(arr, m, &opts, progress) {
            Ok(rep) => JobResult::Sync(self.sync_done(m, window, rep)),
            Err(e) => JobResult::failed(name, e),
        };
        self.emit(Event::SyncFinished(result.clone()));
        result
    }

    /// After a resync/check/repair pass: report mismatches, mark clean, record where a
    /// stopped scrub resumes.
    fn sync_done(&self, m: SyncMode, window: Option<(u64, u64)>, rep: SyncReport) -> SyncResult {
        let arr = &self.cur();
        let name = sync_name(m);
        if !rep.mismatches.is_empty() && m != SyncMode::Resync {
            self.emit(Event::MismatchesFound {
                action: name.into(),
                ranges: rep.mismatches.clone(),
                verdicts: rep.verdicts.clone(),
                covered: rep.covered,
            });
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
            if let Err(e) = self.save_scrub_resume(resume.as_ref()) {
                // Not fatal: the pass itself is done; only a resume will not find it.
                let path = lock(&self.scrub_state).clone().unwrap_or_default();
                self.emit(Event::StateFileError {
                    path: path.display().to_string(),
                    error: e.to_string(),
                });
            }
        }
        SyncResult {
            action: name.into(),
            mismatch_ranges: rep.mismatches,
            verdicts: rep.verdicts,
            stopped_at: rep.stopped_at,
            sectors_done: rep.sectors_done,
            covered: rep.covered,
            resume_from: rep.stopped_at.map(|_| rep.covered.1),
        }
    }

    fn rebuild_options(&self, stop: &Arc<AtomicBool>) -> RebuildOptions {
        RebuildOptions {
            stop: Some(stop.clone()),
            max_bytes_per_sec: Some(self.speed_limit.clone()),
            ..Default::default()
        }
    }

    fn run_recovery(
        &self,
        stop: &Arc<AtomicBool>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> JobResult {
        let arr = &self.cur();
        let had_spares = arr.spare_count();
        match rebuild(arr, &self.rebuild_options(stop), progress) {
            Ok(rep) => {
                if had_spares > arr.spare_count() {
                    self.emit(Event::SpareActivated {
                        roles: rep.roles.clone(),
                    });
                }
                let _ = arr.mark_clean();
                JobResult::Rebuild(RebuildResult {
                    action: "recovery".into(),
                    roles: rep.roles,
                    sectors: None,
                    lost: rep.lost,
                })
            }
            Err(e) => {
                let v = JobResult::failed("recovery", e);
                self.emit(Event::RebuildFinished(v.clone()));
                v
            }
        }
    }

    fn run_replace(&self, stop: &Arc<AtomicBool>) -> JobResult {
        let arr = &self.cur();
        let opts = self.rebuild_options(stop);
        match crate::replace::replace(arr, &opts, &mut |d, t| self.progress(d, t)) {
            Ok(rep) => {
                if !rep.roles.is_empty() {
                    let _ = arr.mark_clean();
                }
                JobResult::Rebuild(RebuildResult {
                    action: "replace".into(),
                    roles: rep.roles,
                    sectors: None,
                    lost: rep.lost,
                })
            }
            Err(e) => {
                let v = JobResult::failed("replace", e);
                self.emit(Event::ReplaceFinished(v.clone()));
                v
            }
        }
    }

    fn start_replace_job(self: &Arc<Self>) -> Result<()> {
        let mut job = lock(&self.job);
        self.busy(&job)?;
        let me = self.clone();
        *job = Some(self.spawn_job("replace", move |stop| {
            let v = me.run_replace(&stop);
            *lock(&me.last_result) = Some(v);
            me.set_idle();
        })?);
        Ok(())
    }

    /// Hot-replace the active member `device` (md's `--replace`): with `with`, that device
    /// (a spare of the array, or a new device added as a spare first), else any spare.
    /// The member stays active until the copy is done; the copy runs in the background.
    pub fn replace(self: &Arc<Self>, device: &str, with: Option<&Path>, force: bool) -> Result<()> {
        self.busy(&lock(&self.job))?;
        let member = self.canonical_member_name(device);
        let with_name = match with {
            None => None,
            Some(p) => Some(self.spare_named(p, force)?),
        };
        self.cur().start_replace(&member, with_name.as_deref())?;
        self.start_replace_job()
    }

    /// The spare `p` names, added as a new spare first if it is not one yet.
    fn spare_named(&self, p: &Path, force: bool) -> Result<String> {
        let ps = p.display().to_string();
        if let Some(n) = self.cur().device_named(&ps) {
            let is_spare = |m: &crate::array::MemberInfo| m.state == "spare" && m.device == n;
            if self.cur().members().iter().any(is_spare) {
                return Ok(n);
            }
        }
        let dev = crate::dev::open_member(p, true)
            .map_err(|e| EngineError::io(&ps, "opening the replacement", e))?;
        let n = dev.name().to_string();
        self.cur().add_spare(dev, force)?;
        Ok(n)
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
    pub fn status(&self) -> ArrayStatus {
        let a = &self.cur();
        let g = a.geometry();
        let sync = lock(&self.job)
            .as_ref()
            .map(|j| j.status.clone())
            .filter(|s| s.action != "idle")
            .unwrap_or_else(|| JobStatus {
                action: "idle".into(),
                speed_limit: self.speed_limit.load(Ordering::Relaxed),
                ..Default::default()
            });
        let state = a.state_words();
        ArrayStatus {
            name: self.name.clone(),
            uuid: a.uuid_text(),
            level: g.level.to_string(),
            layout: raidkit_layout::names::layout_name(g.level, g.layout),
            chunk_bytes: g.chunk_sectors * 512,
            raid_disks: g.raid_disks,
            array_bytes: a.size_bytes(),
            state: state.join(", "),
            degraded: a.is_degraded(),
            read_only: !a.is_writable(),
            members: a.members(),
            missing_roles: a.missing_roles(),
            io: a.member_stats(),
            sync,
            last_result: lock(&self.last_result).clone(),
            lost_ranges: a.lost_ranges(),
            lost_zeroed_ranges: a.lost_zeroed_ranges(),
            bad_blocks: a.bad_blocks(),
            stripe_cache: a.stripe_cache_stats(),
            reshape: self.reshape_progress(),
        }
    }

    /// Live IO statistics.
    pub fn stats(&self) -> ArrayStats {
        let a = &self.cur();
        ArrayStats {
            name: self.name.clone(),
            uuid: a.uuid_text(),
            io: a.io.snapshot(),
            members: a.member_stats(),
            stripe_cache: a.stripe_cache_stats(),
        }
    }

    /// Add or remove the internal write-intent bitmap (writes pause while switching).
    pub fn set_bitmap(&self, mode: crate::grow::BitmapMode) -> Result<crate::grow::BitmapChange> {
        let ch = self.cur().set_bitmap(mode)?;
        self.emit(Event::Bitmap(ch.clone()));
        Ok(ch)
    }

    /// `--update no-bbl`: rewrite the bad-block entries from redundancy and remove the
    /// bad-block log from every member (see [`Array::remove_bbl`]). Refused while a
    /// background job runs.
    pub fn remove_bbl(&self, force: bool) -> Result<crate::bbl::BblRemoval> {
        self.busy(&lock(&self.job))?;
        Ok(self.cur().remove_bbl(force)?)
    }

    /// Stop background work, flush and mark the array clean (graceful stop).
    pub fn shutdown(&self) -> Result<()> {
        if self.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_job();
        Ok(self.cur().mark_clean()?)
    }
}
