//! `raidkit examine`: every superblock found on each device, like `mdadm --examine`.

use crate::units::{human, human_sectors, offset_sectors};
use anyhow::{bail, Context, Result};
use clap::Args;
use raidkit_engine::sb::{probe, Role, Super};
use raidkit_format::v090::SuperblockV090;
use raidkit_format::v1::SuperblockV1;
use raidkit_format::{uuid, MAX_SECTOR};
use raidkit_layout::{names, Geometry, Level};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// `examine`.
#[derive(Args, Debug)]
pub struct ExamineArgs {
    /// JSON output: a list with one object per member.
    #[arg(long)]
    pub json: bool,
    /// Also show the record of this reshape backup file (mdadm's `md_backup_data-1`):
    /// which array it belongs to and which array sectors it holds.
    #[arg(long, value_name = "FILE")]
    pub backup_file: Option<PathBuf>,
    /// Show the write-intent bitmap instead (like `mdadm -X`): chunk, events, the dirty
    /// bits per region, and what a resync or a re-add would copy.
    #[arg(long, short = 'X')]
    pub bitmap: bool,
    /// Devices or files.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
    #[command(flatten)]
    pub tls: crate::online::MemberTlsArgs,
}

/// A level number as its name (`raid5`), or `level N` for one raidkit does not know.
pub fn level_text(l: i32) -> String {
    Level::from_md(l)
        .map(|l| l.to_string())
        .unwrap_or_else(|| format!("level {l}"))
}
fn layout_text(sb: &Super) -> String {
    match Level::from_md(sb.level()) {
        Some(l) => names::layout_name(l, sb.layout()),
        None => format!("{}", sb.layout()),
    }
}

fn role_json(r: Role) -> Value {
    match r {
        Role::Active(n) => json!(n),
        Role::Spare => json!("spare"),
        Role::Faulty => json!("faulty"),
        Role::Journal => json!("journal"),
    }
}

fn geometry_of(sb: &Super, member_sectors: Vec<u64>) -> Option<Geometry> {
    let level = Level::from_md(sb.level())?;
    Geometry::new(
        level,
        sb.layout(),
        sb.chunk_sectors(),
        sb.raid_disks(),
        sb.size_sectors(),
        member_sectors,
    )
    .ok()
}

struct Examined {
    path: PathBuf,
    dev_sectors: u64,
    sb: Super,
    ok: bool,
}

/// Run `examine`.
pub fn run(a: ExamineArgs) -> Result<()> {
    if a.bitmap {
        return super::bitmap::run(&a.members, a.json);
    }
    let mut found: Vec<Examined> = Vec::new();
    let mut errors: Vec<(PathBuf, String)> = Vec::new();
    for p in &a.members {
        match examine_one(p) {
            Ok(mut v) => found.append(&mut v),
            Err(e) => errors.push((p.clone(), crate::out::error_text(&e))),
        }
    }
    let sizes: Vec<Option<u64>> = found.iter().map(|e| array_bytes(e, &found)).collect();
    if a.json {
        let mut list = Vec::new();
        for (e, size) in found.iter().zip(&sizes) {
            list.push(examine_json(e, *size));
        }
        for (p, err) in &errors {
            list.push(json!({"device": p.display().to_string(), "error": err}));
        }
        if let Some(b) = &a.backup_file {
            list.push(backup_json(b)?);
        }
        outln!("{}", serde_json::to_string_pretty(&Value::Array(list))?);
    } else {
        for (e, size) in found.iter().zip(&sizes) {
            out!("{}", examine_text(e, *size));
        }
        for (p, err) in &errors {
            outln!("{}:\n    {err}\n", p.display());
        }
        if let Some(b) = &a.backup_file {
            out!("{}", backup_text(b)?);
        }
    }
    if !errors.is_empty() {
        bail!(
            "{} of {} device(s) have no usable MD superblock or could not be read (each is said above)",
            errors.len(),
            a.members.len()
        );
    }
    Ok(())
}

/// The array size a member's superblock implies; linear and RAID0 need every member's
/// data size, so those come from the other examined members of the same array.
fn array_bytes(e: &Examined, found: &[Examined]) -> Option<u64> {
    let level = Level::from_md(e.sb.level())?;
    let ms = if matches!(level, Level::Linear | Level::Raid0) {
        let mut v = vec![None; e.sb.raid_disks()];
        for o in found.iter().filter(|o| o.sb.uuid() == e.sb.uuid()) {
            if let Role::Active(r) = o.sb.own_role() {
                if let Some(slot) = v.get_mut(r) {
                    *slot = Some(o.sb.data_size(o.dev_sectors));
                }
            }
        }
        v.into_iter().collect::<Option<Vec<u64>>>()?
    } else {
        Vec::new()
    };
    geometry_of(&e.sb, ms).map(|g| g.array_sectors() * 512)
}

fn examine_one(p: &Path) -> Result<Vec<Examined>> {
    super::check_member(p)?;
    let d = raidkit_engine::dev::open_member(p, false)
        .with_context(|| format!("opening {}", p.display()))?;
    let pr = probe(d.as_ref())?;
    if pr.found.is_empty() {
        if let Some((what, e)) = pr.broken.first() {
            bail!("{what} present but unreadable: {e}");
        }
        bail!("no MD superblock (looked for 1.2 at sector 8, 1.1 at 0, 1.0 and 0.90 at the end)");
    }
    Ok(pr
        .found
        .into_iter()
        .map(|(sb, ok)| Examined {
            path: p.to_path_buf(),
            dev_sectors: d.size_bytes() / 512,
            sb,
            ok,
        })
        .collect())
}

fn array_state(sb: &Super) -> String {
    let n = sb.raid_disks();
    let mut counts = vec![0u32; n];
    match sb {
        Super::V1(s) => {
            for &r in &s.dev_roles {
                if (r as usize) < n {
                    counts[r as usize] += 1;
                }
            }
        }
        Super::V090(s) => {
            for i in 0..s.disks.len() {
                if let Role::Active(r) = sb.role_of(i) {
                    if r < n {
                        counts[r] += 1;
                    }
                }
            }
        }
    }
    counts
        .iter()
        .map(|&c| match c {
            0 => '.',
            1 => 'A',
            2 => 'R',
            _ => '?',
        })
        .collect()
}

/// The superblock's checksum as written (computed by the format crate over its encoding).
fn checksum_of(sb: &Super) -> u32 {
    match sb {
        Super::V1(s) => SuperblockV1::checksum(&s.encode()).unwrap_or(0),
        Super::V090(s) => SuperblockV090::checksum(&s.encode()).unwrap_or(0),
    }
}

fn examine_json(e: &Examined, array_bytes: Option<u64>) -> Value {
    let sb = &e.sb;
    let mut v = json!({
        "device": e.path.display().to_string(),
        "metadata": sb.metadata().as_str(),
        "feature_map": sb.feature_map(),
        "uuid": raidkit_engine::sb::uuid_text(sb.metadata(), &sb.uuid()),
        "name": sb.name(),
        "ctime": sb.ctime(),
        "utime": sb.utime(),
        "level": level_text(sb.level()),
        "layout": layout_text(sb),
        "layout_value": sb.layout(),
        "chunk_bytes": sb.chunk_sectors() * 512,
        "raid_disks": sb.raid_disks(),
        "size_sectors": sb.size_sectors(),
        "role": role_json(sb.own_role()),
        "dev_number": sb.dev_number(),
        "events": sb.events(),
        "data_offset": sb.data_offset(),
        "data_size": sb.data_size(e.dev_sectors),
        "super_offset": sb.super_offset(e.dev_sectors),
        "state": if sb.resync_offset() == MAX_SECTOR { "clean" } else { "active" },
        "resync_offset": if sb.resync_offset() == MAX_SECTOR { Value::Null } else { json!(sb.resync_offset()) },
        "recovery_offset": sb.recovery_offset(),
        "bitmap_sector": sb.bitmap_sector(e.dev_sectors),
        "bad_block_log": sb.bblog().map(|(s, n, sh)| json!({"sector": s, "sectors": n, "shift": sh})),
        "array_state": array_state(sb),
        "checksum": format!("{:08x}", checksum_of(sb)),
        "checksum_ok": e.ok,
        "array_bytes": array_bytes,
    });
    // The same numbers under names that say their unit (the project's convention); the
    // unitless names above stay for the scripts and tests that read them.
    for key in [
        "data_offset",
        "data_size",
        "super_offset",
        "resync_offset",
        "recovery_offset",
    ] {
        v[format!("{key}_sectors")] = v[key].clone();
    }
    if let Super::V1(s) = sb {
        v["device_uuid"] = json!(uuid::format(&s.device_uuid));
    }
    v["write_mostly"] = json!(sb.write_mostly());
    v["reshape"] = reshape_json(sb);
    v
}

/// The level a superblock's reshape goes to, and the layout name in it.
fn new_shape_text(r: &raidkit_format::reshape::ReshapeInfo) -> (String, String) {
    let layout = match Level::from_md(r.new_level) {
        Some(l) => names::layout_name(l, r.new_layout),
        None => r.new_layout.to_string(),
    };
    (level_text(r.new_level), layout)
}

/// The reshape recorded in a superblock, for `--json` (null when none is in progress).
fn reshape_json(sb: &Super) -> Value {
    let Some(r) = sb.reshape() else {
        return Value::Null;
    };
    let (level, layout) = new_shape_text(&r);
    let new_offset = r
        .new_offset
        .and_then(|o| offset_sectors(sb.data_offset(), o));
    json!({
        "position_sectors": r.position,
        "delta_devices": r.delta_disks,
        "old_raid_disks": sb.raid_disks() as i64 - i64::from(r.delta_disks),
        "new_level": level,
        "new_layout": layout,
        "new_layout_value": r.new_layout,
        "new_chunk_bytes": r.new_chunk_sectors * 512,
        "direction": if r.backwards { "backwards" } else { "forwards" },
        "new_offset": new_offset,
        "new_offset_sectors": new_offset,
    })
}

/// mdadm's reshape lines: `Reshape pos'n` (KiB of the array, as mdadm prints it), then
/// `Delta Devices`, `New Level`, `New Layout` and `New Chunksize` where they change.
fn reshape_lines(sb: &Super, line: &mut dyn FnMut(&str, String)) {
    let Some(r) = sb.reshape() else { return };
    line(
        "Reshape pos'n",
        format!("{} ({})", r.position / 2, human_sectors(r.position)),
    );
    if r.delta_disks != 0 {
        let n = sb.raid_disks() as i64;
        line(
            "Delta Devices",
            format!("{} ({}->{n})", r.delta_disks, n - i64::from(r.delta_disks)),
        );
    }
    let (level, layout) = new_shape_text(&r);
    if r.new_level != sb.level() {
        line("New Level", level);
    }
    if r.new_layout != sb.layout() {
        line("New Layout", layout);
    }
    if r.new_chunk_sectors != sb.chunk_sectors() {
        line("New Chunksize", format!("{}K", r.new_chunk_sectors / 2));
    }
    if r.backwards && r.delta_disks == 0 {
        line("Direction", "backwards".into());
    }
}

fn fmt_time(t: u64) -> String {
    raidkit_tools::human::timestamp(t)
}

fn examine_text(e: &Examined, array_bytes: Option<u64>) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:>16} : {v}\n"));
    identity_lines(&e.sb, &mut line);
    size_lines(e, array_bytes, &mut line);
    state_lines(e, &mut line);
    shape_lines(&e.sb, &mut line);
    format!("{}:\n{s}\n", e.path.display())
}

/// What the array is: magic, version, features, UUID, name, creation, level, devices.
fn identity_lines(sb: &Super, line: &mut dyn FnMut(&str, String)) {
    line("Magic", "a92b4efc".into());
    line("Version", sb.metadata().as_str().into());
    line("Feature Map", format!("{:#x}", sb.feature_map()));
    line(
        "Array UUID",
        raidkit_engine::sb::uuid_text(sb.metadata(), &sb.uuid()),
    );
    if !sb.name().is_empty() {
        line("Name", sb.name());
    }
    line("Creation Time", fmt_time(sb.ctime()));
    line("Raid Level", level_text(sb.level()));
    line("Raid Devices", sb.raid_disks().to_string());
}

/// Where the data is and how much: device and array sizes, data, new and superblock
/// offsets, recovery offset.
fn size_lines(e: &Examined, array_bytes: Option<u64>, line: &mut dyn FnMut(&str, String)) {
    let sb = &e.sb;
    line(
        "Avail Dev Size",
        format!(
            "{} sectors ({})",
            sb.data_size(e.dev_sectors),
            human_sectors(sb.data_size(e.dev_sectors))
        ),
    );
    if let Some(b) = array_bytes {
        line("Array Size", format!("{} KiB ({})", b / 1024, human(b)));
    }
    if sb.size_sectors() != 0 {
        line(
            "Used Dev Size",
            format!(
                "{} sectors ({})",
                sb.size_sectors(),
                human_sectors(sb.size_sectors())
            ),
        );
    }
    line("Data Offset", format!("{} sectors", sb.data_offset()));
    if let Some(o) = sb.reshape().and_then(|r| r.new_offset) {
        line(
            "New Offset",
            match offset_sectors(sb.data_offset(), o) {
                Some(s) => format!("{s} sectors"),
                None => format!(
                    "out of range (data offset {} sectors + new_offset {o} sectors)",
                    sb.data_offset()
                ),
            },
        );
    }
    line(
        "Super Offset",
        format!("{} sectors", sb.super_offset(e.dev_sectors)),
    );
    if let Some(r) = sb.recovery_offset() {
        line("Recovery Offset", format!("{r} sectors"));
    }
}

/// The array's state on this device: clean or resyncing, device UUID, bitmap, bad-block
/// log, reshape, update time, checksum, events.
fn state_lines(e: &Examined, line: &mut dyn FnMut(&str, String)) {
    let sb = &e.sb;
    line(
        "State",
        if sb.resync_offset() == MAX_SECTOR {
            "clean".into()
        } else {
            format!("active (resync from sector {})", sb.resync_offset())
        },
    );
    if let Super::V1(v) = sb {
        line("Device UUID", uuid::format(&v.device_uuid));
    }
    if let Some(b) = sb.bitmap_sector(e.dev_sectors) {
        line("Internal Bitmap", format!("at sector {b}"));
    }
    if let Some((o, n, _)) = sb.bblog() {
        line(
            "Bad Block Log",
            format!("{} entries available at sector {o}", n * 64),
        );
    }
    reshape_lines(sb, line);
    line("Update Time", fmt_time(sb.utime()));
    line(
        "Checksum",
        format!(
            "{:08x} - {}",
            checksum_of(sb),
            if e.ok { "correct" } else { "WRONG" }
        ),
    );
    line("Events", sb.events().to_string());
}

/// Layout, chunk, flags, this device's role and the array's state letters.
fn shape_lines(sb: &Super, line: &mut dyn FnMut(&str, String)) {
    if let Some(l) = Level::from_md(sb.level()) {
        if l.has_parity() || l == Level::Raid10 || l == Level::Raid0 {
            line("Layout", layout_text(sb));
        }
        if l.uses_chunk() {
            line("Chunk Size", format!("{}K", sb.chunk_sectors() / 2));
        }
    }
    if sb.write_mostly() {
        // mdadm's line for devflags (1.x) and the 0.90 descriptor bit alike.
        line("Flags", "write-mostly".into());
    }
    line(
        "Device Role",
        match sb.own_role() {
            Role::Active(n) => format!("Active device {n}"),
            Role::Spare => "spare".into(),
            Role::Faulty => "faulty".into(),
            Role::Journal => "journal".into(),
        },
    );
    line(
        "Array State",
        format!(
            "{} ('A' == active, '.' == missing, 'R' == replacing)",
            array_state(sb)
        ),
    );
}

/// A backup file's record for `--json`: `{"backup_file": path, "record": null | {...}}`.
fn backup_json(p: &Path) -> Result<Value> {
    let rec = raidkit_engine::jobs::reshape::backup::read_record(p)?;
    Ok(json!({
        "backup_file": p.display().to_string(),
        "record": rec.map(|r| json!({
            "version": r.version,
            "set_uuid": uuid::format(&r.set_uuid),
            "mtime": r.mtime,
            "sections": r.sections().iter().map(|s| json!({
                "array_sector": s.array_sector,
                "sectors": s.sectors,
                "file_sector": s.dev_sector,
            })).collect::<Vec<_>>(),
        })),
    }))
}

/// A backup file's record in mdadm's words.
fn backup_text(p: &Path) -> Result<String> {
    let rec = raidkit_engine::jobs::reshape::backup::read_record(p)?;
    let mut s = format!("{}:\n", p.display());
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:>16} : {v}\n"));
    match rec {
        None => line(
            "Backup File",
            "empty (no critical section saved yet)".into(),
        ),
        Some(r) => {
            line("Backup File", format!("md_backup_data-{}", r.version));
            line("Set UUID", uuid::format(&r.set_uuid));
            line("Update Time", fmt_time(r.mtime));
            for sec in r.sections() {
                line(
                    "Section",
                    format!(
                        "array sectors {}..{} (at sector {} of the file)",
                        sec.array_sector,
                        sec.array_sector + sec.sectors,
                        sec.dev_sector
                    ),
                );
            }
        }
    }
    s.push('\n');
    Ok(s)
}
