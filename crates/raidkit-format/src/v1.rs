//! Superblock version 1.x (`mdp_superblock_1`), all fields little-endian (§1).

use crate::{le, FormatError, Result};

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
    /// Where this variant's superblock lives on a device of `dev_sectors` sectors (§1.1):
    /// 1.0 → `(dev_sectors − 16) & !7` (0 for devices smaller than 16 sectors), 1.1 → 0,
    /// 1.2 → 8.
    pub fn super_offset(self, dev_sectors: u64) -> u64 {
        match self {
            Minor::V0 => dev_sectors.saturating_sub(16) & !7,
            Minor::V1 => 0,
            Minor::V2 => 8,
        }
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

/// `devflags` bits (per device, in its own superblock).
pub mod devflag {
    /// md's WriteMostly: read this member only when no other copy can serve.
    pub const WRITE_MOSTLY: u8 = 1 << 0;
    /// md's FailFast.
    pub const FAILFAST: u8 = 1 << 1;
}

/// Offset of `sb_csum` in the structure.
const CSUM_OFF: usize = 216;
/// Size of the area mdadm writes/fills (one 4 KiB block).
pub const SB_AREA: usize = 4096;

/// A count field must be within `0..=1920` (the kernel's `MAX_RAID_DISKS`).
fn check_count(field: &'static str, value: u32) -> Result<()> {
    if value > MAX_DEV_LIMIT {
        return Err(FormatError::OutOfRange {
            field,
            value: value.into(),
            min: 0,
            max: MAX_DEV_LIMIT.into(),
        });
    }
    Ok(())
}

fn bad(field: &'static str, why: impl Into<String>) -> FormatError {
    FormatError::BadField {
        field,
        why: why.into(),
    }
}

/// §1.4 checksum over the first `n` bytes of `buf` (csum field treated as zero).
fn csum_over(buf: &[u8], n: usize) -> u32 {
    let n = n.min(buf.len());
    let area = buf.get(..n).unwrap_or(&[]);
    let mut sum: u64 = 0;
    let mut words = area.chunks_exact(4);
    for (i, w) in words.by_ref().enumerate() {
        if i * 4 == CSUM_OFF {
            continue;
        }
        let mut b = [0u8; 4];
        b.copy_from_slice(w);
        sum += u64::from(u32::from_le_bytes(b));
    }
    if let [a, b, ..] = *words.remainder() {
        sum += u64::from(u16::from_le_bytes([a, b]));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

impl SuperblockV1 {
    /// Decode and validate (§1.1 step 2: magic, major 1, max_dev ≤ 1920, no unknown
    /// feature bits, checksum, data_size ≥ 10, pad0 and pad3 zero; also the §1.1 step 4
    /// rule that `RAID0_LAYOUT` requires level 0). Counts are bounded here, before anyone
    /// loops over them: `raid_disks ≤ 1920` and, with RESHAPE_ACTIVE, the pre-reshape count
    /// `raid_disks − delta_disks` in `0..=1920` ([`FormatError::OutOfRange`]). The other
    /// fields are checked by [`SuperblockV1::validate`] and [`SuperblockV1::areas`]. `buf` is the 4 KiB read at the
    /// superblock location (at least `256 + 2*max_dev` bytes).
    /// Does NOT check `super_offset` against the device (the caller knows the device).
    pub fn parse(buf: &[u8]) -> Result<SuperblockV1> {
        Self::decode(buf, true).map(|(sb, _)| sb)
    }

    /// Decode without checking the checksum (for `examine` of a damaged superblock); all
    /// other checks of [`SuperblockV1::parse`] still apply. Returns the superblock and
    /// whether the checksum was correct.
    pub fn parse_lenient(buf: &[u8]) -> Result<(SuperblockV1, bool)> {
        Self::decode(buf, false)
    }

    fn decode(buf: &[u8], strict: bool) -> Result<(SuperblockV1, bool)> {
        le::need(buf, SB_FIXED)?;
        let magic = le::u32_at(buf, 0)?;
        if magic != crate::MD_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let major = le::u32_at(buf, 4)?;
        if major != 1 {
            return Err(FormatError::BadVersion(format!("{major} (expected 1.x)")));
        }
        let max_dev = le::u32_at(buf, 220)?;
        check_count("max_dev", max_dev)?;
        let n = SB_FIXED + 2 * max_dev as usize;
        le::need(buf, n)?;
        let feature_map = le::u32_at(buf, 8)?;
        if feature_map & !feature::ALL != 0 {
            return Err(FormatError::UnknownFeatures(feature_map & !feature::ALL));
        }
        let stored = le::u32_at(buf, CSUM_OFF)?;
        let computed = csum_over(buf, n);
        let ok = stored == computed;
        if strict && !ok {
            return Err(FormatError::BadChecksum { stored, computed });
        }
        let data_size = le::u64_at(buf, 136)?;
        if data_size < 10 {
            return Err(bad("data_size", format!("{data_size} < 10")));
        }
        let pad0 = le::u32_at(buf, 12)?;
        if pad0 != 0 {
            return Err(bad("pad0", format!("{pad0:#x} is not zero")));
        }
        let pad3 = le::arr::<32>(buf, 224)?;
        if pad3.iter().any(|&b| b != 0) {
            return Err(bad("pad3", "not all zero"));
        }
        let level = le::i32_at(buf, 72)?;
        if feature_map & feature::RAID0_LAYOUT != 0 && level != 0 {
            return Err(bad(
                "feature_map",
                format!("RAID0_LAYOUT set on a level {level} array"),
            ));
        }
        // Counts that size loops and tables: bounded before anyone trusts them.
        let raid_disks = le::u32_at(buf, 92)?;
        check_count("raid_disks", raid_disks)?;
        let delta_disks = le::i32_at(buf, 112)?;
        if feature_map & feature::RESHAPE_ACTIVE != 0 {
            let old = i128::from(raid_disks) - i128::from(delta_disks);
            if !(0..=i128::from(MAX_DEV_LIMIT)).contains(&old) {
                return Err(FormatError::OutOfRange {
                    field: "delta_disks",
                    value: delta_disks.into(),
                    min: i128::from(raid_disks) - i128::from(MAX_DEV_LIMIT),
                    max: raid_disks.into(),
                });
            }
        }
        let mut dev_roles = Vec::with_capacity(max_dev as usize);
        for i in 0..max_dev as usize {
            dev_roles.push(le::u16_at(buf, SB_FIXED + 2 * i)?);
        }
        let sb = SuperblockV1 {
            feature_map,
            set_uuid: le::arr(buf, 16)?,
            set_name: le::arr(buf, 32)?,
            ctime: le::u64_at(buf, 64)?,
            level,
            layout: le::u32_at(buf, 76)?,
            size: le::u64_at(buf, 80)?,
            chunksize: le::u32_at(buf, 88)?,
            raid_disks,
            bitmap_offset: le::i32_at(buf, 96)?,
            new_level: le::i32_at(buf, 100)?,
            reshape_position: le::u64_at(buf, 104)?,
            delta_disks,
            new_layout: le::u32_at(buf, 116)?,
            new_chunk: le::u32_at(buf, 120)?,
            new_offset: le::i32_at(buf, 124)?,
            data_offset: le::u64_at(buf, 128)?,
            data_size,
            super_offset: le::u64_at(buf, 144)?,
            recovery_offset: le::u64_at(buf, 152)?,
            dev_number: le::u32_at(buf, 160)?,
            cnt_corrected_read: le::u32_at(buf, 164)?,
            device_uuid: le::arr(buf, 168)?,
            devflags: le::arr::<1>(buf, 184)?[0],
            bblog_shift: le::arr::<1>(buf, 185)?[0],
            bblog_size: le::u16_at(buf, 186)?,
            bblog_offset: le::i32_at(buf, 188)?,
            utime: le::u64_at(buf, 192)?,
            events: le::u64_at(buf, 200)?,
            resync_offset: le::u64_at(buf, 208)?,
            max_dev,
            dev_roles,
        };
        Ok((sb, ok))
    }

    /// Encode to a 4096-byte buffer: fixed part, role table, checksum computed; bytes after
    /// the role table up to 4096 filled with 0xff (as mdadm does). Callers write
    /// `self.write_len()` bytes of it (or all 4096 on a 4 KiB-sector device).
    ///
    /// Role slot `i < max_dev` holds `dev_roles[i]` (0xffff if `dev_roles` is shorter);
    /// `pad0`/`pad3` are written as zero. A `max_dev` above 1920 is stored as given but only
    /// 1920 slots are written (such a superblock does not parse).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0xffu8; SB_AREA];
        b[..SB_FIXED].fill(0);
        le::put(&mut b, 0, &crate::MD_MAGIC.to_le_bytes());
        le::put(&mut b, 4, &1u32.to_le_bytes());
        le::put(&mut b, 8, &self.feature_map.to_le_bytes());
        le::put(&mut b, 16, &self.set_uuid);
        le::put(&mut b, 32, &self.set_name);
        le::put(&mut b, 64, &self.ctime.to_le_bytes());
        le::put(&mut b, 72, &self.level.to_le_bytes());
        le::put(&mut b, 76, &self.layout.to_le_bytes());
        le::put(&mut b, 80, &self.size.to_le_bytes());
        le::put(&mut b, 88, &self.chunksize.to_le_bytes());
        le::put(&mut b, 92, &self.raid_disks.to_le_bytes());
        le::put(&mut b, 96, &self.bitmap_offset.to_le_bytes());
        le::put(&mut b, 100, &self.new_level.to_le_bytes());
        le::put(&mut b, 104, &self.reshape_position.to_le_bytes());
        le::put(&mut b, 112, &self.delta_disks.to_le_bytes());
        le::put(&mut b, 116, &self.new_layout.to_le_bytes());
        le::put(&mut b, 120, &self.new_chunk.to_le_bytes());
        le::put(&mut b, 124, &self.new_offset.to_le_bytes());
        le::put(&mut b, 128, &self.data_offset.to_le_bytes());
        le::put(&mut b, 136, &self.data_size.to_le_bytes());
        le::put(&mut b, 144, &self.super_offset.to_le_bytes());
        le::put(&mut b, 152, &self.recovery_offset.to_le_bytes());
        le::put(&mut b, 160, &self.dev_number.to_le_bytes());
        le::put(&mut b, 164, &self.cnt_corrected_read.to_le_bytes());
        le::put(&mut b, 168, &self.device_uuid);
        le::put(&mut b, 184, &[self.devflags, self.bblog_shift]);
        le::put(&mut b, 186, &self.bblog_size.to_le_bytes());
        le::put(&mut b, 188, &self.bblog_offset.to_le_bytes());
        le::put(&mut b, 192, &self.utime.to_le_bytes());
        le::put(&mut b, 200, &self.events.to_le_bytes());
        le::put(&mut b, 208, &self.resync_offset.to_le_bytes());
        le::put(&mut b, 220, &self.max_dev.to_le_bytes());
        let slots = self.max_dev.min(MAX_DEV_LIMIT) as usize;
        for i in 0..slots {
            let r = self.dev_roles.get(i).copied().unwrap_or(role::SPARE);
            le::put(&mut b, SB_FIXED + 2 * i, &r.to_le_bytes());
        }
        let csum = csum_over(&b, SB_FIXED + 2 * slots);
        le::put(&mut b, CSUM_OFF, &csum.to_le_bytes());
        b
    }

    /// `256 + 2*max_dev` rounded up to 512.
    pub fn write_len(&self) -> usize {
        let n = SB_FIXED + 2 * self.max_dev.min(MAX_DEV_LIMIT) as usize;
        n.div_ceil(512) * 512
    }

    /// The checksum of an encoded superblock buffer per §1.4 (the csum field is treated as
    /// zero; `max_dev` is read from the buffer). Errors if the buffer is shorter than
    /// `256 + 2*max_dev` or `max_dev > 1920`.
    pub fn checksum(buf: &[u8]) -> Result<u32> {
        let max_dev = le::u32_at(buf, 220)?;
        check_count("max_dev", max_dev)?;
        let n = SB_FIXED + 2 * max_dev as usize;
        le::need(buf, n)?;
        Ok(csum_over(buf, n))
    }

    /// This device's own role value (`dev_roles[dev_number]`, or `SPARE` if out of range).
    pub fn own_role(&self) -> u16 {
        if self.dev_number >= self.max_dev {
            return role::SPARE;
        }
        self.dev_roles
            .get(self.dev_number as usize)
            .copied()
            .unwrap_or(role::SPARE)
    }

    /// The variant implied by `super_offset` as mdadm prints it: ≤ 4 → 1.1, ≤ 8 → 1.2,
    /// anything else → 1.0 (so 0 → 1.1 and 8 → 1.2).
    pub fn minor(&self) -> Minor {
        match self.super_offset {
            0..=4 => Minor::V1,
            5..=8 => Minor::V2,
            _ => Minor::V0,
        }
    }

    /// The name as a string (bytes up to the first NUL, lossy UTF-8).
    pub fn name(&self) -> String {
        let end = self
            .set_name
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(self.set_name.len());
        String::from_utf8_lossy(self.set_name.get(..end).unwrap_or(&[])).into_owned()
    }

    /// Set the name from a string (truncated to 32 bytes, NUL padded).
    pub fn set_name_str(&mut self, name: &str) {
        self.set_name = [0; 32];
        let src = name.as_bytes();
        let n = src.len().min(32);
        self.set_name[..n].copy_from_slice(&src[..n]);
    }

    /// A superblock with mdadm 4.2's creation defaults for one member (§1.5–§1.9, §6.1):
    /// `events = 0`, `utime = ctime`, `max_dev` from [`default_max_dev`] with all
    /// `devices` slots holding roles `0..devices` (0xffff beyond), role of this member =
    /// `dev_number`, everything else zero. Callers then set the geometry/placement fields.
    pub fn new_default(set_uuid: [u8; 16], name: &str, ctime_unix: u64, devices: u32) -> Self {
        let max_dev = default_max_dev(devices);
        let dev_roles = (0..max_dev)
            .map(|i| if i < devices { i as u16 } else { role::SPARE })
            .collect();
        let mut sb = SuperblockV1 {
            feature_map: 0,
            set_uuid,
            set_name: [0; 32],
            ctime: encode_time(ctime_unix),
            level: 0,
            layout: 0,
            size: 0,
            chunksize: 0,
            raid_disks: devices,
            bitmap_offset: 0,
            new_level: 0,
            reshape_position: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk: 0,
            new_offset: 0,
            data_offset: 0,
            data_size: 0,
            super_offset: 0,
            recovery_offset: 0,
            dev_number: 0,
            cnt_corrected_read: 0,
            device_uuid: [0; 16],
            devflags: 0,
            bblog_shift: 0,
            bblog_size: 0,
            bblog_offset: 0,
            utime: encode_time(ctime_unix),
            events: 0,
            resync_offset: crate::MAX_SECTOR,
            max_dev,
            dev_roles,
        };
        sb.set_name_str(name);
        sb
    }
}

/// mdadm's `max_dev` for a new array with `devices` members (raid + spare):
/// `(round_up(256 + 2*devices, 512) − 256) / 2`, i.e. 128 for up to 128 devices, capped
/// at 1920.
pub fn default_max_dev(devices: u32) -> u32 {
    let bytes = (SB_FIXED as u64 + 2 * u64::from(devices)).div_ceil(512) * 512;
    (((bytes - SB_FIXED as u64) / 2) as u32).min(MAX_DEV_LIMIT)
}

/// The `set_name` mdadm writes (§1.6): `"homehost:name"` when a homehost is given, `name`
/// has no `:` and `len(homehost) + 1 + len(name) < 32`; otherwise `name` truncated to
/// 31 bytes.
pub fn mdadm_set_name(homehost: Option<&str>, name: &str) -> String {
    if let Some(h) = homehost {
        if !name.contains(':') && h.len() + 1 + name.len() < 32 {
            return format!("{h}:{name}");
        }
    }
    let mut end = name.len().min(31);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.get(..end).unwrap_or("").to_string()
}

/// Encode a time for `ctime`/`utime` (seconds, µs = 0).
pub fn encode_time(unix_seconds: u64) -> u64 {
    unix_seconds & ((1 << 40) - 1)
}

/// Decode `ctime`/`utime` to Unix seconds (mask the low 40 bits).
pub fn decode_time(raw: u64) -> u64 {
    raw & ((1 << 40) - 1)
}
