//! `raidkit probe`: rotational or not, 512 B vs 4 KiB direct writes, erase-block estimate;
//! with several paths, their sequential read speeds against each other and their links.

use crate::units::parse_size;
use anyhow::{anyhow, Result};
use clap::Args;
use raidkit_tools::charts;
use raidkit_tools::probe::{probe, probe_peers, PeerOptions, ProbeOptions};
use std::path::PathBuf;
use std::time::Duration;

/// `probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Draw the write sweep to this file (.png or .svg).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Allow writing to an existing file or a block device (the scratch region is destroyed).
    #[arg(long)]
    pub force: bool,
    /// Only report what the target is; write nothing.
    #[arg(long)]
    pub no_write: bool,
    /// Start of the scratch region (bare number = bytes).
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// Length of the scratch region (bare number = bytes).
    #[arg(long, default_value = "64M")]
    pub scratch: String,
    /// Largest write size of the sweep.
    #[arg(long = "max-block", default_value = "8M")]
    pub max_block: String,
    /// Most bytes written per sweep point.
    #[arg(long = "bytes-per-point", default_value = "32M")]
    pub bytes_per_point: String,
    /// Most seconds per sweep point.
    #[arg(long = "seconds-per-point", default_value = "2")]
    pub seconds_per_point: f64,
    /// A block device, a file, a directory (a scratch file is made and removed there) or a
    /// new file name (made and removed). Several: the members of an array, compared by
    /// sequential read speed (read-only; --offset, --bytes-per-point, --seconds-per-point
    /// apply to each).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// Run `probe`.
pub fn run(a: ProbeArgs) -> Result<()> {
    let sz = |s: &str| parse_size(s, 1).map_err(|e| anyhow!(e));
    if !(a.seconds_per_point > 0.0 && a.seconds_per_point <= 60.0) {
        return Err(anyhow!("--seconds-per-point must be in (0, 60]"));
    }
    if a.paths.len() > 1 {
        let r = probe_peers(
            &a.paths,
            &PeerOptions {
                offset: sz(&a.offset)?,
                bytes: sz(&a.bytes_per_point)?,
                time: Duration::from_secs_f64(a.seconds_per_point),
                ..PeerOptions::default()
            },
        )?;
        if let Some(p) = &a.plot {
            charts::draw(p, &charts::peers_figure(&r))?;
        }
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            out!("{}", r.to_text());
        }
        return Ok(());
    }
    let o = ProbeOptions {
        force: a.force,
        offset: sz(&a.offset)?,
        scratch: sz(&a.scratch)?,
        max_block: sz(&a.max_block)?,
        bytes_per_point: sz(&a.bytes_per_point)?,
        time_per_point: Duration::from_secs_f64(a.seconds_per_point),
        no_write: a.no_write,
    };
    let r = probe(&a.paths[0], &o)?;
    if let Some(p) = &a.plot {
        charts::draw(p, &charts::probe_figure(&r))?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        out!("{}", r.to_text());
    }
    Ok(())
}
