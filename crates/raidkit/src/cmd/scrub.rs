//! `raidkit check` and `repair`: scrub a stopped array, offline.

use super::{asm_opts, bar, AssembleArgs};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::ProgressBar;
use raidkit_engine::sync::{self, SyncMode, SyncReport};
use raidkit_engine::Array;
use serde_json::json;
use std::path::PathBuf;

/// After-help of `repair`.
pub const REPAIR_EXAMPLES: &str = "\
Verdicts, windows (--from/--to) and the checksum sidecar work as for `check` (see
`raidkit check --help`); repair rewrites what the verdict proves wrong.

Examples:
  # scrub a stopped RAID5 and fix what is wrong
  raidkit repair d0.img d1.img d2.img

  # remove its bad-block logs: every entry is rewritten from redundancy first
  # (what `raidkit manage NAME --update no-bbl` does on a served array)
  raidkit repair --update no-bbl d0.img d1.img d2.img

  # the same when some entries hold data nobody can supply: those ranges become zeros
  raidkit repair --update no-bbl --zero-lost d0.img d1.img d2.img
";

const SCRUB_HELP: &str = "\
Verdicts: RAID6 locates a single bad block from P+Q; 3+ way mirrors vote. 2-way mirrors
and RAID5 need the checksum sidecar (--checksums) to tell which copy is right; without it
the range is reported `undecided` and repair does what md does (mirrors: copy the first
copy over the others; RAID5: recompute parity from the data).

Examples:
  raidkit create --level 1 --raid-devices 2 --size 64M --checksums m.csum m0.img m1.img
  raidkit check m0.img m1.img                           # the whole array
  raidkit check --from 16M --to 32M m0.img m1.img       # only array bytes 16M..32M
  raidkit check --checksums m.csum --json m0.img m1.img
  raidkit repair --checksums m.csum m0.img m1.img       # rewrite the copy that is wrong
";

/// `check` / `repair`.
#[derive(Args, Debug)]
#[command(after_help = SCRUB_HELP)]
pub struct ScrubArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Start of the window, array byte offset (e.g. 10G; rounded down to a stripe row or 4 KiB).
    #[arg(long, value_name = "OFFSET")]
    pub from: Option<String>,
    /// End of the window, array byte offset, exclusive (rounded up; default: the end).
    #[arg(long, value_name = "OFFSET")]
    pub to: Option<String>,
    /// Checksum sidecar of this array (from `create --checksums` or `checksums init`).
    #[arg(long, value_name = "PATH")]
    pub checksums: Option<PathBuf>,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

/// `repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// Change array metadata instead of scrubbing. `no-bbl`: rewrite every bad-block entry
    /// from redundancy, then remove the bad-block log from every member (mdadm's
    /// `--update=no-bbl`). Refused, listing the lost array ranges, if some entries hold
    /// data no member can supply (see --zero-lost).
    #[arg(long, value_name = "WHAT", value_parser = ["no-bbl"])]
    pub update: Option<String>,
    /// With --update no-bbl: remove the logs even if data is lost; the lost ranges are
    /// replaced by zeros (restore them from a backup).
    #[arg(long, requires = "update")]
    pub zero_lost: bool,
    #[command(flatten)]
    pub scrub: ScrubArgs,
}

/// Run `repair`.
pub fn repair(a: RepairArgs) -> Result<()> {
    let Some(what) = &a.update else {
        return run(a.scrub, SyncMode::Repair);
    };
    if a.scrub.from.is_some() || a.scrub.to.is_some() || a.scrub.checksums.is_some() {
        bail!("--update {what} works on the whole array and does not use --from, --to or --checksums; drop them");
    }
    // The engine code of `manage --update no-bbl`, on an array assembled here.
    let arr = crate::cmd::assemble(&a.scrub.asm.members, &asm_opts(&a.scrub.asm, true)?)?;
    let r = arr.remove_bbl(a.zero_lost)?;
    arr.stop()?;
    if a.scrub.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        outln!(
            "repair --update {what}: {} bad-block range(s) rewritten from redundancy; the bad-block log is removed from every member",
            r.repaired.len()
        );
        for (o, l) in &r.lost {
            outln!(
                "  array bytes {o}..{} had no valid data and now read as zeros: restore them from a backup",
                o + l
            );
        }
    }
    Ok(())
}

fn parse_offset(s: &Option<String>, what: &str) -> Result<Option<u64>> {
    s.as_deref()
        .map(|t| parse_size(t, 1).map_err(|e| anyhow!("{what}: {e}")))
        .transpose()
}

/// The scrub window (array bytes) from --from/--to, or None for the whole array.
fn window(arr: &Array, a: &ScrubArgs) -> Result<Option<(u64, u64)>> {
    let from = parse_offset(&a.from, "--from")?;
    let to = parse_offset(&a.to, "--to")?;
    let size = arr.size_bytes();
    if from.is_none() && to.is_none() {
        return Ok(None);
    }
    let (f, t) = (from.unwrap_or(0), to.unwrap_or(size).min(size));
    if f >= size {
        bail!("empty window: --from {f} is at or past the end of the array ({size} bytes)");
    }
    if f >= t {
        bail!("empty window: --from {f} must be below --to {t} (the array has {size} bytes)");
    }
    Ok(Some(sync::window_for_bytes(arr, f, t)))
}

/// Run `check` (`mode` Check) or a scrubbing `repair` (`mode` Repair).
pub fn run(a: ScrubArgs, mode: SyncMode) -> Result<()> {
    let writable = mode == SyncMode::Repair;
    let arr = crate::cmd::assemble(&a.asm.members, &asm_opts(&a.asm, writable)?)?;
    let with_sidecar = match &a.checksums {
        Some(p) => super::checksums::attach_sidecar(&arr, p)?,
        None => false,
    };
    let window = window(&arr, &a)?;
    let mut pb: Option<ProgressBar> = None;
    let name = if writable { "repair" } else { "check" };
    let opts = sync::SyncOptions {
        full: true,
        window,
        ..Default::default()
    };
    let rep = sync::run_opts(&arr, mode, &opts, &mut |d, t| {
        pb.get_or_insert_with(|| bar(t * 512, name))
            .set_position(d * 512);
    });
    if let Some(p) = pb {
        p.finish_and_clear();
    }
    let rep = rep?;
    if writable {
        arr.mark_clean()?;
    }
    if a.json {
        print_json(&arr, &rep, name, with_sidecar)?;
    } else {
        print_text(&arr, &rep, name, with_sidecar);
    }
    if !rep.mismatches.is_empty() && mode == SyncMode::Check {
        if arr.reshape_status().is_some() {
            bail!(
                "{} mismatched range(s) found; the array is in the middle of a reshape: finish it first (`raidkit grow --continue MEMBER...`), then run `raidkit repair`",
                rep.mismatches.len()
            );
        }
        bail!(
            "{} mismatched range(s) found; run `raidkit repair` to fix them",
            rep.mismatches.len()
        );
    }
    Ok(())
}

fn print_json(arr: &Array, rep: &SyncReport, name: &str, with_sidecar: bool) -> Result<()> {
    let mismatch_bytes: u64 = rep.mismatches.iter().map(|m| m.1).sum();
    let v = json!({
        "uuid": arr.uuid_text(),
        "action": name,
        "covered": {"offset": rep.covered.0, "end": rep.covered.1},
        "covered_bytes": {"start": rep.covered.0, "end": rep.covered.1},
        "checksums": with_sidecar,
        "mismatch_ranges": rep.mismatches.iter().map(|(o, l)| json!({"offset": o, "len": l})).collect::<Vec<_>>(),
        "mismatch_bytes": mismatch_bytes,
        "mismatch_sectors": mismatch_bytes / 512,
        "verdicts": rep.verdicts,
        "sectors_checked": rep.sectors_done,
        "sectors_skipped_holes": rep.sectors_skipped_holes,
        "sectors_rewritten": rep.sectors_written,
        "read_error_sectors_rewritten": rep.sectors_read_error_rewritten,
    });
    outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn print_text(arr: &Array, rep: &SyncReport, name: &str, with_sidecar: bool) {
    let mismatch_bytes: u64 = rep.mismatches.iter().map(|m| m.1).sum();
    outln!(
        "{name} of array bytes {}..{}{}: {} mismatched range(s), {} bytes; {} sectors rewritten",
        rep.covered.0,
        rep.covered.1,
        if with_sidecar {
            " (with checksums)"
        } else {
            ""
        },
        rep.mismatches.len(),
        mismatch_bytes,
        rep.sectors_written
    );
    for (o, l) in &rep.mismatches {
        outln!("  array bytes {o}..{} ({})", o + l, human(*l));
    }
    for v in &rep.verdicts {
        let place = if v.stripe > 0 || arr.geometry().level.has_parity() {
            format!(
                "stripe {} (array bytes {}..{})",
                v.stripe,
                v.offset,
                v.offset + v.len
            )
        } else {
            format!("array bytes {}..{}", v.offset, v.offset + v.len)
        };
        outln!(
            "  {place}: {} [{}] — {}{}",
            match (&v.role, &v.device) {
                (Some(r), Some(d)) => format!("role {r} ({d}) is wrong"),
                (Some(r), None) => format!("role {r} is wrong"),
                _ => "undecided".into(),
            },
            v.decided_by,
            v.what,
            if v.repaired { "; rewritten" } else { "" }
        );
    }
    if rep.sectors_read_error_rewritten > 0 {
        outln!(
            "  {} sectors that failed to read were written back from redundancy",
            rep.sectors_read_error_rewritten
        );
    }
    if !with_sidecar && rep.verdicts.iter().any(|v| v.role.is_none()) {
        outln!("  (a checksum sidecar decides such ranges: `raidkit checksums init --checksums FILE MEMBER...` on a clean array, then --checksums FILE on check, repair and serve)");
    }
}
