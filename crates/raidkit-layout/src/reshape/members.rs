//! Which members of a reshape hold what: the one definition of a member the reshape
//! builds (md's RECOVERY_OFFSET member of a reshape), which every part of raidkit that
//! writes, assembles, compares or turns back a reshape asks.

use super::{Reshape, Side};
use crate::Geometry;

/// Is a member in `role` one that a reshape from `old` to `new` builds? `recovering`: the
/// member is recorded as being rebuilt in its own role (md's RECOVERY_OFFSET without
/// REPLACEMENT); a device that a reshape's start puts into an empty role counts as
/// recovering.
///
/// Such a member takes a role both geometries have that was empty when the reshape began
/// (a missing member of a degraded grow, the Q of a RAID5→6 conversion, the parity of a
/// RAID0 grown through RAID4). It holds nothing of the old geometry (it was blank), and
/// the reshape writes it whole wherever it moves data, so it is complete where the new
/// geometry is (md makes its `recovery_offset` follow the position). A role only the new
/// geometry has is not built: the reshape writes its member whole too, but md counts it
/// in sync from the start (a recovery recorded there is an ordinary one); a role only the
/// old geometry has (leaving in a shrink) is not either.
pub fn builds_member(old: &Geometry, new: &Geometry, role: usize, recovering: bool) -> bool {
    recovering && role < old.raid_disks && role < new.raid_disks
}

impl Reshape {
    /// [`builds_member`] for this reshape's two geometries.
    pub fn builds(&self, role: usize, recovering: bool) -> bool {
        builds_member(&self.old, &self.new, role, recovering)
    }

    /// Does the member in `role` (`recovering` as for [`Reshape::builds`]) hold `side`'s
    /// copies, so that reading them from it means something? Every member of a geometry
    /// does, except one the reshape builds, which holds nothing of the old geometry:
    /// whatever its old places read (zeros, or blocks of the new geometry) is no old
    /// copy, and comparing it with the new copy could take an unmoved step for a moved
    /// one.
    pub fn holds_copies(&self, side: Side, role: usize, recovering: bool) -> bool {
        let g = match side {
            Side::Old => &self.old,
            Side::New => &self.new,
        };
        role < g.raid_disks && !(side == Side::Old && self.builds(role, recovering))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reshape::Direction;
    use crate::Level;

    fn geo(level: Level, layout: u32, n: usize) -> Geometry {
        Geometry::new(level, layout, 128, n, 1 << 14, Vec::new()).unwrap()
    }

    fn plan(old: Geometry, new: Geometry, dir: Direction) -> Reshape {
        let (o, n) = (old.raid_disks, new.raid_disks);
        Reshape::new(old, new, vec![4096; o], vec![4096; n], dir).unwrap()
    }

    #[test]
    fn a_degraded_grow_builds_the_missing_role_only() {
        // RAID5 of 4 with role 1 missing, grown to 5: a spare fills role 1, another 4.
        let p = plan(
            geo(Level::Raid5, 2, 4),
            geo(Level::Raid5, 2, 5),
            Direction::Forwards,
        );
        let built: Vec<usize> = (0..6).filter(|&r| p.builds(r, true)).collect();
        assert_eq!(built, vec![0, 1, 2, 3]);
        // Not recorded as recovering: never built, whatever the role.
        assert!((0..6).all(|r| !p.builds(r, false)));
        // The built member holds no old copy; it holds the new one, as does role 4.
        assert!(!p.holds_copies(Side::Old, 1, true));
        assert!(p.holds_copies(Side::New, 1, true));
        assert!(p.holds_copies(Side::Old, 1, false));
        assert!(p.holds_copies(Side::New, 4, true));
        assert!(!p.holds_copies(Side::Old, 4, false));
        assert!(!p.holds_copies(Side::New, 5, false));
    }

    #[test]
    fn a_raid5_to_6_conversion_builds_its_q_member() {
        // RAID6 left-symmetric-6 of 5 (the takeover of a RAID5 of 4, Q in role 4) to
        // RAID6 left-symmetric of 5.
        let p = plan(
            geo(Level::Raid6, 18, 5),
            geo(Level::Raid6, 2, 5),
            Direction::Forwards,
        );
        assert!(p.builds(4, true));
        assert!(!p.holds_copies(Side::Old, 4, true));
        assert!(p.holds_copies(Side::Old, 3, false));
    }

    #[test]
    fn a_shrink_builds_no_leaving_role() {
        let p = plan(
            geo(Level::Raid5, 2, 5),
            geo(Level::Raid5, 2, 4),
            Direction::Backwards,
        );
        assert!(!p.builds(4, true));
        assert!(p.holds_copies(Side::Old, 4, true));
        assert!(!p.holds_copies(Side::New, 4, true));
        assert!(p.builds(3, true));
    }
}
