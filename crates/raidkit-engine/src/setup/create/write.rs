//! The superblocks of a new array, and writing them to the members with the bitmap and
//! the bad-block log (foreign superblocks wiped first).

use super::place::{bblog_place, BitmapPlan, Place};
use super::{CreateOptions, Shape};
use crate::bitmap::write_region;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::sb::{write_super, Metadata, Super};
use crate::util::{is_zero, now, random_uuid};
use raidkit_format::bitmap::{self as fbitmap, BitmapSuper};
use raidkit_format::v090::{self, disk_state, sb_state, DiskDescriptor, SuperblockV090};
use raidkit_format::v1::{self, feature, Minor, SuperblockV1};
use raidkit_format::MAX_SECTOR;
use raidkit_layout::Level;
use std::sync::Arc;

/// Everything the superblocks of a new array say.
pub(super) struct NewArray<'a> {
    pub(super) opts: &'a CreateOptions,
    pub(super) shape: &'a Shape,
    /// Component size, sectors.
    pub(super) size: u64,
    /// Array UUID (raw bytes).
    pub(super) uuid: [u8; 16],
    /// Redundancy is consistent from the start (no initial sync).
    pub(super) clean_at_create: bool,
    pub(super) bitmap: Option<BitmapPlan>,
    /// Sectors of the first member given (mdadm places the bad-block log by it).
    pub(super) first_dev_sectors: u64,
}

impl NewArray<'_> {
    /// One superblock per member (None for a `missing` slot).
    pub(super) fn superblocks(&self, places: &[Option<Place>]) -> Result<Vec<Option<Super>>> {
        let t = now();
        let n = self.shape.raid_disks;
        let max_dev: u32 = {
            let bytes = (256 + 2 * n as u32).div_ceil(512) * 512;
            (bytes - 256) / 2
        };
        let mut roles = vec![v1::role::SPARE; max_dev as usize];
        for (i, r) in roles.iter_mut().enumerate().take(n) {
            if !self.shape.missing.contains(&i) {
                *r = i as u16;
            }
        }
        let mut sbs: Vec<Option<Super>> = Vec::with_capacity(n);
        for (i, p) in places.iter().enumerate() {
            let Some(p) = p else {
                sbs.push(None);
                continue;
            };
            sbs.push(Some(match self.opts.metadata {
                Metadata::V1(_) => self.v1_superblock(i, p, t, max_dev, &roles)?,
                Metadata::V090 => self.v090_superblock(i, t),
            }));
        }
        for sb in sbs.iter_mut().flatten() {
            for &j in &self.opts.write_mostly {
                sb.set_write_mostly(j, true);
            }
        }
        Ok(sbs)
    }

    /// The 1.x superblock of member `i`.
    fn v1_superblock(
        &self,
        i: usize,
        p: &Place,
        t: u64,
        max_dev: u32,
        roles: &[u16],
    ) -> Result<Super> {
        let (level, opts) = (self.shape.level, self.opts);
        let mut fm = 0;
        if self.bitmap.is_some() {
            fm |= feature::BITMAP_OFFSET;
        }
        if level == Level::Raid0 {
            fm |= feature::RAID0_LAYOUT;
        }
        let mut s = SuperblockV1 {
            feature_map: fm,
            set_uuid: self.uuid,
            set_name: [0; 32],
            ctime: v1::encode_time(t),
            level: level.to_md(),
            layout: self.shape.layout,
            size: if matches!(level, Level::Linear | Level::Raid0) {
                0
            } else {
                self.size
            },
            chunksize: self.shape.chunk_sectors as u32,
            raid_disks: self.shape.raid_disks as u32,
            bitmap_offset: if self.bitmap.is_some() {
                p.bitmap_offset
            } else {
                0
            },
            new_level: 0,
            reshape_position: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk: 0,
            new_offset: 0,
            data_offset: p.data_offset,
            data_size: p.data_size,
            super_offset: p.super_offset,
            recovery_offset: 0,
            dev_number: i as u32,
            cnt_corrected_read: 0,
            device_uuid: random_uuid()
                .map_err(|e| EngineError::io("/dev/urandom", "generating a UUID", e))?,
            devflags: 0,
            bblog_shift: 0,
            bblog_size: 0,
            bblog_offset: 0,
            utime: v1::encode_time(t),
            events: 0,
            resync_offset: if self.clean_at_create { MAX_SECTOR } else { 0 },
            max_dev,
            dev_roles: roles.to_vec(),
        };
        if opts.bbl {
            let bitmap_sectors = self.bitmap.map(|b| b.sectors);
            let (off, size) = bblog_place(p, opts.metadata, bitmap_sectors, self.first_dev_sectors)
                .ok_or_else(|| EngineError::Invalid(format!(
                    "no room for a bad-block log on member {i} (data starts right after the superblock); create the array without a bad-block log, or use larger members"
                )))?;
            s.bblog_offset = off;
            s.bblog_size = size;
        }
        s.set_name_str(&super::set_name_bytes(&opts.name, opts.homehost.as_deref()));
        Ok(Super::V1(s))
    }

    /// The 0.90 superblock of member `i`.
    fn v090_superblock(&self, i: usize, t: u64) -> Super {
        let n = self.shape.raid_disks;
        let missing = &self.shape.missing;
        let mut disks = [DiskDescriptor::default(); v090::MD_SB_DISKS];
        for (j, d) in disks.iter_mut().enumerate().take(n) {
            *d = DiskDescriptor {
                number: j as u32,
                major: 0,
                minor: 0,
                raid_disk: j as u32,
                state: if missing.contains(&j) {
                    disk_state::FAULTY | disk_state::REMOVED
                } else {
                    disk_state::ACTIVE | disk_state::SYNC
                },
            };
        }
        let mut state = if self.clean_at_create {
            sb_state::CLEAN
        } else {
            0
        };
        if self.bitmap.is_some() {
            state |= sb_state::BITMAP_PRESENT;
        }
        let active = (n - missing.len()) as u32;
        let mut s = SuperblockV090 {
            minor_version: 90,
            patch_version: 0,
            uuid_words: [0; 4],
            ctime: t as u32,
            level: self.shape.level.to_md(),
            size_kib: (self.size / 2) as u32,
            nr_disks: active,
            raid_disks: n as u32,
            md_minor: 0,
            utime: t as u32,
            state,
            active_disks: active,
            working_disks: active,
            failed_disks: missing.len() as u32,
            spare_disks: 0,
            events: 0,
            cp_events: 0,
            recovery_cp: if self.clean_at_create { u32::MAX } else { 0 },
            reshape_position: 0,
            new_level: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk: 0,
            layout: self.shape.layout,
            chunk_size: (self.shape.chunk_sectors * 512) as u32,
            disks,
            this_disk: disks[i],
        };
        s.set_uuid(self.uuid);
        Super::V090(s)
    }

    /// Write each member: wipe foreign superblocks, then the bitmap, an empty bad-block
    /// log, and the superblock, flushed.
    pub(super) fn write_members(
        &self,
        devs: &[Option<Arc<dyn BlockDev>>],
        sbs: &[Option<Super>],
        places: &[Option<Place>],
    ) -> Result<()> {
        for (i, d) in devs.iter().enumerate() {
            let (Some(d), Some(sb), Some(p)) = (d, &sbs[i], &places[i]) else {
                continue;
            };
            wipe_foreign(d.as_ref(), sb, p, self.size, self.opts.assume_clean)?;
            if let Some(plan) = self.bitmap {
                let loc = match sb {
                    Super::V090(_) => p.super_offset + 8,
                    Super::V1(_) => (p.super_offset as i64 + i64::from(p.bitmap_offset)) as u64,
                };
                write_region(d.as_ref(), loc * 512, &self.bitmap_area(plan))?;
            }
            if let Some((at, n, _)) = sb.bblog() {
                // An empty log, as the kernel writes it (unused slots all ones).
                write_region(d.as_ref(), at * 512, &vec![0xffu8; (n * 512) as usize])?;
            }
            write_super(d.as_ref(), sb)?;
            d.flush()
                .map_err(|e| EngineError::io(d.name(), "flushing the new superblock", e))?;
        }
        Ok(())
    }

    /// The bitmap area of a member: its superblock, and every bit set unless redundancy is
    /// consistent from the start.
    fn bitmap_area(&self, plan: BitmapPlan) -> Vec<u8> {
        let bsb = BitmapSuper {
            version: 4,
            uuid: self.uuid,
            events: 0,
            events_cleared: 0,
            sync_size: plan.sync_size,
            state: 0,
            chunksize: plan.chunk,
            daemon_sleep: 5,
            write_behind: self.opts.write_behind,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
        };
        let mut area = vec![0u8; (plan.sectors * 512) as usize];
        area[..256].copy_from_slice(&bsb.encode());
        if !self.clean_at_create {
            for b in 0..plan.chunks {
                fbitmap::set_bit(&mut area[256..], b, true);
            }
        }
        area
    }
}

/// Remove superblock magic of other metadata versions so later probes are unambiguous.
fn wipe_foreign(
    dev: &dyn BlockDev,
    ours: &Super,
    p: &Place,
    size: u64,
    assume_clean: bool,
) -> Result<()> {
    let ds = dev.size_bytes() / 512;
    let mut locs: Vec<u64> = Vec::new();
    for m in [Minor::V0, Minor::V1, Minor::V2] {
        if ours.metadata() != Metadata::V1(m) && ds >= 16 {
            locs.push(m.super_offset(ds));
        }
    }
    if ours.metadata() != Metadata::V090 {
        if let Some(o) = v090::super_offset(ds) {
            locs.push(o);
        }
    }
    let data = p.data_offset..p.data_offset + size;
    for loc in locs {
        if loc + 8 > ds || loc == p.super_offset {
            continue;
        }
        if data.contains(&loc) && assume_clean {
            continue;
        }
        let mut b = vec![0u8; 8];
        dev.read_at(&mut b, loc * 512)
            .map_err(|e| EngineError::io(dev.name(), "checking for old superblocks", e))?;
        if u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == raidkit_format::MD_MAGIC && !is_zero(&b)
        {
            dev.write_at(&[0u8; 4096], loc * 512)
                .map_err(|e| EngineError::io(dev.name(), "wiping an old superblock", e))?;
        }
    }
    Ok(())
}
