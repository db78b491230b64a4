//! `raidkit create`.

use super::{bar, parse_metadata};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::ProgressBar;
use raidkit_engine::checksums::Checksums;
use raidkit_engine::create::{create, default_homehost, CreateOptions, MemberSpec};
use raidkit_engine::sb::Metadata;
use raidkit_format::uuid;
use raidkit_layout::{names, Level};
use std::path::PathBuf;
use std::sync::Arc;

/// `create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub tls: crate::online::MemberTlsArgs,
    /// RAID level: linear, 0, 1, 4, 5, 6, 10.
    #[arg(short, long)]
    pub level: String,
    /// Number of member slots (must equal the number of MEMBERs).
    #[arg(short = 'n', long = "raid-devices")]
    pub raid_devices: usize,
    /// Chunk size (bare number = KiB, as mdadm; default 512K).
    #[arg(short, long)]
    pub chunk: Option<String>,
    /// Layout: left-symmetric, right-asymmetric, parity-first, n2, f2, o2, ... (default per level).
    #[arg(short = 'p', long)]
    pub layout: Option<String>,
    /// Superblock version.
    #[arg(
        short = 'e',
        long,
        default_value = "1.2",
        value_name = "0.90|1.0|1.1|1.2"
    )]
    pub metadata: String,
    /// Array name (stored as HOMEHOST:NAME like mdadm; default `raidkit`). 0.90
    /// superblocks have no name field: the name then goes in a `serve --config` file.
    #[arg(short = 'N', long)]
    pub name: Option<String>,
    /// Home host stored with the name (default: this host's name; `none` for no prefix).
    #[arg(long)]
    pub homehost: Option<String>,
    /// Array UUID (default random).
    #[arg(short, long)]
    pub uuid: Option<String>,
    /// Write-intent bitmap.
    #[arg(short, long, default_value = "none", value_name = "internal|none")]
    pub bitmap: String,
    /// Bitmap chunk size (bare number = KiB; default as mdadm: 64M).
    #[arg(long)]
    pub bitmap_chunk: Option<String>,
    /// Reserve a bad-block log on every member where mdadm puts it (1.x only). Default:
    /// none; a member that later gets bad blocks gets a log then if there is room.
    #[arg(long)]
    pub bbl: bool,
    /// Do not make redundancy consistent (only if the members are known to be consistent, e.g. all zeros).
    #[arg(long)]
    pub assume_clean: bool,
    /// Create member files that do not exist, sparse, of this size (bare number = KiB).
    #[arg(short = 'z', long)]
    pub size: Option<String>,
    /// Overwrite members that hold data or another array's superblock.
    #[arg(short, long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep a checksum sidecar at PATH (one CRC-32 per 4 KiB of array data, outside the
    /// MD format) so scrubs of 2-way mirrors and RAID5 can tell which copy is right.
    #[arg(long, value_name = "PATH")]
    pub checksums: Option<PathBuf>,
    /// Mark MEMBER (one of the members listed, by the same name) write-mostly, as mdadm's
    /// `--write-mostly`: it is read only when no other copy can serve (a slow or remote
    /// mirror). Repeat for more members. RAID1 and RAID10.
    #[arg(long = "write-mostly", value_name = "MEMBER")]
    pub write_mostly: Vec<PathBuf>,
    /// md's write-behind (RAID1 with --bitmap internal and a --write-mostly member): a
    /// write is acknowledged once the other members have it; at most N writes to the
    /// write-mostly members are outstanding (their regions stay dirty in the bitmap until
    /// written). Default 0: synchronous.
    #[arg(long = "write-behind", value_name = "N", default_value_t = 0)]
    pub write_behind: u32,
    /// Members in role order: files, block devices, or the word `missing`.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// The engine's create options from the command line.
fn options(a: &CreateArgs, level: Level) -> Result<CreateOptions> {
    let members = a
        .members
        .iter()
        .map(|m| {
            if m.as_os_str() == "missing" {
                MemberSpec::Missing
            } else {
                MemberSpec::Path(m.clone())
            }
        })
        .collect();
    let mut o = CreateOptions::new(level, members);
    o.raid_devices = a.raid_devices;
    if let Some(c) = &a.chunk {
        o.chunk_bytes = Some(parse_size(c, 1024).map_err(|e| anyhow!("--chunk: {e}"))?);
    }
    if let Some(l) = &a.layout {
        o.layout = Some(names::parse_layout(level, l)?);
    }
    o.metadata = parse_metadata(&a.metadata)?;
    o.name = a.name.clone().unwrap_or_else(|| "raidkit".into());
    o.homehost = match a.homehost.as_deref() {
        Some("none") | Some("") => None,
        Some(h) => Some(h.to_string()),
        None => default_homehost(),
    };
    if let Some(u) = &a.uuid {
        o.uuid = Some(uuid::parse(u).ok_or_else(|| anyhow!("--uuid {u:?} is not a UUID (32 hex digits, e.g. 5ee1c0de:00000000:00000000:00000005)"))?);
    }
    o.bitmap = match a.bitmap.as_str() {
        "internal" => true,
        "none" => false,
        other => bail!("--bitmap {other:?}: use internal or none"),
    };
    if let Some(c) = &a.bitmap_chunk {
        o.bitmap_chunk_bytes =
            Some(parse_size(c, 1024).map_err(|e| anyhow!("--bitmap-chunk: {e}"))?);
    }
    o.assume_clean = a.assume_clean;
    o.bbl = a.bbl;
    if let Some(s) = &a.size {
        o.create_size = Some(parse_size(s, 1024).map_err(|e| anyhow!("--size: {e}"))?);
    }
    o.force = a.force;
    for wm in &a.write_mostly {
        let i = a
            .members
            .iter()
            .position(|m| m == wm || (m.as_os_str() != "missing" && same_file(m, wm)))
            .ok_or_else(|| {
                anyhow!(
                    "--write-mostly {}: not one of the members given; name it exactly as in the member list",
                    wm.display()
                )
            })?;
        if !o.write_mostly.contains(&i) {
            o.write_mostly.push(i);
        }
    }
    o.write_behind = a.write_behind;
    Ok(o)
}

/// Do two paths name the same existing file?
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Run `create`.
pub fn run(a: CreateArgs) -> Result<()> {
    let level = Level::parse(&a.level)?;
    let o = options(&a, level)?;
    // Warnings, never a refusal: members that --size will create are checked in their folder.
    for w in raidkit_tools::disks::create_warnings(level, a.raid_devices, o.layout, &a.members) {
        eprintln!("raidkit: {w}");
    }
    let mut pb: Option<ProgressBar> = None;
    let arr = create(&o, &mut |done, total| {
        let p = pb.get_or_insert_with(|| bar(total * 512, "sync"));
        p.set_position(done * 512);
    })?;
    if let Some(p) = pb {
        p.finish_and_clear();
    }
    if let Some(path) = &a.checksums {
        let mut pb: Option<ProgressBar> = None;
        let cs = Checksums::init(path, &arr, &mut |d, t| {
            pb.get_or_insert_with(|| bar(t, "checksums"))
                .set_position(d);
        })?;
        if let Some(p) = pb {
            p.finish_and_clear();
        }
        arr.attach_checksums(Arc::new(cs))?;
    }
    let out = super::detail::detail_json(&arr);
    arr.stop()?;
    if let (Metadata::V090, Some(n)) = (o.metadata, &a.name) {
        eprintln!("{}", v090_name_note(n, &out, &a.members));
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        outln!(
            "raidkit: created {} array {} ({}), {} ({} bytes), {} member(s){}",
            level,
            out["uuid"].as_str().unwrap_or(""),
            out["name"].as_str().unwrap_or(""),
            human(out["array_bytes"].as_u64().unwrap_or(0)),
            out["array_bytes"].as_u64().unwrap_or(0),
            a.members.len(),
            if a.assume_clean {
                ", not synced (--assume-clean)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// 0.90 superblocks have no name field: say so (never drop `--name` silently) and give the
/// `serve --config` entry that exports the array under that name.
fn v090_name_note(name: &str, out: &serde_json::Value, members: &[std::path::PathBuf]) -> String {
    let list: Vec<String> = members
        .iter()
        .map(|p| {
            let p = std::path::absolute(p).unwrap_or_else(|_| p.clone());
            format!("{:?}", p.display().to_string())
        })
        .collect();
    format!(
        "raidkit: note: 0.90 superblocks have no name field, so --name {name:?} is not stored on the members; \
         without a config `serve` exports the array by its UUID ({}). To export it as {name:?}, serve it with \
         --export {name:?} or from a --config file with this entry (`raidkit scan --config FILE` writes one for every array found):\n\
         [[array]]\nname = {name:?}\nuuid = {:?}\nmembers = [{}]",
        out["uuid"].as_str().unwrap_or(""),
        out["uuid"].as_str().unwrap_or(""),
        list.join(", ")
    )
}
