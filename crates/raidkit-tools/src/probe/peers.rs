//! Members against their peers: each member's sequential read speed (read-only, O_DIRECT
//! where the kernel allows it), compared with the other members' and with what its link can
//! carry. An array runs at its slowest member's pace, so one SSD on a 1.5 Gb/s SATA link or
//! a bad cable shows here as "reads at 140 MB/s, its peers at 520 MB/s".
//!
//! [`compare`] is pure (tested with synthetic measurements); [`probe_peers`] measures.

use super::kind_of;
use crate::disks::link::{link_of_disk, LinkInfo};
use crate::disks::{resolve, HostSystem, MemberRef, Severity};
use crate::error::{Result, ToolsError};
use crate::human;
use crate::machine::Machine;
use serde::Serialize;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A member slower than this fraction of its peers' median is called out.
pub const SLOW_FRACTION: f64 = 0.6;
/// A member reading at this fraction of its link's rate or more is capped by the link.
pub const LINK_BOUND_FRACTION: f64 = 0.85;

/// How much to read from each member.
#[derive(Clone, Debug)]
pub struct PeerOptions {
    /// Start of the region read, bytes.
    pub offset: u64,
    /// Bytes read per member at most.
    pub bytes: u64,
    /// Time per member at most.
    pub time: Duration,
    /// Read size.
    pub block: u64,
}

impl Default for PeerOptions {
    fn default() -> Self {
        PeerOptions {
            offset: 0,
            bytes: 256 << 20,
            time: Duration::from_secs(3),
            block: 1 << 20,
        }
    }
}

/// One member's measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeerSample {
    /// The member as given.
    pub path: String,
    /// `block device (SSD or virtual)`, `file on ext4`.
    pub kind: String,
    /// Spinning, if known.
    pub rotational: Option<bool>,
    /// Its disk's link, if sysfs shows it.
    pub link: Option<LinkInfo>,
    /// Sequential read rate, bytes per second.
    pub read_bytes_per_sec: f64,
    /// Bytes read.
    pub bytes: u64,
    /// Read with O_DIRECT (else through the page cache).
    pub direct: bool,
}

/// Something about one member's speed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpeedFinding {
    /// How bad.
    pub severity: Severity,
    /// The member.
    pub path: String,
    /// What and why.
    pub message: String,
}

/// The result of [`probe_peers`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeerReport {
    /// When, Unix seconds.
    pub started_unix: u64,
    /// Where.
    pub machine: Machine,
    /// Per member.
    pub samples: Vec<PeerSample>,
    /// Findings, worst first.
    pub findings: Vec<SpeedFinding>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The other members' median read rate.
pub fn peer_median(samples: &[PeerSample], i: usize) -> Option<f64> {
    median(
        samples
            .iter()
            .enumerate()
            .filter(|(j, s)| *j != i && s.read_bytes_per_sec > 0.0)
            .map(|(_, s)| s.read_bytes_per_sec)
            .collect(),
    )
}

/// Why a member is where it is: its link, its kind, or (unknown) what to check.
fn cause(samples: &[PeerSample], i: usize) -> String {
    let s = &samples[i];
    if let Some(l) = &s.link {
        if l.degraded() {
            return format!("its {}: check its cable and controller port", l.describe());
        }
        if s.read_bytes_per_sec >= LINK_BOUND_FRACTION * l.current_bytes_per_sec {
            return format!("it runs at its link's limit ({})", l.describe());
        }
    }
    let others_flash = samples
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .all(|(_, p)| p.rotational == Some(false));
    if s.rotational == Some(true) && others_flash {
        return "it is a spinning disk among SSDs: the array waits for it".into();
    }
    "check its cable/controller, its SMART health, and whether something else is using it".into()
}

/// Findings from measurements (pure): members much slower than their peers, and links that
/// trained below what they support.
pub fn compare(samples: &[PeerSample]) -> Vec<SpeedFinding> {
    let mut out = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let peers = peer_median(samples, i);
        match peers {
            Some(p) if s.read_bytes_per_sec < SLOW_FRACTION * p => out.push(SpeedFinding {
                severity: Severity::Warning,
                path: s.path.clone(),
                message: format!(
                    "{} reads at {}, its peers at {}: {}",
                    s.path,
                    human::mb_s(s.read_bytes_per_sec),
                    human::mb_s(p),
                    cause(samples, i)
                ),
            }),
            _ => {
                if let Some(l) = s.link.as_ref().filter(|l| l.degraded()) {
                    out.push(SpeedFinding {
                        severity: Severity::Notice,
                        path: s.path.clone(),
                        message: format!(
                            "{} reads at {} on a {}: check its cable and controller port",
                            s.path,
                            human::mb_s(s.read_bytes_per_sec),
                            l.describe()
                        ),
                    });
                }
            }
        }
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// Sequential read rate of `path` (read-only).
pub fn measure(path: &Path, o: &PeerOptions) -> Result<(f64, u64, bool)> {
    let name = path.display().to_string();
    let open = |direct: bool| {
        let mut oo = OpenOptions::new();
        oo.read(true);
        if direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        oo.open(path)
    };
    let (mut f, direct) = match open(true) {
        Ok(f) => (f, true),
        Err(_) => (
            open(false).map_err(|e| ToolsError::io(&name, "opening", e))?,
            false,
        ),
    };
    let end = f
        .seek(SeekFrom::End(0))
        .map_err(|e| ToolsError::io(&name, "finding the size", e))?;
    let block = o.block.clamp(4096, 64 << 20) as usize;
    let (mut v, s) = super::aligned(block);
    let buf = &mut v[s..s + block];
    let t = Instant::now();
    let mut off = o.offset - o.offset % 4096;
    let mut done = 0u64;
    while done < o.bytes && t.elapsed() < o.time && off + block as u64 <= end {
        f.read_exact_at(buf, off)
            .map_err(|e| ToolsError::io(&name, "sequential read", e))?;
        off += block as u64;
        done += block as u64;
    }
    if done == 0 {
        return Err(ToolsError::Invalid(format!(
            "{name}: nothing to read past offset {} (size {end})",
            o.offset
        )));
    }
    Ok((
        done as f64 / t.elapsed().as_secs_f64().max(1e-9),
        done,
        direct,
    ))
}

/// Measure each member in turn (never two at once, so they do not share the bus) and compare.
pub fn probe_peers(paths: &[PathBuf], o: &PeerOptions) -> Result<PeerReport> {
    let started_unix = human::now_unix();
    let sys = HostSystem;
    let mut samples = Vec::new();
    for p in paths {
        let id = resolve(
            &sys,
            &MemberRef {
                role: None,
                path: p.display().to_string(),
            },
        );
        let disk = id.disks.iter().find(|d| !d.is_virtual);
        let (rate, bytes, direct) = measure(p, o)?;
        samples.push(PeerSample {
            path: p.display().to_string(),
            kind: kind_of(p),
            rotational: disk.and_then(|d| d.rotational),
            link: disk.and_then(|d| link_of_disk(&sys, d)),
            read_bytes_per_sec: rate,
            bytes,
            direct,
        });
    }
    Ok(PeerReport {
        started_unix,
        machine: Machine::this(),
        findings: compare(&samples),
        samples,
    })
}

impl PeerReport {
    /// Text report.
    pub fn to_text(&self) -> String {
        let mut s = String::from("sequential reads, one member at a time:\n");
        for p in &self.samples {
            s += &format!(
                "  {:<28} {:>10}  {}{}{}\n",
                p.path,
                human::mb_s(p.read_bytes_per_sec),
                p.kind,
                p.link
                    .as_ref()
                    .map_or_else(String::new, |l| format!(", {}", l.describe())),
                if p.direct { "" } else { ", buffered" }
            );
        }
        if self.findings.is_empty() {
            s += "  no member is out of line with its peers or its link\n";
        }
        for f in &self.findings {
            s += &format!("  {}: {}\n", f.severity, f.message);
        }
        s
    }
}
