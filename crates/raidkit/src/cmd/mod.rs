//! Offline commands: they open the members themselves (no running array involved), do
//! their work through the engine and print. `create`, `examine`, `detail`, `export`,
//! `import`, `check`, `repair`, `checksums`, `demo`, and the tools (`advise`, `probe`,
//! `trace analyze`, `bench`).

pub mod advise;
pub mod bench_io;
pub mod bench_parity;
pub mod bench_plot;
pub mod bitmap;
pub mod checksums;
pub mod create;
pub mod demo;
pub mod detail;
pub mod examine;
pub mod grow;
pub mod install_units;
pub mod probe;
pub mod scan;
pub mod scrub;
pub mod trace;
pub mod transfer;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::sb::Metadata;
use raidkit_engine::Array;
use std::path::{Path, PathBuf};

/// Options shared by commands that assemble an existing array.
#[derive(Args, Debug, Clone)]
pub struct AssembleArgs {
    /// Start a dirty degraded array (md's --force); accept stale members if needed to run.
    #[arg(long)]
    pub force: bool,
    /// Which superblock to use when a member carries both 0.90 and 1.x.
    #[arg(long, value_name = "0.90|1.0|1.1|1.2")]
    pub metadata: Option<String>,
    /// The backup file of a reshape in progress that moves data in place (the file given
    /// to `mdadm --grow --backup-file` or `raidkit grow --backup-file`).
    #[arg(long, value_name = "FILE")]
    pub backup_file: Option<PathBuf>,
    /// Member devices or files, in any order.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
    #[command(flatten)]
    pub tls: crate::online::MemberTlsArgs,
}

/// A progress bar on stderr counting bytes.
pub fn bar(total: u64, msg: &'static str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    if let Ok(st) = ProgressStyle::with_template(
        "{msg:>9} [{bar:40.cyan/blue}] {percent:>3}% {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    ) {
        pb.set_style(st.progress_chars("=> "));
    }
    pb.set_message(msg);
    pb
}

/// `--metadata` words.
pub fn parse_metadata(s: &str) -> Result<Metadata> {
    Metadata::parse(s)
        .ok_or_else(|| anyhow!("unknown metadata version {s:?}: use 0.90, 1.0, 1.1 or 1.2"))
}

/// Assembly options from the shared arguments.
pub fn asm_opts(a: &AssembleArgs, writable: bool) -> Result<AssembleOptions> {
    Ok(AssembleOptions {
        writable,
        force: a.force,
        metadata: a.metadata.as_deref().map(parse_metadata).transpose()?,
        report_only: false,
        backup_file: a.backup_file.clone(),
    })
}

/// Refuse a member path that is neither a regular file nor a block device before anything
/// opens it (opening a FIFO for reading waits for a writer forever). Paths that do not
/// exist are left to the open, which says so.
pub fn check_member(p: &Path) -> Result<()> {
    let Ok(md) = std::fs::metadata(p) else {
        return Ok(());
    };
    let Some(what) = raidkit_engine::not_member_kind(md.file_type()) else {
        return Ok(());
    };
    bail!(
        "{} is {what}: members are regular files or block devices",
        p.display()
    )
}

/// [`check_member`] for each path.
pub fn check_members(paths: &[PathBuf]) -> Result<()> {
    paths.iter().try_for_each(|p| check_member(p))
}

/// Assemble after checking the member paths (see [`check_member`]), then tell the admin
/// what the assembly worked around (a damaged bitmap ignored...): the array runs, but not
/// as its metadata says.
pub fn assemble(paths: &[PathBuf], opts: &AssembleOptions) -> Result<Array> {
    check_members(paths)?;
    let arr = assemble_paths(paths, opts)?;
    for n in arr.assembly_notes() {
        eprintln!("raidkit: warning: {n}");
    }
    Ok(arr)
}
