//! `raidkit status`: every running array, like /proc/mdstat but readable.

use super::wire;
use crate::control::client::all_status;
use crate::units::human;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

/// `status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `raidkit status`.
pub fn run(a: StatusArgs) -> Result<()> {
    let (mut st, denied) = all_status()?;
    for s in st.iter_mut() {
        let (ms, shape) = raidkit_tools::disks::of_status(s);
        s["disk_warnings"] = json!(raidkit_tools::disks::check_members(&ms, shape.as_ref()));
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&Value::Array(st))?);
    } else if st.is_empty() && denied.is_empty() {
        outln!(
            "no running arrays (control sockets in {})",
            crate::control::run_dir().display()
        );
    } else {
        for v in st {
            let s: wire::Status = serde_json::from_value(v)?;
            print_array(&s);
            outln!();
        }
    }
    // Like `ls` on entries it may not read: say so for each, and fail at the end.
    for d in &denied {
        eprintln!("raidkit: {d}");
    }
    if !denied.is_empty() {
        bail!(
            "{} serving process(es) would not tell you their arrays",
            denied.len()
        );
    }
    Ok(())
}

/// A network member's link, one line: state, since when, latency or the last error.
fn link_line(device: &str, l: &wire::Link) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ago = now.saturating_sub(l.since);
    let tls = if l.tls { ", TLS" } else { "" };
    let flush = if l.flush == Some(false) {
        ", no FLUSH (its acknowledged writes count as durable)"
    } else {
        ""
    };
    match l.state.as_str() {
        "connected" => format!(
            "{device}: connected for {ago} s{tls}, latency {:.1} ms{flush}",
            l.latency_us as f64 / 1000.0
        ),
        state => format!(
            "{device}: {state} for {ago} s ({} failed attempt(s)): {}",
            l.failed_attempts,
            l.error.as_deref().unwrap_or("-")
        ),
    }
}

/// One array, mdstat-like.
fn print_array(s: &wire::Status) {
    let members: Vec<String> = s
        .members
        .iter()
        .map(|m| {
            format!(
                "{}[{}]{}{}",
                m.device,
                m.role.map_or_else(|| "S".into(), |r| r.to_string()),
                if m.write_mostly { "(W)" } else { "" },
                member_flag(Some(&m.state))
            )
        })
        .collect();
    let n = s.raid_disks;
    let map: String = (0..n)
        .map(|r| {
            if s.missing_roles.contains(&r) {
                '_'
            } else {
                'U'
            }
        })
        .collect();
    outln!(
        "{}{} : {} {} {}",
        s.name,
        md_name_suffix(&s.name, &s.md_name),
        if s.read_only {
            "active (read-only)"
        } else {
            "active"
        },
        s.level,
        members.join(" ")
    );
    outln!(
        "      {} ({}) {} layout, {} chunk [{}/{}] [{}] {}",
        human(s.array_bytes),
        s.uuid,
        s.layout,
        human(s.chunk_bytes),
        n.saturating_sub(s.missing_roles.len()),
        n,
        map,
        s.state
    );
    for m in &s.members {
        if let Some(l) = &m.link {
            outln!("      {}", link_line(&m.device, l));
        }
        if m.write_behind_backlog > 0 {
            outln!(
                "      {}: {} write(s) behind",
                m.device,
                m.write_behind_backlog
            );
        }
    }
    for (l, what) in [
        (&s.lost_ranges, "LOST (reads fail)"),
        (&s.lost_zeroed_ranges, "lost, now zeros"),
    ] {
        if !l.is_empty() {
            let r: Vec<String> = l.iter().map(|(o, n)| format!("{o}..{}", o + n)).collect();
            outln!("      {what}: array bytes {}", r.join(", "));
        }
    }
    for b in &s.bad_blocks {
        let r: Vec<String> = b.ranges.iter().map(|(o, n)| format!("{o}+{n}")).collect();
        outln!(
            "      bad blocks on {}[{}]{}: {}",
            b.device,
            b.role,
            if b.logged {
                ""
            } else {
                " (NOT in an on-disk log)"
            },
            r.join(" ")
        );
    }
    print_job(&s.sync);
    if let Some(r) = &s.reshape {
        print_reshape(&s.name, r);
    }
    if let Some(c) = &s.stripe_cache {
        super::stats::print_stripe_cache(c);
    }
    for f in &s.disk_warnings {
        outln!("      {}: {}", f.severity, f.message);
    }
}

/// The background job's progress line, if one runs.
fn print_job(job: &wire::Job) {
    if job.action == "idle" {
        return;
    }
    let total = job.total_sectors.max(1);
    outln!(
        "      {} = {:.1}% ({}/{}) speed={}/s eta={}",
        job.action,
        job.done_sectors as f64 * 100.0 / total as f64,
        human(job.done_sectors * 512),
        human(job.total_sectors * 512),
        human(job.speed_bytes_per_sec),
        job.eta_seconds
            .map(|s| format!("{}m{:02}s", s / 60, s % 60))
            .unwrap_or_else(|| "?".into())
    );
}

/// The reshape in progress: from and to, and whether it moves (progress, speed and ETA
/// are on the job line).
fn print_reshape(name: &str, r: &wire::Reshape) {
    let shape = |s: &wire::Shape| {
        format!(
            "{} {} devices {} {}K",
            s.level,
            s.raid_disks,
            s.layout,
            s.chunk_sectors / 2
        )
    };
    let state = if r.paused {
        format!("paused (`raidkit grow {name} --resume`)")
    } else if r.running {
        "running".into()
    } else {
        format!("stopped (`raidkit grow {name} --continue`)")
    };
    outln!(
        "      reshape {} -> {}, {} {:.1}% done, {state}",
        shape(&r.old),
        shape(&r.new),
        r.direction,
        r.done_sectors as f64 * 100.0 / r.total_sectors.max(1) as f64
    );
}

/// The flag `status` prints after a member, as md's /proc/mdstat does: `(F)` faulty,
/// `(S)` spare, `(R)` replacement; none for an active member or one being recovered (the
/// recovery line shows that).
/// ` (host:name)` when the superblock's name says more than the export name (mdadm's
/// `--detail` shows it as `Name`); empty otherwise.
fn md_name_suffix(export: &str, md_name: &str) -> String {
    if md_name.is_empty() || md_name == export {
        String::new()
    } else {
        format!(" ({md_name})")
    }
}

fn member_flag(state: Option<&str>) -> &'static str {
    match state {
        Some("failed") => "(F)",
        Some("replacement") => "(R)",
        Some("spare") => "(S)",
        _ => "",
    }
}

#[cfg(test)]
mod flag_tests {
    use super::{md_name_suffix, member_flag};

    #[test]
    fn the_superblock_name_is_shown_when_it_says_more() {
        assert_eq!(md_name_suffix("vol0", "host1:vol0"), " (host1:vol0)");
        assert_eq!(md_name_suffix("vol0", "vol0"), "");
        assert_eq!(md_name_suffix("a1b2", ""), "");
    }

    #[test]
    fn member_flags_are_mdstat_flags() {
        let got: Vec<&str> = [
            Some("failed"),
            Some("replacement"),
            Some("spare"),
            Some("recovering"),
            Some("active"),
            None,
        ]
        .into_iter()
        .map(member_flag)
        .collect();
        assert_eq!(got, ["(F)", "(R)", "(S)", "", "", ""]);
    }
}
