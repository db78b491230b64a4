//! The control socket of a serving process, and the client commands that use it
//! (`status`, `manage`, `grow`, `sync-action`, `monitor`). JSON lines over a Unix socket in the
//! run directory; one socket per serving process, arrays addressed by their stable name.

use anyhow::{anyhow, bail, Context, Result};
use raidkit_engine::supervisor::{MonitorEvent, Supervisor};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where control sockets live: `$RAIDKIT_RUN_DIR`, else `/run/raidkit` (root), else
/// `$XDG_RUNTIME_DIR/raidkit`, else `/tmp/raidkit-$UID`.
pub fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RAIDKIT_RUN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/raidkit");
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        return Path::new(&x).join("raidkit");
    }
    PathBuf::from(format!("/tmp/raidkit-{uid}"))
}

/// The stable short name of an array: its superblock name without the `homehost:` prefix
/// (what mdadm uses for /dev/md/NAME); it does not change across restarts or machines.
pub fn short_name(full: &str) -> String {
    match full.split_once(':') {
        Some((_, n)) if !n.is_empty() => n.to_string(),
        _ if full.is_empty() => "md".to_string(),
        _ => full.to_string(),
    }
}

/// A running control server; removes its socket when dropped.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_file(&self.path);
    }
}

impl ControlServer {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Start the control socket for the arrays this process serves.
pub fn start(sups: Vec<Arc<Supervisor>>) -> Result<ControlServer> {
    let dir = run_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let sups = Arc::new(sups);
    std::thread::Builder::new()
        .name("raidkit-control".into())
        .spawn(move || {
            for conn in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let sups = sups.clone();
                std::thread::spawn(move || {
                    let _ = handle(conn, &sups);
                });
            }
        })
        .context("starting the control thread")?;
    Ok(ControlServer { path, stop })
}

fn find<'a>(sups: &'a [Arc<Supervisor>], name: &str) -> Result<&'a Arc<Supervisor>> {
    sups.iter().find(|s| s.name() == name).ok_or_else(|| {
        anyhow!(
            "no array named {name:?} here (serving: {})",
            sups.iter()
                .map(|s| s.name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

fn handle(conn: UnixStream, sups: &[Arc<Supervisor>]) -> Result<()> {
    let mut w = conn.try_clone()?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    let req: Value = serde_json::from_str(&line).map_err(|e| anyhow!("bad request: {e}"))?;
    let reply = |w: &mut UnixStream, v: Value| -> Result<()> {
        writeln!(w, "{v}")?;
        Ok(())
    };
    let cmd = req["cmd"].as_str().unwrap_or("");
    let array = req["array"].as_str().unwrap_or("");
    let result: Result<Value> = (|| match cmd {
        "status" => Ok(
            json!({"pid": std::process::id(), "arrays": sups.iter().map(|s| s.status()).collect::<Vec<_>>()}),
        ),
        "manage" => {
            let s = find(sups, array)?;
            let member = req["member"].as_str().unwrap_or("");
            if req["op"] == "update" {
                return match req["value"].as_str().unwrap_or("") {
                    "no-bbl" => {
                        let r = s.remove_bbl(req["force"].as_bool().unwrap_or(false))?;
                        Ok(serde_json::to_value(r)?)
                    }
                    v => bail!("unknown --update {v:?} (known: no-bbl)"),
                };
            }
            match req["op"].as_str().unwrap_or("") {
                "fail" => s.fail(member)?,
                "remove" => s.remove(member)?,
                "add" => s.add(Path::new(member), req["force"].as_bool().unwrap_or(false))?,
                "re-add" => s.re_add(Path::new(member))?,
                "replace" => s.replace(
                    member,
                    req["with"].as_str().map(Path::new),
                    req["force"].as_bool().unwrap_or(false),
                )?,
                op => bail!("unknown manage operation {op:?}"),
            }
            Ok(json!({}))
        }
        "grow" => {
            let s = find(sups, array)?;
            let mode = match req["bitmap"].as_str().unwrap_or("") {
                "internal" => raidkit_engine::grow::BitmapMode::Internal {
                    chunk_bytes: req["bitmap_chunk"].as_u64(),
                },
                "none" => raidkit_engine::grow::BitmapMode::None,
                other => bail!("--bitmap must be internal or none, not {other:?}"),
            };
            Ok(json!({"change": s.set_bitmap(mode)?}))
        }
        "sync-action" => {
            let s = find(sups, array)?;
            if let Some(l) = req["speed_limit"].as_u64() {
                s.set_speed_limit(l);
            }
            if let Some(a) = req["action"].as_str() {
                let (from, to) = (req["from"].as_u64(), req["to"].as_u64());
                let o = raidkit_engine::supervisor::ActionOptions {
                    window: (from.is_some() || to.is_some())
                        .then(|| (from.unwrap_or(0), to.unwrap_or(u64::MAX))),
                    resume: req["resume"].as_bool().unwrap_or(false),
                };
                s.sync_action_with(a, &o)?;
            }
            Ok(json!({}))
        }
        "stats" => Ok(json!({"arrays": sups
            .iter()
            .filter(|s| array.is_empty() || s.name() == array)
            .map(|s| json!({"name": s.name(), "uuid": s.array().uuid_text(), "io": s.array().io.snapshot(), "members": s.array().member_stats()}))
            .collect::<Vec<_>>()})),
        "trace-start" => {
            let s = find(sups, array)?;
            let file = req["file"]
                .as_str()
                .ok_or_else(|| anyhow!("trace-start needs a file"))?;
            s.array()
                .io
                .start_trace(Path::new(file), s.name(), req["seconds"].as_u64())
                .with_context(|| format!("creating {file}"))?;
            Ok(json!({}))
        }
        "trace-stop" => {
            let s = find(sups, array)?;
            Ok(json!({"was_running": s.array().io.stop_trace()}))
        }
        "test-event" => {
            for s in sups {
                s.emit(
                    "test",
                    json!({"note": "test event from `raidkit monitor --test`"}),
                );
            }
            Ok(json!({}))
        }
        "monitor" => Ok(json!({})),
        other => bail!("unknown command {other:?}"),
    })();
    match result {
        Ok(mut v) => {
            v["ok"] = json!(true);
            reply(&mut w, v)?;
        }
        Err(e) => {
            return reply(&mut w, json!({"ok": false, "error": format!("{e:#}")}));
        }
    }
    if cmd == "monitor" {
        let (tx, rx) = std::sync::mpsc::channel::<MonitorEvent>();
        for s in sups {
            let r = s.subscribe();
            let tx = tx.clone();
            std::thread::spawn(move || {
                while let Ok(e) = r.recv() {
                    if tx.send(e).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        while let Ok(e) = rx.recv() {
            if writeln!(w, "{}", serde_json::to_string(&e)?).is_err() {
                break;
            }
        }
    }
    Ok(())
}

/// Every live control socket (stale ones — nobody listening — are skipped).
pub fn sockets() -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(run_dir()) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .filter(|p| UnixStream::connect(p).is_ok())
        .collect();
    v.sort();
    v
}

/// Send one request to one socket and return the reply.
pub fn request(sock: &Path, req: &Value) -> Result<Value> {
    let mut s =
        UnixStream::connect(sock).with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    writeln!(s, "{req}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    let v: Value = serde_json::from_str(&line)
        .map_err(|e| anyhow!("bad reply from {}: {e}", sock.display()))?;
    if v["ok"] != json!(true) {
        bail!("{}", v["error"].as_str().unwrap_or("request failed"));
    }
    Ok(v)
}

/// Status of every array served on this machine.
pub fn all_status() -> Vec<Value> {
    let mut out = Vec::new();
    for s in sockets() {
        if let Ok(v) = request(&s, &json!({"cmd": "status"})) {
            for a in v["arrays"].as_array().cloned().unwrap_or_default() {
                let mut a = a;
                a["pid"] = v["pid"].clone();
                a["control_socket"] = json!(s.display().to_string());
                out.push(a);
            }
        }
    }
    out
}

/// The control socket of the process serving array `name`.
pub fn socket_for(name: &str) -> Result<PathBuf> {
    for a in all_status() {
        if a["name"] == name {
            if let Some(p) = a["control_socket"].as_str() {
                return Ok(PathBuf::from(p));
            }
        }
    }
    bail!(
        "no running array named {name:?} (see `raidkit status`; control sockets live in {})",
        run_dir().display()
    )
}
