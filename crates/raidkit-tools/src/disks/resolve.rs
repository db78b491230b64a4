//! From a member path to what it really sits on: the file or device node itself, the
//! files under it (a loop device's backing file), the file systems it lives on, and the
//! physical disks at the bottom (through partitions, device-mapper and md stacks, loop
//! devices and file systems), each with model, firmware, serial, rotational and controller.

use super::sys::{FileKind, SystemView};
use super::MemberRef;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How deep device stacks are followed (dm over md over loop over a file on dm ...).
const MAX_DEPTH: usize = 8;

/// Identity of a file or device node: equal ids are the same data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ObjectId {
    /// A regular file: (st_dev major, minor, inode).
    File(u32, u32, u64),
    /// A block device: (major, minor).
    Block(u32, u32),
}

/// A file system members live on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FsId {
    /// `st_dev` (major, minor); major 0 is an anonymous device (tmpfs, FUSE, btrfs, NFS).
    pub dev: (u32, u32),
    /// `ext4`, `tmpfs`, `fuse`, ... when known.
    pub fs_type: Option<String>,
}

/// The PCI function a disk hangs off: its host adapter (SATA/SAS/USB controller) or, for
/// NVMe, the drive's own controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Controller {
    /// PCI address (`0000:00:1f.2`).
    pub pci: String,
    /// `SATA`, `SAS`, `NVMe`, `USB`, `RAID`, `SCSI`, `IDE`, `virtio` from the PCI class.
    pub kind: Option<String>,
    /// Kernel driver (`ahci`, `mpt3sas`, `nvme`).
    pub driver: Option<String>,
}

impl Controller {
    /// `SATA controller 0000:00:1f.2 (ahci)`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} {}",
            self.kind
                .as_deref()
                .map_or("controller".into(), |k| format!("{k} controller")),
            self.pci
        );
        if let Some(d) = &self.driver {
            s += &format!(" ({d})");
        }
        s
    }
}

/// A disk at the bottom of a member's stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Disk {
    /// Kernel name (`sda`, `nvme0n1`, `vda`).
    pub name: String,
    /// Its sysfs folder (canonical, under `/sys/devices`).
    pub sys_path: PathBuf,
    /// Device number.
    pub dev: Option<(u32, u32)>,
    /// What makes two disks the same physical drive: model + serial when the serial is
    /// real, else the NVMe controller for namespaces, else the sysfs folder.
    pub id: String,
    /// Model.
    pub model: Option<String>,
    /// Firmware revision.
    pub firmware: Option<String>,
    /// Serial number.
    pub serial: Option<String>,
    /// Spinning (from `queue/rotational`).
    pub rotational: Option<bool>,
    /// The controller it hangs off, for disks behind PCI.
    pub controller: Option<Controller>,
    /// A kernel-made device with nothing physical under it (zram, nbd, a loop device whose
    /// backing file could not be followed).
    pub is_virtual: bool,
}

/// How a member reaches its disks (one entry per step).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Via {
    /// A partition of this disk (kernel name).
    Partition(String),
    /// A device-mapper volume (`dm-0`, with its dm name if known).
    DeviceMapper(String),
    /// An md array.
    Md(String),
    /// A loop device over this file.
    Loop(String),
    /// A file on this file system (device `maj:min`).
    File(String),
}

/// Everything known about one member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// The member.
    pub member: MemberRef,
    /// The file or device node itself.
    pub object: Option<ObjectId>,
    /// Files under it (loop backing files).
    pub backing: Vec<ObjectId>,
    /// The steps from the member to its disks.
    pub via: Vec<Via>,
    /// File systems it lives on.
    pub filesystems: Vec<FsId>,
    /// Disks at the bottom.
    pub disks: Vec<Disk>,
    /// Server of a network member (`host:port`).
    pub host: Option<String>,
}

fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// `nbd://host:port/export` → `host:port`; `nbd+unix:///x?socket=/run/s` → the socket.
pub fn network_host(path: &str) -> Option<String> {
    let (scheme, rest) = path.split_once("://")?;
    if scheme.contains("unix") {
        return rest
            .split_once("socket=")
            .map(|(_, s)| s.split('&').next().unwrap_or(s).to_string());
    }
    let auth = rest.split(['/', '?']).next().unwrap_or("");
    (!auth.is_empty()).then(|| auth.rsplit('@').next().unwrap_or(auth).to_string())
}

fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

fn pci_kind(class: &str) -> Option<String> {
    let c = u32::from_str_radix(class.trim().trim_start_matches("0x"), 16).ok()?;
    let k = match c >> 8 {
        0x0100 => "SCSI",
        0x0101 => "IDE",
        0x0104 => "RAID",
        0x0106 => "SATA",
        0x0107 => "SAS",
        0x0108 => "NVMe",
        0x0c03 => "USB",
        0x0180 => "storage",
        _ => return None,
    };
    Some(k.into())
}

/// The deepest PCI function folder on a sysfs path.
pub(crate) fn pci_dir(p: &Path) -> Option<PathBuf> {
    let mut found = None;
    let mut cur = PathBuf::new();
    for c in p.components() {
        cur.push(c);
        if is_pci_addr(&c.as_os_str().to_string_lossy()) {
            found = Some(cur.clone());
        }
    }
    found
}

/// The controller of the disk whose sysfs folder is `p`: the deepest PCI function on its path.
fn controller(sys: &dyn SystemView, p: &Path) -> Option<Controller> {
    let d = pci_dir(p)?;
    let pci = d.file_name()?.to_string_lossy().into_owned();
    let driver = sys
        .canonical(&d.join("driver"))
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    let kind = sys
        .read_text(&d.join("class"))
        .and_then(|c| pci_kind(&c))
        .or_else(|| {
            p.components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with("virtio"))
                .then(|| "virtio".to_string())
        });
    Some(Controller { pci, kind, driver })
}

/// `E:KEY=VALUE` of a udev database entry.
fn udev_prop(db: &str, key: &str) -> Option<String> {
    db.lines()
        .filter_map(|l| l.strip_prefix("E:"))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The serial in a SCSI VPD page 0x80 (4 header bytes, then the ASCII serial).
fn vpd80_serial(b: &[u8]) -> Option<String> {
    if b.len() < 5 || b[1] != 0x80 {
        return None;
    }
    let n = usize::from(b[3]).min(b.len() - 4);
    let s = String::from_utf8_lossy(&b[4..4 + n]).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// A serial that identifies a drive (not blank, not a placeholder of zeros).
fn real_serial(s: &str) -> bool {
    s.len() >= 4 && s.chars().any(|c| c != '0' && c != ' ')
}

fn disk_info(sys: &dyn SystemView, whole: &Path) -> Disk {
    let name = whole
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dev = sys
        .read_text(&whole.join("dev"))
        .and_then(|s| parse_dev(&s));
    let db = dev
        .and_then(|(a, b)| sys.read_text(Path::new(&format!("/run/udev/data/b{a}:{b}"))))
        .unwrap_or_default();
    let attr = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| sys.read_text(&whole.join(n)))
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    let model = udev_prop(&db, "ID_MODEL")
        .map(|m| m.replace('_', " "))
        .or_else(|| attr(&["device/model"]));
    let firmware =
        udev_prop(&db, "ID_REVISION").or_else(|| attr(&["device/rev", "device/firmware_rev"]));
    let serial = udev_prop(&db, "ID_SERIAL_SHORT")
        .or_else(|| attr(&["device/serial", "serial"]))
        .or_else(|| {
            sys.read(&whole.join("device/vpd_pg80"))
                .and_then(|b| vpd80_serial(&b))
        });
    let rotational = sys
        .read_text(&whole.join("queue/rotational"))
        .map(|s| s == "1");
    let is_virtual = whole.starts_with("/sys/devices/virtual");
    // NVMe namespaces of one controller are one drive: …/nvme/nvme0/nvme0n1.
    let nvme_ctrl = whole.parent().filter(|p| {
        p.parent()
            .and_then(|q| q.file_name())
            .is_some_and(|n| n == "nvme")
    });
    let id = match (&model, &serial) {
        (Some(m), Some(s)) if real_serial(s) => format!("{m}/{s}"),
        _ => nvme_ctrl.unwrap_or(whole).to_string_lossy().into_owned(),
    };
    Disk {
        controller: if is_virtual {
            None
        } else {
            controller(sys, whole)
        },
        name,
        sys_path: whole.to_path_buf(),
        dev,
        id,
        model,
        firmware,
        serial,
        rotational,
        is_virtual,
    }
}

struct Walk<'a> {
    sys: &'a dyn SystemView,
    out: Identity,
}

impl Walk<'_> {
    fn push_disk(&mut self, d: Disk) {
        if !self.out.disks.iter().any(|x| x.id == d.id) {
            self.out.disks.push(d);
        }
    }
    /// A regular file (a member, or a loop device's backing file): its file system and
    /// what that sits on.
    fn file(&mut self, path: &Path, depth: usize) {
        let Some(st) = self.sys.stat(path) else {
            return;
        };
        let fs = FsId {
            dev: st.dev,
            fs_type: self.sys.fs_type(path),
        };
        self.out
            .via
            .push(Via::File(format!("{}:{}", st.dev.0, st.dev.1)));
        if !self.out.filesystems.contains(&fs) {
            self.out.filesystems.push(fs);
        }
        if st.dev.0 != 0 {
            self.block(st.dev, depth + 1);
        }
    }
    /// Block device `dev` and everything under it.
    fn block(&mut self, dev: (u32, u32), depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let sys = self.sys;
        let Some(p) = sys.canonical(Path::new(&format!("/sys/dev/block/{}:{}", dev.0, dev.1)))
        else {
            return;
        };
        let whole = if sys.read(&p.join("partition")).is_some() {
            let parent = p.parent().map(Path::to_path_buf).unwrap_or_default();
            let pname = parent.file_name().unwrap_or_default().to_string_lossy();
            self.out.via.push(Via::Partition(pname.into_owned()));
            parent
        } else {
            p
        };
        let name = whole
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let slaves = sys.list(&whole.join("slaves"));
        if !slaves.is_empty() {
            self.out.via.push(if name.starts_with("md") {
                Via::Md(name.clone())
            } else {
                match sys.read_text(&whole.join("dm/name")) {
                    Some(n) => Via::DeviceMapper(format!("{name} ({n})")),
                    None => Via::DeviceMapper(name.clone()),
                }
            });
            for s in slaves {
                let d = sys
                    .read_text(Path::new(&format!("/sys/class/block/{s}/dev")))
                    .and_then(|t| parse_dev(&t));
                if let Some(d) = d {
                    self.block(d, depth + 1);
                }
            }
            return;
        }
        if let Some(bf) = sys.read_text(&whole.join("loop/backing_file")) {
            let bf = bf.trim_end_matches(" (deleted)").to_string();
            self.out.via.push(Via::Loop(bf.clone()));
            if let Some(st) = sys.stat(Path::new(&bf)) {
                if st.kind == FileKind::Regular {
                    self.out
                        .backing
                        .push(ObjectId::File(st.dev.0, st.dev.1, st.ino));
                    self.file(Path::new(&bf), depth);
                    return;
                }
                if st.kind == FileKind::Block {
                    self.out.backing.push(ObjectId::Block(st.rdev.0, st.rdev.1));
                    self.block(st.rdev, depth + 1);
                    return;
                }
            }
        }
        let d = disk_info(sys, &whole);
        self.push_disk(d);
    }
}

/// Resolve one member.
pub fn resolve(sys: &dyn SystemView, m: &MemberRef) -> Identity {
    resolve_with(sys, m, false)
}

/// Resolve one member; with `future_files`, a path that does not exist yet is taken as a
/// file its folder's file system will hold (`create --size` makes it there).
pub fn resolve_with(sys: &dyn SystemView, m: &MemberRef, future_files: bool) -> Identity {
    let mut w = Walk {
        sys,
        out: Identity {
            member: m.clone(),
            object: None,
            backing: Vec::new(),
            via: Vec::new(),
            filesystems: Vec::new(),
            disks: Vec::new(),
            host: None,
        },
    };
    if m.path.contains("://") {
        w.out.host = network_host(&m.path);
        return w.out;
    }
    let p = Path::new(&m.path);
    match sys.stat(p) {
        Some(st) if st.kind == FileKind::Regular => {
            w.out.object = Some(ObjectId::File(st.dev.0, st.dev.1, st.ino));
            w.file(p, 0);
        }
        Some(st) if st.kind == FileKind::Block => {
            w.out.object = Some(ObjectId::Block(st.rdev.0, st.rdev.1));
            w.block(st.rdev, 0);
        }
        // A folder (probe's scratch place): what its file system sits on.
        Some(st) if st.kind == FileKind::Directory => w.file(p, 0),
        None if future_files => {
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if sys
                .stat(dir)
                .is_some_and(|st| st.kind == FileKind::Directory)
            {
                w.file(dir, 0);
            }
        }
        _ => {}
    }
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_parsers() {
        assert!(is_pci_addr("0000:00:1f.2"));
        assert!(!is_pci_addr("pci0000:00"));
        assert!(!is_pci_addr("0000:00:1f.x"));
        assert_eq!(pci_kind("0x010601").as_deref(), Some("SATA"));
        assert_eq!(pci_kind("0x010802").as_deref(), Some("NVMe"));
        assert_eq!(pci_kind("0x030000"), None);
        assert_eq!(
            network_host("nbd://10.0.0.5:10809/disk").as_deref(),
            Some("10.0.0.5:10809")
        );
        assert_eq!(
            network_host("nbd+unix:///e?socket=/run/s.sock").as_deref(),
            Some("/run/s.sock")
        );
        assert_eq!(network_host("/dev/sda"), None);
        assert_eq!(
            vpd80_serial(&[0, 0x80, 0, 8, b'Z', b'A', b'1', b'2', b'3', b'4', b'5', b' '])
                .as_deref(),
            Some("ZA12345")
        );
        assert_eq!(vpd80_serial(&[0, 0x83, 0, 1, b'Z']), None);
        assert!(!real_serial("00000000"));
        assert!(real_serial("WD-123"));
        assert_eq!(
            udev_prop(
                "E:ID_MODEL=WDC_WD140\nE:ID_SERIAL_SHORT=9RK1\n",
                "ID_SERIAL_SHORT"
            )
            .as_deref(),
            Some("9RK1")
        );
    }
}
