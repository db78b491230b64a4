//! The control socket of a serving process (`serve`, `mount`): JSON lines over a Unix
//! socket in the run directory, one socket per serving process, arrays addressed by their
//! stable name. The server side is [`server`]; the commands' side is [`client`];
//! who may ask what is [`peer`].
//!
//! ## The run directory
//! `$RAIDKIT_RUN_DIR`, else `/run/raidkit` (root), else `$XDG_RUNTIME_DIR/raidkit`, else
//! `/tmp/raidkit-$UID`. It is used only if it is a real directory (not a symlink), owned
//! by the user (a client also accepts root's), and not writable by group or others: a
//! directory another user made first (a planted `/tmp/raidkit-1000`) could hold a fake
//! control socket or a symlink where a state file goes, so it is refused, saying how to
//! fix it. When raidkit creates it, it is mode 0700 (0755 for root's `/run/raidkit`, so
//! other users see the sockets and are told they may not use them).

pub mod client;
pub mod names;
pub mod peer;
pub mod protocol;
pub mod server;

use anyhow::{bail, Context, Result};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Root's run directory, which other users' commands look in too.
pub const SYSTEM_RUN_DIR: &str = "/run/raidkit";

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The run directory's path (not checked; see [`prepare_run_dir`] and [`client_run_dirs`]).
pub fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RAIDKIT_RUN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let uid = euid();
    if uid == 0 {
        return PathBuf::from(SYSTEM_RUN_DIR);
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&x).join("raidkit");
    }
    PathBuf::from(format!("/tmp/raidkit-{uid}"))
}

/// The name of a user id (`root`, `uid 1234` when it has none).
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data filled by getpwuid_r; buf outlives the call and the
    // use of the returned pointers (the name is copied out before buf is dropped).
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut res: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut res);
        if rc == 0 && !res.is_null() && !pw.pw_name.is_null() {
            if let Ok(n) = std::ffi::CStr::from_ptr(pw.pw_name).to_str() {
                return n.to_string();
            }
        }
    }
    format!("uid {uid}")
}

/// Check that `dir` is a directory owned by one of `owners` and not writable by group
/// or others; say what is wrong and what to do otherwise.
pub fn check_dir(dir: &Path, owners: &[u32]) -> Result<()> {
    let md = std::fs::symlink_metadata(dir)
        .with_context(|| format!("run directory {}", dir.display()))?;
    let fix = "remove it (as its owner or root), or point RAIDKIT_RUN_DIR (or XDG_RUNTIME_DIR) at a directory of yours with mode 0700";
    if md.file_type().is_symlink() {
        bail!(
            "run directory {} is a symbolic link, which raidkit does not follow: {fix}",
            dir.display()
        );
    }
    if !md.is_dir() {
        bail!("run directory {} is not a directory: {fix}", dir.display());
    }
    if !owners.contains(&md.uid()) {
        bail!(
            "run directory {} belongs to {}, not to you ({}): another user may have made it to intercept your control socket and state files, so it is not used; {fix}",
            dir.display(),
            user_name(md.uid()),
            user_name(euid())
        );
    }
    if md.mode() & 0o022 != 0 {
        bail!(
            "run directory {} is writable by {} (mode {:04o}): other users could replace the control socket or plant links there, so it is not used; run `chmod go-w {}`, or {fix}",
            dir.display(),
            if md.mode() & 0o002 != 0 { "everyone" } else { "its group" },
            md.mode() & 0o7777,
            dir.display()
        );
    }
    Ok(())
}

/// The run directory for a serving process: created if absent (mode 0700, or 0755 for
/// root), then checked (ours, not writable by others).
pub fn prepare_run_dir() -> Result<PathBuf> {
    let dir = run_dir();
    if std::fs::symlink_metadata(&dir).is_err() {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let mode = if euid() == 0 { 0o755 } else { 0o700 };
        match std::fs::DirBuilder::new().mode(mode).create(&dir) {
            Ok(()) => {
                // The umask may have taken bits away; never added any.
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                    .with_context(|| format!("setting the mode of {}", dir.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    check_dir(&dir, &[euid()])?;
    Ok(dir)
}

/// The run directories a command looks in: its own, and root's (unless it is root or
/// RAIDKIT_RUN_DIR names one), so that a user sees root's arrays (and is told when they
/// may not use them).
pub fn client_run_dirs() -> Vec<PathBuf> {
    let own = run_dir();
    let mut v = vec![own.clone()];
    let system = PathBuf::from(SYSTEM_RUN_DIR);
    if euid() != 0 && std::env::var_os("RAIDKIT_RUN_DIR").is_none() && own != system {
        v.push(system);
    }
    v
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
