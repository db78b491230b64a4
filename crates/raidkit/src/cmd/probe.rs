//! `raidkit probe`: rotational or not, 512 B vs 4 KiB direct writes, erase-block estimate.

use crate::units::parse_size;
use anyhow::{anyhow, Result};
use clap::Args;
use raidkit_tools::plot::{self, Lines};
use raidkit_tools::probe::{probe, ProbeOptions};
use raidkit_tools::trace::size_label;
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
    /// new file name (made and removed).
    pub path: PathBuf,
}

/// Run `probe`.
pub fn run(a: ProbeArgs) -> Result<()> {
    let sz = |s: &str| parse_size(s, 1).map_err(|e| anyhow!(e));
    if !(a.seconds_per_point > 0.0 && a.seconds_per_point <= 60.0) {
        return Err(anyhow!("--seconds-per-point must be in (0, 60]"));
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
    let r = probe(&a.path, &o)?;
    if let Some(p) = &a.plot {
        plot::lines(
            p,
            &Lines {
                title: format!(
                    "{} sequential writes: {}{}",
                    if r.direct_io { "direct" } else { "buffered" },
                    r.kind,
                    r.erase_block_estimate
                        .map(|e| format!(", knee at {}", size_label(e)))
                        .unwrap_or_default()
                ),
                x_desc: "write size".into(),
                y_desc: "MiB/s".into(),
                labels: r.sweep.iter().map(|p| size_label(p.block)).collect(),
                series: vec![("MiB/s".into(), r.sweep.iter().map(|p| p.mib_s).collect())],
            },
        )
        .map_err(|e| anyhow!(e))?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        out!("{}", r.to_text());
    }
    Ok(())
}
