//! Superblock version 1.x (`mdp_superblock_1`), all fields little-endian (§1).

use crate::{FormatError, Result};

/// Feature bits (§1.3).
pub mod feature {
    /// Internal bitmap present.
    pub const BITMAP_OFFSET: u32 = 0x0001;
    /// This device is partially recovered.
    pub const RECOVERY_OFFSET: u32 = 0x0002;
    /// Reshape in progress.
    pub const RESHAPE_ACTIVE: u32 = 0x0004;
    /// Bad-block log non-empty.
    pub const BAD_BLOCKS: u32 = 0x0008;
    /// This device is a replacement.
    pub const REPLACEMENT: u32 = 0x0010;
    /// Reshape runs backwards.
    pub const RESHAPE_BACKWARDS: u32 = 0x0020;
    /// `new_offset` valid.
    pub const NEW_OFFSET: u32 = 0x0040;
    /// Bitmap-guided recovery.
    pub const RECOVERY_BITMAP: u32 = 0x0080;
    /// Clustered md.
    pub const CLUSTERED: u32 = 0x0100;
    /// raid5-cache journal.
    pub const JOURNAL: u32 = 0x0200;
    /// Partial parity log.
    pub const PPL: u32 = 0x0400;
    /// Multiple PPLs.
    pub const MULTIPLE_PPLS: u32 = 0x0800;
    /// RAID0 layout field valid.
    pub const RAID0_LAYOUT: u32 = 0x1000;
    /// All bits the kernel knows.
    pub const ALL: u32 = 0x1fff;
}

/// Role values in `dev_roles[]` (§1.5).
pub mod role {
    /// Spare / unused slot.
    pub const SPARE: u16 = 0xffff;
    /// Faulty.
    pub const FAULTY: u16 = 0xfffe;
    /// Journal device.
    pub const JOURNAL: u16 = 0xfffd;
}

/// Which 1.x variant (where the superblock sits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Minor {
    /// 1.0: at the end of the device.
    V0,
    /// 1.1: at sector 0.
    V1,
    /// 1.2: at sector 8 (default).
    V2,
}

impl Minor {
    /// `"1.0"`, `"1.1"`, `"1.2"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Minor::V0 => "1.0",
            Minor::V1 => "1.1",
            Minor::V2 => "1.2",
        }
    }
    /// Where this variant's superblock lives on a device of `dev_sectors` sectors (§1.1).
    pub fn super_offset(self, dev_sectors: u64) -> u64 {
        todo!("{dev_sectors}")
    }
}

/// Size of the fixed part of the structure.
pub const SB_FIXED: usize = 256;
/// Largest `max_dev` allowed ((4096-256)/2).
pub const MAX_DEV_LIMIT: u32 = 1920;

/// A decoded 1.x superblock. Field names and meanings as in §1.2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperblockV1 {
    /// Feature bits.
    pub feature_map: u32,
    /// Array UUID.
    pub set_uuid: [u8; 16],
    /// Array name, NUL padded.
    pub set_name: [u8; 32],
    /// Creation time (raw; low 40 bits seconds).
    pub ctime: u64,
    /// Level (-1 linear, 0, 1, 4, 5, 6, 10).
    pub level: i32,
    /// Layout.
    pub layout: u32,
    /// Used device size in sectors.
    pub size: u64,
    /// Chunk size in sectors.
    pub chunksize: u32,
    /// Number of role slots.
    pub raid_disks: u32,
    /// Sectors from the superblock to the bitmap (or PPL offset/size packed).
    pub bitmap_offset: i32,
    /// Reshape target level.
    pub new_level: i32,
    /// Reshape position in array sectors.
    pub reshape_position: u64,
    /// Reshape delta.
    pub delta_disks: i32,
    /// Reshape target layout.
    pub new_layout: u32,
    /// Reshape target chunk.
    pub new_chunk: u32,
    /// Per-device new offset (relative).
    pub new_offset: i32,
    /// Data start (device sector).
    pub data_offset: u64,
    /// Sectors available for data.
    pub data_size: u64,
    /// Where this superblock lives (device sector).
    pub super_offset: u64,
    /// Per-device rebuild progress (data sectors).
    pub recovery_offset: u64,
    /// Slot index in `dev_roles`.
    pub dev_number: u32,
    /// Corrected read count.
    pub cnt_corrected_read: u32,
    /// Per-device UUID.
    pub device_uuid: [u8; 16],
    /// bit0 WriteMostly, bit1 FailFast.
    pub devflags: u8,
    /// Bad-block log unit shift.
    pub bblog_shift: u8,
    /// Bad-block log size in sectors.
    pub bblog_size: u16,
    /// Sectors from the superblock to the bad-block log.
    pub bblog_offset: i32,
    /// Update time (raw).
    pub utime: u64,
    /// Event counter.
    pub events: u64,
    /// Resync checkpoint (`MAX_SECTOR` = clean).
    pub resync_offset: u64,
    /// Number of role slots in the table.
    pub max_dev: u32,
    /// Role table, `max_dev` entries.
    pub dev_roles: Vec<u16>,
}

impl SuperblockV1 {
    /// Decode and validate (§1.1 step 2: magic, major 1, max_dev ≤ 1920, no unknown
    /// feature bits, checksum, data_size ≥ 10, pad0 and pad3 zero). `buf` is the 4 KiB read
    /// at the superblock location (at least `256 + 2*max_dev` bytes).
    /// Does NOT check `super_offset` against the device (the caller knows the device).
    pub fn parse(buf: &[u8]) -> Result<SuperblockV1> {
        let _ = FormatError::TooShort { need: 0, have: buf.len() };
        todo!()
    }

    /// Decode without checking the checksum (for `examine` of a damaged superblock); still
    /// checks magic/major/max_dev so the role table can be read. Returns the superblock and
    /// whether the checksum was correct.
    pub fn parse_lenient(buf: &[u8]) -> Result<(SuperblockV1, bool)> {
        todo!("{}", buf.len())
    }

    /// Encode to a 4096-byte buffer: fixed part, role table, checksum computed; bytes after
    /// the role table up to 4096 filled with 0xff (as mdadm does). Callers write
    /// `self.write_len()` bytes of it (or all 4096 on a 4 KiB-sector device).
    pub fn encode(&self) -> Vec<u8> {
        todo!()
    }

    /// `256 + 2*max_dev` rounded up to 512.
    pub fn write_len(&self) -> usize {
        todo!()
    }

    /// The checksum of an encoded superblock buffer per §1.4 (the csum field is treated as
    /// zero; `max_dev` is read from the buffer).
    pub fn checksum(buf: &[u8]) -> Result<u32> {
        todo!("{}", buf.len())
    }

    /// This device's own role value (`dev_roles[dev_number]`, or `SPARE` if out of range).
    pub fn own_role(&self) -> u16 {
        todo!()
    }

    /// The variant implied by `super_offset` as mdadm prints it (≤4 → 1.1? no: 0 → 1.1,
    /// 8 → 1.2, anything else → 1.0).
    pub fn minor(&self) -> Minor {
        todo!()
    }

    /// The name as a string (bytes up to the first NUL, lossy UTF-8).
    pub fn name(&self) -> String {
        todo!()
    }

    /// Set the name from a string (truncated to 32 bytes, NUL padded).
    pub fn set_name_str(&mut self, name: &str) {
        todo!("{name}")
    }
}

/// Encode a time for `ctime`/`utime` (seconds, µs = 0).
pub fn encode_time(unix_seconds: u64) -> u64 {
    unix_seconds & ((1 << 40) - 1)
}

/// Decode `ctime`/`utime` to Unix seconds (mask the low 40 bits).
pub fn decode_time(raw: u64) -> u64 {
    raw & ((1 << 40) - 1)
}
