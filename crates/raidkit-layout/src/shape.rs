//! What a level and a geometry answer about themselves: member counts, widths of a stripe,
//! how many failed members they survive, and their names. One place for these questions,
//! so the engine, the CLI and the tools never compute them with their own `match level`.

use crate::{Geometry, Level};

impl Level {
    /// The name mdadm prints: `linear`, `raid0`, `raid1`, `raid4`, `raid5`, `raid6`,
    /// `raid10`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Linear => "linear",
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid4 => "raid4",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Raid10 => "raid10",
        }
    }

    /// The name of a superblock `level` field: the level's [`Level::name`], or
    /// `level N` for a number raidkit does not run (multipath, faulty, garbage).
    pub fn md_name(md_level: i32) -> String {
        Level::from_md(md_level)
            .map(|l| l.name().to_string())
            .unwrap_or_else(|| format!("level {md_level}"))
    }

    /// True for levels that keep a second copy or parity of every byte (1, 4, 5, 6, 10).
    pub fn has_redundancy(self) -> bool {
        !matches!(self, Level::Linear | Level::Raid0)
    }

    /// True for the levels that keep copies of the data (RAID1, RAID10): reads choose
    /// among the copies.
    pub fn mirrors(self) -> bool {
        matches!(self, Level::Raid1 | Level::Raid10)
    }

    /// Parity blocks per stripe: 1 (RAID4/5), 2 (RAID6), 0 for other levels.
    pub fn parity_blocks(self) -> usize {
        match self {
            Level::Raid4 | Level::Raid5 => 1,
            Level::Raid6 => 2,
            _ => 0,
        }
    }

    /// Fewest role slots (`raid_disks`) the kernel accepts for the level.
    pub fn min_raid_disks(self) -> usize {
        match self {
            Level::Linear | Level::Raid0 | Level::Raid1 => 1,
            Level::Raid4 | Level::Raid5 | Level::Raid10 => 2,
            Level::Raid6 => 4,
        }
    }
}

impl Geometry {
    /// Members whose chunks hold distinct data in one stripe row: every member (RAID0),
    /// the data blocks (RAID4/5/6), members / copies (RAID10 when the copies divide the
    /// members; 1 when the rows rotate), 1 (RAID1, linear).
    pub fn data_width(&self) -> usize {
        match self.level {
            Level::Raid0 => self.raid_disks,
            Level::Raid4 | Level::Raid5 | Level::Raid6 => self.data_disks(),
            Level::Raid10 => {
                let copies = self.copies();
                if copies > 0 && self.raid_disks.is_multiple_of(copies) {
                    self.raid_disks / copies
                } else {
                    1
                }
            }
            Level::Raid1 | Level::Linear => 1,
        }
    }

    /// Array sectors of one full stripe (a chunk on every data-bearing member:
    /// `chunk × data_width`) for the striped levels (0, 4, 5, 6, 10); None for RAID1 and
    /// linear, which do not stripe. A write of whole full stripes of a parity level needs
    /// no member reads.
    pub fn full_stripe_sectors(&self) -> Option<u64> {
        if !self.level.uses_chunk() || self.chunk_sectors == 0 {
            return None;
        }
        self.chunk_sectors.checked_mul(self.data_width() as u64)
    }

    /// Failed members the array survives whichever they are: none (linear, RAID0), all
    /// but one (RAID1), the parity blocks (RAID4/5/6), one less than the copies (RAID10;
    /// more survive when they hold different data, see [`Geometry::survives_without`]).
    pub fn failures_tolerated(&self) -> usize {
        match self.level {
            Level::Linear | Level::Raid0 => 0,
            Level::Raid1 => self.raid_disks.saturating_sub(1),
            Level::Raid4 | Level::Raid5 | Level::Raid6 => self.level.parity_blocks(),
            Level::Raid10 => self.copies().saturating_sub(1),
        }
    }

    /// Does every array sector still have a source with the roles `missing` gone (data
    /// or enough parity to reconstruct it)? RAID10 looks at the copies of the first chunks
    /// (at least four rotations of the layout), where every pattern of its rows occurs.
    pub fn survives_without(&self, missing: &[usize]) -> bool {
        let mut gone: Vec<usize> = missing
            .iter()
            .copied()
            .filter(|&r| r < self.raid_disks)
            .collect();
        gone.sort_unstable();
        gone.dedup();
        match self.level {
            Level::Linear | Level::Raid0 => gone.is_empty(),
            Level::Raid1 => gone.len() < self.raid_disks,
            Level::Raid4 | Level::Raid5 | Level::Raid6 => gone.len() <= self.level.parity_blocks(),
            Level::Raid10 => self.raid10_lost_copies(&gone).is_none(),
        }
    }

    /// Does `role` hold parity (P or Q) in every stripe and data in none (md's
    /// `only_parity`)? The parity member of RAID4 and of the parity-first/-last layouts,
    /// the Q member of the `*-6` layouts (a RAID5→6 conversion's new member). Losing
    /// such a member, or having it half built, never leaves data to reconstruct. False
    /// for the levels without parity and roles past the member count.
    pub fn holds_only_parity(&self, role: usize) -> bool {
        if !self.level.has_parity() || role >= self.raid_disks {
            return false;
        }
        let period = self.stripe_period().unwrap_or(0).min(self.stripes());
        period > 0 && (0..period).all(|s| self.stripe(s).is_some_and(|st| !st.data.contains(&role)))
    }

    /// RAID10: the roles of a chunk all of whose copies are among `missing`, if any (see
    /// [`Geometry::survives_without`] for which chunks are looked at). None for other
    /// levels.
    pub fn raid10_lost_copies(&self, missing: &[usize]) -> Option<Vec<usize>> {
        if self.level != Level::Raid10 {
            return None;
        }
        self.raid10_probe()
            .find_map(|copies| copies.iter().all(|r| missing.contains(r)).then_some(copies))
    }

    /// The roles that hold a copy of something `role` holds (RAID1: every other member;
    /// RAID10: the members sharing a chunk with it, in the chunks
    /// [`Geometry::survives_without`] looks at). Empty for the other levels.
    pub fn copy_partners(&self, role: usize) -> Vec<usize> {
        let mut partners: Vec<usize> = self.copy_sets(role).into_iter().flatten().collect();
        partners.retain(|&r| r != role);
        partners.sort_unstable();
        partners.dedup();
        partners
    }

    /// The distinct sets of roles (each sorted, `role` included) that hold the copies of
    /// a chunk `role` holds (RAID1: all members, once; RAID10: one set per pattern of
    /// the chunks [`Geometry::survives_without`] looks at). Empty for the other levels.
    pub fn copy_sets(&self, role: usize) -> Vec<Vec<usize>> {
        let mut sets: Vec<Vec<usize>> = match self.level {
            Level::Raid1 => vec![(0..self.raid_disks).collect()],
            Level::Raid10 => self
                .raid10_probe()
                .filter(|copies| copies.contains(&role))
                .map(|mut copies| {
                    copies.sort_unstable();
                    copies.dedup();
                    copies
                })
                .collect(),
            _ => Vec::new(),
        };
        sets.sort_unstable();
        sets.dedup();
        sets
    }

    /// RAID10: the roles holding the copies of each of the first chunks (at least four
    /// rotations of the layout, where every pattern of its rows occurs).
    fn raid10_probe(&self) -> impl Iterator<Item = Vec<usize>> + '_ {
        let chunk = self.chunk_sectors.max(1);
        let probe = (self.array_sectors() / chunk).min(self.raid_disks as u64 * 4 + 8);
        (0..probe).filter_map(move |i| {
            let p = self.locate(i * chunk)?;
            Some(p.copies.iter().map(|c| c.0).collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{names, Geometry, Level};

    fn geo(level: Level, layout: &str, n: usize, chunk: u64) -> Geometry {
        let layout = names::parse_layout(level, layout).unwrap();
        let members = if matches!(level, Level::Linear | Level::Raid0) {
            vec![chunk.max(8) * 64; n]
        } else {
            Vec::new()
        };
        Geometry::new(level, layout, chunk, n, chunk.max(8) * 64, members).unwrap()
    }

    #[test]
    fn copy_partners_of_mirrors() {
        assert_eq!(
            geo(Level::Raid1, "default", 3, 0).copy_partners(1),
            vec![0, 2]
        );
        // n2 over 4: roles 0+1 and 2+3 hold the same chunks.
        assert_eq!(geo(Level::Raid10, "n2", 4, 16).copy_partners(2), vec![3]);
        // n2 over 3: each chunk's copies rotate, so every member shares with both others.
        assert_eq!(geo(Level::Raid10, "n2", 3, 16).copy_partners(0), vec![1, 2]);
        // f2 over 4: the far copy of role 0's chunks is on role 1.
        assert_eq!(geo(Level::Raid10, "f2", 4, 16).copy_partners(0), vec![1, 3]);
        assert!(geo(Level::Raid5, "ls", 4, 16).copy_partners(0).is_empty());
    }

    #[test]
    fn copy_sets_of_mirrors() {
        assert_eq!(
            geo(Level::Raid1, "default", 3, 0).copy_sets(1),
            vec![vec![0, 1, 2]]
        );
        assert_eq!(
            geo(Level::Raid10, "n2", 4, 16).copy_sets(2),
            vec![vec![2, 3]]
        );
        // n2 over 3: chunks of role 0 are shared with role 1 or with role 2, never both.
        assert_eq!(
            geo(Level::Raid10, "n2", 3, 16).copy_sets(0),
            vec![vec![0, 1], vec![0, 2]]
        );
        assert!(geo(Level::Raid6, "ls", 4, 16).copy_sets(0).is_empty());
    }

    #[test]
    fn widths_of_every_level() {
        assert_eq!(geo(Level::Raid5, "ls", 5, 128).data_width(), 4);
        assert_eq!(
            geo(Level::Raid5, "ls", 5, 128).full_stripe_sectors(),
            Some(512)
        );
        assert_eq!(
            geo(Level::Raid6, "ls", 6, 8).full_stripe_sectors(),
            Some(32)
        );
        assert_eq!(geo(Level::Raid4, "default", 3, 16).data_width(), 2);
        assert_eq!(
            geo(Level::Raid0, "original", 3, 16).full_stripe_sectors(),
            Some(48)
        );
        assert_eq!(geo(Level::Raid10, "n2", 4, 16).data_width(), 2);
        assert_eq!(geo(Level::Raid10, "n2", 3, 16).data_width(), 1);
        assert_eq!(
            geo(Level::Raid10, "f3", 6, 16).full_stripe_sectors(),
            Some(32)
        );
        assert_eq!(
            geo(Level::Raid1, "default", 3, 0).full_stripe_sectors(),
            None
        );
        assert_eq!(geo(Level::Raid1, "default", 3, 0).data_width(), 1);
        assert_eq!(
            geo(Level::Linear, "default", 2, 0).full_stripe_sectors(),
            None
        );
    }

    #[test]
    fn failures_tolerated_and_survival() {
        let r6 = geo(Level::Raid6, "ls", 5, 8);
        assert_eq!(r6.failures_tolerated(), 2);
        assert!(r6.survives_without(&[0, 4]));
        assert!(!r6.survives_without(&[0, 1, 2]));
        let r1 = geo(Level::Raid1, "default", 3, 0);
        assert_eq!(r1.failures_tolerated(), 2);
        assert!(r1.survives_without(&[0, 2, 2]));
        assert!(!r1.survives_without(&[0, 1, 2]));
        let r0 = geo(Level::Raid0, "original", 2, 8);
        assert_eq!(r0.failures_tolerated(), 0);
        assert!(!r0.survives_without(&[1]));
        assert!(r0.survives_without(&[]));
        let r10 = geo(Level::Raid10, "n2", 4, 8);
        assert_eq!(r10.failures_tolerated(), 1);
        assert!(r10.survives_without(&[0, 2]));
        assert!(!r10.survives_without(&[0, 1]));
        assert_eq!(r10.raid10_lost_copies(&[2, 3]), Some(vec![2, 3]));
        // Every set of `failures_tolerated` members is survivable, at every level.
        for g in [
            geo(Level::Raid10, "f2", 4, 8),
            geo(Level::Raid10, "o3", 5, 8),
            geo(Level::Raid10, "n3", 4, 8),
            geo(Level::Raid5, "la", 4, 8),
            geo(Level::Raid6, "ddf-N-restart", 6, 8),
        ] {
            let t = g.failures_tolerated();
            let n = g.raid_disks;
            for mask in 0u32..(1 << n) {
                let gone: Vec<usize> = (0..n).filter(|&r| mask & (1 << r) != 0).collect();
                if gone.len() <= t {
                    assert!(g.survives_without(&gone), "{g:?} without {gone:?}");
                }
            }
        }
    }

    #[test]
    fn parity_only_roles() {
        let only = |g: &Geometry| -> Vec<usize> {
            (0..g.raid_disks + 1)
                .filter(|&r| g.holds_only_parity(r))
                .collect()
        };
        assert_eq!(only(&geo(Level::Raid5, "ls", 4, 8)), Vec::<usize>::new());
        assert_eq!(only(&geo(Level::Raid5, "parity-last", 4, 8)), vec![3]);
        assert_eq!(only(&geo(Level::Raid5, "parity-first", 4, 8)), vec![0]);
        assert_eq!(only(&geo(Level::Raid4, "default", 3, 8)), vec![2]);
        assert_eq!(only(&geo(Level::Raid6, "ls", 5, 8)), Vec::<usize>::new());
        assert_eq!(only(&geo(Level::Raid6, "left-symmetric-6", 5, 8)), vec![4]);
        assert_eq!(only(&geo(Level::Raid6, "parity-last", 5, 8)), vec![3, 4]);
        assert_eq!(only(&geo(Level::Raid6, "parity-first-6", 5, 8)), vec![0, 4]);
        assert_eq!(only(&geo(Level::Raid10, "n2", 4, 8)), Vec::<usize>::new());
        assert_eq!(
            only(&geo(Level::Raid1, "default", 2, 0)),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn names() {
        assert_eq!(Level::Raid10.name(), "raid10");
        assert_eq!(Level::md_name(-1), "linear");
        assert_eq!(Level::md_name(-4), "level -4");
        assert_eq!(Level::Raid6.min_raid_disks(), 4);
        assert!(!Level::Raid0.has_redundancy() && Level::Raid1.has_redundancy());
        assert!(Level::Raid10.mirrors() && !Level::Raid5.mirrors());
    }
}
