//! Validation of superblock fields against the format's limits and against the device, so
//! that nothing a member's metadata says is trusted before it is checked: not a count that
//! sizes a loop or an allocation, not an offset that places a write.
//!
//! Three steps, all pure (the caller reads the bytes; see the crate's CONTRACT):
//!
//! 1. Parsing ([`SuperblockV1::parse`], [`SuperblockV090::parse`]) already refuses counts
//!    beyond the format (`max_dev`, `raid_disks`, the pre-reshape device count, 0.90's 27
//!    descriptors), so every loop over roles is bounded by 1920 (27 for 0.90).
//! 2. `validate()` checks the fields against each other and against md's rules with no
//!    device at hand: level, layout, chunk and device count (before and after a reshape,
//!    by [`raidkit_layout::Geometry::new`]), `size` against `data_size`, feature-bit
//!    combinations the kernel refuses, the bad-block log size.
//! 3. `areas(dev_sectors)` places the superblock, the data area (and the data area after
//!    the reshape's offset change), the bitmap, the bad-block log and a PPL on the device,
//!    and refuses any that runs past the device or overlaps another (client writes would
//!    land on metadata). With the bitmap superblock read from the returned place,
//!    [`MemberAreas::check_bitmap`] checks `sync_size` against the array and that the bits
//!    fit in the room before the next area — the bytes it returns are what the caller
//!    may then allocate.
//!
//! Every error names the field, its value and the limit it breaks, and says what to do
//! (see [`crate::FormatError`]).

use crate::bitmap::{BitmapSuper, BITMAP_SB_BYTES};
use crate::v090::{self, SuperblockV090, MD_SB_DISKS};
use crate::v1::{feature, SuperblockV1, MAX_DEV_LIMIT, SB_FIXED};
use crate::{FormatError, Result};
use raidkit_layout::{Geometry, LayoutError, Level};
use std::fmt;

/// A half-open range of device sectors `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First sector.
    pub start: u64,
    /// One past the last sector.
    pub end: u64,
}

impl Extent {
    /// `[start, start + len)`, saturating at `u64::MAX`.
    pub fn at(start: u64, len: u64) -> Extent {
        Extent {
            start,
            end: start.saturating_add(len),
        }
    }
    /// Number of sectors.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
    /// True if it holds no sector.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
    /// True if the two ranges share a sector.
    pub fn overlaps(&self, other: &Extent) -> bool {
        !self.is_empty() && !other.is_empty() && self.start < other.end && other.start < self.end
    }
}

impl fmt::Display for Extent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// The areas a member's metadata places on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Area {
    /// The superblock itself.
    Superblock,
    /// The data area (`data_offset`, `data_size`; 0.90: `size` from sector 0).
    Data,
    /// The data area at the new offset of a reshape (`data_offset + new_offset`).
    NewData,
    /// The write-intent bitmap (superblock and bits).
    Bitmap,
    /// The bad-block log.
    BadBlockLog,
    /// The partial parity log.
    Ppl,
    /// Data saved in a reshape backup (mdadm's backup file or a spare's backup area).
    Backup,
}

impl fmt::Display for Area {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Area::Superblock => "the superblock",
            Area::Data => "the data area",
            Area::NewData => "the data area after the reshape",
            Area::Bitmap => "the bitmap",
            Area::BadBlockLog => "the bad-block log",
            Area::Ppl => "the partial parity log",
            Area::Backup => "the reshape backup data",
        })
    }
}

/// Where a validated member's metadata and data lie (device sectors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAreas {
    /// Device size in sectors.
    pub dev_sectors: u64,
    /// The superblock (1.x: `256 + 2*max_dev` bytes rounded to 512; 0.90: 4 KiB).
    pub superblock: Extent,
    /// The data area (1.x: `data_offset .. data_offset + data_size`; 0.90:
    /// `0 .. size`).
    pub data: Extent,
    /// The data area at the new offset while a reshape changes it (`NEW_OFFSET`): starts at
    /// `data_offset + new_offset` and is `size` sectors long (`data_size` for RAID0/linear).
    pub new_data: Option<Extent>,
    /// The bitmap's first sector, if the superblock says there is one.
    pub bitmap_start: Option<u64>,
    /// Where the room for the bitmap ends: the next area after its start, the device end,
    /// or (0.90) the end of the 64 KiB reserved block. Meaningless without `bitmap_start`.
    pub bitmap_room_end: u64,
    /// The bad-block log area, if there is one.
    pub bblog: Option<Extent>,
    /// The PPL area, if there is one.
    pub ppl: Option<Extent>,
}

impl MemberAreas {
    /// Check a bitmap superblock read at `bitmap_start` before anything is allocated from
    /// it: its bits must cover `needed_sync_size` sectors (from
    /// [`SuperblockV1::bitmap_sync_size`] / [`SuperblockV090::bitmap_sync_size`]) and the
    /// superblock plus bits (every node's copy for a clustered bitmap, each rounded to
    /// 4 KiB) must fit before [`MemberAreas::bitmap_room_end`]. Returns the bitmap's extent
    /// (its bytes rounded up to whole sectors); its length bounds what a reader allocates.
    /// An error means: ignore the bitmap (and resync fully if the array is dirty).
    pub fn check_bitmap(&self, bsb: &BitmapSuper, needed_sync_size: u64) -> Result<Extent> {
        let Some(start) = self.bitmap_start else {
            return Err(FormatError::BadField {
                field: "feature_map",
                why: "no bitmap is recorded for this member".into(),
            });
        };
        let bytes = bitmap_disk_bytes(bsb);
        let room_bytes = self
            .bitmap_room_end
            .saturating_sub(start)
            .saturating_mul(512);
        if bytes > u128::from(room_bytes) {
            return Err(FormatError::BitmapNoRoom {
                sync_size: bsb.sync_size,
                chunksize: bsb.chunksize,
                bytes,
                room_bytes,
            });
        }
        if bsb.sync_size < needed_sync_size {
            return Err(FormatError::BitmapTooShort {
                sync_size: bsb.sync_size,
                needed: needed_sync_size,
            });
        }
        // bytes <= room_bytes < 2^64 here.
        let sectors = u64::try_from(bytes.div_ceil(512)).unwrap_or(u64::MAX);
        Ok(Extent::at(start, sectors))
    }
}

/// Bytes a bitmap occupies on disk: `256 + ceil(chunks/8)`; a clustered bitmap (version 5)
/// holds `nodes` copies, each rounded up to 4 KiB.
pub fn bitmap_disk_bytes(bsb: &BitmapSuper) -> u128 {
    let one = u128::from(BITMAP_SB_BYTES as u64) + u128::from(bsb.chunks().div_ceil(8));
    if bsb.version == 5 && bsb.nodes > 1 {
        one.div_ceil(4096) * 4096 * u128::from(bsb.nodes)
    } else {
        one
    }
}

/// The field names used in errors about one geometry.
struct ShapeFields {
    level: &'static str,
    layout: &'static str,
    chunk: &'static str,
    disks: &'static str,
}

const CURRENT: ShapeFields = ShapeFields {
    level: "level",
    layout: "layout",
    chunk: "chunksize",
    disks: "raid_disks",
};
const OLD: ShapeFields = ShapeFields {
    level: "level",
    layout: "layout",
    chunk: "chunksize",
    disks: "delta_disks",
};
const NEW: ShapeFields = ShapeFields {
    level: "new_level",
    layout: "new_layout",
    chunk: "new_chunk",
    disks: "raid_disks",
};

fn shape_err(field: &'static str, value: i128, why: impl Into<String>) -> FormatError {
    FormatError::BadShape {
        field,
        value,
        why: why.into(),
    }
}

/// The geometry a superblock's shape fields describe, built by the layout crate (which owns
/// every level/layout/chunk/device-count rule). RAID0/linear member sizes are per member
/// and checked against the devices elsewhere, so they are taken as one chunk here.
/// `disks_value` is what the error reports for the device count (`delta_disks` for the
/// pre-reshape count).
fn shape(
    level: i32,
    layout: u32,
    chunk_sectors: u64,
    disks: u32,
    size: u64,
    names: &ShapeFields,
    disks_value: i128,
) -> Result<Geometry> {
    let lv = Level::from_md(level).ok_or_else(|| {
        let why = match level {
            -4 => "multipath is a legacy kernel personality raidkit does not handle",
            -5 => "faulty is a kernel test personality raidkit does not handle",
            _ => "not an md RAID level (linear -1, 0, 1, 4, 5, 6, 10)",
        };
        shape_err(names.level, level.into(), why)
    })?;
    let n = disks as usize;
    let members = match lv {
        Level::Linear | Level::Raid0 => vec![chunk_sectors.max(1); n.min(MAX_DEV_LIMIT as usize)],
        _ => Vec::new(),
    };
    Geometry::new(lv, layout, chunk_sectors, n, size, members).map_err(|e| match e {
        LayoutError::UnknownLevel(s) => shape_err(names.level, level.into(), s),
        LayoutError::BadLayout { why, .. } => shape_err(names.layout, layout.into(), why),
        LayoutError::BadChunk { why, .. } => shape_err(names.chunk, chunk_sectors.into(), why),
        LayoutError::BadDiskCount { why, .. } => shape_err(names.disks, disks_value, why),
        LayoutError::Invalid(why) => shape_err("size", size.into(), why),
    })
}

/// The sync size a bitmap of this geometry must cover: the component size for RAID1/4/5/6
/// (rounded down to the chunk for 4/5/6), the array size for RAID10; None for levels
/// without redundancy (md keeps no bitmap for them).
fn sync_size_of(g: &Geometry) -> Option<u64> {
    match g.level {
        Level::Linear | Level::Raid0 => None,
        Level::Raid10 => Some(g.array_sectors()),
        _ => Some(g.used_dev_sectors(0)),
    }
}

fn check_range(field: &'static str, value: i128, min: i128, max: i128) -> Result<()> {
    if value < min || value > max {
        return Err(FormatError::OutOfRange {
            field,
            value,
            min,
            max,
        });
    }
    Ok(())
}

/// Place `area` (areas are placed in a fixed order): inside the device, and not overlapping
/// any area placed before it (the data area and the data area at the reshape's new offset
/// may overlap: that is how md moves data).
fn place(
    placed: &mut Vec<(Area, Extent)>,
    dev_sectors: u64,
    field: &'static str,
    area: Area,
    extent: Extent,
) -> Result<()> {
    if extent.end > dev_sectors || extent.end == u64::MAX {
        return Err(FormatError::OutsideDevice {
            field,
            area,
            extent,
            dev_sectors,
        });
    }
    let data_pair = |a: Area, b: Area| matches!((a, b), (Area::Data, Area::NewData));
    if let Some(&(other, other_extent)) = placed
        .iter()
        .find(|(a, e)| !data_pair(*a, area) && e.overlaps(&extent))
    {
        return Err(FormatError::Overlap {
            field,
            area,
            extent,
            other,
            other_extent,
        });
    }
    placed.push((area, extent));
    Ok(())
}

/// Device sector `base + offset`, or an error naming `field` if it is negative or too large.
fn offset_sector(field: &'static str, base: u64, offset: i64) -> Result<u64> {
    let s = i128::from(base) + i128::from(offset);
    u64::try_from(s).map_err(|_| FormatError::OutOfRange {
        field,
        value: offset.into(),
        min: -i128::from(base),
        max: i128::from(u64::MAX) - i128::from(base),
    })
}

/// Finish a placement: the room for the bitmap ends at the next area after it (or `cap`).
fn finish(placed: &[(Area, Extent)], dev_sectors: u64, bitmap_start: Option<u64>, cap: u64) -> u64 {
    let Some(b) = bitmap_start else {
        return 0;
    };
    placed
        .iter()
        .filter(|(a, e)| *a != Area::Bitmap && e.start > b)
        .map(|(_, e)| e.start)
        .fold(dev_sectors.min(cap), u64::min)
}

impl SuperblockV1 {
    /// The device count before the reshape (`raid_disks − delta_disks`), or `raid_disks`
    /// when no reshape is active. Parsing guarantees it is in `0..=1920`.
    pub fn old_raid_disks(&self) -> u32 {
        if self.feature_map & feature::RESHAPE_ACTIVE == 0 {
            return self.raid_disks;
        }
        let old = i64::from(self.raid_disks) - i64::from(self.delta_disks);
        u32::try_from(old.clamp(0, i64::from(MAX_DEV_LIMIT))).unwrap_or(0)
    }

    /// Check the fields against each other and md's rules (no device needed): the shape
    /// before and (with RESHAPE_ACTIVE) after the reshape, `size ≤ data_size` for levels
    /// that use `size`, feature-bit combinations the kernel refuses (PPL with a bitmap or a
    /// journal, both PPL kinds, a journal with a bitmap), and a bad-block log of 1..=8
    /// sectors at a non-zero offset when BAD_BLOCKS is set.
    pub fn validate(&self) -> Result<()> {
        let fm = self.feature_map;
        let reshaping = fm & feature::RESHAPE_ACTIVE != 0;
        check_range(
            "raid_disks",
            self.raid_disks.into(),
            1,
            MAX_DEV_LIMIT.into(),
        )?;
        let old = self.old_raid_disks();
        if reshaping {
            check_range(
                "delta_disks",
                self.delta_disks.into(),
                i128::from(self.raid_disks) - i128::from(MAX_DEV_LIMIT),
                i128::from(self.raid_disks) - 1,
            )?;
        }
        let names = if reshaping { &OLD } else { &CURRENT };
        let disks_value = if reshaping {
            self.delta_disks.into()
        } else {
            self.raid_disks.into()
        };
        let g = shape(
            self.level,
            self.layout,
            self.chunksize.into(),
            old,
            self.size,
            names,
            disks_value,
        )?;
        if reshaping {
            shape(
                self.new_level,
                self.new_layout,
                self.new_chunk.into(),
                self.raid_disks,
                self.size,
                &NEW,
                self.raid_disks.into(),
            )?;
        }
        if !matches!(g.level, Level::Linear | Level::Raid0) && self.size > self.data_size {
            return Err(FormatError::OutOfRange {
                field: "size",
                value: self.size.into(),
                min: 1,
                max: self.data_size.into(),
            });
        }
        let combos = [
            (
                feature::PPL | feature::MULTIPLE_PPLS,
                "PPL and MULTIPLE_PPLS",
            ),
            (feature::PPL | feature::BITMAP_OFFSET, "PPL and a bitmap"),
            (
                feature::MULTIPLE_PPLS | feature::BITMAP_OFFSET,
                "PPL and a bitmap",
            ),
            (
                feature::JOURNAL | feature::BITMAP_OFFSET,
                "a journal and a bitmap",
            ),
            (feature::JOURNAL | feature::PPL, "a journal and PPL"),
            (
                feature::JOURNAL | feature::MULTIPLE_PPLS,
                "a journal and PPL",
            ),
        ];
        if let Some((_, what)) = combos.iter().find(|(bits, _)| fm & bits == *bits) {
            return Err(FormatError::BadField {
                field: "feature_map",
                why: format!("{fm:#x} combines {what}, which md refuses"),
            });
        }
        if fm & feature::BAD_BLOCKS != 0 {
            check_range("bblog_size", self.bblog_size.into(), 1, 8)?;
            if self.bblog_offset == 0 {
                return Err(FormatError::BadField {
                    field: "bblog_offset",
                    why: "0 while BAD_BLOCKS says the log holds entries".into(),
                });
            }
        }
        Ok(())
    }

    /// Place this member's areas on a device of `dev_sectors` and refuse any that runs past
    /// it or overlaps another: `super_offset` must be where this 1.x variant lives; the
    /// data area (and the one at the reshape's new offset) must not touch the superblock,
    /// bitmap, bad-block log or PPL; for 1.0 that means it ends below the metadata at the
    /// end of the device.
    pub fn areas(&self, dev_sectors: u64) -> Result<MemberAreas> {
        let so = self.super_offset;
        if so != self.minor().super_offset(dev_sectors) {
            return Err(FormatError::BadField {
                field: "super_offset",
                why: format!(
                    "{so} is not where a 1.x superblock lives on a device of {dev_sectors} sectors (0, 8 or {})",
                    crate::v1::Minor::V0.super_offset(dev_sectors)
                ),
            });
        }
        let sb_bytes = SB_FIXED as u64 + 2 * u64::from(self.max_dev.min(MAX_DEV_LIMIT));
        let mut placed = Vec::with_capacity(6);
        let sb = Extent::at(so, sb_bytes.div_ceil(512));
        place(
            &mut placed,
            dev_sectors,
            "super_offset",
            Area::Superblock,
            sb,
        )?;
        let data = Extent::at(self.data_offset, self.data_size);
        place(&mut placed, dev_sectors, "data_offset", Area::Data, data)?;
        let fm = self.feature_map;
        let new_data = if fm & feature::RESHAPE_ACTIVE != 0 && fm & feature::NEW_OFFSET != 0 {
            let start = offset_sector("new_offset", self.data_offset, self.new_offset.into())?;
            let len = match Level::from_md(self.level) {
                Some(Level::Linear | Level::Raid0) | None => self.data_size,
                Some(_) => self.size,
            };
            let e = Extent::at(start, len);
            place(&mut placed, dev_sectors, "new_offset", Area::NewData, e)?;
            Some(e)
        } else {
            None
        };
        let ppl = fm & (feature::PPL | feature::MULTIPLE_PPLS) != 0;
        let bitmap_start = if fm & feature::BITMAP_OFFSET != 0 && !ppl {
            let b = offset_sector("bitmap_offset", so, self.bitmap_offset.into())?;
            place(
                &mut placed,
                dev_sectors,
                "bitmap_offset",
                Area::Bitmap,
                Extent::at(b, 1),
            )?;
            Some(b)
        } else {
            None
        };
        let bblog = if self.bblog_size != 0 && self.bblog_offset != 0 {
            let b = offset_sector("bblog_offset", so, self.bblog_offset.into())?;
            let e = Extent::at(b, self.bblog_size.into());
            place(
                &mut placed,
                dev_sectors,
                "bblog_offset",
                Area::BadBlockLog,
                e,
            )?;
            Some(e)
        } else {
            None
        };
        let ppl = if ppl {
            // The bitmap_offset bytes hold ppl.offset (le16, signed) and ppl.size (le16).
            let raw = self.bitmap_offset as u32;
            let off = i64::from((raw & 0xffff) as u16 as i16);
            let size = u64::from(raw >> 16);
            let b = offset_sector("ppl.offset", so, off)?;
            let e = Extent::at(b, size);
            place(&mut placed, dev_sectors, "ppl.offset", Area::Ppl, e)?;
            Some(e)
        } else {
            None
        };
        Ok(MemberAreas {
            dev_sectors,
            superblock: sb,
            data,
            new_data,
            bitmap_start,
            bitmap_room_end: finish(&placed, dev_sectors, bitmap_start, u64::MAX),
            bblog,
            ppl,
        })
    }

    /// Sectors the array's bitmap must cover (see [`MemberAreas::check_bitmap`]): the
    /// component size for RAID1/4/5/6, the array size for RAID10 (during a reshape the
    /// smaller of the two geometries'); None if the shape is invalid or the level keeps
    /// no bitmap.
    pub fn bitmap_sync_size(&self) -> Option<u64> {
        let old = shape(
            self.level,
            self.layout,
            self.chunksize.into(),
            self.old_raid_disks(),
            self.size,
            &CURRENT,
            0,
        )
        .ok()?;
        let need = sync_size_of(&old)?;
        if self.feature_map & feature::RESHAPE_ACTIVE == 0 {
            return Some(need);
        }
        let new = shape(
            self.new_level,
            self.new_layout,
            self.new_chunk.into(),
            self.raid_disks,
            self.size,
            &NEW,
            0,
        )
        .ok()?;
        Some(sync_size_of(&new).map_or(need, |n| n.min(need)))
    }
}

impl SuperblockV090 {
    /// The device count before the reshape (`raid_disks − delta_disks`, minor 91), or
    /// `raid_disks`. Parsing guarantees it is in `0..=27`.
    pub fn old_raid_disks(&self) -> u32 {
        if self.minor_version != 91 {
            return self.raid_disks;
        }
        let old = i64::from(self.raid_disks) - i64::from(self.delta_disks);
        u32::try_from(old.clamp(0, MD_SB_DISKS as i64)).unwrap_or(0)
    }

    /// Check the fields with no device at hand: 1..=27 raid disks, `this_disk.number` a
    /// descriptor index, chunk sizes multiples of 512 bytes, the shape before and (minor
    /// 91) after the reshape.
    pub fn validate(&self) -> Result<()> {
        let max = MD_SB_DISKS as i128;
        check_range("raid_disks", self.raid_disks.into(), 1, max)?;
        check_range("this_disk.number", self.this_disk.number.into(), 0, max - 1)?;
        let reshaping = self.minor_version == 91;
        if reshaping {
            check_range(
                "delta_disks",
                self.delta_disks.into(),
                i128::from(self.raid_disks) - max,
                i128::from(self.raid_disks) - 1,
            )?;
        }
        for (field, bytes) in [
            ("chunk_size", self.chunk_size),
            ("new_chunk", self.new_chunk),
        ] {
            if bytes % 512 != 0 && (field == "chunk_size" || reshaping) {
                return Err(shape_err(
                    field,
                    bytes.into(),
                    "not a whole number of 512-byte sectors",
                ));
            }
        }
        let size = u64::from(self.size_kib) * 2;
        let (names, disks_value) = if reshaping {
            (&OLD, self.delta_disks.into())
        } else {
            (&CURRENT, self.raid_disks.into())
        };
        let chunk = u64::from(self.chunk_size / 512);
        shape(
            self.level,
            self.layout,
            chunk,
            self.old_raid_disks(),
            size,
            names,
            disks_value,
        )
        .map_err(|e| rename_chunk(e, "chunk_size", self.chunk_size))?;
        if reshaping {
            let chunk = u64::from(self.new_chunk / 512);
            shape(
                self.new_level,
                self.new_layout,
                chunk,
                self.raid_disks,
                size,
                &NEW,
                self.raid_disks.into(),
            )
            .map_err(|e| rename_chunk(e, "new_chunk", self.new_chunk))?;
        }
        Ok(())
    }

    /// Place this member's areas on a device of `dev_sectors`: the superblock at
    /// `(dev_sectors & !127) − 128`, the data area `0..size` below it, the bitmap (state bit
    /// 8) 4 KiB after the superblock with room up to the end of the 64 KiB reserved block.
    pub fn areas(&self, dev_sectors: u64) -> Result<MemberAreas> {
        let Some(so) = v090::super_offset(dev_sectors) else {
            return Err(FormatError::OutsideDevice {
                field: "super_offset",
                area: Area::Superblock,
                extent: Extent::at(0, 128),
                dev_sectors,
            });
        };
        let mut placed = Vec::with_capacity(3);
        let sb = Extent::at(so, (v090::SB_BYTES / 512) as u64);
        place(
            &mut placed,
            dev_sectors,
            "super_offset",
            Area::Superblock,
            sb,
        )?;
        let data = Extent::at(0, u64::from(self.size_kib) * 2);
        place(&mut placed, dev_sectors, "size", Area::Data, data)?;
        let bitmap_start = if self.state & v090::sb_state::BITMAP_PRESENT != 0 {
            let b = so + sb.len();
            place(
                &mut placed,
                dev_sectors,
                "state",
                Area::Bitmap,
                Extent::at(b, 1),
            )?;
            Some(b)
        } else {
            None
        };
        Ok(MemberAreas {
            dev_sectors,
            superblock: sb,
            data,
            new_data: None,
            bitmap_start,
            bitmap_room_end: finish(&placed, dev_sectors, bitmap_start, so + 128),
            bblog: None,
            ppl: None,
        })
    }

    /// Sectors the array's bitmap must cover (as [`SuperblockV1::bitmap_sync_size`]).
    pub fn bitmap_sync_size(&self) -> Option<u64> {
        let size = u64::from(self.size_kib) * 2;
        let chunk = u64::from(self.chunk_size / 512);
        let old = shape(
            self.level,
            self.layout,
            chunk,
            self.old_raid_disks(),
            size,
            &CURRENT,
            0,
        )
        .ok()?;
        let need = sync_size_of(&old)?;
        if self.minor_version != 91 {
            return Some(need);
        }
        let chunk = u64::from(self.new_chunk / 512);
        let new = shape(
            self.new_level,
            self.new_layout,
            chunk,
            self.raid_disks,
            size,
            &NEW,
            0,
        )
        .ok()?;
        Some(sync_size_of(&new).map_or(need, |n| n.min(need)))
    }
}

/// 0.90 keeps chunk sizes in bytes: report them as such.
fn rename_chunk(e: FormatError, field: &'static str, bytes: u32) -> FormatError {
    match e {
        FormatError::BadShape { field: f, why, .. } if f == "chunksize" || f == "new_chunk" => {
            FormatError::BadShape {
                field,
                value: bytes.into(),
                why,
            }
        }
        other => other,
    }
}
