//! `raidkit manage`, `grow` and `sync-action`: change a running array through its
//! control socket (`grow` also works offline on the members of a stopped array).

use crate::cmd::grow::resolved;
use crate::control::client::{request, socket_for};
use crate::control::protocol::{ManageOp, Request};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use raidkit_engine::grow::BitmapMode;
use serde_json::Value;
use std::path::PathBuf;

/// `manage`.
#[derive(Args, Debug)]
pub struct ManageArgs {
    /// Array name (as in `raidkit status`).
    pub name: String,
    /// Mark a member failed.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub fail: Option<PathBuf>,
    /// Remove a failed member or a spare.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub remove: Option<PathBuf>,
    /// Add a device as a hot spare (recovery starts if a role is missing).
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub add: Option<PathBuf>,
    /// Mark MEMBER write-mostly (md's `writemostly`): it is read only when no other copy
    /// can serve. With --add and no MEMBER: the device added is write-mostly.
    #[arg(long = "write-mostly", value_name = "MEMBER", num_args = 0..=1)]
    pub write_mostly: Option<Option<PathBuf>>,
    /// Clear write-mostly on MEMBER (md's `-writemostly`): it serves reads again.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub readwrite: Option<PathBuf>,
    /// Set md's write-behind (mdadm --grow --write-behind): at most N writes to the
    /// write-mostly members outstanding after a write is acknowledged; 0: synchronous.
    /// RAID1 with a bitmap and a write-mostly member.
    #[arg(long = "write-behind", value_name = "N", group = "op")]
    pub write_behind: Option<u32>,
    /// Re-add a member that left; only regions written meanwhile are resynced when the bitmap allows.
    #[arg(long = "re-add", value_name = "MEMBER", group = "op")]
    pub re_add: Option<PathBuf>,
    /// With --re-add: take the member back even though it changed while it was away
    /// (split brain: both sides ran degraded and wrote; or it is newer than the array).
    /// This array's data is kept; the member is rebuilt in full and its changes are lost.
    #[arg(long, requires = "re_add")]
    pub discard_its_changes: bool,
    /// Hot-replace an active member: its role is copied onto a spare while it stays active,
    /// then it is marked faulty and removed.
    #[arg(long, value_name = "MEMBER", group = "op")]
    pub replace: Option<PathBuf>,
    /// With --replace: the device to copy onto (a spare, or a new device added for this).
    #[arg(long, value_name = "DEVICE", requires = "replace")]
    pub with: Option<PathBuf>,
    /// Change array metadata online. `no-bbl`: rewrite every bad-block entry from
    /// redundancy, then remove the bad-block log from every member. Refused (listing the
    /// lost array ranges) if some entries hold data no member can supply; with --force the
    /// log is removed anyway and those ranges then read as zeros (status keeps reporting
    /// them as `lost_zeroed_ranges` until the server stops).
    #[arg(long, value_name = "WHAT", group = "op", value_parser = ["no-bbl"])]
    pub update: Option<String>,
    /// With --add or --replace --with: overwrite a device that holds data or another
    /// superblock. With
    /// --update no-bbl: remove the log even if data is lost (lost ranges become zeros).
    #[arg(long)]
    pub force: bool,
}

/// `grow`.
#[derive(Args, Debug)]
pub struct GrowArgs {
    /// `internal`: add an internal write-intent bitmap (where mdadm would put it);
    /// `none`: remove it.
    #[arg(long, value_name = "internal|none")]
    pub bitmap: String,
    /// Bytes per bitmap bit (bare number = KiB, as mdadm; default: mdadm's choice, 64 MiB
    /// on most arrays).
    #[arg(long, value_name = "SIZE")]
    pub bitmap_chunk: Option<String>,
    /// Which superblock to use offline when a member carries both 0.90 and 1.x.
    #[arg(long, value_name = "0.90|1.0|1.1|1.2")]
    pub metadata: Option<String>,
    /// The name of a running array (as in `raidkit status`), or the members of a stopped
    /// array.
    #[arg(required = true, value_name = "NAME|MEMBER")]
    pub targets: Vec<PathBuf>,
}

const SYNC_ACTION_HELP: &str = "\
Examples:
  raidkit sync-action md0 check --speed-limit 50M     # scrub the whole array
  raidkit sync-action md0 check --from 1G --to 2G     # only array bytes 1G..2G
  raidkit sync-action md0 idle                        # stop; the position is recorded
  raidkit sync-action md0 check --resume              # continue where it stopped
";

/// `sync-action`.
#[derive(Args, Debug)]
#[command(after_help = SYNC_ACTION_HELP)]
pub struct SyncActionArgs {
    /// Array name.
    pub name: String,
    /// check, repair, resync, recover or idle (stop).
    pub action: Option<String>,
    /// Limit background work (e.g. 50M per second; 0 = unlimited). Changeable while running.
    #[arg(long, value_name = "SIZE")]
    pub speed_limit: Option<String>,
    /// check/repair only from this array byte offset (e.g. 10G).
    #[arg(long, value_name = "OFFSET", conflicts_with = "resume")]
    pub from: Option<String>,
    /// check/repair only up to this array byte offset (exclusive).
    #[arg(long, value_name = "OFFSET", conflicts_with = "resume")]
    pub to: Option<String>,
    /// Continue the last check/repair stopped with `idle` where it stopped (the position is
    /// kept in the run directory and survives a restart of `raidkit serve`).
    #[arg(long)]
    pub resume: bool,
}

/// The device or image file `p` that `option` brings into the array, resolved as the
/// server will open it; refused here, saying which path and what to do, when there is
/// nothing there (the server's answer would be a bare "No such file or directory").
fn existing(p: &std::path::Path, option: &str) -> Result<PathBuf> {
    let r = resolved(p);
    let plain = r
        .to_str()
        .is_none_or(|s| !s.starts_with("fault:") && !raidkit_engine::dev::nbd::is_nbd_uri(s));
    if plain && std::fs::symlink_metadata(&r).is_err() {
        bail!(
            "{option} {}: no such device or file ({}); nothing was changed. Give the path of the disk, partition or image file to use (create an image first with `truncate -s SIZE FILE`)",
            p.display(),
            r.display()
        );
    }
    Ok(r)
}

/// What `manage` asks for, from the options.
fn manage_op(a: &ManageArgs) -> Result<ManageOp> {
    if let (Some(wm), Some(add)) = (&a.write_mostly, &a.add) {
        if wm.as_ref().is_some_and(|w| resolved(w) != resolved(add)) {
            bail!("--add with --write-mostly: the added device is marked; give --write-mostly without a MEMBER");
        }
        return Ok(ManageOp::Add {
            member: existing(add, "--add")?,
            write_mostly: true,
        });
    }
    if let Some(wm) = &a.write_mostly {
        let Some(m) = wm else {
            bail!("--write-mostly needs a MEMBER (or goes with --add)");
        };
        if a.fail.is_some()
            || a.remove.is_some()
            || a.re_add.is_some()
            || a.replace.is_some()
            || a.update.is_some()
            || a.readwrite.is_some()
            || a.write_behind.is_some()
        {
            bail!("--write-mostly MEMBER is an operation of its own (or goes with --add)");
        }
        return Ok(ManageOp::WriteMostly {
            member: resolved(m),
            on: true,
        });
    }
    Ok(if let Some(m) = &a.readwrite {
        ManageOp::WriteMostly {
            member: resolved(m),
            on: false,
        }
    } else if let Some(n) = a.write_behind {
        ManageOp::WriteBehind { n }
    } else if let Some(value) = &a.update {
        ManageOp::Update {
            value: value.clone(),
        }
    } else if let Some(m) = &a.fail {
        ManageOp::Fail {
            member: resolved(m),
        }
    } else if let Some(m) = &a.remove {
        ManageOp::Remove {
            member: resolved(m),
        }
    } else if let Some(m) = &a.add {
        ManageOp::Add {
            member: existing(m, "--add")?,
            write_mostly: false,
        }
    } else if let Some(m) = &a.re_add {
        ManageOp::ReAdd {
            member: existing(m, "--re-add")?,
            discard_its_changes: a.discard_its_changes,
        }
    } else if let Some(m) = &a.replace {
        ManageOp::Replace {
            member: resolved(m),
            with: a
                .with
                .as_deref()
                .map(|w| existing(w, "--with"))
                .transpose()?,
        }
    } else {
        bail!("say what to do: --fail, --remove, --add, --re-add, --replace, --write-mostly or --readwrite MEMBER, --write-behind N, or --update no-bbl");
    })
}

/// `raidkit manage`.
pub fn manage(a: ManageArgs) -> Result<()> {
    let op = manage_op(&a)?;
    let sock = socket_for(&a.name)?;
    let req = Request::Manage {
        array: a.name.clone(),
        op: op.clone(),
        force: a.force,
    };
    let v = request(&sock, &req)?;
    let n = &a.name;
    match &op {
        ManageOp::Update { value } => {
            let repaired = v["repaired"].as_array().map_or(0, Vec::len);
            eprintln!(
                "raidkit: --update {value} on {n}: done ({repaired} bad-block range(s) rewritten from redundancy; the bad-block log is removed from every member)"
            );
            if let Some(lost) = v["lost"].as_array().filter(|l| !l.is_empty()) {
                eprintln!(
                    "raidkit: these array byte ranges had no valid data and now read as zeros: {}",
                    serde_json::to_string(lost)?
                );
            }
        }
        ManageOp::Replace { member, .. } => eprintln!(
            "raidkit: replacing {} on {n}: started (progress in `raidkit status`)",
            member.display()
        ),
        ManageOp::WriteMostly { member, on } => eprintln!(
            "raidkit: {} on {n} is {}",
            member.display(),
            if *on {
                "write-mostly now (read only when no other copy can serve)"
            } else {
                "read-write now (serves reads again)"
            }
        ),
        ManageOp::WriteBehind { n: 0 } => {
            eprintln!("raidkit: {n}: write-behind off (writes are synchronous on every member)")
        }
        ManageOp::WriteBehind { n: max } => eprintln!(
            "raidkit: {n}: write-behind on, at most {max} write(s) outstanding to the write-mostly members"
        ),
        ManageOp::Fail { member }
        | ManageOp::Remove { member }
        | ManageOp::Add { member, .. }
        | ManageOp::ReAdd { member, .. } => {
            let verb = match &op {
                ManageOp::Fail { .. } => "fail",
                ManageOp::Remove { .. } => "remove",
                ManageOp::Add { .. } => "add",
                _ => "re-add",
            };
            eprintln!("raidkit: {verb} {} on {n}: done", member.display());
        }
    }
    Ok(())
}

/// The bitmap change `grow` asks for.
fn bitmap_mode(a: &GrowArgs) -> Result<BitmapMode> {
    let chunk = a
        .bitmap_chunk
        .as_deref()
        .map(|c| parse_size(c, 1024).map_err(|e| anyhow!("--bitmap-chunk: {e}")))
        .transpose()?;
    Ok(match a.bitmap.as_str() {
        "internal" => BitmapMode::Internal { chunk_bytes: chunk },
        "none" => {
            if chunk.is_some() {
                bail!("--bitmap-chunk goes with --bitmap internal");
            }
            BitmapMode::None
        }
        other => bail!("--bitmap must be internal or none, not {other:?}"),
    })
}

/// `grow NAME`: a single target that is not a file names a running array.
pub(crate) fn grow_names_running_array(targets: &[PathBuf]) -> bool {
    targets.len() == 1 && !targets[0].exists()
}

/// How `grow` assembles the members of a stopped array: writable, with the metadata given.
pub(crate) fn grow_offline_opts(metadata: Option<&str>) -> Result<raidkit_engine::AssembleOptions> {
    Ok(raidkit_engine::AssembleOptions {
        writable: true,
        metadata: metadata.map(crate::cmd::parse_metadata).transpose()?,
        ..Default::default()
    })
}

/// `grow` on the members of a stopped array.
fn grow_offline(a: &GrowArgs, mode: BitmapMode) -> Result<Value> {
    let arr = crate::cmd::assemble(&a.targets, &grow_offline_opts(a.metadata.as_deref())?)?;
    let r = arr.set_bitmap(mode);
    let stop = arr.stop();
    let ch = r?;
    stop?;
    Ok(serde_json::to_value(&ch)?)
}

/// `raidkit grow`: online through the control socket of the serving process, or offline
/// on the members of a stopped array (same engine code).
pub fn grow(a: GrowArgs) -> Result<()> {
    let mode = bitmap_mode(&a)?;
    let online = grow_names_running_array(&a.targets);
    let change = if online {
        let name = a.targets[0].display().to_string();
        let sock = socket_for(&name)?;
        let chunk_bytes = match mode {
            BitmapMode::Internal { chunk_bytes } => chunk_bytes,
            BitmapMode::None => None,
        };
        let req = Request::Grow {
            array: name,
            bitmap: a.bitmap.clone(),
            bitmap_chunk: chunk_bytes,
        };
        request(&sock, &req)?["change"].clone()
    } else {
        grow_offline(&a, mode)?
    };
    if change["bitmap"] == true {
        eprintln!(
            "raidkit: internal bitmap added: {} chunks of {}, {} dirty",
            change["chunks"].as_u64().unwrap_or(0),
            human(change["chunk_bytes"].as_u64().unwrap_or(0)),
            change["dirty"].as_u64().unwrap_or(0)
        );
    } else {
        eprintln!("raidkit: bitmap removed (an unclean stop now means a full resync)");
    }
    Ok(())
}

/// `raidkit sync-action`.
pub fn sync_action(a: SyncActionArgs) -> Result<()> {
    let sock = socket_for(&a.name)?;
    let size = |v: &Option<String>, what: &str| {
        v.as_deref()
            .map(|t| parse_size(t, 1).map_err(|e| anyhow!("{what}: {e}")))
            .transpose()
    };
    let req = Request::SyncAction {
        array: a.name.clone(),
        action: a.action.clone(),
        speed_limit: size(&a.speed_limit, "--speed-limit")?,
        from: size(&a.from, "--from")?,
        to: size(&a.to, "--to")?,
        resume: a.resume,
    };
    if a.action.is_none() && a.speed_limit.is_none() {
        bail!("give an action (check, repair, resync, recover, idle) and/or --speed-limit");
    }
    request(&sock, &req)?;
    Ok(())
}
