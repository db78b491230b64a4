//! `raidkit advise`: mkfs alignment for an array (ext4 stride / stripe_width / -g / -J,
//! xfs su / sw), from the members' superblocks or from --level/--raid-devices/--chunk.

use crate::units::parse_size;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use raidkit_engine::assemble::AssembleOptions;
use raidkit_layout::Level;
use raidkit_tools::advise::{advise, geometry_from_spec, AdviseInput, Fs};
use std::path::PathBuf;

/// `advise`.
#[derive(Args, Debug)]
pub struct AdviseArgs {
    /// RAID level (without MEMBERs): 0, 1, 4, 5, 6, 10.
    #[arg(short, long)]
    pub level: Option<String>,
    /// Number of members (without MEMBERs).
    #[arg(short = 'n', long = "raid-devices")]
    pub raid_devices: Option<usize>,
    /// Chunk size (without MEMBERs; bare number = KiB as mdadm; default 512K).
    #[arg(short, long)]
    pub chunk: Option<String>,
    /// Layout name (without MEMBERs): left-symmetric, n2, f2, o2, ...
    #[arg(short = 'p', long)]
    pub layout: Option<String>,
    /// Filesystem: ext4 or xfs.
    #[arg(long, default_value = "ext4")]
    pub fs: String,
    /// Filesystem block size in bytes.
    #[arg(long = "block-size", default_value = "4096")]
    pub block_size: u32,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Members of an existing array (read-only; the geometry comes from the superblocks).
    #[arg(value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// Run `advise`.
pub fn run(a: AdviseArgs) -> Result<()> {
    let fs = Fs::parse(&a.fs)?;
    let (geometry, array_bytes) = if !a.members.is_empty() {
        if a.level.is_some() || a.raid_devices.is_some() || a.chunk.is_some() || a.layout.is_some()
        {
            bail!("give either MEMBERs or --level/--raid-devices/--chunk, not both");
        }
        let opts = AssembleOptions {
            writable: false,
            force: false,
            metadata: None,
            report_only: true,
            backup_file: None,
        };
        let arr =
            crate::cmd::assemble(&a.members, &opts).context("reading the array's geometry")?;
        (arr.geometry().clone(), Some(arr.size_bytes()))
    } else {
        let level = Level::parse(
            a.level
                .as_deref()
                .ok_or_else(|| anyhow!("give MEMBERs, or --level, --raid-devices and --chunk"))?,
        )?;
        let n = a
            .raid_devices
            .ok_or_else(|| anyhow!("--raid-devices is needed with --level"))?;
        let chunk =
            parse_size(a.chunk.as_deref().unwrap_or("512K"), 1024).map_err(|e| anyhow!(e))?;
        (
            geometry_from_spec(level, n, chunk, a.layout.as_deref())?,
            None,
        )
    };
    let adv = advise(&AdviseInput {
        geometry,
        fs,
        block_size: a.block_size,
        array_bytes,
    })?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&adv)?);
    } else {
        out!("{}", adv.to_text());
    }
    Ok(())
}
