//! Internal write-intent bitmap superblock (256 bytes, little-endian) and bit helpers (§3).

use crate::Result;

/// Bitmap magic (`"bitm"`).
pub const BITMAP_MAGIC: u32 = 0x6d74_6962;
/// Size of the bitmap superblock.
pub const BITMAP_SB_BYTES: usize = 256;

/// Bitmap `state` bits.
pub mod state {
    /// Stale.
    pub const STALE: u32 = 1 << 1;
    /// Write error.
    pub const WRITE_ERROR: u32 = 1 << 2;
    /// Host-endian bits.
    pub const HOSTENDIAN: u32 = 1 << 15;
}

/// A decoded bitmap superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitmapSuper {
    /// 3, 4 (normal) or 5 (clustered).
    pub version: u32,
    /// Copy of the array UUID.
    pub uuid: [u8; 16],
    /// md events at last bitmap superblock write.
    pub events: u64,
    /// Events when bits were last allowed to be cleared.
    pub events_cleared: u64,
    /// Sectors covered.
    pub sync_size: u64,
    /// State bits.
    pub state: u32,
    /// Bytes per bit (power of two ≥ 512).
    pub chunksize: u32,
    /// Seconds between daemon passes.
    pub daemon_sleep: u32,
    /// Write-behind limit.
    pub write_behind: u32,
    /// Sectors reserved (0 = unknown).
    pub sectors_reserved: u32,
    /// Clustered nodes.
    pub nodes: u32,
    /// Clustered name.
    pub cluster_name: [u8; 64],
}

impl BitmapSuper {
    /// Decode and validate (magic, version 3..=5 accepted for reading — version 6 refused,
    /// chunksize power of two ≥ 512, daemon_sleep ≥ 1, write_behind ≤ 16383).
    pub fn parse(buf: &[u8]) -> Result<BitmapSuper> {
        todo!("{}", buf.len())
    }
    /// Encode to 256 bytes.
    pub fn encode(&self) -> Vec<u8> {
        todo!()
    }
    /// Number of bits (chunks): ceil(sync_size / (chunksize/512)).
    pub fn chunks(&self) -> u64 {
        todo!()
    }
    /// Bytes on disk: 256 + ceil(chunks/8).
    pub fn disk_bytes(&self) -> u64 {
        todo!()
    }
}

/// Is bit `i` set in the bit bytes (the bytes following the 256-byte superblock)?
pub fn bit_is_set(bits: &[u8], i: u64) -> bool {
    todo!("{} {i}", bits.len())
}

/// Set or clear bit `i`.
pub fn set_bit(bits: &mut [u8], i: u64, on: bool) {
    todo!("{} {i} {on}", bits.len())
}

/// mdadm's default bitmap chunk in bytes for a bitmap covering `sync_size` sectors that
/// must fit in `room_sectors` sectors (superblock + bits): the smallest power of two
/// ≥ 4 KiB whose bits fit, then at least 64 MiB (§3.6).
pub fn default_chunk_bytes(sync_size: u64, room_sectors: u64) -> u32 {
    todo!("{sync_size} {room_sectors}")
}
