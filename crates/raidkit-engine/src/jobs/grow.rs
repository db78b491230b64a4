//! Adding and removing the internal write-intent bitmap of an array (md's `--grow
//! --bitmap=internal|none`), on a running array or offline. Placement and default chunk
//! follow mdadm's rules for a bitmap added to an existing array (§3.1, §3.6).

use crate::array::meta::Meta;
use crate::array::{lock, Array};
use crate::bitmap::RunBitmap;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::sb::Super;
use raidkit_format::bitmap::{self as fbitmap, BitmapSuper, BITMAP_SB_BYTES};
use raidkit_format::v090::{self, sb_state};
use raidkit_format::v1::{feature, Minor};
use raidkit_format::MAX_SECTOR;
use raidkit_layout::Level;
use std::sync::Arc;

/// What `grow --bitmap` should leave behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitmapMode {
    /// An internal write-intent bitmap.
    Internal {
        /// Bytes per bit (None: mdadm's choice for the size and room).
        chunk_bytes: Option<u64>,
    },
    /// No bitmap.
    None,
}

/// What a bitmap change did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BitmapChange {
    /// True if a bitmap is present now.
    pub bitmap: bool,
    /// Bytes per bit of the bitmap added.
    pub chunk_bytes: Option<u64>,
    /// Bits of the bitmap added.
    pub chunks: Option<u64>,
    /// Bits left dirty (set) after adding: 0 if the array was clean and complete.
    pub dirty: Option<u64>,
}

/// Where one device's bitmap goes, and the smallest chunk whose bits fit there.
struct DevPlace {
    idx: usize,
    /// 1.x: `bitmap_offset` from the superblock; 0.90: unused.
    offset: i32,
    /// Device sector of the bitmap superblock once placed (1.0 movable: after `finish`).
    movable_bbl: Option<i64>,
    min_chunk: u64,
    room: u64,
}

/// Bits the sector count `size` needs at `chunk` bytes per bit (mdadm counts one extra).
fn mdadm_bits(size: u64, chunk: u64) -> u64 {
    size * 512 / chunk + 1
}

/// mdadm's smallest chunk (≥ 4 KiB) whose bits fit in `room` sectors with the superblock.
fn min_chunk_for(size: u64, room: u64) -> u64 {
    let max_bits = (room * 512).saturating_sub(BITMAP_SB_BYTES as u64) * 8;
    let mut chunk = 4096u64;
    let mut bits = mdadm_bits(size, chunk);
    while bits > max_bits && chunk < 1 << 40 {
        chunk *= 2;
        bits = bits.div_ceil(2);
    }
    chunk
}

/// mdadm's room for a bitmap added to an existing member (`add_internal_bitmap1/0` with
/// `may_change`): returns (bitmap_offset, room in sectors, bad-block log sectors kept
/// clear below a movable 1.0 bitmap, None if the offset is fixed).
fn room_of(sb: &Super, dev_name: &str, chunk_given: bool) -> Result<(i32, i64, Option<i64>)> {
    let (offset, mut room, bbl) = match sb {
        Super::V090(_) => {
            // 0.90: right after the superblock, at most 60 KiB.
            return Ok((0, 120, None));
        }
        Super::V1(s) => match s.minor() {
            Minor::V1 | Minor::V2 => {
                let mut room = s.data_offset as i64 - s.super_offset as i64;
                let bbl = if s.bblog_size != 0 {
                    room = i64::from(s.bblog_offset) + i64::from(s.bblog_size);
                    i64::from(s.bblog_size)
                } else {
                    8
                };
                // 4 KiB kept for the superblock.
                (8, room - 8, Some(bbl))
            }
            Minor::V0 => {
                let room = s.super_offset as i64 - s.data_offset as i64 - s.data_size as i64;
                let bbl = i64::from(s.bblog_size)
                    .max(8)
                    .max(-i64::from(s.bblog_offset));
                if room < 6 && s.max_dev <= 384 {
                    // Fixed: 1 KiB after the superblock, 3 KiB of room.
                    (2, 6, Some(0))
                } else {
                    (0, room, Some(bbl))
                }
            }
        },
    };
    let bbl_v = bbl.unwrap_or(0);
    room -= bbl_v;
    if !chunk_given && room > 256 {
        room = 256;
    }
    if room <= 1 {
        return Err(EngineError::Refused {
            device: dev_name.to_string(),
            why: format!(
                "there is no room for a bitmap ({} sectors between the {} metadata and the data, the bad-block log included); recreate the array with a bitmap, or use larger members",
                (room + bbl_v).max(0),
                sb.metadata().as_str()
            ),
        });
    }
    let movable = if offset == 0 { Some(bbl_v) } else { None };
    Ok((offset, room, movable))
}

/// Sectors covered by the bitmap of an array of this geometry (array sectors for RAID10,
/// per-device size otherwise: §3.6).
pub(crate) fn bitmap_sync_size(geo: &raidkit_layout::Geometry) -> u64 {
    if geo.level == Level::Raid10 {
        geo.array_sectors()
    } else {
        geo.dev_sectors
    }
}

impl Array {
    /// Add or remove the internal write-intent bitmap of the running array. Writes are
    /// quiesced while switching. Adding writes the bitmap (every bit set) first and only
    /// then points the superblocks at it, so a crash at any point leaves either no
    /// bitmap or a complete one; the bits are cleared at once if the array is clean and
    /// complete. Removing clears the superblock feature first (a later unclean stop then
    /// means a full resync, as with md).
    pub fn set_bitmap(&self, mode: BitmapMode) -> Result<BitmapChange> {
        if let Some(next) = self.successor() {
            return next.set_bitmap(mode);
        }
        if self.route().is_some() {
            return Err(EngineError::Invalid(
                "a reshape is in progress: change the bitmap once it has finished (md refuses too)"
                    .into(),
            ));
        }
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing to change its bitmap"
                    .into(),
            ));
        }
        let _gate = self.pause_writes();
        self.flush()?;
        let mut meta = lock(&self.meta.sb);
        match mode {
            BitmapMode::None => self.remove_bitmap(&mut meta),
            BitmapMode::Internal { chunk_bytes } => self.add_bitmap(&mut meta, chunk_bytes),
        }
    }

    /// Remove the bitmap: the superblocks stop pointing at it (put back if that fails).
    /// A bitmap the superblocks record but the assembly ignored (damaged) is removed
    /// the same way.
    fn remove_bitmap(&self, meta: &mut Meta) -> Result<BitmapChange> {
        let old = self.swap_bitmap(None);
        let recorded = self.live_devices().iter().any(|&i| match &meta.sbs[i] {
            Super::V1(s) => s.feature_map & feature::BITMAP_OFFSET != 0,
            Super::V090(s) => s.state & sb_state::BITMAP_PRESENT != 0,
        });
        if old.is_none() && !recorded {
            return Err(EngineError::Invalid(
                "the array has no bitmap; nothing to remove".into(),
            ));
        }
        let r = self.write_superblocks(meta, |sb| match sb {
            Super::V1(s) => {
                s.feature_map &= !feature::BITMAP_OFFSET;
                s.bitmap_offset = 0;
            }
            Super::V090(s) => s.state &= !sb_state::BITMAP_PRESENT,
        });
        if let Err(e) = r {
            self.swap_bitmap(old);
            return Err(e);
        }
        Ok(BitmapChange {
            bitmap: false,
            chunk_bytes: None,
            chunks: None,
            dirty: None,
        })
    }

    /// Add a bitmap: written whole (every bit set) everywhere first, then the superblocks
    /// point at it; cleared at once when the array is consistent.
    fn add_bitmap(&self, meta: &mut Meta, chunk_bytes: Option<u64>) -> Result<BitmapChange> {
        if self.bm().is_some() {
            return Err(EngineError::Invalid(
                "the array already has an internal bitmap; remove it first to change its chunk"
                    .into(),
            ));
        }
        if !self.geo.level.has_redundancy() {
            return Err(EngineError::Invalid(format!(
                "{} has no redundancy, so a write-intent bitmap is meaningless",
                self.geo.level
            )));
        }
        if let Some(c) = chunk_bytes {
            if !c.is_power_of_two() || !(4096..=1 << 31).contains(&c) {
                return Err(EngineError::Invalid(format!(
                    "bitmap chunk {c} must be a power of two between 4 KiB and 2 GiB"
                )));
            }
        }
        let size = bitmap_sync_size(&self.geo);
        let live = self.live_devices();
        let devs = self.devs().clone();
        let places = self.bitmap_places(meta, &live, &devs, size, chunk_bytes.is_some())?;
        let chunk = bitmap_chunk(&places, &devs, chunk_bytes)?;
        let mut bsb = BitmapSuper::new_default(self.uuid, size, chunk as u32);
        bsb.events = meta.events.saturating_add(1);
        bsb.events_cleared = meta.events;
        let chunks = bsb.chunks();
        let (locs, offsets) =
            self.bitmap_locations(meta, &places, &devs, size, chunk, bsb.space_sectors())?;
        let mut rb = RunBitmap {
            sb: bsb,
            bits: vec![0xff; chunks.div_ceil(8) as usize],
            locs,
            chunk_sectors: chunk / 512,
        };
        // 1. The bitmap, every bit set, on stable storage everywhere.
        rb.write_bits(&devs, &live)?;
        // 2. Only then the superblocks point at it.
        let saved: Vec<(usize, Super)> = live.iter().map(|&i| (i, meta.sbs[i].clone())).collect();
        for &i in &live {
            match &mut meta.sbs[i] {
                Super::V1(s) => {
                    s.feature_map |= feature::BITMAP_OFFSET;
                    s.bitmap_offset = offsets[i];
                }
                Super::V090(s) => s.state |= sb_state::BITMAP_PRESENT,
            }
        }
        if let Err(e) = self.write_superblocks(meta, |_| {}) {
            for (i, sb) in saved {
                meta.sbs[i] = sb;
            }
            return Err(e);
        }
        let mut dirty = chunks;
        if !self.is_degraded() && meta.resync_from == MAX_SECTOR {
            // Quiesced, flushed and consistent: nothing is dirty.
            rb.clear_all();
            rb.sb.events = meta.events;
            rb.sb.events_cleared = meta.events;
            rb.write_bits(&devs, &live)?;
            dirty = 0;
        }
        self.swap_bitmap(Some(rb));
        Ok(BitmapChange {
            bitmap: true,
            chunk_bytes: Some(chunk),
            chunks: Some(chunks),
            dirty: Some(dirty),
        })
    }

    /// The room for a bitmap on every live device, and the smallest chunk that fits it.
    fn bitmap_places(
        &self,
        meta: &Meta,
        live: &[usize],
        devs: &[Arc<dyn BlockDev>],
        size: u64,
        chunk_given: bool,
    ) -> Result<Vec<DevPlace>> {
        let mut places = Vec::with_capacity(live.len());
        for &i in live {
            let (offset, room, movable) = room_of(&meta.sbs[i], devs[i].name(), chunk_given)?;
            let room = room as u64;
            places.push(DevPlace {
                idx: i,
                offset,
                movable_bbl: movable,
                min_chunk: min_chunk_for(size, room),
                room,
            });
        }
        Ok(places)
    }

    /// Each device's bitmap offset (1.0 movable: below the bad-block log) and location,
    /// refusing a bitmap that would start before the device or overlap the data.
    fn bitmap_locations(
        &self,
        meta: &Meta,
        places: &[DevPlace],
        devs: &[Arc<dyn BlockDev>],
        size: u64,
        chunk: u64,
        space: u64,
    ) -> Result<(Vec<Option<u64>>, Vec<i32>)> {
        let mut locs: Vec<Option<u64>> = vec![None; devs.len()];
        let mut offsets: Vec<i32> = vec![0; devs.len()];
        for p in places {
            let sb = &meta.sbs[p.idx];
            let offset = match p.movable_bbl {
                Some(bbl) if p.offset == 0 => {
                    let room = mdadm_bits(size, chunk).div_ceil(8) + BITMAP_SB_BYTES as u64;
                    let room = room.div_ceil(4096) as i64 * 8;
                    -(room + bbl) as i32
                }
                _ => p.offset,
            };
            let ds = devs[p.idx].size_bytes() / 512;
            let loc = match sb {
                Super::V090(_) => v090::super_offset(ds).map(|o| o + 8),
                Super::V1(s) => u64::try_from(s.super_offset as i64 + i64::from(offset)).ok(),
            };
            let Some(loc) = loc else {
                return Err(EngineError::Refused {
                    device: devs[p.idx].name().to_string(),
                    why: "the bitmap would start before the device; use larger members".into(),
                });
            };
            // Never overlap the data area.
            if let Super::V1(s) = sb {
                let data_end = s.data_offset + s.data_size.max(self.geo.dev_sectors);
                let overlaps = if s.minor() == Minor::V0 {
                    loc < data_end
                } else {
                    loc + space.min(p.room) > s.data_offset
                };
                if overlaps {
                    return Err(EngineError::Refused {
                        device: devs[p.idx].name().to_string(),
                        why: format!(
                            "a bitmap of {} sectors does not fit between the metadata and the data; a larger bitmap chunk needs fewer sectors",
                            space
                        ),
                    });
                }
            }
            locs[p.idx] = Some(loc);
            offsets[p.idx] = offset;
        }
        Ok((locs, offsets))
    }
}

/// The bitmap chunk: the one given (if its bits fit everywhere), else mdadm's default,
/// at least the smallest that fits every device.
fn bitmap_chunk(
    places: &[DevPlace],
    devs: &[Arc<dyn BlockDev>],
    chunk_bytes: Option<u64>,
) -> Result<u64> {
    let need = places.iter().map(|p| p.min_chunk).max().unwrap_or(4096);
    let Some(c) = chunk_bytes else {
        return Ok(need.max(u64::from(fbitmap::DEFAULT_MIN_CHUNK)));
    };
    if let Some(p) = places.iter().find(|p| c < p.min_chunk) {
        return Err(EngineError::Refused {
            device: devs[p.idx].name().to_string(),
            why: format!(
                "a bitmap chunk of {c} bytes needs more bits than fit in its {} sectors of bitmap room; a chunk of {} bytes or more fits",
                p.room, p.min_chunk
            ),
        });
    }
    Ok(c)
}
