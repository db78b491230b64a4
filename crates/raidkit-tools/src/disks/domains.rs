//! Members that fail together. From resolved [`Identity`]s, groups of members that share:
//! one file (critical: the array cannot work), one physical disk or one file system (one
//! failure takes them all), one batch of drives (same model and firmware, adjacent serials),
//! one controller, or one server. One finding per group, with the members, what they share,
//! and what losing it means for this array.

use super::resolve::{Disk, Identity, ObjectId, Via};
use super::{serial, ArrayShape, MemberRef, Severity};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What members share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DomainKind {
    /// The same file or device, twice (directly, through links, or under a loop device).
    SameFile,
    /// One physical disk (partitions, device-mapper volumes, files on its file systems).
    SameDisk,
    /// One file system whose disk could not be named (tmpfs, FUSE, NFS, btrfs).
    SameFilesystem,
    /// Drives of one batch: same model and firmware, adjacent serial numbers.
    SameBatch,
    /// One controller.
    SameController,
    /// One server (network members).
    SameHost,
}

/// One group of members sharing a failure domain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DomainFinding {
    /// How bad.
    pub severity: Severity,
    /// What they share.
    pub kind: DomainKind,
    /// The members (in the caller's order).
    pub members: Vec<MemberRef>,
    /// The shared thing (`/dev/sda`, `SATA controller 0000:00:1f.2 (ahci)`, ...).
    pub shared: String,
    /// What it means, in a sentence.
    pub message: String,
}

impl std::fmt::Display for DomainFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// Union-find over member indices.
struct Groups(Vec<usize>);

impl Groups {
    fn new(n: usize) -> Groups {
        Groups((0..n).collect())
    }
    fn find(&mut self, i: usize) -> usize {
        let mut r = i;
        while self.0[r] != r {
            r = self.0[r];
        }
        self.0[i] = r;
        r
    }
    fn join(&mut self, a: usize, b: usize) {
        let (x, y) = (self.find(a), self.find(b));
        self.0[x.max(y)] = x.min(y);
    }
    /// Groups of two or more, each sorted, in order of their first member.
    fn sets(&mut self) -> Vec<Vec<usize>> {
        let mut m: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..self.0.len() {
            let r = self.find(i);
            m.entry(r).or_default().push(i);
        }
        m.into_values().filter(|v| v.len() > 1).collect()
    }
}

/// `members 0 (/dev/sda1) and 2 (/dev/sda3)`.
fn names(ms: &[&MemberRef]) -> String {
    let parts: Vec<String> = ms
        .iter()
        .map(|m| match m.role {
            Some(r) => format!("{r} ({})", m.path),
            None => format!("spare {}", m.path),
        })
        .collect();
    let list = match parts.len() {
        0 => String::new(),
        1 => parts[0].clone(),
        n => format!("{} and {}", parts[..n - 1].join(", "), parts[n - 1]),
    };
    let word = if ms.iter().all(|m| m.role.is_none()) {
        ""
    } else if ms.len() == 1 {
        "member "
    } else {
        "members "
    };
    format!("{word}{list}")
}

fn takes(n: usize) -> &'static str {
    if n == 2 {
        "both"
    } else {
        "all of them"
    }
}

/// What losing `group` at once means for the array.
fn consequence(shape: Option<&ArrayShape>, group: &[&MemberRef], data: bool) -> (bool, String) {
    let Some(s) = shape else {
        return (false, String::new());
    };
    let roles: BTreeSet<usize> = group.iter().filter_map(|m| m.role).collect();
    if roles.is_empty() {
        return (true, String::new());
    }
    if !s.survives(&roles) {
        let what = if data {
            "the array's data would be lost"
        } else {
            "the array stops until it is back"
        };
        return (
            false,
            format!("; that is more than a {} can lose: {what}", s.describe()),
        );
    }
    if s.redundancy_left(&roles) {
        (true, format!("; the {} survives it", s.describe()))
    } else {
        (
            true,
            format!("; the {} survives it with no redundancy left", s.describe()),
        )
    }
}

fn disk_name(d: &Disk) -> String {
    format!("/dev/{}", d.name)
}

/// The disk (or disks) two members have in common, named.
fn shared_disk<'a>(ids: &[&'a Identity]) -> Option<&'a Disk> {
    let first = ids.first()?;
    first
        .disks
        .iter()
        .find(|d| ids.iter().all(|i| i.disks.iter().any(|e| e.id == d.id)))
        .or_else(|| first.disks.first())
}

fn same_file(ids: &[Identity], out: &mut Vec<DomainFinding>) -> Groups {
    let mut g = Groups::new(ids.len());
    let keys: Vec<BTreeSet<ObjectId>> = ids
        .iter()
        .map(|i| i.object.iter().chain(&i.backing).copied().collect())
        .collect();
    for a in 0..ids.len() {
        for b in a + 1..ids.len() {
            if !keys[a].is_disjoint(&keys[b]) {
                g.join(a, b);
            }
        }
    }
    for set in g.sets() {
        let ms: Vec<&MemberRef> = set.iter().map(|&i| &ids[i].member).collect();
        let what = match set.iter().find_map(|&i| ids[i].object) {
            Some(ObjectId::File(a, b, ino)) => format!("file {ino} on device {a}:{b}"),
            Some(ObjectId::Block(a, b)) => format!("device {a}:{b}"),
            None => "one file".into(),
        };
        out.push(DomainFinding {
            severity: Severity::Critical,
            kind: DomainKind::SameFile,
            message: format!(
                "{} are the same data ({what}): every write to one overwrites the other; the array cannot work — give each role its own device",
                names(&ms)
            ),
            members: ms.into_iter().cloned().collect(),
            shared: what,
        });
    }
    g
}

fn how_on_disk(ids: &[&Identity], disk: &Disk) -> String {
    let name = disk_name(disk);
    let all = |f: &dyn Fn(&Via) -> bool| ids.iter().all(|i| i.via.iter().any(f));
    if all(&|v| matches!(v, Via::Partition(p) if *p == disk.name))
        && ids.iter().all(|i| i.via.len() == 1)
    {
        format!("are partitions of {name}")
    } else if all(&|v| matches!(v, Via::DeviceMapper(_))) {
        format!("are device-mapper volumes on {name}")
    } else if all(&|v| matches!(v, Via::File(_) | Via::Loop(_))) {
        let devs: BTreeSet<(u32, u32)> = ids
            .iter()
            .flat_map(|i| i.filesystems.iter())
            .map(|f| f.dev)
            .collect();
        let types: BTreeSet<String> = ids
            .iter()
            .flat_map(|i| i.filesystems.iter())
            .filter_map(|f| f.fs_type.clone())
            .collect();
        let types: Vec<String> = types.into_iter().collect();
        if devs.len() == 1 {
            let ty = types.first().map_or(String::new(), |t| format!("{t} "));
            format!("are files on one {ty}file system on {name}")
        } else {
            format!("are files on {} file systems on {name}", devs.len())
        }
    } else {
        format!("sit on one disk, {name}")
    }
}

fn same_disk(
    ids: &[Identity],
    files: &mut Groups,
    shape: Option<&ArrayShape>,
    out: &mut Vec<DomainFinding>,
) {
    let mut g = Groups::new(ids.len());
    for a in 0..ids.len() {
        for b in a + 1..ids.len() {
            let shares = ids[a]
                .disks
                .iter()
                .any(|d| ids[b].disks.iter().any(|e| e.id == d.id));
            if shares {
                g.join(a, b);
            }
        }
    }
    for set in g.sets() {
        // Members that are all one file are reported as such already.
        let roots: BTreeSet<usize> = set.iter().map(|&i| files.find(i)).collect();
        if roots.len() < 2 {
            continue;
        }
        let group: Vec<&Identity> = set.iter().map(|&i| &ids[i]).collect();
        let Some(disk) = shared_disk(&group) else {
            continue;
        };
        let ms: Vec<&MemberRef> = group.iter().map(|i| &i.member).collect();
        let (_, cons) = consequence(shape, &ms, true);
        out.push(DomainFinding {
            severity: Severity::Warning,
            kind: DomainKind::SameDisk,
            message: format!(
                "{} {}: one disk failure takes {}{cons}",
                names(&ms),
                how_on_disk(&group, disk),
                takes(ms.len())
            ),
            members: ms.into_iter().cloned().collect(),
            shared: disk_name(disk),
        });
    }
    // Files on file systems whose disk is unknown (anonymous devices: tmpfs, FUSE, NFS).
    let mut f = Groups::new(ids.len());
    for a in 0..ids.len() {
        for b in a + 1..ids.len() {
            let shares = ids[a]
                .filesystems
                .iter()
                .any(|x| x.dev.0 == 0 && ids[b].filesystems.iter().any(|y| y.dev == x.dev));
            if shares && g.find(a) != g.find(b) {
                f.join(a, b);
            }
        }
    }
    for set in f.sets() {
        let roots: BTreeSet<usize> = set.iter().map(|&i| files.find(i)).collect();
        if roots.len() < 2 {
            continue;
        }
        let ms: Vec<&MemberRef> = set.iter().map(|&i| &ids[i].member).collect();
        let fs = ids[set[0]]
            .filesystems
            .iter()
            .find(|x| x.dev.0 == 0)
            .cloned();
        let (ty, dev) = fs.map_or(("?".into(), (0, 0)), |x| {
            (x.fs_type.unwrap_or_else(|| "unknown".into()), x.dev)
        });
        let extra = if ty == "tmpfs" || ty == "ramfs" {
            " (in memory: a reboot loses them all)"
        } else {
            ""
        };
        let (_, cons) = consequence(shape, &ms, true);
        out.push(DomainFinding {
            severity: Severity::Warning,
            kind: DomainKind::SameFilesystem,
            message: format!(
                "{} are files on one {ty} file system (device {}:{}){extra}: whatever fails under it takes {}{cons}",
                names(&ms),
                dev.0,
                dev.1,
                takes(ms.len())
            ),
            members: ms.into_iter().cloned().collect(),
            shared: format!("{ty} {}:{}", dev.0, dev.1),
        });
    }
}

/// Distinct physical disks and the members on each.
fn disks_and_members(ids: &[Identity]) -> Vec<(Disk, Vec<usize>)> {
    let mut v: Vec<(Disk, Vec<usize>)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        for d in &id.disks {
            match v.iter_mut().find(|(e, _)| e.id == d.id) {
                Some((_, ms)) => ms.push(i),
                None => v.push((d.clone(), vec![i])),
            }
        }
    }
    v
}

/// Findings over groups of distinct disks joined by `related`.
fn disk_groups(
    ids: &[Identity],
    related: &dyn Fn(&Disk, &Disk) -> bool,
) -> Vec<(Vec<Disk>, Vec<usize>)> {
    let dm = disks_and_members(ids);
    let mut g = Groups::new(dm.len());
    for a in 0..dm.len() {
        for b in a + 1..dm.len() {
            if related(&dm[a].0, &dm[b].0) {
                g.join(a, b);
            }
        }
    }
    g.sets()
        .into_iter()
        .map(|set| {
            let disks: Vec<Disk> = set.iter().map(|&i| dm[i].0.clone()).collect();
            let mut ms: Vec<usize> = set.iter().flat_map(|&i| dm[i].1.clone()).collect();
            ms.sort();
            ms.dedup();
            (disks, ms)
        })
        .collect()
}

fn same_batch(ids: &[Identity], shape: Option<&ArrayShape>, out: &mut Vec<DomainFinding>) {
    let related = |a: &Disk, b: &Disk| match (&a.model, &b.model, &a.serial, &b.serial) {
        (Some(ma), Some(mb), Some(sa), Some(sb)) => {
            ma == mb && a.firmware == b.firmware && serial::adjacent(sa, sb)
        }
        _ => false,
    };
    for (disks, set) in disk_groups(ids, &related) {
        let ms: Vec<&MemberRef> = set.iter().map(|&i| &ids[i].member).collect();
        let (survives, cons) = consequence(shape, &ms, true);
        let d0 = &disks[0];
        let serials: Vec<String> = disks
            .iter()
            .map(|d| format!("{} {}", disk_name(d), d.serial.clone().unwrap_or_default()))
            .collect();
        let shared = format!(
            "{} firmware {}",
            d0.model.clone().unwrap_or_default(),
            d0.firmware.clone().unwrap_or_else(|| "?".into())
        );
        out.push(DomainFinding {
            severity: if survives {
                Severity::Notice
            } else {
                Severity::Warning
            },
            kind: DomainKind::SameBatch,
            message: format!(
                "{} are {shared} with adjacent serial numbers ({}): drives of one batch tend to fail close together, and a rebuild stresses the survivors{cons}",
                names(&ms),
                serials.join(", ")
            ),
            members: ms.into_iter().cloned().collect(),
            shared,
        });
    }
}

fn same_controller(ids: &[Identity], shape: Option<&ArrayShape>, out: &mut Vec<DomainFinding>) {
    let related = |a: &Disk, b: &Disk| match (&a.controller, &b.controller) {
        (Some(x), Some(y)) => x.pci == y.pci,
        _ => false,
    };
    for (disks, set) in disk_groups(ids, &related) {
        let ms: Vec<&MemberRef> = set.iter().map(|&i| &ids[i].member).collect();
        let (_, cons) = consequence(shape, &ms, false);
        let c = disks[0]
            .controller
            .as_ref()
            .map(|c| c.describe())
            .unwrap_or_default();
        out.push(DomainFinding {
            severity: Severity::Notice,
            kind: DomainKind::SameController,
            message: format!(
                "{} hang off one {c}: if it fails it takes {} offline{cons}",
                names(&ms),
                takes(ms.len())
            ),
            members: ms.into_iter().cloned().collect(),
            shared: c,
        });
    }
}

fn same_host(ids: &[Identity], shape: Option<&ArrayShape>, out: &mut Vec<DomainFinding>) {
    let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        if let Some(h) = &id.host {
            by.entry(h).or_default().push(i);
        }
    }
    for (host, set) in by.into_iter().filter(|(_, v)| v.len() > 1) {
        let ms: Vec<&MemberRef> = set.iter().map(|&i| &ids[i].member).collect();
        let (_, cons) = consequence(shape, &ms, false);
        out.push(DomainFinding {
            severity: Severity::Notice,
            kind: DomainKind::SameHost,
            message: format!(
                "{} are exports of one server, {host}: if it or the network to it goes down it takes {} away{cons}",
                names(&ms),
                takes(ms.len())
            ),
            members: ms.into_iter().cloned().collect(),
            shared: host.to_string(),
        });
    }
}

/// Findings for resolved members, most severe first.
pub fn analyze(ids: &[Identity], shape: Option<&ArrayShape>) -> Vec<DomainFinding> {
    let mut out = Vec::new();
    let mut files = same_file(ids, &mut out);
    same_disk(ids, &mut files, shape, &mut out);
    same_batch(ids, shape, &mut out);
    same_controller(ids, shape, &mut out);
    same_host(ids, shape, &mut out);
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}
