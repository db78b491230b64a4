//! `raidkit status`, `manage`, `sync-action`, `monitor`: clients of the control socket.

use crate::control::{all_status, request, socket_for, sockets};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// `status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `manage`.
#[derive(Args, Debug)]
pub struct ManageArgs {
    /// Array name (as in `raidkit status`).
    pub name: String,
    /// Mark a member failed.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub fail: Option<PathBuf>,
    /// Remove a failed member or a spare.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub remove: Option<PathBuf>,
    /// Add a device as a hot spare (recovery starts if a role is missing).
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub add: Option<PathBuf>,
    /// Re-add a member that left; only regions written meanwhile are resynced when the bitmap allows.
    #[arg(long = "re-add", value_name = "MEMBER", group = "op")]
    pub re_add: Option<PathBuf>,
    /// Hot-replace an active member: its role is copied onto a spare while it stays active,
    /// then it is marked faulty and removed.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub replace: Option<PathBuf>,
    /// With --replace: the device to copy onto (a spare, or a new device added for this).
    #[arg(long, value_name = "DEVICE", requires = "replace")]
    pub with: Option<PathBuf>,
    /// Change array metadata online. `no-bbl`: rewrite every bad-block entry from
    /// redundancy, then remove the bad-block log from every member. Refused (listing the
    /// lost array ranges) if some entries hold data no member can supply; with --force the
    /// log is removed anyway and those ranges then read as zeros (status keeps reporting
    /// them as `lost_zeroed_ranges` until the server stops).
    #[arg(long, value_name = "WHAT", group = "op", value_parser = ["no-bbl"])]
    pub update: Option<String>,
    /// With --add or --replace --with: overwrite a device that holds data or another
    /// superblock. With
    /// --update no-bbl: remove the log even if data is lost (lost ranges become zeros).
    #[arg(long)]
    pub force: bool,
}

/// `grow`.
#[derive(Args, Debug)]
pub struct GrowArgs {
    /// `internal`: add an internal write-intent bitmap (where mdadm would put it);
    /// `none`: remove it.
    #[arg(long, value_name = "internal|none")]
    pub bitmap: String,
    /// Bytes per bitmap bit (bare number = KiB, as mdadm; default: mdadm's choice, 64 MiB
    /// on most arrays).
    #[arg(long, value_name = "SIZE")]
    pub bitmap_chunk: Option<String>,
    /// Which superblock to use offline when a member carries both 0.90 and 1.x.
    #[arg(long, value_name = "0.90|1.0|1.1|1.2")]
    pub metadata: Option<String>,
    /// The name of a running array (as in `raidkit status`), or the members of a stopped
    /// array.
    #[arg(required = true, value_name = "NAME|MEMBER")]
    pub targets: Vec<PathBuf>,
}

const SYNC_ACTION_HELP: &str = "\
Examples:
  raidkit sync-action md0 check --speed-limit 50M     # scrub the whole array
  raidkit sync-action md0 check --from 1G --to 2G     # only array bytes 1G..2G
  raidkit sync-action md0 idle                        # stop; the position is recorded
  raidkit sync-action md0 check --resume              # continue where it stopped
";

/// `sync-action`.
#[derive(Args, Debug)]
#[command(after_help = SYNC_ACTION_HELP)]
pub struct SyncActionArgs {
    /// Array name.
    pub name: String,
    /// check, repair, resync, recover or idle (stop).
    pub action: Option<String>,
    /// Limit background work (e.g. 50M per second; 0 = unlimited). Changeable while running.
    #[arg(long, value_name = "SIZE")]
    pub speed_limit: Option<String>,
    /// check/repair only from this array byte offset (e.g. 10G).
    #[arg(long, value_name = "OFFSET", conflicts_with = "resume")]
    pub from: Option<String>,
    /// check/repair only up to this array byte offset (exclusive).
    #[arg(long, value_name = "OFFSET", conflicts_with = "resume")]
    pub to: Option<String>,
    /// Continue the last check/repair stopped with `idle` where it stopped (the position is
    /// kept in the run directory and survives a restart of `raidkit serve`).
    #[arg(long)]
    pub resume: bool,
}

/// `monitor`.
#[derive(Args, Debug)]
pub struct MonitorArgs {
    /// One JSON object per event.
    #[arg(long)]
    pub json: bool,
    /// Run PROGRAM EVENT ARRAY DETAIL-JSON for every event.
    #[arg(long, value_name = "PROGRAM")]
    pub program: Option<PathBuf>,
    /// Mail every event to ADDR (needs `sendmail`).
    #[arg(long, value_name = "ADDR")]
    pub mail: Option<String>,
    /// POST every event as JSON to an http:// URL.
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// Send a test event through every alert path, then exit.
    #[arg(long)]
    pub test: bool,
    /// Exit after this many events (default: run forever).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// `raidkit status`.
pub fn cmd_status(a: StatusArgs) -> Result<()> {
    let mut st = all_status();
    for s in st.iter_mut() {
        let (ms, shape) = raidkit_tools::disks::of_status(s);
        s["disk_warnings"] = json!(raidkit_tools::disks::check_members(&ms, shape.as_ref()));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&Value::Array(st))?);
        return Ok(());
    }
    if st.is_empty() {
        println!(
            "no running arrays (control sockets in {})",
            crate::control::run_dir().display()
        );
        return Ok(());
    }
    for s in &st {
        let members: Vec<String> = s["members"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                format!(
                    "{}[{}]{}",
                    m["device"].as_str().unwrap_or("?"),
                    m["role"]
                        .as_u64()
                        .map(|r| r.to_string())
                        .unwrap_or_else(|| "S".into()),
                    member_flag(m["state"].as_str())
                )
            })
            .collect();
        let n = s["raid_disks"].as_u64().unwrap_or(0) as usize;
        let missing: Vec<u64> = s["missing_roles"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v.as_u64())
            .collect();
        let map: String = (0..n)
            .map(|r| {
                if missing.contains(&(r as u64)) {
                    '_'
                } else {
                    'U'
                }
            })
            .collect();
        println!(
            "{} : {} {} {}",
            s["name"].as_str().unwrap_or("?"),
            if s["read_only"] == true {
                "active (read-only)"
            } else {
                "active"
            },
            s["level"].as_str().unwrap_or("?"),
            members.join(" ")
        );
        println!(
            "      {} ({}) {} layout, {} chunk [{}/{}] [{}] {}",
            human(s["array_bytes"].as_u64().unwrap_or(0)),
            s["uuid"].as_str().unwrap_or(""),
            s["layout"].as_str().unwrap_or(""),
            human(s["chunk_bytes"].as_u64().unwrap_or(0)),
            n - missing.len(),
            n,
            map,
            s["state"].as_str().unwrap_or("")
        );
        for (key, what) in [
            ("lost_ranges", "LOST (reads fail)"),
            ("lost_zeroed_ranges", "lost, now zeros"),
        ] {
            if let Some(l) = s[key].as_array().filter(|l| !l.is_empty()) {
                let r: Vec<String> = l
                    .iter()
                    .map(|p| {
                        let (o, n) = (p[0].as_u64().unwrap_or(0), p[1].as_u64().unwrap_or(0));
                        format!("{o}..{}", o + n)
                    })
                    .collect();
                println!("      {what}: array bytes {}", r.join(", "));
            }
        }
        for b in s["bad_blocks"].as_array().cloned().unwrap_or_default() {
            let r: Vec<String> = b["ranges"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|p| format!("{}+{}", p[0], p[1]))
                .collect();
            println!(
                "      bad blocks on {}[{}]{}: {}",
                b["device"].as_str().unwrap_or("?"),
                b["role"],
                if b["logged"] == true {
                    ""
                } else {
                    " (NOT in an on-disk log)"
                },
                r.join(" ")
            );
        }
        let job = &s["sync"];
        if job["action"] != "idle" {
            let done = job["done_sectors"].as_u64().unwrap_or(0);
            let total = job["total_sectors"].as_u64().unwrap_or(0).max(1);
            println!(
                "      {} = {:.1}% ({}/{}) speed={}/s eta={}",
                job["action"].as_str().unwrap_or(""),
                done as f64 * 100.0 / total as f64,
                human(done * 512),
                human(total * 512),
                human(job["speed_bytes_per_sec"].as_u64().unwrap_or(0)),
                job["eta_seconds"]
                    .as_u64()
                    .map(|s| format!("{}m{:02}s", s / 60, s % 60))
                    .unwrap_or_else(|| "?".into())
            );
        }
        print_stripe_cache(&s["stripe_cache"]);
        for f in s["disk_warnings"].as_array().cloned().unwrap_or_default() {
            println!(
                "      {}: {}",
                f["severity"].as_str().unwrap_or(""),
                f["message"].as_str().unwrap_or("")
            );
        }
        println!();
    }
    Ok(())
}

/// `raidkit manage`.
pub fn cmd_manage(a: ManageArgs) -> Result<()> {
    if let Some(what) = &a.update {
        let sock = socket_for(&a.name)?;
        let v = request(
            &sock,
            &json!({"cmd": "manage", "array": a.name, "op": "update", "value": what, "force": a.force}),
        )?;
        let repaired = v["repaired"].as_array().map_or(0, Vec::len);
        eprintln!(
            "raidkit: --update {what} on {}: done ({repaired} bad-block range(s) rewritten from redundancy; the bad-block log is removed from every member)",
            a.name
        );
        if let Some(lost) = v["lost"].as_array().filter(|l| !l.is_empty()) {
            eprintln!(
                "raidkit: these array byte ranges had no valid data and now read as zeros: {}",
                serde_json::to_string(lost)?
            );
        }
        return Ok(());
    }
    let (op, member) = if let Some(m) = &a.fail {
        ("fail", m)
    } else if let Some(m) = &a.remove {
        ("remove", m)
    } else if let Some(m) = &a.add {
        ("add", m)
    } else if let Some(m) = &a.re_add {
        ("re-add", m)
    } else if let Some(m) = &a.replace {
        ("replace", m)
    } else {
        bail!("say what to do: --fail, --remove, --add, --re-add or --replace MEMBER, or --update no-bbl");
    };
    let sock = socket_for(&a.name)?;
    // Paths are resolved here so the server sees the same names as at assembly.
    let member = std::fs::canonicalize(member).unwrap_or_else(|_| member.clone());
    let mut req = json!({"cmd": "manage", "array": a.name, "op": op, "member": member.display().to_string(), "force": a.force});
    if let Some(w) = &a.with {
        let w = std::fs::canonicalize(w).unwrap_or_else(|_| w.clone());
        req["with"] = json!(w.display().to_string());
    }
    request(&sock, &req)?;
    if op == "replace" {
        eprintln!(
            "raidkit: replacing {} on {}: started (progress in `raidkit status`)",
            member.display(),
            a.name
        );
    } else {
        eprintln!("raidkit: {op} {} on {}: done", member.display(), a.name);
    }
    Ok(())
}

/// `raidkit grow`: online through the control socket of the serving process, or offline
/// on the members of a stopped array (same engine code).
pub fn cmd_grow(a: GrowArgs) -> Result<()> {
    let chunk = a
        .bitmap_chunk
        .as_deref()
        .map(|c| parse_size(c, 1024).map_err(|e| anyhow!("--bitmap-chunk: {e}")))
        .transpose()?;
    let mode = match a.bitmap.as_str() {
        "internal" => raidkit_engine::grow::BitmapMode::Internal { chunk_bytes: chunk },
        "none" => {
            if chunk.is_some() {
                bail!("--bitmap-chunk goes with --bitmap internal");
            }
            raidkit_engine::grow::BitmapMode::None
        }
        other => bail!("--bitmap must be internal or none, not {other:?}"),
    };
    let online = a.targets.len() == 1 && !a.targets[0].exists();
    let change = if online {
        let name = a.targets[0].display().to_string();
        let sock = socket_for(&name)?;
        let mut req = json!({"cmd": "grow", "array": name, "bitmap": a.bitmap});
        if let Some(c) = chunk {
            req["bitmap_chunk"] = json!(c);
        }
        let v = request(&sock, &req)?;
        serde_json::from_value::<Value>(v["change"].clone())?
    } else {
        let opts = raidkit_engine::AssembleOptions {
            writable: true,
            metadata: a
                .metadata
                .as_deref()
                .map(|m| {
                    raidkit_engine::sb::Metadata::parse(m)
                        .ok_or_else(|| anyhow!("--metadata must be 0.90, 1.0, 1.1 or 1.2"))
                })
                .transpose()?,
            ..Default::default()
        };
        let arr = raidkit_engine::assemble_paths(&a.targets, &opts)?;
        let r = arr.set_bitmap(mode);
        let stop = arr.stop();
        let ch = r?;
        stop?;
        serde_json::to_value(&ch)?
    };
    if change["bitmap"] == true {
        eprintln!(
            "raidkit: internal bitmap added: {} chunks of {}, {} dirty",
            change["chunks"].as_u64().unwrap_or(0),
            human(change["chunk_bytes"].as_u64().unwrap_or(0)),
            change["dirty"].as_u64().unwrap_or(0)
        );
    } else {
        eprintln!("raidkit: bitmap removed (an unclean stop now means a full resync)");
    }
    Ok(())
}

/// `raidkit sync-action`.
pub fn cmd_sync_action(a: SyncActionArgs) -> Result<()> {
    let sock = socket_for(&a.name)?;
    let mut req = json!({"cmd": "sync-action", "array": a.name});
    if let Some(act) = &a.action {
        req["action"] = json!(act);
    }
    if let Some(l) = &a.speed_limit {
        req["speed_limit"] = json!(parse_size(l, 1).map_err(|e| anyhow!("--speed-limit: {e}"))?);
    }
    if let Some(f) = &a.from {
        req["from"] = json!(parse_size(f, 1).map_err(|e| anyhow!("--from: {e}"))?);
    }
    if let Some(t) = &a.to {
        req["to"] = json!(parse_size(t, 1).map_err(|e| anyhow!("--to: {e}"))?);
    }
    if a.resume {
        req["resume"] = json!(true);
    }
    if a.action.is_none() && a.speed_limit.is_none() {
        bail!("give an action (check, repair, resync, recover, idle) and/or --speed-limit");
    }
    request(&sock, &req)?;
    Ok(())
}

fn deliver(a: &MonitorArgs, e: &Value) -> Result<()> {
    let kind = e["kind"].as_str().unwrap_or("event");
    let array = e["array"].as_str().unwrap_or("?");
    if a.json {
        println!("{e}");
    } else {
        println!(
            "{} {array}: {kind} {}",
            raidkit_tools::human::timestamp(e["time"].as_u64().unwrap_or(0)),
            e["detail"]
        );
    }
    std::io::stdout().flush().ok();
    if let Some(p) = &a.program {
        let st = std::process::Command::new(p)
            .arg(kind)
            .arg(array)
            .arg(e["detail"].to_string())
            .env("RAIDKIT_EVENT", e.to_string())
            .status()
            .with_context(|| format!("running {}", p.display()))?;
        if !st.success() {
            eprintln!("raidkit monitor: {} exited with {st}", p.display());
        }
    }
    if let Some(addr) = &a.mail {
        let mut child = std::process::Command::new("sendmail")
            .arg("-t")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .context("running sendmail for --mail (install an MTA such as msmtp-mta or postfix)")?;
        if let Some(mut i) = child.stdin.take() {
            write!(
                i,
                "To: {addr}\nSubject: raidkit {array}: {kind}\n\n{}\n",
                serde_json::to_string_pretty(e)?
            )?;
        }
        child.wait()?;
    }
    if let Some(url) = &a.webhook {
        post_json(url, e)?;
    }
    Ok(())
}

/// Minimal HTTP/1.1 POST of a JSON body to an `http://host[:port]/path` URL.
fn post_json(url: &str, body: &Value) -> Result<()> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("--webhook {url:?}: only http:// URLs are supported"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let mut s =
        std::net::TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let b = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
        b.len()
    )?;
    let mut status = String::new();
    BufReader::new(s).read_line(&mut status)?;
    if !status
        .split_whitespace()
        .nth(1)
        .is_some_and(|c| c.starts_with('2'))
    {
        bail!("webhook {url} answered {:?}", status.trim());
    }
    Ok(())
}

/// `raidkit monitor`.
pub fn cmd_monitor(a: MonitorArgs) -> Result<()> {
    if a.test {
        let e = json!({"time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "array": "test", "kind": "test", "detail": {"note": "test event from `raidkit monitor --test`"}});
        deliver(&a, &e)?;
        for s in sockets() {
            let _ = request(&s, &json!({"cmd": "test-event"}));
        }
        eprintln!("raidkit monitor: test event delivered");
        return Ok(());
    }
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let mut watched: Vec<PathBuf> = Vec::new();
    let mut seen = 0u64;
    loop {
        for s in sockets() {
            if watched.contains(&s) {
                continue;
            }
            watched.push(s.clone());
            let tx = tx.clone();
            std::thread::spawn(move || {
                let Ok(mut c) = UnixStream::connect(&s) else {
                    return;
                };
                if writeln!(c, "{}", json!({"cmd": "monitor"})).is_err() {
                    return;
                }
                for line in BufReader::new(c).lines().map_while(|l| l.ok()).skip(1) {
                    if let Ok(v) = serde_json::from_str::<Value>(&line) {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                }
            });
        }
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(e) => {
                deliver(&a, &e)?;
                seen += 1;
                if a.count.is_some_and(|c| seen >= c) {
                    return Ok(());
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => return Ok(()),
        }
    }
}

/// `trace record`.
#[derive(Args, Debug)]
pub struct TraceRecordArgs {
    /// Array name.
    pub name: String,
    /// Where the trace goes (written by the serving process).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// How long to record.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

/// `raidkit trace record`.
pub fn cmd_trace_record(a: TraceRecordArgs) -> Result<()> {
    let sock = socket_for(&a.name)?;
    let out = std::path::absolute(&a.output).unwrap_or(a.output.clone());
    request(
        &sock,
        &json!({"cmd": "trace-start", "array": a.name, "file": out.display().to_string(), "seconds": a.seconds}),
    )?;
    eprintln!(
        "raidkit: tracing {} for {} s into {}",
        a.name,
        a.seconds,
        out.display()
    );
    std::thread::sleep(Duration::from_secs(a.seconds));
    request(&sock, &json!({"cmd": "trace-stop", "array": a.name}))?;
    eprintln!(
        "raidkit: trace written; analyse it with `raidkit trace analyze {}`",
        out.display()
    );
    Ok(())
}

/// `stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Array name (default: every running array).
    pub name: Option<String>,
    /// JSON output (cumulative counters; with --watch one object per interval).
    #[arg(long)]
    pub json: bool,
    /// Print again every SECONDS, with the rates of that window.
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    /// Serve Prometheus metrics of every running array on this local HTTP address
    /// (e.g. 127.0.0.1:9273) until interrupted.
    #[arg(long, value_name = "HOST:PORT")]
    pub prometheus: Option<String>,
}

fn stats_now(name: Option<&str>) -> Result<Vec<Value>> {
    let mut v = Vec::new();
    for s in sockets() {
        if let Ok(r) = request(&s, &json!({"cmd": "stats", "array": name.unwrap_or("")})) {
            v.extend(r["arrays"].as_array().cloned().unwrap_or_default());
        }
    }
    if let Some(n) = name {
        if v.is_empty() {
            bail!("no running array named {n:?} (see `raidkit status`)");
        }
    }
    Ok(v)
}

fn hist_line(h: &Value, unit_sizes: bool) -> String {
    let v: Vec<u64> = h
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x.as_u64())
        .collect();
    let total: u64 = v.iter().sum();
    if total == 0 {
        return "-".into();
    }
    v.iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| {
            let label = if unit_sizes {
                human(512u64 << i)
            } else {
                format!("{}µs", 1u64 << i)
            };
            format!("{label}:{:.0}%", c as f64 * 100.0 / total as f64)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn lat_pct(h: &Value, q: f64) -> String {
    let v: Vec<u64> = h
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|x| x.as_u64())
        .collect();
    let total: u64 = v.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let target = (total as f64 * q).ceil() as u64;
    let mut acc = 0;
    for (i, c) in v.iter().enumerate() {
        acc += c;
        if acc >= target {
            return format!("<{}µs", 2u64 << i);
        }
    }
    "-".into()
}

fn diff(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => json!(x
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(y.as_u64().unwrap_or(0))),
        (Value::Array(x), Value::Array(y)) => {
            Value::Array(x.iter().zip(y.iter()).map(|(p, q)| diff(p, q)).collect())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut o = serde_json::Map::new();
            for (k, v) in x {
                o.insert(
                    k.clone(),
                    y.get(k).map(|w| diff(v, w)).unwrap_or_else(|| v.clone()),
                );
            }
            Value::Object(o)
        }
        (x, _) => x.clone(),
    }
}

fn print_stats(a: &Value, io: &Value, window: Option<f64>) {
    let r = &io["read"];
    let w = &io["write"];
    let (rc, wc) = (
        r["count"].as_u64().unwrap_or(0),
        w["count"].as_u64().unwrap_or(0),
    );
    let (rb, wb) = (
        r["bytes"].as_u64().unwrap_or(0),
        w["bytes"].as_u64().unwrap_or(0),
    );
    let secs = window
        .unwrap_or(io["uptime_ms"].as_u64().unwrap_or(0) as f64 / 1000.0)
        .max(1e-3);
    println!(
        "{} ({}) {}: {} reads / {} writes ({:.0}% reads), {}/s read, {}/s write, {:.0} IOPS, {} flushes",
        a["name"].as_str().unwrap_or("?"),
        a["uuid"].as_str().unwrap_or(""),
        if window.is_some() { format!("last {secs:.0} s") } else { format!("since start ({secs:.0} s)") },
        rc,
        wc,
        if rc + wc > 0 { rc as f64 * 100.0 / (rc + wc) as f64 } else { 0.0 },
        human((rb as f64 / secs) as u64),
        human((wb as f64 / secs) as u64),
        (rc + wc) as f64 / secs,
        io["flush"]["count"]
    );
    println!("  read sizes : {}", hist_line(&r["size_hist"], true));
    println!("  write sizes: {}", hist_line(&w["size_hist"], true));
    println!(
        "  read latency p50 {} p99 {}   write latency p50 {} p99 {}",
        lat_pct(&r["lat_hist_us"], 0.5),
        lat_pct(&r["lat_hist_us"], 0.99),
        lat_pct(&w["lat_hist_us"], 0.5),
        lat_pct(&w["lat_hist_us"], 0.99)
    );
}

/// One line about the stripe cache, if the array has one.
fn print_stripe_cache(c: &Value) {
    if c.is_null() {
        return;
    }
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    let (h, m) = (n("hits"), n("misses"));
    println!(
        "  stripe cache: {} entries ({}), {} used, {} memory, max {} entries; {} hits {} misses ({:.1}% hit), {} held stripes, {} full-stripe merges",
        n("size_entries"),
        c["mode"].as_str().unwrap_or("?"),
        n("used_entries"),
        human(n("memory_bytes")),
        n("max_entries"),
        h,
        m,
        if h + m > 0 {
            h as f64 * 100.0 / (h + m) as f64
        } else {
            0.0
        },
        n("dirty_stripes"),
        n("full_stripe_merges")
    );
}

/// One line per member, labelled by device name (with `window`: the rates of that window).
fn print_members(m: &Value, window: Option<f64>) {
    let members = raidkit_tools::watch::parse_members(m);
    for l in raidkit_tools::watch::member_lines(&members, window) {
        println!("{l}");
    }
}

/// Prometheus text exposition of every running array's counters.
pub fn prometheus_text() -> String {
    let mut o = String::new();
    let arrays = stats_now(None).unwrap_or_default();
    o.push_str("# HELP raidkit_requests_total Client requests by operation.\n# TYPE raidkit_requests_total counter\n");
    for a in &arrays {
        let n = a["name"].as_str().unwrap_or("?");
        for op in ["read", "write", "flush"] {
            o.push_str(&format!(
                "raidkit_requests_total{{array=\"{n}\",op=\"{op}\"}} {}\n",
                a["io"][op]["count"]
            ));
        }
    }
    o.push_str("# HELP raidkit_bytes_total Client bytes by operation.\n# TYPE raidkit_bytes_total counter\n");
    for a in &arrays {
        let n = a["name"].as_str().unwrap_or("?");
        for op in ["read", "write"] {
            o.push_str(&format!(
                "raidkit_bytes_total{{array=\"{n}\",op=\"{op}\"}} {}\n",
                a["io"][op]["bytes"]
            ));
        }
    }
    o.push_str("# HELP raidkit_request_size_bytes Client request sizes.\n# TYPE raidkit_request_size_bytes histogram\n");
    for a in &arrays {
        let n = a["name"].as_str().unwrap_or("?");
        for op in ["read", "write"] {
            let h: Vec<u64> = a["io"][op]["size_hist"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|x| x.as_u64())
                .collect();
            let mut acc = 0;
            for (i, c) in h.iter().enumerate() {
                acc += c;
                if i + 1 < h.len() {
                    o.push_str(&format!("raidkit_request_size_bytes_bucket{{array=\"{n}\",op=\"{op}\",le=\"{}\"}} {acc}\n", (1024u64 << i) - 1));
                }
            }
            o.push_str(&format!("raidkit_request_size_bytes_bucket{{array=\"{n}\",op=\"{op}\",le=\"+Inf\"}} {acc}\n"));
            o.push_str(&format!(
                "raidkit_request_size_bytes_sum{{array=\"{n}\",op=\"{op}\"}} {}\n",
                a["io"][op]["bytes"]
            ));
            o.push_str(&format!(
                "raidkit_request_size_bytes_count{{array=\"{n}\",op=\"{op}\"}} {acc}\n"
            ));
        }
    }
    o.push_str("# HELP raidkit_member_ios_total Member IOs by role.\n# TYPE raidkit_member_ios_total counter\n");
    for a in &arrays {
        let n = a["name"].as_str().unwrap_or("?");
        for m in a["members"].as_array().cloned().unwrap_or_default() {
            for (op, k) in [("read", "reads"), ("write", "writes")] {
                o.push_str(&format!(
                    "raidkit_member_ios_total{{array=\"{n}\",role=\"{}\",op=\"{op}\"}} {}\n",
                    m["role"], m[k]
                ));
            }
        }
    }
    o
}

/// `raidkit stats`.
pub fn cmd_stats(a: StatsArgs) -> Result<()> {
    if let Some(addr) = &a.prometheus {
        let l = std::net::TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
        eprintln!(
            "raidkit: Prometheus metrics on http://{}/metrics",
            l.local_addr()?
        );
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut line = String::new();
            let _ = BufReader::new(c.try_clone()?).read_line(&mut line);
            let body = prometheus_text();
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        return Ok(());
    }
    let mut prev = stats_now(a.name.as_deref())?;
    if a.watch.is_none() {
        if a.json {
            println!("{}", serde_json::to_string_pretty(&Value::Array(prev))?);
        } else {
            for s in &prev {
                print_stats(s, &s["io"], None);
                print_members(&s["members"], None);
                print_stripe_cache(&s["stripe_cache"]);
            }
        }
        return Ok(());
    }
    let every = a.watch.unwrap_or(1).max(1);
    loop {
        std::thread::sleep(Duration::from_secs(every));
        let now = stats_now(a.name.as_deref())?;
        if !a.json {
            println!("{}", raidkit_tools::human::timestamp_now());
        }
        for s in &now {
            let before = prev.iter().find(|p| p["name"] == s["name"]);
            let win_io = before
                .map(|b| diff(&s["io"], &b["io"]))
                .unwrap_or_else(|| s["io"].clone());
            let win_m = before
                .map(|b| raidkit_tools::watch::window_json(&s["members"], &b["members"]))
                .unwrap_or_else(|| s["members"].clone());
            if a.json {
                println!(
                    "{}",
                    json!({"name": s["name"], "time": raidkit_tools::human::now_unix(), "window_seconds": every, "window": win_io, "members_window": win_m, "total": s["io"]})
                );
            } else {
                print_stats(s, &win_io, Some(every as f64));
                print_members(&win_m, Some(every as f64));
            }
        }
        std::io::stdout().flush().ok();
        prev = now;
    }
}

/// The flag `status` prints after a member, as md's /proc/mdstat does: `(F)` faulty,
/// `(S)` spare, `(R)` replacement; none for an active member or one being recovered (the
/// recovery line shows that).
fn member_flag(state: Option<&str>) -> &'static str {
    match state {
        Some("failed") => "(F)",
        Some("replacement") => "(R)",
        Some("spare") => "(S)",
        _ => "",
    }
}

#[cfg(test)]
mod flag_tests {
    use super::member_flag;

    #[test]
    fn member_flags_are_mdstat_flags() {
        let got: Vec<&str> = [
            Some("failed"),
            Some("replacement"),
            Some("spare"),
            Some("recovering"),
            Some("active"),
            None,
        ]
        .into_iter()
        .map(member_flag)
        .collect();
        assert_eq!(got, ["(F)", "(R)", "(S)", "", "", ""]);
    }
}
