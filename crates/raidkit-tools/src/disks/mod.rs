//! Disks you can trust: do members share a failure domain (one file, one disk, one file
//! system, one manufacturing batch, one controller, one server)? What does SMART say about
//! each member's disk? Is a member slower than its peers or than its link allows?
//!
//! Everything reads the system through [`sys::SystemView`], so tests feed fake sysfs trees
//! ([`fake`]) and recorded `smartctl --json` output.
//!
//! * [`check_members`]: failure-domain findings for a list of members (`create` before it
//!   writes, `detail`, `status`).
//! * [`smart::check_smart`]: SMART health per member, and the `smart_warning` event.
//! * [`link`]: what a member's interface can carry (SATA link speed, PCIe generation ×
//!   width), used by `probe` to explain a slow member.

pub mod domains;
pub mod fake;
pub mod link;
pub mod report;
pub mod resolve;
pub mod serial;
pub mod smart;
pub mod sys;

pub use domains::{analyze, DomainFinding, DomainKind};
pub use report::{create_warnings, of_array, of_status, report_lines};
pub use resolve::{resolve, Disk, Identity};
pub use sys::{FakeSystem, HostSystem, SystemView};

use raidkit_layout::{names, Geometry, Level};
use serde::Serialize;
use std::collections::BTreeSet;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Worth a look: shared fate that costs availability, not data.
    Notice,
    /// Redundancy is weaker than it looks.
    Warning,
    /// The array cannot work as configured.
    Critical,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Notice => "notice",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        })
    }
}

/// A member as the caller names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MemberRef {
    /// Role in the array (None for a spare).
    pub role: Option<usize>,
    /// File, device or `nbd://` URL as given.
    pub path: String,
}

impl MemberRef {
    /// Members in role order (`create`'s list; the word `missing` is skipped).
    pub fn in_role_order<P: AsRef<std::path::Path>>(paths: &[P]) -> Vec<MemberRef> {
        paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.as_ref() != std::path::Path::new("missing"))
            .map(|(i, p)| MemberRef {
                role: Some(i),
                path: p.as_ref().display().to_string(),
            })
            .collect()
    }
    /// `member 2 (/dev/sdc)` or `spare /dev/sdd`.
    pub fn describe(&self) -> String {
        match self.role {
            Some(r) => format!("member {r} ({})", self.path),
            None => format!("spare {}", self.path),
        }
    }
}

/// What an array can lose: level, member slots, layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayShape {
    /// Level.
    pub level: Level,
    /// Member slots.
    pub raid_disks: usize,
    /// Raw layout (RAID10's copies and their placement matter).
    pub layout: u32,
}

impl ArrayShape {
    /// A shape; `layout` None means the level's default (as `create` picks it).
    pub fn new(level: Level, raid_disks: usize, layout: Option<u32>) -> ArrayShape {
        ArrayShape {
            level,
            raid_disks,
            layout: layout.unwrap_or_else(|| names::default_layout(level)),
        }
    }
    /// `raid5 of 4`.
    pub fn describe(&self) -> String {
        format!("{} of {}", self.level, self.raid_disks)
    }
    /// Does every array block keep a readable copy or enough parity when the members in
    /// `roles` are all gone?
    pub fn survives(&self, roles: &BTreeSet<usize>) -> bool {
        let lost: BTreeSet<usize> = roles
            .iter()
            .copied()
            .filter(|&r| r < self.raid_disks)
            .collect();
        let n = lost.len();
        if n == 0 {
            return true;
        }
        match self.level {
            Level::Linear | Level::Raid0 => false,
            Level::Raid1 => n < self.raid_disks,
            Level::Raid4 | Level::Raid5 => n <= 1,
            Level::Raid6 => n <= 2,
            Level::Raid10 => self.raid10_survives(&lost),
        }
    }
    /// RAID10: some block has every copy on a lost member? Checked on the real mapping over
    /// enough chunks to cover every placement pattern (near, far, offset repeat within
    /// `raid_disks × copies` chunks).
    fn raid10_survives(&self, lost: &BTreeSet<usize>) -> bool {
        const CHUNK: u64 = 128;
        let n = self.raid_disks as u64;
        let dev_sectors = CHUNK * n * 16;
        let Ok(g) = Geometry::new(
            Level::Raid10,
            self.layout,
            CHUNK,
            self.raid_disks,
            dev_sectors,
            Vec::new(),
        ) else {
            // Unknown layout: assume the worst pair.
            return lost.len() < 2;
        };
        let copies = g.copies().max(1) as u64;
        (0..n * copies * 4).all(|c| {
            g.locate(c * CHUNK)
                .is_none_or(|p| p.copies.iter().any(|(r, _)| !lost.contains(r)))
        })
    }
    /// After losing `roles`, could it lose one more member anywhere and survive?
    pub fn redundancy_left(&self, roles: &BTreeSet<usize>) -> bool {
        (0..self.raid_disks)
            .filter(|r| !roles.contains(r))
            .any(|r| {
                let mut more = roles.clone();
                more.insert(r);
                self.survives(&more)
            })
    }
}

/// Failure-domain findings for `members` on this machine (most severe first). `shape`
/// (when known) lets messages say whether the array survives each shared failure.
pub fn check_members(members: &[MemberRef], shape: Option<&ArrayShape>) -> Vec<DomainFinding> {
    check_members_on(&HostSystem, members, shape)
}

/// [`check_members`] on any system view.
pub fn check_members_on(
    sys: &dyn SystemView,
    members: &[MemberRef],
    shape: Option<&ArrayShape>,
) -> Vec<DomainFinding> {
    let ids: Vec<Identity> = members.iter().map(|m| resolve(sys, m)).collect();
    analyze(&ids, shape)
}

/// [`check_members_on`] before `create`: members that do not exist yet count as files in
/// their folders (where `create --size` will make them).
pub fn check_new_members_on(
    sys: &dyn SystemView,
    members: &[MemberRef],
    shape: Option<&ArrayShape>,
) -> Vec<DomainFinding> {
    let ids: Vec<Identity> = members
        .iter()
        .map(|m| resolve::resolve_with(sys, m, true))
        .collect();
    analyze(&ids, shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[usize]) -> BTreeSet<usize> {
        v.iter().copied().collect()
    }

    #[test]
    fn what_each_level_survives() {
        let r5 = ArrayShape::new(Level::Raid5, 4, None);
        assert!(r5.survives(&set(&[2])));
        assert!(!r5.survives(&set(&[0, 2])));
        assert!(!r5.redundancy_left(&set(&[2])));
        let r6 = ArrayShape::new(Level::Raid6, 4, None);
        assert!(r6.survives(&set(&[0, 3])));
        assert!(r6.redundancy_left(&set(&[0])));
        assert!(!r6.survives(&set(&[0, 1, 3])));
        assert!(!ArrayShape::new(Level::Raid0, 2, None).survives(&set(&[1])));
        let r1 = ArrayShape::new(Level::Raid1, 3, None);
        assert!(r1.survives(&set(&[0, 1])));
        assert!(!r1.survives(&set(&[0, 1, 2])));
        // RAID10 n2 on 4: 0+1 and 2+3 are mirror pairs.
        let n2 = ArrayShape::new(Level::Raid10, 4, None);
        assert!(!n2.survives(&set(&[0, 1])));
        assert!(n2.survives(&set(&[0, 2])));
        assert!(n2.survives(&set(&[1, 3])));
        // f2 on 4: the far copy of member d's chunks is on d+1.
        let f2 = ArrayShape::new(Level::Raid10, 4, Some(0x201));
        assert!(!f2.survives(&set(&[0, 1])));
        assert!(f2.survives(&set(&[0, 2])));
        // Spares (roles beyond the slots) do not count.
        assert!(r5.survives(&set(&[1, 7])));
    }

    #[test]
    fn role_order_skips_missing() {
        let m = MemberRef::in_role_order(&["/a", "missing", "/c"]);
        assert_eq!(
            m.iter()
                .map(|m| (m.role, m.path.as_str()))
                .collect::<Vec<_>>(),
            [(Some(0), "/a"), (Some(2), "/c")]
        );
        assert_eq!(m[1].describe(), "member 2 (/c)");
    }
}
