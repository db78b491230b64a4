//! Where everything goes on each new member (mdadm's choices): superblock, data offset,
//! bitmap and bad-block log; the component size; the bitmap's chunk.

use super::{CreateOptions, Shape};
use crate::error::{EngineError, Result};
use crate::sb::Metadata;
use raidkit_format::bitmap as fbitmap;
use raidkit_format::placement::{self, choose_bm_space, v1_data_offset};
use raidkit_format::v090;
use raidkit_format::v1::Minor;
use raidkit_layout::{Geometry, Level};

/// Where things go on one member (sectors).
pub(super) struct Place {
    pub(super) super_offset: u64,
    pub(super) data_offset: u64,
    pub(super) data_size: u64,
    pub(super) bitmap_offset: i32,
}

/// The internal bitmap of a new array.
#[derive(Clone, Copy)]
pub(super) struct BitmapPlan {
    /// Sectors the bitmap covers.
    pub(super) sync_size: u64,
    /// Bytes per bit.
    pub(super) chunk: u32,
    /// Bits.
    pub(super) chunks: u64,
    /// Sectors of the bitmap area (superblock and bits, whole 4 KiB).
    pub(super) sectors: u64,
}

/// Where the superblock and data go on each member (None for a `missing` slot), from the
/// device sizes (None: missing).
pub(super) fn place_members(
    opts: &CreateOptions,
    shape: &Shape,
    dev_sectors: &[Option<u64>],
) -> Result<Vec<Option<Place>>> {
    let first = dev_sectors.iter().flatten().copied().next().unwrap_or(0);
    let chunk_kib = shape.chunk_sectors / 2;
    let mut places: Vec<Option<Place>> = Vec::with_capacity(dev_sectors.len());
    for ds in dev_sectors {
        let Some(ds) = *ds else {
            places.push(None);
            continue;
        };
        let p = match opts.metadata {
            Metadata::V1(minor @ (Minor::V1 | Minor::V2)) => {
                let so = minor.super_offset(ds);
                let dof = v1_data_offset(first, chunk_kib, choose_bm_space(first));
                Place {
                    super_offset: so,
                    data_offset: dof,
                    data_size: ds.saturating_sub(dof),
                    bitmap_offset: if opts.bitmap { 8 } else { 0 },
                }
            }
            Metadata::V1(Minor::V0) => {
                let so = Minor::V0.super_offset(ds);
                // Reserve below the superblock: bitmap space + 8 (bad-block log room).
                let bm = if opts.bitmap { 8 } else { choose_bm_space(ds) };
                let reserve = bm + 8;
                Place {
                    super_offset: so,
                    data_offset: 0,
                    data_size: so.saturating_sub(reserve),
                    bitmap_offset: 0,
                }
            }
            Metadata::V090 => {
                let so = v090::super_offset(ds).ok_or_else(|| {
                    EngineError::Invalid("member too small for 0.90 metadata".into())
                })?;
                Place {
                    super_offset: so,
                    data_offset: 0,
                    data_size: so,
                    bitmap_offset: 0,
                }
            }
        };
        places.push(Some(p));
    }
    Ok(places)
}

/// The component size (sectors of each member used) and, for linear/RAID0, the data
/// sectors of each member.
pub(super) fn component_size(
    opts: &CreateOptions,
    shape: &Shape,
    places: &[Option<Place>],
) -> Result<(u64, Vec<u64>)> {
    let (level, chunk_sectors) = (shape.level, shape.chunk_sectors);
    let min_data = places
        .iter()
        .flatten()
        .map(|p| p.data_size)
        .min()
        .unwrap_or(0);
    let round = match level {
        Level::Raid1 => 128,
        Level::Linear => 1,
        _ => chunk_sectors.max(1),
    };
    let mut size = min_data / round * round;
    if let Metadata::V090 = opts.metadata {
        size = size.min((u64::from(u32::MAX)) * 2 / round * round);
    }
    if size < 16 || (chunk_sectors > 0 && size < chunk_sectors) {
        return Err(EngineError::Invalid(format!(
            "members are too small: each needs room for the metadata plus at least one chunk (usable size {} KiB); use larger members or a smaller chunk",
            min_data / 2
        )));
    }
    let member_sectors: Vec<u64> = if matches!(level, Level::Linear | Level::Raid0) {
        places
            .iter()
            .map(|p| p.as_ref().map(|p| p.data_size).unwrap_or(0))
            .collect()
    } else {
        Vec::new()
    };
    Ok((size, member_sectors))
}

/// The bitmap of the new array, if asked for: its chunk (given, or mdadm's default for
/// the room) and size; with 1.0 metadata it goes below the superblock, which the places
/// make room for.
pub(super) fn plan_bitmap(
    opts: &CreateOptions,
    geo: &Geometry,
    size: u64,
    places: &mut [Option<Place>],
) -> Result<Option<BitmapPlan>> {
    if !opts.bitmap {
        return Ok(None);
    }
    let sync_size = if geo.level == Level::Raid10 {
        geo.array_sectors()
    } else {
        size
    };
    let room = match opts.metadata {
        Metadata::V1(Minor::V1 | Minor::V2) => {
            let p = places
                .iter()
                .flatten()
                .next()
                .map(|p| (p.super_offset, p.data_offset))
                .unwrap_or((8, 2048));
            p.1.saturating_sub(p.0 + 8).min(256)
        }
        Metadata::V1(Minor::V0) => 256,
        Metadata::V090 => 120,
    };
    let chunk = match opts.bitmap_chunk_bytes {
        Some(c) => {
            if !c.is_power_of_two() || c < 512 || c > u64::from(u32::MAX) {
                return Err(EngineError::Invalid(format!(
                    "bitmap chunk {c} must be a power of two of at least 512 bytes"
                )));
            }
            c as u32
        }
        None => fbitmap::default_chunk_bytes(sync_size, room),
    };
    let chunks = sync_size.div_ceil(u64::from(chunk) / 512);
    let bytes = 256 + chunks.div_ceil(8);
    let sectors = bytes.div_ceil(4096) * 8;
    if sectors > room.max(8) && !matches!(opts.metadata, Metadata::V1(Minor::V0)) {
        return Err(EngineError::Invalid(format!(
            "the bitmap needs {} KiB but only {} KiB fit before the data; a larger bitmap chunk needs fewer bits",
            sectors / 2,
            room / 2
        )));
    }
    if opts.metadata == Metadata::V1(Minor::V0) {
        // Below the superblock: -(R + 8).
        for p in places.iter_mut().flatten() {
            p.bitmap_offset = -((sectors as i32) + 8);
            let limit = p.super_offset.saturating_sub(sectors + 8);
            p.data_size = p.data_size.min(limit);
        }
        if places.iter().flatten().any(|p| p.data_size < size) {
            return Err(EngineError::Invalid(
                "no room for the bitmap below the 1.0 superblock; use larger members".into(),
            ));
        }
    }
    Ok(Some(BitmapPlan {
        sync_size,
        chunk,
        chunks,
        sectors,
    }))
}

/// mdadm's bad-block log placement for a new member (§1.9): 1.1/1.2 after the bitmap
/// (space) or just below the data, 1.0 the 4 KiB below the superblock.
pub(super) fn bblog_place(
    p: &Place,
    metadata: Metadata,
    bitmap_sectors: Option<u64>,
    dev_sectors: u64,
) -> Option<(i32, u16)> {
    match metadata {
        Metadata::V1(Minor::V0) => {
            let reserve = p.super_offset.checked_sub(p.data_offset + p.data_size)?;
            let bm = bitmap_sectors.unwrap_or(0);
            (reserve >= bm + u64::from(placement::BBLOG_SECTORS)).then_some((
                -i32::from(placement::BBLOG_SECTORS),
                placement::BBLOG_SECTORS,
            ))
        }
        Metadata::V1(_) => placement::v1_bblog_placement(
            p.super_offset,
            p.data_offset,
            bitmap_sectors.unwrap_or_else(|| choose_bm_space(dev_sectors)),
        ),
        Metadata::V090 => None,
    }
}
