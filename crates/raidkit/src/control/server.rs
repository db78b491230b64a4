//! The control socket's server: one thread accepting connections, one thread per
//! connection; each connection carries one request (and, for `monitor`, the event stream
//! that follows). Replies are the supervisors' typed status, serialized; refusals are
//! worded here (the engine names no commands).

use super::names;
use super::peer::{self, Peer, Policy};
use super::protocol::{ManageOp, Request};
use anyhow::{anyhow, bail, Context, Result};
use raidkit_engine::grow::BitmapMode;
use raidkit_engine::supervisor::{ActionOptions, Event, MonitorEvent, Supervisor, SupervisorError};
use raidkit_engine::EngineError;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Who may use the control socket besides root and the server's user.
#[derive(Clone, Copy, Debug, Default)]
pub struct SocketAccess {
    /// Members of this group may read (`--socket-group`); the socket is then mode 0660
    /// with this group, else 0600.
    pub group: Option<u32>,
}

/// Largest request line read.
const MAX_REQUEST_BYTES: usize = 64 << 10;
/// Time a client has to send its whole request (not per read: a client sending a byte
/// now and then is cut off too).
const REQUEST_TIME: Duration = Duration::from_secs(10);
/// Connections served at once (monitors stay connected); more are refused.
const MAX_CONNECTIONS: usize = 64;
/// Connections at once from peers other than root and the server's user (the readers
/// of `--socket-group`): they can never take every slot.
const MAX_OTHER_CONNECTIONS: usize = 16;
/// How often a monitor connection with no event to send looks whether its client has
/// gone (it would otherwise hold its slot until the next event).
const HANGUP_CHECK: Duration = Duration::from_millis(500);
/// How long a monitor client may leave an event line unread (its socket buffer full: a
/// `raidkit monitor` stopped with Ctrl-Z) before it is dropped; meanwhile its events wait
/// in its channel.
const MONITOR_WRITE_TIME: Duration = Duration::from_secs(60);

/// Bind the socket in `dir` and give it its mode and group.
fn bind(dir: &Path, access: SocketAccess) -> Result<(PathBuf, UnixListener)> {
    let path = dir.join(format!("{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    // The mode is set on the path right after bind, whatever the umask; a client that
    // connects in between is still checked by its credentials (see `peer`).
    let mode = if access.group.is_some() { 0o660 } else { 0o600 };
    if let Some(g) = access.group {
        std::os::unix::fs::chown(&path, None, Some(g)).with_context(|| {
            format!(
                "giving {} to group {} (--socket-group)",
                path.display(),
                peer::group_name(g)
            )
        })?;
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok((path, l))
}

/// Start the control socket for the arrays this process serves, in the run directory
/// (which must have been checked with [`super::prepare_run_dir`]).
pub fn start(
    dir: &Path,
    sups: Vec<Arc<Supervisor>>,
    access: SocketAccess,
) -> Result<ControlServer> {
    let (path, l) = bind(dir, access)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let ctx = Arc::new(Ctx {
        sups,
        policy: Policy {
            // SAFETY: geteuid has no preconditions and cannot fail.
            owner: unsafe { libc::geteuid() },
            group: access.group,
        },
        live: AtomicUsize::new(0),
        others: AtomicUsize::new(0),
    });
    std::thread::Builder::new()
        .name("raidkit-control".into())
        .spawn(move || {
            for conn in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                accept(conn, &ctx);
            }
        })
        .context("starting the control thread")?;
    Ok(ControlServer { path, stop })
}

/// What every connection thread shares.
struct Ctx {
    sups: Vec<Arc<Supervisor>>,
    policy: Policy,
    live: AtomicUsize,
    /// Of those, connections from peers other than root and the owner.
    others: AtomicUsize,
}

/// A connection's slot (and, for a peer other than root and the owner, its slot among
/// those); freed when dropped.
struct Slot {
    ctx: Arc<Ctx>,
    other: bool,
}

impl Slot {
    /// A slot, or why there is none.
    fn take(ctx: &Arc<Ctx>, other: bool) -> Result<Slot, String> {
        if ctx.live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            ctx.live.fetch_sub(1, Ordering::AcqRel);
            return Err("the server has too many control connections; try again".into());
        }
        if other && ctx.others.fetch_add(1, Ordering::AcqRel) >= MAX_OTHER_CONNECTIONS {
            ctx.others.fetch_sub(1, Ordering::AcqRel);
            ctx.live.fetch_sub(1, Ordering::AcqRel);
            return Err(format!(
                "the server has its maximum of {MAX_OTHER_CONNECTIONS} control connections from users other than {}; close one and try again",
                super::user_name(ctx.policy.owner)
            ));
        }
        Ok(Slot {
            ctx: Arc::clone(ctx),
            other,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.other {
            self.ctx.others.fetch_sub(1, Ordering::AcqRel);
        }
        self.ctx.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serve one connection on its own thread, within the connection bounds.
fn accept(mut conn: UnixStream, ctx: &Arc<Ctx>) {
    let other = Peer::of(&conn).map_or(true, |p| p.uid != 0 && p.uid != ctx.policy.owner);
    let slot = match Slot::take(ctx, other) {
        Ok(s) => s,
        Err(why) => {
            let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = send_line(&mut conn, json!({"ok": false, "error": why}));
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("raidkit-control-conn".into())
        .spawn(move || {
            let _ = handle(conn, &slot.ctx);
        });
    // A thread that could not start dropped its closure, and the slot with it.
    drop(spawned);
}

/// How commands may name a supervisor's array.
fn ident(s: &Supervisor) -> names::Ident {
    names::Ident {
        name: s.name().to_string(),
        uuid: s.array().uuid_text(),
        md_name: s.array().name().to_string(),
    }
}

/// The array `spec` (export name, UUID or superblock `host:name`) names in this process;
/// several matches are an error listing them, never the first.
fn find<'a>(sups: &'a [Arc<Supervisor>], spec: &str) -> Result<&'a Arc<Supervisor>> {
    let ids: Vec<names::Ident> = sups.iter().map(|s| ident(s)).collect();
    names::pick(&ids, spec, " here")
        .map(|i| &sups[i])
        .map_err(|e| anyhow!(e))
}

/// An array's status with the superblock's name (`host:name`), which commands accept too.
fn status_json(s: &Supervisor) -> Value {
    let mut v = json!(s.status());
    v["md_name"] = json!(s.array().name());
    v
}

/// A supervisor's refusal in the CLI's words: what is wrong and which command helps.
fn word(e: SupervisorError) -> anyhow::Error {
    let text = match &e {
        SupervisorError::Busy { array, .. } => {
            format!("{e}; wait for it, or stop it with `raidkit sync-action {array} idle` first")
        }
        SupervisorError::WindowNeedsScrub(a) => {
            format!("--from/--to/--resume apply to check and repair, not {a}")
        }
        SupervisorError::WindowAndResume => {
            "give either a window (--from/--to) or --resume, not both".into()
        }
        SupervisorError::EmptyWindow { .. } => {
            format!("{e}; give --from below --to and inside the array")
        }
        SupervisorError::NothingToResume { array } => {
            format!("{e}; start one with `raidkit sync-action {array} check`")
        }
        SupervisorError::ResumeOtherArray { .. } => format!("{e}; start a new check"),
        _ => e.to_string(),
    };
    anyhow!(text)
}

/// Read the request and decide whether this peer may make it.
fn admit(conn: &UnixStream, ctx: &Ctx) -> Result<Request> {
    let peer = Peer::of(conn).context("asking the kernel who the client is")?;
    let line = read_request(conn, REQUEST_TIME)?;
    conn.set_read_timeout(None)?;
    let req = serde_json::from_str::<Request>(&line).map_err(|e| anyhow!("bad request: {e}"))?;
    ctx.policy
        .allow(&peer, req.is_read_only())
        .map_err(|e| anyhow!(e))?;
    for (path, create) in req.paths() {
        peer::check_path(&peer, path, create).map_err(|e| anyhow!(e))?;
    }
    Ok(req)
}

/// The request line (up to and without its newline, or all the client sent before it
/// closed its side), which must arrive whole within `time` and be at most
/// [`MAX_REQUEST_BYTES`] long.
fn read_request(mut conn: &UnixStream, time: Duration) -> Result<String> {
    let deadline = Instant::now() + time;
    let mut line = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no complete request within {} s", time.as_secs());
        }
        conn.set_read_timeout(Some(left))?;
        let n = match conn.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                bail!("no complete request within {} s", time.as_secs())
            }
            Err(e) => return Err(e.into()),
        };
        let got = buf.get(..n).unwrap_or(&[]);
        let end = got.iter().position(|&b| b == b'\n');
        line.extend_from_slice(got.get(..end.unwrap_or(n)).unwrap_or(&[]));
        if line.len() > MAX_REQUEST_BYTES {
            bail!("bad request: longer than {MAX_REQUEST_BYTES} bytes");
        }
        if n == 0 || end.is_some() {
            return String::from_utf8(line).map_err(|_| anyhow!("bad request: not UTF-8"));
        }
    }
}

/// True if the client of `s` has closed its end (hung up, not just its sending side).
fn hung_up(s: &UnixStream) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: `p` is a valid pollfd for an open socket, and the count is exactly one.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Send one JSON line in one write (`writeln!` on the socket sent each piece of the JSON
/// on its own: about 30 sends per status reply, each waking the client).
fn send_line(w: &mut UnixStream, line: impl std::fmt::Display) -> std::io::Result<()> {
    w.write_all(format!("{line}\n").as_bytes())
}

fn handle(conn: UnixStream, ctx: &Ctx) -> Result<()> {
    let mut w = conn.try_clone()?;
    let reply = admit(&conn, ctx).and_then(|r| dispatch(&r, &ctx.sups).map(|v| (r, v)));
    match reply {
        Ok((req, mut v)) => {
            v["ok"] = json!(true);
            send_line(&mut w, &v)?;
            if req == Request::Monitor {
                stream_events(&mut w, &ctx.sups)?;
            }
        }
        Err(e) => send_line(&mut w, json!({"ok": false, "error": format!("{e:#}")}))?,
    }
    Ok(())
}

/// Carry out one request; the reply's fields (without `ok`).
fn dispatch(req: &Request, sups: &[Arc<Supervisor>]) -> Result<Value> {
    match req {
        Request::Status => Ok(json!({
            "pid": std::process::id(),
            "arrays": sups.iter().map(|s| status_json(s)).collect::<Vec<_>>(),
        })),
        Request::Manage { array, op, force } => manage(find(sups, array)?, op, *force),
        Request::Grow {
            array,
            bitmap,
            bitmap_chunk,
        } => {
            let mode = match bitmap.as_str() {
                "internal" => BitmapMode::Internal {
                    chunk_bytes: *bitmap_chunk,
                },
                "none" => BitmapMode::None,
                other => bail!("--bitmap must be internal or none, not {other:?}"),
            };
            let change = find(sups, array)?.set_bitmap(mode).map_err(word)?;
            Ok(json!({ "change": change }))
        }
        Request::SyncAction { .. } => sync_action(sups, req),
        Request::Reshape {
            array,
            op,
            spec,
            speed_limit,
        } => crate::cmd::grow::online_request(find(sups, array)?, op, spec, *speed_limit),
        Request::Stats { array } => Ok(json!({"arrays": sups
            .iter()
            .filter(|s| array.is_empty() || ident(s).matches(array))
            .map(|s| s.stats())
            .collect::<Vec<_>>()})),
        Request::TraceStart {
            array,
            file,
            seconds,
        } => {
            let s = find(sups, array)?;
            s.array()
                .io
                .start_trace(file, s.name(), *seconds)
                .with_context(|| format!("creating {}", file.display()))?;
            Ok(json!({}))
        }
        Request::TraceStop { array } => {
            Ok(json!({"was_running": find(sups, array)?.array().io.stop_trace()}))
        }
        Request::TestEvent => {
            for s in sups {
                s.emit(Event::Test {
                    note: "test event from `raidkit monitor --test`".into(),
                });
            }
            Ok(json!({}))
        }
        Request::Monitor => Ok(json!({})),
    }
}

fn manage(s: &Arc<Supervisor>, op: &ManageOp, force: bool) -> Result<Value> {
    let name = |p: &PathBuf| p.display().to_string();
    match op {
        ManageOp::Update { value } => {
            if value != "no-bbl" {
                bail!("unknown --update {value:?} (known: no-bbl)");
            }
            return Ok(serde_json::to_value(s.remove_bbl(force).map_err(word)?)?);
        }
        ManageOp::Fail { member } => s.fail(&name(member)),
        ManageOp::Remove { member } => s.remove(&name(member)),
        ManageOp::Add {
            member,
            write_mostly,
        } => s.add(member, force).and_then(|()| {
            if *write_mostly {
                s.set_write_mostly(&name(member), true)
            } else {
                Ok(())
            }
        }),
        ManageOp::WriteMostly { member, on } => s.set_write_mostly(&name(member), *on),
        ManageOp::WriteBehind { n } => s.set_write_behind(*n),
        ManageOp::ReAdd {
            member,
            discard_its_changes,
        } => s.re_add(member, *discard_its_changes),
        ManageOp::Replace { member, with } => s.replace(&name(member), with.as_deref(), force),
    }
    .map_err(|e| match &e {
        SupervisorError::Engine(EngineError::Diverged { device, .. }) => anyhow!(
            "{e}\n(to keep this array's data: raidkit manage {} --re-add '{device}' --discard-its-changes)",
            s.name()
        ),
        _ => word(e),
    })?;
    Ok(json!({}))
}

fn sync_action(sups: &[Arc<Supervisor>], req: &Request) -> Result<Value> {
    let Request::SyncAction {
        array,
        action,
        speed_limit,
        from,
        to,
        resume,
    } = req
    else {
        bail!("not a sync-action request");
    };
    let s = find(sups, array)?;
    if let Some(l) = speed_limit {
        s.set_speed_limit(*l);
    }
    if let Some(a) = action {
        let o = ActionOptions {
            window: (from.is_some() || to.is_some())
                .then(|| (from.unwrap_or(0), to.unwrap_or(u64::MAX))),
            resume: *resume,
        };
        s.sync_action_with(a, &o).map_err(word)?;
    }
    Ok(json!({}))
}

/// After the reply to `monitor`: every event of every array, one JSON line each, until
/// the client goes away.
///
/// A client that hangs up is noticed within [`HANGUP_CHECK`] (not at the next event),
/// and its subscriptions end with the connection: no thread or channel outlives it. One
/// that stops reading is dropped after [`MONITOR_WRITE_TIME`] (see [`forward`]).
fn stream_events(w: &mut UnixStream, sups: &[Arc<Supervisor>]) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<MonitorEvent>();
    let alive = Arc::new(());
    for s in sups {
        s.subscribe_while(tx.clone(), &alive);
    }
    drop(tx);
    forward(w, &rx, MONITOR_WRITE_TIME)
}

/// Send what arrives on `rx` to `w`, a JSON line each, until the senders are gone, the
/// client hangs up, or a line cannot be written within `write_time` (the client stopped
/// reading: it would block the thread forever while its events pile up).
fn forward<T: serde::Serialize>(
    w: &mut UnixStream,
    rx: &std::sync::mpsc::Receiver<T>,
    write_time: Duration,
) -> Result<()> {
    w.set_write_timeout(Some(write_time))?;
    loop {
        match rx.recv_timeout(HANGUP_CHECK) {
            Ok(e) => {
                if send_line(w, serde_json::to_string(&e)?).is_err() {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) if !hung_up(w) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that stops reading (Ctrl-Z on `raidkit monitor`) blocked its connection's
    /// thread in a write forever, its events piling up in the channel; now it is dropped
    /// once a line waits longer than the write time.
    #[test]
    fn a_monitor_that_stops_reading_is_dropped() {
        let (mut w, client) = UnixStream::pair().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let line = "x".repeat(64 << 10);
        // Far more than a socket buffer holds, the client reading none of it.
        for _ in 0..64 {
            tx.send(line.clone()).unwrap();
        }
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = forward(&mut w, &rx, Duration::from_millis(200));
            let _ = done_tx.send(r.is_ok());
            drop(tx);
        });
        let done = done_rx.recv_timeout(Duration::from_secs(20));
        assert_eq!(done, Ok(true), "the stalled monitor was not dropped");
        drop(client);
    }
}
