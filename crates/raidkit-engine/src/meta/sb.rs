//! One view over the two superblock families (0.90 and 1.x) and their IO on a member.

use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use raidkit_format::v090::{self, disk_state, sb_state, SuperblockV090};
use raidkit_format::v1::{self, feature, Minor, SuperblockV1};
use raidkit_format::validate::MemberAreas;
use raidkit_format::{FormatError, MAX_SECTOR, MD_MAGIC};

/// Metadata version of a superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metadata {
    /// 0.90.
    V090,
    /// 1.0, 1.1 or 1.2.
    V1(Minor),
}

impl Metadata {
    /// Parse `0.90`, `0.9`, `1.0`, `1.1`, `1.2`, `1`, `default`.
    pub fn parse(s: &str) -> Option<Metadata> {
        match s {
            "0.90" | "0.9" | "0" => Some(Metadata::V090),
            "1.0" => Some(Metadata::V1(Minor::V0)),
            "1.1" => Some(Metadata::V1(Minor::V1)),
            "1.2" | "1" | "default" => Some(Metadata::V1(Minor::V2)),
            _ => None,
        }
    }
    /// `0.90`, `1.0`, `1.1`, `1.2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Metadata::V090 => "0.90",
            Metadata::V1(m) => m.as_str(),
        }
    }
}

impl std::fmt::Display for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// mdadm's text form of an array UUID. 0.90 superblocks store four host-endian words and
/// mdadm prints each word as a number, so the bytes of each 4-byte group are reversed
/// relative to the kernel's raw view.
pub fn uuid_text(metadata: Metadata, raw: &[u8; 16]) -> String {
    raidkit_format::uuid::format(&uuid_user_bytes(metadata, raw))
}

/// Convert between the raw (kernel) UUID bytes and the bytes of mdadm's text form.
/// The conversion is its own inverse.
pub fn uuid_user_bytes(metadata: Metadata, raw: &[u8; 16]) -> [u8; 16] {
    let mut u = *raw;
    if metadata == Metadata::V090 {
        for g in u.chunks_exact_mut(4) {
            g.reverse();
        }
    }
    u
}

/// The role a superblock's table gives a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Active in slot n.
    Active(usize),
    /// Spare (or unused).
    Spare,
    /// Marked faulty.
    Faulty,
    /// Journal device.
    Journal,
}

/// A superblock of either family.
#[allow(clippy::large_enum_variant)] // few instances, one per member
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Super {
    /// 0.90.
    V090(SuperblockV090),
    /// 1.x.
    V1(SuperblockV1),
}

fn v1_role(r: u16) -> Role {
    match r {
        v1::role::SPARE => Role::Spare,
        v1::role::FAULTY => Role::Faulty,
        v1::role::JOURNAL => Role::Journal,
        x if x >= 0xff00 => Role::Spare,
        x => Role::Active(x as usize),
    }
}

fn v090_role(d: &v090::DiskDescriptor) -> Role {
    if d.state & disk_state::FAULTY != 0 {
        Role::Faulty
    } else if d.state & disk_state::REMOVED != 0 {
        Role::Spare
    } else if d.state & disk_state::ACTIVE != 0 && d.state & disk_state::SYNC != 0 {
        Role::Active(d.raid_disk as usize)
    } else {
        Role::Spare
    }
}

impl Super {
    /// Metadata version (for 1.x from `super_offset`).
    pub fn metadata(&self) -> Metadata {
        match self {
            Super::V090(_) => Metadata::V090,
            Super::V1(s) => Metadata::V1(s.minor()),
        }
    }
    /// Array UUID.
    pub fn uuid(&self) -> [u8; 16] {
        match self {
            Super::V090(s) => s.uuid(),
            Super::V1(s) => s.set_uuid,
        }
    }
    /// Array name (`homehost:name` for 1.x, empty for 0.90).
    pub fn name(&self) -> String {
        match self {
            Super::V090(_) => String::new(),
            Super::V1(s) => s.name(),
        }
    }
    /// MD level number.
    pub fn level(&self) -> i32 {
        match self {
            Super::V090(s) => s.level,
            Super::V1(s) => s.level,
        }
    }
    /// Layout value.
    pub fn layout(&self) -> u32 {
        match self {
            Super::V090(s) => s.layout,
            Super::V1(s) => s.layout,
        }
    }
    /// Chunk in sectors.
    pub fn chunk_sectors(&self) -> u64 {
        match self {
            Super::V090(s) => u64::from(s.chunk_size) / 512,
            Super::V1(s) => u64::from(s.chunksize),
        }
    }
    /// Number of raid devices.
    pub fn raid_disks(&self) -> usize {
        match self {
            Super::V090(s) => s.raid_disks as usize,
            Super::V1(s) => s.raid_disks as usize,
        }
    }
    /// Component size (`size`) in sectors.
    pub fn size_sectors(&self) -> u64 {
        match self {
            Super::V090(s) => u64::from(s.size_kib) * 2,
            Super::V1(s) => s.size,
        }
    }
    /// Data start on this device, in sectors.
    pub fn data_offset(&self) -> u64 {
        match self {
            Super::V090(_) => 0,
            Super::V1(s) => s.data_offset,
        }
    }
    /// Sectors available for data on this device (for 0.90: up to the superblock).
    pub fn data_size(&self, dev_sectors: u64) -> u64 {
        match self {
            Super::V090(_) => v090::super_offset(dev_sectors).unwrap_or(0),
            Super::V1(s) => s.data_size,
        }
    }
    /// Superblock location in sectors.
    pub fn super_offset(&self, dev_sectors: u64) -> u64 {
        match self {
            Super::V090(_) => v090::super_offset(dev_sectors).unwrap_or(0),
            Super::V1(s) => s.super_offset,
        }
    }
    /// Event counter.
    pub fn events(&self) -> u64 {
        match self {
            Super::V090(s) => s.events,
            Super::V1(s) => s.events,
        }
    }
    /// Set the event counter.
    pub fn set_events(&mut self, e: u64) {
        match self {
            Super::V090(s) => {
                // A checkpoint valid before (cp_events = events: `recovery_cp` counts)
                // stays valid, as md rewrites cp_events with events while in sync.
                if s.cp_events == s.events {
                    s.cp_events = e;
                }
                s.events = e;
            }
            Super::V1(s) => s.events = e,
        }
    }
    /// Resync checkpoint (MAX_SECTOR = clean).
    pub fn resync_offset(&self) -> u64 {
        match self {
            Super::V090(s) => s.resync_offset(),
            Super::V1(s) => s.resync_offset,
        }
    }
    /// Set the resync checkpoint (0.90: CLEAN bit + recovery_cp/cp_events).
    pub fn set_resync_offset(&mut self, off: u64) {
        match self {
            Super::V090(s) => {
                if off == MAX_SECTOR {
                    s.state |= sb_state::CLEAN;
                    s.recovery_cp = u32::MAX;
                } else {
                    s.state &= !sb_state::CLEAN;
                    s.recovery_cp = u32::try_from(off).unwrap_or(0);
                }
                s.cp_events = s.events;
            }
            Super::V1(s) => s.resync_offset = off,
        }
    }
    /// Creation time, Unix seconds.
    pub fn ctime(&self) -> u64 {
        match self {
            Super::V090(s) => u64::from(s.ctime),
            Super::V1(s) => v1::decode_time(s.ctime),
        }
    }
    /// Update time, Unix seconds.
    pub fn utime(&self) -> u64 {
        match self {
            Super::V090(s) => u64::from(s.utime),
            Super::V1(s) => v1::decode_time(s.utime),
        }
    }
    /// Set the update time.
    pub fn set_utime(&mut self, t: u64) {
        match self {
            Super::V090(s) => s.utime = t as u32,
            Super::V1(s) => s.utime = v1::encode_time(t),
        }
    }
    /// This device's slot index in the role table.
    pub fn dev_number(&self) -> usize {
        match self {
            Super::V090(s) => s.this_disk.number as usize,
            Super::V1(s) => s.dev_number as usize,
        }
    }
    /// The role this superblock's table gives the device with slot index `devnum`.
    pub fn role_of(&self, devnum: usize) -> Role {
        match self {
            Super::V090(s) => match s.disks.get(devnum) {
                Some(d) => v090_role(d),
                None => Role::Spare,
            },
            Super::V1(s) => match s.dev_roles.get(devnum) {
                Some(&r) => v1_role(r),
                None => Role::Spare,
            },
        }
    }
    /// Do two superblocks of one array belong to the same device? 1.x: the same device
    /// UUID; 0.90 (no device UUID): the same device number.
    pub fn same_device_as(&self, other: &Super) -> bool {
        match (self, other) {
            (Super::V1(a), Super::V1(b)) => a.device_uuid == b.device_uuid,
            (Super::V090(a), Super::V090(b)) => a.this_disk.number == b.this_disk.number,
            _ => false,
        }
    }
    /// The device number this superblock's table makes active in `role`, if any.
    pub fn holder_of(&self, role: usize) -> Option<usize> {
        let n = match self {
            Super::V090(s) => s.disks.len(),
            Super::V1(s) => s.dev_roles.len(),
        };
        (0..n).find(|&d| self.role_of(d) == Role::Active(role))
    }
    /// Is this device write-mostly (1.x `devflags` bit 0; 0.90 its descriptor's state
    /// bit 9)?
    pub fn write_mostly(&self) -> bool {
        match self {
            Super::V090(s) => s.this_disk.state & disk_state::WRITEMOSTLY != 0,
            Super::V1(s) => s.devflags & v1::devflag::WRITE_MOSTLY != 0,
        }
    }
    /// Say whether the device with slot index `devnum` is write-mostly: a 1.x superblock
    /// carries only its own flag (changed if `devnum` is its own slot); a 0.90 one carries
    /// every device's, in its descriptor table.
    pub fn set_write_mostly(&mut self, devnum: usize, on: bool) {
        match self {
            Super::V090(s) => {
                let set = |st: &mut u32| {
                    if on {
                        *st |= disk_state::WRITEMOSTLY;
                    } else {
                        *st &= !disk_state::WRITEMOSTLY;
                    }
                };
                if let Some(d) = s.disks.get_mut(devnum) {
                    set(&mut d.state);
                }
                if s.this_disk.number as usize == devnum {
                    set(&mut s.this_disk.state);
                }
            }
            Super::V1(s) => {
                if s.dev_number as usize == devnum {
                    if on {
                        s.devflags |= v1::devflag::WRITE_MOSTLY;
                    } else {
                        s.devflags &= !v1::devflag::WRITE_MOSTLY;
                    }
                }
            }
        }
    }
    /// This device's own role according to its own table.
    pub fn own_role(&self) -> Role {
        match self {
            Super::V090(s) => v090_role(&s.this_disk),
            Super::V1(s) => self.role_of(s.dev_number as usize),
        }
    }
    /// Rebuild checkpoint if this device is partially recovered.
    pub fn recovery_offset(&self) -> Option<u64> {
        match self {
            Super::V090(_) => None,
            Super::V1(s) => {
                if s.feature_map & feature::RECOVERY_OFFSET != 0 {
                    Some(s.recovery_offset)
                } else {
                    None
                }
            }
        }
    }
    /// Is this device being rebuilt in its own role (RECOVERY_OFFSET without
    /// REPLACEMENT)? During a reshape such a member may be one the reshape builds
    /// ([`raidkit_layout::reshape::builds_member`]).
    pub fn rebuilding(&self) -> bool {
        self.recovery_offset().is_some() && self.feature_map() & feature::REPLACEMENT == 0
    }
    /// Device sector of the bitmap superblock, if the array has an internal bitmap.
    pub fn bitmap_sector(&self, dev_sectors: u64) -> Option<u64> {
        match self {
            Super::V090(s) => {
                if s.state & sb_state::BITMAP_PRESENT != 0 {
                    v090::super_offset(dev_sectors).map(|o| o + 8)
                } else {
                    None
                }
            }
            Super::V1(s) => {
                if s.feature_map & feature::BITMAP_OFFSET != 0 {
                    let o = s.super_offset as i64 + i64::from(s.bitmap_offset);
                    u64::try_from(o).ok()
                } else {
                    None
                }
            }
        }
    }
    /// Bad-block log location: (device sector, size in sectors, shift).
    pub fn bblog(&self) -> Option<(u64, u64, u8)> {
        match self {
            Super::V090(_) => None,
            Super::V1(s) => {
                if s.bblog_size == 0 || s.bblog_offset == 0 {
                    return None;
                }
                let o = s.super_offset as i64 + i64::from(s.bblog_offset);
                u64::try_from(o)
                    .ok()
                    .map(|o| (o, u64::from(s.bblog_size), s.bblog_shift))
            }
        }
    }
    /// Feature bits (1.x) — 0 for 0.90 (bitmap shown via `bitmap_sector`).
    pub fn feature_map(&self) -> u32 {
        match self {
            Super::V090(_) => 0,
            Super::V1(s) => s.feature_map,
        }
    }
    /// True if a reshape is recorded as in progress.
    pub fn reshape_active(&self) -> bool {
        match self {
            Super::V090(s) => s.minor_version == 91,
            Super::V1(s) => s.feature_map & feature::RESHAPE_ACTIVE != 0,
        }
    }
    /// Check the fields against each other and md's rules, before anything is sized or
    /// placed from them (see [`raidkit_format::validate`]).
    pub fn validate(&self) -> std::result::Result<(), FormatError> {
        match self {
            Super::V090(s) => s.validate(),
            Super::V1(s) => s.validate(),
        }
    }
    /// Place the member's areas (superblock, data, bitmap, bad-block log) on a device of
    /// `dev_sectors`; an error names the field that puts one outside the device or over
    /// another. Call [`Super::validate`] first.
    pub fn areas(&self, dev_sectors: u64) -> std::result::Result<MemberAreas, FormatError> {
        match self {
            Super::V090(s) => s.areas(dev_sectors),
            Super::V1(s) => s.areas(dev_sectors),
        }
    }
    /// Sectors the array's write-intent bitmap must cover; None if the level keeps none.
    pub fn bitmap_sync_size(&self) -> Option<u64> {
        match self {
            Super::V090(s) => s.bitmap_sync_size(),
            Super::V1(s) => s.bitmap_sync_size(),
        }
    }
    /// The reshape recorded in this superblock, if one is in progress.
    pub fn reshape(&self) -> Option<raidkit_format::reshape::ReshapeInfo> {
        match self {
            Super::V090(s) => s.reshape(),
            Super::V1(s) => s.reshape(),
        }
    }
    /// Record a reshape as the kernel does (0.90: minor version 91; 1.x: the reshape
    /// feature bits and fields). `raid_disks` must already be the new count.
    pub fn set_reshape(&mut self, r: &raidkit_format::reshape::ReshapeInfo) {
        match self {
            Super::V090(s) => s.set_reshape(r),
            Super::V1(s) => s.set_reshape(r),
        }
    }
    /// The superblock after the reshape completed, as the kernel writes it.
    pub fn finish_reshape(&mut self) {
        match self {
            Super::V090(s) => s.finish_reshape(),
            Super::V1(s) => s.finish_reshape(),
        }
    }
    /// Role slots the array has: `raid_disks`, or the old count while a reshape that
    /// removes members is in progress (the members leaving still hold old-layout data).
    pub fn role_slots(&self) -> usize {
        let n = self.raid_disks();
        match self.reshape() {
            Some(r) if r.delta_disks < 0 => n.saturating_add(r.delta_disks.unsigned_abs() as usize),
            _ => n,
        }
    }
    /// Take the array-wide fields of `array` (a working member's superblock), keeping this
    /// device's own (its number, offsets, sizes, flags, bad-block log, recovery state):
    /// a member coming back has the superblock of the array as it was when it left
    /// (shape, size, bitmap, state), and md rewrites it whole from the array's. For 0.90
    /// that includes the descriptor table (the kernel judges a device by its own
    /// superblock's descriptor of it): its own descriptor then says what the array's
    /// table says of it, with its own write-mostly flag.
    pub fn take_array_fields(&mut self, array: &Super) {
        match (self, array) {
            (Super::V1(me), Super::V1(a)) => take_array_fields_v1(me, a),
            (Super::V090(me), Super::V090(a)) => take_array_fields_v090(me, a),
            _ => {}
        }
    }
    /// Set the component size (`size`, sectors; 0.90 stores KiB).
    pub fn set_size_sectors(&mut self, sectors: u64) {
        match self {
            Super::V090(s) => s.size_kib = u32::try_from(sectors / 2).unwrap_or(u32::MAX),
            Super::V1(s) => s.size = sectors,
        }
    }
    /// Set the level, layout, chunk (sectors) and device count (a takeover, or the shape
    /// at the start of a reshape).
    pub fn set_shape(&mut self, level: i32, layout: u32, chunk_sectors: u64, raid_disks: usize) {
        match self {
            Super::V090(s) => {
                s.level = level;
                s.layout = layout;
                s.chunk_size = u32::try_from(chunk_sectors.saturating_mul(512)).unwrap_or(u32::MAX);
                s.raid_disks = raid_disks as u32;
            }
            Super::V1(s) => {
                s.level = level;
                s.layout = layout;
                s.chunksize = u32::try_from(chunk_sectors).unwrap_or(u32::MAX);
                s.raid_disks = raid_disks as u32;
                if level != 0 {
                    // The RAID0 layout bit means nothing at other levels (and fails there).
                    s.feature_map &= !feature::RAID0_LAYOUT;
                }
            }
        }
    }
    /// Encode to bytes to write at the superblock location.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Super::V090(s) => s.encode(),
            Super::V1(s) => {
                let mut b = s.encode();
                b.truncate(s.write_len());
                b
            }
        }
    }
}

/// What probing one device found.
#[derive(Debug, Default)]
pub struct Probe {
    /// Valid superblocks, with whether their checksum was correct (lenient parse).
    pub found: Vec<(Super, bool)>,
    /// Locations with an MD magic whose superblock could not be decoded, and why.
    pub broken: Vec<(String, FormatError)>,
}

fn read_sectors(dev: &dyn BlockDev, sector: u64, bytes: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; bytes];
    dev.read_at(&mut buf, sector * 512)
        .map_err(|e| EngineError::io(dev.name(), "reading a superblock", e))?;
    Ok(buf)
}

/// Look for every kind of MD superblock on a device. Checksum failures are reported as
/// found-with-bad-checksum (so `examine` can show them) when the rest decodes.
pub fn probe(dev: &dyn BlockDev) -> Result<Probe> {
    let dev_sectors = dev.size_bytes() / 512;
    let mut p = Probe::default();
    let try_v1 = |minor: Minor, p: &mut Probe| -> Result<()> {
        let off = minor.super_offset(dev_sectors);
        if dev_sectors < 16 || off + 8 > dev_sectors {
            return Ok(());
        }
        let buf = read_sectors(dev, off, 4096)?;
        let magic = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if magic != MD_MAGIC || u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) != 1 {
            return Ok(());
        }
        match SuperblockV1::parse_lenient(&buf) {
            Ok((sb, ok)) => {
                if sb.super_offset == off {
                    p.found.push((Super::V1(sb), ok));
                }
            }
            Err(e) => p.broken.push((format!("{} superblock", minor.as_str()), e)),
        }
        Ok(())
    };
    try_v1(Minor::V2, &mut p)?;
    try_v1(Minor::V1, &mut p)?;
    try_v1(Minor::V0, &mut p)?;
    if let Some(off) = v090::super_offset(dev_sectors) {
        let buf = read_sectors(dev, off, v090::SB_BYTES)?;
        let magic = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let major = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        if magic == MD_MAGIC && major == 0 {
            match SuperblockV090::parse_lenient(&buf) {
                Ok((sb, ok)) => p.found.push((Super::V090(sb), ok)),
                Err(e) => p.broken.push(("0.90 superblock".into(), e)),
            }
        } else if magic == MD_MAGIC.swap_bytes() {
            p.broken
                .push(("0.90 superblock".into(), FormatError::ForeignEndian));
        }
    }
    Ok(p)
}

/// Write a superblock to its location on `dev` (whole logical blocks).
pub fn write_super(dev: &dyn BlockDev, sb: &Super) -> Result<()> {
    let dev_sectors = dev.size_bytes() / 512;
    let off = sb.super_offset(dev_sectors) * 512;
    let mut bytes = sb.encode();
    let lbs = dev.logical_block_size().max(512) as usize;
    if !bytes.len().is_multiple_of(lbs) {
        // Read-modify-write the containing logical block(s).
        let len = bytes.len().div_ceil(lbs) * lbs;
        let mut buf = vec![0u8; len];
        dev.read_at(&mut buf, off)
            .map_err(|e| EngineError::io(dev.name(), "reading before a superblock write", e))?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        bytes = buf;
    }
    dev.write_at(&bytes, off)
        .map_err(|e| EngineError::io(dev.name(), "writing the superblock", e))
}

/// [`Super::take_array_fields`] for 1.x.
fn take_array_fields_v1(me: &mut SuperblockV1, a: &SuperblockV1) {
    const ARRAY_WIDE: u32 = feature::BITMAP_OFFSET
        | feature::RESHAPE_ACTIVE
        | feature::RESHAPE_BACKWARDS
        | feature::CLUSTERED
        | feature::JOURNAL
        | feature::PPL
        | feature::MULTIPLE_PPLS
        | feature::RAID0_LAYOUT;
    me.feature_map = (me.feature_map & !ARRAY_WIDE) | (a.feature_map & ARRAY_WIDE);
    me.set_name = a.set_name;
    me.ctime = a.ctime;
    me.level = a.level;
    me.layout = a.layout;
    me.size = a.size;
    me.chunksize = a.chunksize;
    me.raid_disks = a.raid_disks;
    me.bitmap_offset = a.bitmap_offset;
    me.new_level = a.new_level;
    me.reshape_position = a.reshape_position;
    me.delta_disks = a.delta_disks;
    me.new_layout = a.new_layout;
    me.new_chunk = a.new_chunk;
    me.events = a.events;
    me.utime = a.utime;
    me.resync_offset = a.resync_offset;
    me.max_dev = a.max_dev;
}

/// [`Super::take_array_fields`] for 0.90.
fn take_array_fields_v090(me: &mut SuperblockV090, a: &SuperblockV090) {
    let own = me.this_disk;
    me.minor_version = a.minor_version;
    me.ctime = a.ctime;
    me.level = a.level;
    me.size_kib = a.size_kib;
    me.nr_disks = a.nr_disks;
    me.raid_disks = a.raid_disks;
    me.utime = a.utime;
    me.state = a.state;
    me.active_disks = a.active_disks;
    me.working_disks = a.working_disks;
    me.failed_disks = a.failed_disks;
    me.spare_disks = a.spare_disks;
    me.events = a.events;
    me.cp_events = a.cp_events;
    me.recovery_cp = a.recovery_cp;
    me.reshape_position = a.reshape_position;
    me.new_level = a.new_level;
    me.delta_disks = a.delta_disks;
    me.new_layout = a.new_layout;
    me.new_chunk = a.new_chunk;
    me.layout = a.layout;
    me.chunk_size = a.chunk_size;
    me.disks = a.disks;
    if let Some(d) = me.disks.get_mut(own.number as usize) {
        d.state = (d.state & !disk_state::WRITEMOSTLY) | (own.state & disk_state::WRITEMOSTLY);
        me.this_disk = *d;
    }
}
