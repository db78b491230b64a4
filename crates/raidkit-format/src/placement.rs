//! How mdadm places the data area, bitmap and bad-block log (§1.9, §3.1, §3.6).
//! All values in sectors. Formulas are those of mdadm 4.2 as restated in the reference;
//! every function documents its formula.

use crate::v1::Minor;

/// Sectors of the bad-block log mdadm creates (4 KiB = 512 entries).
pub const BBLOG_SECTORS: u16 = 8;
/// Sectors from the superblock to the bitmap mdadm uses for 1.1/1.2 (4 KiB).
pub const V1_HEAD_BITMAP_OFFSET: i32 = 8;
/// Initial reshape headroom mdadm starts from (128 MiB).
pub const MAX_HEADROOM: u64 = 262_144;
/// Sectors the kernel keeps free after a 1.1/1.2 superblock start (36 KiB).
pub const KERNEL_SB_RESERVE: u64 = 72;

/// Space reserved for a future bitmap on a device of `dev_sectors` (§1.9
/// `choose_bm_space`):
/// `S < 128 → 0`; `S − 128 ≥ 200 GiB → 256`; `S − 8 > 8 GiB → 128`; else `8`.
pub fn choose_bm_space(dev_sectors: u64) -> u64 {
    let s = dev_sectors;
    if s < 128 {
        0
    } else if s - 128 >= 419_430_400 {
        256
    } else if s - 8 > 16_777_216 {
        128
    } else {
        8
    }
}

/// mdadm's default data offset for 1.1/1.2 on a device of `dev_sectors`, with
/// `chunk_kib` (0 for RAID1/linear) and `bmspace` reserved for a bitmap (§1.9):
///
/// ```text
/// headroom = 262144
/// while headroom*1024 > dev && (chunk_kib == 0 || headroom/2 >= 4*chunk_kib):
///     headroom /= 2
/// data_offset = round_up(24 + bmspace + headroom, 2048)
/// ```
///
/// `bmspace` is `choose_bm_space(dev_sectors)` normally, 2048 with PPL.
pub fn v1_data_offset(dev_sectors: u64, chunk_kib: u64, bmspace: u64) -> u64 {
    let mut headroom = MAX_HEADROOM;
    while headroom.saturating_mul(1024) > dev_sectors
        && (chunk_kib == 0 || headroom / 2 >= chunk_kib.saturating_mul(4))
    {
        headroom /= 2;
    }
    (24u64.saturating_add(bmspace).saturating_add(headroom)).div_ceil(2048) * 2048
}

/// Bad-block log placement for 1.1/1.2 (§1.9), relative to the superblock:
/// with `bm_offset = 8`, if `data_offset ≥ super_offset + 8 + bm_space + 8` the log goes
/// right after the bitmap space (`8 + bm_space`); else if `data_offset ≥ super_offset + 16`
/// it goes just below the data (`data_offset − 8 − super_offset`); else None (no log).
/// `bm_space` = the bitmap's 4 KiB-rounded size if a bitmap is created, else
/// `choose_bm_space(size)`. Returns `(bblog_offset, bblog_size)`.
pub fn v1_bblog_placement(
    super_offset: u64,
    data_offset: u64,
    bm_space: u64,
) -> Option<(i32, u16)> {
    let bm_offset = V1_HEAD_BITMAP_OFFSET as u64;
    let after_bitmap = bm_offset.checked_add(bm_space)?;
    if data_offset >= super_offset.checked_add(after_bitmap)?.checked_add(8)? {
        Some((i32::try_from(after_bitmap).ok()?, BBLOG_SECTORS))
    } else if data_offset >= super_offset.checked_add(16)? {
        let off = data_offset - 8 - super_offset;
        Some((i32::try_from(off).ok()?, BBLOG_SECTORS))
    } else {
        None
    }
}

/// Placement of a 1.x member (all sectors; offsets relative to the superblock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V1Layout {
    /// Device sector of the superblock.
    pub super_offset: u64,
    /// Device sector where data starts.
    pub data_offset: u64,
    /// Sectors available for data (`data_size`, "Avail Dev Size").
    pub data_size: u64,
    /// Bitmap offset from the superblock, if a bitmap was requested.
    pub bitmap_offset: Option<i32>,
    /// Bad-block log offset from the superblock (0 = no log).
    pub bblog_offset: i32,
    /// Bad-block log size in sectors (0 = no log).
    pub bblog_size: u16,
}

/// Compatibility name for a 1.0 layout (same fields).
pub type V1_0Layout = V1Layout;

/// mdadm 4.2's placement for a 1.0 member of `dev_sectors` (§1.9, §3.1):
///
/// ```text
/// super_offset = (dev − 16) & ~7;  data_offset = 0
/// bm      = bitmap_sectors (bitmap bytes rounded up to 4 KiB, in sectors) if a bitmap
///           is created, else choose_bm_space(size)      (size = size_hint, or dev if 0)
/// reserve = bm + 8                                      (8 = bad-block log)
/// if size_hint > 0 && super_offset < size_hint + reserve: reserve = super_offset − size_hint
/// data_size     = super_offset − reserve
/// bblog_offset  = −8, bblog_size = 8       if reserve ≥ 8, else no log
/// bitmap_offset = −(bm + 8)                if a bitmap is created
/// ```
///
/// `bitmap_sectors` is the rounded bitmap size in **sectors** (see
/// [`crate::bitmap::space_sectors`]). Verified: 64 MiB member, 1-bit bitmap (8 sectors) →
/// super_offset 131056, data_size 131040, bitmap_offset −16, bblog_offset −8.
pub fn v1_0_layout(dev_sectors: u64, size_hint: u64, bitmap_sectors: Option<u64>) -> V1Layout {
    let super_offset = Minor::V0.super_offset(dev_sectors);
    let size_for_bm = if size_hint > 0 {
        size_hint
    } else {
        dev_sectors
    };
    let bm = bitmap_sectors.unwrap_or_else(|| choose_bm_space(size_for_bm));
    let mut reserve = bm.saturating_add(u64::from(BBLOG_SECTORS));
    if size_hint > 0 && super_offset < size_hint.saturating_add(reserve) {
        reserve = super_offset.saturating_sub(size_hint);
    }
    let reserve = reserve.min(super_offset);
    let (bblog_offset, bblog_size) = if reserve >= u64::from(BBLOG_SECTORS) {
        (-i32::from(BBLOG_SECTORS), BBLOG_SECTORS)
    } else {
        (0, 0)
    };
    let bitmap_offset = bitmap_sectors.map(|b| {
        let total = b.saturating_add(u64::from(BBLOG_SECTORS));
        -(i32::try_from(total).unwrap_or(i32::MAX))
    });
    V1Layout {
        super_offset,
        data_offset: 0,
        data_size: super_offset - reserve,
        bitmap_offset,
        bblog_offset,
        bblog_size,
    }
}

/// mdadm 4.2's placement for a 1.1/1.2 member of `dev_sectors` with the default data
/// offset:
///
/// ```text
/// super_offset = 0 (1.1) / 8 (1.2)
/// data_offset  = v1_data_offset(dev, chunk_kib, choose_bm_space(dev))   (2048 with ppl)
/// data_size    = dev − data_offset
/// bitmap_offset = +8 if a bitmap is created
/// bblog         = v1_bblog_placement(super_offset, data_offset,
///                     bitmap_sectors or choose_bm_space(dev))
/// ```
///
/// For [`Minor::V0`] this delegates to [`v1_0_layout`] with no size hint.
/// Verified: 1.2 RAID5 4×32 MiB chunk 64 → data_offset 2048, data_size 63488,
/// bblog_offset 16; 1.2 RAID1 32 MiB with bitmap → bitmap_offset 8, bblog_offset 16.
pub fn v1_layout(
    minor: Minor,
    dev_sectors: u64,
    chunk_kib: u64,
    bitmap_sectors: Option<u64>,
) -> V1Layout {
    if minor == Minor::V0 {
        return v1_0_layout(dev_sectors, 0, bitmap_sectors);
    }
    let super_offset = minor.super_offset(dev_sectors);
    let data_offset = v1_data_offset(dev_sectors, chunk_kib, choose_bm_space(dev_sectors));
    let bm_space = bitmap_sectors.unwrap_or_else(|| choose_bm_space(dev_sectors));
    let (bblog_offset, bblog_size) =
        v1_bblog_placement(super_offset, data_offset, bm_space).unwrap_or((0, 0));
    V1Layout {
        super_offset,
        data_offset,
        data_size: dev_sectors.saturating_sub(data_offset),
        bitmap_offset: bitmap_sectors.map(|_| V1_HEAD_BITMAP_OFFSET),
        bblog_offset,
        bblog_size,
    }
}

/// The component size (`size` field, sectors) mdadm derives from the smallest member's
/// available size `min_avail` (§1.9 "Component size", §6.1): rounded down to the chunk
/// (`chunk_kib * 2` sectors) for striped levels (0, 4, 5, 6, 10), to 64 KiB (128
/// sectors) for RAID1 and levels without a chunk. Note that for RAID0 and linear mdadm
/// 4.2 *stores* 0 in `size`; this returns the usable size.
pub fn component_size(min_avail: u64, level: i32, chunk_kib: u64) -> u64 {
    let unit = match level {
        0 | 4 | 5 | 6 | 10 if chunk_kib > 0 => chunk_kib.saturating_mul(2),
        -1 if chunk_kib > 0 => chunk_kib.saturating_mul(2),
        -1 => 1,
        _ => 128,
    };
    min_avail - min_avail % unit
}

/// 0.90 usable size in KiB for a member of `dev_sectors` (§2.1): the superblock offset
/// rounded down to the chunk (or 64 KiB without a chunk), halved. None if the device is
/// too small for a 0.90 superblock. Verified: 8 MiB member, 64 KiB chunk → 8128 KiB.
pub fn v090_size_kib(dev_sectors: u64, chunk_kib: u64) -> Option<u32> {
    let sb = crate::v090::super_offset(dev_sectors)?;
    let unit = if chunk_kib > 0 {
        chunk_kib.saturating_mul(2)
    } else {
        128
    };
    u32::try_from((sb - sb % unit) / 2).ok()
}
