//! Bringing arrays online for a frontend (`serve`, `mount`), and offline again.
//!
//! [`assemble`] does what must happen before anything is served: assemble, attach the
//! checksum sidecar, resync after an unclean stop. [`Online::start`] then starts what runs
//! alongside the frontend: stripe-cache write-back, a supervisor per array (background
//! jobs, member management, events), the event log on stderr, the control socket, and one
//! idle-clean timer (md's safe mode) for every array. [`Online::shutdown`] stops them and
//! leaves every array flushed and clean.

use crate::control::server::{ControlServer, SocketAccess};
use anyhow::{Context, Result};
use raidkit_engine::assemble::AssembleOptions;
use raidkit_engine::dev::nbd::MemberTls;
use raidkit_engine::sb::Metadata;
use raidkit_engine::supervisor::{IdleClean, MonitorEvent, Supervisor, WriteActivity};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::Array;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Writes idle this long → mark the array clean (md's default `safe_mode_delay` is 0.2 s;
/// raidkit uses 1 s).
pub const IDLE_CLEAN: Duration = Duration::from_secs(1);

/// Control-socket options shared by `serve` and `mount`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ControlArgs {
    /// Let members of GROUP (a name or a number) read this server's status, statistics
    /// and events: its control socket becomes mode 0660 with that group (default 0600:
    /// root and this user only). Changes (manage, sync-action, grow, trace) still need
    /// root or this user. A server not run as root also needs a run directory GROUP can
    /// reach (RAIDKIT_RUN_DIR).
    #[arg(long, value_name = "GROUP", value_parser = crate::control::peer::parse_group)]
    pub socket_group: Option<u32>,
}

impl ControlArgs {
    /// The access the control socket grants.
    pub fn access(&self) -> SocketAccess {
        SocketAccess {
            group: self.socket_group,
        }
    }
}

/// TLS credentials for network members (`nbds://`, `nbds+unix://`) whose URI names none:
/// on every command that opens members. The same files as `serve`'s `--tls-psk`, and
/// libnbd's `tls-psk-file` / `tls-certificates` URI parameters (which take precedence).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MemberTlsArgs {
    /// Pre-shared keys for TLS members, `username:hexkey` lines (psktool's format, as
    /// `serve --tls-psk`). The key used is the URI's user (`nbds://alice@host/...`), else
    /// the local user's, else the file's only key.
    #[arg(long, value_name = "FILE", conflicts_with = "member_tls_certificates")]
    pub member_tls_psk: Option<PathBuf>,
    /// X.509 for TLS members: a directory with `ca-cert.pem` (the CA the servers'
    /// certificates must chain to; default: the system's) and, for servers that ask for a
    /// client certificate, `client-cert.pem` and `client-key.pem`.
    #[arg(long, value_name = "DIR")]
    pub member_tls_certificates: Option<PathBuf>,
}

impl MemberTlsArgs {
    /// The credentials, paths made absolute (a server may change directory later).
    pub fn credentials(&self) -> Result<Option<MemberTls>> {
        let abs = |p: &PathBuf, what: &str| -> Result<PathBuf> {
            std::path::absolute(p).with_context(|| format!("{what} {}", p.display()))
        };
        Ok(
            match (&self.member_tls_psk, &self.member_tls_certificates) {
                (Some(f), _) => Some(MemberTls::PskFile(abs(f, "--member-tls-psk")?)),
                (None, Some(d)) => Some(MemberTls::Certificates(abs(
                    d,
                    "--member-tls-certificates",
                )?)),
                (None, None) => None,
            },
        )
    }

    /// Apply the options (process-wide), before any member is opened.
    pub fn apply(&self) -> Result<()> {
        if let Some(c) = self.credentials()? {
            raidkit_engine::dev::nbd::set_default_tls(Some(c));
        }
        Ok(())
    }
}

/// Member options shared by `serve` and `mount`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MemberArgs {
    #[command(flatten)]
    pub tls: MemberTlsArgs,
    /// Deadline of every member IO (e.g. `5s`, `500ms`): a member that has not answered
    /// by then is failed and the IO completes on the other copies (default: 5 s for
    /// network members, 30 s for local ones; RAIDKIT_MEMBER_TIMEOUT in the environment).
    #[arg(long, value_name = "DURATION", value_parser = parse_member_timeout)]
    pub member_timeout: Option<std::time::Duration>,
}

fn parse_member_timeout(v: &str) -> Result<std::time::Duration, String> {
    let d = raidkit_engine::dev::fault::duration(v)
        .map_err(|e| format!("{e} (a duration such as 5s or 500ms)"))?;
    if d.is_zero() {
        return Err("must be more than zero".into());
    }
    Ok(d)
}

impl MemberArgs {
    /// Apply the options (process-wide), before any member is opened.
    pub fn apply(&self) -> Result<()> {
        if self.member_timeout.is_some() {
            raidkit_engine::dev::io::set_member_timeout(self.member_timeout);
        }
        self.tls.apply()
    }
}

/// One array to bring online.
#[derive(Clone, Debug, Default)]
pub struct ArraySpec {
    /// Members, in any order.
    pub members: Vec<PathBuf>,
    /// Open the members read-only; never write them.
    pub read_only: bool,
    /// Start a dirty degraded array (md's --force).
    pub force: bool,
    /// Which superblock to use when a member carries both 0.90 and 1.x.
    pub metadata: Option<Metadata>,
    /// Checksum sidecar to keep up to date.
    pub checksums: Option<PathBuf>,
    /// Backup file of a reshape in progress (mdadm's `--backup-file`).
    pub backup_file: Option<PathBuf>,
}

/// One line on stderr. Errors are ignored: after SIGHUP the terminal may be gone, and the
/// arrays must still be stopped cleanly.
pub fn note(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "raidkit: {args}");
}

/// Assemble `spec`, attach its sidecar and resync it if it was not stopped cleanly. Starts
/// no thread that outlives the call (a mount blocks its stop signals after this).
pub fn assemble(spec: &ArraySpec) -> Result<Array> {
    let opts = AssembleOptions {
        writable: !spec.read_only,
        force: spec.force,
        metadata: spec.metadata,
        report_only: false,
        backup_file: spec.backup_file.clone(),
    };
    let arr = crate::cmd::assemble(&spec.members, &opts)?;
    // Attach the sidecar before anything writes superblocks, so it follows the event count.
    if let Some(p) = &spec.checksums {
        if crate::cmd::checksums::attach_sidecar(&arr, p)? {
            note(format_args!(
                "array {}: checksum sidecar {}",
                arr.uuid_text(),
                p.display()
            ));
        }
    }
    if !spec.read_only && arr.needs_resync() {
        resync(&arr)?;
    }
    Ok(arr)
}

/// Resync an array that was not stopped cleanly, reporting progress every 10%.
fn resync(arr: &Array) -> Result<()> {
    note(format_args!(
        "array {} was not stopped cleanly: resyncing before accepting writes",
        arr.uuid_text()
    ));
    let mut last_pct = u64::MAX;
    let rep = sync::run(arr, SyncMode::Resync, false, &mut |done, total| {
        let pct = (done * 100).checked_div(total).unwrap_or(100);
        if pct / 10 != last_pct / 10 {
            last_pct = pct;
            note(format_args!("resync {pct}%"));
        }
    })?;
    arr.mark_clean()?;
    note(format_args!(
        "resync done: {} sectors checked{}, {} rewritten",
        rep.sectors_done,
        if arr.has_bitmap() {
            " (only the regions the write-intent bitmap marked dirty)"
        } else {
            " (no bitmap: the whole array)"
        },
        rep.sectors_written
    ));
    Ok(())
}

/// An array a frontend serves.
pub struct Served {
    /// The name clients and `raidkit status` know it by.
    pub name: String,
    /// The array.
    pub array: Arc<Array>,
    /// Its client writes, for the idle-clean timer.
    pub activity: Arc<WriteActivity>,
}

impl Served {
    /// Serve `array` under `name`.
    pub fn new(name: String, array: Array) -> Served {
        Served {
            name,
            array: Arc::new(array),
            activity: Arc::new(WriteActivity::default()),
        }
    }
}

/// File-name-safe form of a name (for sockets and state files).
pub fn file_safe(n: &str) -> String {
    n.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Print every event of `sup` on stderr (those it emitted while starting too), one line
/// each: `raidkit[NAME]: KIND DETAIL-JSON`.
fn log_events(sup: &Arc<Supervisor>) {
    let (history, rx) = sup.subscribe_with_history();
    let print = |e: &MonitorEvent| {
        note_raw(format_args!(
            "raidkit[{}]: {} {}",
            e.array,
            e.kind(),
            serde_json::to_string(&e.event).unwrap_or_default()
        ))
    };
    for e in &history {
        print(e);
    }
    let spawned = std::thread::Builder::new()
        .name("raidkit-event-log".into())
        .spawn(move || {
            for e in rx {
                print(&e);
            }
        });
    if let Err(e) = spawned {
        note(format_args!("events will not be logged: {e}"));
    }
}

/// A line on stderr as given, errors ignored (see [`note`]).
fn note_raw(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{args}");
}

/// What runs alongside a frontend; see the module documentation.
pub struct Online {
    served: Vec<Served>,
    sups: Vec<Arc<Supervisor>>,
    control: Option<ControlServer>,
    idle: Option<IdleClean>,
}

impl Online {
    /// Start write-back, supervisors, the control socket and the idle-clean timer for
    /// `served`. A run directory that cannot be trusted is fatal (nothing is started); a
    /// control socket that cannot be made there is reported, not fatal.
    pub fn start(served: Vec<Served>, access: SocketAccess) -> Result<Online> {
        let run_dir = crate::control::prepare_run_dir()?;
        for s in served.iter().filter(|s| s.array.is_writable()) {
            // Partial stripes wait briefly for the rest of their stripe; a flush writes them.
            s.array.start_writeback();
        }
        let sups: Vec<Arc<Supervisor>> = served
            .iter()
            .map(|s| {
                let sup = Supervisor::start(&s.name, Arc::clone(&s.array));
                // A stopped check/repair's position, for `sync-action NAME check --resume`:
                // in the run directory, keyed by UUID, so it survives a restart.
                sup.set_scrub_state_file(
                    crate::control::run_dir()
                        .join(format!("scrub-{}.json", file_safe(&s.array.uuid_text()))),
                );
                sup
            })
            .collect();
        for sup in &sups {
            log_events(sup);
        }
        let control = match crate::control::server::start(&run_dir, sups.clone(), access) {
            Ok(c) => {
                note(format_args!(
                    "control socket {} (raidkit status / manage / sync-action / monitor)",
                    c.path().display()
                ));
                Some(c)
            }
            Err(e) => {
                note(format_args!(
                    "no control socket ({e:#}); `raidkit status` will not see {}",
                    if served.len() == 1 {
                        "this array"
                    } else {
                        "these arrays"
                    }
                ));
                None
            }
        };
        let watched = served
            .iter()
            .filter(|s| s.array.is_writable())
            .map(|s| (Arc::clone(&s.array), Arc::clone(&s.activity)))
            .collect();
        let idle = IdleClean::spawn(watched, IDLE_CLEAN, |arr, e| {
            note(format_args!("marking array {} clean: {e}", arr.uuid_text()))
        })?;
        Ok(Online {
            served,
            sups,
            control,
            idle: Some(idle),
        })
    }

    /// The arrays.
    pub fn served(&self) -> &[Served] {
        &self.served
    }

    /// Stop the timer, the background jobs and the control socket; flush every array and
    /// mark it clean. Every array is tried; the first failure is returned.
    pub fn shutdown(mut self) -> Result<()> {
        if let Some(mut t) = self.idle.take() {
            t.stop();
        }
        self.control.take();
        let mut first = None;
        for s in &self.sups {
            if let Err(e) = s.shutdown() {
                note(format_args!(
                    "stopping background work on '{}': {e}",
                    s.name()
                ));
                first.get_or_insert(anyhow::Error::new(e));
            }
        }
        for s in &self.served {
            if let Err(e) = s.array.mark_clean() {
                note(format_args!("marking '{}' clean: {e}", s.name));
                first.get_or_insert(e.into());
            }
        }
        first.map_or(Ok(()), Err)
    }
}
