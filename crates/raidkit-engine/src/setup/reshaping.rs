//! Assembling an array stopped in the middle of a reshape (by the kernel, mdadm or
//! raidkit): both geometries from the superblocks (md-format §7.1), a check that each
//! one can run with the members present, the array built on the new geometry with the
//! old one as a view, and the position checked: the real progress of a stale record is
//! found from the data (Linux 6.1), and mdadm's backup file is restored (or, read-only,
//! served) where it still holds data the members may not.

use crate::array::reshape::view::evidence;
use crate::array::reshape::window::Window;
use crate::array::reshape::{Overlay, Route};
use crate::array::{lock, Array, Member};
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::jobs::reshape::backup;
use crate::sb::Super;
use crate::setup::assemble::Position;
use raidkit_format::reshape::ReshapeInfo;
use raidkit_layout::reshape::{Direction, Reshape, Side};
use raidkit_layout::{Geometry, Level};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Steps past the record [`Reshape::infer_progress`] looks at.
const INFER_STEPS: u64 = 64;

/// A reshape recorded in the superblocks.
pub(crate) struct Reshaping {
    pub(crate) plan: Reshape,
    pub(crate) info: ReshapeInfo,
    /// Per role: does the member's superblock say it is being rebuilt in its role
    /// ([`Super::rebuilding`])? Whether the reshape builds it is [`Reshaping::builds`].
    rebuilding: Vec<bool>,
}

fn unsupported(uuid: &str, why: String) -> EngineError {
    EngineError::Unsupported {
        uuid: uuid.to_string(),
        what: format!("the reshape recorded in the superblocks cannot be followed: {why}"),
        advice: "assemble it with the kernel (mdadm --assemble), or check the members given".into(),
    }
}

impl Reshaping {
    /// The reshape `fresh` records, with `slots` (role → index into `sbs`) for the data
    /// starts. None if no reshape is in progress.
    pub(crate) fn of(
        fresh: &Super,
        sbs: &[Super],
        slots: &[Option<usize>],
        uuid: &str,
    ) -> Result<Option<Reshaping>> {
        let Some(info) = fresh.reshape() else {
            return Ok(None);
        };
        let n = fresh.raid_disks();
        let old_n = usize::try_from(n as i64 - i64::from(info.delta_disks))
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| unsupported(uuid, format!("delta_disks {}", info.delta_disks)))?;
        let lv = |l: i32| Level::from_md(l).ok_or_else(|| unsupported(uuid, format!("level {l}")));
        let size = fresh.size_sectors();
        let old = Geometry::new(
            lv(fresh.level())?,
            fresh.layout(),
            fresh.chunk_sectors(),
            old_n,
            size,
            Vec::new(),
        )?;
        let new = Geometry::new(
            lv(info.new_level)?,
            info.new_layout,
            info.new_chunk_sectors,
            n,
            size,
            Vec::new(),
        )?;
        let base = fresh.data_offset();
        let sb_of = |r: usize| slots.get(r).copied().flatten().map(|i| &sbs[i]);
        let old_offsets: Vec<u64> = (0..old_n)
            .map(|r| sb_of(r).map_or(base, |s| s.data_offset()))
            .collect();
        let new_offsets: Vec<u64> = (0..n)
            .map(|r| {
                let s = sb_of(r);
                let o = s.map_or(base, |s| s.data_offset());
                let delta = s
                    .and_then(|s| s.reshape())
                    .or(Some(info))
                    .and_then(|i| i.new_offset)
                    .unwrap_or(0);
                o.checked_add_signed(i64::from(delta)).unwrap_or(o)
            })
            .collect();
        let dir = if info.backwards {
            Direction::Backwards
        } else {
            Direction::Forwards
        };
        let plan = Reshape::new(old, new, old_offsets, new_offsets, dir)
            .map_err(|e| unsupported(uuid, e.to_string()))?;
        if !plan.position_valid(info.position) {
            return Err(unsupported(
                uuid,
                format!(
                    "reshape_position {} is not a position md can record for this reshape",
                    info.position
                ),
            ));
        }
        let rebuilding = (0..slots.len())
            .map(|r| sb_of(r).is_some_and(Super::rebuilding))
            .collect();
        Ok(Some(Reshaping {
            plan,
            info,
            rebuilding,
        }))
    }

    /// Is the member in `role` one the reshape builds
    /// ([`raidkit_layout::reshape::builds_member`]): unreadable in the old geometry,
    /// complete wherever the new geometry holds data?
    pub(crate) fn builds(&self, role: usize) -> bool {
        let rebuilding = self.rebuilding.get(role).copied().unwrap_or(false);
        self.plan.builds(role, rebuilding)
    }

    /// Can both geometries run with the roles `missing` gone? Err explains which.
    pub(crate) fn can_run(&self, missing: &[usize]) -> std::result::Result<(), String> {
        for (g, which) in [(self.plan.old(), "old"), (self.plan.new_geometry(), "new")] {
            if !g.survives_without(missing) {
                return Err(format!(
                    "roles {missing:?} are missing and the {which} geometry ({} with {} members) cannot do without them; give more of the members",
                    g.level, g.raid_disks
                ));
            }
        }
        Ok(())
    }

    /// The array's members (built from the superblocks' data starts) moved to the new
    /// geometry's data starts; members the reshape builds count as in sync there.
    pub(crate) fn new_members(&self, members: Vec<Option<Member>>) -> Vec<Option<Member>> {
        let offs = self.plan.new_offsets();
        members
            .into_iter()
            .enumerate()
            .map(|(r, m)| {
                let m = m?;
                let off = offs.get(r).copied().unwrap_or(m.data_offset);
                let recovery = if self.builds(r) { None } else { m.recovery() };
                Some(Member::new(
                    m.dev.clone(),
                    m.index,
                    off,
                    recovery,
                    m.bad_ranges(),
                ))
            })
            .collect()
    }

    /// Install the reshape on `arr` (built on the new geometry): the old geometry's view,
    /// the window at the recorded position, the real progress if md moved further than it
    /// recorded, and mdadm's backup file.
    pub(crate) fn install(
        self,
        arr: &Array,
        backup_file: Option<PathBuf>,
        force: bool,
        exact: Position,
    ) -> Result<()> {
        let old = self.old_view(arr);
        let recorded = self.info.position;
        let mut route = Route {
            plan: self.plan,
            old,
            window: Window::new(recorded),
            info: self.info,
            backup_file: Mutex::new(backup_file.clone()),
            overlay: Vec::new(),
            notes: Mutex::new(Vec::new()),
            origin: std::sync::OnceLock::new(),
        };
        let mut position = recorded;
        if let Some(path) = &backup_file {
            position = restore_backup(arr, &mut route, path, force)?;
        } else if let Some((a, b)) = route
            .plan
            .resume_needs_backup(recorded)
            .map_err(|e| unsupported(&arr.uuid_text(), e.to_string()))?
        {
            if !force {
                return Err(EngineError::Unsupported {
                    uuid: arr.uuid_text(),
                    what: format!(
                        "the reshape stopped at array sector {recorded}, inside a critical section (array sectors {a}..{b}) whose old data mdadm keeps in a backup file"
                    ),
                    advice: "give the backup file the reshape was started with (--backup-file); without it the data of that section cannot be trusted (forcing uses the members as they are)".into(),
                });
            }
        }
        // A member the reshape builds holds nothing of the old geometry: no old copy.
        let rebuilding = &self.rebuilding;
        let dev_of = |side: Side, r: usize| -> Option<Arc<dyn BlockDev>> {
            let m = arr.member(r)?;
            let rebuilding = rebuilding.get(r).copied().unwrap_or(false);
            route
                .plan
                .holds_copies(side, r, rebuilding)
                .then(|| m.dev.clone())
        };
        // raidkit's own switch of geometry knows its position exactly: nothing past it is
        // moved, and taking agreeing copies for a move would leave the progress ahead of
        // the record with no mover running, so client writes there would have nothing to
        // wait for.
        let steps = match exact {
            Position::Recorded => 0,
            Position::FromMembers => INFER_STEPS,
        };
        let progress = route
            .plan
            .infer_progress(position, steps, |f, t| {
                evidence(&route.plan, f, t, &dev_of)
                    .unwrap_or(raidkit_layout::reshape::StepEvidence::Differ)
            })
            .map_err(|e| unsupported(&arr.uuid_text(), e.to_string()))?;
        if progress != position {
            // Were the old places right after the record already overwritten (a stale
            // record), or had md simply copied more than it recorded (both copies good)?
            let step = route.plan.step_sectors().max(1);
            let (a, b) = match route.plan.direction() {
                Direction::Forwards => (position, position + step),
                Direction::Backwards => (position.saturating_sub(step), position),
            };
            let first = evidence(&route.plan, a, b, &dev_of)
                .unwrap_or(raidkit_layout::reshape::StepEvidence::Differ);
            let note = if first == raidkit_layout::reshape::StepEvidence::Differ {
                format!(
                    "WARNING: the members record reshape position {position} (array sectors), but the data was moved up to {progress} and the old copies right after the record were already overwritten: the record is stale (Linux 6.1 records such a position when a reshape is stopped; resuming from it, as the kernel does, would corrupt that data). raidkit continues from {progress}, where the old and new copies agree"
                )
            } else {
                format!(
                    "the reshape had moved the data up to {progress}, past the position it recorded ({position}); both copies of that stretch agree, so raidkit continues from {progress}"
                )
            };
            lock(&route.notes).push(note);
            route.window.with(|st| st.progress = progress);
        }
        arr.install_route(Arc::new(route));
        if progress != position {
            settle_inferred(arr, position, progress)?;
        }
        Ok(())
    }

    /// The old geometry's view of `arr`'s members.
    fn old_view(&self, arr: &Array) -> Array {
        let old = self.plan.old().clone();
        let offs = self.plan.old_offsets();
        let members = (0..old.raid_disks)
            .map(|r| {
                let m = arr.slots().get(r).cloned().flatten()?;
                Some(Member::new(
                    m.dev.clone(),
                    m.index,
                    offs[r],
                    self.builds(r).then_some(0),
                    m.bad_ranges(),
                ))
            })
            .collect();
        Array::view(
            old,
            arr.uuid,
            arr.name.clone(),
            arr.metadata,
            arr.devs().clone(),
            members,
        )
    }
}

/// The stretch between the recorded `position` and the inferred `progress` is taken as
/// moved because its data agrees in both places; its parity (and Q) in the new geometry
/// was never compared: a step whose data writes landed but whose parity write did not, or
/// a blank stretch whose new parity blocks hold old bytes, would be served as redundant.
/// Writable: the stretch's redundancy is rewritten from its data before the array serves.
/// Read-only (nothing may be written): a warning that degraded reads there may be wrong.
fn settle_inferred(arr: &Array, position: u64, progress: u64) -> Result<()> {
    let Some(route) = arr.route() else {
        return Ok(());
    };
    let (lo, hi) = (position.min(progress), position.max(progress));
    let note = if arr.writable {
        let backwards = route.plan.direction() == Direction::Backwards;
        let rep = crate::jobs::sync::reshaping::resync_moved_stretch(arr, lo, hi, backwards)?;
        arr.flush_members()?;
        format!(
            "the redundancy of the new layout over array sectors {lo}..{hi} (moved past the record) was rewritten from its data before serving: {} sectors rewritten",
            rep.sectors_written
        )
    } else {
        format!(
            "WARNING: array sectors {lo}..{hi} were moved past the recorded position; their parity in the new layout was not checked (read-only: nothing is written), so a degraded read there may be wrong until the array is assembled writable"
        )
    };
    lock(&route.notes).push(note);
    Ok(())
}

/// Read mdadm's backup file and, if it still holds data the members may not, restore it
/// (writable: written through the new geometry, the position recorded past it) or serve
/// it (read-only). Returns the position to continue from.
fn restore_backup(arr: &Array, route: &mut Route, path: &Path, force: bool) -> Result<u64> {
    let recorded = route.info.position;
    let utime = lock(&arr.meta.sb)
        .sbs
        .iter()
        .map(Super::utime)
        .max()
        .unwrap_or(0);
    let Some(saved) = backup::read_needed(path, &arr.uuid, utime, &route.plan, recorded, force)?
    else {
        return Ok(recorded);
    };
    let ranges: Vec<String> = saved
        .iter()
        .map(|v| format!("{}..{}", v.from, v.from + v.data.len() as u64 / 512))
        .collect();
    let note = format!(
        "the backup file {} holds array sectors {} (the reshape stopped inside that critical section)",
        path.display(),
        ranges.join(", ")
    );
    if !arr.writable {
        lock(&route.notes).push(format!("{note}: served from the backup file"));
        route.overlay = saved
            .into_iter()
            .map(|v| Overlay {
                start: v.from,
                data: v.data,
            })
            .collect();
        return Ok(recorded);
    }
    let position = backup::restore(arr, &route.plan, &route.info, &saved)?;
    route.window = Window::new(position);
    lock(&route.notes).push(format!(
        "{note}: restored through the new geometry; the reshape continues from {position}"
    ));
    Ok(position)
}

/// Superblocks of members that missed the last update (events one behind the freshest)
/// while the array changed shape — the start or the end of a reshape, or a takeover —
/// are brought to the freshest one's shape (a crash between the superblock writes of one
/// update leaves such members; they hold the same data). Others are left alone (the
/// shape check refuses them).
pub(crate) fn reconcile(fresh: &Super, sbs: &mut [Super]) {
    let same = |s: &Super| {
        (
            s.level(),
            s.layout(),
            s.chunk_sectors(),
            s.raid_disks(),
            s.reshape().is_some(),
        ) == (
            fresh.level(),
            fresh.layout(),
            fresh.chunk_sectors(),
            fresh.raid_disks(),
            fresh.reshape().is_some(),
        )
    };
    for sb in sbs.iter_mut() {
        if sb.events().saturating_add(1) != fresh.events() || same(sb) {
            continue;
        }
        match (sb.reshape(), fresh.reshape()) {
            // The end: this member still records the reshape the others finished.
            (Some(r), None)
                if (
                    r.new_level,
                    r.new_layout,
                    r.new_chunk_sectors,
                    sb.raid_disks(),
                ) == (
                    fresh.level(),
                    fresh.layout(),
                    fresh.chunk_sectors(),
                    fresh.raid_disks(),
                ) =>
            {
                sb.finish_reshape();
            }
            // The start: this member does not record the reshape yet.
            (None, Some(f))
                if (sb.level(), sb.layout(), sb.chunk_sectors())
                    == (fresh.level(), fresh.layout(), fresh.chunk_sectors())
                    && sb.raid_disks() as i64
                        == fresh.raid_disks() as i64 - i64::from(f.delta_disks) =>
            {
                sb.set_shape(
                    fresh.level(),
                    fresh.layout(),
                    fresh.chunk_sectors(),
                    fresh.raid_disks(),
                );
                sb.set_reshape(&f);
            }
            // A takeover (no data moves): the new level, layout and count.
            (None, None) if takeover_between(sb, fresh) => {
                sb.set_shape(
                    fresh.level(),
                    fresh.layout(),
                    fresh.chunk_sectors(),
                    fresh.raid_disks(),
                );
                sb.set_size_sectors(fresh.size_sectors());
            }
            _ => {}
        }
    }
}

/// Is `fresh`'s shape a takeover md makes from `old`'s?
fn takeover_between(old: &Super, fresh: &Super) -> bool {
    let g = |s: &Super, size: u64| {
        let level = Level::from_md(s.level())?;
        let ms = if level == Level::Raid0 {
            vec![size; s.raid_disks()]
        } else {
            Vec::new()
        };
        Geometry::new(
            level,
            s.layout(),
            s.chunk_sectors(),
            s.raid_disks(),
            size,
            ms,
        )
        .ok()
    };
    let size = fresh.size_sectors().max(old.size_sectors());
    match (g(old, size), g(fresh, size)) {
        (Some(a), Some(b)) => raidkit_layout::reshape::takeover(&a, &b).is_ok(),
        _ => false,
    }
}
