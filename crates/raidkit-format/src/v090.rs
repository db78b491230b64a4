//! Superblock version 0.90 (§2): 4096 bytes at the last 64 KiB-aligned 64 KiB block,
//! host-endian (raidkit reads and writes little-endian, refuses big-endian).

use crate::Result;

/// Size of the superblock in bytes.
pub const SB_BYTES: usize = 4096;
/// Number of disk descriptors.
pub const MD_SB_DISKS: usize = 27;

/// Descriptor state bits.
pub mod disk_state {
    /// Faulty.
    pub const FAULTY: u32 = 1 << 0;
    /// Active.
    pub const ACTIVE: u32 = 1 << 1;
    /// In sync.
    pub const SYNC: u32 = 1 << 2;
    /// Removed.
    pub const REMOVED: u32 = 1 << 3;
    /// Write-mostly.
    pub const WRITEMOSTLY: u32 = 1 << 9;
    /// Fail-fast.
    pub const FAILFAST: u32 = 1 << 10;
}

/// Superblock `state` bits.
pub mod sb_state {
    /// Array clean.
    pub const CLEAN: u32 = 1 << 0;
    /// Errors.
    pub const ERRORS: u32 = 1 << 1;
    /// Internal bitmap present.
    pub const BITMAP_PRESENT: u32 = 1 << 8;
}

/// Device sector where the 0.90 superblock of a device of `dev_sectors` lives:
/// `(dev_sectors & !127) - 128`. None if the device is too small (< 128 sectors).
pub fn super_offset(dev_sectors: u64) -> Option<u64> {
    todo!("{dev_sectors}")
}

/// One disk descriptor (words 0..5 of a 32-word entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskDescriptor {
    /// Index in `disks[]`.
    pub number: u32,
    /// Device major.
    pub major: u32,
    /// Device minor.
    pub minor: u32,
    /// Role (raid disk slot).
    pub raid_disk: u32,
    /// State bits.
    pub state: u32,
}

/// A decoded 0.90 superblock (§2.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperblockV090 {
    /// Minor version: 90, or 91 while reshaping.
    pub minor_version: u32,
    /// Patch version.
    pub patch_version: u32,
    /// UUID words 0..3 (words 5, 13, 14, 15), host(LE) order.
    pub uuid_words: [u32; 4],
    /// Creation time (seconds).
    pub ctime: u32,
    /// Level.
    pub level: i32,
    /// Used device size in KiB.
    pub size_kib: u32,
    /// Descriptors in use.
    pub nr_disks: u32,
    /// Raid disks.
    pub raid_disks: u32,
    /// Preferred minor.
    pub md_minor: u32,
    /// Update time.
    pub utime: u32,
    /// State bits.
    pub state: u32,
    /// Active disks.
    pub active_disks: u32,
    /// Working disks.
    pub working_disks: u32,
    /// Failed disks.
    pub failed_disks: u32,
    /// Spare disks.
    pub spare_disks: u32,
    /// Event counter.
    pub events: u64,
    /// Events at last checkpoint.
    pub cp_events: u64,
    /// Resync checkpoint (sectors, u32).
    pub recovery_cp: u32,
    /// Reshape position (0.91).
    pub reshape_position: u64,
    /// New level (0.91).
    pub new_level: i32,
    /// Delta disks (0.91).
    pub delta_disks: i32,
    /// New layout (0.91).
    pub new_layout: u32,
    /// New chunk in bytes (0.91).
    pub new_chunk: u32,
    /// Layout.
    pub layout: u32,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Descriptors.
    pub disks: [DiskDescriptor; MD_SB_DISKS],
    /// This device's descriptor.
    pub this_disk: DiskDescriptor,
}

impl SuperblockV090 {
    /// Decode and validate (magic, major 0, minor 90/91, checksum). `buf` ≥ 4096 bytes.
    pub fn parse(buf: &[u8]) -> Result<SuperblockV090> {
        todo!("{}", buf.len())
    }
    /// Decode without checking the checksum; returns whether it was correct.
    pub fn parse_lenient(buf: &[u8]) -> Result<(SuperblockV090, bool)> {
        todo!("{}", buf.len())
    }
    /// Encode to 4096 bytes with the checksum computed (full 32-bit value).
    pub fn encode(&self) -> Vec<u8> {
        todo!()
    }
    /// §2.4 checksum of a 4096-byte buffer (word 38 treated as zero).
    pub fn checksum(buf: &[u8]) -> Result<u32> {
        todo!("{}", buf.len())
    }
    /// The 16-byte array UUID (the four words as LE bytes, in order).
    pub fn uuid(&self) -> [u8; 16] {
        todo!()
    }
    /// Set the UUID from 16 bytes.
    pub fn set_uuid(&mut self, uuid: [u8; 16]) {
        todo!("{uuid:?}")
    }
    /// Resync offset as a v1-style value: MAX_SECTOR if CLEAN, `recovery_cp` if
    /// `cp_events == events`, else 0.
    pub fn resync_offset(&self) -> u64 {
        todo!()
    }
}
