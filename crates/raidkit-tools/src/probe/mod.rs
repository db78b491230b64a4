//! What kind of storage is this: rotational or not (sysfs for block devices, "file on
//! <fs>" for files), how 512-byte and 4 KiB direct writes behave, and an erase-block
//! estimate from a direct-write sweep over block sizes (throughput rises with the write
//! size until it reaches the erase block, then flattens).
//!
//! Bounded: writes go only to a scratch region (a file the probe creates and removes, an
//! existing file or a device region the caller allows with `force`), each point of the
//! sweep stops after `bytes_per_point` bytes or `time_per_point`, whichever comes first.

mod peers;

pub use peers::{compare, probe_peers, PeerOptions, PeerReport, PeerSample, SpeedFinding};

use crate::disks::link::{link_of_disk, LinkInfo};
use crate::disks::{resolve, HostSystem, MemberRef};
use crate::error::{Result, ToolsError};
use crate::human;
use crate::machine::Machine;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Write to an existing file or a block device (the scratch region is destroyed).
    pub force: bool,
    /// Start of the scratch region in bytes (devices and existing files).
    pub offset: u64,
    /// Length of the scratch region in bytes.
    pub scratch: u64,
    /// Largest block size of the sweep.
    pub max_block: u64,
    /// Bytes written per point at most.
    pub bytes_per_point: u64,
    /// Time per point at most.
    pub time_per_point: Duration,
    /// Only report the kind; write nothing.
    pub no_write: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            force: false,
            offset: 0,
            scratch: 64 << 20,
            max_block: 8 << 20,
            bytes_per_point: 32 << 20,
            time_per_point: Duration::from_secs(2),
            no_write: false,
        }
    }
}

/// Direct-write behaviour at one size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DirectWrite {
    /// Write size in bytes.
    pub size: u64,
    /// Whether the kernel accepted an O_DIRECT write of this size and alignment.
    pub accepted: bool,
    /// Mean latency in µs (when accepted).
    pub mean_us: Option<f64>,
    /// The error when refused.
    pub error: Option<String>,
}

/// One point of the sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Block size in bytes.
    pub block: u64,
    /// MiB/s.
    pub mib_s: f64,
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeReport {
    /// When, Unix seconds.
    pub started_unix: u64,
    /// Where.
    pub machine: Machine,
    /// What was probed.
    pub path: String,
    /// `block device`, `file on ext4`, ...
    pub kind: String,
    /// Rotational (None when unknown).
    pub rotational: Option<bool>,
    /// The interface of the disk under it (SATA link, NVMe PCIe link), when sysfs shows it.
    pub link: Option<LinkInfo>,
    /// sysfs queue facts for the (backing) device: logical/physical block size, optimal
    /// IO size, discard granularity, scheduler.
    pub queue: Vec<(String, String)>,
    /// Whether O_DIRECT works at all here.
    pub direct_io: bool,
    /// 512-byte and 4 KiB direct writes.
    pub direct_writes: Vec<DirectWrite>,
    /// Sweep of direct (or, without O_DIRECT, buffered + fdatasync) sequential writes.
    pub sweep: Vec<SweepPoint>,
    /// Smallest block size reaching 90 % of the best throughput.
    pub erase_block_estimate: Option<u64>,
    /// Remarks.
    pub notes: Vec<String>,
}

fn fs_name(magic: i64) -> &'static str {
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x0102_1994 => "tmpfs",
        0x9123_683E => "btrfs",
        0x794C_7630 => "overlayfs",
        0x6969 => "nfs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x6573_5546 => "fuse",
        0x4d44 => "vfat",
        0x5346_544e => "ntfs",
        0x0102_1997 => "9p",
        _ => "an unknown filesystem",
    }
}

pub(crate) fn statfs_name(path: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path; `st` is a properly sized, writable
    // statfs struct that the kernel fills; it is only read after a successful call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    if r != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    Some(fs_name(st.f_type as i64))
}

/// sysfs block directory for device number `rdev` (whole disk for partitions).
fn sysfs_dir(rdev: u64) -> Option<PathBuf> {
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    let d = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    let d = std::fs::canonicalize(d).ok()?;
    if d.join("queue").exists() {
        Some(d)
    } else if d.join("partition").exists() {
        d.parent().map(Path::to_path_buf)
    } else {
        None
    }
}

fn queue_facts(dir: &Path) -> (Option<bool>, Vec<(String, String)>) {
    let q = dir.join("queue");
    let rot = std::fs::read_to_string(q.join("rotational"))
        .ok()
        .map(|s| s.trim() == "1");
    let mut v = Vec::new();
    for k in [
        "logical_block_size",
        "physical_block_size",
        "minimum_io_size",
        "optimal_io_size",
        "discard_granularity",
        "scheduler",
    ] {
        if let Ok(s) = std::fs::read_to_string(q.join(k)) {
            v.push((k.to_string(), s.trim().to_string()));
        }
    }
    (rot, v)
}

/// The link of the first physical disk under `path` (a device, or the file system of a
/// file or folder).
pub fn link_of(path: &Path) -> Option<LinkInfo> {
    let sys = HostSystem;
    let id = resolve(
        &sys,
        &MemberRef {
            role: None,
            path: path.display().to_string(),
        },
    );
    id.disks
        .iter()
        .filter(|d| !d.is_virtual)
        .find_map(|d| link_of_disk(&sys, d))
}

/// What `path` is, in a few words: `block device (rotational)`, `block device (SSD)`,
/// `file on ext4`, `directory on tmpfs`.
pub fn kind_of(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => {
            match sysfs_dir(m.rdev()).and_then(|d| queue_facts(&d).0) {
                Some(true) => "block device (rotational)".into(),
                Some(false) => "block device (SSD or virtual)".into(),
                None => "block device".into(),
            }
        }
        Ok(m) if m.is_dir() => format!(
            "directory on {}",
            statfs_name(path).unwrap_or("an unknown filesystem")
        ),
        Ok(_) => format!(
            "file on {}",
            statfs_name(path).unwrap_or("an unknown filesystem")
        ),
        Err(_) => "missing".into(),
    }
}

/// A buffer aligned to 4096 carved out of a Vec.
pub(crate) fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0xa5u8; len + 4096];
    let s = v.as_ptr().align_offset(4096).min(4096);
    (v, s)
}

/// Probe `path` (file, directory, or block device).
pub fn probe(path: &Path, o: &ProbeOptions) -> Result<ProbeReport> {
    let name = path.display().to_string();
    let mut notes = Vec::new();
    let meta = std::fs::metadata(path).ok();
    let mut created: Option<PathBuf> = None;
    let (kind, rotational, queue, scratch_path, writable) = match &meta {
        Some(m) if m.file_type().is_block_device() => {
            let (rot, q) = sysfs_dir(m.rdev())
                .map(|d| queue_facts(&d))
                .unwrap_or((None, vec![]));
            (
                "block device".to_string(),
                rot,
                q,
                path.to_path_buf(),
                o.force,
            )
        }
        Some(m) if m.is_dir() => {
            let fsn = statfs_name(path).unwrap_or("an unknown filesystem");
            let (rot, q) = sysfs_dir(m.dev())
                .map(|d| queue_facts(&d))
                .unwrap_or((None, vec![]));
            let p = path.join(format!(".raidkit-probe-{}", std::process::id()));
            created = Some(p.clone());
            (format!("directory on {fsn}"), rot, q, p, true)
        }
        Some(m) if m.is_file() => {
            let fsn = statfs_name(path).unwrap_or("an unknown filesystem");
            let (rot, q) = sysfs_dir(m.dev())
                .map(|d| queue_facts(&d))
                .unwrap_or((None, vec![]));
            (
                format!("file on {fsn}"),
                rot,
                q,
                path.to_path_buf(),
                o.force,
            )
        }
        Some(_) => {
            return Err(ToolsError::Invalid(format!(
                "{name}: not a file, directory or block device"
            )))
        }
        None => {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let fsn = statfs_name(parent).unwrap_or("an unknown filesystem");
            let pm = std::fs::metadata(parent)
                .map_err(|e| ToolsError::io(parent.display().to_string(), "stat", e))?;
            let (rot, q) = sysfs_dir(pm.dev())
                .map(|d| queue_facts(&d))
                .unwrap_or((None, vec![]));
            created = Some(path.to_path_buf());
            (
                format!("new file on {fsn}"),
                rot,
                q,
                path.to_path_buf(),
                true,
            )
        }
    };
    let link = link_of(path);
    if let Some(l) = link.as_ref().filter(|l| l.degraded()) {
        notes.push(format!(
            "its {}: check its cable and controller port",
            l.describe()
        ));
    }
    if rotational.is_none() {
        notes.push("no sysfs queue for the backing device (virtual or network filesystem): rotational unknown".into());
    }
    let mut rep = ProbeReport {
        started_unix: human::now_unix(),
        machine: Machine::this(),
        link,
        path: name.clone(),
        kind,
        rotational,
        queue,
        direct_io: false,
        direct_writes: Vec::new(),
        sweep: Vec::new(),
        erase_block_estimate: None,
        notes,
    };
    if o.no_write {
        return Ok(rep);
    }
    if !writable {
        return Err(ToolsError::Invalid(format!(
            "{name} exists: probing writes {} bytes at offset {} and destroys them; add --force to allow it, --no-write to only report the kind, or give a directory or a new file name",
            o.scratch, o.offset
        )));
    }
    let result = write_tests(&scratch_path, created.is_some(), o, &mut rep);
    if let Some(p) = &created {
        let _ = std::fs::remove_file(p);
    }
    result?;
    Ok(rep)
}

fn open_scratch(
    path: &Path,
    create: bool,
    direct: bool,
    o: &ProbeOptions,
) -> std::io::Result<File> {
    let mut oo = OpenOptions::new();
    oo.read(true).write(true).create(create);
    if direct {
        oo.custom_flags(libc::O_DIRECT);
    }
    let f = oo.open(path)?;
    if create && f.metadata()?.len() < o.offset + o.scratch {
        f.set_len(o.offset + o.scratch)?;
    }
    Ok(f)
}

fn write_tests(path: &Path, create: bool, o: &ProbeOptions, rep: &mut ProbeReport) -> Result<()> {
    let name = path.display().to_string();
    if o.scratch < 1 << 20 || !o.offset.is_multiple_of(4096) {
        return Err(ToolsError::Invalid(
            "the scratch region must be at least 1 MiB and start on a 4 KiB boundary".into(),
        ));
    }
    // Make the file (so the direct open below finds it).
    drop(
        open_scratch(path, create, false, o)
            .map_err(|e| ToolsError::io(&name, "opening the scratch region", e))?,
    );
    let end = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if end != 0 && o.offset + o.scratch > end && !rep.kind.starts_with("block") {
        return Err(ToolsError::Invalid(format!(
            "{name}: the scratch region ends beyond the file ({end} bytes)"
        )));
    }
    let direct = open_scratch(path, false, true, o);
    let (file, is_direct) = match direct {
        Ok(f) => (f, true),
        Err(e) => {
            rep.notes.push(format!(
                "O_DIRECT refused ({e}): the sweep uses buffered writes + fdatasync"
            ));
            (
                open_scratch(path, false, false, o)
                    .map_err(|e| ToolsError::io(&name, "opening", e))?,
                false,
            )
        }
    };
    rep.direct_io = is_direct;
    let (mut v, s) = aligned(o.max_block.max(4096) as usize);
    if is_direct {
        for size in [512u64, 4096] {
            let buf = &v[s..s + size as usize];
            let mut lat = Vec::new();
            let mut err = None;
            for i in 0..64u64 {
                let t = Instant::now();
                match file.write_all_at(buf, o.offset + 512 + i * 8192) {
                    Ok(()) => lat.push(t.elapsed().as_secs_f64() * 1e6),
                    Err(e) => {
                        err = Some(e.to_string());
                        break;
                    }
                }
            }
            let ok = err.is_none();
            rep.direct_writes.push(DirectWrite {
                size,
                accepted: ok,
                mean_us: ok.then(|| lat.iter().sum::<f64>() / lat.len().max(1) as f64),
                error: err,
            });
        }
        if let [a, b] = &rep.direct_writes[..] {
            match (a.accepted, a.mean_us, b.mean_us) {
                (false, _, _) => rep.notes.push("512-byte direct writes are refused: the logical block is 4 KiB".into()),
                (true, Some(x), Some(y)) if x > 2.0 * y => rep.notes.push(format!(
                    "512-byte writes take {:.1}× as long as 4 KiB ones: the device likely does read-modify-write of 4 KiB physical blocks",
                    x / y
                )),
                _ => {}
            }
        }
    }
    let _ = &mut v;
    // Sweep.
    let mut bsz = 4096u64;
    while bsz <= o.max_block.min(o.scratch) {
        let buf = &v[s..s + bsz as usize];
        let t = Instant::now();
        let mut done = 0u64;
        let mut off = 0u64;
        while done < o.bytes_per_point && t.elapsed() < o.time_per_point {
            if off + bsz > o.scratch {
                off = 0;
            }
            file.write_all_at(buf, o.offset + off)
                .map_err(|e| ToolsError::io(&name, "sweep write", e))?;
            off += bsz;
            done += bsz;
        }
        if !is_direct {
            file.sync_data()
                .map_err(|e| ToolsError::io(&name, "fdatasync", e))?;
        }
        let secs = t.elapsed().as_secs_f64().max(1e-9);
        rep.sweep.push(SweepPoint {
            block: bsz,
            mib_s: done as f64 / secs / (1u64 << 20) as f64,
        });
        bsz *= 2;
    }
    let best = rep.sweep.iter().map(|p| p.mib_s).fold(0.0, f64::max);
    rep.erase_block_estimate = erase_block_estimate(&rep.sweep, best);
    if !rep.kind.starts_with("block") {
        rep.notes.push("through a filesystem the knee shows the filesystem's and page cache's behaviour as much as the device's".into());
    }
    Ok(())
}

/// Smallest block size whose throughput is at least 90 % of `best`.
pub fn erase_block_estimate(sweep: &[SweepPoint], best: f64) -> Option<u64> {
    if best <= 0.0 {
        return None;
    }
    sweep
        .iter()
        .find(|p| p.mib_s >= 0.9 * best)
        .map(|p| p.block)
}

impl ProbeReport {
    /// Text report.
    pub fn to_text(&self) -> String {
        let mut s = format!("{}: {}\n", self.path, self.kind);
        s += &format!(
            "  rotational: {}\n",
            match self.rotational {
                Some(true) => "yes (spinning disk)",
                Some(false) => "no (flash or virtual)",
                None => "unknown",
            }
        );
        if let Some(l) = &self.link {
            s += &format!("  interface: {}\n", l.describe());
        }
        for (k, v) in &self.queue {
            s += &format!("  {k}: {v}\n");
        }
        if !self.direct_writes.is_empty() || !self.sweep.is_empty() {
            s += &format!(
                "  O_DIRECT: {}\n",
                if self.direct_io { "yes" } else { "no" }
            );
        }
        for d in &self.direct_writes {
            match (d.accepted, d.mean_us) {
                (true, Some(us)) => {
                    s += &format!(
                        "  direct write {:>5} B: accepted, {us:.1} µs mean\n",
                        d.size
                    )
                }
                _ => {
                    s += &format!(
                        "  direct write {:>5} B: refused ({})\n",
                        d.size,
                        d.error.as_deref().unwrap_or("?")
                    )
                }
            }
        }
        if !self.sweep.is_empty() {
            s += "  sequential write sweep:\n";
            for p in &self.sweep {
                s += &format!(
                    "    {:>6} {:>9.1} MiB/s\n",
                    crate::trace::size_label(p.block),
                    p.mib_s
                );
            }
        }
        if let Some(e) = self.erase_block_estimate {
            s += &format!(
                "  erase block estimate: {} (smallest write size within 90% of the best)\n",
                crate::trace::size_label(e)
            );
        }
        for n in &self.notes {
            s += &format!("  note: {n}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee() {
        let pts: Vec<SweepPoint> = [
            (4096u64, 50.0),
            (8192, 90.0),
            (16384, 180.0),
            (32768, 300.0),
            (65536, 310.0),
        ]
        .iter()
        .map(|&(block, mib_s)| SweepPoint { block, mib_s })
        .collect();
        assert_eq!(erase_block_estimate(&pts, 310.0), Some(32768));
        assert_eq!(erase_block_estimate(&pts, 0.0), None);
    }
}
