//! The reshape fields of both superblock families as one typed view (md-format §1.11,
//! §2.3, §7.1), read and written as the kernel writes them.
//!
//! 1.x: feature bit RESHAPE_ACTIVE (0x4) makes `reshape_position` (array sectors),
//! `new_level`, `delta_disks`, `new_layout`, `new_chunk` (sectors) valid; NEW_OFFSET (0x40)
//! makes this member's `new_offset` valid; RESHAPE_BACKWARDS (0x20) is written only when
//! `delta_disks == 0`. 0.90: minor version 91 makes words 44–49 valid (`new_chunk` in
//! bytes); 0.90 has no backwards flag (a reshape runs backwards iff `delta_disks < 0`) and
//! no offset change. `raid_disks` is always the count after the reshape.
//!
//! Without a reshape the kernel leaves stale values in these fields; they are ignored.

use crate::v090::SuperblockV090;
use crate::v1::{feature, role, SuperblockV1};

/// A reshape in progress, as recorded in a superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReshapeInfo {
    /// Progress in array sectors (`reshape_position`).
    pub position: u64,
    /// New device count minus old (`delta_disks`).
    pub delta_disks: i32,
    /// Level after the reshape.
    pub new_level: i32,
    /// Layout after the reshape.
    pub new_layout: u32,
    /// Chunk after the reshape, in sectors.
    pub new_chunk_sectors: u64,
    /// True if the reshape runs from the end of the array towards the start.
    pub backwards: bool,
    /// This member's data start after the reshape relative to `data_offset` (1.x
    /// NEW_OFFSET); None when the data does not move.
    pub new_offset: Option<i32>,
}

impl ReshapeInfo {
    /// md's direction rule: forwards if `delta_disks > 0`, backwards if `< 0`, else the
    /// recorded flag.
    pub fn backwards_for(delta_disks: i32, flag: bool) -> bool {
        delta_disks < 0 || (delta_disks == 0 && flag)
    }
}

impl SuperblockV1 {
    /// The reshape recorded in this superblock, if RESHAPE_ACTIVE is set.
    pub fn reshape(&self) -> Option<ReshapeInfo> {
        if self.feature_map & feature::RESHAPE_ACTIVE == 0 {
            return None;
        }
        let flag = self.feature_map & feature::RESHAPE_BACKWARDS != 0;
        Some(ReshapeInfo {
            position: self.reshape_position,
            delta_disks: self.delta_disks,
            new_level: self.new_level,
            new_layout: self.new_layout,
            new_chunk_sectors: self.new_chunk.into(),
            backwards: ReshapeInfo::backwards_for(self.delta_disks, flag),
            new_offset: (self.feature_map & feature::NEW_OFFSET != 0).then_some(self.new_offset),
        })
    }

    /// Record a reshape as the kernel does (`super_1_sync`): RESHAPE_ACTIVE and the
    /// fields; RESHAPE_BACKWARDS only with `delta_disks == 0`; NEW_OFFSET and `new_offset`
    /// only when this member's data start moves (a `new_offset` of `Some(0)` is written as
    /// no offset change). `raid_disks` must already be the new count. A `new_chunk_sectors`
    /// above `u32::MAX` is stored as `u32::MAX` (it does not validate).
    pub fn set_reshape(&mut self, r: &ReshapeInfo) {
        self.feature_map &=
            !(feature::RESHAPE_ACTIVE | feature::RESHAPE_BACKWARDS | feature::NEW_OFFSET);
        self.feature_map |= feature::RESHAPE_ACTIVE;
        self.reshape_position = r.position;
        self.delta_disks = r.delta_disks;
        self.new_level = r.new_level;
        self.new_layout = r.new_layout;
        self.new_chunk = u32::try_from(r.new_chunk_sectors).unwrap_or(u32::MAX);
        if r.delta_disks == 0 && r.backwards {
            self.feature_map |= feature::RESHAPE_BACKWARDS;
        }
        match r.new_offset {
            Some(o) if o != 0 => {
                self.feature_map |= feature::NEW_OFFSET;
                self.new_offset = o;
            }
            _ => {}
        }
    }

    /// The superblock after the reshape completed, as the kernel writes it
    /// (`md_finish_reshape` + `super_1_sync`): the new level/layout/chunk become current,
    /// `delta_disks = 0`, the data start moves by `new_offset` and `data_size` changes by
    /// the opposite amount, the reshape feature bits are cleared (the other reshape fields
    /// keep their stale values, as the kernel leaves them), a member that was being
    /// recovered alongside the reshape (a RAID5→6 Q member: RECOVERY_OFFSET, advanced with
    /// the reshape) is in sync, and after a shrink the roles at or beyond `raid_disks`
    /// become spares. No-op without RESHAPE_ACTIVE.
    pub fn finish_reshape(&mut self) {
        let Some(r) = self.reshape() else {
            return;
        };
        self.level = r.new_level;
        self.layout = r.new_layout;
        self.chunksize = self.new_chunk;
        self.delta_disks = 0;
        if let Some(o) = r.new_offset {
            let o = i64::from(o);
            self.data_offset = self.data_offset.saturating_add_signed(o);
            self.data_size = self.data_size.saturating_add_signed(-o);
        }
        self.feature_map &=
            !(feature::RESHAPE_ACTIVE | feature::RESHAPE_BACKWARDS | feature::NEW_OFFSET);
        if self.feature_map & feature::REPLACEMENT == 0 {
            // The reshape wrote every stripe of the new geometry on every member.
            self.feature_map &= !(feature::RECOVERY_OFFSET | feature::RECOVERY_BITMAP);
        }
        let n = self.raid_disks;
        for r in &mut self.dev_roles {
            if *r < 0xff00 && u32::from(*r) >= n {
                *r = role::SPARE;
            }
        }
    }
}

impl SuperblockV090 {
    /// The reshape recorded in this superblock, if the minor version is 91.
    pub fn reshape(&self) -> Option<ReshapeInfo> {
        if self.minor_version != 91 {
            return None;
        }
        Some(ReshapeInfo {
            position: self.reshape_position,
            delta_disks: self.delta_disks,
            new_level: self.new_level,
            new_layout: self.new_layout,
            new_chunk_sectors: u64::from(self.new_chunk / 512),
            backwards: self.delta_disks < 0,
            new_offset: None,
        })
    }

    /// Record a reshape as the kernel does (`super_90_sync`): minor version 91 and words
    /// 44–49, `new_chunk` in bytes. 0.90 cannot record a backwards reshape of the same
    /// device count or a data offset change: those fields of `r` are not stored.
    pub fn set_reshape(&mut self, r: &ReshapeInfo) {
        self.minor_version = 91;
        self.reshape_position = r.position;
        self.delta_disks = r.delta_disks;
        self.new_level = r.new_level;
        self.new_layout = r.new_layout;
        self.new_chunk = u32::try_from(r.new_chunk_sectors.saturating_mul(512)).unwrap_or(u32::MAX);
    }

    /// The superblock after the reshape completed: minor version 90, the new
    /// level/layout/chunk current, `delta_disks = 0`; after a shrink, descriptors of roles
    /// at or beyond `raid_disks` become spares (raid_disk = their number, not active).
    pub fn finish_reshape(&mut self) {
        let Some(r) = self.reshape() else {
            return;
        };
        self.minor_version = 90;
        self.level = r.new_level;
        self.layout = r.new_layout;
        self.chunk_size = self.new_chunk;
        self.delta_disks = 0;
        let n = self.raid_disks;
        let spare = |d: &mut crate::v090::DiskDescriptor| {
            if d.raid_disk >= n && d.state & crate::v090::disk_state::ACTIVE != 0 {
                d.raid_disk = d.number;
                d.state &= !(crate::v090::disk_state::ACTIVE | crate::v090::disk_state::SYNC);
            }
        };
        self.disks.iter_mut().for_each(spare);
        spare(&mut self.this_disk);
    }
}
