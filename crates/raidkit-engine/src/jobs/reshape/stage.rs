//! The superblocks that begin a stage: a restripe's start (new member count, the reshape
//! fields, members taking new roles) and a takeover (new level/layout/count, roles
//! renumbered or given up). They are written with events + 1 on every live device; the
//! array is then assembled again from them (see [`super::drive`]).

use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::jobs::reshape::start::{plan_restripe, Room};
use crate::locks::lock;
use crate::sb::Super;
use raidkit_format::reshape::ReshapeInfo;
use raidkit_format::v090::{disk_state, DiskDescriptor};
use raidkit_format::v1::{self, feature};
use raidkit_layout::reshape::Direction;
use raidkit_layout::Geometry;

/// A device taking a role: its index, the role, and whether the reshape builds it
/// (unreadable in the old geometry; md's RECOVERY_OFFSET member).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Assign {
    pub(crate) dev: usize,
    pub(crate) role: usize,
    pub(crate) built: bool,
}

impl Array {
    /// Which spares take which roles in a restripe from `from` to `to`: the lowest empty
    /// roles first (md's order). A device put into an empty role the old geometry has
    /// is built by the reshape ([`raidkit_layout::reshape::builds_member`]), which 0.90
    /// cannot record (those roles stay empty there). Err if the new geometry cannot
    /// run with the roles still empty.
    pub(crate) fn assign_spares(&self, from: &Geometry, to: &Geometry) -> Result<Vec<Assign>> {
        let v090 = matches!(self.metadata, crate::sb::Metadata::V090);
        let mut spares: Vec<usize> = self.spares().clone();
        spares.reverse();
        let slots = self.slots();
        let mut out = Vec::new();
        let mut empty = Vec::new();
        for role in 0..to.raid_disks {
            let present = slots
                .get(role)
                .cloned()
                .flatten()
                .is_some_and(|m| !m.is_failed());
            if present {
                continue;
            }
            let built = raidkit_layout::reshape::builds_member(from, to, role, true);
            match spares.pop() {
                Some(dev) if !(built && v090) => out.push(Assign { dev, role, built }),
                Some(dev) => {
                    spares.push(dev);
                    empty.push(role);
                }
                None => empty.push(role),
            }
        }
        if !to.survives_without(&empty) {
            let new_roles = empty.iter().filter(|&&r| r >= from.raid_disks).count();
            return Err(EngineError::Invalid(format!(
                "the new shape ({} with {} members) needs a member in roles {empty:?}: add {} more device(s)",
                to.level,
                to.raid_disks,
                new_roles.max(1)
            )));
        }
        Ok(out)
    }

    /// Write the superblocks that start a restripe of this array (geometry `from`) to
    /// `to`, moving the data per `room`.
    pub(crate) fn write_restripe_start(
        &self,
        from: &Geometry,
        to: &Geometry,
        room: &Room,
    ) -> Result<()> {
        let plan = plan_restripe(from, to, self.old_offsets(from), room)?;
        let assign = self.assign_spares(from, to)?;
        let (change, size) = match room {
            Room::OffsetChange { change, size } => (*change, *size),
            Room::Backup { .. } => (0, None),
        };
        let info = ReshapeInfo {
            position: plan.start_position(),
            delta_disks: to.raid_disks as i32 - from.raid_disks as i32,
            new_level: to.level.to_md(),
            new_layout: to.layout,
            new_chunk_sectors: to.chunk_sectors,
            backwards: plan.direction() == Direction::Backwards,
            new_offset: (change != 0).then(|| i32::try_from(change).unwrap_or(0)),
        };
        let mut meta = lock(&self.meta.sb);
        let live = self.live_devices();
        for a in &assign {
            give_role(&mut meta, &live, a);
        }
        let (level, layout, chunk) = (from.level.to_md(), from.layout, from.chunk_sectors);
        self.write_superblocks(&mut meta, |sb| {
            sb.set_shape(level, layout, chunk, to.raid_disks);
            if let Some(size) = size {
                sb.set_size_sectors(size);
            }
            sb.set_reshape(&info);
        })
    }

    /// Write the superblocks of a takeover to `to`: new role `r` goes to a present member
    /// of `sources[r]`; members no role takes become spares; roles without a source stay
    /// empty (built afterwards from spares).
    pub(crate) fn write_takeover(&self, to: &Geometry, sources: &[Vec<usize>]) -> Result<()> {
        let slots: Vec<_> = self.slots().clone();
        let mut role_of: Vec<(usize, Option<usize>)> = Vec::new();
        let mut taken = Vec::new();
        for (r, src) in sources.iter().enumerate() {
            let pick = src.iter().find_map(|&o| {
                slots
                    .get(o)
                    .cloned()
                    .flatten()
                    .filter(|m| !m.is_failed() && !taken.contains(&m.index))
            });
            if let Some(m) = pick {
                taken.push(m.index);
                role_of.push((m.index, Some(r)));
            }
        }
        for m in slots.iter().flatten() {
            if !m.is_failed() && !taken.contains(&m.index) {
                role_of.push((m.index, None));
            }
        }
        let empty: Vec<usize> = (0..to.raid_disks)
            .filter(|r| !role_of.iter().any(|&(_, x)| x == Some(*r)))
            .collect();
        let dropped_data = sources
            .iter()
            .enumerate()
            .any(|(r, s)| !s.is_empty() && empty.contains(&r));
        if dropped_data || !to.survives_without(&empty) {
            return Err(EngineError::Invalid(format!(
                "the takeover to {} needs the members holding roles {empty:?}, which are missing",
                to.level
            )));
        }
        let mut meta = lock(&self.meta.sb);
        let live = self.live_devices();
        for &(dev, role) in &role_of {
            match role {
                Some(role) => give_role(
                    &mut meta,
                    &live,
                    &Assign {
                        dev,
                        role,
                        built: false,
                    },
                ),
                None => make_spare(&mut meta, &live, dev),
            }
        }
        let (level, layout, chunk, n) =
            (to.level.to_md(), to.layout, to.chunk_sectors, to.raid_disks);
        let size = match to.level {
            raidkit_layout::Level::Raid0 => to.member_sectors.first().copied(),
            _ => Some(to.dev_sectors),
        };
        let raid0 = to.level == raidkit_layout::Level::Raid0;
        self.write_superblocks(&mut meta, |sb| {
            sb.set_shape(level, layout, chunk, n);
            match (size, &mut *sb) {
                // md keeps a RAID0 member to the size it had in the old level.
                (Some(z), Super::V1(s)) if raid0 => s.data_size = z,
                (Some(z), _) => sb.set_size_sectors(z),
                (None, _) => {}
            }
        })
    }
}

/// Record in every live superblock (and the shared role table) that device `a.dev` holds
/// role `a.role`.
fn give_role(meta: &mut crate::array::meta::Meta, live: &[usize], a: &Assign) {
    let devnum = meta.sbs[a.dev].dev_number();
    if let Super::V1(s) = &mut meta.sbs[a.dev] {
        s.feature_map &= !(feature::RECOVERY_OFFSET | feature::REPLACEMENT);
        if a.built {
            s.feature_map |= feature::RECOVERY_OFFSET;
            s.recovery_offset = 0;
        }
    }
    if matches!(meta.sbs[a.dev], Super::V1(_)) {
        if meta.roles.len() <= devnum {
            meta.roles.resize(devnum + 1, v1::role::SPARE);
        }
        meta.roles[devnum] = a.role as u16;
        return;
    }
    let was_spare = match &meta.sbs[a.dev] {
        Super::V090(s) => s
            .disks
            .get(devnum)
            .is_some_and(|d| d.state & disk_state::ACTIVE == 0),
        Super::V1(_) => false,
    };
    for &i in live.iter().chain(std::iter::once(&a.dev)) {
        if let Super::V090(s) = &mut meta.sbs[i] {
            if let Some(d) = s.disks.get_mut(devnum) {
                *d = DiskDescriptor {
                    raid_disk: a.role as u32,
                    state: disk_state::ACTIVE | disk_state::SYNC,
                    ..*d
                };
                if s.this_disk.number as usize == devnum {
                    s.this_disk = *d;
                }
            }
            if was_spare {
                s.spare_disks = s.spare_disks.saturating_sub(1);
            }
        }
    }
}

/// Record that device `dev` is a spare now.
fn make_spare(meta: &mut crate::array::meta::Meta, live: &[usize], dev: usize) {
    let devnum = meta.sbs[dev].dev_number();
    if matches!(meta.sbs[dev], Super::V1(_)) {
        if let Some(r) = meta.roles.get_mut(devnum) {
            *r = v1::role::SPARE;
        }
        return;
    }
    for &i in live {
        if let Super::V090(s) = &mut meta.sbs[i] {
            if let Some(d) = s.disks.get_mut(devnum) {
                *d = DiskDescriptor {
                    raid_disk: devnum as u32,
                    state: 0,
                    ..*d
                };
                if s.this_disk.number as usize == devnum {
                    s.this_disk = *d;
                }
            }
            s.spare_disks += 1;
        }
    }
}
