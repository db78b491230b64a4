//! mdadm's backup file: where a reshape that moves data in place keeps the critical
//! section (the data the next step overwrites before it is recorded as moved), so that a
//! crash in the middle of it loses nothing. Written exactly as mdadm writes it
//! (`md_backup_data-1`: the record at byte 0, the data from byte 4096, a second copy of
//! the record right after the data), so mdadm and the kernel can continue a reshape
//! raidkit started, and raidkit one mdadm started.

use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::jobs::reshape::finish::record_position;
use raidkit_format::backup::{BackupRecord, Section, BACKUP_DATA_SECTOR, RECORD_BYTES};
use raidkit_format::reshape::ReshapeInfo;
use raidkit_layout::reshape::{Direction, Reshape};
use raidkit_layout::SECTOR;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Largest section raidkit reads back from a backup file (1 GiB; mdadm's are a few MiB).
const MAX_SECTION_SECTORS: u64 = 1 << 21;

/// Backed-up data of one section.
#[derive(Clone, Debug)]
pub struct Saved {
    /// First array sector.
    pub from: u64,
    /// The data (whole sectors).
    pub data: Vec<u8>,
}

fn io(path: &Path, what: &'static str, e: std::io::Error) -> EngineError {
    EngineError::io(&path.display().to_string(), what, e)
}

fn bad_backup(path: &Path, why: String) -> EngineError {
    EngineError::Invalid(format!(
        "{}: {why}; give the backup file this reshape was started with",
        path.display()
    ))
}

/// Create a new, empty backup file for a reshape about to start (refused if the file
/// exists: it may hold another reshape's critical section).
pub fn create(path: &Path) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                EngineError::Invalid(format!(
                    "the backup file {} already exists: give a file that does not exist yet (remove it if it belongs to a reshape that has finished)",
                    path.display()
                ))
            } else {
                io(path, "creating the backup file", e)
            }
        })?;
    // mdadm starts with a zeroed record (no section saved yet).
    f.write_all_at(&[0u8; RECORD_BYTES], 0)
        .and_then(|_| f.sync_all())
        .map_err(|e| io(path, "writing the backup file", e))
}

/// Save array sectors `[from, from + data/512)` (their old-geometry data) as the backup
/// file's one section, durably: the data first, then the record and its copy.
pub fn save(path: &Path, uuid: &[u8; 16], from: u64, data: &[u8]) -> Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io(path, "opening the backup file", e))?;
    let sectors = data.len() as u64 / SECTOR;
    f.write_all_at(data, BACKUP_DATA_SECTOR * SECTOR)
        .and_then(|_| f.sync_data())
        .map_err(|e| io(path, "writing the backup data", e))?;
    let rec = BackupRecord {
        version: 1,
        set_uuid: *uuid,
        mtime: crate::util::now(),
        devstart: BACKUP_DATA_SECTOR,
        arraystart: from,
        length: sectors,
        devstart2: 0,
        arraystart2: 0,
        length2: 0,
    };
    let bytes = rec.encode();
    f.write_all_at(&bytes, 0)
        .and_then(|_| f.write_all_at(&bytes, (BACKUP_DATA_SECTOR + sectors) * SECTOR))
        .and_then(|_| f.sync_all())
        .map_err(|e| io(path, "writing the backup record", e))
}

/// The record of a backup file: the leading copy, else the one after the data. None if
/// the file has no record yet (mdadm pre-fills it with zeros).
fn record(path: &Path, f: &File, len: u64) -> Result<Option<BackupRecord>> {
    let mut b = [0u8; RECORD_BYTES];
    f.read_exact_at(&mut b, 0)
        .map_err(|e| io(path, "reading the backup record", e))?;
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    match BackupRecord::parse(&b) {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            // The copy after the data (mdadm writes both; a crash may tear one).
            let tail = len.saturating_sub(RECORD_BYTES as u64);
            let mut t = [0u8; RECORD_BYTES];
            f.read_exact_at(&mut t, tail)
                .ok()
                .and_then(|_| BackupRecord::parse(&t).ok())
                .map(Some)
                .ok_or_else(|| bad_backup(path, format!("the backup record is damaged ({e})")))
        }
    }
}

/// The record of the backup file at `path` (for `examine`): None while no section has
/// been saved yet.
pub fn read_record(path: &Path) -> Result<Option<BackupRecord>> {
    let f = File::open(path).map_err(|e| io(path, "opening the backup file", e))?;
    let len = f
        .metadata()
        .map_err(|e| io(path, "looking at the backup file", e))?
        .len();
    if len < RECORD_BYTES as u64 {
        return Err(bad_backup(
            path,
            format!("{len} bytes is too short for a backup file"),
        ));
    }
    record(path, &f, len)
}

/// The sections mdadm would still restore at the recorded `position`, read from the
/// backup file at `path` (checked to belong to the array `uuid`, last updated at `utime`;
/// `allow_old` accepts an old record, mdadm's `MDADM_GROW_ALLOW_OLD`). None if there is
/// nothing to restore.
pub fn read_needed(
    path: &Path,
    uuid: &[u8; 16],
    utime: u64,
    plan: &Reshape,
    position: u64,
    allow_old: bool,
) -> Result<Option<Vec<Saved>>> {
    let f = File::open(path).map_err(|e| io(path, "opening the backup file", e))?;
    let len = f
        .metadata()
        .map_err(|e| io(path, "looking at the backup file", e))?
        .len();
    let Some(rec) = record(path, &f, len)? else {
        return Ok(None);
    };
    rec.check_for_array(uuid, utime, allow_old)
        .map_err(|e| bad_backup(path, e.to_string()))?;
    let sections = rec
        .check_within(len / SECTOR)
        .map_err(|e| bad_backup(path, e.to_string()))?;
    let increasing = plan.direction() == Direction::Forwards;
    if !rec.needed(position, increasing) {
        return Ok(None);
    }
    let mut out = Vec::new();
    for Section {
        array_sector,
        sectors,
        dev_sector,
    } in sections
    {
        if sectors > MAX_SECTION_SECTORS {
            return Err(bad_backup(
                path,
                format!("a section of {sectors} sectors is larger than any reshape saves"),
            ));
        }
        let mut data = vec![0u8; (sectors * SECTOR) as usize];
        f.read_exact_at(&mut data, dev_sector * SECTOR)
            .map_err(|e| io(path, "reading the backup data", e))?;
        out.push(Saved {
            from: array_sector,
            data,
        });
    }
    Ok(Some(out))
}

/// mdadm's restore: write each section still ahead of the recorded position through the
/// new geometry, then record the position past it. Returns the position.
pub(crate) fn restore(
    arr: &Array,
    plan: &Reshape,
    info: &ReshapeInfo,
    saved: &[Saved],
) -> Result<u64> {
    let mut position = info.position;
    let new = plan.new_geometry();
    let width = new
        .full_stripe_sectors()
        .filter(|_| new.level.has_parity())
        .unwrap_or(1);
    for s in saved {
        let to = s.from + s.data.len() as u64 / SECTOR;
        let Some(p) = plan
            .restore_position(position, s.from, to)
            .map_err(|e| EngineError::Invalid(format!("cannot restore the backup: {e}")))?
        else {
            continue;
        };
        let aligned = |x: u64| x.is_multiple_of(width) || x == new.array_sectors();
        if !aligned(s.from) || !aligned(to) {
            return Err(EngineError::Invalid(format!(
                "the backup section {}..{to} does not cover whole stripes of the new geometry ({width} sectors): raidkit will not restore it",
                s.from
            )));
        }
        arr.write_serial(s.from, &s.data)?;
        position = p;
    }
    if position != info.position {
        record_position(arr, plan, position)?;
    }
    Ok(position)
}
