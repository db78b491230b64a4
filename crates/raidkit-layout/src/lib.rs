//! Address mapping for every Linux MD RAID level and layout.
//!
//! Pure, side-effect-free arithmetic: array sector → member (role) and data sector,
//! and back. All units are 512-byte sectors. "Data sector" is relative to a member's
//! `data_offset`. See `shared/reference/md-format.md` §4 for the formulas.
//!
//! CONTRACT (used by raidkit-engine; keep signatures stable):
//! * [`Level`], [`Geometry`], [`Geometry::new`], [`Geometry::array_sectors`],
//!   [`Geometry::locate`], [`Geometry::stripe`], [`Geometry::reverse`],
//!   [`names::parse_layout`], [`names::layout_name`], [`names::default_layout`].

#![forbid(unsafe_code)]

pub mod names;

use thiserror::Error;

/// Bytes per sector. Always 512, whatever the device's logical block size.
pub const SECTOR: u64 = 512;

/// Errors from building a geometry or parsing names.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// A level number or name that MD does not have (or raidkit refuses: multipath/faulty).
    #[error("unknown RAID level {0:?} (expected linear, 0, 1, 4, 5, 6 or 10)")]
    UnknownLevel(String),
    /// Layout name or value not valid for the level.
    #[error("layout {layout:?} is not valid for {level}: {why}")]
    BadLayout {
        /// The level.
        level: Level,
        /// The layout as given.
        layout: String,
        /// Explanation.
        why: String,
    },
    /// Chunk size not allowed for this level.
    #[error("chunk size of {chunk_sectors} sectors is not valid for {level}: {why}")]
    BadChunk {
        /// The level.
        level: Level,
        /// The chunk in sectors.
        chunk_sectors: u64,
        /// Explanation.
        why: String,
    },
    /// Number of raid devices not allowed for this level/layout.
    #[error("{level} cannot have {raid_disks} raid devices: {why}")]
    BadDiskCount {
        /// The level.
        level: Level,
        /// The count.
        raid_disks: usize,
        /// Explanation.
        why: String,
    },
    /// Any other geometry inconsistency.
    #[error("invalid geometry: {0}")]
    Invalid(String),
}

/// RAID level (the MD personality).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Concatenation (MD level -1).
    Linear,
    /// Striping (0).
    Raid0,
    /// Mirroring (1).
    Raid1,
    /// Dedicated parity (4).
    Raid4,
    /// Distributed parity (5).
    Raid5,
    /// Dual parity P+Q (6).
    Raid6,
    /// Striped mirrors near/far/offset (10).
    Raid10,
}

impl Level {
    /// From the superblock `level` field. Multipath (-4), faulty (-5) and unknown → None.
    pub fn from_md(level: i32) -> Option<Level> {
        todo!("{level}")
    }
    /// The superblock `level` field value.
    pub fn to_md(self) -> i32 {
        todo!()
    }
    /// Parse a CLI word: `linear`, `0`/`raid0`/`stripe`, `1`/`raid1`/`mirror`, `4`/`raid4`,
    /// `5`/`raid5`, `6`/`raid6`, `10`/`raid10` (case-insensitive).
    pub fn parse(s: &str) -> Result<Level, LayoutError> {
        todo!("{s}")
    }
    /// True for RAID4/5/6.
    pub fn has_parity(self) -> bool {
        matches!(self, Level::Raid4 | Level::Raid5 | Level::Raid6)
    }
    /// True for levels that stripe by chunk (0, 4, 5, 6, 10).
    pub fn uses_chunk(self) -> bool {
        matches!(
            self,
            Level::Raid0 | Level::Raid4 | Level::Raid5 | Level::Raid6 | Level::Raid10
        )
    }
}

impl std::fmt::Display for Level {
    /// `linear`, `raid0`, `raid1`, `raid4`, `raid5`, `raid6`, `raid10` (as mdadm prints).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Level::Linear => "linear",
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid4 => "raid4",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Raid10 => "raid10",
        };
        f.write_str(s)
    }
}

/// The complete, validated shape of an array: everything needed to map addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Level.
    pub level: Level,
    /// Raw MD layout value (RAID0: 0/1/2; RAID5/6: algorithm; RAID10: nc|fc<<8|flags; else 0).
    pub layout: u32,
    /// Chunk size in sectors (linear: rounding, normally 0; RAID1: 0).
    pub chunk_sectors: u64,
    /// Number of role slots (`raid_disks`).
    pub raid_disks: usize,
    /// Component size `size` in sectors (sectors of each member used), for RAID1/4/5/6/10.
    /// Ignored for linear/RAID0.
    pub dev_sectors: u64,
    /// Per-role usable data sizes (`data_size` of each member, in role order) for linear
    /// and RAID0, whose sizes may differ. Empty for other levels.
    pub member_sectors: Vec<u64>,
}

/// Where a run of array sectors lives (one or more copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// `(role, data_sector)` of every copy of the first sector; copy 0 is the primary.
    /// One entry for linear/0/4/5/6, `nc*fc` for RAID10, `raid_disks` for RAID1.
    pub copies: Vec<(usize, u64)>,
    /// How many sectors starting at the requested sector map contiguously to
    /// `copies[i].1 ..` on the same members (≥ 1; up to the next chunk/zone/member boundary
    /// or array end).
    pub run: u64,
}

/// Placement of one RAID4/5/6 stripe (all blocks at data sector `stripe * chunk`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeLayout {
    /// Role holding P.
    pub p: usize,
    /// Role holding Q (RAID6 only).
    pub q: Option<usize>,
    /// Role holding logical data block `k` (array order within the stripe), `k = 0..K`.
    pub data: Vec<usize>,
    /// Q syndrome slot of logical data block `k` (§4.5 "Q coefficient order").
    /// For RAID4/5 equal to `k` (unused).
    pub slot: Vec<usize>,
    /// Number of syndrome slots: `K` for MD layouts, `raid_disks` for the DDF layouts
    /// 8/9/10 (where slots not in `slot` are zero blocks).
    pub syndrome_width: usize,
}

impl Geometry {
    /// Validate and build. Checks level/layout/chunk/disk-count rules of the kernel:
    /// RAID4/5/6/10 chunk a power of two ≥ 8 sectors; RAID0 chunk ≥ 1 sector; RAID5 ≥ 2
    /// disks, RAID4 ≥ 2, RAID6 ≥ 4, RAID10 copies ≤ disks, RAID0/linear ≥ 1,
    /// RAID1 ≥ 1; `member_sectors.len() == raid_disks` for linear/RAID0.
    pub fn new(
        level: Level,
        layout: u32,
        chunk_sectors: u64,
        raid_disks: usize,
        dev_sectors: u64,
        member_sectors: Vec<u64>,
    ) -> Result<Geometry, LayoutError> {
        let _ = (level, layout, chunk_sectors, raid_disks, dev_sectors, member_sectors);
        todo!()
    }

    /// Size of the array in sectors (§4.7).
    pub fn array_sectors(&self) -> u64 {
        todo!()
    }

    /// Number of data blocks per stripe: N-1 (RAID4/5), N-2 (RAID6). 0 for other levels.
    pub fn data_disks(&self) -> usize {
        todo!()
    }

    /// Per-member sectors actually used (RAID10: `used * chunk`, which can be smaller than
    /// `dev_sectors`; RAID1/4/5/6: `dev_sectors` rounded down to the chunk; RAID0/linear:
    /// `member_sectors[role]` rounded). This is what the kernel writes back as `size`.
    pub fn used_dev_sectors(&self, role: usize) -> u64 {
        todo!("{role}")
    }

    /// Number of stripes (RAID4/5/6): `dev_sectors / chunk`. 0 for other levels.
    pub fn stripes(&self) -> u64 {
        todo!()
    }

    /// Map array sector `s` (< array_sectors) to its copies. For RAID4/5/6 this gives the
    /// data block only (see [`Geometry::stripe`] for parity). Returns None if `s` is out of
    /// range.
    pub fn locate(&self, s: u64) -> Option<Placement> {
        todo!("{s}")
    }

    /// Layout of stripe `stripe` for RAID4/5/6 (panics-free: returns None for other levels
    /// or an out-of-range stripe).
    pub fn stripe(&self, stripe: u64) -> Option<StripeLayout> {
        todo!("{stripe}")
    }

    /// Inverse mapping: which array sector is stored at `(role, data_sector)`.
    /// None for parity blocks, unused space, or out of range. For RAID1 returns
    /// `data_sector`; for RAID10 any copy maps back to its array sector.
    pub fn reverse(&self, role: usize, data_sector: u64) -> Option<u64> {
        todo!("{role} {data_sector}")
    }
}
