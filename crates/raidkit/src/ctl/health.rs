//! Health metrics of every running array in the Prometheus text format, from the status
//! the serving processes report (a pure function of that JSON: tested without a server).
//!
//! The md part carries node_exporter's md collector names under a `raidkit_` prefix
//! (`raidkit_md_state`, `raidkit_md_disks`, `raidkit_md_disks_required`, `raidkit_md_blocks`,
//! `raidkit_md_blocks_synced`, same labels plus `array`, same units): alert rules written
//! for node_exporter work with the prefix swapped, and a host running both node_exporter
//! (for its kernel md arrays) and raidkit gets no clashing series. What md cannot say
//! follows: lost ranges, bad blocks, mismatches with verdicts, member states, member
//! latency histograms, network member links (see `docs/METRICS.md`).

use serde_json::Value;
use std::fmt::Write as _;

/// Member states `status` reports (one series each, 1 for the current one).
const MEMBER_STATES: [&str; 5] = ["in_sync", "recovering", "replacement", "spare", "failed"];
/// md states as node_exporter names them (plus `reshape`, which /proc/mdstat has too).
const MD_STATES: [&str; 6] = [
    "active",
    "inactive",
    "recovering",
    "resync",
    "check",
    "reshape",
];
/// Network member link states.
const LINK_STATES: [&str; 3] = ["connected", "connecting", "disconnected"];
/// Latency buckets of the member histograms (bucket `i`: `2^i <= µs < 2^(i+1)`).
const LAT_BUCKETS: usize = 24;

/// A label value with `\\`, `"` and newlines escaped, as the text format wants.
pub fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Accumulates the text, writing each family's HELP/TYPE once before its first sample.
struct Out {
    text: String,
    families: Vec<(String, String, &'static str)>,
    samples: Vec<Vec<String>>,
}

impl Out {
    fn new() -> Out {
        Out {
            text: String::new(),
            families: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// Declare a family (in output order).
    fn family(&mut self, name: &str, kind: &'static str, help: &str) {
        self.families.push((name.into(), help.into(), kind));
        self.samples.push(Vec::new());
    }

    /// One sample of family `name` (`series` is the full name, with a suffix for
    /// histogram parts).
    fn sample(&mut self, name: &str, series: &str, labels: &str, v: impl std::fmt::Display) {
        if let Some(i) = self.families.iter().position(|f| f.0 == name) {
            self.samples[i].push(format!("{series}{{{labels}}} {v}"));
        }
    }

    fn finish(mut self) -> String {
        for ((name, help, kind), samples) in self.families.iter().zip(&self.samples) {
            if samples.is_empty() {
                continue;
            }
            let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for s in samples {
                let _ = writeln!(self.text, "{s}");
            }
        }
        self.text
    }
}

fn declare(o: &mut Out) {
    for (n, k, h) in [
        ("raidkit_md_state", "gauge", "Array state as node_exporter's node_md_state (1 for the current one)."),
        ("raidkit_md_disks", "gauge", "Members by state: active, failed, spare (node_md_disks)."),
        ("raidkit_md_disks_required", "gauge", "Members the array needs (node_md_disks_required)."),
        ("raidkit_md_blocks", "gauge", "Array size in 1 KiB blocks (node_md_blocks)."),
        ("raidkit_md_blocks_synced", "gauge", "Blocks of the current resync/recovery/check done; the size when idle (node_md_blocks_synced)."),
        ("raidkit_array_info", "gauge", "Constant 1, with the array's UUID, superblock name, level and layout."),
        ("raidkit_array_degraded", "gauge", "1 if roles are missing."),
        ("raidkit_array_dirty", "gauge", "1 if redundancy may be inconsistent (a resync is due)."),
        ("raidkit_array_read_only", "gauge", "1 if served read-only."),
        ("raidkit_array_missing_roles", "gauge", "Roles with no member."),
        ("raidkit_array_size_bytes", "gauge", "Array size."),
        ("raidkit_sync_speed_bytes_per_second", "gauge", "Speed of the background job (0 when idle)."),
        ("raidkit_sync_eta_seconds", "gauge", "Estimated time left of the background job."),
        ("raidkit_lost_ranges", "gauge", "Array byte ranges whose data is lost (reads of them fail)."),
        ("raidkit_lost_bytes", "gauge", "Bytes of the array whose data is lost."),
        ("raidkit_lost_zeroed_bytes", "gauge", "Bytes lost and replaced by zeros."),
        ("raidkit_member_state", "gauge", "Member state (1 for the current one)."),
        ("raidkit_member_bad_block_ranges", "gauge", "Ranges in the member's bad-block list."),
        ("raidkit_member_bad_block_sectors", "gauge", "Sectors in the member's bad-block list."),
        ("raidkit_member_bad_blocks_logged", "gauge", "1 if the member's bad blocks are kept in an on-disk log."),
        ("raidkit_member_latency_seconds", "histogram", "Member IO service time."),
        ("raidkit_member_write_mostly", "gauge", "1 if the member is write-mostly (read only when no other copy can serve)."),
        ("raidkit_member_write_behind_backlog", "gauge", "Writes acknowledged to clients and not yet on this write-mostly member (write-behind)."),
        ("raidkit_member_link_up", "gauge", "Network member: 1 if connected."),
        ("raidkit_member_link_state", "gauge", "Network member link state (1 for the current one)."),
        ("raidkit_member_link_connects_total", "counter", "Network member: successful connections."),
        ("raidkit_member_link_failed_attempts", "gauge", "Network member: failed connection attempts since the last success."),
        ("raidkit_member_link_in_flight", "gauge", "Network member: requests in flight."),
        ("raidkit_member_link_latency_seconds", "gauge", "Network member: moving average request latency."),
        ("raidkit_last_sync_info", "gauge", "The last check/repair/resync: 1, with its action; 0 results below mean none found."),
        ("raidkit_mismatch_ranges", "gauge", "Inconsistent ranges the last check/repair/resync found."),
        ("raidkit_mismatch_bytes", "gauge", "Inconsistent bytes the last check/repair/resync found."),
        ("raidkit_mismatch_verdicts", "gauge", "Mismatch verdicts of the last pass by how they were decided, what was wrong and whether repaired."),
        ("raidkit_last_job_failed", "gauge", "1 if the last background job failed."),
        ("raidkit_rebuild_lost_bytes", "gauge", "Bytes the last recovery could not reconstruct."),
    ] {
        o.family(n, k, h);
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn text(v: &Value) -> String {
    esc(v.as_str().unwrap_or(""))
}

/// The md state word of an array: its background job as node_exporter names it.
fn md_state(a: &Value) -> &'static str {
    match a["sync"]["action"].as_str().unwrap_or("idle") {
        "resync" => "resync",
        "recovery" | "replace" | "re-add" => "recovering",
        "check" | "repair" => "check",
        "reshape" => "reshape",
        _ if a["reshape"].is_object() => "reshape",
        _ => "active",
    }
}

fn md_metrics(o: &mut Out, a: &Value, al: &str) {
    let md = format!("device=\"{}\",{al}", text(&a["name"]));
    let now = md_state(a);
    for s in MD_STATES {
        o.sample(
            "raidkit_md_state",
            "raidkit_md_state",
            &format!("{md},state=\"{s}\""),
            u64::from(s == now),
        );
    }
    let members = a["members"].as_array().cloned().unwrap_or_default();
    let count = |f: &dyn Fn(&Value) -> bool| members.iter().filter(|m| f(m)).count();
    let active = count(&|m| m["role"].is_u64() && m["state"] != "failed");
    let failed = count(&|m| m["state"] == "failed");
    // A network member away since assembly (role not known yet) is not a spare.
    let spare =
        count(&|m| m["role"].is_null() && !matches!(m["state"].as_str(), Some("failed" | "away")));
    for (s, n) in [("active", active), ("failed", failed), ("spare", spare)] {
        o.sample(
            "raidkit_md_disks",
            "raidkit_md_disks",
            &format!("{md},state=\"{s}\""),
            n,
        );
    }
    o.sample(
        "raidkit_md_disks_required",
        "raidkit_md_disks_required",
        &md,
        u(&a["raid_disks"]),
    );
    let blocks = u(&a["array_bytes"]) / 1024;
    o.sample("raidkit_md_blocks", "raidkit_md_blocks", &md, blocks);
    let sync = &a["sync"];
    let synced = if now == "active" || u(&sync["total_sectors"]) == 0 {
        blocks
    } else {
        // The job's own address space, scaled to the array's blocks.
        (u(&sync["done_sectors"]) as f64 / u(&sync["total_sectors"]) as f64 * blocks as f64) as u64
    };
    o.sample(
        "raidkit_md_blocks_synced",
        "raidkit_md_blocks_synced",
        &md,
        synced.min(blocks),
    );
}

fn array_metrics(o: &mut Out, a: &Value, al: &str) {
    let info = format!(
        "{al},uuid=\"{}\",md_name=\"{}\",level=\"{}\",layout=\"{}\"",
        text(&a["uuid"]),
        text(&a["md_name"]),
        text(&a["level"]),
        text(&a["layout"])
    );
    o.sample("raidkit_array_info", "raidkit_array_info", &info, 1);
    let flag = |b: &Value| u64::from(b.as_bool().unwrap_or(false));
    o.sample(
        "raidkit_array_degraded",
        "raidkit_array_degraded",
        al,
        flag(&a["degraded"]),
    );
    let dirty = a["state"].as_str().unwrap_or("").starts_with("dirty");
    o.sample(
        "raidkit_array_dirty",
        "raidkit_array_dirty",
        al,
        u64::from(dirty),
    );
    o.sample(
        "raidkit_array_read_only",
        "raidkit_array_read_only",
        al,
        flag(&a["read_only"]),
    );
    let missing = a["missing_roles"].as_array().map_or(0, Vec::len);
    o.sample(
        "raidkit_array_missing_roles",
        "raidkit_array_missing_roles",
        al,
        missing,
    );
    o.sample(
        "raidkit_array_size_bytes",
        "raidkit_array_size_bytes",
        al,
        u(&a["array_bytes"]),
    );
    let sync = &a["sync"];
    o.sample(
        "raidkit_sync_speed_bytes_per_second",
        "raidkit_sync_speed_bytes_per_second",
        al,
        u(&sync["speed_bytes_per_sec"]),
    );
    if let Some(eta) = sync["eta_seconds"].as_u64() {
        o.sample(
            "raidkit_sync_eta_seconds",
            "raidkit_sync_eta_seconds",
            al,
            eta,
        );
    }
    let ranges = |v: &Value| -> (usize, u64) {
        let list = v.as_array().cloned().unwrap_or_default();
        (list.len(), list.iter().map(|r| u(&r[1])).sum())
    };
    let (n, bytes) = ranges(&a["lost_ranges"]);
    o.sample("raidkit_lost_ranges", "raidkit_lost_ranges", al, n);
    o.sample("raidkit_lost_bytes", "raidkit_lost_bytes", al, bytes);
    let (_, zeroed) = ranges(&a["lost_zeroed_ranges"]);
    o.sample(
        "raidkit_lost_zeroed_bytes",
        "raidkit_lost_zeroed_bytes",
        al,
        zeroed,
    );
}

fn member_labels(al: &str, device: &Value, role: &Value) -> String {
    let role = role
        .as_u64()
        .map_or_else(|| "spare".to_string(), |r| r.to_string());
    format!("{al},device=\"{}\",role=\"{role}\"", text(device))
}

fn member_metrics(o: &mut Out, a: &Value, al: &str) {
    for m in a["members"].as_array().into_iter().flatten() {
        let ml = member_labels(al, &m["device"], &m["role"]);
        member_state_metrics(o, m, &ml);
        if m["link"].is_object() {
            member_link_metrics(o, &m["link"], &ml);
        }
    }
    member_bad_block_metrics(o, a, al);
    for io in a["io"].as_array().into_iter().flatten() {
        let ml = member_labels(al, &io["device"], &io["role"]);
        for op in ["read", "write"] {
            latency_histogram(
                o,
                &format!("{ml},op=\"{op}\""),
                &io[format!("{op}_lat_hist_us")],
                u(&io[format!("{op}_lat_sum_ns")]),
            );
        }
    }
}

/// One member's state (one sample per known state, 1 for the current one), write-mostly
/// flag and write-behind backlog.
fn member_state_metrics(o: &mut Out, m: &Value, ml: &str) {
    let now = m["state"].as_str().unwrap_or("");
    for s in MEMBER_STATES {
        o.sample(
            "raidkit_member_state",
            "raidkit_member_state",
            &format!("{ml},state=\"{s}\""),
            u64::from(s == now),
        );
    }
    if !now.is_empty() && !MEMBER_STATES.contains(&now) {
        o.sample(
            "raidkit_member_state",
            "raidkit_member_state",
            &format!("{ml},state=\"{}\"", esc(now)),
            1,
        );
    }
    o.sample(
        "raidkit_member_write_mostly",
        "raidkit_member_write_mostly",
        ml,
        u64::from(m["write_mostly"] == true),
    );
    o.sample(
        "raidkit_member_write_behind_backlog",
        "raidkit_member_write_behind_backlog",
        ml,
        u(&m["write_behind_backlog"]),
    );
}

/// A network member's link: up, state, connects, failed attempts, requests in flight
/// and latency.
fn member_link_metrics(o: &mut Out, link: &Value, ml: &str) {
    let st = link["state"].as_str().unwrap_or("");
    o.sample(
        "raidkit_member_link_up",
        "raidkit_member_link_up",
        ml,
        u64::from(st == "connected"),
    );
    for s in LINK_STATES {
        o.sample(
            "raidkit_member_link_state",
            "raidkit_member_link_state",
            &format!("{ml},state=\"{s}\""),
            u64::from(s == st),
        );
    }
    o.sample(
        "raidkit_member_link_connects_total",
        "raidkit_member_link_connects_total",
        ml,
        u(&link["connects"]),
    );
    o.sample(
        "raidkit_member_link_failed_attempts",
        "raidkit_member_link_failed_attempts",
        ml,
        u(&link["failed_attempts"]),
    );
    o.sample(
        "raidkit_member_link_in_flight",
        "raidkit_member_link_in_flight",
        ml,
        u(&link["in_flight"]),
    );
    o.sample(
        "raidkit_member_link_latency_seconds",
        "raidkit_member_link_latency_seconds",
        ml,
        u(&link["latency_us"]) as f64 / 1e6,
    );
}

/// Every member with a role: its bad-block ranges, sectors, and whether its log is kept
/// (0 when its list is empty).
fn member_bad_block_metrics(o: &mut Out, a: &Value, al: &str) {
    let members = a["members"].as_array().cloned().unwrap_or_default();
    for m in members.iter().filter(|m| m["role"].is_u64()) {
        let ml = member_labels(al, &m["device"], &m["role"]);
        let b = a["bad_blocks"]
            .as_array()
            .and_then(|l| l.iter().find(|b| b["device"] == m["device"]))
            .cloned()
            .unwrap_or(Value::Null);
        let list = b["ranges"].as_array().cloned().unwrap_or_default();
        o.sample(
            "raidkit_member_bad_block_ranges",
            "raidkit_member_bad_block_ranges",
            &ml,
            list.len(),
        );
        let sectors: u64 = list.iter().map(|r| u(&r[1])).sum();
        o.sample(
            "raidkit_member_bad_block_sectors",
            "raidkit_member_bad_block_sectors",
            &ml,
            sectors,
        );
        o.sample(
            "raidkit_member_bad_blocks_logged",
            "raidkit_member_bad_blocks_logged",
            &ml,
            u64::from(b["logged"] == true),
        );
    }
}

/// A power-of-two microsecond histogram as a Prometheus histogram in seconds.
fn latency_histogram(o: &mut Out, labels: &str, hist: &Value, sum_ns: u64) {
    let Some(h) = hist.as_array() else { return };
    let name = "raidkit_member_latency_seconds";
    let mut acc = 0;
    for (i, c) in h.iter().enumerate().take(LAT_BUCKETS) {
        acc += u(c);
        if i + 1 < h.len().min(LAT_BUCKETS) {
            let le = (1u64 << (i + 1)) as f64 / 1e6;
            o.sample(
                name,
                &format!("{name}_bucket"),
                &format!("{labels},le=\"{le}\""),
                acc,
            );
        }
    }
    o.sample(
        name,
        &format!("{name}_bucket"),
        &format!("{labels},le=\"+Inf\""),
        acc,
    );
    o.sample(name, &format!("{name}_sum"), labels, sum_ns as f64 / 1e9);
    o.sample(name, &format!("{name}_count"), labels, acc);
}

fn result_metrics(o: &mut Out, a: &Value, al: &str) {
    let r = &a["last_result"];
    if r.is_null() {
        return;
    }
    let action = text(&r["action"]);
    if r["error"].is_string() {
        o.sample(
            "raidkit_last_job_failed",
            "raidkit_last_job_failed",
            &format!("{al},action=\"{action}\""),
            1,
        );
        return;
    }
    o.sample(
        "raidkit_last_job_failed",
        "raidkit_last_job_failed",
        &format!("{al},action=\"{action}\""),
        0,
    );
    if let Some(list) = r["mismatch_ranges"].as_array() {
        let l = format!("{al},action=\"{action}\"");
        o.sample("raidkit_last_sync_info", "raidkit_last_sync_info", &l, 1);
        o.sample(
            "raidkit_mismatch_ranges",
            "raidkit_mismatch_ranges",
            &l,
            list.len(),
        );
        o.sample(
            "raidkit_mismatch_bytes",
            "raidkit_mismatch_bytes",
            &l,
            list.iter().map(|x| u(&x[1])).sum::<u64>(),
        );
        let mut by: std::collections::BTreeMap<(String, String, bool), u64> = Default::default();
        for v in r["verdicts"].as_array().into_iter().flatten() {
            let what = v["what"]
                .as_str()
                .unwrap_or("")
                .split(' ')
                .next()
                .unwrap_or("")
                .to_string();
            *by.entry((text(&v["decided_by"]), esc(&what), v["repaired"] == true))
                .or_default() += 1;
        }
        for ((decided, what, repaired), n) in by {
            o.sample(
                "raidkit_mismatch_verdicts",
                "raidkit_mismatch_verdicts",
                &format!("{l},decided_by=\"{decided}\",what=\"{what}\",repaired=\"{repaired}\""),
                n,
            );
        }
    }
    if let Some(lost) = r["lost"].as_array() {
        let l = format!("{al},action=\"{action}\"");
        o.sample(
            "raidkit_rebuild_lost_bytes",
            "raidkit_rebuild_lost_bytes",
            &l,
            lost.iter().map(|x| u(&x[1])).sum::<u64>(),
        );
    }
}

/// The health metrics of these arrays (status JSON as the servers send it).
pub fn health_text(arrays: &[Value]) -> String {
    let mut o = Out::new();
    declare(&mut o);
    for a in arrays {
        let al = format!("array=\"{}\"", text(&a["name"]));
        md_metrics(&mut o, a, &al);
        array_metrics(&mut o, a, &al);
        member_metrics(&mut o, a, &al);
        result_metrics(&mut o, a, &al);
    }
    o.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn degraded_with_a_link() -> Value {
        json!({
            "name": "vol", "uuid": "u", "md_name": "h:vol", "level": "raid1", "layout": "",
            "raid_disks": 2, "array_bytes": 1048576, "state": "dirty, degraded", "degraded": true,
            "read_only": false, "missing_roles": [1],
            "members": [
                {"device": "nbd://peer/x", "role": 0, "state": "in_sync",
                 "link": {"state": "connecting", "connects": 3, "failed_attempts": 2, "in_flight": 0, "latency_us": 1500}},
                {"device": "b", "role": 1, "state": "failed", "write_mostly": true, "write_behind_backlog": 5},
                {"device": "s", "role": null, "state": "spare"}
            ],
            "io": [{"device": "b", "role": 1, "read_lat_hist_us": [0, 2, 1], "write_lat_hist_us": [], "read_lat_sum_ns": 7000, "write_lat_sum_ns": 0}],
            "sync": {"action": "recovery", "done_sectors": 512, "total_sectors": 2048, "speed_bytes_per_sec": 10, "eta_seconds": 3},
            "lost_ranges": [[0, 4096], [8192, 4096]], "lost_zeroed_ranges": [],
            "bad_blocks": [{"role": 1, "device": "b", "ranges": [[100, 8], [200, 8]], "logged": true}],
            "last_result": {"action": "check", "mismatch_ranges": [[0, 4096]], "verdicts": [
                {"what": "P", "decided_by": "P+Q", "repaired": false}]}
        })
    }

    #[test]
    fn md_names_and_what_md_cannot_say() {
        let t = health_text(&[degraded_with_a_link()]);
        for line in [
            "raidkit_md_state{device=\"vol\",array=\"vol\",state=\"recovering\"} 1",
            "raidkit_md_state{device=\"vol\",array=\"vol\",state=\"active\"} 0",
            "raidkit_md_disks{device=\"vol\",array=\"vol\",state=\"active\"} 1",
            "raidkit_md_disks{device=\"vol\",array=\"vol\",state=\"failed\"} 1",
            "raidkit_md_disks{device=\"vol\",array=\"vol\",state=\"spare\"} 1",
            "raidkit_md_disks_required{device=\"vol\",array=\"vol\"} 2",
            "raidkit_md_blocks{device=\"vol\",array=\"vol\"} 1024",
            "raidkit_md_blocks_synced{device=\"vol\",array=\"vol\"} 256",
            "raidkit_array_degraded{array=\"vol\"} 1",
            "raidkit_array_dirty{array=\"vol\"} 1",
            "raidkit_lost_ranges{array=\"vol\"} 2",
            "raidkit_lost_bytes{array=\"vol\"} 8192",
            "raidkit_member_state{array=\"vol\",device=\"b\",role=\"1\",state=\"failed\"} 1",
            "raidkit_member_state{array=\"vol\",device=\"s\",role=\"spare\",state=\"spare\"} 1",
            "raidkit_member_bad_block_sectors{array=\"vol\",device=\"b\",role=\"1\"} 16",
            "raidkit_member_link_up{array=\"vol\",device=\"nbd://peer/x\",role=\"0\"} 0",
            "raidkit_member_write_mostly{array=\"vol\",device=\"b\",role=\"1\"} 1",
            "raidkit_member_write_mostly{array=\"vol\",device=\"nbd://peer/x\",role=\"0\"} 0",
            "raidkit_member_write_behind_backlog{array=\"vol\",device=\"b\",role=\"1\"} 5",
            "raidkit_member_link_state{array=\"vol\",device=\"nbd://peer/x\",role=\"0\",state=\"connecting\"} 1",
            "raidkit_member_link_latency_seconds{array=\"vol\",device=\"nbd://peer/x\",role=\"0\"} 0.0015",
            "raidkit_member_latency_seconds_bucket{array=\"vol\",device=\"b\",role=\"1\",op=\"read\",le=\"0.000004\"} 2",
            "raidkit_member_latency_seconds_bucket{array=\"vol\",device=\"b\",role=\"1\",op=\"read\",le=\"+Inf\"} 3",
            "raidkit_member_latency_seconds_count{array=\"vol\",device=\"b\",role=\"1\",op=\"read\"} 3",
            "raidkit_mismatch_bytes{array=\"vol\",action=\"check\"} 4096",
            "raidkit_mismatch_verdicts{array=\"vol\",action=\"check\",decided_by=\"P+Q\",what=\"P\",repaired=\"false\"} 1",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line}\n{t}");
        }
        assert_eq!(t.matches("# TYPE raidkit_md_state gauge").count(), 1);
        assert!(!t.contains("raidkit_rebuild_lost_bytes{"), "{t}");
    }
}
