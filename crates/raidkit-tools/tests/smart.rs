//! SMART: parsing recorded/representative `smartctl --json` outputs (tests/data/smart), the
//! verdicts, one smartctl run per disk, the `smart_warning` event and its news filter.

use raidkit_tools::disks::fake::{self, pci};
use raidkit_tools::disks::smart::{
    check_smart_with, judge, parse, problems, SmartSource, SmartStatus, SmartWatch,
};
use raidkit_tools::disks::{FakeSystem, MemberRef, Severity};
use std::cell::RefCell;
use std::collections::BTreeMap;

fn sample(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/smart")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn keys(name: &str) -> Vec<(Severity, String, Option<u64>)> {
    let h = parse(&sample(name), 0).unwrap();
    problems(&h)
        .into_iter()
        .map(|p| (p.severity, p.key, p.value))
        .collect()
}

#[test]
fn ata_samples() {
    let h = parse(&sample("ata-healthy.json"), 0).unwrap();
    assert_eq!(h.device, "/dev/sda");
    assert_eq!(h.protocol.as_deref(), Some("ATA"));
    assert_eq!(h.model.as_deref(), Some("WDC WD40EFRX-68N32N0"));
    assert_eq!(h.passed, Some(true));
    assert_eq!(h.temperature_c, Some(36));
    assert_eq!(h.power_on_hours, Some(28211));
    assert_eq!(h.rotational, Some(true));
    assert_eq!(
        (h.reallocated_sectors, h.pending_sectors, h.crc_errors),
        (Some(0), Some(0), Some(0))
    );
    assert!(problems(&h).is_empty());

    assert_eq!(
        keys("ata-pending.json"),
        [
            (Severity::Warning, "reallocated_sectors".into(), Some(8)),
            (Severity::Warning, "pending_sectors".into(), Some(16)),
            (Severity::Notice, "crc_errors".into(), Some(3)),
        ]
    );
    assert_eq!(
        keys("ata-failing.json"),
        [
            (Severity::Critical, "health_failed".into(), None),
            (Severity::Critical, "attributes_failing".into(), None),
            (Severity::Warning, "reallocated_sectors".into(), Some(1912)),
            (Severity::Warning, "pending_sectors".into(), Some(48)),
            (Severity::Warning, "offline_uncorrectable".into(), Some(48)),
        ]
    );
    let h = parse(&sample("ata-failing.json"), 0).unwrap();
    assert_eq!(h.failing_attributes, ["5 Reallocated_Sector_Ct"]);
    assert_eq!(h.exit_status, 24);
}

#[test]
fn nvme_samples() {
    let h = parse(&sample("nvme-healthy.json"), 0).unwrap();
    assert_eq!(h.protocol.as_deref(), Some("NVMe"));
    assert_eq!(
        (
            h.media_errors,
            h.critical_warning,
            h.available_spare_pct,
            h.percentage_used
        ),
        (Some(0), Some(0), Some(100), Some(3))
    );
    assert!(problems(&h).is_empty());
    assert_eq!(
        keys("nvme-media-errors.json"),
        [
            (Severity::Critical, "health_failed".into(), None),
            (Severity::Critical, "critical_warning_0x04".into(), Some(4)),
            (Severity::Warning, "media_errors".into(), Some(7)),
        ]
    );
}

#[test]
fn recorded_unavailable_device_and_broken_output() {
    let m = MemberRef {
        role: Some(1),
        path: "/dev/vda".into(),
    };
    let f = judge(&m, "/dev/vda", &Ok((sample("vda-unavailable.json"), 1)));
    assert_eq!(f.status, SmartStatus::Unavailable);
    assert_eq!(
        f.note.as_deref(),
        Some("/dev/vda: Unable to detect device type")
    );
    let f = judge(&m, "/dev/vda", &Ok(("not json".into(), 0)));
    assert_eq!(f.status, SmartStatus::Unavailable);
    assert!(f.note.unwrap().starts_with("smartctl JSON:"));
    let f = judge(&m, "/dev/vda", &Err("smartctl is not installed".into()));
    assert_eq!(f.note.as_deref(), Some("smartctl is not installed"));
}

/// Replays samples by device and counts the queries.
struct Replay {
    by_dev: BTreeMap<String, &'static str>,
    asked: RefCell<Vec<String>>,
}

impl SmartSource for Replay {
    fn query(&self, device: &str) -> Result<(String, i32), String> {
        self.asked.borrow_mut().push(device.into());
        let name = self.by_dev.get(device).ok_or("no such device")?;
        Ok((sample(name), 0))
    }
}

#[test]
fn one_query_per_disk_findings_per_member_and_the_event() {
    let mut f = FakeSystem::new();
    let sda = fake::disk(
        &mut f,
        "sda",
        (8, 0),
        &format!(
            "{}/ata1/host0/target0:0:0/0:0:0:0/block/sda",
            pci("0000:00:1f.2")
        ),
    );
    fake::partition(&mut f, &sda, "sda1", (8, 1), 1);
    fake::partition(&mut f, &sda, "sda2", (8, 2), 2);
    fake::disk(
        &mut f,
        "sdb",
        (8, 16),
        &format!(
            "{}/ata2/host1/target1:0:0/1:0:0:0/block/sdb",
            pci("0000:00:1f.2")
        ),
    );
    f.set_fs_type((0, 30), "tmpfs");
    fake::file(&mut f, "/dev/shm/c.img", (0, 30), 9);
    let src = Replay {
        by_dev: [
            ("/dev/sda", "ata-pending.json"),
            ("/dev/sdb", "ata-healthy.json"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect(),
        asked: RefCell::new(Vec::new()),
    };
    let members =
        MemberRef::in_role_order(&["/dev/sda1", "/dev/sdb", "/dev/sda2", "/dev/shm/c.img"]);
    let got = check_smart_with(&f, &src, &members);
    assert_eq!(*src.asked.borrow(), ["/dev/sda", "/dev/sdb"]);
    let st: Vec<(Option<usize>, SmartStatus, Option<&str>)> = got
        .iter()
        .map(|g| (g.member.role, g.status, g.disk.as_deref()))
        .collect();
    assert_eq!(
        st,
        [
            (Some(0), SmartStatus::Warning, Some("/dev/sda")),
            (Some(1), SmartStatus::Ok, Some("/dev/sdb")),
            (Some(2), SmartStatus::Warning, Some("/dev/sda")),
            (Some(3), SmartStatus::Unavailable, None),
        ]
    );
    assert_eq!(
        got[3].note.as_deref(),
        Some("a file on tmpfs with no physical disk under it")
    );
    assert_eq!(
        got[0].describe(),
        "member 0 (/dev/sda1) on /dev/sda: SMART warning: 8 reallocated sectors (the drive has already remapped bad sectors); 16 sectors pending reallocation (unreadable now; a rebuild reading them fails there); 3 interface CRC errors: check the cable and the controller port"
    );
    assert!(got[1].event("r5", 100).is_none(), "healthy: no event");
    let e = got[0].event("r5", 1_764_084_782).unwrap();
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["kind"], "smart_warning");
    assert_eq!(v["array"], "r5");
    assert_eq!(v["time"], 1_764_084_782u64);
    assert_eq!(v["detail"]["member"], "/dev/sda1");
    assert_eq!(v["detail"]["role"], 0);
    assert_eq!(v["detail"]["disk"], "/dev/sda");
    assert_eq!(v["detail"]["status"], "warning");
    assert_eq!(v["detail"]["pending_sectors"], 16);
    assert_eq!(v["detail"]["problems"][1]["key"], "pending_sectors");

    // The monitor's filter: news once, then only when a counter grows.
    let mut w = SmartWatch::default();
    let first = w.events("r5", 1, &got[..1]);
    assert_eq!(first.len(), 1);
    assert!(w.events("r5", 2, &got[..1]).is_empty());
    let mut worse = got[0].clone();
    worse.problems[1].value = Some(17);
    assert_eq!(w.events("r5", 3, &[worse]).len(), 1);
}
