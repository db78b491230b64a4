//! `raidkit checksums init|status`, and attaching a sidecar to an assembled array.

use super::{asm_opts, bar, AssembleArgs};
use crate::units::human;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use indicatif::ProgressBar;
use raidkit_engine::checksums::Checksums;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{Array, EngineError};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CHECKSUMS_HELP: &str = "\
The sidecar is a file outside the MD format: the members stay exactly what the kernel
assembles, and nothing needs the sidecar to assemble or read. If the array is run without
it (by the kernel, or raidkit without --checksums) it becomes stale: raidkit detects that
from the array's event count, says so, and ignores it until it is initialised again.

Examples:
  raidkit create --level 5 --raid-devices 3 --size 64M r0.img r1.img r2.img
  raidkit checksums init --checksums r.csum r0.img r1.img r2.img
  raidkit checksums status --checksums r.csum r0.img r1.img r2.img
  raidkit serve --checksums r.csum r0.img r1.img r2.img     # every write updates it
  raidkit repair --checksums r.csum r0.img r1.img r2.img
";

/// `checksums` subcommands.
#[derive(Subcommand, Debug)]
pub enum ChecksumsCmd {
    /// Check the array (refusing if redundancy disagrees anywhere), then compute the
    /// sidecar from its contents (overwrites a previous sidecar at PATH).
    #[command(after_help = CHECKSUMS_HELP)]
    Init(ChecksumsArgs),
    /// Whether the sidecar is usable for this array; which regions are suspect.
    #[command(after_help = CHECKSUMS_HELP)]
    Status(ChecksumsArgs),
}

/// `checksums init|status`.
#[derive(Args, Debug)]
pub struct ChecksumsArgs {
    /// The sidecar file.
    #[arg(long, value_name = "PATH", required = true)]
    pub checksums: PathBuf,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

/// Run `checksums init|status`.
pub fn run(c: ChecksumsCmd) -> Result<()> {
    match c {
        ChecksumsCmd::Init(a) => init(a),
        ChecksumsCmd::Status(a) => status(a),
    }
}

/// Open the sidecar at `path` for `arr` and attach it. A stale sidecar (the array was run
/// without it) is reported loudly and ignored (Ok(false)); any other problem is an error.
pub fn attach_sidecar(arr: &Array, path: &Path) -> Result<bool> {
    match Checksums::open(path, arr) {
        Ok(cs) => {
            arr.attach_checksums(Arc::new(cs))?;
            Ok(true)
        }
        Err(e @ EngineError::Sidecar { stale: true, .. }) => {
            let remedy = crate::out::remedy_text(&e).unwrap_or_default();
            eprintln!("raidkit: WARNING: {e}{remedy}");
            eprintln!("raidkit: WARNING: continuing without checksums: 2-way mirror and RAID5 mismatches will be undecided");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn init(a: ChecksumsArgs) -> Result<()> {
    let arr = crate::cmd::assemble(&a.asm.members, &asm_opts(&a.asm, false)?)?;
    if arr.needs_resync() {
        bail!("the array was not stopped cleanly, so its redundancy may disagree; run `raidkit repair` (or serve it until it is clean) first, then `checksums init`");
    }
    let mut pb: Option<ProgressBar> = None;
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |d, t| {
        pb.get_or_insert_with(|| bar(t * 512, "check"))
            .set_position(d * 512);
    });
    if let Some(p) = pb.take() {
        p.finish_and_clear();
    }
    let rep = rep?;
    if !rep.mismatches.is_empty() {
        bail!(
            "the check found {} mismatched range(s) (first at array byte {}): checksums computed now could record wrong data as right; run `raidkit repair` first",
            rep.mismatches.len(),
            rep.mismatches[0].0
        );
    }
    let cs = Checksums::init(&a.checksums, &arr, &mut |d, t| {
        pb.get_or_insert_with(|| bar(t, "checksums"))
            .set_position(d);
    })?;
    if let Some(p) = pb {
        p.finish_and_clear();
    }
    let info = cs.info();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        outln!(
            "raidkit: checksums of {} blocks ({}) written to {} (array {}, event count {})",
            info.blocks,
            human(arr.size_bytes()),
            info.path,
            arr.uuid_text(),
            info.events
        );
    }
    Ok(())
}

fn status(a: ChecksumsArgs) -> Result<()> {
    let arr = crate::cmd::assemble(&a.asm.members, &asm_opts(&a.asm, false)?)?;
    let r = Checksums::open(&a.checksums, &arr);
    let (usable, info, why) = match r {
        Ok(cs) => (true, Some(cs.info()), None),
        Err(e) => {
            let remedy = crate::out::remedy_text(&e).unwrap_or_default();
            (false, None, Some(format!("{e}{remedy}")))
        }
    };
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"usable": usable, "sidecar": info, "problem": why})
            )?
        );
    } else if let Some(i) = &info {
        outln!(
            "{}: usable; {} blocks, array event count {}; {} suspect region(s){}",
            i.path,
            i.blocks,
            i.events,
            i.suspect.len(),
            if i.suspect.is_empty() {
                String::new()
            } else {
                format!(
                    " (written during an unclean stop, not used for verdicts until `checksums init`): {}",
                    i.suspect
                        .iter()
                        .map(|(o, l)| format!("{o}..{}", o + l))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    if let Some(w) = why {
        bail!("{w}");
    }
    Ok(())
}
