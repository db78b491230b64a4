//! Hot spares and rebuild (md's "recovery"): add a spare, then rebuild every missing role
//! onto spares, checkpointing `recovery_offset` so a restart resumes where it stopped.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::parity_write::stripe_members;
use crate::array::scratch::{scratch_take, ScratchBufs};
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::jobs::copy::{copy_sectors, CopyEnd, CopyLoop, MIRROR_STEP_SECTORS};
use crate::jobs::pieces;
use crate::jobs::pipeline;
use crate::jobs::stripe_run::{self, Run, RunBufs};
use crate::locks::lock;
use crate::meta::sb::Super;
use crate::ranges::coalesce_pairs;
use raidkit_format::v090::{self, disk_state};
use raidkit_format::v1::feature;
use raidkit_layout::Level;
use raidkit_layout::{StripeLayout, SECTOR};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Outcome of a rebuild.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RebuildReport {
    /// Roles rebuilt.
    pub roles: Vec<usize>,
    /// Data sectors written per role, summed.
    pub sectors: u64,
    /// Array byte ranges (offset, length) that could not be reconstructed; reads there
    /// return errors.
    pub lost: Vec<(u64, u64)>,
}

/// Options for a rebuild.
#[derive(Clone, Debug, Default)]
pub struct RebuildOptions {
    /// Throttle to this many bytes per second (None: as fast as the members allow).
    /// (Shared so the limit can change while the rebuild runs; 0 = unlimited.)
    pub max_bytes_per_sec: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// Checkpoint `recovery_offset` at least this often (default 1 s).
    pub checkpoint_every: Option<Duration>,
    /// Set to stop the rebuild at the next step (it checkpoints and returns).
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Rebuild every role that is missing (onto spares) or partially rebuilt (resume).
/// `progress(done, total)` in data sectors.
pub fn rebuild(
    arr: &Array,
    opts: &RebuildOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RebuildReport> {
    if !arr.writable {
        return Err(EngineError::Invalid(
            "the array was assembled read-only; reassemble it for writing to rebuild".into(),
        ));
    }
    if !arr.geo.level.has_redundancy() {
        return Err(EngineError::Invalid(format!(
            "{} has no redundancy to rebuild from",
            arr.geo.level
        )));
    }
    let mut rep = RebuildReport::default();
    // Put spares into missing roles.
    for role in arr.missing_roles() {
        let Some(idx) = arr.spares().pop() else {
            break;
        };
        promote(arr, idx, role)?;
    }
    let targets: Vec<(usize, Arc<Member>)> = arr
        .slots()
        .iter()
        .enumerate()
        .filter_map(|(r, m)| {
            m.clone()
                .filter(|m| !m.is_failed() && m.recovery().is_some())
                .map(|m| (r, m))
        })
        .collect();
    for (role, m) in targets {
        rebuild_role(arr, role, &m, opts, progress, &mut rep, None, &[])?;
        rep.roles.push(role);
    }
    Ok(rep)
}

pub(crate) fn promote(arr: &Array, idx: usize, role: usize) -> Result<()> {
    let mut meta = lock(&arr.meta.sb);
    let devs = arr.devs().clone();
    let dev = devs[idx].clone();
    let data_offset = meta.sbs[idx].data_offset();
    let devnum = meta.sbs[idx].dev_number();
    if let Some(r) = meta.roles.get_mut(devnum) {
        *r = role as u16;
    }
    match &mut meta.sbs[idx] {
        Super::V1(s) => {
            s.feature_map |= feature::RECOVERY_OFFSET;
            s.recovery_offset = 0;
        }
        Super::V090(_) => {}
    }
    // 0.90 has no recovery offset: the descriptor says active-not-sync until done.
    for sb in meta.sbs.iter_mut() {
        if let Super::V090(s) = sb {
            if let Some(d) = s.disks.get_mut(devnum) {
                d.raid_disk = role as u32;
                d.state &= disk_state::WRITEMOSTLY;
            }
        }
    }
    let member = Arc::new(Member::new(dev, idx, data_offset, Some(0), Vec::new()));
    member
        .write_mostly
        .store(meta.sbs[idx].write_mostly(), Ordering::Relaxed);
    arr.set_slot(role, Some(member));
    arr.write_superblocks(&mut meta, |_| {})
}

pub(crate) fn checkpoint(arr: &Array, m: &Member, at: Option<u64>) -> Result<()> {
    let mut meta = lock(&arr.meta.sb);
    let idx = m.index;
    match &mut meta.sbs[idx] {
        Super::V1(s) => match at {
            Some(x) => {
                s.feature_map |= feature::RECOVERY_OFFSET;
                s.recovery_offset = x;
            }
            None => {
                s.feature_map &= !(feature::RECOVERY_OFFSET | feature::RECOVERY_BITMAP);
                s.recovery_offset = 0;
            }
        },
        Super::V090(_) => {
            if at.is_none() {
                let devnum = meta.sbs[idx].dev_number();
                for sb in meta.sbs.iter_mut() {
                    if let Super::V090(s) = sb {
                        if let Some(d) = s.disks.get_mut(devnum) {
                            d.state = disk_state::ACTIVE
                                | disk_state::SYNC
                                | (d.state & disk_state::WRITEMOSTLY);
                        }
                    }
                }
                let copy = meta.sbs[idx].clone();
                if let Super::V090(s) = &copy {
                    if let Super::V090(me) = &mut meta.sbs[idx] {
                        me.this_disk = s.disks[devnum.min(v090::MD_SB_DISKS - 1)];
                    }
                }
            }
        }
    }
    arr.write_superblocks(&mut meta, |_| {})
}

/// Rebuild one role from its checkpoint (or, bitmap-guided, only the `guided` data-sector
/// ranges: the member then stays unreadable until all are done). Mirrors: where every
/// other copy of a region is on a role of `keep` (members that left before it, none in
/// sync), the member's own copy is the only one and is kept as it is.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rebuild_role(
    arr: &Array,
    role: usize,
    m: &Arc<Member>,
    opts: &RebuildOptions,
    progress: &mut dyn FnMut(u64, u64),
    rep: &mut RebuildReport,
    guided: Option<Vec<(u64, u64)>>,
    keep: &[usize],
) -> Result<()> {
    let full = copy_sectors(&arr.geo, role);
    let start = m.recovery().unwrap_or(0);
    let advance = guided.is_none();
    let ranges = guided.unwrap_or_else(|| vec![(start, full)]);
    arr.emit(ArrayEvent::RebuildStarted {
        role,
        device: m.dev.name().to_string(),
        from: start,
    });
    let flush = || {
        m.dev
            .flush()
            .map_err(|e| EngineError::io(m.dev.name(), "flushing the rebuild", e))
    };
    let mut lost: Vec<(u64, u64)> = Vec::new();
    let copy = CopyLoop {
        opts,
        target: m,
        target_is: "rebuild target",
        ranges: &ranges,
        checkpoints: advance,
    };
    let ended = if arr.geo.level.has_parity() {
        // Several runs of stripes in flight, each read (one IO per member), rebuilt and
        // written (one IO) by a worker; the recovery point moves past a run (in order)
        // before its stripes' locks are dropped.
        let chunk = arr.geo.chunk_sectors;
        let bufs = RunBufs::default();
        let run_stripes = stripe_run::stripes_per_run(chunk, arr.geo.stripes());
        copy.run_pipelined(
            run_stripes * chunk,
            chunk,
            pipeline::depth_for(stripe_run::run_bytes(
                arr.geo.raid_disks,
                chunk,
                run_stripes,
            )),
            progress,
            |x, n| {
                (x / chunk..(x + n).div_ceil(chunk))
                    .map(|s| arr.lock_stripe(s))
                    .collect::<Vec<_>>()
            },
            |(x, n)| rebuild_run(arr, role, x, n, &bufs),
            |end, out| {
                lost.extend(out?);
                if advance {
                    m.set_recovery(Some(end / chunk * chunk));
                }
                Ok(())
            },
            |x| {
                flush()?;
                checkpoint(arr, m, Some(x.min(full)))
            },
        )?
    } else {
        // Several regions in flight, each held against client writes into it (by array
        // range) from before it is read until the recovery point has passed it: a write
        // there lands before the region is read or after its copy is written, never in
        // between; writes elsewhere go on.
        let _ordered = arr.order_writes_by_range();
        copy.run_pipelined(
            MIRROR_STEP_SECTORS,
            1,
            pipeline::depth_for(2 * MIRROR_STEP_SECTORS * SECTOR),
            progress,
            |x, n| arr.hold_ranges(&array_ranges(arr, role, x, n)),
            |(x, n)| rebuild_mirrored(arr, role, x, n, keep),
            |end, out| {
                lost.extend(out?);
                if advance {
                    m.set_recovery(Some(end));
                }
                Ok(())
            },
            |x| {
                flush()?;
                checkpoint(arr, m, Some(x.min(full)))
            },
        )?
    };
    flush()?;
    if let CopyEnd::Stopped { at } = ended {
        checkpoint(arr, m, Some(if advance { at } else { 0 }))?;
        coalesce_pairs(&mut lost);
        arr.add_lost(&lost);
        rep.lost.extend(lost);
        return Ok(());
    }
    m.set_recovery(None);
    checkpoint(arr, m, None)?;
    // Adjacent pages lost one by one are reported as one range.
    coalesce_pairs(&mut lost);
    arr.add_lost(&lost);
    rep.sectors += copy.total();
    rep.lost.extend(lost.iter().copied());
    arr.emit(ArrayEvent::RebuildFinished {
        role,
        device: m.dev.name().to_string(),
        lost,
    });
    Ok(())
}

/// Stripes of a parity rebuild over data sectors `[x, x + n)` (their locks held by the
/// job): read as a run (one IO per source member), the role's blocks reconstructed into
/// the run's buffers and written with one IO per span of stripes completed; a stripe the
/// run cannot complete goes through [`rebuild_stripe`]. Returns the array byte ranges
/// found lost.
fn rebuild_run(
    arr: &Array,
    role: usize,
    x: u64,
    n: u64,
    bufs: &RunBufs,
) -> Result<Vec<(u64, u64)>> {
    let chunk = arr.geo.chunk_sectors;
    let first = x / chunk;
    let count = (x + n).div_ceil(chunk) - first;
    if pieces::rebuild_run(arr, bufs, role, first, count)? {
        return Ok(Vec::new());
    }
    let mut run = Run::read(arr, bufs, first, count, Some(role));
    let mut lost = Vec::new();
    // The first stripe of the span completed and not written yet.
    let mut span: Option<u64> = None;
    let write = |run: &Run<'_>, a: u64, b: u64| {
        arr.write_block(role, (first + a) * chunk, run.role_blocks(role, a, b))
    };
    for i in 0..count {
        if run.complete(i)?.is_some() {
            span.get_or_insert(i);
            continue;
        }
        if let Some(a) = span.take() {
            write(&run, a, i)?;
        }
        lost.extend(rebuild_stripe(arr, role, (first + i) * chunk)?);
    }
    if let Some(a) = span {
        write(&run, a, count)?;
    }
    Ok(lost)
}

/// One stripe of a parity rebuild at data sector `x` (its lock held by the job): the
/// role's block reconstructed from the others and written; narrowed down page by page
/// where that fails. Returns the array byte ranges found lost.
fn rebuild_stripe(arr: &Array, role: usize, x: u64) -> Result<Vec<(u64, u64)>> {
    let chunk = arr.geo.chunk_sectors;
    let stripe = x / chunk;
    let layout = arr.stripe_layout(stripe)?;
    let mut lost = Vec::new();
    match arr.read_stripe(stripe, &layout, 0, chunk, true) {
        Ok(known) => {
            let block = known.into_block(&layout, role);
            if !block.is_empty() {
                arr.write_block(role, stripe * chunk, &block)?;
            }
        }
        Err(EngineError::Unreadable { .. }) => {
            rebuild_pages(arr, role, stripe, &layout, &mut lost)?;
        }
        Err(e) => return Err(e),
    }
    Ok(lost)
}

/// Rebuild what can be rebuilt of a stripe page by page; for the rest, the target block
/// is marked bad (never read) and every data block of the page that nobody can supply is
/// reported lost. The stripe is locked by the caller.
fn rebuild_pages(
    arr: &Array,
    role: usize,
    stripe: u64,
    layout: &StripeLayout,
    lost: &mut Vec<(u64, u64)>,
) -> Result<()> {
    let chunk = arr.geo.chunk_sectors;
    let data_blocks = layout.data.len() as u64;
    let page = 8u64.min(chunk);
    let mut at = 0;
    while at < chunk {
        let n = page.min(chunk - at);
        let data_sector = stripe * chunk + at;
        match arr.read_stripe(stripe, layout, at, n, true) {
            Ok(known) => {
                let block = known.block_of(layout, role);
                if !block.is_empty() {
                    arr.write_block(role, data_sector, block)?;
                }
            }
            Err(EngineError::Unreadable { .. }) => {
                // md's rule: the target's block and every source block that could not be
                // read are recorded as bad (on disk, so the loss survives a restart).
                let mut scratch = vec![0u8; (n * SECTOR) as usize];
                let unreadable: Vec<usize> = stripe_members(layout)
                    .filter(|&r| {
                        r != role
                            && arr.readable(r, data_sector, n)
                            && arr.read_block(r, data_sector, &mut scratch).is_err()
                    })
                    .collect();
                arr.record_bad(role, data_sector, n);
                for r in unreadable {
                    arr.record_bad(r, data_sector, n);
                }
                for (k, &r) in layout.data.iter().enumerate() {
                    if r == role || !arr.readable(r, data_sector, n) {
                        let off = ((stripe * data_blocks + k as u64) * chunk + at) * SECTOR;
                        lost.push((off, n * SECTOR));
                    }
                }
            }
            Err(e) => return Err(e),
        }
        at += n;
    }
    Ok(())
}

/// The array sector ranges `[start, end)` whose copy on `role` lies in its data sectors
/// `[x, x + n)` (adjacent ones merged).
pub(crate) fn array_ranges(arr: &Array, role: usize, x: u64, n: u64) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    // The walk's callback never fails.
    let _ = arr.mirror_runs(role, x, n, |_, s, _, run| {
        match ranges.last_mut() {
            Some(last) if last.1 == s => last.1 += run,
            _ => ranges.push((s, s + run)),
        }
        Ok(true)
    });
    ranges
}

/// `n` data sectors of a mirrored rebuild from data sector `x`, from other copies (client
/// writes into them held by the job); a run no copy can read whole is done again 4 KiB
/// at a time, so only the pages nobody can read are lost (as a parity rebuild and a
/// replace do). Returns the array byte ranges found lost.
fn rebuild_mirrored(
    arr: &Array,
    role: usize,
    x: u64,
    n: u64,
    keep: &[usize],
) -> Result<Vec<(u64, u64)>> {
    let mut lost = Vec::new();
    // One reused buffer (not cleared: a read that succeeds fills it, and nothing else of
    // it is written); clearing a fresh one cost 5 % of a RAID1 rebuild's CPU time.
    let mut buf = ScratchBufs(vec![scratch_take()]);
    arr.mirror_runs(role, x, n, |data_sector, _, p, run| {
        if !keep.is_empty() && p.copies.iter().all(|(r, _)| *r == role || keep.contains(r)) {
            // Its copy is the only one (the others left before it): kept as it is.
            return Ok(true);
        }
        if copy_mirrored(arr, role, data_sector, p, run, &mut buf[0])?.is_ok() {
            return Ok(true);
        }
        let mut at = 0;
        while at < run {
            let page = 8u64.min(run - at);
            arr.mirror_runs(role, data_sector + at, page, |d, s, p, k| {
                if let Err(unreadable) = copy_mirrored(arr, role, d, p, k, &mut buf[0])? {
                    // Nobody holds it: the target's copy and the copies that could not
                    // be read are recorded as bad (md's rule).
                    arr.record_bad(role, d, k);
                    for (r, dr) in unreadable {
                        arr.record_bad(r, dr, k);
                    }
                    lost.push((s * SECTOR, k * SECTOR));
                }
                Ok(true)
            })?;
            at += page;
        }
        Ok(true)
    })?;
    Ok(lost)
}

/// Copy `run` data sectors of `role` from data sector `data_sector` (array placement `p`)
/// from another copy: in the kernel where the members allow (no buffer), else through
/// `buf`. `Err` with the copies that failed to read if no copy could be read whole.
fn copy_mirrored(
    arr: &Array,
    role: usize,
    data_sector: u64,
    p: &raidkit_layout::Placement,
    run: u64,
    buf: &mut Vec<u8>,
) -> Result<std::result::Result<(), Vec<(usize, u64)>>> {
    let src = p
        .copies
        .iter()
        .find(|&&(r, d)| r != role && arr.readable(r, d, run));
    if src.is_some_and(|&(r, d)| arr.copy_member_range(r, d, role, data_sector, run)) {
        return Ok(Ok(()));
    }
    buf.resize((run * SECTOR) as usize, 0);
    let mut unreadable = Vec::new();
    if !arr.read_other_copy(role, p, run, buf, &mut unreadable) {
        return Ok(Err(unreadable));
    }
    arr.write_block(role, data_sector, buf)?;
    Ok(Ok(()))
}

impl Array {
    /// Data-sector ranges of `role` covered by the given bitmap chunks.
    pub(crate) fn bitmap_ranges_for_role(&self, role: usize, chunks: &[u64]) -> Vec<(u64, u64)> {
        let bmg = self.bm();
        let Some(bm) = bmg.as_ref() else {
            return Vec::new();
        };
        let cs = lock(bm).chunk_sectors;
        let g = &self.geo;
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut push = |a: u64, b: u64| {
            if let Some(last) = out.last_mut() {
                if last.1 >= a {
                    last.1 = last.1.max(b);
                    return;
                }
            }
            out.push((a, b));
        };
        match g.level {
            Level::Raid10 => {
                let size = g.array_sectors();
                for &i in chunks {
                    let mut s = i * cs;
                    let end = ((i + 1) * cs).min(size);
                    while s < end {
                        let Some(p) = g.locate(s) else { break };
                        let run = p.run.min(end - s);
                        for &(r, d) in &p.copies {
                            if r == role {
                                push(d, d + run);
                            }
                        }
                        s += run;
                    }
                }
                out.sort_unstable();
            }
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let total = g.stripes() * g.chunk_sectors;
                for &i in chunks {
                    // Whole stripes covering the chunk.
                    let c = g.chunk_sectors;
                    let a = (i * cs) / c * c;
                    let b = ((i + 1) * cs).div_ceil(c) * c;
                    push(a.min(total), b.min(total));
                }
            }
            _ => {
                let total = g.used_dev_sectors(role);
                for &i in chunks {
                    push((i * cs).min(total), ((i + 1) * cs).min(total));
                }
            }
        }
        out.retain(|(a, b)| a < b);
        out
    }
}
