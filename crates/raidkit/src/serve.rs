//! `raidkit serve`: export arrays over NBD (Network Block Device).
//!
//! Each array is assembled (writable unless `--read-only`), resynced first if it was not
//! stopped cleanly, and served by `raidkit-nbd`. Like md, the array is marked dirty by the
//! engine on the first write and marked clean again after writes have been idle for about
//! a second, and on a graceful stop (SIGINT/SIGTERM: stop accepting, finish in-flight
//! requests, flush, mark clean, exit 0).
//!
//! Backend semantics: FUA = write then flush of every member; TRIM is accepted and does
//! nothing (md has no discard bookkeeping to keep in sync, and data after a trim is
//! unspecified anyway, so leaving it is correct and keeps parity consistent); WRITE_ZEROES
//! writes zero buffers in 1 MiB pieces (never "fast"). Preferred block size: the full
//! stripe (chunk × data disks) when that is a power of two, else the largest power of
//! two dividing it; minimum 512, or 4096 when a member has 4 KiB logical blocks.

use anyhow::{anyhow, bail, Context, Result};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{Array, AssembleOptions, BlockDev, EngineError, FileDev};
use raidkit_layout::Level;
use raidkit_nbd::{Backend, Export, Listen, Server, ServerConfig, TlsConfig};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `serve`.
#[derive(clap::Args, Debug)]
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
    #[arg(long, value_name = "ENTRIES", value_parser = clap::value_parser!(u32).range(1..))]
    pub stripe_cache: Option<u32>,
    /// Checksum sidecar of the array (from `create --checksums` or `checksums init`):
    /// every write updates it; scrubs use it for verdicts. A stale one is ignored loudly.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub checksums: Option<PathBuf>,
    /// Members of the array, in any order.
    #[arg(value_name = "MEMBER", required_unless_present = "config")]
    pub members: Vec<PathBuf>,
}

const SERVE_HELP: &str = "\
Config file (--config), a TOML subset; command-line options override the top-level keys:
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

/// Byte-size granularity of write-zeroes pieces.
const ZERO_PIECE: usize = 1 << 20;
/// Writes idle this long → mark the array clean.
const IDLE_CLEAN: Duration = Duration::from_secs(1);

/// When the array was last written, to mark it clean after an idle second.
struct Activity {
    epoch: Instant,
    last_write_ms: AtomicU64,
    dirty: AtomicBool,
}

impl Activity {
    fn touch(&self) {
        // Relaxed: the idle timer only needs to see the values eventually, and the
        // array's own dirty marking orders the writes themselves. Skip the store when
        // already set, so concurrent writers do not bounce the cache line.
        let now = self.epoch.elapsed().as_millis() as u64;
        if self.last_write_ms.load(Ordering::Relaxed) != now {
            self.last_write_ms.store(now, Ordering::Relaxed);
        }
        if !self.dirty.load(Ordering::Relaxed) {
            self.dirty.store(true, Ordering::Relaxed);
        }
    }
}

/// An assembled array as an NBD backend.
pub struct ArrayBackend {
    arr: Arc<Array>,
    read_only: bool,
    sizes: (u32, u32, u32),
    zeroes: Vec<u8>,
    activity: Arc<Activity>,
    description: String,
}

fn io_err(e: EngineError) -> io::Error {
    match e {
        EngineError::OutOfRange { .. } => {
            io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
        }
        EngineError::Io { ref source, .. } => io::Error::new(source.kind(), e.to_string()),
        other => io::Error::other(other.to_string()),
    }
}

impl ArrayBackend {
    fn new(arr: Arc<Array>, members: &[PathBuf], read_only: bool) -> ArrayBackend {
        let min = members
            .iter()
            .filter_map(|p| FileDev::open(p, false).ok())
            .map(|d| d.logical_block_size())
            .max()
            .unwrap_or(512)
            .clamp(512, 4096);
        let g = arr.geometry();
        let data_disks = match g.level {
            Level::Raid0 => g.raid_disks,
            Level::Raid10 if g.copies() > 0 && g.raid_disks.is_multiple_of(g.copies()) => {
                g.raid_disks / g.copies()
            }
            Level::Raid10 => 1,
            _ => g.data_disks(),
        };
        let stripe = match g.level {
            Level::Raid1 | Level::Linear => 4096,
            _ => g.chunk_sectors * 512 * data_disks.max(1) as u64,
        };
        let max = raidkit_nbd::DEFAULT_MAX_PAYLOAD;
        let pref = if stripe == 0 {
            4096
        } else if stripe.is_power_of_two() {
            stripe
        } else {
            1u64 << stripe.trailing_zeros()
        };
        let pref = pref.clamp(u64::from(min), u64::from(max)) as u32;
        let description = format!(
            "raidkit {} array {} ({}, {} members)",
            arr.level(),
            arr.uuid_text(),
            arr.name(),
            g.raid_disks
        );
        ArrayBackend {
            arr,
            read_only,
            sizes: (min, pref, max),
            zeroes: vec![0u8; ZERO_PIECE],
            activity: Arc::new(Activity {
                epoch: Instant::now(),
                last_write_ms: AtomicU64::new(0),
                dirty: AtomicBool::new(false),
            }),
            description,
        }
    }
}

impl Backend for ArrayBackend {
    fn size(&self) -> u64 {
        self.arr.size_bytes()
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.arr.read(offset, buf).map_err(io_err)
    }
    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> io::Result<()> {
        self.activity.touch();
        let r = self.arr.write(offset, buf).map_err(io_err);
        self.activity.touch();
        r?;
        if fua {
            self.arr.flush().map_err(io_err)?;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.arr.flush().map_err(io_err)
    }
    /// A no-op: see the module documentation.
    fn trim(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, _no_hole: bool) -> io::Result<()> {
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(ZERO_PIECE as u64) as usize;
            let piece = self
                .zeroes
                .get(..n)
                .ok_or_else(|| io::Error::other("zero buffer"))?;
            self.write(offset + done, piece, false)?;
            done += n as u64;
        }
        Ok(())
    }
    fn block_sizes(&self) -> (u32, u32, u32) {
        self.sizes
    }
    /// Every connection writes through the same array and a flush flushes every member.
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn description(&self) -> String {
        self.description.clone()
    }
}

// ---------------------------------------------------------------- config file

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Str(String),
    Bool(bool),
    List(Vec<String>),
}

type Table = HashMap<String, Val>;

/// Parse the TOML subset: `key = value` (strings, booleans, arrays of strings, possibly
/// over several lines), `[[array]]` tables, `#` comments.
fn parse_config(text: &str) -> Result<(Table, Vec<Table>)> {
    let mut top = Table::new();
    let mut arrays: Vec<Table> = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let ln = i + 1;
        let line = strip_comment(raw).trim().to_string();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('[') && !line.contains('=') {
            if line.replace(' ', "") == "[[array]]" {
                arrays.push(Table::new());
                continue;
            }
            bail!("line {ln}: unknown section {line} (only [[array]] is known)");
        }
        let Some((k, v)) = line.split_once('=') else {
            bail!("line {ln}: expected key = value");
        };
        let key = k.trim().to_string();
        let mut v = v.trim().to_string();
        if v.starts_with('[') {
            while !v.ends_with(']') {
                let Some((_, more)) = lines.next() else {
                    bail!("line {ln}: unterminated array");
                };
                v.push(' ');
                v.push_str(strip_comment(more).trim());
            }
        }
        let val = parse_value(&v).map_err(|e| anyhow!("line {ln}: {e}"))?;
        let table = arrays.last_mut().unwrap_or(&mut top);
        if table.insert(key.clone(), val).is_some() {
            bail!("line {ln}: {key} given twice");
        }
    }
    Ok((top, arrays))
}

fn strip_comment(s: &str) -> &str {
    let mut q: Option<char> = None;
    let mut esc = false;
    for (i, c) in s.char_indices() {
        match q {
            Some('"') if esc => esc = false,
            Some('"') if c == '\\' => esc = true,
            Some(open) if c == open => q = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => q = Some(c),
            None if c == '#' => return &s[..i],
            None => {}
        }
    }
    s
}

fn parse_string(s: &str) -> Result<(String, &str), String> {
    let mut chars = s.char_indices();
    let quote = match chars.next() {
        Some((_, c @ ('"' | '\''))) => c,
        _ => return Err(format!("expected a quoted string at {s:?}")),
    };
    let mut out = String::new();
    let mut esc = false;
    for (i, c) in chars {
        if esc {
            out.push(match c {
                'n' => '\n',
                't' => '\t',
                other => other,
            });
            esc = false;
        } else if c == '\\' && quote == '"' {
            esc = true;
        } else if c == quote {
            return Ok((out, &s[i + 1..]));
        } else {
            out.push(c);
        }
    }
    Err("unterminated string".into())
}

fn parse_value(v: &str) -> Result<Val, String> {
    match v {
        "true" => return Ok(Val::Bool(true)),
        "false" => return Ok(Val::Bool(false)),
        _ => {}
    }
    if let Some(inner) = v.strip_prefix('[') {
        let mut rest = inner.trim_start();
        let mut items = Vec::new();
        loop {
            if let Some(r) = rest.strip_prefix(']') {
                if !r.trim().is_empty() {
                    return Err("unexpected text after ]".into());
                }
                return Ok(Val::List(items));
            }
            let (s, r) = parse_string(rest)?;
            items.push(s);
            rest = r.trim_start();
            if let Some(r) = rest.strip_prefix(',') {
                rest = r.trim_start();
            } else if !rest.starts_with(']') {
                return Err("expected , or ] in array".into());
            }
        }
    }
    let (s, rest) = parse_string(v)?;
    if !rest.trim().is_empty() {
        return Err("unexpected text after the string".into());
    }
    Ok(Val::Str(s))
}

fn get_str(t: &Table, k: &str) -> Result<Option<String>> {
    match t.get(k) {
        None => Ok(None),
        Some(Val::Str(s)) => Ok(Some(s.clone())),
        Some(_) => bail!("{k} must be a string"),
    }
}

fn get_bool(t: &Table, k: &str) -> Result<bool> {
    match t.get(k) {
        None => Ok(false),
        Some(Val::Bool(b)) => Ok(*b),
        Some(_) => bail!("{k} must be true or false"),
    }
}

struct ArraySpec {
    name: Option<String>,
    members: Vec<PathBuf>,
    read_only: bool,
    force: bool,
    description: String,
    checksums: Option<PathBuf>,
}

const TOP_KEYS: &[&str] = &[
    "socket",
    "listen",
    "tls_cert",
    "tls_key",
    "tls_psk",
    "tls_required",
];
const ARRAY_KEYS: &[&str] = &[
    "name",
    "members",
    "read_only",
    "force",
    "description",
    "checksums",
];

// ---------------------------------------------------------------- command

fn export_name_of(arr: &Array) -> String {
    let n = arr.name();
    let n = n.rsplit(':').next().unwrap_or(n);
    if n.is_empty() {
        "raidkit".into()
    } else {
        n.into()
    }
}

fn file_safe(n: &str) -> String {
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

struct Served {
    name: String,
    arr: Arc<Array>,
    activity: Arc<Activity>,
}

fn open_array(spec: &ArraySpec) -> Result<(Arc<Array>, ArrayBackend)> {
    let opts = AssembleOptions {
        writable: !spec.read_only,
        force: spec.force,
        metadata: None,
        report_only: false,
    };
    let arr = crate::cmd::assemble_noted(&spec.members, &opts)?;
    // Attach the sidecar before anything writes superblocks, so it follows the event count.
    if let Some(p) = &spec.checksums {
        if crate::cmd::attach_sidecar(&arr, p)? {
            eprintln!(
                "raidkit: array {}: checksum sidecar {}",
                arr.uuid_text(),
                p.display()
            );
        }
    }
    if !spec.read_only && arr.needs_resync() {
        eprintln!(
            "raidkit: array {} was not stopped cleanly; resyncing redundancy before serving writes",
            arr.uuid_text()
        );
        let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {})?;
        arr.mark_clean()?;
        eprintln!(
            "raidkit: resync done ({} sectors rewritten)",
            rep.sectors_written
        );
    }
    let arr = Arc::new(arr);
    let be = ArrayBackend::new(Arc::clone(&arr), &spec.members, spec.read_only);
    Ok((arr, be))
}

/// Default workers per connection: 2 per CPU, clamped to 4..=16.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() * 2)
        .unwrap_or(4)
        .clamp(4, 16)
}

/// Run `raidkit serve`.
pub fn cmd_serve(a: ServeArgs) -> Result<()> {
    let (top, specs) = if let Some(cfg) = &a.config {
        let text =
            std::fs::read_to_string(cfg).with_context(|| format!("reading {}", cfg.display()))?;
        let (top, tables) = parse_config(&text).with_context(|| format!("in {}", cfg.display()))?;
        if let Some(k) = top.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
            bail!("{}: unknown key {k}", cfg.display());
        }
        if tables.is_empty() {
            bail!("{}: no [[array]] sections", cfg.display());
        }
        let mut specs = Vec::new();
        for (i, t) in tables.iter().enumerate() {
            let ctx = || format!("{}: array #{}", cfg.display(), i + 1);
            if let Some(k) = t.keys().find(|k| !ARRAY_KEYS.contains(&k.as_str())) {
                bail!("{}: unknown key {k}", ctx());
            }
            let members = match t.get("members") {
                Some(Val::List(m)) if !m.is_empty() => m.iter().map(PathBuf::from).collect(),
                _ => bail!("{}: members = [\"...\", ...] is required", ctx()),
            };
            specs.push(ArraySpec {
                name: get_str(t, "name").with_context(ctx)?,
                members,
                read_only: get_bool(t, "read_only").with_context(ctx)?,
                force: get_bool(t, "force").with_context(ctx)? || a.force,
                description: get_str(t, "description")
                    .with_context(ctx)?
                    .unwrap_or_default(),
                checksums: get_str(t, "checksums")
                    .with_context(ctx)?
                    .map(PathBuf::from),
            });
        }
        (top, specs)
    } else {
        (
            Table::new(),
            vec![ArraySpec {
                name: a.export.clone(),
                members: a.members.clone(),
                read_only: a.read_only,
                force: a.force,
                description: String::new(),
                checksums: a.checksums.clone(),
            }],
        )
    };
    let path_opt = |cli: &Option<PathBuf>, key: &str| -> Result<Option<PathBuf>> {
        Ok(match cli {
            Some(p) => Some(p.clone()),
            None => get_str(&top, key)?.map(PathBuf::from),
        })
    };
    let tls_cert = path_opt(&a.tls_cert, "tls_cert")?;
    let tls_key = path_opt(&a.tls_key, "tls_key")?;
    let tls_psk = path_opt(&a.tls_psk, "tls_psk")?;
    let tls_required = a.tls_required || get_bool(&top, "tls_required")?;
    let tls = match (&tls_cert, &tls_key, &tls_psk) {
        (Some(c), Some(k), None) => Some(TlsConfig::from_x509(c, k)?),
        (None, None, Some(p)) => Some(TlsConfig::from_psk_file(p)?),
        (None, None, None) => None,
        _ => bail!("give either tls_cert and tls_key, or tls_psk"),
    };
    if tls_required && tls.is_none() {
        bail!("--tls-required needs --tls-cert/--tls-key or --tls-psk");
    }

    // Assemble everything first, so that nothing is served if one array cannot start.
    let mut exports = Vec::new();
    let mut served = Vec::new();
    for spec in &specs {
        let cache_max = a
            .stripe_cache_max
            .as_deref()
            .map(|v| crate::units::parse_size(v, 1))
            .transpose()
            .map_err(|e| anyhow!("--stripe-cache-max: {e}"))?;
        let (arr, be) = open_array(spec).with_context(|| {
            format!(
                "assembling {}",
                spec.members
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })?;
        arr.configure_stripe_cache(cache_max, a.stripe_cache.map(|e| e as usize))
            .context("--stripe-cache / --stripe-cache-max")?;
        if !spec.read_only {
            arr.start_writeback();
        }
        let name = spec.name.clone().unwrap_or_else(|| export_name_of(&arr));
        if served.iter().any(|s: &Served| s.name == name) {
            bail!("two arrays would be exported as {name:?}: give each a distinct name");
        }
        println!(
            "raidkit: export '{name}': {} array {} ({}, {}{})",
            arr.level(),
            arr.uuid_text(),
            crate::units::human(arr.size_bytes()),
            if spec.read_only {
                "read-only"
            } else {
                "read-write"
            },
            if arr.is_degraded() { ", DEGRADED" } else { "" },
        );
        served.push(Served {
            name: name.clone(),
            arr: Arc::clone(&arr),
            activity: Arc::clone(&be.activity),
        });
        exports.push(Export {
            name,
            description: spec.description.clone(),
            backend: Arc::new(be),
        });
    }

    let listen = match (&a.listen, get_str(&top, "listen")?) {
        (Some(l), _) => Listen::Tcp(l.clone()),
        (None, Some(l)) if a.socket.is_none() => Listen::Tcp(l),
        _ => {
            let p = match (&a.socket, get_str(&top, "socket")?) {
                (Some(p), _) => p.clone(),
                (None, Some(p)) => PathBuf::from(p),
                (None, None) => PathBuf::from(format!(
                    "raidkit-{}.sock",
                    file_safe(&served.first().map(|s| s.name.clone()).unwrap_or_default())
                )),
            };
            Listen::Unix(std::path::absolute(&p).unwrap_or(p))
        }
    };
    let mut cfg = ServerConfig::new(exports);
    cfg.tls = tls;
    cfg.tls_required = tls_required;
    cfg.workers = a.workers.max(1);
    let server = Server::bind(cfg, &listen)?;
    let addr = server.local_addr();
    let handle = server.handle();
    raidkit_nbd::shutdown_on_signals(handle.clone(), |sig| {
        let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
        eprintln!("raidkit: {name}: finishing in-flight requests, flushing and marking clean (again to exit at once)");
    })
    .context("installing signal handlers")?;

    // Background jobs, member management and events for each array; `raidkit status`,
    // `manage`, `sync-action` and `monitor` reach them through the control socket.
    let sups: Vec<Arc<raidkit_engine::supervisor::Supervisor>> = served
        .iter()
        .map(|s| {
            let sup = raidkit_engine::supervisor::Supervisor::start(&s.name, Arc::clone(&s.arr));
            // A stopped check/repair's position, for `sync-action NAME check --resume`: in
            // the run directory, keyed by UUID, so it survives a restart of this process.
            sup.set_scrub_state_file(
                crate::control::run_dir()
                    .join(format!("scrub-{}.json", file_safe(&s.arr.uuid_text()))),
            );
            sup
        })
        .collect();
    let _control = match crate::control::start(sups.clone()) {
        Ok(c) => {
            eprintln!(
                "raidkit: control socket {} (raidkit status / manage / sync-action / monitor)",
                c.path().display()
            );
            Some(c)
        }
        Err(e) => {
            eprintln!(
                "raidkit: no control socket ({e:#}); `raidkit status` will not see these arrays"
            );
            None
        }
    };

    // Ready: signal handlers, supervisors and the control socket are in place.
    print_clients(
        &listen,
        &addr,
        &served,
        tls_psk.as_deref(),
        tls_cert.is_some(),
    );

    // Mark arrays clean after a second without writes, as md does.
    let stop_timer = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = Arc::clone(&stop_timer);
        let watched: Vec<(Arc<Array>, Arc<Activity>)> = served
            .iter()
            .map(|s| (Arc::clone(&s.arr), Arc::clone(&s.activity)))
            .collect();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(200));
                for (arr, act) in &watched {
                    let now = act.epoch.elapsed().as_millis() as u64;
                    let last = act.last_write_ms.load(Ordering::SeqCst);
                    if act.dirty.load(Ordering::SeqCst)
                        && now.saturating_sub(last) >= IDLE_CLEAN.as_millis() as u64
                    {
                        act.dirty.store(false, Ordering::SeqCst);
                        if let Err(e) = arr.mark_clean() {
                            eprintln!("raidkit: marking array {} clean: {e}", arr.uuid_text());
                            act.dirty.store(true, Ordering::SeqCst);
                        }
                    }
                }
            }
        })
    };

    let res = server.run();
    stop_timer.store(true, Ordering::SeqCst);
    let _ = timer.join();
    for s in &sups {
        if let Err(e) = s.shutdown() {
            eprintln!("raidkit: stopping background work on '{}': {e}", s.name());
        }
    }
    let mut clean_err = None;
    for s in &served {
        if let Err(e) = s.arr.mark_clean() {
            eprintln!("raidkit: marking export '{}' clean: {e}", s.name);
            clean_err.get_or_insert(e);
        }
    }
    res?;
    if let Some(e) = clean_err {
        return Err(e.into());
    }
    eprintln!("raidkit: stopped; every array is flushed and clean");
    Ok(())
}

fn first_psk_user(p: &Path) -> String {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .and_then(|l| l.split_once(':'))
                .map(|(u, _)| u.to_string())
        })
        .unwrap_or_else(|| "USER".into())
}

fn print_clients(listen: &Listen, addr: &str, served: &[Served], psk: Option<&Path>, x509: bool) {
    let tls_q = match psk {
        Some(p) => format!("&tls-psk-file={}", p.display()),
        None if x509 => "&tls-certificates=DIR".to_string(),
        None => String::new(),
    };
    let user = psk
        .map(|p| format!("{}@", first_psk_user(p)))
        .unwrap_or_default();
    let s = if psk.is_some() || x509 { "s" } else { "" };
    match listen {
        Listen::Unix(_) => println!("raidkit: listening on unix socket {addr}"),
        Listen::Tcp(_) => println!("raidkit: listening on tcp {addr}"),
    }
    for e in served {
        let n = &e.name;
        let uri = match listen {
            Listen::Unix(_) => format!("nbd{s}+unix://{user}/{n}?socket={addr}{tls_q}"),
            Listen::Tcp(_) => {
                let q = tls_q
                    .strip_prefix('&')
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default();
                format!("nbd{s}://{user}{addr}/{n}{q}")
            }
        };
        println!("  nbdinfo '{uri}'");
        println!("  qemu-img info '{uri}'");
        println!("  nbdfuse MOUNTPOINT '{uri}' &   # then use MOUNTPOINT/nbd");
        match listen {
            Listen::Unix(_) => println!("  nbd-client -unix {addr} -N {n} /dev/nbd0"),
            Listen::Tcp(_) => {
                let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "10809"));
                println!("  nbd-client {host} {port} -N {n} /dev/nbd0");
            }
        }
    }
    println!("raidkit: serving; stop with Ctrl-C or SIGTERM (arrays are flushed and marked clean)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_subset() {
        let (top, arrays) = parse_config(
            "# c\nsocket = \"/tmp/x.sock\" # trailing\ntls_required = true\n\n[[array]]\nname = 'a#1'\nmembers = [\"m0\", 'm1',\n  \"m\\\"2\", # c\n]\nread_only = true\n[[ array ]]\nmembers=[\"z\"]\n",
        )
        .unwrap();
        assert_eq!(top.get("socket"), Some(&Val::Str("/tmp/x.sock".into())));
        assert_eq!(top.get("tls_required"), Some(&Val::Bool(true)));
        assert_eq!(arrays.len(), 2);
        assert_eq!(arrays[0].get("name"), Some(&Val::Str("a#1".into())));
        assert_eq!(
            arrays[0].get("members"),
            Some(&Val::List(vec!["m0".into(), "m1".into(), "m\"2".into()]))
        );
        assert_eq!(arrays[0].get("read_only"), Some(&Val::Bool(true)));
        assert_eq!(arrays[1].get("members"), Some(&Val::List(vec!["z".into()])));
        assert!(parse_config("[x]\n").is_err());
        assert!(parse_config("a = \"x\n").is_err());
        assert!(parse_config("a = [\"x\"\n").is_err());
        assert!(parse_config("a = 1\n").is_err());
        assert!(parse_config("a = \"1\"\na = \"2\"\n").is_err());
    }
}
