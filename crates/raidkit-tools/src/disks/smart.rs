//! SMART health of members' disks from `smartctl --json` (smartmontools 7+): overall health,
//! reallocated / pending / uncorrectable sectors and interface CRC errors (ATA), media errors,
//! critical warnings, spare and wear (NVMe), temperature, the exit-status bits. Parsing and
//! judging are pure ([`parse`], [`problems`]); [`check_smart`] runs smartctl once per disk
//! under the members; [`SmartFinding::event`] is the monitor's `smart_warning` event and
//! [`SmartWatch`] sends it only when something new appears or a counter grows.

use super::resolve::resolve;
use super::sys::{HostSystem, SystemView};
use super::{MemberRef, Severity};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// ---- smartctl's JSON (the fields used; everything else is ignored) ----

#[derive(Deserialize, Default)]
struct RawCtl {
    exit_status: Option<i32>,
    #[serde(default)]
    messages: Vec<RawMessage>,
}
#[derive(Deserialize)]
struct RawMessage {
    string: String,
}
#[derive(Deserialize, Default)]
struct RawDevice {
    name: Option<String>,
    protocol: Option<String>,
}
#[derive(Deserialize)]
struct RawStatus {
    passed: Option<bool>,
}
#[derive(Deserialize)]
struct RawTemp {
    current: Option<i64>,
}
#[derive(Deserialize)]
struct RawHours {
    hours: Option<u64>,
}
#[derive(Deserialize)]
struct RawAttrs {
    #[serde(default)]
    table: Vec<RawAttr>,
}
#[derive(Deserialize)]
struct RawAttr {
    id: u32,
    name: String,
    when_failed: Option<String>,
    raw: Option<RawValue>,
}
#[derive(Deserialize)]
struct RawValue {
    value: Option<u64>,
}
#[derive(Deserialize)]
struct RawNvme {
    critical_warning: Option<u64>,
    available_spare: Option<u64>,
    available_spare_threshold: Option<u64>,
    percentage_used: Option<u64>,
    media_errors: Option<u64>,
    num_err_log_entries: Option<u64>,
}
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    smartctl: RawCtl,
    #[serde(default)]
    device: RawDevice,
    model_name: Option<String>,
    serial_number: Option<String>,
    firmware_version: Option<String>,
    rotation_rate: Option<u64>,
    smart_status: Option<RawStatus>,
    temperature: Option<RawTemp>,
    power_on_time: Option<RawHours>,
    ata_smart_attributes: Option<RawAttrs>,
    nvme_smart_health_information_log: Option<RawNvme>,
}

/// What smartctl reported about one disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SmartHealth {
    /// Device smartctl read (`/dev/sda`).
    pub device: String,
    /// `ATA`, `NVMe`, `SCSI`.
    pub protocol: Option<String>,
    /// Model.
    pub model: Option<String>,
    /// Serial number.
    pub serial: Option<String>,
    /// Firmware.
    pub firmware: Option<String>,
    /// Overall health self-assessment (None: not reported).
    pub passed: Option<bool>,
    /// °C.
    pub temperature_c: Option<i64>,
    /// Power-on hours.
    pub power_on_hours: Option<u64>,
    /// Spinning disk (ATA rotation rate > 0).
    pub rotational: Option<bool>,
    /// ATA 5 Reallocated_Sector_Ct.
    pub reallocated_sectors: Option<u64>,
    /// ATA 197 Current_Pending_Sector: unreadable sectors waiting to be rewritten.
    pub pending_sectors: Option<u64>,
    /// ATA 198 Offline_Uncorrectable.
    pub offline_uncorrectable: Option<u64>,
    /// ATA 187 Reported_Uncorrect.
    pub reported_uncorrect: Option<u64>,
    /// ATA 199 UDMA_CRC_Error_Count: cable or controller trouble.
    pub crc_errors: Option<u64>,
    /// ATA attributes at or below their threshold now.
    pub failing_attributes: Vec<String>,
    /// ATA attributes that were at or below their threshold in the past.
    pub failed_in_past: Vec<String>,
    /// NVMe critical warning bits.
    pub critical_warning: Option<u64>,
    /// NVMe media and data integrity errors.
    pub media_errors: Option<u64>,
    /// NVMe error log entries.
    pub error_log_entries: Option<u64>,
    /// NVMe available spare, %.
    pub available_spare_pct: Option<u64>,
    /// NVMe available spare threshold, %.
    pub available_spare_threshold_pct: Option<u64>,
    /// NVMe percentage of rated endurance used.
    pub percentage_used: Option<u64>,
    /// smartctl's exit status bits (see `man smartctl`, EXIT STATUS).
    pub exit_status: i32,
    /// smartctl's messages (why it could not read a device).
    pub messages: Vec<String>,
}

/// Parse `smartctl --json` output; `exit_code` is the process's (used when the JSON has no
/// `smartctl.exit_status`).
pub fn parse(json: &str, exit_code: i32) -> Result<SmartHealth, String> {
    let r: Raw = serde_json::from_str(json).map_err(|e| format!("smartctl JSON: {e}"))?;
    let attr = |id: u32| {
        r.ata_smart_attributes
            .as_ref()
            .and_then(|t| t.table.iter().find(|a| a.id == id))
            .and_then(|a| a.raw.as_ref()?.value)
    };
    let when = |w: &str| -> Vec<String> {
        r.ata_smart_attributes
            .as_ref()
            .map(|t| {
                t.table
                    .iter()
                    .filter(|a| a.when_failed.as_deref() == Some(w))
                    .map(|a| format!("{} {}", a.id, a.name))
                    .collect()
            })
            .unwrap_or_default()
    };
    let nv = r.nvme_smart_health_information_log.as_ref();
    Ok(SmartHealth {
        device: r.device.name.clone().unwrap_or_default(),
        protocol: r.device.protocol.clone(),
        model: r.model_name.clone(),
        serial: r.serial_number.clone(),
        firmware: r.firmware_version.clone(),
        passed: r.smart_status.as_ref().and_then(|s| s.passed),
        temperature_c: r.temperature.as_ref().and_then(|t| t.current),
        power_on_hours: r.power_on_time.as_ref().and_then(|t| t.hours),
        rotational: r.rotation_rate.map(|v| v > 0),
        reallocated_sectors: attr(5),
        pending_sectors: attr(197),
        offline_uncorrectable: attr(198),
        reported_uncorrect: attr(187),
        crc_errors: attr(199),
        failing_attributes: when("now"),
        failed_in_past: when("past"),
        critical_warning: nv.and_then(|n| n.critical_warning),
        media_errors: nv.and_then(|n| n.media_errors),
        error_log_entries: nv.and_then(|n| n.num_err_log_entries),
        available_spare_pct: nv.and_then(|n| n.available_spare),
        available_spare_threshold_pct: nv.and_then(|n| n.available_spare_threshold),
        percentage_used: nv.and_then(|n| n.percentage_used),
        exit_status: r.smartctl.exit_status.unwrap_or(exit_code),
        messages: r
            .smartctl
            .messages
            .iter()
            .map(|m| m.string.clone())
            .collect(),
    })
}

/// One thing wrong with a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SmartProblem {
    /// How bad.
    pub severity: Severity,
    /// Stable key (`pending_sectors`, `health_failed`, ...) for monitors.
    pub key: String,
    /// The counter behind it, when there is one.
    pub value: Option<u64>,
    /// What it means.
    pub message: String,
}

fn problem(sev: Severity, key: &str, value: Option<u64>, message: String) -> SmartProblem {
    SmartProblem {
        severity: sev,
        key: key.into(),
        value,
        message,
    }
}

/// Hottest temperature that is still fine: spinning disks 60 °C, flash 70 °C.
pub fn temperature_limit_c(rotational: Option<bool>) -> i64 {
    if rotational == Some(true) {
        60
    } else {
        70
    }
}

const NVME_WARNINGS: [(u64, Severity, &str); 5] = [
    (
        0x01,
        Severity::Critical,
        "available spare below its threshold",
    ),
    (0x02, Severity::Warning, "temperature outside its limits"),
    (
        0x04,
        Severity::Critical,
        "NVM subsystem reliability degraded (media or internal errors)",
    ),
    (0x08, Severity::Critical, "media placed in read-only mode"),
    (0x10, Severity::Warning, "volatile memory backup failed"),
];

/// Everything wrong with `h`, worst first (empty: healthy).
pub fn problems(h: &SmartHealth) -> Vec<SmartProblem> {
    use Severity::*;
    let mut v = Vec::new();
    if h.passed == Some(false) {
        v.push(problem(
            Critical,
            "health_failed",
            None,
            "SMART overall health: FAILED — the drive predicts its own failure; replace it".into(),
        ));
    }
    if !h.failing_attributes.is_empty() {
        v.push(problem(
            Critical,
            "attributes_failing",
            None,
            format!(
                "attributes at or below threshold now: {}",
                h.failing_attributes.join(", ")
            ),
        ));
    }
    if let Some(cw) = h.critical_warning.filter(|&c| c != 0) {
        for (bit, sev, what) in NVME_WARNINGS {
            if cw & bit != 0 {
                v.push(problem(
                    sev,
                    &format!("critical_warning_{bit:#04x}"),
                    Some(cw),
                    format!("NVMe critical warning: {what}"),
                ));
            }
        }
    }
    let counters: [(Option<u64>, &str, &str); 5] = [
        (
            h.reallocated_sectors,
            "reallocated_sectors",
            "reallocated sectors (the drive has already remapped bad sectors)",
        ),
        (
            h.pending_sectors,
            "pending_sectors",
            "sectors pending reallocation (unreadable now; a rebuild reading them fails there)",
        ),
        (
            h.offline_uncorrectable,
            "offline_uncorrectable",
            "sectors uncorrectable in offline scans",
        ),
        (
            h.reported_uncorrect,
            "reported_uncorrect",
            "uncorrectable errors reported to the host",
        ),
        (
            h.media_errors,
            "media_errors",
            "media and data integrity errors",
        ),
    ];
    for (val, key, what) in counters {
        if let Some(n) = val.filter(|&n| n > 0) {
            v.push(problem(Warning, key, Some(n), format!("{n} {what}")));
        }
    }
    if let Some(p) = h.percentage_used.filter(|&p| p >= 90) {
        v.push(problem(
            Warning,
            "endurance_used",
            Some(p),
            format!("{p}% of its rated write endurance used"),
        ));
    }
    if let Some(t) = h
        .temperature_c
        .filter(|&t| t >= temperature_limit_c(h.rotational))
    {
        v.push(problem(
            Warning,
            "temperature",
            Some(t.max(0) as u64),
            format!(
                "{t} °C (limit {} °C): check airflow",
                temperature_limit_c(h.rotational)
            ),
        ));
    }
    if h.exit_status & 0x80 != 0 {
        v.push(problem(
            Warning,
            "self_test_failed",
            None,
            "a self-test in its log failed".into(),
        ));
    }
    if let Some(n) = h.crc_errors.filter(|&n| n > 0) {
        v.push(problem(
            Notice,
            "crc_errors",
            Some(n),
            format!("{n} interface CRC errors: check the cable and the controller port"),
        ));
    }
    if !h.failed_in_past.is_empty() {
        v.push(problem(
            Notice,
            "attributes_failed_in_past",
            None,
            format!(
                "attributes below threshold in the past: {}",
                h.failed_in_past.join(", ")
            ),
        ));
    }
    if h.exit_status & 0x40 != 0 {
        v.push(problem(
            Notice,
            "error_log",
            h.error_log_entries,
            "the drive's error log has entries".into(),
        ));
    }
    v.sort_by_key(|p| std::cmp::Reverse(p.severity));
    v
}

/// Verdict for one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SmartStatus {
    /// Nothing wrong.
    Ok,
    /// Something to watch or act on.
    Warning,
    /// The drive is failing.
    Failing,
    /// No SMART data (no physical disk under the member, smartctl missing or refused).
    Unavailable,
}

/// SMART verdict for one member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SmartFinding {
    /// The member.
    pub member: MemberRef,
    /// The disk under it smartctl read (`/dev/sda`); None when there is none.
    pub disk: Option<String>,
    /// Verdict.
    pub status: SmartStatus,
    /// Problems, worst first.
    pub problems: Vec<SmartProblem>,
    /// The data, when smartctl gave some.
    pub health: Option<SmartHealth>,
    /// Why it is unavailable.
    pub note: Option<String>,
}

/// The `smart_warning` event: the shape of the engine's monitor events
/// (`{"time", "array", "kind", "detail"}`), so monitors deliver it like the others.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SmartEvent {
    /// Unix seconds.
    pub time: u64,
    /// Array name.
    pub array: String,
    /// Always `smart_warning`.
    pub kind: String,
    /// Member, role, disk, status, problems and the main counters.
    pub detail: Value,
}

impl SmartFinding {
    /// Worst severity among the problems (None when healthy or unavailable).
    pub fn severity(&self) -> Option<Severity> {
        self.problems.iter().map(|p| p.severity).max()
    }
    /// One line: `member 2 (/dev/sdc) on /dev/sdc: FAILING — …`.
    pub fn describe(&self) -> String {
        let on = self.disk.as_deref().map_or_else(String::new, |d| {
            if d == self.member.path {
                String::new()
            } else {
                format!(" on {d}")
            }
        });
        let head = format!("{}{on}", self.member.describe());
        match self.status {
            SmartStatus::Ok => format!("{head}: SMART healthy"),
            SmartStatus::Unavailable => format!(
                "{head}: no SMART data ({})",
                self.note.as_deref().unwrap_or("unknown")
            ),
            s => {
                let what: Vec<&str> = self.problems.iter().map(|p| p.message.as_str()).collect();
                let word = if s == SmartStatus::Failing {
                    "FAILING"
                } else {
                    "warning"
                };
                format!("{head}: SMART {word}: {}", what.join("; "))
            }
        }
    }
    /// The `smart_warning` event for `array`, when there is something to warn about.
    pub fn event(&self, array: &str, time: u64) -> Option<SmartEvent> {
        if !matches!(self.status, SmartStatus::Warning | SmartStatus::Failing) {
            return None;
        }
        let h = self.health.as_ref();
        Some(SmartEvent {
            time,
            array: array.into(),
            kind: "smart_warning".into(),
            detail: json!({
                "member": self.member.path,
                "role": self.member.role,
                "disk": self.disk,
                "status": self.status,
                "problems": self.problems,
                "model": h.and_then(|h| h.model.clone()),
                "serial": h.and_then(|h| h.serial.clone()),
                "temperature_c": h.and_then(|h| h.temperature_c),
                "reallocated_sectors": h.and_then(|h| h.reallocated_sectors),
                "pending_sectors": h.and_then(|h| h.pending_sectors),
                "media_errors": h.and_then(|h| h.media_errors),
                "message": self.describe(),
            }),
        })
    }
}

/// Where smartctl output comes from (a trait so tests replay recorded output).
pub trait SmartSource {
    /// `smartctl --json` of `device`: (stdout, exit code). Err when smartctl cannot run.
    fn query(&self, device: &str) -> Result<(String, i32), String>;
}

/// The real smartctl: `smartctl --json -a -n standby DEVICE` (a sleeping disk is not spun
/// up), killed after `timeout`.
#[derive(Clone, Copy, Debug)]
pub struct Smartctl {
    /// Longest wait for one device.
    pub timeout: Duration,
}

impl Default for Smartctl {
    fn default() -> Self {
        Smartctl {
            timeout: Duration::from_secs(20),
        }
    }
}

impl SmartSource for Smartctl {
    fn query(&self, device: &str) -> Result<(String, i32), String> {
        let mut child = Command::new("smartctl")
            .args(["--json", "-a", "-n", "standby", device])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    "smartctl is not installed (Debian: apt install smartmontools)".to_string()
                } else {
                    format!("running smartctl: {e}")
                }
            })?;
        let mut out = child.stdout.take().ok_or("smartctl: no stdout")?;
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t0 = Instant::now();
        let code = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st.code().unwrap_or(-1),
                Ok(None) if t0.elapsed() < self.timeout => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "smartctl {device}: no answer in {:?}",
                        self.timeout
                    ));
                }
            }
        };
        let s = reader.join().unwrap_or_default();
        Ok((s, code))
    }
}

fn unavailable(m: &MemberRef, disk: Option<String>, why: String) -> SmartFinding {
    SmartFinding {
        member: m.clone(),
        disk,
        status: SmartStatus::Unavailable,
        problems: Vec::new(),
        health: None,
        note: Some(why),
    }
}

/// The finding for a member from its disk's smartctl answer.
pub fn judge(m: &MemberRef, disk: &str, answer: &Result<(String, i32), String>) -> SmartFinding {
    let (json, code) = match answer {
        Ok(a) => a,
        Err(e) => return unavailable(m, Some(disk.into()), e.clone()),
    };
    let h = match parse(json, *code) {
        Ok(h) => h,
        Err(e) => return unavailable(m, Some(disk.into()), e),
    };
    // Bits 0-2: smartctl could not read the device (or it is asleep): no verdict.
    let has_data = h.passed.is_some()
        || h.temperature_c.is_some()
        || h.reallocated_sectors.is_some()
        || h.media_errors.is_some();
    if h.exit_status & 0x07 != 0 && !has_data {
        let why = h
            .messages
            .first()
            .cloned()
            .unwrap_or_else(|| format!("smartctl exit status {}", h.exit_status));
        return unavailable(m, Some(disk.into()), why);
    }
    let problems = problems(&h);
    let status = match problems.iter().map(|p| p.severity).max() {
        Some(Severity::Critical) => SmartStatus::Failing,
        Some(Severity::Warning) | Some(Severity::Notice) => SmartStatus::Warning,
        _ => SmartStatus::Ok,
    };
    SmartFinding {
        member: m.clone(),
        disk: Some(disk.into()),
        status,
        problems,
        health: Some(h),
        note: None,
    }
}

/// SMART health of the disks under `members` on this machine (one finding per member and
/// disk; smartctl runs once per disk).
pub fn check_smart(members: &[MemberRef]) -> Vec<SmartFinding> {
    check_smart_with(&HostSystem, &Smartctl::default(), members)
}

/// [`check_smart`] on any system view and smartctl source.
pub fn check_smart_with(
    sys: &dyn SystemView,
    src: &dyn SmartSource,
    members: &[MemberRef],
) -> Vec<SmartFinding> {
    let mut cache: BTreeMap<String, Result<(String, i32), String>> = BTreeMap::new();
    let mut out = Vec::new();
    for m in members {
        let id = resolve(sys, m);
        let real: Vec<_> = id.disks.iter().filter(|d| !d.is_virtual).collect();
        if real.is_empty() {
            let why = if id.host.is_some() {
                "a network member: check SMART on its server".to_string()
            } else if let Some(fs) = id.filesystems.first() {
                format!(
                    "a file on {} with no physical disk under it",
                    fs.fs_type.as_deref().unwrap_or("a file system")
                )
            } else if id.object.is_none() {
                "cannot be opened".to_string()
            } else {
                "a virtual device".to_string()
            };
            out.push(unavailable(m, None, why));
            continue;
        }
        for d in real {
            let dev = format!("/dev/{}", d.name);
            let answer = cache.entry(dev.clone()).or_insert_with(|| src.query(&dev));
            out.push(judge(m, &dev, answer));
        }
    }
    out
}

/// Remembers what was reported per disk and yields `smart_warning` events only for news: a
/// problem not seen before, or a counter that grew (a monitor calls [`SmartWatch::events`]
/// after every [`check_smart`]).
#[derive(Clone, Debug, Default)]
pub struct SmartWatch {
    seen: BTreeMap<String, BTreeMap<String, Option<u64>>>,
}

impl SmartWatch {
    /// Events for the findings that bring news.
    pub fn events(&mut self, array: &str, time: u64, findings: &[SmartFinding]) -> Vec<SmartEvent> {
        let mut out = Vec::new();
        for f in findings {
            let key = f.disk.clone().unwrap_or_else(|| f.member.path.clone());
            let before = self.seen.entry(key).or_default();
            let news = f.problems.iter().any(|p| match before.get(&p.key) {
                None => true,
                Some(old) => p.value > *old,
            });
            *before = f
                .problems
                .iter()
                .map(|p| (p.key.clone(), p.value))
                .collect();
            if news {
                out.extend(f.event(array, time));
            }
        }
        out
    }
}
