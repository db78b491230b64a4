//! `raidkit scan [PATH...]`: find arrays on devices and files (like `mdadm --examine
//! --scan`) and print, or write, the `serve --config` file that serves them under the same
//! export names on any machine: 1.x names without their home host, 0.90 arrays (no name
//! field) by UUID, and names an existing config gave (matched by UUID, else by members).

use crate::serve::config::{self, ArrayEntry, ConfigFile};
use anyhow::{bail, Context, Result};
use clap::Args;
use raidkit_engine::dev::{BlockDev, FileDev};
use raidkit_engine::sb::{probe, uuid_text, Role, Super};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// `scan`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  raidkit scan                      # every block device\n  raidkit scan /srv/raid/*.img      # these files\n  raidkit scan --config /etc/raidkit/vol.toml /dev/sd?   # write (or update) a serve config\n  raidkit serve --config /etc/raidkit/vol.toml"
)]
pub struct ScanArgs {
    /// Write the config here (keeping the names and settings of arrays it already lists,
    /// matched by UUID or members) instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// JSON: the arrays found, their members and export names.
    #[arg(long)]
    pub json: bool,
    /// Devices, files, or directories (their files); default: every block device.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// One member found.
struct Found {
    path: PathBuf,
    sb: Super,
}

/// One array found: its members in role order.
struct ArrayFound {
    uuid: String,
    md_name: String,
    metadata: &'static str,
    level: String,
    raid_disks: usize,
    members: Vec<Found>,
}

/// The paths to look at: directories expanded to their files and block devices;
/// without paths, every block device the kernel lists.
fn candidates(paths: &[PathBuf]) -> Vec<PathBuf> {
    if paths.is_empty() {
        let mut v: Vec<PathBuf> = std::fs::read_dir("/sys/class/block")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| Path::new("/dev").join(e.file_name()))
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("ram"))
            })
            .collect();
        v.sort();
        return v;
    }
    let mut v = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inner: Vec<PathBuf> = std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|q| {
                    std::fs::metadata(q)
                        .is_ok_and(|m| m.is_file() || m.file_type().is_block_device())
                })
                .collect();
            inner.sort();
            v.extend(inner);
        } else {
            v.push(p.clone());
        }
    }
    v
}

/// A name for a block device that survives renaming (`/dev/disk/by-id/...`, else
/// by-partuuid, by-uuid, by-path); a file's absolute path.
fn stable_path(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let is_block = std::fs::metadata(&abs).is_ok_and(|m| m.file_type().is_block_device());
    if !is_block {
        return abs;
    }
    let real = std::fs::canonicalize(&abs).unwrap_or(abs.clone());
    for dir in ["by-id", "by-partuuid", "by-uuid", "by-path"] {
        let mut links: Vec<PathBuf> = std::fs::read_dir(Path::new("/dev/disk").join(dir))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|l| std::fs::canonicalize(l).is_ok_and(|t| t == real))
            .collect();
        // by-id has several names per disk; the wwn- ones are least readable.
        links.sort_by_key(|l| (l.to_string_lossy().contains("/wwn-"), l.clone()));
        if let Some(l) = links.into_iter().next() {
            return l;
        }
    }
    abs
}

/// The superblock on `p`, if any; an error if `p` cannot be looked at (missing, not a
/// file or device, not ours to open). No superblock, or an unreadable one, is no error.
fn read_one(p: &Path) -> Result<Option<Found>> {
    super::check_member(p)?;
    let d = FileDev::open(p, false).with_context(|| format!("{}", p.display()))?;
    let Some((sb, _)) = probe(&d as &dyn BlockDev)
        .ok()
        .and_then(|pr| pr.found.into_iter().next())
    else {
        return Ok(None);
    };
    Ok(Some(Found {
        path: stable_path(p),
        sb,
    }))
}

/// Group members by array, in role order (spares last), newest event count first
/// within a role.
fn group(found: Vec<Found>) -> Vec<ArrayFound> {
    let mut by: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    for f in found {
        by.entry(uuid_text(f.sb.metadata(), &f.sb.uuid()))
            .or_default()
            .push(f);
    }
    by.into_iter()
        .map(|(uuid, mut members)| {
            members.sort_by_key(|m| match m.sb.own_role() {
                Role::Active(r) => (0, r, u64::MAX - m.sb.events()),
                _ => (1, 0, u64::MAX - m.sb.events()),
            });
            let sb = &members[0].sb;
            ArrayFound {
                uuid,
                md_name: sb.name(),
                metadata: sb.metadata().as_str(),
                level: super::examine::level_text(sb.level()),
                raid_disks: sb.raid_disks(),
                members,
            }
        })
        .collect()
}

/// The entry of an existing config this array had: same UUID, else a member in common.
fn previous<'a>(old: &'a [ArrayEntry], a: &ArrayFound) -> Option<&'a ArrayEntry> {
    let digits = crate::control::names::uuid_digits;
    old.iter()
        .find(|e| e.uuid.as_deref().and_then(digits) == digits(&a.uuid))
        .or_else(|| {
            old.iter().find(|e| {
                e.uuid.is_none()
                    && e.members.iter().any(|m| {
                        let m = std::fs::canonicalize(m).unwrap_or(m.clone());
                        a.members
                            .iter()
                            .any(|f| std::fs::canonicalize(&f.path).is_ok_and(|p| p == m))
                    })
            })
        })
}

/// The config entries: previous names and settings kept; new arrays named as `serve`
/// names them; a clash of names resolved by appending the UUID's first 8 digits.
fn entries(arrays: &[ArrayFound], old: &[ArrayEntry]) -> Vec<ArrayEntry> {
    let mut out: Vec<ArrayEntry> = arrays
        .iter()
        .map(|a| {
            let mut e = previous(old, a).cloned().unwrap_or(ArrayEntry {
                name: None,
                uuid: None,
                members: Vec::new(),
                read_only: false,
                force: false,
                description: String::new(),
                checksums: None,
                backup_file: None,
            });
            e.name = Some(
                e.name
                    .unwrap_or_else(|| crate::serve::export_name(&a.md_name, &a.uuid)),
            );
            e.uuid = Some(a.uuid.clone());
            e.members = a.members.iter().map(|m| m.path.clone()).collect();
            e
        })
        .collect();
    let clash: Vec<bool> = out
        .iter()
        .map(|e| out.iter().filter(|o| o.name == e.name).count() > 1)
        .collect();
    for ((e, a), c) in out.iter_mut().zip(arrays).zip(clash) {
        if c {
            let short: String = a.uuid.chars().take(8).collect();
            e.name = Some(format!("{}-{short}", e.name.as_deref().unwrap_or("")));
        }
    }
    out
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn path_q(p: &Path) -> String {
    quote(&p.display().to_string())
}

/// The config file's text: the previous top-level settings, then one table per array
/// with a comment saying what it is.
fn render(top: &ConfigFile, arrays: &[ArrayFound], es: &[ArrayEntry]) -> String {
    let mut s = String::from("# raidkit serve --config file, written by `raidkit scan`\n");
    for (k, v) in [
        ("socket", &top.socket),
        ("tls_cert", &top.tls_cert),
        ("tls_key", &top.tls_key),
        ("tls_psk", &top.tls_psk),
    ] {
        if let Some(v) = v {
            s.push_str(&format!("{k} = {}\n", path_q(v)));
        }
    }
    if let Some(l) = &top.listen {
        s.push_str(&format!("listen = {}\n", quote(l)));
    }
    if top.tls_required {
        s.push_str("tls_required = true\n");
    }
    for (a, e) in arrays.iter().zip(es) {
        s.push_str(&format!(
            "\n# {} {}, {} of {} members found, metadata {}{}\n[[array]]\n",
            a.level,
            a.uuid,
            a.members.len(),
            a.raid_disks,
            a.metadata,
            if a.md_name.is_empty() {
                " (no name field: named here)".to_string()
            } else {
                format!(", superblock name {}", a.md_name)
            }
        ));
        s.push_str(&format!(
            "name = {}\n",
            quote(e.name.as_deref().unwrap_or(""))
        ));
        s.push_str(&format!("uuid = {}\n", quote(&a.uuid)));
        let ms: Vec<String> = e.members.iter().map(|m| path_q(m)).collect();
        s.push_str(&format!("members = [{}]\n", ms.join(", ")));
        for (k, on) in [("read_only", e.read_only), ("force", e.force)] {
            if on {
                s.push_str(&format!("{k} = true\n"));
            }
        }
        if !e.description.is_empty() {
            s.push_str(&format!("description = {}\n", quote(&e.description)));
        }
        for (k, v) in [("checksums", &e.checksums), ("backup_file", &e.backup_file)] {
            if let Some(v) = v {
                s.push_str(&format!("{k} = {}\n", path_q(v)));
            }
        }
    }
    s
}

fn array_json(a: &ArrayFound, e: &ArrayEntry) -> Value {
    json!({
        "name": e.name,
        "uuid": a.uuid,
        "md_name": a.md_name,
        "metadata": a.metadata,
        "level": a.level,
        "raid_disks": a.raid_disks,
        "members": a.members.iter().map(|m| json!({
            "device": m.path.display().to_string(),
            "role": match m.sb.own_role() { Role::Active(r) => json!(r), _ => json!("spare") },
            "events": m.sb.events(),
        })).collect::<Vec<_>>(),
    })
}

/// Run `scan`.
pub fn run(a: ScanArgs) -> Result<()> {
    let mut found: Vec<Found> = Vec::new();
    for p in candidates(&a.paths) {
        match read_one(&p) {
            Ok(f) => found.extend(f),
            // Paths the user named (a typo, a glob that matched nothing, a device they
            // may not read) are said; of every block device, only the summary below.
            Err(e) if !a.paths.is_empty() => {
                eprintln!("raidkit: warning: {}; skipped", crate::out::error_text(&e))
            }
            Err(_) => {}
        }
    }
    let arrays = group(found);
    let old = match &a.config {
        Some(p) if p.exists() => config::load(p)?,
        _ => ConfigFile::default(),
    };
    let es = entries(&arrays, &old.arrays);
    if a.json {
        let list: Vec<Value> = arrays
            .iter()
            .zip(&es)
            .map(|(x, e)| array_json(x, e))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&list)?);
    }
    if arrays.is_empty() {
        bail!(
            "no MD superblock on {}",
            if a.paths.is_empty() {
                "any block device this user may read (run as root to see them all)".to_string()
            } else {
                "the paths given".to_string()
            }
        );
    }
    let text = render(&old, &arrays, &es);
    match &a.config {
        Some(p) => {
            config::parse(&text, p).context("the config written would not parse (a bug)")?;
            let tmp = p.with_extension("toml.tmp");
            std::fs::write(&tmp, &text).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, p).with_context(|| format!("renaming to {}", p.display()))?;
            eprintln!(
                "raidkit: wrote {} ({} array(s): {}); serve them with `raidkit serve --config {}`",
                p.display(),
                es.len(),
                es.iter()
                    .map(|e| e.name.clone().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(", "),
                p.display()
            );
        }
        None if !a.json => out!("{text}"),
        None => {}
    }
    Ok(())
}
