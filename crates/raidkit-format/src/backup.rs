//! mdadm's reshape backup record (`struct mdp_backup_super`, md-format §7.3b): where the
//! "critical section" of a reshape that cannot move the data offset is saved, in a backup
//! file or at the end of a spare member, so mdadm (and raidkit) can restore it after a
//! crash.
//!
//! The record is 512 bytes, little-endian:
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0 | 16 | magic `md_backup_data-1` (one section) or `md_backup_data-2` (two) |
//! | 16 | 16 | array UUID (`set_uuid`) |
//! | 32 | 8 | `mtime`, seconds |
//! | 40 | 8 | `devstart`: sector of the saved data on the backup file/device |
//! | 48 | 8 | `arraystart`: array sector of the saved data |
//! | 56 | 8 | `length`: sectors saved |
//! | 64 | 4 | `sb_csum` over bytes 0..64 |
//! | 68 | 4 | pad |
//! | 72 | 8 | `devstart2`: second section's data, sectors after `devstart` (version 2) |
//! | 80 | 8 | `arraystart2` |
//! | 88 | 8 | `length2` |
//! | 96 | 4 | `sb_csum2` over bytes 0..96 (version 2) |
//! | 100 | 412 | pad |
//!
//! mdadm writes the record 4 KiB before the data (`devstart − 8` sectors) and, when that
//! is not the start of the file, a second copy right after the data: in a backup file the
//! record is at byte 0 and the data at byte 4096; on a spare the data ends 4 KiB before
//! `data_offset + component size`. Its checksum is quirky (each step shifts left by 3 and
//! adds the *first* byte of the buffer, in 32-bit signed arithmetic) and is reproduced
//! exactly. On restart mdadm refuses a record whose magic, checksums or UUID do not
//! match, or whose `mtime` is more than 10 minutes after or 2 hours before the array's
//! update time (unless `MDADM_GROW_ALLOW_OLD` is set).

use crate::{le, Area, Extent, FormatError, Result};

/// Size of the record.
pub const RECORD_BYTES: usize = 512;
/// Magic of a one-section record.
pub const MAGIC_1: &[u8; 16] = b"md_backup_data-1";
/// Magic of a two-section record.
pub const MAGIC_2: &[u8; 16] = b"md_backup_data-2";
/// Where the data starts in a backup file (4 KiB after the record at byte 0).
pub const BACKUP_DATA_SECTOR: u64 = 8;
/// How far the array's update time may be after `mtime` (mdadm: 2 hours).
pub const MAX_UTIME_AFTER_MTIME: u64 = 2 * 60 * 60;
/// How far the array's update time may be before `mtime` (mdadm: 10 minutes).
pub const MAX_UTIME_BEFORE_MTIME: u64 = 10 * 60;

/// A decoded backup record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackupRecord {
    /// 1 or 2 (the magic's last character).
    pub version: u8,
    /// Array UUID.
    pub set_uuid: [u8; 16],
    /// Write time, seconds.
    pub mtime: u64,
    /// Sector of the saved data on the backup file/device.
    pub devstart: u64,
    /// Array sector of the first section.
    pub arraystart: u64,
    /// Sectors in the first section (0: nothing saved).
    pub length: u64,
    /// Second section's data, in sectors after `devstart` (used by version 2; mdadm
    /// also fills it in version-1 records).
    pub devstart2: u64,
    /// Array sector of the second section (version 2).
    pub arraystart2: u64,
    /// Sectors in the second section (version 2).
    pub length2: u64,
}

/// One saved section: `sectors` array sectors from `array_sector`, stored from
/// `dev_sector` of the backup file/device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Section {
    /// First array sector saved.
    pub array_sector: u64,
    /// Sectors saved.
    pub sectors: u64,
    /// Where on the backup file/device they are.
    pub dev_sector: u64,
}

/// mdadm's record checksum over the first `len` bytes (`bsb_csum`): starting from 0,
/// `len` times `csum = (csum << 3) + buf[0]`, with `buf[0]` sign-extended and 32-bit
/// wrapping arithmetic. (It depends only on the first byte and `len`.)
pub fn checksum(buf: &[u8], len: usize) -> u32 {
    let first = i32::from(buf.first().copied().unwrap_or(0) as i8);
    let mut c: i32 = 0;
    for _ in 0..len {
        c = c.wrapping_shl(3).wrapping_add(first);
    }
    c as u32
}

fn bad(field: &'static str, why: impl Into<String>) -> FormatError {
    FormatError::BadField {
        field,
        why: why.into(),
    }
}

impl BackupRecord {
    /// Decode and check magic and checksum(s) (`buf` ≥ 512 bytes). The UUID, the time and
    /// the sections' place are checked by [`BackupRecord::check_for_array`] and
    /// [`BackupRecord::check_within`].
    pub fn parse(buf: &[u8]) -> Result<BackupRecord> {
        le::need(buf, RECORD_BYTES)?;
        let magic = le::arr::<16>(buf, 0)?;
        let version = match &magic {
            m if m == MAGIC_1 => 1,
            m if m == MAGIC_2 => 2,
            _ => {
                return Err(bad(
                    "magic",
                    format!(
                        "{:?} is not md_backup_data-1 or -2: not an mdadm backup",
                        String::from_utf8_lossy(&magic)
                    ),
                ))
            }
        };
        for (off, len) in [(64usize, 64usize), (96, 96)]
            .into_iter()
            .take(usize::from(version))
        {
            let stored = le::u32_at(buf, off)?;
            let computed = checksum(buf, len);
            if stored != computed {
                return Err(FormatError::BadChecksum { stored, computed });
            }
        }
        // mdadm fills the second-section fields in version-1 records too (not checksummed).
        let v2 = |off: usize| le::u64_at(buf, off);
        Ok(BackupRecord {
            version,
            set_uuid: le::arr(buf, 16)?,
            mtime: le::u64_at(buf, 32)?,
            devstart: le::u64_at(buf, 40)?,
            arraystart: le::u64_at(buf, 48)?,
            length: le::u64_at(buf, 56)?,
            devstart2: v2(72)?,
            arraystart2: v2(80)?,
            length2: v2(88)?,
        })
    }

    /// Encode to 512 bytes as mdadm writes it: fields, zero padding, `sb_csum`, and for
    /// version 2 `sb_csum2`. A version other than 2 is written as version 1 (mdadm writes
    /// the second-section fields there too; they are then not checksummed or used).
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        let v2 = self.version == 2;
        le::put(&mut b, 0, if v2 { MAGIC_2 } else { MAGIC_1 });
        le::put(&mut b, 16, &self.set_uuid);
        le::put(&mut b, 32, &self.mtime.to_le_bytes());
        le::put(&mut b, 40, &self.devstart.to_le_bytes());
        le::put(&mut b, 48, &self.arraystart.to_le_bytes());
        le::put(&mut b, 56, &self.length.to_le_bytes());
        le::put(&mut b, 72, &self.devstart2.to_le_bytes());
        le::put(&mut b, 80, &self.arraystart2.to_le_bytes());
        le::put(&mut b, 88, &self.length2.to_le_bytes());
        let c = checksum(&b, 64);
        le::put(&mut b, 64, &c.to_le_bytes());
        if v2 {
            let c2 = checksum(&b, 96);
            le::put(&mut b, 96, &c2.to_le_bytes());
        }
        b
    }

    /// The non-empty saved sections.
    pub fn sections(&self) -> Vec<Section> {
        let mut v = Vec::with_capacity(2);
        if self.length > 0 {
            v.push(Section {
                array_sector: self.arraystart,
                sectors: self.length,
                dev_sector: self.devstart,
            });
        }
        if self.version == 2 && self.length2 > 0 {
            v.push(Section {
                array_sector: self.arraystart2,
                sectors: self.length2,
                dev_sector: self.devstart.saturating_add(self.devstart2),
            });
        }
        v
    }

    /// The sections, each checked to lie inside a backup area of `area_sectors` and after
    /// the leading record copy (`devstart ≥ 8`), without overlapping each other or
    /// overflowing: what a reader may then read (and allocate) is bounded by the area.
    pub fn check_within(&self, area_sectors: u64) -> Result<Vec<Section>> {
        if self.devstart < BACKUP_DATA_SECTOR {
            return Err(FormatError::OutOfRange {
                field: "devstart",
                value: self.devstart.into(),
                min: BACKUP_DATA_SECTOR.into(),
                max: area_sectors.into(),
            });
        }
        let secs = self.sections();
        let mut seen: Vec<Extent> = Vec::with_capacity(2);
        for (i, s) in secs.iter().enumerate() {
            let field = if i == 0 { "length" } else { "length2" };
            let e = Extent::at(s.dev_sector, s.sectors);
            if e.end > area_sectors
                || e.end == u64::MAX
                || s.array_sector.checked_add(s.sectors).is_none()
            {
                return Err(FormatError::OutsideDevice {
                    field,
                    area: Area::Backup,
                    extent: e,
                    dev_sectors: area_sectors,
                });
            }
            if let Some(&o) = seen.iter().find(|o| o.overlaps(&e)) {
                return Err(FormatError::Overlap {
                    field,
                    area: Area::Backup,
                    extent: e,
                    other: Area::Backup,
                    other_extent: o,
                });
            }
            seen.push(e);
        }
        Ok(secs)
    }

    /// Does this record belong to the array (same UUID) and is it recent enough for
    /// mdadm (`mtime − 10 min ≤ array utime ≤ mtime + 2 h`; `allow_old` is mdadm's
    /// `MDADM_GROW_ALLOW_OLD`)?
    pub fn check_for_array(
        &self,
        uuid: &[u8; 16],
        array_utime: u64,
        allow_old: bool,
    ) -> Result<()> {
        if &self.set_uuid != uuid {
            return Err(bad(
                "set_uuid",
                "the backup belongs to another array; give the backup file of this array",
            ));
        }
        let too_new = array_utime > self.mtime.saturating_add(MAX_UTIME_AFTER_MTIME);
        let too_old = array_utime < self.mtime.saturating_sub(MAX_UTIME_BEFORE_MTIME);
        if (too_new || too_old) && !allow_old {
            return Err(bad(
                "mtime",
                format!(
                    "backup written at {} but the array was last updated at {array_utime}: it may be from an earlier reshape; use it only if you are sure it is this reshape's",
                    self.mtime
                ),
            ));
        }
        Ok(())
    }

    /// mdadm's rule: does this record hold data the array still needs at the recorded
    /// `position`? `increasing`: the position grows (mdadm uses `delta_disks ≥ 0`). A
    /// section is stale when it lies wholly behind the position.
    pub fn needed(&self, position: u64, increasing: bool) -> bool {
        self.sections().iter().any(|s| {
            if increasing {
                s.array_sector.saturating_add(s.sectors) >= position
            } else {
                s.array_sector < position
            }
        })
    }

    /// mdadm's position after restoring the sections (written through the new geometry):
    /// unchanged if the position lies outside their span, else the end of the span
    /// (increasing) or its start (decreasing).
    pub fn position_after_restore(&self, position: u64, increasing: bool) -> u64 {
        let secs = self.sections();
        let Some(lo) = secs.iter().map(|s| s.array_sector).min() else {
            return position;
        };
        let hi = secs
            .iter()
            .map(|s| s.array_sector.saturating_add(s.sectors))
            .max()
            .unwrap_or(lo);
        if position < lo || position > hi {
            position
        } else if increasing {
            hi
        } else {
            lo
        }
    }
}

/// Where mdadm keeps a backup on a spare member whose data area is `data_offset` and
/// whose component size is `size` (sectors), for `sectors` of data: the data ends 4 KiB
/// before `data_offset + size`; the record copies are 4 KiB before it and right after it.
/// Returns `(leading record sector, data start sector, trailing record sector)`.
pub fn spare_placement(data_offset: u64, size: u64, sectors: u64) -> Option<(u64, u64, u64)> {
    let trailing = data_offset
        .checked_add(size)?
        .checked_sub(BACKUP_DATA_SECTOR)?;
    let data = trailing.checked_sub(sectors)?;
    let leading = data.checked_sub(BACKUP_DATA_SECTOR)?;
    (leading >= data_offset).then_some((leading, data, trailing))
}
