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
//! * What a shape answers about itself (`shape.rs`): [`Level::name`], [`Level::md_name`],
//!   [`Level::parity_blocks`], [`Level::min_raid_disks`], [`Geometry::data_width`],
//!   [`Geometry::full_stripe_sectors`], [`Geometry::failures_tolerated`],
//!   [`Geometry::survives_without`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod names;
mod parity;
mod raid0;
mod raid10;
pub mod reshape;
mod shape;

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
        match level {
            -1 => Some(Level::Linear),
            0 => Some(Level::Raid0),
            1 => Some(Level::Raid1),
            4 => Some(Level::Raid4),
            5 => Some(Level::Raid5),
            6 => Some(Level::Raid6),
            10 => Some(Level::Raid10),
            _ => None,
        }
    }
    /// The superblock `level` field value.
    pub fn to_md(self) -> i32 {
        match self {
            Level::Linear => -1,
            Level::Raid0 => 0,
            Level::Raid1 => 1,
            Level::Raid4 => 4,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
            Level::Raid10 => 10,
        }
    }
    /// Parse a CLI word: `linear`, `0`/`raid0`/`stripe`, `1`/`raid1`/`mirror`, `4`/`raid4`,
    /// `5`/`raid5`, `6`/`raid6`, `10`/`raid10` (case-insensitive).
    pub fn parse(s: &str) -> Result<Level, LayoutError> {
        let w = s.trim().to_ascii_lowercase();
        let level = match w.as_str() {
            "linear" => Level::Linear,
            "0" | "raid0" | "stripe" => Level::Raid0,
            "1" | "raid1" | "mirror" => Level::Raid1,
            "4" | "raid4" => Level::Raid4,
            "5" | "raid5" => Level::Raid5,
            "6" | "raid6" => Level::Raid6,
            "10" | "raid10" => Level::Raid10,
            _ => return Err(LayoutError::UnknownLevel(s.to_string())),
        };
        Ok(level)
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
        f.write_str(self.name())
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

/// Largest number of role slots accepted for any level (a v1.x superblock holds at most
/// 1920 role entries).
pub const MAX_RAID_DISKS: usize = 1920;

/// Largest number of RAID6 members (mdadm's limit; the GF(2^8) syndrome has 255
/// distinct coefficients).
pub const MAX_RAID6_DISKS: usize = 256;

/// One RAID0 strip zone (§4.2): a band of member sectors striped over the members that are
/// long enough to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raid0Zone {
    /// First member data sector of the zone (the same on every member of the zone).
    pub dev_start: u64,
    /// Member data sector where the zone ends (exclusive).
    pub dev_end: u64,
    /// Roles in the zone, in role order.
    pub devs: Vec<usize>,
    /// First array sector of the zone.
    pub zone_start: u64,
    /// Array sector where the zone ends (exclusive).
    pub zone_end: u64,
}

/// RAID0 layout value "original" (pre-3.14 kernels, the mdadm default).
pub const RAID0_ORIGINAL: u32 = 1;
/// RAID0 layout value "alternate" (kernels 3.14 .. 5.3).
pub const RAID0_ALTERNATE: u32 = 2;
/// RAID0 layout value 0: not recorded ("dangerous").
pub const RAID0_DANGEROUS: u32 = 0;

/// True when a RAID0 with these member data sizes and chunk maps differently under the
/// original and the alternate layout (more than one zone and zone 1 has more than one
/// member). For such an array layout 0 ("dangerous") is refused by [`Geometry::new`]:
/// the administrator must choose. False for invalid input (chunk 0, overflow).
pub fn raid0_layout_matters(chunk_sectors: u64, member_sectors: &[u64]) -> bool {
    match raid0::bounds(chunk_sectors, member_sectors) {
        Some(b) => raid0::ambiguous(&b),
        None => false,
    }
}

fn bad_layout(level: Level, layout: u32, why: impl Into<String>) -> LayoutError {
    LayoutError::BadLayout {
        level,
        layout: names::layout_name(level, layout),
        why: why.into(),
    }
}

fn bad_disks(level: Level, raid_disks: usize, why: impl Into<String>) -> LayoutError {
    LayoutError::BadDiskCount {
        level,
        raid_disks,
        why: why.into(),
    }
}

fn bad_chunk(level: Level, chunk_sectors: u64, why: impl Into<String>) -> LayoutError {
    LayoutError::BadChunk {
        level,
        chunk_sectors,
        why: why.into(),
    }
}

/// True if `layout` is a value the kernel accepts for `level` (RAID10: the encoding only;
/// the copy count versus the member count is checked by [`Geometry::new`]).
pub fn layout_valid(level: Level, layout: u32) -> bool {
    match level {
        // The kernel ignores the layout of these levels (RAID4 is always parity-last).
        Level::Linear | Level::Raid1 | Level::Raid4 => true,
        Level::Raid0 => layout <= 2,
        Level::Raid5 => layout <= 5,
        Level::Raid6 => matches!(layout, 0..=5 | 8..=10 | 16..=20),
        Level::Raid10 => {
            let nc = layout & 0xff;
            let fc = (layout >> 8) & 0xff;
            let mode = layout >> 17;
            nc >= 1 && fc >= 1 && nc * fc >= 2 && mode <= 2
        }
    }
}

impl Geometry {
    /// Validate and build. Checks level/layout/chunk/disk-count rules of the kernel:
    /// RAID4/5/6/10 chunk a power of two ≥ 8 sectors; RAID0 chunk ≥ 1 sector; RAID5 ≥ 2
    /// disks, RAID4 ≥ 2, RAID6 ≥ 4, RAID10 copies ≤ disks, RAID0/linear ≥ 1,
    /// RAID1 ≥ 1; `member_sectors.len() == raid_disks` for linear/RAID0.
    ///
    /// Also refused: arrays of zero sectors, sizes that overflow 64 bits, more than
    /// [`MAX_RAID_DISKS`] slots ([`MAX_RAID6_DISKS`] for RAID6), RAID0 members smaller
    /// than one chunk, RAID0 layout 0 when the layout matters (see
    /// [`raid0_layout_matters`]), and RAID10 layouts whose kernel mapping would place two
    /// different chunks on the same member sector (exotic far-set / near+offset mixes no
    /// tool creates). The layout of linear, RAID1 and RAID4 is ignored, as by the kernel.
    /// `member_sectors` is kept for linear/RAID0 and emptied for the other levels.
    pub fn new(
        level: Level,
        layout: u32,
        chunk_sectors: u64,
        raid_disks: usize,
        dev_sectors: u64,
        member_sectors: Vec<u64>,
    ) -> Result<Geometry, LayoutError> {
        let member_sectors = match level {
            Level::Linear | Level::Raid0 => member_sectors,
            _ => Vec::new(),
        };
        let g = Geometry {
            level,
            layout,
            chunk_sectors,
            raid_disks,
            dev_sectors,
            member_sectors,
        };
        g.validate()?;
        Ok(g)
    }

    fn validate(&self) -> Result<(), LayoutError> {
        let level = self.level;
        let n = self.raid_disks;
        let c = self.chunk_sectors;
        let max = if level == Level::Raid6 {
            MAX_RAID6_DISKS
        } else {
            MAX_RAID_DISKS
        };
        if n > max {
            return Err(bad_disks(level, n, format!("at most {max} are supported")));
        }
        let min = level.min_raid_disks();
        if n < min {
            return Err(bad_disks(level, n, format!("at least {min} are needed")));
        }
        if !layout_valid(level, self.layout) {
            let why = match level {
                Level::Raid0 => "RAID0 layouts are 0 (dangerous), 1 (original), 2 (alternate)",
                Level::Raid5 => "RAID5 layouts are 0..=5",
                Level::Raid6 => "RAID6 layouts are 0..=5, 8..=10, 16..=20",
                _ => "RAID10 needs near copies ≥ 1, far copies ≥ 1, nc*fc ≥ 2, far-set mode 0..=2 and no bit above 18",
            };
            return Err(bad_layout(level, self.layout, why));
        }
        if matches!(level, Level::Linear | Level::Raid0) && self.member_sectors.len() != n {
            return Err(LayoutError::Invalid(format!(
                "{level} with {n} raid devices needs {n} member sizes, got {}",
                self.member_sectors.len()
            )));
        }
        match level {
            Level::Linear => {}
            Level::Raid0 => {
                if c == 0 {
                    return Err(bad_chunk(
                        level,
                        c,
                        "RAID0 needs a chunk of at least 1 sector",
                    ));
                }
                if let Some(i) = self.member_sectors.iter().position(|&m| m < c) {
                    return Err(LayoutError::Invalid(format!(
                        "RAID0 member {i} has {} data sectors, less than one chunk ({c})",
                        self.member_sectors.get(i).copied().unwrap_or(0)
                    )));
                }
                let zones = raid0::bounds(c, &self.member_sectors).ok_or_else(|| {
                    LayoutError::Invalid("RAID0 size overflows 64 bits".to_string())
                })?;
                if self.layout == RAID0_DANGEROUS && raid0::ambiguous(&zones) {
                    return Err(LayoutError::BadLayout {
                        level,
                        layout: "dangerous (0)".to_string(),
                        why: "the layout of this multi-zone RAID0 is unknown (not recorded), \
                              and the original layout (kernels before 3.14) and the alternate layout \
                              (kernels 3.14 to 5.3) place data differently beyond the first \
                              zone, so both are candidates; check which one gives correct \
                              data and record it (raidkit layout original|alternate, or \
                              mdadm --update=layout-original / --update=layout-alternate)"
                            .to_string(),
                    });
                }
            }
            Level::Raid1 => {}
            Level::Raid4 | Level::Raid5 | Level::Raid6 | Level::Raid10 => {
                if c < 8 || !c.is_power_of_two() {
                    return Err(bad_chunk(
                        level,
                        c,
                        "the chunk must be a power of two of at least 8 sectors (4 KiB)",
                    ));
                }
                if self.dev_sectors < c {
                    return Err(LayoutError::Invalid(format!(
                        "component size {} is smaller than one chunk ({c} sectors)",
                        self.dev_sectors
                    )));
                }
            }
        }
        if level == Level::Raid10 {
            raid10::validate(self)?;
        }
        match self.try_array_sectors() {
            None => Err(LayoutError::Invalid(
                "array size overflows 64 bits".to_string(),
            )),
            Some(0) => Err(LayoutError::Invalid("the array would be empty".to_string())),
            Some(_) => Ok(()),
        }
    }

    fn try_array_sectors(&self) -> Option<u64> {
        match self.level {
            Level::Linear => linear_lens(self)?
                .iter()
                .try_fold(0u64, |acc, &l| acc.checked_add(l)),
            Level::Raid0 => {
                let b = raid0::bounds(self.chunk_sectors, &self.member_sectors)?;
                Some(b.last().map_or(0, |z| z.zone_end))
            }
            Level::Raid1 => Some(self.dev_sectors),
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let k = u64::try_from(self.data_disks()).ok()?;
                self.stripes()
                    .checked_mul(self.chunk_sectors)?
                    .checked_mul(k)
            }
            Level::Raid10 => raid10::R10::of(self)?.array_sectors(),
        }
    }

    /// Size of the array in sectors (§4.7). 0 for a geometry that cannot be mapped.
    pub fn array_sectors(&self) -> u64 {
        self.try_array_sectors().unwrap_or(0)
    }

    /// Number of data blocks per stripe: N-1 (RAID4/5), N-2 (RAID6). 0 for other levels.
    pub fn data_disks(&self) -> usize {
        match self.level {
            Level::Raid4 | Level::Raid5 => self.raid_disks.saturating_sub(1),
            Level::Raid6 => self.raid_disks.saturating_sub(2),
            _ => 0,
        }
    }

    /// Number of copies of every array sector: `raid_disks` (RAID1), `nc*fc` (RAID10),
    /// 1 otherwise.
    pub fn copies(&self) -> usize {
        match self.level {
            Level::Raid1 => self.raid_disks,
            Level::Raid10 => raid10::R10::of(self).map_or(0, |r| r.nc.saturating_mul(r.fc)),
            _ => 1,
        }
    }

    /// The RAID0 zones (§4.2); empty for other levels or an unmappable geometry.
    pub fn zones(&self) -> Vec<Raid0Zone> {
        if self.level != Level::Raid0 || self.member_sectors.len() != self.raid_disks {
            return Vec::new();
        }
        raid0::zones(self.chunk_sectors, &self.member_sectors).unwrap_or_default()
    }

    /// Per-member sectors actually used (RAID10: `used * chunk`, which can be smaller than
    /// `dev_sectors`; RAID1/4/5/6: `dev_sectors` rounded down to the chunk; RAID0/linear:
    /// `member_sectors[role]` rounded). This is what the kernel writes back as `size`.
    /// 0 for a role ≥ `raid_disks`.
    pub fn used_dev_sectors(&self, role: usize) -> u64 {
        if role >= self.raid_disks {
            return 0;
        }
        let c = self.chunk_sectors;
        match self.level {
            Level::Linear => linear_lens(self)
                .and_then(|l| l.get(role).copied())
                .unwrap_or(0),
            Level::Raid0 => match (self.member_sectors.get(role), c) {
                (Some(&m), c) if c > 0 => m / c * c,
                _ => 0,
            },
            Level::Raid1 => self.dev_sectors,
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                self.stripes().checked_mul(c).unwrap_or(0)
            }
            Level::Raid10 => raid10::R10::of(self)
                .and_then(|r| r.used_sectors())
                .unwrap_or(0),
        }
    }

    /// Number of stripes (RAID4/5/6): `dev_sectors / chunk`. 0 for other levels.
    pub fn stripes(&self) -> u64 {
        match self.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => self
                .dev_sectors
                .checked_div(self.chunk_sectors)
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// Map array sector `s` (< array_sectors) to its copies. For RAID4/5/6 this gives the
    /// data block only (see [`Geometry::stripe`] for parity). Returns None if `s` is out of
    /// range.
    pub fn locate(&self, s: u64) -> Option<Placement> {
        if self.level == Level::Raid10 {
            // One derivation of the RAID10 shape for both the bound and the mapping (it
            // costs several 64-bit divisions, on every request's path).
            let r = raid10::R10::of(self)?;
            return if s < r.array_sectors()? {
                r.locate(s)
            } else {
                None
            };
        }
        if s >= self.try_array_sectors()? {
            return None;
        }
        match self.level {
            Level::Linear => {
                let mut start = 0u64;
                for (role, len) in linear_lens(self)?.into_iter().enumerate() {
                    let end = start.checked_add(len)?;
                    if s < end {
                        return Some(Placement {
                            copies: vec![(role, s - start)],
                            run: end - s,
                        });
                    }
                    start = end;
                }
                None
            }
            Level::Raid0 => raid0::locate(self, s),
            Level::Raid1 if self.raid_disks == 0 || self.raid_disks > MAX_RAID_DISKS => None,
            Level::Raid1 => Some(Placement {
                copies: (0..self.raid_disks).map(|r| (r, s)).collect(),
                run: self.dev_sectors - s,
            }),
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let c = self.chunk_sectors;
                let k = u64::try_from(self.data_disks()).ok()?;
                let chunk = s.checked_div(c)?;
                let in_chunk = s % c;
                let stripe = chunk.checked_div(k)?;
                let idx = usize::try_from(chunk % k).ok()?;
                let ps = parity::PStripe::of(self, stripe)?;
                let data_sector = stripe.checked_mul(c)?.checked_add(in_chunk)?;
                Some(Placement {
                    copies: vec![(ps.member(idx), data_sector)],
                    run: c - in_chunk,
                })
            }
            Level::Raid10 => raid10::R10::of(self)?.locate(s),
        }
    }

    /// Stripes after which [`Geometry::stripe`] repeats for RAID4/5/6: stripe `s` has the
    /// layout of stripe `s % period` (None for other levels). RAID4 1; RAID5 and RAID6 the
    /// member count, but the `*-6` layouts 16..=19 rotate over the members before Q.
    pub fn stripe_period(&self) -> Option<u64> {
        let n = u64::try_from(self.raid_disks).ok()?;
        match self.level {
            Level::Raid4 => Some(1),
            Level::Raid5 => Some(n),
            Level::Raid6 if matches!(self.layout, 16..=19) => n.checked_sub(1),
            Level::Raid6 => Some(n),
            _ => None,
        }
    }

    /// Layout of stripe `stripe` for RAID4/5/6 (panics-free: returns None for other levels
    /// or an out-of-range stripe).
    pub fn stripe(&self, stripe: u64) -> Option<StripeLayout> {
        if !self.level.has_parity() || stripe >= self.stripes() {
            return None;
        }
        let ps = parity::PStripe::of(self, stripe)?;
        let data: Vec<usize> = (0..ps.k).map(|k| ps.member(k)).collect();
        let (slot, syndrome_width) = if self.level == Level::Raid6 {
            let width = if ps.ddf { ps.n } else { ps.k };
            (data.iter().map(|&m| ps.slot(m)).collect(), width)
        } else {
            ((0..ps.k).collect(), ps.k)
        };
        Some(StripeLayout {
            p: ps.p,
            q: ps.q,
            data,
            slot,
            syndrome_width,
        })
    }

    /// Inverse mapping: which array sector is stored at `(role, data_sector)`.
    /// None for parity blocks, unused space, or out of range. For RAID1 returns
    /// `data_sector`; for RAID10 any copy maps back to its array sector.
    pub fn reverse(&self, role: usize, data_sector: u64) -> Option<u64> {
        if role >= self.raid_disks {
            return None;
        }
        let size = self.try_array_sectors()?;
        let s = match self.level {
            Level::Linear => {
                let lens = linear_lens(self)?;
                if data_sector >= *lens.get(role)? {
                    return None;
                }
                let start = lens
                    .get(..role)?
                    .iter()
                    .try_fold(0u64, |a, &l| a.checked_add(l))?;
                start.checked_add(data_sector)?
            }
            Level::Raid0 => raid0::reverse(self, role, data_sector)?,
            Level::Raid1 => data_sector,
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let c = self.chunk_sectors;
                let stripe = data_sector.checked_div(c)?;
                if stripe >= self.stripes() {
                    return None;
                }
                let ps = parity::PStripe::of(self, stripe)?;
                let k = u64::try_from(ps.index_of(role)?).ok()?;
                let kk = u64::try_from(ps.k).ok()?;
                stripe
                    .checked_mul(kk)?
                    .checked_add(k)?
                    .checked_mul(c)?
                    .checked_add(data_sector % c)?
            }
            Level::Raid10 => raid10::R10::of(self)?.reverse(role, data_sector)?,
        };
        (s < size).then_some(s)
    }
}

/// Linear member lengths: `member_sectors` rounded down to the chunk ("rounding") when
/// the chunk is not 0. None if the sizes do not match `raid_disks`.
fn linear_lens(g: &Geometry) -> Option<Vec<u64>> {
    if g.member_sectors.len() != g.raid_disks {
        return None;
    }
    let c = g.chunk_sectors;
    Some(
        g.member_sectors
            .iter()
            .map(|&m| m.checked_div(c).map_or(m, |q| q * c))
            .collect(),
    )
}
