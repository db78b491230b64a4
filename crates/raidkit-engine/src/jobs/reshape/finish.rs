//! Recording a reshape's position (a checkpoint), writing the superblocks of a finished
//! reshape, and reverting one.

use crate::array::reshape::Route;
use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::locks::lock;
use crate::sb::{Role, Super};
use raidkit_format::reshape::ReshapeInfo;
use raidkit_format::v1;
use raidkit_layout::reshape::{Direction, Reshape};

/// A checkpoint: flush everything moved so far, then record `position` as
/// `reshape_position` on every member (events + 1) and wait for it. From then on a
/// restart continues from `position`. A member the reshape builds
/// ([`raidkit_layout::reshape::builds_member`]) is complete where the new geometry is:
/// its `recovery_offset` follows the position going forwards, as md keeps it (md refuses
/// a dirty array whose built member lags the position).
pub(crate) fn record_position(arr: &Array, plan: &Reshape, position: u64) -> Result<()> {
    arr.flush_inner()?;
    let built_to = built_dev_sectors(arr.geometry(), position);
    let builds = |sb: &Super| match sb.own_role() {
        Role::Active(role) => plan.builds(role, sb.rebuilding()),
        _ => false,
    };
    let mut meta = lock(&arr.meta.sb);
    arr.write_superblocks(&mut meta, |sb| {
        if let Some(mut r) = sb.reshape() {
            r.position = position;
            sb.set_reshape(&r);
            let built = builds(sb);
            if let (Super::V1(s), Some(d), false, true) = (&mut *sb, built_to, r.backwards, built) {
                s.recovery_offset = s.recovery_offset.max(d);
            }
        }
    })
}

/// Member sectors of the new geometry `g` wholly behind a forwards reshape at array
/// sector `position` (whole stripes); None for levels without parity.
fn built_dev_sectors(g: &raidkit_layout::Geometry, position: u64) -> Option<u64> {
    if !g.level.has_parity() {
        return None;
    }
    let stripe = g.full_stripe_sectors().filter(|&w| w > 0)?;
    (position / stripe).checked_mul(g.chunk_sectors)
}

/// A checkpoint of a running reshape: [`record_position`], then the window learns it.
pub(crate) fn checkpoint(arr: &Array, r: &Route, position: u64) -> Result<()> {
    record_position(arr, &r.plan, position)?;
    r.window.set_recorded(position);
    Ok(())
}

/// Everything is moved: write the superblocks of the new geometry on every member (as the
/// kernel does when it finishes: data starts moved, reshape fields cleared, the members
/// past the new count spares), make the members leaving a shrink spares, and take the
/// route down (the array is plain again, at its new size).
pub(crate) fn finish(arr: &Array, r: &Route) -> Result<()> {
    arr.flush_inner()?;
    let new_n = r.plan.new_geometry().raid_disks;
    {
        let mut meta = lock(&arr.meta.sb);
        for role in meta.roles.iter_mut() {
            if *role < 0xff00 && usize::from(*role) >= new_n {
                *role = v1::role::SPARE;
            }
        }
        arr.write_superblocks(&mut meta, |sb| {
            sb.finish_reshape();
            if let Super::V090(s) = sb {
                recount_090_spares(s);
            }
        })?;
    }
    let leaving: Vec<_> = arr.update_slots(|slots| {
        let n = slots.len().min(new_n);
        slots.drain(n..).flatten().collect()
    });
    for m in leaving {
        if !m.is_failed() {
            arr.spares().push(m.index);
        }
    }
    arr.take_route();
    // Everything is moved and recorded (the final superblocks): a client write that took
    // the route before it came down and waits in the window for the last stretch to be
    // recorded may go now, to the new geometry (the array's own), instead of finding no
    // mover left to wait for.
    r.window.with(|st| {
        debug_assert_eq!(
            st.progress,
            r.plan.end_position(),
            "finished short of the end"
        );
        st.recorded = st.progress;
        st.backup = None;
        st.mover = false;
    });
    Ok(())
}

/// 0.90: after members left the array, count the spare descriptors again.
fn recount_090_spares(s: &mut raidkit_format::v090::SuperblockV090) {
    use raidkit_format::v090::disk_state::{ACTIVE, FAULTY, REMOVED};
    let raid = s.raid_disks;
    let spares = s
        .disks
        .iter()
        .filter(|d| {
            (d.number != 0 || d.major != 0 || d.minor != 0 || d.raid_disk != 0 || d.state != 0)
                && d.state & (ACTIVE | FAULTY | REMOVED) == 0
                && d.raid_disk >= raid
        })
        .count() as u32;
    s.spare_disks = spares;
    s.nr_disks = s.active_disks + s.spare_disks;
    s.working_disks = s.active_disks + s.spare_disks;
}

/// The reshape of `info` turned around at its position (mdadm's `revert-reshape`): the new
/// geometry becomes the old one and the other way round, the data starts too, and the
/// direction flips. 0.90 records no direction flag, so only a reshape that changes the
/// member count can be reverted there.
pub(crate) fn reverted(
    sb: &mut Super,
    info: &ReshapeInfo,
    old_level: i32,
    old_layout: u32,
    old_chunk: u64,
    old_n: usize,
) -> Result<()> {
    let delta = -info.delta_disks;
    if matches!(sb, Super::V090(_)) && delta == 0 {
        return Err(EngineError::Invalid(
            "0.90 metadata cannot record a reshape running backwards: only a reshape that changes the number of members can be reverted on it".into(),
        ));
    }
    let mine = sb.reshape().unwrap_or(*info);
    let back = ReshapeInfo {
        position: info.position,
        delta_disks: delta,
        new_level: old_level,
        new_layout: old_layout,
        new_chunk_sectors: old_chunk,
        backwards: ReshapeInfo::backwards_for(delta, !info.backwards),
        new_offset: mine.new_offset.map(|o| -o),
    };
    if let (Super::V1(s), Some(o)) = (&mut *sb, mine.new_offset) {
        let o = i64::from(o);
        s.data_offset = s.data_offset.saturating_add_signed(o);
        s.data_size = s.data_size.saturating_add_signed(-o);
    }
    sb.set_shape(
        info.new_level,
        info.new_layout,
        info.new_chunk_sectors,
        old_n,
    );
    sb.set_reshape(&back);
    Ok(())
}

/// The direction a reverted reshape runs.
pub(crate) fn reverse(d: Direction) -> Direction {
    match d {
        Direction::Forwards => Direction::Backwards,
        Direction::Backwards => Direction::Forwards,
    }
}
