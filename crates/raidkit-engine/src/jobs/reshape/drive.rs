//! Running a reshape from start to end, offline or online alike: add the new devices,
//! then each stage — write its superblocks, assemble the array again from them (a served
//! array switches to the new one without a client noticing), move the data or build new
//! members — and finally rebuild what the new shape still lacks from spares. Also
//! continuing a reshape found on the members, and reverting one.

use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::jobs::reshape::finish::{checkpoint, reverse, reverted};
use crate::jobs::reshape::start::{problems, stages, ReshapeRequest, Room, Stage};
use crate::jobs::reshape::{backup, mover, ReshapeEnd, ReshapeOptions};
use crate::locks::lock;
use crate::setup::assemble::{assemble_with, AssembleOptions, Position};
use raidkit_layout::reshape::Reshape;
use serde::Serialize;
use std::sync::Arc;

/// Where a running reshape is, for progress bars.
#[derive(Clone, Debug, Serialize)]
pub struct Progress {
    /// Stage number (1-based) and how many there are.
    pub stage: usize,
    /// Stages in all.
    pub stages: usize,
    /// `restripe`, `takeover`, `rebuild`, or `resync` (an array not stopped cleanly).
    pub what: &'static str,
    /// Done, in the stage's unit (array sectors for a restripe, data sectors for a
    /// rebuild).
    pub done: u64,
    /// Total.
    pub total: u64,
}

fn invalid(s: impl Into<String>) -> EngineError {
    EngineError::Invalid(s.into())
}

/// Write a stage's superblocks on `cur` (holding every client call off) and assemble the
/// array again from its live devices: the successor that serves from now on.
pub(crate) fn switch(
    cur: &Arc<Array>,
    backup_file: Option<std::path::PathBuf>,
    write: impl FnOnce(&Array) -> Result<()>,
) -> Result<Arc<Array>> {
    cur.switch_to(|| {
        cur.mark_clean_inner()?;
        write(cur)?;
        let devs: Vec<Arc<dyn BlockDev>> = {
            let all = cur.devs();
            cur.live_devices().iter().map(|&i| all[i].clone()).collect()
        };
        let opts = AssembleOptions {
            writable: true,
            metadata: Some(cur.metadata),
            backup_file,
            ..Default::default()
        };
        // The position the superblocks just written record is exact.
        assemble_with(devs, &opts, Position::Recorded)
    })
}

/// Refuse what md refuses before a reshape, and what is unsafe unless forced.
fn preflight(a: &Array, req: &ReshapeRequest) -> Result<()> {
    if !a.writable {
        return Err(invalid(
            "the array was assembled read-only; reassemble it for writing to reshape it",
        ));
    }
    if a.route().is_some() {
        return Err(invalid(
            "a reshape is already in progress on this array: continue it or revert it first",
        ));
    }
    never_reshaped(a)?;
    let p = problems(a);
    if !p.is_empty() && !req.force {
        return Err(invalid(format!(
            "refusing to reshape: {} (force to reshape anyway)",
            p.join("; ")
        )));
    }
    Ok(())
}

/// What no reshape goes past, forced or not (the plan refuses it too): a write-intent
/// bitmap, a checksum sidecar.
pub(crate) fn never_reshaped(a: &Array) -> Result<()> {
    if a.has_bitmap() {
        return Err(invalid(
            "the array has a write-intent bitmap: remove it first (grow the bitmap to none), reshape, then add it back",
        ));
    }
    if a.checksums().is_some() {
        return Err(invalid(
            "a checksum sidecar is attached: it covers a fixed array size; reshape without it and recompute it afterwards",
        ));
    }
    Ok(())
}

/// Reshape `arr` as `req` asks, to the end (or until `opts.stop`). Returns the array that
/// serves afterwards and how it ended.
pub fn reshape(
    arr: &Arc<Array>,
    req: &ReshapeRequest,
    opts: &ReshapeOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Arc<Array>, ReshapeEnd)> {
    let mut cur = arr.current();
    preflight(&cur, req)?;
    let st = stages(&cur.geo, req)?;
    cur.check_shrink(&cur.geo, &st, req)?;
    if cur.metadata == crate::sb::Metadata::V090
        && cur.geo.level == raidkit_layout::Level::Raid0
        && st.len() > 1
    {
        return Err(invalid(
            "growing a RAID0 goes through RAID4 with a member built during the reshape, which 0.90 metadata cannot record; use 1.x metadata",
        ));
    }
    // The first restripe's room is checked before anything is written.
    if let Some(Stage::Restripe { to }) = st.iter().find(|s| matches!(s, Stage::Restripe { .. })) {
        let from = st
            .iter()
            .take_while(|s| !matches!(s, Stage::Restripe { .. }))
            .last()
            .map_or(cur.geo.clone(), |s| s.to().clone());
        cur.restripe_room(&from, to, req)?;
    }
    for d in &req.add {
        cur.add_spare(d.clone(), req.force)?;
    }
    let n = st.len();
    for (k, s) in st.iter().enumerate() {
        let mut report = |what: &'static str, done: u64, total: u64| {
            progress(&Progress {
                stage: k + 1,
                stages: n,
                what,
                done,
                total,
            })
        };
        match s {
            Stage::Takeover { to, sources } => {
                cur = switch(&cur, None, |a| a.write_takeover(to, sources))?;
                report("takeover", 1, 1);
            }
            Stage::Restripe { to } => {
                let mut from = cur.geo.clone();
                let mut to = to.clone();
                let room = cur.restripe_room(&from, &to, req)?;
                if let Room::OffsetChange { size: Some(z), .. } = room {
                    from = resized(&from, z)?;
                    to = resized(&to, z)?;
                }
                let to = &to;
                let file = match &room {
                    Room::Backup { file } => {
                        backup::create(std::path::Path::new(file))?;
                        Some(std::path::PathBuf::from(file))
                    }
                    Room::OffsetChange { .. } => None,
                };
                cur = switch(&cur, file.clone(), |a| {
                    a.write_restripe_start(&from, to, &room)
                })?;
                let o = ReshapeOptions {
                    backup_file: file.or_else(|| opts.backup_file.clone()),
                    ..opts.clone()
                };
                let end = mover::run(&cur, &o, &mut |d, t| report("restripe", d, t))?;
                if end != ReshapeEnd::Finished {
                    return Ok((cur, end));
                }
            }
        }
    }
    rebuild_missing(&cur, opts, &mut |d, t| {
        progress(&Progress {
            stage: n,
            stages: n,
            what: "rebuild",
            done: d,
            total: t,
        })
    })?;
    // A reshape forced onto an array not stopped cleanly: the resync md runs after it.
    resync_if_unclean(&cur, opts, &mut |p| progress(p))?;
    Ok((cur, ReshapeEnd::Finished))
}

/// `g` with another component size.
pub(crate) fn resized(
    g: &raidkit_layout::Geometry,
    dev_sectors: u64,
) -> Result<raidkit_layout::Geometry> {
    Ok(raidkit_layout::Geometry::new(
        g.level,
        g.layout,
        g.chunk_sectors,
        g.raid_disks,
        dev_sectors,
        g.member_sectors.clone(),
    )?)
}

/// Build the roles the new shape lacks from spares (a takeover's new parity, Q or
/// mirrors), as md recovers onto spares.
fn rebuild_missing(
    cur: &Array,
    opts: &ReshapeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    if !cur.geo.level.has_redundancy() || cur.missing_roles().is_empty() || cur.spare_count() == 0 {
        return Ok(());
    }
    let ro = crate::rebuild::RebuildOptions {
        stop: opts.stop.clone(),
        max_bytes_per_sec: opts.max_bytes_per_sec.clone(),
        ..Default::default()
    };
    crate::rebuild::rebuild(cur, &ro, progress)?;
    cur.mark_clean()
}

/// Continue the reshape found on the members of `arr` (raidkit's, the kernel's or
/// mdadm's) to the end or until `opts.stop`.
///
/// An array not stopped cleanly (`resync_offset` set: client writes in flight at the
/// crash may have left parity stale, md's write hole) keeps that resync owed through the
/// reshape, as md keeps `resync_offset`, and is resynced whole once the reshape has
/// finished (a resync of the reshaped part first would be redone at every restart).
pub fn continue_reshape(
    arr: &Arc<Array>,
    opts: &ReshapeOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ReshapeEnd> {
    let cur = arr.current();
    let end = mover::run(&cur, opts, &mut |d, t| {
        progress(&Progress {
            stage: 1,
            stages: 1,
            what: "restripe",
            done: d,
            total: t,
        })
    })?;
    if end == ReshapeEnd::Finished {
        rebuild_missing(&cur, opts, &mut |d, t| {
            progress(&Progress {
                stage: 1,
                stages: 1,
                what: "rebuild",
                done: d,
                total: t,
            })
        })?;
        // Finished: a resync still owed (stopped, or never run) runs over the whole array
        // now, as md does after a reshape; stopped, it stays recorded for the next start.
        resync_if_unclean(&arr.current(), opts, progress)?;
    }
    Ok(end)
}

/// If `cur` (no longer reshaping) was not stopped cleanly and is writable, resync it
/// from where a resync owed resumes (md's `resync_offset`: 0 after a crash); one stopped
/// part-way resumes where it stopped at the next start.
fn resync_if_unclean(
    cur: &Array,
    opts: &ReshapeOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<()> {
    if !cur.writable || !cur.needs_resync() {
        return Ok(());
    }
    let so = crate::jobs::sync::SyncOptions {
        full: true,
        stop: opts.stop.clone(),
        max_bytes_per_sec: opts.max_bytes_per_sec.clone(),
        ..Default::default()
    };
    crate::jobs::sync::run_opts(
        cur,
        crate::jobs::sync::SyncMode::Resync,
        &so,
        &mut |d, t| {
            progress(&Progress {
                stage: 1,
                stages: 1,
                what: "resync",
                done: d,
                total: t,
            })
        },
    )?;
    Ok(())
}

/// Turn the reshape of `arr` around where it stands (no mover may be running): the data
/// moved so far goes back to the old shape. The position must suit the old shape's
/// steps; if it does not, the reshape first goes on to the next position that does.
/// Returns the array that serves afterwards (reshaping back; continue it to finish).
pub fn revert(arr: &Arc<Array>, opts: &ReshapeOptions) -> Result<Arc<Array>> {
    let cur = arr.current();
    let r = cur
        .route()
        .ok_or_else(|| invalid("no reshape is in progress on this array"))?;
    let back = reversed_plan(&r.plan)?;
    refuse_unbuilt_way_back(&cur, &r.plan)?;
    loop {
        let (p, recorded) = r.window.positions();
        if p == recorded && back.position_valid(p) {
            break;
        }
        if p != recorded && back.position_valid(p) {
            checkpoint(&cur, &r, p)?;
            continue;
        }
        // Go on to the next position both shapes can record.
        let target = next_common(&r.plan, &back, p).ok_or_else(|| {
            invalid("the reshape is too far on to turn around: let it finish, then reshape back")
        })?;
        let o = ReshapeOptions {
            stop_at: Some(target),
            ..opts.clone()
        };
        if mover::run(&cur, &o, &mut |_, _| {})? == ReshapeEnd::Finished {
            return Err(invalid(
                "the reshape finished before it could be turned around; reshape back instead",
            ));
        }
    }
    let old = r.plan.old().clone();
    let info = r.info;
    let position = r.window.positions().0;
    let file = lock(&r.backup_file).clone();
    let back = switch(&cur, file, |a| {
        let mut meta = lock(&a.meta.sb);
        // A resync owed resumes in the new geometry's sync space; back in the old one
        // its resume point means nothing, so it starts from 0 (see the note at the end
        // of jobs/sync/reshaping.rs).
        let owed = meta.resync_from != raidkit_format::MAX_SECTOR;
        if owed {
            meta.resync_from = 0;
        }
        let live = a.live_devices();
        for &i in &live {
            let mut i2 = info;
            i2.position = position;
            reverted(
                &mut meta.sbs[i],
                &i2,
                old.level.to_md(),
                old.layout,
                old.chunk_sectors,
                old.raid_disks,
            )?;
        }
        a.write_superblocks(&mut meta, |sb| {
            if owed {
                sb.set_resync_offset(0);
            }
        })
    })?;
    // The way back is as long as the way here was: progress counts from the turn.
    if let Some(r) = back.route() {
        let _ = r.origin.set(position);
    }
    Ok(back)
}

/// Can the reshape of `arr` be turned around ([`revert`])? Err says why not (no reshape
/// in progress, one that cannot run the other way, or one that builds a member the old
/// shape would take for complete). Asked before stopping the mover for a turn, so a
/// refused turn leaves the reshape running.
pub fn can_revert(arr: &Arc<Array>) -> Result<()> {
    let cur = arr.current();
    let r = cur
        .route()
        .ok_or_else(|| invalid("no reshape is in progress on this array"))?;
    reversed_plan(&r.plan)?;
    refuse_unbuilt_way_back(&cur, &r.plan)
}

/// A member the reshape builds ([`raidkit_layout::reshape::builds_member`]: the Q of a
/// RAID5→6 conversion, empty before it) holds its blocks only where the reshape has
/// passed. Turned back, the old shape would take it as complete everywhere (parity that
/// was never written, reconstructions from it wrong), so the turn is refused.
fn refuse_unbuilt_way_back(cur: &Array, plan: &Reshape) -> Result<()> {
    let meta = lock(&cur.meta.sb);
    let built = cur.live_devices().into_iter().find_map(|i| {
        let sb = &meta.sbs[i];
        match sb.own_role() {
            crate::sb::Role::Active(r) if plan.builds(r, sb.rebuilding()) => Some(r),
            _ => None,
        }
    });
    match built {
        Some(r) => Err(invalid(format!(
            "this reshape builds the member in role {r} (it holds nothing where the reshape has not been yet): it cannot be turned back; let it finish, then reshape back"
        ))),
        None => Ok(()),
    }
}

/// The reshape back: old and new swapped, the direction flipped.
fn reversed_plan(p: &Reshape) -> Result<Reshape> {
    Reshape::new(
        p.new_geometry().clone(),
        p.old().clone(),
        p.new_offsets().to_vec(),
        p.old_offsets().to_vec(),
        reverse(p.direction()),
    )
    .map_err(|e| invalid(format!("this reshape cannot be turned around: {e}")))
}

/// The first position from `p` on (in the direction of travel) that both the reshape and
/// the reshape back can record.
fn next_common(fwd: &Reshape, back: &Reshape, p: u64) -> Option<u64> {
    let a = fwd.step_sectors().max(1);
    let b = back.step_sectors().max(1);
    let g = {
        let (mut x, mut y) = (a, b);
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    let l = a / g * b;
    let t = match fwd.direction() {
        raidkit_layout::reshape::Direction::Forwards => p.div_ceil(l).checked_mul(l)?,
        raidkit_layout::reshape::Direction::Backwards => p / l * l,
    };
    back.position_valid(t).then_some(t)
}
