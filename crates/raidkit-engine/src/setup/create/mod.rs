//! Create a new array with exactly the on-disk layout mdadm would choose (data offset,
//! superblock placement, bitmap), then make redundancy consistent.
//!
//! * `mod.rs`: the options, the shape checks, opening the members, and [`create`].
//! * [`place`]: where everything goes on each member, the component size, the bitmap.
//! * [`write`]: the superblocks, and writing them with the bitmap and bad-block log.

mod place;
mod write;

use crate::array::Array;
use crate::assemble::{assemble, AssembleOptions};
use crate::dev::BlockDev;
use crate::error::{EngineError, Found, Remedy, Result};
use crate::sb::{probe, Metadata};
use crate::sync::{self, SyncMode};
use crate::util::random_uuid;
use raidkit_format::v1::Minor;
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
    /// Positions in `members` of the write-mostly members (md's `--write-mostly`: read
    /// only when no other copy can serve).
    pub write_mostly: Vec<usize>,
    /// md's write-behind: most writes to write-mostly members outstanding after the
    /// client's write is acknowledged (0: synchronous). RAID1 with a bitmap only.
    pub write_behind: u32,
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
            write_mostly: Vec::new(),
            write_behind: 0,
        }
    }
}

/// Look at an existing device and refuse it unless it is blank (or `force`).
pub(crate) fn check_blank(dev: &dyn BlockDev, force: bool) -> Result<()> {
    if force {
        return Ok(());
    }
    let p = probe(dev)?;
    if let Some((sb, _)) = p.found.first() {
        return Err(EngineError::NotBlank {
            device: dev.name().to_string(),
            found: Found::Superblock {
                metadata: sb.metadata().to_string(),
                uuid: crate::sb::uuid_text(sb.metadata(), &sb.uuid()),
                name: sb.name(),
            },
        });
    }
    let size = dev.size_bytes();
    let probe_len = 64 * 1024u64;
    // The two windows are read, never asked about holes first: a file's hole test
    // (SEEK_DATA) scans from the offset to the next data, which on a blank (sparse or
    // preallocated) file is its whole size — 9 to 100 ms of `manage --add` on a 1 GiB
    // tmpfs spare, where reading 128 KiB takes microseconds.
    for off in [0, size.saturating_sub(probe_len)] {
        let len = probe_len.min(size - off) as usize;
        let mut b = vec![0u8; len];
        dev.read_at(&mut b, off)
            .map_err(|e| EngineError::io(dev.name(), "checking the device is blank", e))?;
        if let Some(pos) = b.iter().position(|&x| x != 0) {
            return Err(EngineError::NotBlank {
                device: dev.name().to_string(),
                found: Found::Data {
                    at: off + pos as u64,
                },
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

/// The shape of the array to create, checked before anything is opened.
struct Shape {
    level: Level,
    raid_disks: usize,
    layout: u32,
    chunk_sectors: u64,
    /// Roles given as `missing`.
    missing: Vec<usize>,
}

/// Create the array and return it running (writable).
pub fn create(opts: &CreateOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<Array> {
    let shape = check_shape(opts)?;
    let devs = open_members(opts)?;
    let dev_sectors: Vec<Option<u64>> = devs
        .iter()
        .map(|d| d.as_ref().map(|d| d.size_bytes() / 512))
        .collect();
    let mut places = place::place_members(opts, &shape, &dev_sectors)?;
    let (size, member_sectors) = place::component_size(opts, &shape, &places)?;
    let geo = Geometry::new(
        shape.level,
        shape.layout,
        shape.chunk_sectors,
        shape.raid_disks,
        size,
        member_sectors,
    )?;
    let bitmap = place::plan_bitmap(opts, &geo, size, &mut places)?;
    let redundant = shape.level.has_redundancy();
    let degraded_parity = shape.level.has_parity() && !shape.missing.is_empty();
    let clean_at_create = opts.assume_clean || !redundant || degraded_parity;
    let uuid = match opts.uuid {
        Some(u) => crate::sb::uuid_user_bytes(opts.metadata, &u),
        None => {
            random_uuid().map_err(|e| EngineError::io("/dev/urandom", "generating a UUID", e))?
        }
    };
    let new = write::NewArray {
        opts,
        shape: &shape,
        size,
        uuid,
        clean_at_create,
        bitmap,
        first_dev_sectors: dev_sectors.iter().flatten().copied().next().unwrap_or(0),
    };
    let sbs = new.superblocks(&places)?;
    new.write_members(&devs, &sbs, &places)?;
    // Assemble what we wrote and make it consistent.
    let present: Vec<Arc<dyn BlockDev>> = devs.into_iter().flatten().collect();
    let arr = assemble(
        present,
        &AssembleOptions {
            writable: true,
            force: false,
            metadata: Some(opts.metadata),
            ..Default::default()
        },
    )?;
    if !opts.assume_clean && redundant {
        sync::run(&arr, SyncMode::Resync, true, progress)?;
        arr.mark_clean()?;
    }
    Ok(arr)
}

/// Check the level, members, chunk and the options that go with them, before anything
/// is opened, so errors are about the shape.
fn check_shape(opts: &CreateOptions) -> Result<Shape> {
    let level = opts.level;
    let n = opts.raid_devices;
    if opts.members.len() != n {
        return Err(EngineError::Request {
            why: format!(
                "the array has {n} member slots but {} member(s) were given; give exactly {n} (`missing` for an empty slot)",
                opts.members.len()
            ),
            remedy: Remedy::MatchMemberCount,
        });
    }
    let missing: Vec<usize> = (0..n)
        .filter(|&i| opts.members[i] == MemberSpec::Missing)
        .collect();
    check_write_mostly(opts, &missing)?;
    let layout = opts.layout.unwrap_or_else(|| names::default_layout(level));
    let chunk_sectors = chunk_sectors(level, opts.chunk_bytes)?;
    if opts.bbl && opts.metadata == Metadata::V090 {
        return Err(EngineError::Request {
            why: "0.90 metadata has no bad-block log".into(),
            remedy: Remedy::BadBlockLogNeeds1x,
        });
    }
    if opts.bitmap && !level.has_redundancy() {
        return Err(EngineError::Invalid(format!(
            "{level} has no redundancy, so a write-intent bitmap is meaningless"
        )));
    }
    let shape = Shape {
        level,
        raid_disks: n,
        layout,
        chunk_sectors,
        missing,
    };
    check_survives_missing(&shape)?;
    Ok(shape)
}

/// Write-mostly members are members given, of a mirrored level, and write-behind fits
/// them (bitmap, limit).
fn check_write_mostly(opts: &CreateOptions, missing: &[usize]) -> Result<()> {
    let (level, n) = (opts.level, opts.raid_devices);
    if let Some(&i) = opts
        .write_mostly
        .iter()
        .find(|&&i| i >= n || missing.contains(&i))
    {
        return Err(EngineError::Invalid(format!(
            "write-mostly member {i} is not a member given (members 0..{n}, missing ones excluded)"
        )));
    }
    if !opts.write_mostly.is_empty() && !level.mirrors() {
        return Err(EngineError::Invalid(format!(
            "write-mostly is for mirrored levels (RAID1, RAID10), not {level}"
        )));
    }
    crate::array::write_behind::check_write_behind(
        opts.write_behind,
        level,
        opts.bitmap,
        !opts.write_mostly.is_empty(),
    )
}

/// The chunk in sectors: none for RAID1 (asking for one is an error) and linear, else the
/// size asked for (default 512 KiB), a non-zero multiple of 512 bytes.
fn chunk_sectors(level: Level, chunk_bytes: Option<u64>) -> Result<u64> {
    match level {
        Level::Raid1 if chunk_bytes.is_some() => Err(EngineError::Request {
            why: "raid1 has no chunk size".into(),
            remedy: Remedy::NoChunk,
        }),
        Level::Raid1 | Level::Linear => Ok(0),
        _ => {
            let c = chunk_bytes.unwrap_or(512 * 1024);
            if !c.is_multiple_of(512) || c == 0 {
                return Err(EngineError::Invalid(format!(
                    "chunk size {c} is not a multiple of 512 bytes"
                )));
            }
            Ok(c / 512)
        }
    }
}

/// The shape (with a dummy size: errors are about the shape) survives its `missing`
/// members.
fn check_survives_missing(shape: &Shape) -> Result<()> {
    let (level, n, missing) = (shape.level, shape.raid_disks, &shape.missing);
    let dummy = shape.chunk_sectors.max(128) * 64;
    let per_member = if matches!(level, Level::Linear | Level::Raid0) {
        n
    } else {
        0
    };
    let geo = Geometry::new(
        level,
        shape.layout,
        shape.chunk_sectors,
        n,
        dummy,
        vec![dummy; per_member],
    )?;
    if missing.len() < n && geo.survives_without(missing) {
        return Ok(());
    }
    let why = match geo.raid10_lost_copies(missing) {
        Some(roles) => format!(
            "every copy of some data would be missing (roles {})",
            roles
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!(
            "{level} can be created with at most {} missing",
            geo.failures_tolerated().min(n - 1)
        ),
    };
    Err(EngineError::Invalid(format!(
        "{} of {n} members are `missing`; {why}",
        missing.len()
    )))
}

/// Open the members (creating missing files, sparse, if asked), refusing any that is not
/// blank unless forced, and any given twice (by identity, before anything is opened).
fn open_members(opts: &CreateOptions) -> Result<Vec<Option<Arc<dyn BlockDev>>>> {
    // Before anything is opened, created or written: every path a device or file of
    // its own (a FIFO would hang the open; a link or a loop device to another member
    // would get two superblocks).
    let mut ids = Vec::new();
    for m in &opts.members {
        if let MemberSpec::Path(p) = m {
            ids.push((
                p.as_path(),
                crate::setup::identity::member_identity(p, false)?,
            ));
        }
    }
    crate::setup::identity::check_distinct(&ids)?;
    let mut devs: Vec<Option<Arc<dyn BlockDev>>> = Vec::with_capacity(opts.members.len());
    for m in &opts.members {
        let MemberSpec::Path(p) = m else {
            devs.push(None);
            continue;
        };
        let name = p.display().to_string();
        let network = crate::dev::nbd::is_nbd_uri(&name);
        let created = if !network && !p.exists() {
            let Some(sz) = opts.create_size else {
                return Err(EngineError::Request {
                    why: format!("{name} does not exist"),
                    remedy: Remedy::GiveMemberSize,
                });
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
        let d = crate::dev::open_member(p, true)
            .map_err(|e| EngineError::io(&name, "opening the member for writing", e))?;
        if !created {
            check_blank(d.as_ref(), opts.force)?;
        }
        devs.push(Some(d));
    }
    Ok(devs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDev;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A device that says every range is a hole (whatever it holds) and counts the
    /// questions.
    struct SaysHole {
        inner: MemDev,
        asked: AtomicUsize,
    }

    impl BlockDev for SaysHole {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn is_hole(&self, _offset: u64, _len: u64) -> bool {
            self.asked.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    /// The blank check reads its two windows (bounded) instead of asking about holes (a
    /// file's SEEK_DATA scans to the next data: a blank file's whole size).
    #[test]
    fn blank_check_reads_the_bytes_and_never_asks_about_holes() {
        for at in [100u64, (4 << 20) - 10] {
            let d = SaysHole {
                inner: MemDev::new("d", 4 << 20),
                asked: AtomicUsize::new(0),
            };
            d.write_at(&[7], at).unwrap();
            match check_blank(&d, false) {
                Err(EngineError::NotBlank {
                    found: Found::Data { at: found },
                    ..
                }) => assert_eq!(found, at),
                other => panic!("data at byte {at}: {other:?}"),
            }
            assert_eq!(d.asked.load(Ordering::Relaxed), 0);
        }
        let blank = SaysHole {
            inner: MemDev::new("b", 4 << 20),
            asked: AtomicUsize::new(0),
        };
        check_blank(&blank, false).unwrap();
        assert_eq!(blank.asked.load(Ordering::Relaxed), 0);
    }
}
