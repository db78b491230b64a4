//! `raidkit grow`: reshape an array (mdadm's `--grow`): add or remove devices, change
//! the level, layout or chunk, with a plan first (`--dry-run`). A stopped array is
//! reshaped in the foreground with a progress bar (safe to kill at any moment: the
//! members always record where it stands, for `grow --continue`, `serve` or the kernel);
//! a running array (NAME) reshapes in the background through its control socket, where
//! the reshape can be paused, resumed, slowed and reverted. `--bitmap` adds or removes
//! the write-intent bitmap, as before.

use crate::control::client::{request, socket_for};
use crate::control::protocol::{Request, ReshapeSpec};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use raidkit_engine::dev::BlockDev;
use raidkit_engine::jobs::reshape::{
    self as rs, ReshapeEnd, ReshapeOptions, ReshapePlan, ReshapeRequest, Room,
};
use raidkit_engine::supervisor::Supervisor;
use raidkit_engine::Array;
use raidkit_layout::{names, Level};
use serde_json::{json, Value};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

const GROW_HELP: &str = "\
Examples:
  # plan, then add a fifth disk to a stopped 4-disk RAID6 (foreground, safe to kill)
  truncate -s 64M d4.img                                   # the new disk (a file here)
  raidkit grow d0.img d1.img d2.img d3.img --add d4.img --raid-devices 5 --dry-run
  raidkit grow d0.img d1.img d2.img d3.img --add d4.img --raid-devices 5 --speed-limit 20M
  # after a kill: finish the reshape found on the members (raidkit's, the kernel's, mdadm's)
  raidkit grow --continue d0.img d1.img d2.img d3.img d4.img
  # a served array (raidkit serve --export md0 ...) reshapes in the background
  raidkit grow md0 --speed-limit 20M          # limit it; changeable while it runs
  raidkit grow md0 --chunk 128K
  raidkit grow md0 --pause
  raidkit grow md0 --resume
  raidkit grow md0 --revert                   # back to the old shape, from where it is
  # the write-intent bitmap (once no reshape runs)
  raidkit grow md0 --bitmap internal
";

/// `grow`.
#[derive(Args, Debug)]
#[command(after_help = GROW_HELP)]
pub struct GrowArgs {
    #[command(flatten)]
    pub tls: crate::online::MemberTlsArgs,
    /// New number of active devices (mdadm's --raid-devices).
    #[arg(long, value_name = "N")]
    pub raid_devices: Option<usize>,
    /// Add this device first (repeat for several); the reshape puts it to use.
    #[arg(long, value_name = "NEW")]
    pub add: Vec<PathBuf>,
    /// New RAID level (0, 1, 4, 5, 6, 10, or raid5 ...).
    #[arg(long, value_name = "L")]
    pub level: Option<String>,
    /// New layout (left-symmetric, parity-last, left-symmetric-6, n2 ...).
    #[arg(long, value_name = "NAME")]
    pub layout: Option<String>,
    /// New chunk size (bare number = KiB, as mdadm).
    #[arg(long, value_name = "SIZE")]
    pub chunk: Option<String>,
    /// Confirm the array size a shrink leaves (bare number = KiB); the data past it is
    /// given up, as with mdadm.
    #[arg(long, value_name = "SIZE")]
    pub array_size: Option<String>,
    /// Where critical sections go when the data cannot move to another data offset
    /// (0.90, 1.0, members without room); mdadm's format, so mdadm can continue it too.
    /// Also the backup file of a reshape being continued.
    #[arg(long, value_name = "FILE")]
    pub backup_file: Option<PathBuf>,
    /// Limit the reshape (bytes of array data per second, e.g. 50M; 0 = none); on a
    /// running array, changeable while it runs.
    #[arg(long, value_name = "SIZE")]
    pub speed_limit: Option<String>,
    /// Print the plan (new shape and size, bytes to move, room, stripe cache, time
    /// estimate) and what would be refused; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Reshape even a degraded or unhealthy array.
    #[arg(long)]
    pub force: bool,
    /// Finish the reshape found on the members.
    #[arg(long = "continue")]
    pub cont: bool,
    /// Running array: turn the reshape in progress around, back to the old shape.
    #[arg(long)]
    pub revert: bool,
    /// Running array: pause the reshape at its next safe position.
    #[arg(long, conflicts_with = "resume")]
    pub pause: bool,
    /// Running array: resume a paused reshape.
    #[arg(long)]
    pub resume: bool,
    /// With --dry-run: the plan as JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// `internal`: add an internal write-intent bitmap (where mdadm would put it);
    /// `none`: remove it.
    #[arg(long, value_name = "internal|none")]
    pub bitmap: Option<String>,
    /// Bytes per bitmap bit (bare number = KiB, as mdadm; default: mdadm's choice).
    #[arg(long, value_name = "SIZE", requires = "bitmap")]
    pub bitmap_chunk: Option<String>,
    /// Which superblock to use offline when a member carries both 0.90 and 1.x.
    #[arg(long, value_name = "0.90|1.0|1.1|1.2")]
    pub metadata: Option<String>,
    /// md's write-behind, as `mdadm --grow --write-behind N`: at most N writes to the
    /// write-mostly members outstanding after a write is acknowledged (0: synchronous).
    /// RAID1 with a bitmap and a write-mostly member.
    #[arg(long = "write-behind", value_name = "N")]
    pub write_behind: Option<u32>,
    /// The name of a running array (as in `raidkit status`), or the members of a stopped
    /// array.
    #[arg(required = true, value_name = "NAME|MEMBER")]
    pub targets: Vec<PathBuf>,
}

impl GrowArgs {
    fn shape_given(&self) -> bool {
        self.raid_devices.is_some()
            || !self.add.is_empty()
            || self.level.is_some()
            || self.layout.is_some()
            || self.chunk.is_some()
            || self.array_size.is_some()
    }

    /// The one thing asked for, refusing combinations that mean nothing.
    fn op(&self) -> Result<&'static str> {
        let steer = [
            (self.cont, "--continue"),
            (self.revert, "--revert"),
            (self.pause, "--pause"),
            (self.resume, "--resume"),
        ];
        let given: Vec<&str> = steer.iter().filter(|s| s.0).map(|s| s.1).collect();
        if given.len() > 1 {
            bail!("give one of {}", given.join(", "));
        }
        if self.bitmap.is_some() {
            if self.shape_given()
                || !given.is_empty()
                || self.dry_run
                || self.write_behind.is_some()
            {
                bail!("--bitmap is a change of its own: give it without reshape options");
            }
            return Ok("bitmap");
        }
        if self.write_behind.is_some() {
            if self.shape_given() || !given.is_empty() || self.dry_run {
                bail!("--write-behind is a change of its own: give it without reshape options");
            }
            return Ok("write-behind");
        }
        if let Some(g) = given.first() {
            if self.shape_given() {
                bail!("{g} steers the reshape in progress: give it without a new shape");
            }
            if self.dry_run {
                bail!("--dry-run plans a new reshape, not {g}");
            }
            return Ok(&g[2..]);
        }
        if self.shape_given() {
            return Ok(if self.dry_run { "dry-run" } else { "start" });
        }
        if self.speed_limit.is_some() {
            return Ok("set");
        }
        bail!("say what to change: --raid-devices, --add, --level, --layout, --chunk or --array-size (or --bitmap); --continue finishes a reshape found on the members")
    }

    fn spec(&self) -> Result<ReshapeSpec> {
        self.add.iter().try_for_each(|p| new_disk_exists(p))?;
        Ok(ReshapeSpec {
            raid_devices: self.raid_devices,
            add: self.add.iter().map(|p| resolved(p)).collect(),
            level: self.level.clone(),
            layout: self.layout.clone(),
            chunk_bytes: size_opt("--chunk", self.chunk.as_deref())?,
            array_bytes: size_opt("--array-size", self.array_size.as_deref())?,
            backup_file: self.backup_file.as_deref().map(absolute),
            force: self.force,
        })
    }
}

/// A disk to add must exist: say how to make a file one, instead of the bare open error.
fn new_disk_exists(p: &Path) -> Result<()> {
    use raidkit_engine::dev::{fault, nbd};
    let plain = p
        .to_str()
        .is_none_or(|t| !nbd::is_nbd_uri(t) && fault::split_spec(t).is_none());
    if plain && std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == ErrorKind::NotFound) {
        bail!(
            "--add {}: no such file or device; a new disk must exist first (for a file: `truncate -s SIZE {}`, at least the size of the other members)",
            p.display(),
            p.display()
        );
    }
    Ok(())
}

fn size_opt(what: &str, v: Option<&str>) -> Result<Option<u64>> {
    v.map(|c| parse_size(c, 1024).map_err(|e| anyhow!("{what}: {e}")))
        .transpose()
}

/// A member named on the command line as the server (whose working directory may be
/// another) must see it: a path made absolute, also the one inside a fault-injection spec
/// (`fault:RULES:PATH`); an NBD URI as given.
pub(crate) fn resolved(p: &Path) -> PathBuf {
    use raidkit_engine::dev::{fault, nbd};
    if let Some((rules, inner)) = p.to_str().and_then(fault::split_spec) {
        let inner = resolved(Path::new(inner));
        return PathBuf::from(format!("fault:{rules}:{}", inner.display()));
    }
    if p.to_str().is_some_and(nbd::is_nbd_uri) {
        return p.to_path_buf();
    }
    std::fs::canonicalize(p).unwrap_or_else(|_| absolute(p))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// What `spec` asks of an array at level `cur` (names resolved against the level the
/// array will have), with the devices to add already open. One place for both the
/// offline command and the server.
pub fn request_of(
    spec: &ReshapeSpec,
    cur: Level,
    add: Vec<Arc<dyn BlockDev>>,
) -> Result<ReshapeRequest> {
    let level = spec
        .level
        .as_deref()
        .map(|l| Level::parse(l).map_err(|e| anyhow!("--level: {e}")))
        .transpose()?;
    let layout = spec
        .layout
        .as_deref()
        .map(|l| names::parse_layout(level.unwrap_or(cur), l).map_err(|e| anyhow!("--layout: {e}")))
        .transpose()?;
    let sectors = |what: &str, b: Option<u64>| -> Result<Option<u64>> {
        match b {
            Some(b) if b % 512 != 0 || b == 0 => {
                bail!("{what} must be a positive multiple of 512 bytes, not {b}")
            }
            Some(b) => Ok(Some(b / 512)),
            None => Ok(None),
        }
    };
    if spec.raid_devices == Some(0) {
        bail!("--raid-devices must be at least 1");
    }
    Ok(ReshapeRequest {
        raid_disks: spec.raid_devices,
        level,
        layout,
        chunk_sectors: sectors("--chunk", spec.chunk_bytes)?,
        array_sectors: sectors("--array-size", spec.array_bytes)?,
        add,
        backup_file: spec.backup_file.clone(),
        force: spec.force,
    })
}

/// `raidkit grow`.
pub fn run(a: GrowArgs) -> Result<()> {
    let op = a.op()?;
    if op == "bitmap" {
        return crate::ctl::manage::grow(crate::ctl::manage::GrowArgs {
            bitmap: a.bitmap.clone().unwrap_or_default(),
            bitmap_chunk: a.bitmap_chunk.clone(),
            metadata: a.metadata.clone(),
            targets: a.targets.clone(),
        });
    }
    if let ("write-behind", Some(n)) = (op, a.write_behind) {
        return write_behind(&a, n);
    }
    let speed = size_opt("--speed-limit", a.speed_limit.as_deref())?;
    let online = crate::ctl::manage::grow_names_running_array(&a.targets);
    if online {
        return grow_online(&a, op, speed);
    }
    if matches!(op, "revert" | "pause" | "resume" | "set") {
        bail!(
            "--{op} steers the reshape of a running array: give its name (as in `raidkit status`); on a stopped array, finish it with --continue"
        );
    }
    grow_offline(&a, op, speed.unwrap_or(0))
}

/// Through the control socket of the serving process.
fn grow_online(a: &GrowArgs, op: &str, speed: Option<u64>) -> Result<()> {
    let name = a.targets[0].display().to_string();
    let sock = socket_for(&name)?;
    let req = Request::Reshape {
        array: name.clone(),
        op: op.into(),
        spec: a.spec()?,
        speed_limit: speed,
    };
    let v = request(&sock, &req)?;
    if op == "dry-run" {
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&v["plan"])?);
        } else {
            out!("{}", v["text"].as_str().unwrap_or_default());
        }
        if let Some(r) = v["refusal"].as_str() {
            bail!("{r}");
        }
        return Ok(());
    }
    let what = match op {
        "start" => "reshape started in the background (progress in `raidkit status`)".to_string(),
        "continue" => "reshape continues in the background".into(),
        "revert" => {
            "the reshape is being turned back to the old shape (progress in `raidkit status`)"
                .into()
        }
        "pause" => "the reshape pauses at its next safe position (`--resume` to go on)".into(),
        "resume" => "the reshape goes on".into(),
        _ => match speed.unwrap_or(0) {
            0 => "no speed limit".into(),
            l => format!("speed limit {}/s", human(l)),
        },
    };
    eprintln!("raidkit: {name}: {what}");
    Ok(())
}

/// Server side of `grow NAME ...`.
pub fn online_request(
    s: &Arc<Supervisor>,
    op: &str,
    spec: &ReshapeSpec,
    speed: Option<u64>,
) -> Result<Value> {
    if let Some(l) = speed {
        s.set_speed_limit(l);
    }
    let level = s.array().geometry().level;
    let refuse = |e: raidkit_engine::supervisor::SupervisorError| anyhow!("{e}");
    match op {
        "dry-run" => {
            let req = request_of(spec, level, Vec::new())?;
            let plan = s.plan_reshape(&req).map_err(refuse)?;
            let l = speed.unwrap_or_else(|| s.status().sync.speed_limit);
            return Ok(json!({
                "plan": plan_json(&plan, spec.force),
                "text": plan_text(&plan, l),
                "refusal": refusal(&plan, spec.force),
            }));
        }
        "start" => {
            let devs = Supervisor::open_new_devices(&spec.add).map_err(refuse)?;
            let req = request_of(spec, level, devs)?;
            s.start_reshape(req).map_err(|e| {
                anyhow!("{e}; stop the running job with `raidkit sync-action {} idle` first if it is one", s.name())
            })?;
        }
        "continue" => s.continue_reshape().map_err(refuse)?,
        "revert" => s.revert_reshape().map_err(refuse)?,
        "pause" => s.pause_reshape(true).map_err(refuse)?,
        "resume" => s.pause_reshape(false).map_err(refuse)?,
        "set" => {}
        other => bail!("unknown reshape request {other:?}"),
    }
    Ok(json!({}))
}

/// On the members of a stopped array, in the foreground.
fn grow_offline(a: &GrowArgs, op: &str, speed: u64) -> Result<()> {
    let opts = raidkit_engine::AssembleOptions {
        writable: op != "dry-run",
        metadata: a
            .metadata
            .as_deref()
            .map(crate::cmd::parse_metadata)
            .transpose()?,
        backup_file: a.backup_file.clone(),
        report_only: op == "dry-run",
        ..Default::default()
    };
    let arr = Arc::new(crate::cmd::assemble(&a.targets, &opts)?);
    let stop = Arc::new(AtomicBool::new(false));
    let ro = ReshapeOptions {
        stop: Some(stop.clone()),
        max_bytes_per_sec: Some(Arc::new(AtomicU64::new(speed))),
        backup_file: a.backup_file.clone(),
        ..Default::default()
    };
    if op == "continue" {
        let Some(st) = arr.reshape_status() else {
            bail!("no reshape is in progress on these members (nothing to continue)");
        };
        eprintln!(
            "raidkit: continuing the reshape {} -> {} at {:.1}%",
            shape_text(&st.old),
            shape_text(&st.new),
            st.done_sectors as f64 * 100.0 / st.total_sectors.max(1) as f64
        );
        on_signals(&stop)?;
        let end = rs::continue_reshape(&arr, &ro, &mut progress_bar())?;
        return finished(&arr, end, &a.targets);
    }
    let spec = a.spec()?;
    let devs: Vec<Arc<dyn BlockDev>> = if op == "dry-run" {
        // Planning opens nothing for writing; a device's size is all it needs.
        spec.add
            .iter()
            .map(|p| -> Result<Arc<dyn BlockDev>> {
                raidkit_engine::dev::open_member(p, false)
                    .with_context(|| format!("opening {}", p.display()))
            })
            .collect::<Result<_>>()?
    } else {
        crate::cmd::check_members(&spec.add)?;
        Supervisor::open_new_devices(&spec.add).map_err(|e| anyhow!("{e}"))?
    };
    let req = request_of(&spec, arr.geometry().level, devs)?;
    let plan = arr.plan_reshape(&req)?;
    if op == "dry-run" {
        return print_plan(&plan, a.json, a.force, speed);
    }
    refuse_problems(&plan, a.force)?;
    on_signals(&stop)?;
    eprintln!(
        "raidkit: reshaping {} -> {}; safe to interrupt (Ctrl-C stops at the next safe position; after a kill, `raidkit grow --continue`)",
        shape_text(&plan.from),
        shape_text(&plan.to)
    );
    let (cur, end) = rs::reshape(&arr, &req, &ro, &mut progress_bar())?;
    let members: Vec<PathBuf> = a.targets.iter().chain(&a.add).cloned().collect();
    finished(&cur, end, &members)
}

/// The refusal of an unhealthy array, each problem on a line of its own.
fn refusal(plan: &ReshapePlan, force: bool) -> Option<String> {
    if plan.problems.is_empty() || force {
        return None;
    }
    Some(format!(
        "refusing to reshape:\n  - {}\n(--force reshapes anyway)",
        plan.problems.join("\n  - ")
    ))
}

fn refuse_problems(plan: &ReshapePlan, force: bool) -> Result<()> {
    match refusal(plan, force) {
        Some(r) => Err(anyhow!(r)),
        None => Ok(()),
    }
}

/// The plan for `--json`: the engine's, and whether it would be refused.
fn plan_json(p: &ReshapePlan, force: bool) -> Value {
    let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
    v["refused"] = json!(!p.problems.is_empty() && !force);
    v
}

/// SIGINT/SIGTERM stop the reshape at its next safe position (recorded on the members).
fn on_signals(stop: &Arc<AtomicBool>) -> Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    Ok(())
}

/// A progress bar per stage of the reshape.
fn progress_bar() -> impl FnMut(&rs::Progress) {
    let mut cur: Option<(usize, &'static str, indicatif::ProgressBar)> = None;
    move |p: &rs::Progress| {
        if cur.as_ref().is_none_or(|c| c.0 != p.stage || c.1 != p.what) {
            if let Some((_, _, b)) = cur.take() {
                b.finish();
            }
            cur = Some((p.stage, p.what, super::bar(p.total * 512, p.what)));
        }
        if let Some((_, _, b)) = &cur {
            b.set_length(p.total * 512);
            b.set_position(p.done * 512);
        }
    }
}

/// After the mover returns: the array clean, and what happened.
fn finished(arr: &Arc<Array>, end: ReshapeEnd, members: &[PathBuf]) -> Result<()> {
    let cur = arr.current();
    cur.mark_clean()?;
    match end {
        ReshapeEnd::Finished => {
            let g = cur.geometry();
            eprintln!(
                "raidkit: reshape finished: {} {} devices, {}{}; array size {} ({} bytes)",
                g.level,
                g.raid_disks,
                names::layout_name(g.level, g.layout),
                if g.level.uses_chunk() {
                    format!(", {}K chunk", g.chunk_sectors / 2)
                } else {
                    String::new()
                },
                human(cur.size_bytes()),
                cur.size_bytes()
            );
        }
        ReshapeEnd::Stopped { position } => {
            let list: Vec<String> = members.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "raidkit: reshape stopped at array sector {position} (recorded on the members); finish it with `raidkit grow --continue {}` (or serve the array, or let the kernel)",
                list.join(" ")
            );
        }
    }
    Ok(())
}

fn shape_text(s: &raidkit_engine::jobs::reshape::ShapeInfo) -> String {
    let level = Level::parse(&s.level).ok();
    let mut t = format!("{} {} devices", s.level, s.raid_disks);
    if level.is_some_and(|l| l.has_parity() || l == Level::Raid10) {
        t.push_str(&format!(" {}", s.layout));
    }
    if level.is_some_and(|l| l.uses_chunk()) {
        t.push_str(&format!(" {}K", s.chunk_sectors / 2));
    }
    t
}

fn secs_text(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// `--dry-run`: the plan, then the refusals (an error when the reshape would be refused).
fn print_plan(p: &ReshapePlan, as_json: bool, force: bool, speed: u64) -> Result<()> {
    if as_json {
        outln!("{}", serde_json::to_string_pretty(&plan_json(p, force))?);
    } else {
        out!("{}", plan_text(p, speed));
    }
    refuse_problems(p, force)
}

/// The plan in words: shapes, sizes, stages, data moved, room, stripe cache, estimate,
/// and what is wrong with the array.
fn plan_text(p: &ReshapePlan, speed: u64) -> String {
    let mut t = String::new();
    let mut outln = |s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    let size = |b: u64| format!("{} ({b} bytes)", human(b));
    outln("reshape plan (nothing changed):".into());
    outln(format!(
        "  now:          {}, {}",
        shape_text(&p.from),
        size(p.array_bytes_before)
    ));
    outln(format!(
        "  after:        {}, {}",
        shape_text(&p.to),
        size(p.array_bytes_after)
    ));
    for (i, s) in p.stages.iter().enumerate() {
        let build = if s.build_roles.is_empty() {
            String::new()
        } else {
            format!(", then role(s) {:?} built from spares", s.build_roles)
        };
        outln(format!(
            "  stage {}:      {} to {}{build}",
            i + 1,
            s.kind,
            shape_text(&s.to)
        ));
    }
    outln(format!("  data moved:   {}", size(p.bytes_to_move)));
    match &p.room {
        Some(Room::OffsetChange { change, size: z }) => {
            let dir = if *change < 0 { "down, into the room before the data" } else { "up, into the room after the data" };
            outln(format!(
                "  room:         data offset moves {} sectors {dir} on every member (no backup file){}",
                change.unsigned_abs(),
                z.map(|z| format!("; component size reduced to {z} sectors first")).unwrap_or_default()
            ));
        }
        Some(Room::Backup { file }) => outln(format!(
            "  room:         none on the members: critical sections go to backup file {file} (mdadm's format)"
        )),
        None => outln("  room:         no data moves (a takeover only)".into()),
    }
    outln(format!(
        "  stripe cache: {} per batch (sized from the geometry)",
        human(p.buffer_bytes)
    ));
    match (p.member_bytes_per_sec, p.estimate_seconds) {
        (Some(sp), Some(est)) => {
            outln(format!(
                "  member speed: {}/s (slowest member, measured now)",
                human(sp)
            ));
            let limited = (speed > 0 && p.bytes_to_move > 0).then(|| p.bytes_to_move / speed);
            match limited.filter(|&l| l > est) {
                Some(l) => outln(format!(
                    "  estimate:     {} at the speed limit {}/s ({} unlimited)",
                    secs_text(l),
                    human(speed),
                    secs_text(est)
                )),
                None => outln(format!("  estimate:     {}", secs_text(est))),
            }
        }
        _ => outln("  estimate:     unknown (the members could not be measured)".into()),
    }
    if p.problems.is_empty() {
        outln("  checks:       healthy (not degraded, no lost ranges, no slow member)".into());
    } else {
        outln(format!(
            "  checks:       {} problem(s): the reshape is refused without --force",
            p.problems.len()
        ));
    }
    t
}

/// mdadm `--detail`'s reshape lines for a reshape in progress (also `status`).
pub fn reshape_detail_lines(r: &rs::ReshapeStatus) -> Vec<(&'static str, String)> {
    let mut v = vec![(
        "Reshape Status",
        format!(
            "{}% complete ({} of {} array sectors, {}{})",
            r.done_sectors * 100 / r.total_sectors.max(1),
            r.done_sectors,
            r.total_sectors,
            r.direction,
            if r.moving { "" } else { ", stopped" }
        ),
    )];
    if r.delta_disks != 0 {
        v.push((
            "Delta Devices",
            format!(
                "{}, ({}->{})",
                r.delta_disks, r.old.raid_disks, r.new.raid_disks
            ),
        ));
    }
    v.push(("Reshape From", shape_text(&r.old)));
    v.push(("Reshape To", shape_text(&r.new)));
    if let Some(o) = r.offset_change {
        v.push(("Offset Change", format!("{o} sectors")));
    }
    if let Some(f) = &r.backup_file {
        v.push(("Backup File", f.clone()));
    }
    v
}

/// `grow --write-behind N`: through the control socket of a running array, or on the
/// members of a stopped one.
fn write_behind(a: &GrowArgs, n: u32) -> Result<()> {
    let online = crate::ctl::manage::grow_names_running_array(&a.targets);
    if online {
        let name = a.targets[0].display().to_string();
        let req = crate::control::protocol::Request::Manage {
            array: name.clone(),
            op: crate::control::protocol::ManageOp::WriteBehind { n },
            force: false,
        };
        crate::control::client::request(&socket_for(&name)?, &req)?;
    } else {
        let opts = crate::ctl::manage::grow_offline_opts(a.metadata.as_deref())?;
        let arr = crate::cmd::assemble(&a.targets, &opts)?;
        let r = arr.set_write_behind(n);
        let stop = arr.stop();
        r?;
        stop?;
    }
    if n == 0 {
        eprintln!("raidkit: write-behind off (writes are synchronous on every member)");
    } else {
        eprintln!("raidkit: write-behind on, at most {n} write(s) outstanding to the write-mostly members");
    }
    Ok(())
}
