//! Create a new array with exactly the on-disk layout mdadm would choose (data offset,
//! superblock placement, bitmap), then make redundancy consistent.

use crate::array::Array;
use crate::assemble::{assemble, AssembleOptions};
use crate::bitmap::write_region;
use crate::dev::{BlockDev, FileDev};
use crate::error::{EngineError, Result};
use crate::sb::{probe, write_super, Metadata, Super};
use crate::sync::{self, SyncMode};
use crate::util::{is_zero, now, random_uuid};
use raidkit_format::bitmap::{self as fbitmap, BitmapSuper};
use raidkit_format::placement::{self, choose_bm_space, v1_data_offset};
use raidkit_format::v090::{self, disk_state, sb_state, DiskDescriptor, SuperblockV090};
use raidkit_format::v1::{self, feature, Minor, SuperblockV1};
use raidkit_format::MAX_SECTOR;
use raidkit_layout::{names, Geometry, Level};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

/// One member on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberSpec {
    /// A file or block device.
    Path(PathBuf),
    /// The word `missing`: the slot is left empty (degraded).
    Missing,
}

/// Everything `create` needs.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Level.
    pub level: Level,
    /// Number of role slots; must equal `members.len()`.
    pub raid_devices: usize,
    /// Chunk in bytes (default 512 KiB for striped levels).
    pub chunk_bytes: Option<u64>,
    /// Raw layout (default per level).
    pub layout: Option<u32>,
    /// Superblock version.
    pub metadata: Metadata,
    /// Array name (stored as `homehost:name` when it fits, like mdadm).
    pub name: String,
    /// Home host; None = no prefix.
    pub homehost: Option<String>,
    /// UUID (random if None).
    pub uuid: Option<[u8; 16]>,
    /// Create an internal write-intent bitmap.
    pub bitmap: bool,
    /// Bitmap chunk in bytes (default as mdadm).
    pub bitmap_chunk_bytes: Option<u64>,
    /// Reserve a bad-block log on every member, where mdadm puts it (1.x only). New
    /// arrays have none unless asked; without one, a member that gets bad blocks gets a log
    /// then (with an event) if there is room.
    pub bbl: bool,
    /// Skip the initial sync.
    pub assume_clean: bool,
    /// Create member files that do not exist, sparse, with this many bytes.
    pub create_size: Option<u64>,
    /// Overwrite devices that carry data or another superblock.
    pub force: bool,
    /// Members in role order.
    pub members: Vec<MemberSpec>,
}

impl CreateOptions {
    /// Defaults for a level and member list.
    pub fn new(level: Level, members: Vec<MemberSpec>) -> CreateOptions {
        CreateOptions {
            level,
            raid_devices: members.len(),
            chunk_bytes: None,
            layout: None,
            metadata: Metadata::V1(Minor::V2),
            name: "raidkit".into(),
            homehost: None,
            uuid: None,
            bitmap: false,
            bitmap_chunk_bytes: None,
            bbl: false,
            assume_clean: false,
            create_size: None,
            force: false,
            members,
        }
    }
}

/// Where things go on one member.
struct Place {
    super_offset: u64,
    data_offset: u64,
    data_size: u64,
    bitmap_offset: i32,
}

/// Look at an existing device and refuse it unless it is blank (or `force`).
pub(crate) fn check_blank(dev: &dyn BlockDev, force: bool) -> Result<()> {
    if force {
        return Ok(());
    }
    let p = probe(dev)?;
    if let Some((sb, _)) = p.found.first() {
        return Err(EngineError::Refused {
            device: dev.name().to_string(),
            why: format!(
                "it carries a {} MD superblock of array {} ({}); it may hold someone's data. Use --force to overwrite it",
                sb.metadata(),
                crate::sb::uuid_text(sb.metadata(), &sb.uuid()),
                sb.name()
            ),
        });
    }
    let size = dev.size_bytes();
    let probe_len = 64 * 1024u64;
    for off in [0, size.saturating_sub(probe_len)] {
        let len = probe_len.min(size - off) as usize;
        if dev.is_hole(off, len as u64) {
            continue;
        }
        let mut b = vec![0u8; len];
        dev.read_at(&mut b, off)
            .map_err(|e| EngineError::io(dev.name(), "checking the device is blank", e))?;
        if let Some(pos) = b.iter().position(|&x| x != 0) {
            return Err(EngineError::Refused {
                device: dev.name().to_string(),
                why: format!(
                    "it is not blank (non-zero data at byte {}): it may hold a filesystem or another array. Use --force to overwrite it",
                    off + pos as u64
                ),
            });
        }
    }
    Ok(())
}

fn hostname() -> Option<String> {
    let s = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let s = s.trim().to_string();
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

/// The local host name used as mdadm's "homehost".
pub fn default_homehost() -> Option<String> {
    hostname()
}

fn set_name_bytes(name: &str, homehost: Option<&str>) -> String {
    match homehost {
        Some(h) if !name.contains(':') && h.len() + 1 + name.len() < 32 => format!("{h}:{name}"),
        _ => name.chars().take(31).collect(),
    }
}

/// Create the array and return it running (writable).
pub fn create(opts: &CreateOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<Array> {
    let level = opts.level;
    let n = opts.raid_devices;
    if opts.members.len() != n {
        return Err(EngineError::Invalid(format!(
            "--raid-devices is {n} but {} member(s) were given; give exactly {n} (use the word `missing` for an empty slot)",
            opts.members.len()
        )));
    }
    let missing: Vec<usize> = (0..n)
        .filter(|&i| opts.members[i] == MemberSpec::Missing)
        .collect();
    let layout = opts.layout.unwrap_or_else(|| names::default_layout(level));
    let chunk_sectors = match level {
        Level::Raid1 => {
            if opts.chunk_bytes.is_some() {
                return Err(EngineError::Invalid(
                    "raid1 has no chunk size; drop --chunk".into(),
                ));
            }
            0
        }
        Level::Linear => 0,
        _ => {
            let c = opts.chunk_bytes.unwrap_or(512 * 1024);
            if !c.is_multiple_of(512) || c == 0 {
                return Err(EngineError::Invalid(format!(
                    "chunk size {c} is not a multiple of 512 bytes"
                )));
            }
            c / 512
        }
    };
    if opts.bbl && opts.metadata == Metadata::V090 {
        return Err(EngineError::Invalid(
            "0.90 metadata has no bad-block log; use --metadata 1.2 (or 1.0/1.1) with --bbl, or drop --bbl".into(),
        ));
    }
    if opts.bitmap && matches!(level, Level::Linear | Level::Raid0) {
        return Err(EngineError::Invalid(format!(
            "{level} has no redundancy, so a write-intent bitmap is meaningless; drop --bitmap"
        )));
    }
    // Check the shape early (with a dummy size) so errors are about the shape.
    Geometry::new(
        level,
        layout,
        chunk_sectors,
        n,
        chunk_sectors.max(128) * 64,
        vec![
            chunk_sectors.max(128) * 64;
            if matches!(level, Level::Linear | Level::Raid0) {
                n
            } else {
                0
            }
        ],
    )?;
    let tolerated = match level {
        Level::Linear | Level::Raid0 => 0,
        Level::Raid1 => n - 1,
        Level::Raid4 | Level::Raid5 => 1,
        Level::Raid6 => 2,
        Level::Raid10 => n,
    };
    if missing.len() > tolerated || missing.len() == n {
        return Err(EngineError::Invalid(format!(
            "{} of {n} members are `missing`; {level} can be created with at most {} missing",
            missing.len(),
            tolerated.min(n - 1)
        )));
    }
    // Open or create members.
    let mut devs: Vec<Option<Arc<dyn BlockDev>>> = Vec::with_capacity(n);
    for m in &opts.members {
        match m {
            MemberSpec::Missing => devs.push(None),
            MemberSpec::Path(p) => {
                let name = p.display().to_string();
                let created = if !p.exists() {
                    let Some(sz) = opts.create_size else {
                        return Err(EngineError::Invalid(format!(
                            "{name} does not exist; pass --size SIZE to create member files (sparse)"
                        )));
                    };
                    // Members hold the array's data: readable by their owner only.
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(p)
                        .map_err(|e| EngineError::io(&name, "creating the member file", e))?;
                    f.set_len(sz)
                        .map_err(|e| EngineError::io(&name, "sizing the member file", e))?;
                    true
                } else {
                    false
                };
                let d = FileDev::open(p, true)
                    .map_err(|e| EngineError::io(&name, "opening the member for writing", e))?;
                if !created {
                    check_blank(&d, opts.force)?;
                }
                devs.push(Some(Arc::new(d)));
            }
        }
    }
    for (i, a) in devs.iter().enumerate() {
        for b in devs.iter().skip(i + 1) {
            if let (Some(a), Some(b)) = (a, b) {
                if a.name() == b.name() {
                    return Err(EngineError::Invalid(format!("{} is given twice", a.name())));
                }
            }
        }
    }
    let dev_sectors: Vec<Option<u64>> = devs
        .iter()
        .map(|d| d.as_ref().map(|d| d.size_bytes() / 512))
        .collect();
    let first = dev_sectors.iter().flatten().copied().next().unwrap_or(0);
    let chunk_kib = chunk_sectors / 2;
    // Placement per member.
    let mut places: Vec<Option<Place>> = Vec::with_capacity(n);
    for ds in &dev_sectors {
        let Some(ds) = *ds else {
            places.push(None);
            continue;
        };
        let p = match opts.metadata {
            Metadata::V1(minor @ (Minor::V1 | Minor::V2)) => {
                let so = minor.super_offset(ds);
                let dof = v1_data_offset(first, chunk_kib, choose_bm_space(first));
                Place {
                    super_offset: so,
                    data_offset: dof,
                    data_size: ds.saturating_sub(dof),
                    bitmap_offset: if opts.bitmap { 8 } else { 0 },
                }
            }
            Metadata::V1(Minor::V0) => {
                let so = Minor::V0.super_offset(ds);
                // Reserve below the superblock: bitmap space + 8 (bad-block log room).
                let bm = if opts.bitmap { 8 } else { choose_bm_space(ds) };
                let reserve = bm + 8;
                Place {
                    super_offset: so,
                    data_offset: 0,
                    data_size: so.saturating_sub(reserve),
                    bitmap_offset: 0,
                }
            }
            Metadata::V090 => {
                let so = v090::super_offset(ds).ok_or_else(|| {
                    EngineError::Invalid("member too small for 0.90 metadata".into())
                })?;
                Place {
                    super_offset: so,
                    data_offset: 0,
                    data_size: so,
                    bitmap_offset: 0,
                }
            }
        };
        places.push(Some(p));
    }
    // Component size.
    let min_data = places
        .iter()
        .flatten()
        .map(|p| p.data_size)
        .min()
        .unwrap_or(0);
    let round = match level {
        Level::Raid1 => 128,
        Level::Linear => 1,
        _ => chunk_sectors.max(1),
    };
    let mut size = min_data / round * round;
    if let Metadata::V090 = opts.metadata {
        size = size.min((u64::from(u32::MAX)) * 2 / round * round);
    }
    if size < 16 || (chunk_sectors > 0 && size < chunk_sectors) {
        return Err(EngineError::Invalid(format!(
            "members are too small: each needs room for the metadata plus at least one chunk (usable size {} KiB); use larger members or a smaller chunk",
            min_data / 2
        )));
    }
    let member_sectors: Vec<u64> = if matches!(level, Level::Linear | Level::Raid0) {
        places
            .iter()
            .map(|p| p.as_ref().map(|p| p.data_size).unwrap_or(0))
            .collect()
    } else {
        Vec::new()
    };
    let geo = Geometry::new(level, layout, chunk_sectors, n, size, member_sectors)?;
    // Bitmap parameters.
    let bitmap_plan = if opts.bitmap {
        let sync_size = if level == Level::Raid10 {
            geo.array_sectors()
        } else {
            size
        };
        let room = match opts.metadata {
            Metadata::V1(Minor::V1 | Minor::V2) => {
                let p = places
                    .iter()
                    .flatten()
                    .next()
                    .map(|p| (p.super_offset, p.data_offset))
                    .unwrap_or((8, 2048));
                p.1.saturating_sub(p.0 + 8).min(256)
            }
            Metadata::V1(Minor::V0) => 256,
            Metadata::V090 => 120,
        };
        let chunk = match opts.bitmap_chunk_bytes {
            Some(c) => {
                if !c.is_power_of_two() || c < 512 || c > u64::from(u32::MAX) {
                    return Err(EngineError::Invalid(format!(
                        "bitmap chunk {c} must be a power of two of at least 512 bytes"
                    )));
                }
                c as u32
            }
            None => fbitmap::default_chunk_bytes(sync_size, room),
        };
        let chunks = sync_size.div_ceil(u64::from(chunk) / 512);
        let bytes = 256 + chunks.div_ceil(8);
        let sectors_4k = bytes.div_ceil(4096) * 8;
        if sectors_4k > room.max(8) && !matches!(opts.metadata, Metadata::V1(Minor::V0)) {
            return Err(EngineError::Invalid(format!(
                "the bitmap needs {} KiB but only {} KiB fit before the data; use a larger --bitmap-chunk",
                sectors_4k / 2,
                room / 2
            )));
        }
        Some((sync_size, chunk, chunks, sectors_4k))
    } else {
        None
    };
    // For 1.0 with a bitmap, place it below the superblock: -(R + 8).
    if let (Some((_, _, _, r)), Metadata::V1(Minor::V0)) = (&bitmap_plan, opts.metadata) {
        for p in places.iter_mut().flatten() {
            p.bitmap_offset = -((*r as i32) + 8);
            let limit = p.super_offset.saturating_sub(*r + 8);
            p.data_size = p.data_size.min(limit);
        }
        if places.iter().flatten().any(|p| p.data_size < size) {
            return Err(EngineError::Invalid(
                "no room for the bitmap below the 1.0 superblock; use larger members".into(),
            ));
        }
    }
    let redundant = !matches!(level, Level::Linear | Level::Raid0);
    let degraded_parity = level.has_parity() && !missing.is_empty();
    let clean_at_create = opts.assume_clean || !redundant || degraded_parity;
    let resync_offset = if clean_at_create { MAX_SECTOR } else { 0 };
    let uuid = match opts.uuid {
        Some(u) => crate::sb::uuid_user_bytes(opts.metadata, &u),
        None => {
            random_uuid().map_err(|e| EngineError::io("/dev/urandom", "generating a UUID", e))?
        }
    };
    let t = now();
    let set_name = set_name_bytes(&opts.name, opts.homehost.as_deref());
    // Build superblocks.
    let mut sbs: Vec<Option<Super>> = Vec::with_capacity(n);
    let max_dev: u32 = {
        let bytes = (256 + 2 * n as u32).div_ceil(512) * 512;
        (bytes - 256) / 2
    };
    let mut roles = vec![v1::role::SPARE; max_dev as usize];
    for (i, r) in roles.iter_mut().enumerate().take(n) {
        if !missing.contains(&i) {
            *r = i as u16;
        }
    }
    for (i, p) in places.iter().enumerate() {
        let Some(p) = p else {
            sbs.push(None);
            continue;
        };
        let sb = match opts.metadata {
            Metadata::V1(_) => {
                let mut fm = 0;
                if bitmap_plan.is_some() {
                    fm |= feature::BITMAP_OFFSET;
                }
                if level == Level::Raid0 {
                    fm |= feature::RAID0_LAYOUT;
                }
                let mut s = SuperblockV1 {
                    feature_map: fm,
                    set_uuid: uuid,
                    set_name: [0; 32],
                    ctime: v1::encode_time(t),
                    level: level.to_md(),
                    layout,
                    size: if matches!(level, Level::Linear | Level::Raid0) {
                        0
                    } else {
                        size
                    },
                    chunksize: chunk_sectors as u32,
                    raid_disks: n as u32,
                    bitmap_offset: if bitmap_plan.is_some() {
                        p.bitmap_offset
                    } else {
                        0
                    },
                    new_level: 0,
                    reshape_position: 0,
                    delta_disks: 0,
                    new_layout: 0,
                    new_chunk: 0,
                    new_offset: 0,
                    data_offset: p.data_offset,
                    data_size: p.data_size,
                    super_offset: p.super_offset,
                    recovery_offset: 0,
                    dev_number: i as u32,
                    cnt_corrected_read: 0,
                    device_uuid: random_uuid()
                        .map_err(|e| EngineError::io("/dev/urandom", "generating a UUID", e))?,
                    devflags: 0,
                    bblog_shift: 0,
                    bblog_size: 0,
                    bblog_offset: 0,
                    utime: v1::encode_time(t),
                    events: 0,
                    resync_offset,
                    max_dev,
                    dev_roles: roles.clone(),
                };
                if opts.bbl {
                    let (off, size) = bblog_place(p, opts.metadata, bitmap_plan.map(|b| b.3), first)
                        .ok_or_else(|| EngineError::Invalid(format!(
                            "no room for a bad-block log on member {i} (data starts right after the superblock); drop --bbl or use larger members"
                        )))?;
                    s.bblog_offset = off;
                    s.bblog_size = size;
                }
                s.set_name_str(&set_name);
                Super::V1(s)
            }
            Metadata::V090 => {
                let mut disks = [DiskDescriptor::default(); v090::MD_SB_DISKS];
                for (j, d) in disks.iter_mut().enumerate().take(n) {
                    *d = if missing.contains(&j) {
                        DiskDescriptor {
                            number: j as u32,
                            major: 0,
                            minor: 0,
                            raid_disk: j as u32,
                            state: disk_state::FAULTY | disk_state::REMOVED,
                        }
                    } else {
                        DiskDescriptor {
                            number: j as u32,
                            major: 0,
                            minor: 0,
                            raid_disk: j as u32,
                            state: disk_state::ACTIVE | disk_state::SYNC,
                        }
                    };
                }
                let mut state = if clean_at_create { sb_state::CLEAN } else { 0 };
                if bitmap_plan.is_some() {
                    state |= sb_state::BITMAP_PRESENT;
                }
                let active = (n - missing.len()) as u32;
                let mut s = SuperblockV090 {
                    minor_version: 90,
                    patch_version: 0,
                    uuid_words: [0; 4],
                    ctime: t as u32,
                    level: level.to_md(),
                    size_kib: (size / 2) as u32,
                    nr_disks: active,
                    raid_disks: n as u32,
                    md_minor: 0,
                    utime: t as u32,
                    state,
                    active_disks: active,
                    working_disks: active,
                    failed_disks: missing.len() as u32,
                    spare_disks: 0,
                    events: 0,
                    cp_events: 0,
                    recovery_cp: if clean_at_create { u32::MAX } else { 0 },
                    reshape_position: 0,
                    new_level: 0,
                    delta_disks: 0,
                    new_layout: 0,
                    new_chunk: 0,
                    layout,
                    chunk_size: (chunk_sectors * 512) as u32,
                    disks,
                    this_disk: disks[i],
                };
                s.set_uuid(uuid);
                Super::V090(s)
            }
        };
        sbs.push(Some(sb));
    }
    // Write: wipe foreign superblocks, bitmap, then our superblocks.
    for (i, d) in devs.iter().enumerate() {
        let (Some(d), Some(sb), Some(p)) = (d, &sbs[i], &places[i]) else {
            continue;
        };
        wipe_foreign(d.as_ref(), sb, p, size, opts.assume_clean)?;
        if let Some((sync_size, chunk, chunks, sectors)) = bitmap_plan {
            let bsb = BitmapSuper {
                version: 4,
                uuid,
                events: 0,
                events_cleared: 0,
                sync_size,
                state: 0,
                chunksize: chunk,
                daemon_sleep: 5,
                write_behind: 0,
                sectors_reserved: 0,
                nodes: 0,
                cluster_name: [0; 64],
            };
            let mut area = vec![0u8; (sectors * 512) as usize];
            area[..256].copy_from_slice(&bsb.encode());
            if !clean_at_create {
                for b in 0..chunks {
                    fbitmap::set_bit(&mut area[256..], b, true);
                }
            }
            let loc = match sb {
                Super::V090(_) => p.super_offset + 8,
                Super::V1(_) => (p.super_offset as i64 + i64::from(p.bitmap_offset)) as u64,
            };
            write_region(d.as_ref(), loc * 512, &area)?;
        }
        if let Some((at, n, _)) = sb.bblog() {
            // An empty log, as the kernel writes it (unused slots all ones).
            write_region(d.as_ref(), at * 512, &vec![0xffu8; (n * 512) as usize])?;
        }
        write_super(d.as_ref(), sb)?;
        d.flush()
            .map_err(|e| EngineError::io(d.name(), "flushing the new superblock", e))?;
    }
    // Assemble what we wrote and make it consistent.
    let present: Vec<Arc<dyn BlockDev>> = devs.into_iter().flatten().collect();
    let arr = assemble(
        present,
        &AssembleOptions {
            writable: true,
            force: false,
            metadata: Some(opts.metadata),
            report_only: false,
        },
    )?;
    if !opts.assume_clean && redundant {
        sync::run(&arr, SyncMode::Resync, true, progress)?;
        arr.mark_clean()?;
    }
    Ok(arr)
}

/// mdadm's bad-block log placement for a new member (§1.9): 1.1/1.2 after the bitmap
/// (space) or just below the data, 1.0 the 4 KiB below the superblock.
fn bblog_place(
    p: &Place,
    metadata: Metadata,
    bitmap_sectors: Option<u64>,
    dev_sectors: u64,
) -> Option<(i32, u16)> {
    match metadata {
        Metadata::V1(Minor::V0) => {
            let reserve = p.super_offset.checked_sub(p.data_offset + p.data_size)?;
            let bm = bitmap_sectors.unwrap_or(0);
            (reserve >= bm + u64::from(placement::BBLOG_SECTORS)).then_some((
                -i32::from(placement::BBLOG_SECTORS),
                placement::BBLOG_SECTORS,
            ))
        }
        Metadata::V1(_) => placement::v1_bblog_placement(
            p.super_offset,
            p.data_offset,
            bitmap_sectors.unwrap_or_else(|| choose_bm_space(dev_sectors)),
        ),
        Metadata::V090 => None,
    }
}

/// Remove superblock magic of other metadata versions so later probes are unambiguous.
fn wipe_foreign(
    dev: &dyn BlockDev,
    ours: &Super,
    p: &Place,
    size: u64,
    assume_clean: bool,
) -> Result<()> {
    let ds = dev.size_bytes() / 512;
    let mut locs: Vec<u64> = Vec::new();
    for m in [Minor::V0, Minor::V1, Minor::V2] {
        if ours.metadata() != Metadata::V1(m) && ds >= 16 {
            locs.push(m.super_offset(ds));
        }
    }
    if ours.metadata() != Metadata::V090 {
        if let Some(o) = v090::super_offset(ds) {
            locs.push(o);
        }
    }
    let data = p.data_offset..p.data_offset + size;
    for loc in locs {
        if loc + 8 > ds || loc == p.super_offset {
            continue;
        }
        if data.contains(&loc) && assume_clean {
            continue;
        }
        let mut b = vec![0u8; 8];
        dev.read_at(&mut b, loc * 512)
            .map_err(|e| EngineError::io(dev.name(), "checking for old superblocks", e))?;
        if u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == raidkit_format::MD_MAGIC && !is_zero(&b)
        {
            dev.write_at(&[0u8; 4096], loc * 512)
                .map_err(|e| EngineError::io(dev.name(), "wiping an old superblock", e))?;
        }
    }
    Ok(())
}
