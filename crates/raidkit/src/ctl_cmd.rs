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
    /// With --add: overwrite a device that holds data or another superblock.
    #[arg(long)]
    pub force: bool,
}

/// `sync-action`.
#[derive(Args, Debug)]
pub struct SyncActionArgs {
    /// Array name.
    pub name: String,
    /// check, repair, resync, recover or idle (stop).
    pub action: Option<String>,
    /// Limit background work (e.g. 50M per second; 0 = unlimited). Changeable while running.
    #[arg(long, value_name = "SIZE")]
    pub speed_limit: Option<String>,
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
    let st = all_status();
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
                    match m["state"].as_str() {
                        Some("failed") => "(F)",
                        Some("recovering") => "(R)",
                        Some("spare") => "(S)",
                        _ => "",
                    }
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
        println!();
    }
    Ok(())
}

/// `raidkit manage`.
pub fn cmd_manage(a: ManageArgs) -> Result<()> {
    let (op, member) = if let Some(m) = &a.fail {
        ("fail", m)
    } else if let Some(m) = &a.remove {
        ("remove", m)
    } else if let Some(m) = &a.add {
        ("add", m)
    } else if let Some(m) = &a.re_add {
        ("re-add", m)
    } else {
        bail!("say what to do: --fail, --remove, --add or --re-add MEMBER");
    };
    let sock = socket_for(&a.name)?;
    // Paths are resolved here so the server sees the same names as at assembly.
    let member = std::fs::canonicalize(member).unwrap_or_else(|_| member.clone());
    request(
        &sock,
        &json!({"cmd": "manage", "array": a.name, "op": op, "member": member.display().to_string(), "force": a.force}),
    )?;
    eprintln!("raidkit: {op} {} on {}: done", member.display(), a.name);
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
        println!("{} {array}: {kind} {}", e["time"], e["detail"]);
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
