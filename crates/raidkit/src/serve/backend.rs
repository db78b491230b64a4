//! An assembled array as an NBD backend.
//!
//! Backend semantics: FUA = write then flush of every member; WRITE_ZEROES and TRIM both
//! zero the range through the array ([`Array::write_zeroes`]: a write like any other, whose
//! member writes of zeros become holes punched in member files and WRITE_ZEROES to NBD
//! members where they can; with NO_HOLE the zeros are written), so that after a TRIM the
//! range reads as zeros from every copy and parity stays consistent (never "fast": the
//! write path decides per member). Preferred block size: the full
//! stripe (chunk × data disks) when that is a power of two, else the largest power of
//! two dividing it; minimum 512, or 4096 when a member has 4 KiB logical blocks (an NBD
//! member's: its server's minimum block size).

use raidkit_engine::array::SharedBuf;
use raidkit_engine::supervisor::WriteActivity;
use raidkit_engine::{Array, EngineError};
use raidkit_layout::Level;
use raidkit_nbd::{Backend, PoolBuf};
use std::io;
use std::sync::Arc;

/// An assembled array as an NBD backend.
pub struct ArrayBackend {
    arr: Arc<Array>,
    read_only: bool,
    sizes: (u32, u32, u32),
    activity: Arc<WriteActivity>,
    description: String,
}

fn io_err(e: EngineError) -> io::Error {
    match e {
        EngineError::OutOfRange { .. } => {
            io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
        }
        EngineError::Io { ref source, .. } => io::Error::new(source.kind(), e.to_string()),
        other => io::Error::other(other.to_string()),
    }
}

/// The NBD block sizes (minimum, preferred, maximum) of an array: see the module docs.
fn block_sizes(arr: &Array) -> (u32, u32, u32) {
    // Every member's, NBD members' too (a server's minimum block size).
    let min = arr.logical_block_size();
    let g = arr.geometry();
    let data_disks = match g.level {
        Level::Raid0 => g.raid_disks,
        Level::Raid10 if g.copies() > 0 && g.raid_disks.is_multiple_of(g.copies()) => {
            g.raid_disks / g.copies()
        }
        Level::Raid10 => 1,
        _ => g.data_disks(),
    };
    let stripe = match g.level {
        Level::Raid1 | Level::Linear => 4096,
        _ => g.chunk_sectors * 512 * data_disks.max(1) as u64,
    };
    let max = raidkit_nbd::DEFAULT_MAX_PAYLOAD;
    let pref = if stripe == 0 {
        4096
    } else if stripe.is_power_of_two() {
        stripe
    } else {
        1u64 << stripe.trailing_zeros()
    };
    let pref = pref.clamp(u64::from(min), u64::from(max)) as u32;
    (min, pref, max)
}

impl ArrayBackend {
    /// Serve `arr`, recording writes in `activity`.
    pub fn new(arr: Arc<Array>, read_only: bool, activity: Arc<WriteActivity>) -> ArrayBackend {
        let description = format!(
            "raidkit {} array {} ({}, {} members)",
            arr.level(),
            arr.uuid_text(),
            arr.name(),
            arr.geometry().raid_disks
        );
        ArrayBackend {
            sizes: block_sizes(&arr),
            arr,
            read_only,
            activity,
            description,
        }
    }
}

impl ArrayBackend {
    /// After a write: note the activity, then with `fua` flush.
    fn written(&self, r: raidkit_engine::Result<()>, fua: bool) -> io::Result<()> {
        let r = r.map_err(io_err);
        self.activity.wrote();
        r?;
        if fua {
            self.arr.flush().map_err(io_err)?;
        }
        Ok(())
    }
}

impl Backend for ArrayBackend {
    fn size(&self) -> u64 {
        self.arr.size_bytes()
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.arr.read(offset, buf).map_err(io_err)
    }
    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> io::Result<()> {
        self.written(self.arr.write(offset, buf), fua)
    }
    /// The request buffer goes down the write path as the array's [`SharedBuf`] where a
    /// write may be queued behind (which keeps it instead of a copy).
    fn write_buf(&self, offset: u64, buf: PoolBuf, fua: bool) -> io::Result<()> {
        if self.arr.write_behind_limit() == 0 {
            return self.write(offset, &buf, fua);
        }
        self.written(self.arr.write_shared(offset, &SharedBuf::new(buf)), fua)
    }
    fn flush(&self) -> io::Result<()> {
        self.arr.flush().map_err(io_err)
    }
    /// Zeroes the range: see the module documentation.
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len, false)
    }
    fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool) -> io::Result<()> {
        let r = self.arr.zero_range(offset, len, !no_hole).map_err(io_err);
        self.activity.wrote();
        r
    }
    fn block_sizes(&self) -> (u32, u32, u32) {
        self.sizes
    }
    /// Every connection writes through the same array and a flush flushes every member.
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn description(&self) -> String {
        self.description.clone()
    }
}
