//! Command implementations. Thin: parse words, call the engine, print.

use crate::cli::{
    AssembleArgs, ChecksumsArgs, ChecksumsCmd, Cli, Command, CreateArgs, DemoArgs, DetailArgs,
    ExamineArgs, ExportArgs, ImportArgs, RepairArgs, ScrubArgs,
};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::checksums::Checksums;
use raidkit_engine::create::{create, default_homehost, CreateOptions, MemberSpec};
use raidkit_engine::dev::{BlockDev, FileDev};
use raidkit_engine::sb::{probe, Metadata, Role, Super};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::Array;
use raidkit_engine::EngineError;
use raidkit_format::uuid;
use raidkit_format::MAX_SECTOR;
use raidkit_layout::{names, Geometry, Level};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Dispatch.
pub fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Command::Create(a) => cmd_create(a),
        Command::Examine(a) => cmd_examine(a),
        Command::Detail(a) => cmd_detail(a),
        Command::Export(a) => cmd_export(a),
        Command::Import(a) => cmd_import(a),
        Command::Check(a) => cmd_scrub(a, SyncMode::Check),
        Command::Repair(a) => cmd_repair(a),
        Command::Checksums(ChecksumsCmd::Init(a)) => cmd_checksums_init(a),
        Command::Checksums(ChecksumsCmd::Status(a)) => cmd_checksums_status(a),
        Command::Status(a) => crate::ctl_cmd::cmd_status(a),
        Command::Manage(a) => crate::ctl_cmd::cmd_manage(a),
        Command::Grow(a) => crate::ctl_cmd::cmd_grow(a),
        Command::SyncAction(a) => crate::ctl_cmd::cmd_sync_action(a),
        Command::Monitor(a) => crate::ctl_cmd::cmd_monitor(a),
        Command::Stats(a) => crate::ctl_cmd::cmd_stats(a),
        Command::Demo(a) => cmd_demo(a),
        Command::Serve(a) => crate::serve::cmd_serve(a),
        Command::Mount(a) => crate::mount::cmd_mount(a),
        Command::Advise(a) => crate::advise::run(a),
        Command::Bench(c) => crate::bench_parity::cmd_bench(c),
        Command::Trace(c) => crate::trace::run(c),
        Command::Probe(a) => crate::probe::run(a),
        Command::Completions { shell } => {
            let mut c = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut c, "raidkit", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let c = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(c)
                .render(&mut std::io::stdout())
                .context("writing the man page")?;
            Ok(())
        }
    }
}

fn bar(total: u64, msg: &'static str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    if let Ok(st) = ProgressStyle::with_template(
        "{msg:>9} [{bar:40.cyan/blue}] {percent:>3}% {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        pb.set_style(st.progress_chars("=> "));
    }
    pb.set_message(msg);
    pb
}

fn parse_metadata(s: &str) -> Result<Metadata> {
    Metadata::parse(s)
        .ok_or_else(|| anyhow!("unknown metadata version {s:?}: use 0.90, 1.0, 1.1 or 1.2"))
}

fn asm_opts(a: &AssembleArgs, writable: bool) -> Result<AssembleOptions> {
    Ok(AssembleOptions {
        writable,
        force: a.force,
        metadata: a.metadata.as_deref().map(parse_metadata).transpose()?,
        report_only: false,
    })
}

// ---------------------------------------------------------------- create

fn cmd_create(a: CreateArgs) -> Result<()> {
    let level = Level::parse(&a.level)?;
    let mut members = Vec::new();
    for m in &a.members {
        if m.as_os_str() == "missing" {
            members.push(MemberSpec::Missing);
        } else {
            members.push(MemberSpec::Path(m.clone()));
        }
    }
    let mut o = CreateOptions::new(level, members);
    o.raid_devices = a.raid_devices;
    if let Some(c) = &a.chunk {
        o.chunk_bytes = Some(parse_size(c, 1024).map_err(|e| anyhow!("--chunk: {e}"))?);
    }
    if let Some(l) = &a.layout {
        o.layout = Some(names::parse_layout(level, l)?);
    }
    o.metadata = parse_metadata(&a.metadata)?;
    o.name = a.name.clone();
    o.homehost = match a.homehost.as_deref() {
        Some("none") | Some("") => None,
        Some(h) => Some(h.to_string()),
        None => default_homehost(),
    };
    if let Some(u) = &a.uuid {
        o.uuid = Some(uuid::parse(u).ok_or_else(|| anyhow!("--uuid {u:?} is not a UUID (32 hex digits, e.g. 5ee1c0de:00000000:00000000:00000005)"))?);
    }
    o.bitmap = match a.bitmap.as_str() {
        "internal" => true,
        "none" => false,
        other => bail!("--bitmap {other:?}: use internal or none"),
    };
    if let Some(c) = &a.bitmap_chunk {
        o.bitmap_chunk_bytes =
            Some(parse_size(c, 1024).map_err(|e| anyhow!("--bitmap-chunk: {e}"))?);
    }
    o.assume_clean = a.assume_clean;
    o.bbl = a.bbl;
    if let Some(s) = &a.size {
        o.create_size = Some(parse_size(s, 1024).map_err(|e| anyhow!("--size: {e}"))?);
    }
    o.force = a.force;
    for w in raidkit_tools::disks::create_warnings(level, a.raid_devices, o.layout, &a.members) {
        eprintln!("raidkit: {w}");
    }
    let mut pb: Option<ProgressBar> = None;
    let arr = create(&o, &mut |done, total| {
        let p = pb.get_or_insert_with(|| bar(total * 512, "sync"));
        p.set_position(done * 512);
    })?;
    if let Some(p) = pb {
        p.finish_and_clear();
    }
    if let Some(path) = &a.checksums {
        let mut pb: Option<ProgressBar> = None;
        let cs = Checksums::init(path, &arr, &mut |d, t| {
            pb.get_or_insert_with(|| bar(t, "checksums"))
                .set_position(d);
        })?;
        if let Some(p) = pb {
            p.finish_and_clear();
        }
        arr.attach_checksums(Arc::new(cs))?;
    }
    let out = detail_json(&arr);
    arr.stop()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "raidkit: created {} array {} ({}), {} ({} bytes), {} member(s){}",
            level,
            out["uuid"].as_str().unwrap_or(""),
            out["name"].as_str().unwrap_or(""),
            human(out["array_bytes"].as_u64().unwrap_or(0)),
            out["array_bytes"].as_u64().unwrap_or(0),
            a.members.len(),
            if a.assume_clean {
                ", not synced (--assume-clean)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- examine

fn level_text(l: i32) -> String {
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

fn cmd_examine(a: ExamineArgs) -> Result<()> {
    let mut found: Vec<Examined> = Vec::new();
    let mut errors: Vec<(PathBuf, String)> = Vec::new();
    for p in &a.members {
        match examine_one(p) {
            Ok(mut v) => found.append(&mut v),
            Err(e) => errors.push((p.clone(), format!("{e:#}"))),
        }
    }
    // Array size: for linear/RAID0 it needs every member's data size.
    let array_bytes = |e: &Examined| -> Option<u64> {
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
    };
    if a.json {
        let mut list = Vec::new();
        for e in &found {
            list.push(examine_json(e, array_bytes(e)));
        }
        for (p, err) in &errors {
            list.push(json!({"device": p.display().to_string(), "error": err}));
        }
        println!("{}", serde_json::to_string_pretty(&Value::Array(list))?);
    } else {
        for e in &found {
            print!("{}", examine_text(e, array_bytes(e)));
        }
        for (p, err) in &errors {
            println!("{}:\n    {err}\n", p.display());
        }
    }
    if !errors.is_empty() {
        bail!(
            "{} of {} device(s) have no usable MD superblock",
            errors.len(),
            a.members.len()
        );
    }
    Ok(())
}

fn examine_one(p: &Path) -> Result<Vec<Examined>> {
    let d = FileDev::open(p, false).with_context(|| format!("opening {}", p.display()))?;
    let pr = probe(&d)?;
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

fn checksum_of(sb: &Super) -> u32 {
    match sb {
        Super::V1(s) => s
            .encode()
            .get(216..220)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0),
        Super::V090(s) => s
            .encode()
            .get(152..156)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0),
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
    if let Super::V1(s) = sb {
        v["device_uuid"] = json!(uuid::format(&s.device_uuid));
    }
    v
}

fn fmt_time(t: u64) -> String {
    raidkit_tools::human::timestamp(t)
}

fn examine_text(e: &Examined, array_bytes: Option<u64>) -> String {
    let sb = &e.sb;
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:>16} : {v}\n"));
    let head = format!("{}:\n", e.path.display());
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
    line(
        "Avail Dev Size",
        format!(
            "{} sectors ({})",
            sb.data_size(e.dev_sectors),
            human(sb.data_size(e.dev_sectors) * 512)
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
                human(sb.size_sectors() * 512)
            ),
        );
    }
    line("Data Offset", format!("{} sectors", sb.data_offset()));
    line(
        "Super Offset",
        format!("{} sectors", sb.super_offset(e.dev_sectors)),
    );
    if let Some(r) = sb.recovery_offset() {
        line("Recovery Offset", format!("{r} sectors"));
    }
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
    if let Some(l) = Level::from_md(sb.level()) {
        if l.has_parity() || l == Level::Raid10 || l == Level::Raid0 {
            line("Layout", layout_text(sb));
        }
        if l.uses_chunk() {
            line("Chunk Size", format!("{}K", sb.chunk_sectors() / 2));
        }
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
    format!("{head}{s}\n")
}

// ---------------------------------------------------------------- detail

fn detail_json(arr: &Array) -> Value {
    let g = arr.geometry();
    let missing = arr.missing_roles();
    let mut state = Vec::new();
    state.push(if arr.needs_resync() { "dirty" } else { "clean" });
    if arr.is_degraded() {
        state.push("degraded");
    }
    json!({
        "uuid": arr.uuid_text(),
        "name": arr.name(),
        "metadata": arr.metadata().as_str(),
        "level": g.level.to_string(),
        "layout": names::layout_name(g.level, g.layout),
        "chunk_bytes": g.chunk_sectors * 512,
        "raid_disks": g.raid_disks,
        "array_bytes": arr.size_bytes(),
        "used_dev_bytes": g.dev_sectors * 512,
        "events": arr.events(),
        "state": state.join(", "),
        "degraded": arr.is_degraded(),
        "members": arr.members(),
        "missing_roles": missing,
        "bad_blocks": arr.bad_blocks(),
        "lost_ranges": arr.lost_ranges(),
    })
}

fn cmd_detail(a: DetailArgs) -> Result<()> {
    let mut o = asm_opts(&a.asm, false)?;
    o.report_only = true;
    let arr = assemble_paths(&a.asm.members, &o)?;
    let mut v = detail_json(&arr);
    let (ms, shape) = raidkit_tools::disks::of_array(&arr);
    let domains = raidkit_tools::disks::check_members(&ms, Some(&shape));
    let smart = raidkit_tools::disks::smart::check_smart(&ms);
    v["disk_warnings"] = json!(domains);
    v["smart"] = json!(smart);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let g = arr.geometry();
    println!("{:>16} : {}", "UUID", v["uuid"].as_str().unwrap_or(""));
    println!("{:>16} : {}", "Name", arr.name());
    println!("{:>16} : {}", "Version", arr.metadata());
    println!("{:>16} : {}", "Raid Level", g.level);
    println!(
        "{:>16} : {} ({} bytes)",
        "Array Size",
        human(arr.size_bytes()),
        arr.size_bytes()
    );
    if g.level.has_parity() || g.level == Level::Raid10 || g.level == Level::Raid0 {
        println!(
            "{:>16} : {}",
            "Layout",
            names::layout_name(g.level, g.layout)
        );
    }
    if g.level.uses_chunk() {
        println!("{:>16} : {}K", "Chunk Size", g.chunk_sectors / 2);
    }
    println!("{:>16} : {}", "Raid Devices", g.raid_disks);
    println!("{:>16} : {}", "State", v["state"].as_str().unwrap_or(""));
    println!("{:>16} : {}", "Events", arr.events());
    println!();
    println!("    Role  State        Device");
    let members = arr.members();
    for r in 0..g.raid_disks {
        match members.iter().find(|m| m.role == Some(r)) {
            Some(m) => println!("    {r:>4}  {:<12} {}", m.state, m.device),
            None => println!("    {r:>4}  {:<12} -", "missing"),
        }
    }
    for m in members.iter().filter(|m| m.role.is_none()) {
        println!("       -  {:<12} {}", m.state, m.device);
    }
    let lines = raidkit_tools::disks::report_lines(&domains, &smart);
    if !lines.is_empty() {
        println!("\n    Disks:");
        for l in lines {
            println!("    {l}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- export / import

fn io_chunk(arr: &Array) -> usize {
    let g = arr.geometry();
    let stripe = match g.level {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => g.chunk_sectors * g.data_disks() as u64 * 512,
        Level::Raid0 | Level::Raid10 => g.chunk_sectors * g.raid_disks as u64 * 512,
        _ => 1 << 20,
    }
    .max(512);
    let target = 8u64 << 20;
    (target.div_ceil(stripe) * stripe) as usize
}

fn cmd_export(a: ExportArgs) -> Result<()> {
    let arr = assemble_paths(&a.asm.members, &asm_opts(&a.asm, false)?)?;
    let mut out: Box<dyn Write> = if a.output == "-" {
        Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::io::stdout().lock(),
        ))
    } else {
        Box::new(
            std::fs::File::create(&a.output).with_context(|| format!("creating {}", a.output))?,
        )
    };
    let size = arr.size_bytes();
    let step = io_chunk(&arr);
    let mut buf = vec![0u8; step];
    let pb = bar(size, "export");
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(step as u64) as usize;
        arr.read(off, &mut buf[..n])?;
        out.write_all(&buf[..n])
            .with_context(|| format!("writing {}", a.output))?;
        off += n as u64;
        pb.set_position(off);
    }
    out.flush()
        .with_context(|| format!("writing {}", a.output))?;
    pb.finish_and_clear();
    if a.output != "-" {
        eprintln!(
            "raidkit: exported {} ({} bytes){} to {}",
            human(size),
            size,
            if arr.is_degraded() {
                format!(", degraded: role(s) {:?} missing", arr.missing_roles())
            } else {
                String::new()
            },
            a.output
        );
    }
    Ok(())
}

fn cmd_import(a: ImportArgs) -> Result<()> {
    let offset = parse_size(&a.offset, 1).map_err(|e| anyhow!("--offset: {e}"))?;
    let mut input: Box<dyn Read> = if a.input == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(&a.input).with_context(|| format!("opening {}", a.input))?)
    };
    let in_len = if a.input == "-" {
        None
    } else {
        std::fs::metadata(&a.input)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    };
    let arr = assemble_paths(&a.asm.members, &asm_opts(&a.asm, true)?)?;
    if let Some(p) = &a.checksums {
        attach_sidecar(&arr, p)?;
    }
    let size = arr.size_bytes();
    if offset > size || in_len.is_some_and(|l| offset + l > size) {
        bail!(
            "the data ({} bytes at offset {offset}) does not fit in the array ({size} bytes); nothing was written",
            in_len.unwrap_or(0)
        );
    }
    let res = import_into(&arr, &mut input, offset, in_len, &a.input);
    let clean = arr.mark_clean();
    let n = res?;
    clean?;
    eprintln!(
        "raidkit: imported {} ({n} bytes) at offset {offset}; array is clean",
        human(n)
    );
    Ok(())
}

fn import_into(
    arr: &Array,
    input: &mut dyn Read,
    offset: u64,
    in_len: Option<u64>,
    name: &str,
) -> Result<u64> {
    if arr.needs_resync() {
        eprintln!("raidkit: the array was not stopped cleanly; resyncing redundancy first");
        let mut pb: Option<ProgressBar> = None;
        sync::run(arr, SyncMode::Resync, false, &mut |d, t| {
            pb.get_or_insert_with(|| bar(t * 512, "resync"))
                .set_position(d * 512);
        })?;
    }
    let size = arr.size_bytes();
    let step = io_chunk(arr);
    let mut buf = vec![0u8; step];
    let pb = bar(in_len.unwrap_or(size - offset), "import");
    let mut off = offset;
    loop {
        // Fill the buffer completely unless at EOF, so writes stay stripe-aligned.
        let mut got = 0;
        while got < step {
            let r = input
                .read(&mut buf[got..])
                .with_context(|| format!("reading {name}"))?;
            if r == 0 {
                break;
            }
            got += r;
        }
        if got == 0 {
            break;
        }
        if off + got as u64 > size {
            bail!(
                "the input is larger than the array ({size} bytes from offset {offset}); the first {} bytes were written",
                off - offset
            );
        }
        arr.write(off, &buf[..got])?;
        off += got as u64;
        pb.set_position(off - offset);
        if got < step {
            break;
        }
    }
    arr.flush()?;
    pb.finish_and_clear();
    Ok(off - offset)
}

// ---------------------------------------------------------------- check / repair

fn cmd_repair(a: RepairArgs) -> Result<()> {
    let Some(what) = &a.update else {
        return cmd_scrub(a.scrub, SyncMode::Repair);
    };
    if a.scrub.from.is_some() || a.scrub.to.is_some() || a.scrub.checksums.is_some() {
        bail!("--update {what} works on the whole array and does not use --from, --to or --checksums; drop them");
    }
    // The engine code of `manage --update no-bbl`, on an array assembled here.
    let arr = assemble_paths(&a.scrub.asm.members, &asm_opts(&a.scrub.asm, true)?)?;
    let r = arr.remove_bbl(a.zero_lost)?;
    arr.stop()?;
    if a.scrub.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "repair --update {what}: {} bad-block range(s) rewritten from redundancy; the bad-block log is removed from every member",
            r.repaired.len()
        );
        for (o, l) in &r.lost {
            println!(
                "  array bytes {o}..{} had no valid data and now read as zeros: restore them from a backup",
                o + l
            );
        }
    }
    Ok(())
}

/// Open the sidecar at `path` for `arr` and attach it. A stale sidecar (the array was run
/// without it) is reported loudly and ignored (Ok(false)); any other problem is an error.
pub(crate) fn attach_sidecar(arr: &Array, path: &Path) -> Result<bool> {
    match Checksums::open(path, arr) {
        Ok(cs) => {
            arr.attach_checksums(Arc::new(cs))?;
            Ok(true)
        }
        Err(e @ EngineError::Sidecar { stale: true, .. }) => {
            eprintln!("raidkit: WARNING: {e}");
            eprintln!("raidkit: WARNING: continuing without checksums: 2-way mirror and RAID5 mismatches will be undecided");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn parse_offset(s: &Option<String>, what: &str) -> Result<Option<u64>> {
    s.as_deref()
        .map(|t| parse_size(t, 1).map_err(|e| anyhow!("{what}: {e}")))
        .transpose()
}

fn cmd_scrub(a: ScrubArgs, mode: SyncMode) -> Result<()> {
    let writable = mode == SyncMode::Repair;
    let arr = assemble_paths(&a.asm.members, &asm_opts(&a.asm, writable)?)?;
    let with_sidecar = match &a.checksums {
        Some(p) => attach_sidecar(&arr, p)?,
        None => false,
    };
    let from = parse_offset(&a.from, "--from")?;
    let to = parse_offset(&a.to, "--to")?;
    let size = arr.size_bytes();
    let window = if from.is_some() || to.is_some() {
        let (f, t) = (from.unwrap_or(0), to.unwrap_or(size).min(size));
        if f >= t {
            bail!("empty window: --from {f} must be below --to {t} (the array has {size} bytes)");
        }
        Some(sync::window_for_bytes(&arr, f, t))
    } else {
        None
    };
    let mut pb: Option<ProgressBar> = None;
    let name = if writable { "repair" } else { "check" };
    let opts = sync::SyncOptions {
        full: true,
        window,
        ..Default::default()
    };
    let rep = sync::run_opts(&arr, mode, &opts, &mut |d, t| {
        pb.get_or_insert_with(|| bar(t * 512, if writable { "repair" } else { "check" }))
            .set_position(d * 512);
    });
    if let Some(p) = pb {
        p.finish_and_clear();
    }
    let rep = rep?;
    if writable {
        arr.mark_clean()?;
    }
    let mismatch_bytes: u64 = rep.mismatches.iter().map(|m| m.1).sum();
    if a.json {
        let v = json!({
            "uuid": arr.uuid_text(),
            "action": name,
            "covered": {"offset": rep.covered.0, "end": rep.covered.1},
            "checksums": with_sidecar,
            "mismatch_ranges": rep.mismatches.iter().map(|(o, l)| json!({"offset": o, "len": l})).collect::<Vec<_>>(),
            "mismatch_bytes": mismatch_bytes,
            "mismatch_sectors": mismatch_bytes / 512,
            "verdicts": rep.verdicts,
            "sectors_checked": rep.sectors_done,
            "sectors_skipped_holes": rep.sectors_skipped_holes,
            "sectors_rewritten": rep.sectors_written,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{name} of array bytes {}..{}{}: {} mismatched range(s), {} bytes; {} sectors rewritten",
            rep.covered.0,
            rep.covered.1,
            if with_sidecar { " (with checksums)" } else { "" },
            rep.mismatches.len(),
            mismatch_bytes,
            rep.sectors_written
        );
        for (o, l) in &rep.mismatches {
            println!("  array bytes {o}..{} ({})", o + l, human(*l));
        }
        for v in &rep.verdicts {
            let place = if v.stripe > 0 || arr.geometry().level.has_parity() {
                format!(
                    "stripe {} (array bytes {}..{})",
                    v.stripe,
                    v.offset,
                    v.offset + v.len
                )
            } else {
                format!("array bytes {}..{}", v.offset, v.offset + v.len)
            };
            println!(
                "  {place}: {} [{}] — {}{}",
                match (&v.role, &v.device) {
                    (Some(r), Some(d)) => format!("role {r} ({d}) is wrong"),
                    (Some(r), None) => format!("role {r} is wrong"),
                    _ => "undecided".into(),
                },
                v.decided_by,
                v.what,
                if v.repaired { "; rewritten" } else { "" }
            );
        }
    }
    if !rep.mismatches.is_empty() && mode == SyncMode::Check {
        bail!(
            "{} mismatched range(s) found; run `raidkit repair` to fix them",
            rep.mismatches.len()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- checksums

fn cmd_checksums_init(a: ChecksumsArgs) -> Result<()> {
    let arr = assemble_paths(&a.asm.members, &asm_opts(&a.asm, false)?)?;
    if arr.needs_resync() {
        bail!("the array was not stopped cleanly, so its redundancy may disagree; run `raidkit repair` (or serve it until it is clean) first, then `checksums init`");
    }
    let mut pb: Option<ProgressBar> = None;
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |d, t| {
        pb.get_or_insert_with(|| bar(t * 512, "check"))
            .set_position(d * 512);
    });
    if let Some(p) = pb.take() {
        p.finish_and_clear();
    }
    let rep = rep?;
    if !rep.mismatches.is_empty() {
        bail!(
            "the check found {} mismatched range(s) (first at array byte {}): checksums computed now could record wrong data as right; run `raidkit repair` first",
            rep.mismatches.len(),
            rep.mismatches[0].0
        );
    }
    let cs = Checksums::init(&a.checksums, &arr, &mut |d, t| {
        pb.get_or_insert_with(|| bar(t, "checksums"))
            .set_position(d);
    })?;
    if let Some(p) = pb {
        p.finish_and_clear();
    }
    let info = cs.info();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        println!(
            "raidkit: checksums of {} blocks ({}) written to {} (array {}, event count {})",
            info.blocks,
            human(arr.size_bytes()),
            info.path,
            arr.uuid_text(),
            info.events
        );
    }
    Ok(())
}

fn cmd_checksums_status(a: ChecksumsArgs) -> Result<()> {
    let arr = assemble_paths(&a.asm.members, &asm_opts(&a.asm, false)?)?;
    let r = Checksums::open(&a.checksums, &arr);
    let (usable, info, why) = match r {
        Ok(cs) => (true, Some(cs.info()), None),
        Err(e) => (false, None, Some(e.to_string())),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"usable": usable, "sidecar": info, "problem": why})
            )?
        );
    } else if let Some(i) = &info {
        println!(
            "{}: usable; {} blocks, array event count {}; {} suspect region(s){}",
            i.path,
            i.blocks,
            i.events,
            i.suspect.len(),
            if i.suspect.is_empty() {
                String::new()
            } else {
                format!(
                    " (written during an unclean stop, not used for verdicts until `checksums init`): {}",
                    i.suspect
                        .iter()
                        .map(|(o, l)| format!("{o}..{}", o + l))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    if let Some(w) = why {
        bail!("{w}");
    }
    Ok(())
}

// ---------------------------------------------------------------- demo

fn cmd_demo(a: DemoArgs) -> Result<()> {
    let size = parse_size(&a.size, 1024).map_err(|e| anyhow!("--size: {e}"))?;
    let members: Vec<PathBuf> = (0..4).map(|i| a.dir.join(format!("disk{i}.img"))).collect();
    let reuse = members.iter().all(|p| p.exists());
    if reuse {
        println!("raidkit: reusing the demo array in {}", a.dir.display());
    } else {
        if a.dir.exists()
            && std::fs::read_dir(&a.dir)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true)
        {
            bail!(
                "{} exists and holds other files; remove it or pass --dir DIR",
                a.dir.display()
            );
        }
        std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
        demo_build(&members, size, &a.size)?;
    }
    if a.no_serve {
        return Ok(());
    }
    println!();
    println!(
        "$ raidkit serve --socket {} --export demo {}",
        a.dir.join("demo.sock").display(),
        members
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    crate::serve::cmd_serve(crate::serve::ServeArgs {
        socket: Some(a.dir.join("demo.sock")),
        listen: None,
        export: Some("demo".into()),
        read_only: false,
        tls_cert: None,
        tls_key: None,
        tls_psk: None,
        tls_required: false,
        config: None,
        force: false,
        workers: 4,
        stripe_cache_max: None,
        stripe_cache: None,
        checksums: None,
        members,
    })
}

fn demo_build(members: &[PathBuf], size: u64, size_text: &str) -> Result<()> {
    println!(
        "$ raidkit create --level 6 --raid-devices 4 --chunk 64K --size {size_text} {}",
        members
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut o = CreateOptions::new(
        Level::Raid6,
        members.iter().cloned().map(MemberSpec::Path).collect(),
    );
    o.chunk_bytes = Some(64 * 1024);
    o.create_size = Some(size);
    o.name = "demo".into();
    o.homehost = default_homehost();
    let arr = create(&o, &mut |_, _| {})?;
    let total = arr.size_bytes();
    println!("created raid6 {} ({})", arr.uuid_text(), human(total));
    // Fill the array with a deterministic pattern, then read it back through every
    // degraded combination of two missing members.
    let mut data = vec![0u8; total as usize];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for w in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
    arr.write(0, &data)?;
    arr.stop()?;
    println!("wrote {} of pseudo-random data", human(total));
    let mut checked = 0;
    for a1 in 0..4 {
        for b1 in a1 + 1..4 {
            let sub: Vec<PathBuf> = members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != a1 && *i != b1)
                .map(|(_, p)| p.clone())
                .collect();
            let arr = assemble_paths(&sub, &AssembleOptions::default())?;
            let mut back = vec![0u8; total as usize];
            arr.read(0, &mut back)?;
            if back != data {
                bail!("read-back without members {a1} and {b1} differs: this is a bug, please report it");
            }
            checked += 1;
        }
    }
    println!("read back identical with every pair of members missing ({checked} combinations)");
    let arr = assemble_paths(members, &AssembleOptions::default())?;
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})?;
    println!("check: {} mismatches", rep.mismatches.len());
    Ok(())
}
