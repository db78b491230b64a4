//! The disk checks as the CLI uses them: one call per command (`create` before it writes,
//! `detail` on an assembled array, `status` on the control socket's JSON) and terminal lines.

use super::domains::DomainFinding;
use super::smart::{SmartFinding, SmartStatus};
use super::{check_new_members_on, ArrayShape, HostSystem, MemberRef};
use raidkit_engine::Array;
use raidkit_layout::{names, Level};
use serde_json::Value;
use std::path::Path;

/// Lines for a terminal: one per failure-domain finding (`warning: members 0 (…) and 2 (…)
/// are partitions of /dev/sda: …`), then SMART per member — healthy and problem members one
/// line each; members without SMART data folded into one line per reason.
pub fn report_lines(domains: &[DomainFinding], smart: &[SmartFinding]) -> Vec<String> {
    let mut v: Vec<String> = domains.iter().map(|f| f.to_string()).collect();
    let mut unavailable: Vec<(String, Vec<String>)> = Vec::new();
    for f in smart {
        if f.status == SmartStatus::Unavailable {
            let why = f.note.clone().unwrap_or_default();
            let who = f
                .member
                .role
                .map_or_else(|| f.member.path.clone(), |r| r.to_string());
            match unavailable.iter_mut().find(|(w, _)| *w == why) {
                Some((_, ms)) => ms.push(who),
                None => unavailable.push((why, vec![who])),
            }
        } else {
            let sev = match f.status {
                SmartStatus::Failing => "critical: ",
                SmartStatus::Warning => "warning: ",
                _ => "",
            };
            v.push(format!("{sev}{}", f.describe()));
        }
    }
    for (why, ms) in unavailable {
        let who = if ms.len() == 1 {
            format!("member {}", ms[0])
        } else {
            format!("members {}", ms.join(", "))
        };
        v.push(format!("no SMART data for {who}: {why}"));
    }
    v
}

/// Failure-domain warnings for `create` (members in role order, the word `missing`
/// allowed), one line each, before anything is written. Members that do not exist yet
/// (`--size` makes them) are checked where they can be.
pub fn create_warnings<P: AsRef<Path>>(
    level: Level,
    raid_disks: usize,
    layout: Option<u32>,
    members: &[P],
) -> Vec<String> {
    let shape = ArrayShape::new(level, raid_disks, layout);
    check_new_members_on(
        &HostSystem,
        &MemberRef::in_role_order(members),
        Some(&shape),
    )
    .iter()
    .map(|f| f.to_string())
    .collect()
}

/// The members (active and spare, failed ones left out) and shape of an assembled array.
pub fn of_array(arr: &Array) -> (Vec<MemberRef>, ArrayShape) {
    let g = arr.geometry();
    let members = arr
        .members()
        .into_iter()
        .filter(|m| m.state != "failed")
        .map(|m| MemberRef {
            role: m.role,
            path: m.device,
        })
        .collect();
    (
        members,
        ArrayShape::new(g.level, g.raid_disks, Some(g.layout)),
    )
}

/// The members (failed ones left out) and shape of one array of `status --json`.
pub fn of_status(s: &Value) -> (Vec<MemberRef>, Option<ArrayShape>) {
    let members = s["members"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|m| m["state"] != "failed")
                .filter_map(|m| {
                    Some(MemberRef {
                        role: m["role"].as_u64().map(|r| r as usize),
                        path: m["device"].as_str()?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let level = s["level"].as_str().and_then(|l| Level::parse(l).ok());
    let shape = level.map(|l| {
        let layout = s["layout"]
            .as_str()
            .and_then(|n| names::parse_layout(l, n).ok());
        ArrayShape::new(l, s["raid_disks"].as_u64().unwrap_or(0) as usize, layout)
    });
    (members, shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disks::smart::SmartProblem;
    use crate::disks::{DomainKind, Severity};
    use serde_json::json;

    #[test]
    fn status_json_to_members_and_shape() {
        let s = json!({"level": "raid10", "layout": "f2", "raid_disks": 4, "members": [
            {"device": "/dev/sda", "role": 0, "state": "in_sync"},
            {"device": "/dev/sdb", "role": 1, "state": "failed"},
            {"device": "/dev/sdc", "role": null, "state": "spare"},
        ]});
        let (m, shape) = of_status(&s);
        assert_eq!(
            m,
            [
                MemberRef {
                    role: Some(0),
                    path: "/dev/sda".into()
                },
                MemberRef {
                    role: None,
                    path: "/dev/sdc".into()
                },
            ]
        );
        let shape = shape.unwrap();
        assert_eq!(
            (shape.level, shape.raid_disks, shape.layout),
            (Level::Raid10, 4, 0x201)
        );
    }

    #[test]
    fn lines_fold_members_without_smart_data() {
        let m = |r: usize| MemberRef {
            role: Some(r),
            path: format!("/x/d{r}.img"),
        };
        let d = DomainFinding {
            severity: Severity::Warning,
            kind: DomainKind::SameDisk,
            members: vec![m(0), m(1)],
            shared: "/dev/vda".into(),
            message: "members 0 and 1 sit on one disk".into(),
        };
        let un = |r: usize| SmartFinding {
            member: m(r),
            disk: None,
            status: SmartStatus::Unavailable,
            problems: vec![],
            health: None,
            note: Some("a virtual device".into()),
        };
        let mut bad = un(2);
        bad.status = SmartStatus::Failing;
        bad.disk = Some("/dev/sdc".into());
        bad.problems = vec![SmartProblem {
            severity: Severity::Critical,
            key: "health_failed".into(),
            value: None,
            message: "SMART overall health: FAILED".into(),
        }];
        assert_eq!(
            report_lines(&[d], &[un(0), un(1), bad]),
            [
                "warning: members 0 and 1 sit on one disk",
                "critical: member 2 (/x/d2.img) on /dev/sdc: SMART FAILING: SMART overall health: FAILED",
                "no SMART data for members 0, 1: a virtual device",
            ]
        );
    }
}
