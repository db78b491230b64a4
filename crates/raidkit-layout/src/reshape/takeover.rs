//! Level changes md makes without moving data ("takeovers", md-format §8.4): the new
//! geometry keeps every data sector where the old one has it, and only new redundancy
//! (parity, Q, mirrors) is built. mdadm chains them with restripes for the level changes
//! it offers: RAID1(2)→RAID5 is a takeover then a grow; RAID5→RAID6 a takeover to the
//! `*-6` layout (Q on the new last member) then, if asked, a layout restripe; RAID6→RAID5
//! the reverse; RAID0→RAID4/5 a takeover to RAID4 / RAID5 parity-last (and a restripe
//! for another layout); RAID4/5→RAID0 a restripe to parity-last then a takeover;
//! RAID0↔RAID10 n2 and RAID1 device counts are takeovers alone.

use crate::{Geometry, LayoutError, Level};

/// How the members of the old geometry become the members of the new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Takeover {
    /// For each role of the new geometry: the old roles whose member already holds exactly
    /// this role's contents (any one of them will do), or empty if the member in this role
    /// must be built (new parity, Q or mirror).
    pub sources: Vec<Vec<usize>>,
}

impl Takeover {
    /// Roles of the new geometry that must be built.
    pub fn to_build(&self) -> Vec<usize> {
        (0..self.sources.len())
            .filter(|&r| self.sources[r].is_empty())
            .collect()
    }
}

fn refuse(old: &Geometry, new: &Geometry, why: &str) -> LayoutError {
    LayoutError::Invalid(format!(
        "md cannot take {} ({} devices, layout {}) over as {} ({} devices, layout {}) without moving data: {why}",
        old.level, old.raid_disks, old.layout, new.level, new.raid_disks, new.layout
    ))
}

/// RAID5 layout → the RAID6 layout with the same data and P placement and Q on the last
/// member (`*-6`): left/right asymmetric/symmetric and parity-first gain 16, parity-last
/// is the same value.
fn raid6_of_raid5(layout: u32) -> Option<u32> {
    match layout {
        0..=4 => Some(layout + 16),
        5 => Some(5),
        _ => None,
    }
}

/// A single-zone RAID0 (all members usable to the same size): the only kind md takes over.
fn raid0_single_zone(g: &Geometry) -> bool {
    g.zones().len() == 1
}

/// The takeover from `old` to `new`, if md makes it (the pairs in the module docs, with
/// the same chunk where both levels stripe and the same array size); an error naming the
/// pair otherwise.
pub fn takeover(old: &Geometry, new: &Geometry) -> Result<Takeover, LayoutError> {
    let (n, m) = (old.raid_disks, new.raid_disks);
    let same = |k: usize| (0..k).map(|r| vec![r]).collect::<Vec<_>>();
    let same_chunk = old.chunk_sectors == new.chunk_sectors;
    let sources: Vec<Vec<usize>> = match (old.level, new.level) {
        (Level::Raid1, Level::Raid1) => (0..m)
            .map(|r| if r < n { vec![r] } else { Vec::new() })
            .collect(),
        (Level::Raid1, Level::Raid5) if n == 2 && m == 2 => vec![vec![0, 1], vec![0, 1]],
        (Level::Raid5, Level::Raid1) if n == 2 && m == 2 => vec![vec![0, 1], vec![0, 1]],
        (Level::Raid4, Level::Raid5) | (Level::Raid5, Level::Raid4)
            if n == m
                && same_chunk
                && (old.level == Level::Raid4 || old.layout == 5)
                && (new.level == Level::Raid4 || new.layout == 5) =>
        {
            same(n)
        }
        (Level::Raid0, Level::Raid4 | Level::Raid5)
            if m == n + 1
                && same_chunk
                && raid0_single_zone(old)
                && (new.level == Level::Raid4 || new.layout == 5) =>
        {
            let mut s = same(n);
            s.push(Vec::new());
            s
        }
        (Level::Raid4 | Level::Raid5, Level::Raid0)
            if n == m + 1 && same_chunk && (old.level == Level::Raid4 || old.layout == 5) =>
        {
            same(m)
        }
        (Level::Raid5, Level::Raid6)
            if m == n + 1 && same_chunk && raid6_of_raid5(old.layout) == Some(new.layout) =>
        {
            let mut s = same(n);
            s.push(Vec::new());
            s
        }
        (Level::Raid6, Level::Raid5)
            if n == m + 1 && same_chunk && raid6_of_raid5(new.layout) == Some(old.layout) =>
        {
            same(m)
        }
        (Level::Raid0, Level::Raid10)
            if m == 2 * n && new.layout == 0x102 && same_chunk && raid0_single_zone(old) =>
        {
            (0..m)
                .map(|r| if r % 2 == 0 { vec![r / 2] } else { Vec::new() })
                .collect()
        }
        (Level::Raid10, Level::Raid0) if n == 2 * m && old.layout == 0x102 && same_chunk => {
            (0..m).map(|r| vec![2 * r, 2 * r + 1]).collect()
        }
        (Level::Raid0, Level::Raid4 | Level::Raid5 | Level::Raid10)
            if !raid0_single_zone(old) =>
        {
            return Err(refuse(
                old,
                new,
                &format!(
                    "the raid0's members are used to different sizes ({} zones); md takes over only a raid0 whose members are all used to the same size",
                    old.zones().len()
                ),
            ))
        }
        _ => return Err(refuse(old, new, "not a level change md makes in place")),
    };
    if old.array_sectors() != new.array_sectors() {
        return Err(refuse(
            old,
            new,
            &format!(
                "the array sizes differ ({} and {} sectors); give the new geometry the old size",
                old.array_sectors(),
                new.array_sectors()
            ),
        ));
    }
    Ok(Takeover { sources })
}
