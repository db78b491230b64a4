//! `raidkit serve`: export arrays over NBD (Network Block Device).
//!
//! Each array is assembled (writable unless `--read-only`), resynced first if it was not
//! stopped cleanly, and served by `raidkit-nbd`. Like md, the array is marked dirty by the
//! engine on the first write and marked clean again after writes have been idle for about
//! a second, and on a graceful stop (SIGINT/SIGTERM: stop accepting, finish in-flight
//! requests, flush, mark clean, exit 0).

mod backend;
pub mod config;
mod hints;

use crate::online::{self, ArraySpec, ControlArgs, Online, Served};
use anyhow::{anyhow, bail, Context, Result};
use backend::ArrayBackend;
use clap::{Args, FromArgMatches};
use config::{ArrayEntry, ConfigFile};
use raidkit_engine::Array;
use raidkit_nbd::{Export, Listen, Server, ServerConfig, TlsConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `serve`.
#[derive(Args, Debug)]
#[command(after_help = SERVE_HELP)]
pub struct ServeArgs {
    /// Listen on this Unix socket (default: ./raidkit-NAME.sock).
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    pub socket: Option<PathBuf>,
    /// Listen on TCP instead, e.g. 127.0.0.1:10809 or [::1]:10809 (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Export name (default: the array's name without its home host).
    #[arg(long, value_name = "NAME")]
    pub export: Option<String>,
    /// Serve read-only (the members are opened read-only; writes get EPERM).
    #[arg(long)]
    pub read_only: bool,
    /// TLS certificate chain (PEM), with --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "tls_psk"
    )]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM), with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TLS pre-shared keys: `username:hexkey` lines (psktool's format, as qemu/nbdkit).
    #[arg(long, value_name = "FILE")]
    pub tls_psk: Option<PathBuf>,
    /// Refuse clients that do not start TLS.
    #[arg(long)]
    pub tls_required: bool,
    /// Serve the arrays listed in this file instead of MEMBERs (see below).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["members", "export", "read_only"])]
    pub config: Option<PathBuf>,
    /// Start a dirty degraded array (md's --force).
    #[arg(long)]
    pub force: bool,
    /// Worker threads per client connection (requests processed concurrently); the
    /// default is 2 per CPU, from 4 to 16 (more threads than that cost parity writes on
    /// few cores, see docs/BENCHMARKS.md).
    #[arg(long, default_value_t = default_workers(), value_name = "N")]
    pub workers: usize,
    /// Upper bound of the RAID4/5/6 stripe cache's memory per array (e.g. 256M, 1G); the
    /// cache sizes itself below it from the workload and a quarter of MemAvailable.
    #[arg(long, value_name = "SIZE")]
    pub stripe_cache_max: Option<String>,
    /// Force a fixed stripe cache size in entries (one entry = 4 KiB per data member, as
    /// md's stripe_cache_size counts) instead of sizing it automatically.
    #[arg(
        long,
        value_name = "ENTRIES",
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with = "stripe_cache_max"
    )]
    pub stripe_cache: Option<u32>,
    /// Checksum sidecar of the array (from `create --checksums` or `checksums init`):
    /// every write updates it; scrubs use it for verdicts. A stale one is ignored loudly.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub checksums: Option<PathBuf>,
    /// The backup file of a reshape in progress that moves data in place (mdadm's
    /// `--backup-file`); the reshape is continued in the background.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub backup_file: Option<PathBuf>,
    #[command(flatten)]
    pub control: ControlArgs,
    #[command(flatten)]
    pub member: online::MemberArgs,
    /// Members of the array, in any order.
    #[arg(value_name = "MEMBER", required_unless_present = "config")]
    pub members: Vec<PathBuf>,
}

const SERVE_HELP: &str = "\
Config file (--config), TOML; command-line options override the top-level keys:
  socket = \"/run/raidkit.sock\"        # or: listen = \"127.0.0.1:10809\"
  tls_psk = \"/etc/raidkit/keys.psk\"   # or tls_cert + tls_key; tls_required = true
  [[array]]
  name = \"vol0\"
  members = [\"/dev/sdb1\", \"/dev/sdc1\", \"/dev/sdd1\"]
  read_only = false                    # optional; also: force = true, description = \"...\"

Examples:
  raidkit serve --export vol0 d0.img d1.img d2.img d3.img
  nbdinfo 'nbd+unix:///vol0?socket=./raidkit-vol0.sock'
  raidkit serve --listen 127.0.0.1:10809 --tls-psk keys.psk --tls-required /dev/sd[bcd]1";

impl ServeArgs {
    /// Parse `serve` arguments from words (the first is the command name), with the same
    /// defaults as the command line.
    pub fn from_words(words: &[String]) -> Result<ServeArgs> {
        let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        let m = cmd.try_get_matches_from(words)?;
        Ok(ServeArgs::from_arg_matches(&m)?)
    }
}

/// Default workers per connection: 2 per CPU, clamped to 4..=16.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() * 2)
        .unwrap_or(4)
        .clamp(4, 16)
}

/// The export name of an array: its name without the home host, or (0.90 superblocks
/// have no name field) its UUID, which the same array keeps on every machine.
pub fn export_name_of(arr: &Array) -> String {
    export_name(arr.name(), &arr.uuid_text())
}

/// [`export_name_of`] from the superblock's name and the UUID text.
pub fn export_name(md_name: &str, uuid: &str) -> String {
    let n = md_name.rsplit(':').next().unwrap_or(md_name);
    if n.is_empty() {
        uuid.into()
    } else {
        n.into()
    }
}

/// The arrays to serve and the file's top-level settings: from --config, or the one array
/// of the command line.
fn entries(a: &ServeArgs) -> Result<(ConfigFile, Vec<ArrayEntry>)> {
    match &a.config {
        Some(path) => {
            let mut cfg = config::load(path)?;
            let mut arrays = std::mem::take(&mut cfg.arrays);
            for e in &mut arrays {
                e.force |= a.force;
            }
            Ok((cfg, arrays))
        }
        None => Ok((
            ConfigFile::default(),
            vec![ArrayEntry {
                name: a.export.clone(),
                uuid: None,
                members: a.members.clone(),
                read_only: a.read_only,
                force: a.force,
                description: String::new(),
                checksums: a.checksums.clone(),
                backup_file: a.backup_file.clone(),
            }],
        )),
    }
}

/// TLS settings: command line first, then the config file.
struct TlsChoice {
    config: Option<TlsConfig>,
    required: bool,
    psk: Option<PathBuf>,
    cert: Option<PathBuf>,
}

fn tls_choice(a: &ServeArgs, file: &ConfigFile) -> Result<TlsChoice> {
    let cert = a.tls_cert.clone().or_else(|| file.tls_cert.clone());
    let key = a.tls_key.clone().or_else(|| file.tls_key.clone());
    let psk = a.tls_psk.clone().or_else(|| file.tls_psk.clone());
    let required = a.tls_required || file.tls_required;
    let config = match (&cert, &key, &psk) {
        (Some(c), Some(k), None) => Some(TlsConfig::from_x509(c, k)?),
        (None, None, Some(p)) => Some(TlsConfig::from_psk_file(p)?),
        (None, None, None) => None,
        _ => bail!("give either tls_cert and tls_key, or tls_psk"),
    };
    if required && config.is_none() {
        bail!("--tls-required needs --tls-cert/--tls-key or --tls-psk");
    }
    Ok(TlsChoice {
        config,
        required,
        psk,
        cert,
    })
}

/// Where to listen: command line first, then the config file, else
/// `./raidkit-NAME.sock` after the first export.
fn listen_on(a: &ServeArgs, file: &ConfigFile, first: &str) -> Listen {
    match (&a.listen, &file.listen) {
        (Some(l), _) => Listen::Tcp(l.clone()),
        (None, Some(l)) if a.socket.is_none() => Listen::Tcp(l.clone()),
        _ => {
            let p = a
                .socket
                .clone()
                .or_else(|| file.socket.clone())
                .unwrap_or_else(|| {
                    PathBuf::from(format!("raidkit-{}.sock", online::file_safe(first)))
                });
            Listen::Unix(std::path::absolute(&p).unwrap_or(p))
        }
    }
}

/// Assemble one array of the list and make its export.
fn open_export(a: &ServeArgs, e: &ArrayEntry) -> Result<(Served, Export)> {
    let spec = ArraySpec {
        members: e.members.clone(),
        read_only: e.read_only,
        force: e.force,
        metadata: None,
        checksums: e.checksums.clone(),
        backup_file: e.backup_file.clone(),
    };
    let arr = online::assemble(&spec).with_context(|| {
        format!(
            "assembling {}",
            e.members
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        )
    })?;
    let cache_max = a
        .stripe_cache_max
        .as_deref()
        .map(|v| crate::units::parse_size(v, 1))
        .transpose()
        .map_err(|e| anyhow!("--stripe-cache-max: {e}"))?;
    arr.configure_stripe_cache(cache_max, a.stripe_cache.map(|e| e as usize))
        .context("--stripe-cache / --stripe-cache-max")?;
    if let Some(u) = &e.uuid {
        if crate::control::names::uuid_digits(u)
            != crate::control::names::uuid_digits(&arr.uuid_text())
        {
            bail!(
                "the members given for {} hold array {}, not {u} as the config says: a device was renamed or replaced? `raidkit scan` lists what is on them",
                e.name.as_deref().unwrap_or("this [[array]]"),
                arr.uuid_text()
            );
        }
    }
    let name = e.name.clone().unwrap_or_else(|| export_name_of(&arr));
    outln_lossy!(
        "raidkit: export '{name}': {} array {} ({}, {}{})",
        arr.level(),
        arr.uuid_text(),
        crate::units::human(arr.size_bytes()),
        if e.read_only {
            "read-only"
        } else {
            "read-write"
        },
        if arr.is_degraded() { ", DEGRADED" } else { "" },
    );
    let served = Served::new(name.clone(), arr);
    let backend = ArrayBackend::new(
        Arc::clone(&served.array),
        e.read_only,
        Arc::clone(&served.activity),
    );
    let export = Export {
        name,
        description: e.description.clone(),
        backend: Arc::new(backend),
    };
    Ok((served, export))
}

/// Refuse arrays that share a member (the same file or device, through any path), as the
/// engine matches a member list's paths ([`raidkit_engine::same_member`]): two arrays of
/// one process would each write, cache and mark it as its own (a process's member lock
/// lets it open a member twice). Two read-only entries over the same members are refused
/// too: one array is served once (under one name).
fn check_no_shared_members(list: &[ArrayEntry]) -> Result<()> {
    let mut seen: Vec<(Option<raidkit_engine::Identity>, usize, &Path)> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        for m in &e.members {
            // A path that is no member at all is refused by the assembly, in its words.
            let id = raidkit_engine::member_identity(m, false).ok().flatten();
            let twin = seen
                .iter()
                .find(|&&(other, j, q)| j != i && raidkit_engine::same_member((m, id), (q, other)));
            if let Some((_, j, q)) = twin {
                bail!(
                    "{} (array #{}) and {} (array #{}) are the same device: a member belongs to one array only (read-only entries too)",
                    q.display(),
                    j + 1,
                    m.display(),
                    i + 1
                );
            }
            seen.push((id, i, m));
        }
    }
    Ok(())
}

/// Run `raidkit serve`.
pub fn run(a: ServeArgs) -> Result<()> {
    // First, so that nothing starts when the run directory cannot be trusted.
    crate::control::prepare_run_dir()?;
    a.member.apply()?;
    let (file, list) = entries(&a)?;
    let tls = tls_choice(&a, &file)?;
    check_no_shared_members(&list)?;
    // Assemble everything first, so that nothing is served if one array cannot start.
    let mut exports = Vec::new();
    let mut served: Vec<Served> = Vec::new();
    for e in &list {
        let (s, ex) = open_export(&a, e)?;
        if served.iter().any(|o| o.name == s.name) {
            bail!(
                "two arrays would be exported as {:?}: give each a distinct name",
                s.name
            );
        }
        served.push(s);
        exports.push(ex);
    }
    let names: Vec<String> = served.iter().map(|s| s.name.clone()).collect();
    let listen = listen_on(&a, &file, names.first().map_or("", String::as_str));
    let mut cfg = ServerConfig::new(exports);
    cfg.tls = tls.config;
    cfg.tls_required = tls.required;
    cfg.workers = a.workers.max(1);
    let server = Server::bind(cfg, &listen)?;
    let addr = server.local_addr();
    raidkit_nbd::shutdown_on_signals(server.handle(), |sig| {
        let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
        crate::sd::notify("STOPPING=1");
        online::note(format_args!(
            "{name}: finishing in-flight requests, flushing and marking clean (again to exit at once)"
        ));
    })
    .context("installing signal handlers")?;
    let online = Online::start(served, a.control.access())?;
    // Ready: signal handlers, supervisors and the control socket are in place.
    let hint = match (&tls.psk, &tls.cert) {
        (Some(p), _) => hints::Tls::Psk(p),
        (None, Some(c)) => hints::Tls::X509(c),
        (None, None) => hints::Tls::None,
    };
    hints::print_clients(&listen, &addr, &names, &hint);
    crate::sd::notify(&format!("READY=1\nSTATUS=serving {}", names.join(", ")));
    let res = server.run();
    let clean = online.shutdown();
    res?;
    clean?;
    online::note(format_args!("stopped; every array is flushed and clean"));
    Ok(())
}
