//! `raidkit mount`: assemble an array and serve it as one regular file over FUSE, so
//! `losetup`, `mkfs` and `mount` work without an NBD driver. Thin: the FUSE side is
//! `raidkit-fuse`.

use crate::cmd::parse_metadata;
use crate::online::{self, note, ArraySpec, ControlArgs, Online, Served};
use anyhow::{anyhow, Context, Result};
use clap::Args;
use raidkit_fuse::signals::{block_stop_signals, stop_on_signals, StopEvent};
use raidkit_fuse::{FuseError, MountConfig};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

const MOUNT_EXAMPLES: &str = "\
Examples:
  mkdir -p mnt
  raidkit mount d0.img d1.img d2.img d3.img mnt      # foreground; mnt/raidkit is the array
  losetup --find --show mnt/raidkit                   # e.g. /dev/loop0
  mkfs.ext4 /dev/loop0 && mount /dev/loop0 /srv/data
  ...
  umount /srv/data && losetup -d /dev/loop0
  kill -TERM <raidkit pid>       # or Ctrl-C, or `umount mnt`: flush, mark clean, exit 0

The file cannot be truncated to another size (EINVAL); opening it with O_TRUNC (cp, dd,
`>`) truncates nothing, as on a block device; writes past its end fail with ENOSPC. An array that was not stopped cleanly is resynced before the mount accepts writes.
";

/// `mount`.
#[derive(Args, Debug)]
#[command(after_help = MOUNT_EXAMPLES)]
pub struct MountArgs {
    /// Never write the members; writes to the file fail with EROFS.
    #[arg(long)]
    pub read_only: bool,
    /// Name of the file inside MOUNTPOINT (default: the array name without `HOMEHOST:`).
    #[arg(long, value_name = "FILE")]
    pub name: Option<String>,
    /// Bypass the page cache (no double caching under a loop device; no shared mmap).
    #[arg(long)]
    pub direct_io: bool,
    /// Threads serving FUSE requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Start a dirty degraded array (md's --force); accept stale members if needed to run.
    #[arg(long)]
    pub force: bool,
    /// Which superblock to use when a member carries both 0.90 and 1.x.
    #[arg(long, value_name = "0.90|1.0|1.1|1.2")]
    pub metadata: Option<String>,
    /// Checksum sidecar of the array (from `create --checksums` or `checksums init`):
    /// kept up to date by every write, used by scrub verdicts.
    #[arg(long, value_name = "PATH")]
    pub checksums: Option<PathBuf>,
    #[command(flatten)]
    pub control: ControlArgs,
    #[command(flatten)]
    pub member: crate::online::MemberArgs,
    /// Member devices or files, in any order.
    #[arg(required = true, num_args = 1.., value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
    /// Existing directory where the array file appears.
    #[arg(required = true, value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
}

/// Run `raidkit mount` in the foreground until SIGINT/SIGTERM/SIGHUP or `umount`.
pub fn run(a: MountArgs) -> Result<()> {
    if let Some(n) = &a.name {
        raidkit_fuse::check_file_name(n).context("--name")?;
    }
    // Before assembling (and maybe resyncing), so a typo fails fast.
    raidkit_fuse::check_mountpoint(&a.mountpoint)?;
    crate::control::prepare_run_dir()?;
    a.member.apply()?;
    let spec = ArraySpec {
        members: a.members.clone(),
        read_only: a.read_only,
        force: a.force,
        metadata: a.metadata.as_deref().map(parse_metadata).transpose()?,
        checksums: a.checksums.clone(),
        backup_file: None,
    };
    let arr = online::assemble(&spec)?;
    let file_name = a
        .name
        .clone()
        .unwrap_or_else(|| raidkit_fuse::default_file_name(arr.name()));
    let summary = format!(
        "{} {} ({})",
        arr.level(),
        arr.uuid_text(),
        crate::units::human(arr.size_bytes())
    );
    // Before any thread exists, so only the signal thread ever sees these signals.
    let signals = block_stop_signals()?;
    let name = crate::control::short_name(arr.name());
    let online = Online::start(vec![Served::new(name, arr)], a.control.access())?;
    let served = &online.served()[0];
    let mut cfg = MountConfig::new(&file_name);
    cfg.read_only = a.read_only;
    cfg.direct_io = a.direct_io;
    cfg.threads = usize::from(a.threads);
    cfg.activity = Some(Arc::clone(&served.activity));
    let mounted = raidkit_fuse::mount(Arc::clone(&served.array), &a.mountpoint, &cfg)?;
    let mp = mounted.mountpoint().to_path_buf();
    print_mounted(&summary, &mounted);
    let signal_thread =
        stop_on_signals(signals, mounted.stop_handle(), |ev: &StopEvent| {
            match &ev.result {
                Ok(()) => note(format_args!("{}: unmounting", ev.name)),
                Err(e @ FuseError::Busy { .. }) => {
                    note(format_args!("{}: not stopping: {e}", ev.name))
                }
                Err(e) => note(format_args!("{}: {e}", ev.name)),
            }
        })?;
    let stats = mounted.run()?;
    // A signal's stop ends the mount before the signal thread has said so: let it say
    // why the mount ended (returns at once after an unmount from outside).
    signal_thread.settle();
    online.shutdown()?;
    if cfg.read_only {
        note(format_args!("unmounted {}", mp.display()));
    } else {
        note(format_args!(
            "unmounted {}; {} written, members flushed, array marked clean",
            mp.display(),
            crate::units::human(stats.bytes_written)
        ));
    }
    if stats.io_errors > 0 {
        return Err(anyhow!(
            "{} request(s) failed with an IO error while mounted (see above)",
            stats.io_errors
        ));
    }
    Ok(())
}

/// Tell the user where the file is and how to stop. Errors on stdout (a closed pipe) are
/// ignored: the mount must run and stop cleanly anyway.
fn print_mounted(summary: &str, mounted: &raidkit_fuse::Mounted) {
    let file = mounted.file_path();
    let _ = (|| -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "raidkit: array {summary} mounted {} as {}",
            if mounted.is_read_only() {
                "read-only"
            } else {
                "read-write"
            },
            file.display()
        )?;
        writeln!(
            out,
            "  losetup --find --show {}   # then mkfs.ext4 / mount the loop device",
            file.display()
        )?;
        writeln!(
            out,
            "  stop: Ctrl-C, kill -TERM {}, or umount {} (losetup -d first)",
            std::process::id(),
            mounted.mountpoint().display()
        )?;
        out.flush()
    })();
}
