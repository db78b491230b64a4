//! The internal write-intent bitmap at run time: bits set on stable storage before the
//! writes they cover, cleared when the array is clean and not degraded (§3.4).

use crate::dev::BlockDev;
use crate::error::EngineError;
use crate::error::Result;
use raidkit_format::bitmap::{self, BitmapSuper, BITMAP_SB_BYTES};
use raidkit_format::validate::MemberAreas;
use std::sync::Arc;

/// Bits set ahead of a sequential stream cover at least this many bytes ...
pub const BITS_AHEAD_BYTES: u64 = 4 << 20;

/// ... and, as the stream goes on, as many bytes as it has written so far, up to this
/// many (a growing window: a long stream pays one bitmap round per doubling of its length
/// until the window is this large, then one per this many bytes) ...
pub const MAX_AHEAD_BYTES: u64 = 64 << 20;

/// ... but never more than this many bits (and at least one).
pub const MAX_BITS_AHEAD: u64 = 1024;

/// The bits a sequential stream that has written `stream_sectors` so far (this write
/// included) sets ahead with a bitmap chunk of `chunk_sectors`: its length in bytes,
/// within [`BITS_AHEAD_BYTES`]..=[`MAX_AHEAD_BYTES`], in chunks, 1 to [`MAX_BITS_AHEAD`].
/// What a crash costs for it: a resync of at most that window more per stream.
pub fn bits_ahead(chunk_sectors: u64, stream_sectors: u64) -> u64 {
    let window = stream_sectors
        .saturating_mul(raidkit_layout::SECTOR)
        .clamp(BITS_AHEAD_BYTES, MAX_AHEAD_BYTES);
    let chunk = chunk_sectors.max(1).saturating_mul(raidkit_layout::SECTOR);
    (window / chunk).clamp(1, MAX_BITS_AHEAD)
}

/// Loaded bitmap: superblock, bits, and where it lives on each device.
pub struct RunBitmap {
    /// The bitmap superblock (kept current).
    pub sb: BitmapSuper,
    /// Bit bytes, covering at least `ceil(chunks/8)` bytes (padding preserved).
    pub bits: Vec<u8>,
    /// Bitmap superblock device sector, per device index (None: device has none).
    pub locs: Vec<Option<u64>>,
    /// Sectors per bit.
    pub chunk_sectors: u64,
}

/// Write `data` at byte `off`, read-modify-writing to the device's logical block size.
pub(crate) fn write_region(dev: &dyn BlockDev, off: u64, data: &[u8]) -> Result<()> {
    let lbs = u64::from(dev.logical_block_size().max(512));
    let start = off / lbs * lbs;
    let end = (off + data.len() as u64).div_ceil(lbs) * lbs;
    if start == off && end == off + data.len() as u64 {
        return dev
            .write_at(data, off)
            .map_err(|e| EngineError::io(dev.name(), "writing the bitmap", e));
    }
    let mut buf = vec![0u8; (end - start) as usize];
    dev.read_at(&mut buf, start)
        .map_err(|e| EngineError::io(dev.name(), "reading the bitmap", e))?;
    let o = (off - start) as usize;
    buf[o..o + data.len()].copy_from_slice(data);
    dev.write_at(&buf, start)
        .map_err(|e| EngineError::io(dev.name(), "writing the bitmap", e))
}

impl RunBitmap {
    /// Read, check and load the bitmap an assembly found on `dev` (a member of the array
    /// `uuid` whose checked areas are `areas`): its superblock must be this array's,
    /// of a version raidkit runs, cover `need` sectors (None: the level keeps no bitmap)
    /// and fit its room on the device, all before anything is allocated from it. Err says
    /// why the bitmap cannot be used.
    pub fn load_checked(
        dev: &dyn BlockDev,
        areas: &MemberAreas,
        uuid: [u8; 16],
        need: Option<u64>,
        array_events: u64,
        locs: Vec<Option<u64>>,
    ) -> std::result::Result<RunBitmap, String> {
        let start = areas
            .bitmap_start
            .ok_or("this member's superblock records no bitmap")?;
        let mut head = [0u8; BITMAP_SB_BYTES];
        dev.read_at(&mut head, start * 512)
            .map_err(|e| format!("reading its superblock at sector {start}: {e}"))?;
        let bsb = BitmapSuper::parse(&head).map_err(|e| format!("its superblock: {e}"))?;
        if bsb.uuid != uuid {
            return Err("it belongs to another array (its UUID differs)".into());
        }
        if bsb.version != 4 && bsb.version != 3 {
            return Err(format!(
                "version {}: raidkit runs bitmap versions 3 and 4",
                bsb.version
            ));
        }
        let need = need.ok_or("the array's level keeps no write-intent bitmap")?;
        areas.check_bitmap(&bsb, need).map_err(|e| e.to_string())?;
        RunBitmap::load(dev, start, bsb, array_events, locs).map_err(|e| e.to_string())
    }

    /// Read the bits of an array's bitmap from `dev`, whose bitmap superblock `sb` at
    /// sector `loc` has been read and checked (its bits fit the room on the device:
    /// `MemberAreas::check_bitmap`), so what is allocated here is bounded by the device.
    pub fn load(
        dev: &dyn BlockDev,
        loc: u64,
        sb: BitmapSuper,
        array_events: u64,
        locs: Vec<Option<u64>>,
    ) -> Result<RunBitmap> {
        let chunks = sb.chunks();
        let nbytes = chunks.div_ceil(8);
        let total = (BITMAP_SB_BYTES as u64 + nbytes).div_ceil(512) * 512;
        let mut all = vec![0u8; total as usize];
        dev.read_at(&mut all, loc * 512)
            .map_err(|e| EngineError::io(dev.name(), "reading the bitmap", e))?;
        let mut bits = all.split_off(BITMAP_SB_BYTES);
        let chunk_sectors = u64::from(sb.chunksize / 512).max(1);
        let mut rb = RunBitmap {
            sb,
            bits: Vec::new(),
            locs,
            chunk_sectors,
        };
        if rb.sb.events < array_events {
            // Stale bitmap: everything must be considered dirty (the kernel does the same).
            for i in 0..chunks {
                bitmap::set_bit(&mut bits, i, true);
            }
            rb.sb.state |= bitmap::state::STALE;
        }
        rb.bits = bits;
        Ok(rb)
    }

    /// Number of bits.
    pub fn chunks(&self) -> u64 {
        self.sb.chunks()
    }

    /// Indices of set bits.
    pub fn dirty(&self) -> Vec<u64> {
        (0..self.chunks())
            .filter(|&i| bitmap::bit_is_set(&self.bits, i))
            .collect()
    }

    /// Is any bit covering `[start, start+n)` (bitmap address space) set, or the whole
    /// bitmap stale (then it vouches for nothing)?
    pub fn any_set(&self, start: u64, n: u64) -> bool {
        if self.sb.state & bitmap::state::STALE != 0 {
            return true;
        }
        if n == 0 || self.chunk_sectors == 0 {
            return false;
        }
        let first = start / self.chunk_sectors;
        let last = ((start + n - 1) / self.chunk_sectors).min(self.chunks().saturating_sub(1));
        (first..=last).any(|i| bitmap::bit_is_set(&self.bits, i))
    }

    /// Set the bits covering `[start, start+n)` (bitmap address space). True if any bit
    /// changed (then the caller must write the bits before the data).
    pub fn mark(&mut self, start: u64, n: u64) -> bool {
        !self.mark_new(start, n).is_empty()
    }

    /// [`RunBitmap::mark`], returning the bits that were not set before.
    pub fn mark_new(&mut self, start: u64, n: u64) -> Vec<u64> {
        if n == 0 || self.chunk_sectors == 0 {
            return Vec::new();
        }
        let first = start / self.chunk_sectors;
        let last = (start + n - 1) / self.chunk_sectors;
        let new: Vec<u64> = (first..=last.min(self.chunks().saturating_sub(1)))
            .filter(|&i| !bitmap::bit_is_set(&self.bits, i))
            .collect();
        for &i in &new {
            bitmap::set_bit(&mut self.bits, i, true);
        }
        new
    }

    /// Clear every bit.
    pub fn clear_all(&mut self) {
        for i in 0..self.chunks() {
            bitmap::set_bit(&mut self.bits, i, false);
        }
        self.sb.state &= !bitmap::state::STALE;
    }

    /// Clear one bit.
    pub fn clear(&mut self, i: u64) {
        bitmap::set_bit(&mut self.bits, i, false);
    }

    /// Write the bitmap superblock to every live device (`devs`: the array's devices, by
    /// index; `live`: the indices to write).
    pub fn write_header(&self, devs: &[Arc<dyn BlockDev>], live: &[usize]) -> Result<()> {
        let head = self.sb.encode();
        for &i in live {
            if let Some(Some(loc)) = self.locs.get(i) {
                write_region(devs[i].as_ref(), loc * 512, &head)?;
            }
        }
        Ok(())
    }

    /// Write superblock and bits to every live device and flush them (see
    /// [`RunBitmap::write_header`]).
    pub fn write_bits(&self, devs: &[Arc<dyn BlockDev>], live: &[usize]) -> Result<()> {
        for &i in live {
            self.write_bits_to(devs[i].as_ref(), i)?;
        }
        Ok(())
    }

    /// Write superblock and bits to one device (index `i`) and flush it.
    pub fn write_bits_to(&self, d: &dyn BlockDev, i: usize) -> Result<()> {
        if let Some(Some(loc)) = self.locs.get(i) {
            self.write_image_at(d, *loc)?;
        }
        Ok(())
    }

    /// Write superblock and bits to `d` at sector `loc` (checked to fit there) and flush it.
    pub fn write_image_at(&self, d: &dyn BlockDev, loc: u64) -> Result<()> {
        let mut buf = self.sb.encode();
        buf.extend_from_slice(&self.bits);
        write_region(d, loc * 512, &buf)?;
        d.flush()
            .map_err(|e| EngineError::io(d.name(), "flushing the bitmap", e))
    }
}
