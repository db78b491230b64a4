//! What a disk's interface can carry: the negotiated SATA link speed
//! (`/sys/class/ata_link/linkN/sata_spd`, and the port's `hw_sata_spd_limit`), or an NVMe
//! drive's PCIe link (`current_link_speed` × `current_link_width` of its PCI function, and the
//! `max_` values it could train at). A link that trained below what both ends support is the
//! classic "SSD at hard-disk speed": a bad cable, a slow port, a riser in an x1 slot.

use super::resolve::{pci_dir, Disk};
use super::sys::SystemView;
use crate::human;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Which kind of link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LinkKind {
    /// SATA.
    Sata,
    /// PCIe (NVMe).
    Pcie,
}

/// A disk's link: what it runs at and what it could run at.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkInfo {
    /// SATA or PCIe.
    pub kind: LinkKind,
    /// As negotiated (`1.5 Gb/s`, `8.0 GT/s PCIe x1`).
    pub current: String,
    /// Payload bytes per second the negotiated link can carry.
    pub current_bytes_per_sec: f64,
    /// What both ends support, when sysfs says (`6.0 Gb/s`, `8.0 GT/s PCIe x4`).
    pub max: Option<String>,
    /// Payload bytes per second of that.
    pub max_bytes_per_sec: Option<f64>,
}

impl LinkInfo {
    /// True when the link trained below what it supports.
    pub fn degraded(&self) -> bool {
        self.max_bytes_per_sec
            .is_some_and(|m| m > self.current_bytes_per_sec * 1.01)
    }
    /// `SATA link at 1.5 Gb/s (150 MB/s; the port can do 6.0 Gb/s)`.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            LinkKind::Sata => "SATA link at",
            LinkKind::Pcie => "PCIe link at",
        };
        let mut s = format!(
            "{kind} {} ({}",
            self.current,
            human::mb_s(self.current_bytes_per_sec)
        );
        if let (true, Some(m)) = (self.degraded(), &self.max) {
            s += &format!("; it can do {m}");
        }
        s + ")"
    }
}

/// Payload rate of a SATA link speed (`6.0 Gb/s`; 8b/10b coding: 10 line bits per byte).
pub fn sata_bytes_per_sec(spd: &str) -> Option<f64> {
    let g: f64 = spd.trim().strip_suffix("Gb/s")?.trim().parse().ok()?;
    (g > 0.0).then_some(g * 1e9 / 10.0)
}

/// Payload rate of one PCIe lane at `speed` (`8.0 GT/s PCIe`, `16 GT/s`): 8b/10b up to
/// 5 GT/s, 128b/130b for 8–32 GT/s, FLIT (242 of 256 bytes) at 64 GT/s.
pub fn pcie_lane_bytes_per_sec(speed: &str) -> Option<f64> {
    let gt: f64 = speed.split_whitespace().next()?.parse().ok()?;
    let eff = if gt <= 5.0 {
        0.8
    } else if gt <= 32.0 {
        128.0 / 130.0
    } else {
        242.0 / 256.0
    };
    (gt > 0.0).then_some(gt * 1e9 * eff / 8.0)
}

fn sata_link(sys: &dyn SystemView, disk: &Disk) -> Option<LinkInfo> {
    // The port folder `…/ataN` on the disk's path.
    let mut port: Option<PathBuf> = None;
    let mut cur = PathBuf::new();
    for c in disk.sys_path.components() {
        cur.push(c);
        let n = c.as_os_str().to_string_lossy();
        if n.strip_prefix("ata")
            .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        {
            port = Some(cur.clone());
        }
    }
    let port = port?;
    let class = Path::new("/sys/class/ata_link");
    sys.list(class).into_iter().find_map(|l| {
        let dir = sys.canonical(&class.join(&l))?;
        if !dir.starts_with(&port) {
            return None;
        }
        let cur = sys.read_text(&dir.join("sata_spd"))?;
        let rate = sata_bytes_per_sec(&cur)?;
        let max = sys.read_text(&dir.join("hw_sata_spd_limit"));
        let max_rate = max.as_deref().and_then(sata_bytes_per_sec);
        Some(LinkInfo {
            kind: LinkKind::Sata,
            current: cur,
            current_bytes_per_sec: rate,
            max: max_rate.and(max),
            max_bytes_per_sec: max_rate,
        })
    })
}

fn pcie_link(sys: &dyn SystemView, disk: &Disk) -> Option<LinkInfo> {
    if !disk.name.starts_with("nvme") {
        return None;
    }
    let d = pci_dir(&disk.sys_path)?;
    let read = |n: &str| sys.read_text(&d.join(n));
    let speed = read("current_link_speed")?;
    let width: u32 = read("current_link_width")?.parse().ok()?;
    let rate = pcie_lane_bytes_per_sec(&speed)? * f64::from(width);
    let short = |s: &str| s.trim_end_matches(" PCIe").to_string();
    let max = match (read("max_link_speed"), read("max_link_width")) {
        (Some(s), Some(w)) => w.parse::<u32>().ok().and_then(|w| {
            Some((
                format!("{} x{w}", short(&s)),
                pcie_lane_bytes_per_sec(&s)? * f64::from(w),
            ))
        }),
        _ => None,
    };
    Some(LinkInfo {
        kind: LinkKind::Pcie,
        current: format!("{} x{width}", short(&speed)),
        current_bytes_per_sec: rate,
        max_bytes_per_sec: max.as_ref().map(|m| m.1),
        max: max.map(|m| m.0),
    })
}

/// The link of a disk, when sysfs shows one.
pub fn link_of_disk(sys: &dyn SystemView, disk: &Disk) -> Option<LinkInfo> {
    sata_link(sys, disk).or_else(|| pcie_link(sys, disk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_rates() {
        assert_eq!(sata_bytes_per_sec("6.0 Gb/s"), Some(600e6));
        assert_eq!(sata_bytes_per_sec("1.5 Gb/s"), Some(150e6));
        assert_eq!(sata_bytes_per_sec("<unknown>"), None);
        assert_eq!(pcie_lane_bytes_per_sec("2.5 GT/s PCIe"), Some(250e6));
        let g3 = pcie_lane_bytes_per_sec("8.0 GT/s PCIe").unwrap();
        assert!((g3 - 984.6e6).abs() < 1e5, "{g3}");
        assert_eq!(pcie_lane_bytes_per_sec("Unknown"), None);
    }
}
