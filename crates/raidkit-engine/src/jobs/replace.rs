//! md's hot replace: copy an active member's role onto a spare while the member stays
//! active, so redundancy is never reduced. Writes go to both for the whole range; the copy
//! reads the old member first and redundancy where it cannot be read, checkpointing the
//! replacement's `recovery_offset` (feature REPLACEMENT + RECOVERY_OFFSET, same role in
//! the role table as the original). When done the old member is marked faulty and
//! removed, and the replacement takes the role. A stop part-way resumes from the
//! checkpoint (the kernel continues it too). No bad-block log is copied.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::scratch::{scratch_take, ScratchBufs};
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::jobs::copy::{copy_sectors, CopyEnd, CopyLoop, MIRROR_STEP_SECTORS};
use crate::jobs::pipeline;
use crate::jobs::rebuild::RebuildReport;
use crate::jobs::rebuild::{array_ranges, RebuildOptions};
use crate::jobs::stripe_run;
use crate::locks::lock;
use crate::meta::sb::Super;
use raidkit_format::v1::{self, feature};
use raidkit_layout::SECTOR;
use std::sync::Arc;

impl Array {
    /// Start replacing the active member `device` (md's `--replace`): a spare (`with`,
    /// or any spare) joins the member's role as its replacement. The copy itself is
    /// [`replace`]. Returns the role.
    pub fn start_replace(&self, device: &str, with: Option<&str>) -> Result<usize> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing to replace members"
                    .into(),
            ));
        }
        if !self.geo.level.has_redundancy() {
            return Err(EngineError::Invalid(format!(
                "{} has no redundancy to keep while replacing; copy the device instead",
                self.geo.level
            )));
        }
        if self.metadata == crate::sb::Metadata::V090 {
            return Err(EngineError::Invalid(
                "0.90 metadata cannot record a replacement (two devices in one role); fail the member, then add the new device".into(),
            ));
        }
        let (role, m) = self
            .slots()
            .iter()
            .enumerate()
            .find_map(|(r, m)| {
                m.as_ref()
                    .filter(|m| m.dev.name() == device && !m.is_failed())
                    .map(|m| (r, m.clone()))
            })
            .ok_or_else(|| {
                EngineError::Invalid(format!("{device} is not an active member of this array"))
            })?;
        if m.recovery().is_some() {
            return Err(EngineError::Invalid(format!(
                "{device} is still being rebuilt; let the recovery finish first"
            )));
        }
        if self.replacement(role).is_some() {
            return Err(EngineError::Invalid(format!(
                "role {role} ({device}) is already being replaced"
            )));
        }
        // Quiesce writes while the replacement joins.
        let _gate = self.pause_writes();
        let mut meta = lock(&self.meta.sb);
        let devs = self.devs().clone();
        let idx = {
            let mut spares = self.spares();
            let pos = match with {
                Some(w) => spares
                    .iter()
                    .position(|&i| devs[i].name() == w)
                    .ok_or_else(|| {
                        EngineError::Invalid(format!(
                            "{w} is not a spare of this array; add it as a spare first"
                        ))
                    })?,
                None => spares.len().checked_sub(1).ok_or_else(|| {
                    EngineError::Invalid(
                        "there is no spare to replace it with; add one first".into(),
                    )
                })?,
            };
            spares.remove(pos)
        };
        let devnum = meta.sbs[idx].dev_number();
        if devnum >= meta.roles.len() {
            meta.roles.resize(devnum + 1, v1::role::SPARE);
        }
        meta.roles[devnum] = role as u16;
        if let Super::V1(s) = &mut meta.sbs[idx] {
            s.feature_map |= feature::REPLACEMENT | feature::RECOVERY_OFFSET;
            s.feature_map &= !feature::RECOVERY_BITMAP;
            s.recovery_offset = 0;
        }
        let data_offset = meta.sbs[idx].data_offset();
        let r = Arc::new(Member::new(
            devs[idx].clone(),
            idx,
            data_offset,
            Some(0),
            Vec::new(),
        ));
        self.set_replacement(role, Some(r));
        self.write_superblocks(&mut meta, |_| {})?;
        Ok(role)
    }
}

pub(crate) fn checkpoint(arr: &Array, r: &Member, at: u64) -> Result<()> {
    r.dev
        .flush()
        .map_err(|e| EngineError::io(r.dev.name(), "flushing the replacement", e))?;
    let mut meta = lock(&arr.meta.sb);
    if let Super::V1(s) = &mut meta.sbs[r.index] {
        s.feature_map |= feature::REPLACEMENT | feature::RECOVERY_OFFSET;
        s.recovery_offset = at;
    }
    arr.write_superblocks(&mut meta, |_| {})
}

/// Copy every replacement in progress to the end (resuming from its checkpoint), then
/// let it take over its role. `progress(done, total)` in data sectors.
pub fn replace(
    arr: &Array,
    opts: &RebuildOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RebuildReport> {
    let mut rep = RebuildReport::default();
    for role in arr.replacement_roles() {
        let Some(r) = arr.replacement(role) else {
            continue;
        };
        if replace_role(arr, role, &r, opts, progress, &mut rep)? {
            rep.roles.push(role);
        }
    }
    Ok(rep)
}

/// Copy one role; true when finished (false: stopped at a checkpoint).
pub(crate) fn replace_role(
    arr: &Array,
    role: usize,
    r: &Arc<Member>,
    opts: &RebuildOptions,
    progress: &mut dyn FnMut(u64, u64),
    rep: &mut RebuildReport,
) -> Result<bool> {
    let full = copy_sectors(&arr.geo, role);
    let old_name = arr
        .slots()
        .get(role)
        .cloned()
        .flatten()
        .map(|m| m.dev.name().to_string())
        .unwrap_or_default();
    let start = r.recovery().unwrap_or(0);
    arr.emit(ArrayEvent::ReplaceStarted {
        role,
        device: old_name.clone(),
        replacement: r.dev.name().to_string(),
        from: start,
    });
    let mut lost: Vec<(u64, u64)> = Vec::new();
    let ranges = [(start.min(full), full)];
    let copy = CopyLoop {
        opts,
        target: r,
        target_is: "replacement",
        ranges: &ranges,
        checkpoints: true,
    };
    let ended = if arr.geo.level.has_parity() {
        // Several runs of stripes in flight, as a rebuild has: each run's stripes locked
        // (ascending, on the job's thread) from before the old member is read until the
        // replacement's recovery point has moved past them, so a client write into one
        // (which goes to both) lands before the read or after the copy, never in between.
        let chunk = arr.geo.chunk_sectors;
        let run_stripes = stripe_run::stripes_per_run(chunk, arr.geo.stripes());
        copy.run_pipelined(
            run_stripes * chunk,
            chunk,
            pipeline::depth_for(run_stripes * chunk * SECTOR),
            progress,
            |x, n| {
                (x / chunk..(x + n).div_ceil(chunk))
                    .map(|s| arr.lock_stripe(s))
                    .collect::<Vec<_>>()
            },
            |(x, n)| replace_run(arr, role, r, x, n),
            |end, out| {
                lost.extend(out?);
                r.set_recovery(Some(end.min(full)));
                Ok(())
            },
            |x| checkpoint(arr, r, x.min(full)),
        )?
    } else {
        // Several regions in flight, each held against client writes into it (by array
        // range) from before the old member's copy is read until it is written to the
        // replacement: a client write there (which goes to both) lands before the read
        // or after the copy, never in between; writes elsewhere go on (they used to wait
        // for every step: `pause_writes`).
        let _ordered = arr.order_writes_by_range();
        copy.run_pipelined(
            MIRROR_STEP_SECTORS,
            1,
            pipeline::depth_for(MIRROR_STEP_SECTORS * SECTOR),
            progress,
            |x, n| arr.hold_ranges(&array_ranges(arr, role, x, n)),
            |(x, n)| replace_mirrored(arr, role, r, x, n),
            |end, out| {
                lost.extend(out?);
                r.set_recovery(Some(end.min(full)));
                Ok(())
            },
            |x| checkpoint(arr, r, x.min(full)),
        )?
    };
    if let CopyEnd::Stopped { at } = ended {
        checkpoint(arr, r, at)?;
        arr.add_lost(&lost);
        rep.lost.extend(lost);
        return Ok(false);
    }
    r.dev
        .flush()
        .map_err(|e| EngineError::io(r.dev.name(), "flushing the replacement", e))?;
    take_over(arr, role, r)?;
    arr.add_lost(&lost);
    rep.sectors += copy.total();
    rep.lost.extend(lost.iter().copied());
    arr.emit(ArrayEvent::ReplaceFinished {
        role,
        device: old_name,
        replacement: r.dev.name().to_string(),
        lost,
    });
    Ok(true)
}

/// Write `buf` to the replacement at data sector `data_sector`.
fn write_replacement(r: &Member, data_sector: u64, buf: &[u8]) -> Result<()> {
    r.dev
        .write_at(buf, (r.data_offset + data_sector) * SECTOR)
        .map_err(|e| EngineError::io(r.dev.name(), "writing the replacement", e))
}

/// The stripes of a parity replace over data sectors `[x, x + n)` (whole stripes, locked
/// by the job): the old member's chunks of all of them read with one IO and written to
/// the replacement with one; where that read fails, stripe by stripe
/// ([`replace_stripe`]). Returns the array byte ranges found lost.
fn replace_run(arr: &Array, role: usize, r: &Member, x: u64, n: u64) -> Result<Vec<(u64, u64)>> {
    let chunk = arr.geo.chunk_sectors;
    let (first, end) = (x / chunk, (x + n).div_ceil(chunk));
    let (at, sectors) = (first * chunk, (end - first) * chunk);
    let mut lost = Vec::new();
    // A reused buffer, not cleared: only a read that filled all of it is written.
    let mut buf = ScratchBufs(vec![scratch_take()]);
    let buf = &mut buf[0];
    buf.resize((sectors * SECTOR) as usize, 0);
    if arr.readable(role, at, sectors) && arr.read_block(role, at, buf).is_ok() {
        write_replacement(r, at, buf)?;
        return Ok(lost);
    }
    for stripe in first..end {
        replace_stripe(arr, role, r, stripe, buf, &mut lost)?;
    }
    Ok(lost)
}

/// One stripe of a parity replace (locked by the caller): the old member's block, or
/// redundancy page by page where it cannot be read, through `scratch` (resized).
fn replace_stripe(
    arr: &Array,
    role: usize,
    r: &Member,
    stripe: u64,
    scratch: &mut Vec<u8>,
    lost: &mut Vec<(u64, u64)>,
) -> Result<()> {
    let chunk = arr.geo.chunk_sectors;
    let stripe_start = stripe * chunk;
    arr.debug_assert_stripe_locked(stripe);
    scratch.resize((chunk * SECTOR) as usize, 0);
    let buf = &mut scratch[..(chunk * SECTOR) as usize];
    let direct =
        arr.readable(role, stripe_start, chunk) && arr.read_block(role, stripe_start, buf).is_ok();
    if !direct {
        let layout = arr.stripe_layout(stripe)?;
        let data_blocks = layout.data.len() as u64;
        let page = 8u64.min(chunk);
        let mut at = 0;
        while at < chunk {
            let n = page.min(chunk - at);
            let page_buf = &mut buf[(at * SECTOR) as usize..((at + n) * SECTOR) as usize];
            let ok = arr.readable(role, stripe_start + at, n)
                && arr.read_block(role, stripe_start + at, page_buf).is_ok();
            if !ok {
                // The scratch holds other bytes: a page nobody can supply is written as
                // zeros (and recorded bad on the replacement).
                page_buf.fill(0);
                match arr.read_stripe(stripe, &layout, at, n, true) {
                    Ok(known) => {
                        let block = known.block_of(&layout, role);
                        if block.len() == page_buf.len() {
                            page_buf.copy_from_slice(block);
                        }
                    }
                    Err(EngineError::Unreadable { .. }) => {
                        r.add_bad(stripe_start + at, n);
                        if let Some(k) = layout.data.iter().position(|&d| d == role) {
                            let off = ((stripe * data_blocks + k as u64) * chunk + at) * SECTOR;
                            lost.push((off, n * SECTOR));
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            at += n;
        }
    }
    write_replacement(r, stripe_start, buf)
}

/// `n` data sectors of a mirrored replace from data sector `x` (client writes into them
/// held by the job): the old member's copy, or another copy 4 KiB at a time where it
/// cannot be read. Returns the array byte ranges found lost.
fn replace_mirrored(
    arr: &Array,
    role: usize,
    r: &Member,
    x: u64,
    n: u64,
) -> Result<Vec<(u64, u64)>> {
    let mut lost = Vec::new();
    let mut buf = vec![0u8; (n * SECTOR) as usize];
    let direct = arr.readable(role, x, n) && arr.read_block(role, x, &mut buf).is_ok();
    if !direct {
        let mut at = 0;
        while at < n {
            let page = 8u64.min(n - at);
            let page_buf = &mut buf[(at * SECTOR) as usize..((at + page) * SECTOR) as usize];
            let data_sector = x + at;
            let ok = arr.readable(role, data_sector, page)
                && arr.read_block(role, data_sector, page_buf).is_ok();
            if !ok {
                // Another copy of the same array sectors.
                let mut failed = Vec::new();
                arr.mirror_runs(role, data_sector, page, |d, s, p, run| {
                    let o = ((d - data_sector) * SECTOR) as usize;
                    let sub = &mut page_buf[o..o + (run * SECTOR) as usize];
                    if !arr.read_other_copy(role, p, run, sub, &mut failed) {
                        r.add_bad(d, run);
                        lost.push((s * SECTOR, run * SECTOR));
                    }
                    Ok(true)
                })?;
            }
            at += page;
        }
    }
    write_replacement(r, x, &buf)?;
    Ok(lost)
}

/// The copy is done: quiesce, the replacement gets the role, the old member is marked
/// faulty (not written any more), then removed.
fn take_over(arr: &Array, role: usize, r: &Arc<Member>) -> Result<()> {
    let _gate = arr.pause_writes();
    let mut meta = lock(&arr.meta.sb);
    let old = arr.slots().get(role).cloned().flatten();
    let old_devnum = old.as_ref().map(|m| meta.sbs[m.index].dev_number());
    if let Some(d) = old_devnum {
        if let Some(x) = meta.roles.get_mut(d) {
            *x = v1::role::FAULTY;
        }
    }
    if let Super::V1(s) = &mut meta.sbs[r.index] {
        s.feature_map &=
            !(feature::REPLACEMENT | feature::RECOVERY_OFFSET | feature::RECOVERY_BITMAP);
        s.recovery_offset = 0;
    }
    r.set_recovery(None);
    arr.set_slot(role, Some(r.clone()));
    arr.set_replacement(role, None);
    if let Some(m) = &old {
        Array::set_failed(m);
    }
    arr.write_superblocks(&mut meta, |_| {})?;
    if let Some(d) = old_devnum {
        if let Some(x) = meta.roles.get_mut(d) {
            *x = v1::role::SPARE;
        }
        arr.write_superblocks(&mut meta, |_| {})?;
    }
    Ok(())
}
