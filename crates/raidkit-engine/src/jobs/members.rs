//! Member management of a running array: adding a hot spare, removing a failed member or
//! a spare.

use crate::array::events::ArrayEvent;
use crate::array::member::Place;
use crate::array::meta::Meta;
use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use crate::meta::sb::write_super;
use crate::meta::sb::Super;
use raidkit_format::v090::{self, SuperblockV090};
use raidkit_format::v1::{self, feature, Minor, SuperblockV1};
use std::sync::Arc;

impl Array {
    /// Add `dev` to the running array as a hot spare (writes its superblock). A device
    /// holding data or another array's superblock is refused unless `force`.
    pub fn add_spare(&self, dev: Arc<dyn BlockDev>, force: bool) -> Result<()> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing to add members"
                    .into(),
            ));
        }
        if let Some(place) = self.place_of(dev.as_ref()) {
            return Err(EngineError::Invalid(format!(
                "{} is already in this array as {place}; a device holds one place only",
                dev.name()
            )));
        }
        // Under the superblock lock: the superblocks of the array's devices cannot change
        // while the newcomer's are compared with them.
        let mut meta = lock(&self.meta.sb);
        // A returning member of this very array is fine; anything else must be blank.
        let found: Vec<Super> = crate::sb::probe(dev.as_ref())?
            .found
            .into_iter()
            .map(|(s, _)| s)
            .filter(|s| s.uuid() == self.uuid)
            .collect();
        if found.is_empty() {
            crate::create::check_blank(dev.as_ref(), force)?;
        }
        if let Some(place) = found.iter().find_map(|s| self.place_carrying(s, &meta)) {
            return Err(EngineError::Invalid(format!(
                "{} carries the superblock of {place}: it is that device under another name \
                 (another address of the same export, or another path to the same disk); a \
                 device holds one place only (a copy of that device: wipe its metadata first)",
                dev.name()
            )));
        }
        let live = self.live_devices();
        let proto = live
            .first()
            .map(|&i| meta.sbs[i].clone())
            .ok_or_else(|| EngineError::Invalid("the array has no live member".into()))?;
        let size = self.geo.used_dev_sectors(0).max(self.geo.dev_sectors);
        let used_devnums: Vec<usize> = live.iter().map(|&i| meta.sbs[i].dev_number()).collect();
        let name = dev.name().to_string();
        let sb = match proto {
            Super::V1(s) => spare_superblock_v1(s, &mut meta, &used_devnums, &dev, size)?,
            Super::V090(s) => {
                spare_superblock_v090(s, &mut meta, &live, &used_devnums, &dev, size)?
            }
        };
        // Make the new device known, then write everything (its superblock included).
        let idx = self.add_device(dev.clone());
        meta.sbs.push(sb);
        self.spares().push(idx);
        write_super(dev.as_ref(), &meta.sbs[idx])?;
        self.write_superblocks(&mut meta, |_| {})?;
        if let Some(bm) = self.bm().as_ref() {
            let mut b = lock(bm);
            // The newcomer's bitmap location follows its own superblock.
            let dsz = dev.size_bytes() / 512;
            let loc = meta.sbs[idx].bitmap_sector(dsz);
            if b.locs.len() <= idx {
                b.locs.resize(idx + 1, None);
            }
            b.locs[idx] = loc;
            b.write_bits(&self.devs(), &[idx])?;
        }
        drop(meta);
        self.emit(ArrayEvent::SpareAdded { device: name });
        Ok(())
    }

    /// The place `dev` already holds in this array, said for a refusal, if it is the
    /// same device ([`crate::dev::same_device`]: what the descriptors have open) as one
    /// the array uses: a member, failed or not, a replacement or a spare. Devices that
    /// have left the array do not count.
    fn place_of(&self, dev: &dyn BlockDev) -> Option<String> {
        let places = self.places();
        let (_, d, place) = places
            .iter()
            .find(|(_, d, p)| *p != Place::Departed && crate::dev::same_device(d.as_ref(), dev))?;
        Some(describe_place(d.name(), *place))
    }

    /// The place whose superblock `found` (read from a device being added) is, said for a
    /// refusal: a device that two names reach (an NBD export under two addresses has no
    /// identity to compare) shows the superblock the array last wrote to that place. 1.x
    /// superblocks are told apart by their device UUID; 0.90 ones by device number and
    /// event count. Devices that have left the array do not count.
    fn place_carrying(&self, found: &Super, meta: &Meta) -> Option<String> {
        // 0.90 device numbers are reused: the event count must match too.
        let same = |held: &Super| {
            found.same_device_as(held)
                && (matches!(found, Super::V1(_)) || found.events() == held.events())
        };
        self.places()
            .iter()
            .filter(|(_, _, p)| *p != Place::Departed)
            .find(|(i, _, _)| meta.sbs.get(*i).is_some_and(same))
            .map(|(_, d, p)| describe_place(d.name(), *p))
    }

    /// Remove a failed member or a spare (md's `--remove`). An active member must be
    /// failed first. The removed device is not written again.
    pub fn remove_member(&self, device: &str) -> Result<()> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only".into(),
            ));
        }
        let mut meta = lock(&self.meta.sb);
        let hit = self
            .slots()
            .iter()
            .enumerate()
            .find(|(_, m)| m.as_ref().is_some_and(|m| m.dev.name() == device))
            .map(|(r, m)| (r, m.clone()));
        if let Some((role, Some(m))) = hit {
            if !m.is_failed() {
                return Err(EngineError::Invalid(format!(
                    "{device} is an active member (role {role}); fail it first, then remove it"
                )));
            }
            let devnum = meta.sbs[m.index].dev_number();
            if let Some(r) = meta.roles.get_mut(devnum) {
                *r = v1::role::SPARE;
            }
            self.set_slot(role, None);
            return self.write_superblocks(&mut meta, |_| {});
        }
        let devs = self.devs().clone();
        let mut spares = self.spares();
        if let Some(pos) = spares.iter().position(|&i| devs[i].name() == device) {
            let i = spares.remove(pos);
            drop(spares);
            // 0.90: its descriptor leaves every table (md lists the devices it has).
            let devnum = meta.sbs[i].dev_number();
            for sb in meta.sbs.iter_mut() {
                if let Super::V090(s) = sb {
                    if devnum >= s.raid_disks as usize && devnum < s.disks.len() {
                        s.disks[devnum] = v090::DiskDescriptor::default();
                    }
                }
            }
            return self.write_superblocks(&mut meta, |_| {});
        }
        drop(spares);
        // A failed member whose role has since been taken over by a spare.
        let live = self.live_devices();
        if let Some(i) = (0..devs.len()).find(|&i| devs[i].name() == device && !live.contains(&i)) {
            let devnum = meta.sbs[i].dev_number();
            if meta.roles.get(devnum) == Some(&v1::role::FAULTY) {
                meta.roles[devnum] = v1::role::SPARE;
                return self.write_superblocks(&mut meta, |_| {});
            }
            return Err(EngineError::Invalid(format!(
                "{device} was already removed"
            )));
        }
        Err(EngineError::Invalid(format!(
            "{device} is not a member or spare of this array"
        )))
    }
}

/// A place said for a refusal: "NAME, the member of role R" and the like.
fn describe_place(name: &str, place: Place) -> String {
    match place {
        Place::Member { role, failed: true } => format!(
            "{name}, the failed member of role {role}; remove it from the array first, then add it"
        ),
        Place::Member { role, .. } => format!("{name}, the member of role {role}"),
        Place::Replacement { role } => format!("{name}, the replacement of role {role}"),
        Place::Spare | Place::Departed => format!("{name}, a spare"),
    }
}

/// The 1.x superblock of a new spare: the array's, with a free device slot, a new device
/// UUID and its own offsets (the device must hold `size` data sectors).
fn spare_superblock_v1(
    mut s: SuperblockV1,
    meta: &mut Meta,
    used_devnums: &[usize],
    dev: &Arc<dyn BlockDev>,
    size: u64,
) -> Result<Super> {
    let dev_sectors = dev.size_bytes() / 512;
    let name = dev.name().to_string();
    let devnum = (0..)
        .find(|j| {
            !used_devnums.contains(j) && meta.roles.get(*j).is_none_or(|&r| r == v1::role::SPARE)
        })
        .unwrap_or(meta.roles.len());
    if devnum >= v1::MAX_DEV_LIMIT as usize {
        return Err(EngineError::Invalid(
            "no free device slot (1920 in use)".into(),
        ));
    }
    if devnum >= meta.roles.len() {
        meta.roles.resize(devnum + 1, v1::role::SPARE);
    }
    s.max_dev = s.max_dev.max(meta.roles.len() as u32);
    s.dev_number = devnum as u32;
    s.device_uuid = crate::util::random_uuid()
        .map_err(|e| EngineError::io("/dev/urandom", "generating a UUID", e))?;
    s.feature_map &= !(feature::RECOVERY_OFFSET
        | feature::REPLACEMENT
        | feature::BAD_BLOCKS
        | feature::RECOVERY_BITMAP
        | feature::NEW_OFFSET);
    s.recovery_offset = 0;
    s.cnt_corrected_read = 0;
    s.devflags = 0;
    s.bblog_offset = 0;
    s.bblog_size = 0;
    s.bblog_shift = 0;
    match s.minor() {
        Minor::V0 => {
            let so = Minor::V0.super_offset(dev_sectors);
            let reserve = if s.bitmap_offset < 0 {
                u64::from(s.bitmap_offset.unsigned_abs())
            } else {
                raidkit_format::placement::choose_bm_space(dev_sectors) + 8
            };
            s.super_offset = so;
            s.data_offset = 0;
            s.data_size = so.saturating_sub(reserve);
        }
        m => {
            s.super_offset = m.super_offset(dev_sectors);
            s.data_size = dev_sectors.saturating_sub(s.data_offset);
        }
    }
    if s.data_size < size {
        return Err(EngineError::Refused {
                device: name,
                why: format!(
                    "it is too small: the array needs {} data sectors per member after the metadata, this device offers {}",
                    size, s.data_size
                ),
            });
    }
    Ok(Super::V1(s))
}

/// The 0.90 superblock of a new spare: the array's, with a free descriptor, which every
/// live member's table learns about too.
fn spare_superblock_v090(
    mut s: SuperblockV090,
    meta: &mut Meta,
    live: &[usize],
    used_devnums: &[usize],
    dev: &Arc<dyn BlockDev>,
    size: u64,
) -> Result<Super> {
    let dev_sectors = dev.size_bytes() / 512;
    let name = dev.name().to_string();
    let so = v090::super_offset(dev_sectors).unwrap_or(0);
    if so < size {
        return Err(EngineError::Refused {
            device: name,
            why: format!("it is too small: {so} sectors, the array needs {size}"),
        });
    }
    let number = (s.raid_disks as usize..v090::MD_SB_DISKS)
        .find(|&j| s.disks[j].state == 0 && !used_devnums.contains(&j))
        .ok_or_else(|| EngineError::Invalid("no free 0.90 descriptor (27 in use)".into()))?;
    let d = v090::DiskDescriptor {
        number: number as u32,
        major: 0,
        minor: 0,
        raid_disk: number as u32,
        state: 0,
    };
    s.disks[number] = d;
    s.this_disk = d;
    s.nr_disks += 1;
    s.spare_disks += 1;
    s.working_disks += 1;
    // Every live member's table learns about the spare too.
    for &i in live {
        if let Super::V090(o) = &mut meta.sbs[i] {
            o.disks[number] = d;
            o.nr_disks = s.nr_disks;
            o.spare_disks = s.spare_disks;
            o.working_disks = s.working_disks;
        }
    }
    Ok(Super::V090(s))
}
