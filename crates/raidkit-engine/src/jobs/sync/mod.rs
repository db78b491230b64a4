//! Redundancy passes over an array: resync (make parity/mirrors consistent, as after
//! creation or an unclean stop), check (count and locate mismatches) and repair.
//!
//! * `mod.rs`: modes, reports, the sync address space, and the pass over it.
//! * [`parity`]: one RAID4/5/6 stripe, and who is wrong when parity disagrees.
//! * [`mirror`]: one mirrored region, and which copy is right.

mod mirror;
pub use mirror::mirror_piece_bytes;
mod parity;
mod read_errors;
pub(crate) mod reshaping;

use crate::array::range_gate::RangeHold;
use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::jobs::pipeline;
use crate::jobs::stripe_run::{self, RunBufs};
use crate::locks::lock;

/// What a pass does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Make redundancy consistent, writing only where it differs.
    Resync,
    /// Report mismatches; write nothing but the blocks whose read failed (from
    /// redundancy, as md does).
    Check,
    /// Report mismatches and fix them.
    Repair,
}

/// Outcome of a pass.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SyncReport {
    /// Sectors of the sync address space processed.
    pub sectors_done: u64,
    /// Sectors skipped because every member had a hole there (all zeros, consistent).
    pub sectors_skipped_holes: u64,
    /// Mismatched ranges as (array byte offset, length). For parity levels a mismatch in a
    /// stripe row is reported as the array range of that row's data.
    pub mismatches: Vec<(u64, u64)>,
    /// Sectors rewritten.
    pub sectors_written: u64,
    /// Sectors written back from redundancy after a member's read failed (md's answer to
    /// a read error, in every mode; none on an array opened read-only).
    pub sectors_read_error_rewritten: u64,
    /// Per inconsistent page: which member was wrong, when that can be told.
    pub verdicts: Vec<Verdict>,
    /// Where the pass stopped early (sync-space sector to resume from), if it did.
    pub stopped_at: Option<u64>,
    /// The array byte range the pass covered, `[start, end)`: the whole array, its window,
    /// or up to where it stopped.
    pub covered: (u64, u64),
}

/// The verdict on one inconsistent 4 KiB page (parity levels) or region (mirrors).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Stripe number (parity levels) or 0.
    pub stripe: u64,
    /// Array byte offset of the affected region (first data block of the row for parity).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Role of the member found wrong, if it could be told.
    pub role: Option<usize>,
    /// Device of that member.
    pub device: Option<String>,
    /// What was wrong (`P`, `Q`, `data (...)`, `mirror copy`, or why it cannot be told
    /// and what repair does then).
    pub what: String,
    /// How the verdict was reached: `P+Q` (RAID6), `majority` (3+ way mirrors),
    /// `checksum` (the sidecar), or `undecided` (then repair does what md does: mirrors
    /// copy the first readable copy, parity is recomputed from the data).
    pub decided_by: String,
    /// Whether it was rewritten.
    pub repaired: bool,
}

impl SyncReport {
    /// Add a verdict, merging it into the previous one when it continues it (same member,
    /// same finding, adjacent range).
    fn add_verdict(&mut self, v: Verdict) {
        if let Some(last) = self.verdicts.last_mut() {
            if last.offset + last.len == v.offset
                && last.role == v.role
                && last.what == v.what
                && last.stripe == v.stripe
                && last.repaired == v.repaired
            {
                last.len += v.len;
                return;
            }
        }
        self.verdicts.push(v);
    }

    /// Take in the report of the next part of the pass (merging as [`Self::add_verdict`]
    /// and [`Self::add_mismatch`] do, as if it had been made here).
    fn absorb(&mut self, part: SyncReport) {
        self.sectors_skipped_holes += part.sectors_skipped_holes;
        self.sectors_written += part.sectors_written;
        self.sectors_read_error_rewritten += part.sectors_read_error_rewritten;
        for (off, len) in part.mismatches {
            self.add_mismatch(off, len);
        }
        for v in part.verdicts {
            self.add_verdict(v);
        }
    }

    fn add_mismatch(&mut self, off: u64, len: u64) {
        if let Some(last) = self.mismatches.last_mut() {
            if last.0 <= off && off + len <= last.0 + last.1 {
                // Already reported (a page refused for two copies that could not be read).
                return;
            }
            if last.0 + last.1 == off {
                last.1 += len;
                return;
            }
        }
        self.mismatches.push((off, len));
    }
}

/// Sectors of the resync address space (device sectors for RAID1/4/5/6, array sectors
/// for RAID10, 0 for levels without redundancy).
pub fn sync_space(arr: &Array) -> u64 {
    let g = arr.geometry();
    if g.level.has_parity() {
        g.stripes() * g.chunk_sectors
    } else if g.level.mirrors() {
        g.array_sectors()
    } else {
        0
    }
}

/// Array bytes per sync-space row: for parity levels a stripe row of data maps to one
/// chunk of sync space; for mirrors sync space is array sectors.
fn row(arr: &Array) -> Option<(u64, u64)> {
    let g = arr.geometry();
    g.level.has_parity().then(|| {
        (
            g.chunk_sectors,
            g.chunk_sectors * 512 * g.data_disks() as u64,
        )
    })
}

/// Convert an array byte window `[from, to)` to the sync-space sectors that cover it:
/// whole stripe rows for parity levels, whole 4 KiB pages for mirrors (`to` is clamped to
/// the array). Use with [`SyncOptions::window`].
pub fn window_for_bytes(arr: &Array, from: u64, to: u64) -> (u64, u64) {
    let total = sync_space(arr);
    let to = to.min(arr.size_bytes());
    match row(arr) {
        Some((c, rb)) => ((from / rb * c).min(total), (to.div_ceil(rb) * c).min(total)),
        None => {
            let p = PAGE as u64;
            (
                (from / p * p / 512).min(total),
                (to.div_ceil(p) * p / 512).min(total),
            )
        }
    }
}

/// The array byte offset where sync-space sector `x` starts (for reports and resuming).
pub fn bytes_for_sync(arr: &Array, x: u64) -> u64 {
    match row(arr) {
        Some((c, rb)) => (x / c * rb).min(arr.size_bytes()),
        None => (x * 512).min(arr.size_bytes()),
    }
}

/// Run a pass. With a bitmap and `Resync`, only regions whose bits are set are visited
/// unless `full`. `progress(done, total)` is called as work proceeds.
pub fn run(
    arr: &Array,
    mode: SyncMode,
    full: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SyncReport> {
    run_opts(
        arr,
        mode,
        &SyncOptions {
            full,
            ..Default::default()
        },
        progress,
    )
}

/// Options of a pass beyond the mode.
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    /// Visit every region, not only those a bitmap says are dirty. A resync owed still
    /// resumes where a stopped one left off (everything below was made consistent then).
    pub full: bool,
    /// Only this window of the sync address space, in sectors `[start, end)` (a scrub
    /// can be split over several runs; `SyncReport::stopped_at` says where to resume).
    pub window: Option<(u64, u64)>,
    /// Stop at the next step when set.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Throttle to this many bytes per second of sync space.
    pub max_bytes_per_sec: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// Run a pass with options. See [`run`].
pub fn run_opts(
    arr: &Array,
    mode: SyncMode,
    opts: &SyncOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SyncReport> {
    if let Some(route) = arr.route() {
        return reshaping::run(arr, &route, mode, opts, progress);
    }
    let total = sync_space(arr);
    let (w0, w1) = opts.window.unwrap_or((0, total));
    let mut rep = SyncReport {
        covered: (bytes_for_sync(arr, w0), bytes_for_sync(arr, w1.min(total))),
        ..Default::default()
    };
    if total == 0 {
        if mode == SyncMode::Resync {
            arr.set_resync_done();
        }
        return Ok(rep);
    }
    if mode != SyncMode::Check {
        if !arr.is_writable() {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; a resync or repair needs it writable".into(),
            ));
        }
        arr.ensure_dirty()?;
    }
    // A resync owed resumes where a stopped one left off (md's resync_offset).
    let owed = mode == SyncMode::Resync && opts.window.is_none();
    let from = if owed { arr.resync_resume() } else { 0 };
    let regions: Vec<(u64, u64)> = regions(arr, mode, opts, total)
        .into_iter()
        .map(|(a, e)| (a.max(from), e))
        .filter(|(a, e)| a < e)
        .collect();
    if !visit(arr, mode, opts, &regions, progress, &mut rep)? {
        if let Some(at) = rep.stopped_at.filter(|_| owed) {
            arr.resync_stopped_at(at);
        }
        return Ok(rep);
    }
    if mode != SyncMode::Check && opts.window.is_none() {
        arr.set_resync_done();
        // Redundancy is consistent now: record it (and clear the bitmap's bits, when not
        // degraded) at once, as md does when a resync completes, so that a crash right
        // after does not resync the same regions again.
        arr.mark_clean()?;
    }
    Ok(rep)
}

/// The regions `[start, end)` of the sync address space a pass visits: the bitmap's
/// dirty ones for a resync (unless `full`), else everything; within the window.
fn regions(arr: &Array, mode: SyncMode, opts: &SyncOptions, total: u64) -> Vec<(u64, u64)> {
    let regions: Vec<(u64, u64)> = match (arr.bm().as_ref(), mode, opts.full) {
        (Some(bm), SyncMode::Resync, false) => {
            let b = lock(bm);
            let cs = b.chunk_sectors;
            b.dirty()
                .into_iter()
                .map(|i| (i * cs, ((i + 1) * cs).min(total)))
                .filter(|(a, e)| a < e)
                .collect()
        }
        _ => vec![(0, total)],
    };
    match opts.window {
        Some((ws, we)) => regions
            .into_iter()
            .map(|(a, e)| (a.max(ws), e.min(we)))
            .filter(|(a, e)| a < e)
            .collect(),
        None => regions,
    }
}

/// Visit the regions, a run of stripes (parity levels) or up to 1 MiB (mirrors) at a time,
/// throttled. False if stopped on request (`rep` then says where).
fn visit(
    arr: &Array,
    mode: SyncMode,
    opts: &SyncOptions,
    regions: &[(u64, u64)],
    progress: &mut dyn FnMut(u64, u64),
    rep: &mut SyncReport,
) -> Result<bool> {
    let todo: u64 = regions.iter().map(|(a, e)| e - a).sum();
    progress(0, todo);
    if !arr.geometry().level.has_redundancy() {
        rep.sectors_done = 0;
        return Ok(true);
    }
    visit_steps(arr, mode, opts, regions, progress, rep)
}

fn stop_asked(opts: &SyncOptions) -> bool {
    opts.stop
        .as_ref()
        .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
}

/// The speed limit of a pass.
struct Throttle<'a> {
    limit: Option<&'a std::sync::atomic::AtomicU64>,
    started: std::time::Instant,
}

impl<'a> Throttle<'a> {
    fn new(opts: &'a SyncOptions) -> Self {
        Throttle {
            limit: opts.max_bytes_per_sec.as_deref(),
            started: std::time::Instant::now(),
        }
    }

    /// Sleep so that `done` sectors since the start stay within the limit.
    fn wait(&self, done: u64) {
        let Some(l) = self.limit else { return };
        let l = l.load(std::sync::atomic::Ordering::Relaxed);
        if l > 0 {
            let should = std::time::Duration::from_secs_f64((done * 512) as f64 / l as f64);
            let el = self.started.elapsed();
            if should > el {
                std::thread::sleep(should - el);
            }
        }
    }
}

/// A pass with several steps in flight at once, each on a worker: runs of whole stripes
/// (parity levels: read at once, recompute, compare, fix) or mirrored regions (read every copy, compare,
/// fix). Their reports are merged in order: the report, the progress and where a stop
/// leaves off are those of a pass one step at a time.
fn visit_steps(
    arr: &Array,
    mode: SyncMode,
    opts: &SyncOptions,
    regions: &[(u64, u64)],
    progress: &mut dyn FnMut(u64, u64),
    rep: &mut SyncReport,
) -> Result<bool> {
    // What is a hole is asked afresh each pass (files may change between passes).
    arr.forget_holes();
    let geo = arr.geometry();
    let chunk = geo.chunk_sectors;
    let run_stripes = stripe_run::stripes_per_run(chunk, geo.stripes());
    // Decided once: the in-flight budget and the steps must agree.
    let mirror_step = mirror_step_sectors(arr);
    let (step, step_bytes) = if geo.level.has_parity() {
        // A run's buffers: every member's chunks, and a stripe's recomputed P and Q.
        let bytes = stripe_run::run_bytes(geo.raid_disks, chunk, run_stripes);
        (Step::Stripes, bytes)
    } else {
        // A region's copies, each read whole (where they do not compare alike in pieces).
        let copies = geo.locate(0).map_or(2, |p| p.copies.len()) as u64;
        (Step::Mirror, copies * mirror_step * 512)
    };
    // Mirrors: a region is held against client writes into it from before its copies are
    // read until they are compared and fixed (a write in between would be undone on one
    // copy, or reported as a mismatch); writes elsewhere go on.
    let _ordered = (step == Step::Mirror && arr.is_writable()).then(|| arr.order_writes_by_range());
    let mut pass = StepPass {
        arr,
        step,
        hold: _ordered.is_some(),
        opts,
        regions,
        region: 0,
        at: None,
        chunk,
        run_stripes,
        mirror_step,
        done: 0,
        handed: 0,
        todo: regions.iter().map(|(a, e)| e - a).sum(),
        throttle: Throttle::new(opts),
        progress,
        rep,
        stopped: None,
    };
    let bufs = RunBufs::default();
    pipeline::run(pipeline::depth_for(step_bytes), &mut pass, |(at, n)| {
        let mut part = SyncReport::default();
        let n = match step {
            Step::Stripes => parity::parity_run(arr, at / chunk, n / chunk, mode, &bufs, &mut part),
            Step::Mirror => mirror::mirror_region(arr, at, n, mode, &mut part),
        };
        (n, part)
    })?;
    let (done, stopped) = (pass.done, pass.stopped);
    rep.sectors_done = done;
    if let Some(at) = stopped {
        rep.stopped_at = Some(at);
        rep.covered.1 = bytes_for_sync(arr, at);
        return Ok(false);
    }
    Ok(true)
}

/// What one step of a pass covers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A run of whole stripes, up to `stripe_run::stripes_per_run` (parity levels).
    Stripes,
    /// A run of up to [`mirror_step_sectors`] mapped onto the same copies (mirrors).
    Mirror,
}

/// The coordinator's state of [`visit_steps`].
struct StepPass<'a, 'p> {
    arr: &'a Array,
    step: Step,
    /// Hold each mirrored region against client writes (see `range_gate`).
    hold: bool,
    opts: &'a SyncOptions,
    regions: &'a [(u64, u64)],
    /// The region being handed out, and the next step's first sector in it.
    region: usize,
    at: Option<u64>,
    chunk: u64,
    /// Stripes per step (parity levels).
    run_stripes: u64,
    /// Sectors per step at most (mirrors: [`mirror_step_sectors`]).
    mirror_step: u64,
    done: u64,
    /// Sectors handed out (the speed limit's count).
    handed: u64,
    todo: u64,
    throttle: Throttle<'a>,
    progress: &'p mut dyn FnMut(u64, u64),
    rep: &'p mut SyncReport,
    stopped: Option<u64>,
}

impl<'a> pipeline::Steps for StepPass<'a, '_> {
    type Key = (u64, u64);
    type Held = Option<RangeHold<'a>>;
    type Out = (Result<u64>, SyncReport);

    fn next(&mut self) -> Result<Option<((u64, u64), Self::Held)>> {
        let (at, end) = loop {
            let Some(&(start, end)) = self.regions.get(self.region) else {
                return Ok(None);
            };
            // Whole stripes, from the stripe holding the region's start.
            let first = match self.step {
                Step::Stripes => start / self.chunk * self.chunk,
                Step::Mirror => start,
            };
            let at = *self.at.get_or_insert(first);
            if at < end {
                break (at, end);
            }
            self.region += 1;
            self.at = None;
        };
        if stop_asked(self.opts) {
            self.stopped = Some(at);
            return Ok(None);
        }
        let n = match self.step {
            // Up to a run of stripes, to the stripe holding the region's last sector.
            Step::Stripes => {
                let c = self.chunk;
                (end.div_ceil(c) - at / c).min(self.run_stripes) * c
            }
            // As far as the copies map contiguously (what `mirror_region` covers).
            Step::Mirror => {
                let p = self
                    .arr
                    .geometry()
                    .locate(at)
                    .ok_or_else(|| EngineError::Invalid(format!("sector {at} out of range")))?;
                p.run.min(self.mirror_step).min(end - at)
            }
        };
        // Throttled by what is handed out, not what is done: the steps handed out at once
        // (two per worker) would otherwise all start before the limit applies.
        self.throttle.wait(self.handed);
        self.handed += n;
        let held = self.hold.then(|| self.arr.hold_ranges(&[(at, at + n)]));
        self.at = Some(at + n);
        Ok(Some(((at, n), held)))
    }

    fn commit(&mut self, _at: (u64, u64), (n, part): Self::Out, _: Self::Held) -> Result<()> {
        let n = n?;
        self.rep.absorb(part);
        self.done += n;
        (self.progress)(self.done, self.todo);
        Ok(())
    }
}

/// Sectors a mirrored pass compares at most at once (1 MiB of each copy, as a rebuild
/// copies: with 512 KiB a RAID1 check on tmpfs took 8 % longer, its steps' hand-offs
/// twice as many).
const MIRROR_STEP_SECTORS: u64 = 2048;

/// Sectors a mirrored pass compares at most at once where every member is a file in
/// memory (4 MiB of each copy): compared in small pieces (`mirror::alike_in_pieces`),
/// the step's size costs no memory unless its copies differ. With 1 MiB steps the job's
/// coordinator (a fifth thread on two cores) was woken for every 0.4 ms of a worker's
/// work: a RAID1 check of 2 × 1 GiB made 1,300–3,400 context switches, 550–810 with
/// 4 MiB steps and pieces.
const MIRROR_STEP_IN_MEMORY_SECTORS: u64 = 8192;

/// Sectors per step of a mirrored pass over `arr`'s members:
/// [`MIRROR_STEP_IN_MEMORY_SECTORS`] where every member present is a file in memory,
/// [`MIRROR_STEP_SECTORS`] otherwise (a disk or a network member keeps its 1 MiB reads,
/// and a step's buffers stay 1 MiB).
fn mirror_step_sectors(arr: &Array) -> u64 {
    let in_memory = (0..arr.geometry().raid_disks)
        .all(|r| arr.member(r).is_none_or(|m| m.dev.submission().in_memory()));
    if in_memory {
        MIRROR_STEP_IN_MEMORY_SECTORS
    } else {
        MIRROR_STEP_SECTORS
    }
}

/// 4 KiB: md's check granularity.
const PAGE: usize = 4096;
