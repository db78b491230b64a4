//! `raidkit detail`: assemble read-only and report the array, like `mdadm --detail`.

use super::{asm_opts, AssembleArgs};
use crate::units::human;
use anyhow::Result;
use clap::Args;
use raidkit_engine::Array;
use raidkit_layout::{names, Level};
use serde_json::{json, Value};

/// `detail`.
#[derive(Args, Debug)]
pub struct DetailArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

/// What `detail --json` (and `create --json`) print about an array.
pub fn detail_json(arr: &Array) -> Value {
    let g = arr.geometry();
    let missing = arr.missing_roles();
    let state = arr.state_words();
    json!({
        "uuid": arr.uuid_text(),
        "name": arr.name(),
        "metadata": arr.metadata().as_str(),
        "level": g.level.to_string(),
        "layout": names::layout_name(g.level, g.layout),
        "chunk_bytes": g.chunk_sectors * 512,
        "raid_disks": g.raid_disks,
        "array_bytes": arr.size_bytes(),
        "used_dev_bytes": g.dev_sectors * 512,
        "events": arr.events(),
        "state": state.join(", "),
        "degraded": arr.is_degraded(),
        "members": arr.members(),
        "write_behind": arr.write_behind_limit(),
        "missing_roles": missing,
        "bad_blocks": arr.bad_blocks(),
        "lost_ranges": arr.lost_ranges(),
        "reshape": arr.reshape_status(),
        "notes": arr.assembly_notes().iter().map(|n| {
            let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
            v["message"] = Value::String(n.to_string());
            v
        }).collect::<Vec<_>>(),
    })
}

/// Run `detail`.
pub fn run(a: DetailArgs) -> Result<()> {
    let mut o = asm_opts(&a.asm, false)?;
    o.report_only = true;
    let arr = crate::cmd::assemble(&a.asm.members, &o)?;
    let mut v = detail_json(&arr);
    let (ms, shape) = raidkit_tools::disks::of_array(&arr);
    let domains = raidkit_tools::disks::check_members(&ms, Some(&shape));
    let smart = raidkit_tools::disks::smart::check_smart(&ms);
    v["disk_warnings"] = json!(domains);
    v["smart"] = json!(smart);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let g = arr.geometry();
    outln!("{:>16} : {}", "UUID", v["uuid"].as_str().unwrap_or(""));
    outln!("{:>16} : {}", "Name", arr.name());
    outln!("{:>16} : {}", "Version", arr.metadata());
    outln!("{:>16} : {}", "Raid Level", g.level);
    outln!(
        "{:>16} : {} ({} bytes)",
        "Array Size",
        human(arr.size_bytes()),
        arr.size_bytes()
    );
    if g.level.has_parity() || g.level == Level::Raid10 || g.level == Level::Raid0 {
        outln!(
            "{:>16} : {}",
            "Layout",
            names::layout_name(g.level, g.layout)
        );
    }
    if g.level.uses_chunk() {
        outln!("{:>16} : {}K", "Chunk Size", g.chunk_sectors / 2);
    }
    outln!("{:>16} : {}", "Raid Devices", g.raid_disks);
    outln!("{:>16} : {}", "State", v["state"].as_str().unwrap_or(""));
    if let Some(r) = arr.reshape_status() {
        for (k, v) in crate::cmd::grow::reshape_detail_lines(&r) {
            outln!("{k:>16} : {v}");
        }
    }
    outln!("{:>16} : {}", "Events", arr.events());
    outln!();
    outln!("    Role  State        Device");
    let members = arr.members();
    for r in 0..g.raid_disks {
        match members.iter().find(|m| m.role == Some(r)) {
            Some(m) => outln!("    {r:>4}  {:<12} {}{}", m.state, m.device, wm_mark(m)),
            None => outln!("    {r:>4}  {:<12} -", "missing"),
        }
    }
    for m in members.iter().filter(|m| m.role.is_none()) {
        outln!("       -  {:<12} {}{}", m.state, m.device, wm_mark(m));
    }
    if arr.write_behind_limit() > 0 {
        outln!(
            "\n    Write-behind: max {} outstanding to the (W) members",
            arr.write_behind_limit()
        );
    }
    let lines = raidkit_tools::disks::report_lines(&domains, &smart);
    if !lines.is_empty() {
        outln!("\n    Disks:");
        for l in lines {
            outln!("    {l}");
        }
    }
    Ok(())
}

/// mdstat's mark of a write-mostly member, ` (W)` (empty for others).
pub fn wm_mark(m: &raidkit_engine::array::MemberInfo) -> &'static str {
    if m.write_mostly {
        " (W)"
    } else {
        ""
    }
}
