//! Exhaustive checks over small geometries: forward/inverse round trip, exact occupancy of
//! every member sector, copy placement, Q slot permutations, `run` continuity.

use raidkit_layout::{Geometry, Level};

/// Owner of a member sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    Free,
    Data(u64),
    Parity,
}

/// Tiny deterministic generator (tests only).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

/// Whether the copies of one sector must be on distinct members.
fn distinct_members_expected(g: &Geometry) -> bool {
    match g.level {
        Level::Raid10 => {
            let nc = (g.layout & 0xff) as usize;
            let fc = ((g.layout >> 8) & 0xff) as usize;
            let n = g.raid_disks;
            match g.layout >> 17 {
                0 | 2 => true,
                // The kernel's buggy far-set form: sets of N/fc members.
                _ => n / fc >= nc * fc,
            }
        }
        _ => true,
    }
}

/// Check everything about one geometry; returns the number of array sectors checked.
fn check(g: &Geometry) -> u64 {
    let n = g.raid_disks;
    let size = g.array_sectors();
    assert!(size > 0, "{g:?}");
    let used: Vec<u64> = (0..n).map(|r| g.used_dev_sectors(r)).collect();
    let mut occ: Vec<Vec<Use>> = used.iter().map(|&u| vec![Use::Free; u as usize]).collect();
    let copies = match g.level {
        Level::Raid1 => n,
        Level::Raid10 => g.copies(),
        _ => 1,
    };
    assert_eq!(g.copies(), copies);

    // Forward map of every sector, run by run.
    let mut s = 0u64;
    while s < size {
        let p = g.locate(s).unwrap_or_else(|| panic!("{g:?} locate({s})"));
        assert!(p.run >= 1 && p.run <= size - s, "{g:?} s={s} run={}", p.run);
        assert_eq!(p.copies.len(), copies, "{g:?} s={s}");
        if distinct_members_expected(g) {
            let mut m: Vec<usize> = p.copies.iter().map(|c| c.0).collect();
            m.sort_unstable();
            m.dedup();
            assert_eq!(m.len(), copies, "{g:?} s={s} copies {:?}", p.copies);
        }
        for i in 0..p.run {
            let q = g.locate(s + i).unwrap();
            let want: Vec<_> = p.copies.iter().map(|&(r, x)| (r, x + i)).collect();
            assert_eq!(q.copies, want, "{g:?} run from {s} broken at +{i}");
            assert_eq!(q.run, p.run - i, "{g:?} s={s} i={i}");
            for &(r, x) in &q.copies {
                assert!(
                    x < used[r],
                    "{g:?} s={} on ({r},{x}) beyond used {}",
                    s + i,
                    used[r]
                );
                let cell = &mut occ[r][x as usize];
                assert_eq!(*cell, Use::Free, "{g:?} ({r},{x}) used twice (s={})", s + i);
                *cell = Use::Data(s + i);
            }
        }
        s += p.run;
    }
    assert_eq!(g.locate(size), None);
    assert_eq!(g.locate(u64::MAX), None);

    // Parity blocks and Q slots.
    if g.level.has_parity() {
        let c = g.chunk_sectors;
        let k = g.data_disks();
        assert_eq!(g.stripes() * c, used[0]);
        for st in 0..g.stripes() {
            let sl = g.stripe(st).unwrap();
            assert_eq!(sl.data.len(), k);
            assert_eq!(sl.slot.len(), k);
            let mut members = sl.data.clone();
            members.push(sl.p);
            members.extend(sl.q);
            members.sort_unstable();
            assert_eq!(members, (0..n).collect::<Vec<_>>(), "{g:?} stripe {st}");
            for (i, &d) in sl.data.iter().enumerate() {
                let s0 = (st * k as u64 + i as u64) * c;
                assert_eq!(g.locate(s0).unwrap().copies, vec![(d, st * c)]);
            }
            let mut slots = sl.slot.clone();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), k);
            let ddf = g.level == Level::Raid6 && matches!(g.layout, 8..=10);
            if ddf {
                assert_eq!(sl.syndrome_width, n);
                assert_eq!(sl.slot, sl.data, "{g:?} DDF slot = member index");
            } else {
                assert_eq!(sl.syndrome_width, k);
                assert_eq!(slots, (0..k).collect::<Vec<_>>(), "{g:?} stripe {st}");
            }
            if g.level == Level::Raid6 {
                // Independent statement of the md walk: start after Q, skip P and Q.
                if !ddf {
                    let q = sl.q.unwrap();
                    let mut j = 0;
                    for step in 1..=n {
                        let m = (q + step) % n;
                        if m == sl.p || m == q {
                            continue;
                        }
                        let i = sl.data.iter().position(|&d| d == m).unwrap();
                        assert_eq!(sl.slot[i], j, "{g:?} stripe {st} member {m}");
                        j += 1;
                    }
                }
            } else {
                assert_eq!(sl.q, None);
                assert_eq!(sl.slot, (0..k).collect::<Vec<_>>());
            }
            for parity in std::iter::once(sl.p).chain(sl.q) {
                for x in st * c..(st + 1) * c {
                    let cell = &mut occ[parity][x as usize];
                    assert_eq!(*cell, Use::Free, "{g:?} parity ({parity},{x}) overlaps");
                    *cell = Use::Parity;
                }
            }
        }
        assert_eq!(g.stripe(g.stripes()), None);
    } else {
        assert_eq!(g.stripe(0), None);
    }

    // Inverse map of every member sector; exact cover except RAID10 leftovers.
    let mut free = 0u64;
    for (r, col) in occ.iter().enumerate() {
        for (x, cell) in col.iter().enumerate() {
            let want = match *cell {
                Use::Data(s) => Some(s),
                Use::Free => {
                    free += 1;
                    None
                }
                Use::Parity => None,
            };
            assert_eq!(g.reverse(r, x as u64), want, "{g:?} reverse({r},{x})");
        }
        assert_eq!(g.reverse(r, used[r]), None);
        assert_eq!(g.reverse(r, u64::MAX), None);
    }
    assert_eq!(g.reverse(n, 0), None);
    if g.level == Level::Raid10 {
        let total: u64 = used.iter().sum();
        assert_eq!(total - free, size * copies as u64, "{g:?}");
        // Unused space is less than one row of chunks per far region.
        assert!(
            free < (g.chunk_sectors * n as u64) * g.copies() as u64,
            "{g:?} free={free}"
        );
    } else {
        assert_eq!(free, 0, "{g:?} has unused member sectors");
    }
    size
}

#[test]
fn linear_and_raid0_unequal_members() {
    let mut rng = Lcg(7);
    let mut sectors = 0;
    for n in 1..=8usize {
        for chunk in [1u64, 3, 8, 16, 64] {
            for _ in 0..4 {
                let sizes: Vec<u64> = (0..n).map(|_| chunk + rng.next(chunk * 5 + 7)).collect();
                for layout in [0u32, 1, 2] {
                    match Geometry::new(Level::Raid0, layout, chunk, n, 0, sizes.clone()) {
                        Ok(g) => sectors += check(&g),
                        Err(e) => {
                            assert_eq!(layout, 0);
                            assert!(raidkit_layout::raid0_layout_matters(chunk, &sizes), "{e}");
                        }
                    }
                }
                for rounding in [0u64, chunk] {
                    let g = Geometry::new(Level::Linear, 0, rounding, n, 0, sizes.clone()).unwrap();
                    sectors += check(&g);
                }
            }
        }
    }
    // Linear members of zero length are skipped.
    let g = Geometry::new(Level::Linear, 0, 0, 3, 0, vec![5, 0, 7]).unwrap();
    sectors += check(&g);
    assert!(sectors > 0);
}

#[test]
fn raid0_layouts_differ_only_beyond_zone_0() {
    let sizes = vec![16, 40, 40, 56];
    let o = Geometry::new(Level::Raid0, 1, 8, 4, 0, sizes.clone()).unwrap();
    let a = Geometry::new(Level::Raid0, 2, 8, 4, 0, sizes).unwrap();
    let z = o.zones();
    for s in 0..o.array_sectors() {
        let same = o.locate(s) == a.locate(s);
        if s < z[0].zone_end {
            assert!(same);
        }
    }
    assert!((z[0].zone_end..z[1].zone_end).any(|s| o.locate(s) != a.locate(s)));
}

#[test]
fn raid1_small() {
    for n in 1..=8usize {
        for dev in [1u64, 37, 128] {
            check(&Geometry::new(Level::Raid1, 0, 0, n, dev, vec![]).unwrap());
        }
    }
}

#[test]
fn parity_levels_all_layouts() {
    let cases: [(Level, &[u32], usize); 3] = [
        (Level::Raid4, &[0, 5, 9], 2),
        (Level::Raid5, &[0, 1, 2, 3, 4, 5], 2),
        (
            Level::Raid6,
            &[0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20],
            4,
        ),
    ];
    let mut count = 0;
    for (level, layouts, min) in cases {
        for &layout in layouts {
            for n in min..=8 {
                for chunk in [8u64, 16, 64] {
                    // One stripe, a few full rotations (and a remainder), odd leftovers.
                    for stripes in [1u64, 2 * n as u64 + 3] {
                        for extra in [0u64, 5] {
                            let dev = stripes * chunk + extra;
                            let g = Geometry::new(level, layout, chunk, n, dev, vec![]).unwrap();
                            assert_eq!(g.stripes(), stripes);
                            assert_eq!(g.used_dev_sectors(0), stripes * chunk);
                            check(&g);
                            count += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(count, (3 * 7 + 6 * 7 + 14 * 5) * 3 * 4);
}

/// Every stripe of every parity layout has the layout of stripe `s % stripe_period()`.
#[test]
fn stripe_layouts_repeat_with_the_stripe_period() {
    let cases: [(Level, &[u32], usize); 3] = [
        (Level::Raid4, &[0, 5, 9], 2),
        (Level::Raid5, &[0, 1, 2, 3, 4, 5], 2),
        (
            Level::Raid6,
            &[0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20],
            4,
        ),
    ];
    for (level, layouts, min) in cases {
        for &layout in layouts {
            for n in min..=10 {
                let g = Geometry::new(level, layout, 8, n, 8 * 200, vec![]).unwrap();
                let period = g.stripe_period().unwrap();
                assert!(period >= 1 && period <= n as u64, "{g:?}");
                for s in 0..200 {
                    assert_eq!(g.stripe(s), g.stripe(s % period), "{g:?} stripe {s}");
                }
            }
        }
    }
    let g = Geometry::new(Level::Raid1, 0, 0, 2, 100, vec![]).unwrap();
    assert_eq!(g.stripe_period(), None);
}

#[test]
fn raid6_star6_is_raid5_plus_q() {
    // Layouts 16..=20 are RAID5 layouts 0..=4 on members 0..N-2 plus Q on the last member.
    for n in 4..=8usize {
        for (l6, l5) in [(16u32, 0u32), (17, 1), (18, 2), (19, 3), (20, 4)] {
            let g6 = Geometry::new(Level::Raid6, l6, 8, n, 8 * 20, vec![]).unwrap();
            let g5 = Geometry::new(Level::Raid5, l5, 8, n - 1, 8 * 20, vec![]).unwrap();
            for s in 0..g5.array_sectors() {
                assert_eq!(g6.locate(s), g5.locate(s));
            }
            for st in 0..20 {
                let (a, b) = (g6.stripe(st).unwrap(), g5.stripe(st).unwrap());
                assert_eq!((a.p, a.q, &a.data), (b.p, Some(n - 1), &b.data));
            }
        }
    }
}

#[test]
fn raid10_all_layout_encodings() {
    let mut accepted = 0;
    for n in 2..=8usize {
        for nc in 1..=4u32 {
            for fc in 1..=4u32 {
                if nc * fc < 2 || (nc * fc) as usize > n {
                    continue;
                }
                for offset in [0u32, 1 << 16] {
                    for mode in 0..=2u32 {
                        let layout = nc | (fc << 8) | offset | (mode << 17);
                        for chunk in [8u64, 16] {
                            for rows in [1u64, 5, 13] {
                                let dev = rows * chunk + 3;
                                let r = Geometry::new(Level::Raid10, layout, chunk, n, dev, vec![]);
                                // Everything mdadm and LVM create must be accepted.
                                let common = nc == 1 || (fc == 1 && mode == 0 && offset == 0);
                                let g = match r {
                                    Ok(g) => g,
                                    Err(e) => {
                                        let empty = e.to_string().contains("would be empty");
                                        assert!(!common || empty, "{layout:#x} on {n}: {e}");
                                        continue;
                                    }
                                };
                                if g.array_sectors() == 0 {
                                    continue;
                                }
                                check(&g);
                                accepted += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(accepted > 1000, "{accepted}");
}

#[test]
fn raid10_rejects_colliding_kernel_layouts() {
    // Near+offset with wrapping near copies (the kernel would overwrite chunks).
    assert!(Geometry::new(Level::Raid10, 0x10202, 8, 5, 800, vec![]).is_err());
    // Far sets mode 2 whose far step leaves its set.
    assert!(Geometry::new(Level::Raid10, 0x40202, 8, 9, 800, vec![]).is_err());
    // Sound variants of the same.
    check(&Geometry::new(Level::Raid10, 0x10202, 8, 4, 800, vec![]).unwrap());
    check(&Geometry::new(Level::Raid10, 0x40202, 8, 8, 800, vec![]).unwrap());
}

#[test]
fn raid10_used_dev_sectors_is_stable() {
    // Re-creating the geometry from the kernel's written-back size changes nothing.
    for n in 2..=8usize {
        for layout in [
            0x102u32, 0x103, 0x201, 0x301, 0x10201, 0x10301, 0x40201, 0x20201,
        ] {
            let copies = ((layout & 0xff) * ((layout >> 8) & 0xff)) as usize;
            if copies > n {
                continue;
            }
            for dev in [64u64, 200, 14336] {
                let g = Geometry::new(Level::Raid10, layout, 8, n, dev, vec![]).unwrap();
                let u = g.used_dev_sectors(0);
                assert!(u <= dev);
                let g2 = Geometry::new(Level::Raid10, layout, 8, n, u, vec![]).unwrap();
                assert_eq!(g2.array_sectors(), g.array_sectors());
                assert_eq!(g2.used_dev_sectors(0), u);
            }
        }
    }
}
