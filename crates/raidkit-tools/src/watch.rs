//! Member lines of `raidkit stats` and `stats --watch`: the counters of each member between
//! two snapshots (matched by role and device, identity kept — a window's role is the
//! member's role, not a difference of roles), labelled by device name.

use crate::human;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// IO counters of one member, as the control socket's `stats` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCounters {
    /// Role slot.
    pub role: usize,
    /// Device path.
    pub device: String,
    /// Read requests.
    #[serde(default)]
    pub reads: u64,
    /// Bytes read.
    #[serde(default)]
    pub read_bytes: u64,
    /// Write requests.
    #[serde(default)]
    pub writes: u64,
    /// Bytes written.
    #[serde(default)]
    pub write_bytes: u64,
}

/// The members of a `stats` JSON array (entries that do not parse are skipped).
pub fn parse_members(v: &Value) -> Vec<MemberCounters> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| serde_json::from_value(m.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Counters between two snapshots; a member absent from `before` (just added) counts from 0.
pub fn window(now: &[MemberCounters], before: &[MemberCounters]) -> Vec<MemberCounters> {
    now.iter()
        .map(|m| {
            match before
                .iter()
                .find(|b| b.role == m.role && b.device == m.device)
            {
                Some(b) => MemberCounters {
                    role: m.role,
                    device: m.device.clone(),
                    reads: m.reads.saturating_sub(b.reads),
                    read_bytes: m.read_bytes.saturating_sub(b.read_bytes),
                    writes: m.writes.saturating_sub(b.writes),
                    write_bytes: m.write_bytes.saturating_sub(b.write_bytes),
                },
                None => m.clone(),
            }
        })
        .collect()
}

/// [`window`] on the JSON the control socket returns (for `stats --watch --json`).
pub fn window_json(now: &Value, before: &Value) -> Value {
    serde_json::to_value(window(&parse_members(now), &parse_members(before))).unwrap_or(Value::Null)
}

/// One line per member: name, role, share of IOs and bytes, and with `window_secs` the
/// rates of that window.
pub fn member_lines(members: &[MemberCounters], window_secs: Option<f64>) -> Vec<String> {
    let ios: u64 = members.iter().map(|m| m.reads + m.writes).sum();
    let bytes: u64 = members.iter().map(|m| m.read_bytes + m.write_bytes).sum();
    let devices: Vec<String> = members.iter().map(|m| m.device.clone()).collect();
    let names = human::device_labels(&devices);
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let share = |a: u64, t: u64| {
        if t > 0 {
            a as f64 / t as f64
        } else {
            0.0
        }
    };
    members
        .iter()
        .zip(&names)
        .map(|(m, name)| {
            let (i, b) = (m.reads + m.writes, m.read_bytes + m.write_bytes);
            let mut s = format!(
                "  {name:<width$} role {:<2} {:>6} of IOs {:>6} of bytes",
                m.role,
                human::percent(share(i, ios)),
                human::percent(share(b, bytes)),
            );
            if let Some(w) = window_secs.filter(|&w| w > 0.0) {
                s += &format!(
                    "  {} IOPS, {} read, {} written",
                    human::count(i as f64 / w),
                    human::rate(m.read_bytes as f64 / w),
                    human::rate(m.write_bytes as f64 / w)
                );
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap(reads: [u64; 3]) -> Value {
        json!([
            {"role": 0, "device": "/dev/sda", "reads": reads[0], "read_bytes": reads[0] * 4096, "writes": 0, "write_bytes": 0},
            {"role": 1, "device": "/dev/sdb", "reads": reads[1], "read_bytes": reads[1] * 4096, "writes": 0, "write_bytes": 0},
            {"role": 2, "device": "/dev/sdc", "reads": reads[2], "read_bytes": reads[2] * 4096, "writes": 0, "write_bytes": 0},
        ])
    }

    #[test]
    fn a_window_keeps_each_members_identity() {
        let w = window_json(&snap([110, 220, 330]), &snap([100, 200, 300]));
        let w = parse_members(&w);
        assert_eq!(
            w.iter()
                .map(|m| (m.role, m.device.as_str(), m.reads))
                .collect::<Vec<_>>(),
            [
                (0, "/dev/sda", 10),
                (1, "/dev/sdb", 20),
                (2, "/dev/sdc", 30)
            ]
        );
        let lines = member_lines(&w, Some(2.0));
        assert_eq!(
            lines[1],
            "  sdb role 1   33.3% of IOs  33.3% of bytes  10 IOPS, 40 KiB/s read, 0 B/s written"
        );
        assert!(lines[0].starts_with("  sda role 0 "), "{}", lines[0]);
        assert!(lines[2].starts_with("  sdc role 2 "), "{}", lines[2]);
    }

    #[test]
    fn a_new_member_counts_from_zero() {
        let before = json!([{"role": 0, "device": "/dev/sda", "reads": 5}]);
        let now = json!([{"role": 0, "device": "/dev/sdd", "reads": 7}]);
        assert_eq!(parse_members(&window_json(&now, &before))[0].reads, 7);
    }
}
