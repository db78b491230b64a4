//! Hostile geometry values (from disk) must never panic, neither in `Geometry::new` nor in
//! the mapping methods of a hand-built (unvalidated) geometry.

use proptest::prelude::*;
use raidkit_layout::{Geometry, Level};

const LEVELS: [Level; 7] = [
    Level::Linear,
    Level::Raid0,
    Level::Raid1,
    Level::Raid4,
    Level::Raid5,
    Level::Raid6,
    Level::Raid10,
];

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..64,
        Just(u64::MAX),
        Just(u64::MAX / 2 + 1),
        (0u32..64).prop_map(|b| 1u64 << b),
        (0u32..64).prop_map(|b| (1u64 << b).wrapping_sub(1)),
    ]
}

fn interesting_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        0u32..32,
        Just(u32::MAX),
        (1u32..=255, 1u32..=255, 0u32..16).prop_map(|(n, f, hi)| n | (f << 8) | (hi << 16)),
    ]
}

fn interesting_usize() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..12,
        any::<usize>(),
        Just(usize::MAX),
        1900usize..2000
    ]
}

/// Exercise every method; nothing may panic.
fn poke(g: &Geometry) {
    let size = g.array_sectors();
    let _ = g.data_disks();
    let _ = g.stripes();
    let _ = g.copies();
    let _ = g.zones();
    for role in [
        0,
        1,
        2,
        g.raid_disks.wrapping_sub(1),
        g.raid_disks,
        usize::MAX,
    ] {
        let u = g.used_dev_sectors(role);
        for x in [0, 1, u.wrapping_sub(1), u, u64::MAX] {
            let _ = g.reverse(role, x);
        }
    }
    for s in [0, 1, size / 2, size.wrapping_sub(1), size, u64::MAX] {
        if let Some(p) = g.locate(s) {
            assert!(p.run >= 1);
            assert!(!p.copies.is_empty());
        }
    }
    for st in [0, 1, g.stripes().wrapping_sub(1), g.stripes(), u64::MAX] {
        let _ = g.stripe(st);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn new_never_panics(
        level in 0usize..7,
        layout in interesting_u32(),
        chunk in interesting_u64(),
        raid_disks in interesting_usize(),
        dev in interesting_u64(),
        members in proptest::collection::vec(interesting_u64(), 0..10),
        match_len in any::<bool>(),
    ) {
        let level = LEVELS[level];
        // Often give linear/RAID0 the right number of members.
        let n = if match_len { members.len() } else { raid_disks };
        if let Ok(g) = Geometry::new(level, layout, chunk, n, dev, members) {
            prop_assert!(g.array_sectors() > 0);
            poke(&g);
            // A validated geometry maps its first and last sector and inverts them.
            let size = g.array_sectors();
            for s in [0, size - 1] {
                let p = g.locate(s).unwrap();
                for &(r, x) in &p.copies {
                    prop_assert_eq!(g.reverse(r, x), Some(s));
                }
            }
        }
    }

    #[test]
    fn unvalidated_geometry_never_panics(
        level in 0usize..7,
        layout in interesting_u32(),
        chunk in interesting_u64(),
        raid_disks in interesting_usize(),
        dev in interesting_u64(),
        members in proptest::collection::vec(interesting_u64(), 0..10),
    ) {
        let g = Geometry {
            level: LEVELS[level],
            layout,
            chunk_sectors: chunk,
            raid_disks,
            dev_sectors: dev,
            member_sectors: members,
        };
        poke(&g);
    }
}

#[test]
fn specific_rejections() {
    use raidkit_layout::LayoutError::*;
    let e = |l, lay, c, n, d, m: Vec<u64>| Geometry::new(l, lay, c, n, d, m).unwrap_err();
    assert!(matches!(
        e(Level::Raid5, 2, 12, 4, 1000, vec![]),
        BadChunk { .. }
    ));
    assert!(matches!(
        e(Level::Raid5, 2, 4, 4, 1000, vec![]),
        BadChunk { .. }
    ));
    assert!(matches!(
        e(Level::Raid10, 0x102, 0, 4, 1000, vec![]),
        BadChunk { .. }
    ));
    assert!(matches!(
        e(Level::Raid0, 1, 0, 2, 0, vec![8, 8]),
        BadChunk { .. }
    ));
    assert!(matches!(
        e(Level::Raid5, 6, 8, 4, 1000, vec![]),
        BadLayout { .. }
    ));
    assert!(matches!(
        e(Level::Raid6, 11, 8, 4, 1000, vec![]),
        BadLayout { .. }
    ));
    assert!(matches!(
        e(Level::Raid0, 3, 8, 2, 0, vec![8, 8]),
        BadLayout { .. }
    ));
    assert!(matches!(
        e(Level::Raid10, 0x101, 8, 4, 1000, vec![]),
        BadLayout { .. }
    ));
    assert!(matches!(
        e(Level::Raid10, 0x60201, 8, 4, 1000, vec![]),
        BadLayout { .. }
    ));
    assert!(matches!(
        e(Level::Raid10, 0x80201, 8, 4, 1000, vec![]),
        BadLayout { .. }
    ));
    assert!(matches!(
        e(Level::Raid10, 0x103, 8, 2, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Raid6, 2, 8, 3, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Raid6, 2, 8, 257, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Raid5, 2, 8, 1, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Raid4, 0, 8, 1, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Raid1, 0, 0, 0, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Raid1, 0, 0, 1921, 1000, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(
        e(Level::Linear, 0, 0, 0, 0, vec![]),
        BadDiskCount { .. }
    ));
    assert!(matches!(e(Level::Linear, 0, 0, 2, 0, vec![8]), Invalid(_)));
    assert!(matches!(
        e(Level::Linear, 0, 0, 2, 0, vec![u64::MAX, 1]),
        Invalid(_)
    ));
    assert!(matches!(e(Level::Linear, 0, 0, 1, 0, vec![0]), Invalid(_)));
    assert!(matches!(
        e(Level::Raid0, 1, 8, 2, 0, vec![8, 7]),
        Invalid(_)
    ));
    assert!(matches!(
        e(Level::Raid0, 1, 1, 2, 0, vec![u64::MAX, u64::MAX]),
        Invalid(_)
    ));
    assert!(matches!(e(Level::Raid1, 0, 0, 2, 0, vec![]), Invalid(_)));
    assert!(matches!(e(Level::Raid5, 2, 8, 4, 7, vec![]), Invalid(_)));
    assert!(matches!(
        e(Level::Raid5, 2, 8, 1920, u64::MAX, vec![]),
        Invalid(_)
    ));
    assert!(matches!(
        e(Level::Raid10, 0x201, 8, 4, 8, vec![]),
        Invalid(_)
    ));
    assert!(matches!(
        e(Level::Raid10, 0x102, 8, 1920, u64::MAX, vec![]),
        Invalid(_)
    ));
    // Largest accepted values still map.
    assert!(matches!(
        e(Level::Raid6, 2, 1 << 62, 4, u64::MAX, vec![]),
        Invalid(_)
    ));
    let g = Geometry::new(Level::Raid6, 2, 1 << 62, 4, (1 << 62) + 5, vec![]).unwrap();
    assert_eq!(g.array_sectors(), 1 << 63);
    assert_eq!(
        g.locate((1 << 63) - 1).unwrap().copies,
        vec![(2, (1 << 62) - 1)]
    );
    assert_eq!(g.reverse(2, (1 << 62) - 1), Some((1 << 63) - 1));
    let g = Geometry::new(Level::Raid1, 0, 7, 1920, u64::MAX, vec![]).unwrap();
    assert_eq!(g.locate(u64::MAX - 1).unwrap().copies.len(), 1920);
}

fn valid_layout(level: Level) -> BoxedStrategy<u32> {
    match level {
        Level::Raid0 => prop_oneof![Just(1u32), Just(2u32)].boxed(),
        Level::Raid5 => (0u32..=5).boxed(),
        Level::Raid6 => {
            proptest::sample::select(vec![0u32, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20])
                .boxed()
        }
        Level::Raid10 => proptest::sample::select(vec![
            0x102u32, 0x103, 0x201, 0x301, 0x10201, 0x10301, 0x20201, 0x40201, 0x40301, 0x202,
        ])
        .boxed(),
        _ => Just(0u32).boxed(),
    }
}

fn large_geometry() -> impl Strategy<Value = Geometry> {
    (0usize..7, 3u32..31, 1usize..=12, 1u64..(1 << 50))
        .prop_flat_map(|(li, cbits, n, dev)| {
            let level = LEVELS[li];
            (
                Just(level),
                valid_layout(level),
                Just(cbits),
                Just(n),
                Just(dev),
                proptest::collection::vec(1u64 << 31..(1 << 45), n),
            )
        })
        .prop_filter_map("invalid", |(level, layout, cbits, n, dev, members)| {
            let chunk = match level {
                Level::Linear | Level::Raid1 => 0,
                _ => 1u64 << cbits,
            };
            let n = match level {
                Level::Raid6 => n.max(4),
                Level::Raid4 | Level::Raid5 => n.max(2),
                Level::Raid10 => n.max(3),
                _ => n,
            };
            let members = members
                .into_iter()
                .chain(std::iter::repeat(1 << 40))
                .take(n)
                .collect();
            Geometry::new(level, layout, chunk, n, dev.max(chunk), members).ok()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Large (TiB-scale) valid geometries: random sectors map and invert exactly.
    #[test]
    fn large_geometries_round_trip(g in large_geometry(), picks in proptest::collection::vec(any::<u64>(), 8)) {
        let size = g.array_sectors();
        prop_assert!(size > 0);
        for pick in picks.into_iter().chain([0, size - 1]) {
            let s = pick % size;
            let p = g.locate(s).unwrap();
            prop_assert!(p.run >= 1 && p.run <= size - s);
            for &(r, x) in &p.copies {
                prop_assert!(x < g.used_dev_sectors(r));
                prop_assert_eq!(g.reverse(r, x), Some(s));
            }
            let last = g.locate(s + p.run - 1).unwrap();
            let want: Vec<_> = p.copies.iter().map(|&(r, x)| (r, x + p.run - 1)).collect();
            prop_assert_eq!(last.copies, want);
        }
    }
}
