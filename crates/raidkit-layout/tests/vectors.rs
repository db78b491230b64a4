//! The tables and worked examples of md-format.md §4 (verified against the real kernel),
//! as exact assertions.

use raidkit_layout::{Geometry, Level, Placement, StripeLayout};

fn geo(level: Level, layout: u32, chunk: u64, n: usize, dev: u64) -> Geometry {
    Geometry::new(level, layout, chunk, n, dev, Vec::new()).unwrap()
}

/// Render stripes of a parity array: `P`, `Q`, `Dn` (array chunk n), or `Dn^j` (with the
/// Q slot `j`) when `slots` is set. Built from `reverse` and checked against `stripe` and
/// `locate`.
fn parity_grid(g: &Geometry, stripes: u64, slots: bool) -> Vec<String> {
    let c = g.chunk_sectors;
    let mut out = Vec::new();
    for st in 0..stripes {
        let sl: StripeLayout = g.stripe(st).unwrap();
        let mut row = Vec::new();
        for m in 0..g.raid_disks {
            let cell = if m == sl.p {
                assert_eq!(g.reverse(m, st * c), None);
                "P".to_string()
            } else if Some(m) == sl.q {
                assert_eq!(g.reverse(m, st * c), None);
                "Q".to_string()
            } else {
                let s = g.reverse(m, st * c).unwrap();
                assert_eq!(s % c, 0);
                let chunk = s / c;
                let k = sl.data.iter().position(|&d| d == m).unwrap();
                assert_eq!(chunk, st * g.data_disks() as u64 + k as u64);
                assert_eq!(
                    g.locate(s).unwrap(),
                    Placement {
                        copies: vec![(m, st * c)],
                        run: c
                    }
                );
                if slots {
                    format!("D{chunk}^{}", sl.slot[k])
                } else {
                    format!("D{chunk}")
                }
            };
            row.push(cell);
        }
        out.push(row.join(" "));
    }
    out
}

fn rows(t: &str) -> Vec<String> {
    t.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

// ---------------------------------------------------------------- §4.4 RAID4/5

#[test]
fn raid5_left_symmetric_table() {
    let g = geo(Level::Raid5, 2, 8, 4, 8 * 8);
    let want = rows(
        "D0 D1 D2 P
         D4 D5 P D3
         D8 P D6 D7
         P D9 D10 D11
         D12 D13 D14 P
         D16 D17 P D15
         D20 P D18 D19
         P D21 D22 D23",
    );
    assert_eq!(parity_grid(&g, 8, false), want);
}

#[test]
fn raid5_left_asymmetric_table() {
    let g = geo(Level::Raid5, 0, 8, 4, 8 * 8);
    let want = rows(
        "D0 D1 D2 P
         D3 D4 P D5
         D6 P D7 D8
         P D9 D10 D11
         D12 D13 D14 P
         D15 D16 P D17
         D18 P D19 D20
         P D21 D22 D23",
    );
    assert_eq!(parity_grid(&g, 8, false), want);
}

#[test]
fn raid5_right_asymmetric_table() {
    let g = geo(Level::Raid5, 1, 8, 4, 8 * 8);
    let want = rows(
        "P D0 D1 D2
         D3 P D4 D5
         D6 D7 P D8
         D9 D10 D11 P
         P D12 D13 D14
         D15 P D16 D17
         D18 D19 P D20
         D21 D22 D23 P",
    );
    assert_eq!(parity_grid(&g, 8, false), want);
}

#[test]
fn raid5_right_symmetric_table() {
    let g = geo(Level::Raid5, 3, 8, 4, 8 * 8);
    let want = rows(
        "P D0 D1 D2
         D5 P D3 D4
         D7 D8 P D6
         D9 D10 D11 P
         P D12 D13 D14
         D17 P D15 D16
         D19 D20 P D18
         D21 D22 D23 P",
    );
    assert_eq!(parity_grid(&g, 8, false), want);
}

#[test]
fn raid5_parity_first_last_and_raid4() {
    let pf = geo(Level::Raid5, 4, 8, 4, 8 * 3);
    assert_eq!(
        parity_grid(&pf, 3, false),
        rows("P D0 D1 D2\nP D3 D4 D5\nP D6 D7 D8")
    );
    let pl = geo(Level::Raid5, 5, 8, 4, 8 * 3);
    let want = rows("D0 D1 D2 P\nD3 D4 D5 P\nD6 D7 D8 P");
    assert_eq!(parity_grid(&pl, 3, false), want);
    for layout in [0, 5, 2, 0xdead] {
        let r4 = geo(Level::Raid4, layout, 8, 4, 8 * 3);
        assert_eq!(parity_grid(&r4, 3, false), want);
    }
}

#[test]
fn raid5_worked_example() {
    // left-symmetric, N=4, C=128, S=1000 → member 3, data sector 360.
    let g = geo(Level::Raid5, 2, 128, 4, 14336);
    let p = g.locate(1000).unwrap();
    assert_eq!(p.copies, vec![(3, 360)]);
    assert_eq!(p.run, 128 - 104);
    let st = g.stripe(2).unwrap();
    assert_eq!(st.p, 1);
    assert_eq!(st.q, None);
    assert_eq!(st.data, vec![2, 3, 0]);
    assert_eq!(st.slot, vec![0, 1, 2]);
    assert_eq!(st.syndrome_width, 3);
    assert_eq!(g.reverse(3, 360), Some(1000));
    assert_eq!(g.reverse(1, 360), None);
    assert_eq!(g.array_sectors(), 14336 * 3);
    assert_eq!(g.stripes(), 112);
    assert_eq!(g.data_disks(), 3);
}

#[test]
fn raid5_two_members_parity_is_a_copy() {
    let g = geo(Level::Raid5, 2, 8, 2, 80);
    assert_eq!(g.array_sectors(), 80);
    assert_eq!(g.stripe(0).unwrap().p, 1);
    assert_eq!(g.stripe(0).unwrap().data, vec![0]);
    assert_eq!(g.stripe(1).unwrap().p, 0);
    assert_eq!(g.stripe(1).unwrap().data, vec![1]);
}

// ---------------------------------------------------------------- §4.5 RAID6

fn r6(layout: u32) -> Geometry {
    geo(Level::Raid6, layout, 8, 5, 8 * 5)
}

#[test]
fn raid6_left_symmetric_table() {
    let want = rows(
        "Q D0^0 D1^1 D2^2 P
         D3^0 D4^1 D5^2 P Q
         D7^1 D8^2 P Q D6^0
         D11^2 P Q D9^0 D10^1
         P Q D12^0 D13^1 D14^2",
    );
    assert_eq!(parity_grid(&r6(2), 5, true), want);
}

#[test]
fn raid6_left_asymmetric_table() {
    let want = rows(
        "Q D0^0 D1^1 D2^2 P
         D3^0 D4^1 D5^2 P Q
         D6^1 D7^2 P Q D8^0
         D9^2 P Q D10^0 D11^1
         P Q D12^0 D13^1 D14^2",
    );
    assert_eq!(parity_grid(&r6(0), 5, true), want);
}

#[test]
fn raid6_right_asymmetric_table() {
    let want = rows(
        "P Q D0^0 D1^1 D2^2
         D3^2 P Q D4^0 D5^1
         D6^1 D7^2 P Q D8^0
         D9^0 D10^1 D11^2 P Q
         Q D12^0 D13^1 D14^2 P",
    );
    assert_eq!(parity_grid(&r6(1), 5, true), want);
}

#[test]
fn raid6_right_symmetric_table() {
    let want = rows(
        "P Q D0^0 D1^1 D2^2
         D5^2 P Q D3^0 D4^1
         D7^1 D8^2 P Q D6^0
         D9^0 D10^1 D11^2 P Q
         Q D12^0 D13^1 D14^2 P",
    );
    assert_eq!(parity_grid(&r6(3), 5, true), want);
}

#[test]
fn raid6_parity_first_and_last() {
    assert_eq!(
        parity_grid(&r6(4), 2, true),
        rows("P Q D0^0 D1^1 D2^2\nP Q D3^0 D4^1 D5^2")
    );
    assert_eq!(
        parity_grid(&r6(5), 2, true),
        rows("D0^0 D1^1 D2^2 P Q\nD3^0 D4^1 D5^2 P Q")
    );
    assert_eq!(
        parity_grid(&r6(20), 2, true),
        rows("P D0^0 D1^1 D2^2 Q\nP D3^0 D4^1 D5^2 Q")
    );
}

#[test]
fn raid6_ddf_zero_restart_table() {
    let want = rows(
        "P Q D0^2 D1^3 D2^4
         D3^0 P Q D4^3 D5^4
         D6^0 D7^1 P Q D8^4
         D9^0 D10^1 D11^2 P Q
         Q D12^1 D13^2 D14^3 P",
    );
    assert_eq!(parity_grid(&r6(8), 5, true), want);
    assert_eq!(r6(8).stripe(0).unwrap().syndrome_width, 5);
}

#[test]
fn raid6_ddf_n_restart_table() {
    let want = rows(
        "D0^0 D1^1 D2^2 P Q
         D3^0 D4^1 P Q D5^4
         D6^0 P Q D7^3 D8^4
         P Q D9^2 D10^3 D11^4
         Q D12^1 D13^2 D14^3 P",
    );
    assert_eq!(parity_grid(&r6(9), 5, true), want);
    assert_eq!(r6(9).stripe(3).unwrap().syndrome_width, 5);
}

#[test]
fn raid6_ddf_n_continue_table() {
    let want = rows(
        "D0^0 D1^1 D2^2 Q P
         D4^0 D5^1 Q P D3^4
         D8^0 Q P D6^3 D7^4
         Q P D9^2 D10^3 D11^4
         P D12^1 D13^2 D14^3 Q",
    );
    assert_eq!(parity_grid(&r6(10), 5, true), want);
    assert_eq!(r6(10).stripe(1).unwrap().syndrome_width, 5);
}

#[test]
fn raid6_left_asymmetric_6_table() {
    let want = rows(
        "D0^0 D1^1 D2^2 P Q
         D3^0 D4^1 P D5^2 Q
         D6^0 P D7^1 D8^2 Q
         P D9^0 D10^1 D11^2 Q",
    );
    assert_eq!(parity_grid(&r6(16), 4, true), want);
}

#[test]
fn raid6_right_asymmetric_6_table() {
    let want = rows(
        "P D0^0 D1^1 D2^2 Q
         D3^0 P D4^1 D5^2 Q
         D6^0 D7^1 P D8^2 Q
         D9^0 D10^1 D11^2 P Q",
    );
    assert_eq!(parity_grid(&r6(17), 4, true), want);
}

#[test]
fn raid6_left_symmetric_6_table() {
    let want = rows(
        "D0^0 D1^1 D2^2 P Q
         D4^0 D5^1 P D3^2 Q
         D8^0 P D6^1 D7^2 Q
         P D9^0 D10^1 D11^2 Q",
    );
    assert_eq!(parity_grid(&r6(18), 4, true), want);
    // Slots follow physical order, not the logical order.
    let st = r6(18).stripe(1).unwrap();
    assert_eq!(st.data, vec![3, 0, 1]);
    assert_eq!(st.slot, vec![2, 0, 1]);
    assert_eq!(st.syndrome_width, 3);
}

#[test]
fn raid6_right_symmetric_6_table() {
    let want = rows(
        "P D0^0 D1^1 D2^2 Q
         D5^0 P D3^1 D4^2 Q
         D7^0 D8^1 P D6^2 Q
         D9^0 D10^1 D11^2 P Q",
    );
    assert_eq!(parity_grid(&r6(19), 4, true), want);
}

#[test]
fn raid6_worked_example() {
    // left-symmetric, N=5, C=128, S=1000 → member 0, data sector 360, slot 1.
    let g = geo(Level::Raid6, 2, 128, 5, 14336);
    let p = g.locate(1000).unwrap();
    assert_eq!(p.copies, vec![(0, 360)]);
    assert_eq!(p.run, 24);
    let st = g.stripe(2).unwrap();
    assert_eq!((st.p, st.q), (2, Some(3)));
    assert_eq!(st.data, vec![4, 0, 1]);
    assert_eq!(st.slot, vec![0, 1, 2]);
    assert_eq!(g.reverse(0, 360), Some(1000));
    assert_eq!(g.array_sectors(), 14336 * 3);
    assert_eq!(g.data_disks(), 3);
}

// ---------------------------------------------------------------- §4.6 RAID10

/// Render device chunk rows: `An` (array chunk) or `-` (unused).
fn r10_grid(g: &Geometry, nrows: u64) -> Vec<String> {
    let c = g.chunk_sectors;
    (0..nrows)
        .map(|row| {
            (0..g.raid_disks)
                .map(|m| match g.reverse(m, row * c) {
                    Some(s) => {
                        assert_eq!(s % c, 0);
                        let p = g.locate(s).unwrap();
                        assert!(p.copies.contains(&(m, row * c)));
                        format!("A{}", s / c)
                    }
                    None => "-".to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn r10(layout: u32, n: usize) -> Geometry {
    // 6 chunk rows of 8 sectors per member.
    geo(Level::Raid10, layout, 8, n, 6 * 8)
}

#[test]
fn raid10_n2_tables() {
    let g = r10(0x102, 4);
    assert_eq!(
        r10_grid(&g, 4),
        rows("A0 A0 A1 A1\nA2 A2 A3 A3\nA4 A4 A5 A5\nA6 A6 A7 A7")
    );
    let g = r10(0x102, 3);
    assert_eq!(
        r10_grid(&g, 4),
        rows("A0 A0 A1\nA1 A2 A2\nA3 A3 A4\nA4 A5 A5")
    );
}

#[test]
fn raid10_f2_tables() {
    let g = r10(0x201, 4);
    assert_eq!(
        r10_grid(&g, 6),
        rows(
            "A0 A1 A2 A3
             A4 A5 A6 A7
             A8 A9 A10 A11
             A3 A0 A1 A2
             A7 A4 A5 A6
             A11 A8 A9 A10"
        )
    );
    let g = r10(0x201, 3);
    assert_eq!(
        r10_grid(&g, 6),
        rows(
            "A0 A1 A2
             A3 A4 A5
             A6 A7 A8
             A2 A0 A1
             A5 A3 A4
             A8 A6 A7"
        )
    );
}

#[test]
fn raid10_o2_tables() {
    let g = r10(0x10201, 4);
    assert_eq!(
        r10_grid(&g, 4),
        rows("A0 A1 A2 A3\nA3 A0 A1 A2\nA4 A5 A6 A7\nA7 A4 A5 A6")
    );
    let g = r10(0x10201, 3);
    assert_eq!(
        r10_grid(&g, 4),
        rows("A0 A1 A2\nA2 A0 A1\nA3 A4 A5\nA5 A3 A4")
    );
}

#[test]
fn raid10_n3_table() {
    let g = r10(0x103, 4);
    assert_eq!(
        r10_grid(&g, 3),
        rows("A0 A0 A0 A1\nA1 A1 A2 A2\nA2 A3 A3 A3")
    );
}

#[test]
fn raid10_far_sets_tables() {
    let four = rows(
        "A0 A1 A2 A3
         A4 A5 A6 A7
         A8 A9 A10 A11
         A1 A0 A3 A2
         A5 A4 A7 A6
         A9 A8 A11 A10",
    );
    let five = rows(
        "A0 A1 A2 A3 A4
         A5 A6 A7 A8 A9
         A10 A11 A12 A13 A14
         A1 A0 A4 A2 A3
         A6 A5 A9 A7 A8
         A11 A10 A14 A12 A13",
    );
    // Mode 2 (bit 18) and mode 1 (bit 17) coincide for fc = 2 on 4 and 5 members.
    for layout in [0x40201, 0x20201] {
        assert_eq!(r10_grid(&r10(layout, 4), 6), four, "{layout:#x}");
        assert_eq!(r10_grid(&r10(layout, 5), 6), five, "{layout:#x}");
    }
}

#[test]
fn raid10_worked_examples() {
    // C=128, D=14336 (112 chunks), S=1000 → chunk 7, in 104.
    let f2 = geo(Level::Raid10, 0x201, 128, 4, 14336);
    assert_eq!(f2.array_sectors(), 224 * 128);
    assert_eq!(f2.used_dev_sectors(0), 112 * 128);
    assert_eq!(
        f2.locate(1000).unwrap(),
        Placement {
            copies: vec![(3, 232), (0, 7400)],
            run: 24
        }
    );
    assert_eq!(f2.reverse(3, 232), Some(1000));
    assert_eq!(f2.reverse(0, 7400), Some(1000));

    let o2 = geo(Level::Raid10, 0x10201, 128, 4, 14336);
    assert_eq!(o2.locate(1000).unwrap().copies, vec![(3, 360), (0, 488)]);
    assert_eq!(o2.reverse(0, 488), Some(1000));

    let n2 = geo(Level::Raid10, 0x102, 128, 3, 14336);
    assert_eq!(n2.locate(1000).unwrap().copies, vec![(2, 616), (0, 744)]);
    assert_eq!(n2.reverse(2, 616), Some(1000));
    assert_eq!(n2.reverse(0, 744), Some(1000));
    assert_eq!(n2.copies(), 2);
}

#[test]
fn raid10_o3_used_dev_sectors() {
    let g = geo(Level::Raid10, 0x10301, 128, 4, 14336);
    assert_eq!(g.array_sectors(), 148 * 128);
    for role in 0..4 {
        assert_eq!(g.used_dev_sectors(role), 14208);
    }
    assert_eq!(g.used_dev_sectors(4), 0);
    // The recomputed size gives the same array.
    let again = geo(Level::Raid10, 0x10301, 128, 4, 14208);
    assert_eq!(again.array_sectors(), g.array_sectors());
}

// ---------------------------------------------------------------- §4.2 RAID0, §4.1 linear

#[test]
fn raid0_worked_example_both_layouts() {
    // Chunks of 1 sector; members with 2, 3, 3, 3 chunks.
    let sizes = vec![2, 3, 3, 3];
    let orig = Geometry::new(Level::Raid0, 1, 1, 4, 0, sizes.clone()).unwrap();
    let alt = Geometry::new(Level::Raid0, 2, 1, 4, 0, sizes.clone()).unwrap();
    assert_eq!(orig.array_sectors(), 11);
    for s in 0..8u64 {
        let want = vec![((s % 4) as usize, s / 4)];
        assert_eq!(orig.locate(s).unwrap().copies, want);
        assert_eq!(alt.locate(s).unwrap().copies, want);
    }
    let o: Vec<_> = (8..11).map(|s| orig.locate(s).unwrap().copies[0]).collect();
    let a: Vec<_> = (8..11).map(|s| alt.locate(s).unwrap().copies[0]).collect();
    assert_eq!(o, vec![(3, 2), (1, 2), (2, 2)]);
    assert_eq!(a, vec![(1, 2), (2, 2), (3, 2)]);
    assert_eq!(orig.reverse(3, 2), Some(8));
    assert_eq!(alt.reverse(1, 2), Some(8));
    assert_eq!(orig.reverse(0, 2), None);
    assert_eq!(orig.locate(11), None);
    let z = orig.zones();
    assert_eq!(z.len(), 2);
    assert_eq!((z[1].dev_start, z[1].zone_start, z[1].zone_end), (2, 8, 11));
    assert_eq!(z[1].devs, vec![1, 2, 3]);

    // Scaled to 64 KiB chunks, and dangerous layout refused with both candidates named.
    let big: Vec<u64> = sizes.iter().map(|c| c * 128).collect();
    let orig = Geometry::new(Level::Raid0, 1, 128, 4, 0, big.clone()).unwrap();
    let alt = Geometry::new(Level::Raid0, 2, 128, 4, 0, big.clone()).unwrap();
    assert_eq!(orig.locate(8 * 128 + 5).unwrap().copies, vec![(3, 256 + 5)]);
    assert_eq!(alt.locate(8 * 128 + 5).unwrap().copies, vec![(1, 256 + 5)]);
    let err = Geometry::new(Level::Raid0, 0, 128, 4, 0, big).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("unknown") && msg.contains("original") && msg.contains("alternate"),
        "{msg}"
    );
    assert!(raidkit_layout::raid0_layout_matters(
        128,
        &[256, 384, 384, 384]
    ));
}

#[test]
fn raid0_dangerous_accepted_when_unambiguous() {
    // One zone.
    let g = Geometry::new(Level::Raid0, 0, 8, 3, 0, vec![80, 80, 87]).unwrap();
    assert_eq!(g.array_sectors(), 240);
    assert_eq!(g.locate(17).unwrap().copies, vec![(2, 1)]);
    // Zone 1 has a single member: original mapping.
    let g = Geometry::new(Level::Raid0, 0, 8, 3, 0, vec![16, 16, 40]).unwrap();
    assert_eq!(g.array_sectors(), 72);
    assert_eq!(g.locate(48).unwrap().copies, vec![(2, 16)]);
    assert_eq!(
        g.locate(71).unwrap(),
        Placement {
            copies: vec![(2, 39)],
            run: 1
        }
    );
    assert!(!raidkit_layout::raid0_layout_matters(8, &[16, 16, 40]));
}

#[test]
fn linear_8_12_8_mib() {
    let g = Geometry::new(Level::Linear, 0, 0, 3, 0, vec![14336, 22528, 14336]).unwrap();
    assert_eq!(g.array_sectors(), 51200);
    assert_eq!(
        g.locate(0).unwrap(),
        Placement {
            copies: vec![(0, 0)],
            run: 14336
        }
    );
    assert_eq!(
        g.locate(14335).unwrap(),
        Placement {
            copies: vec![(0, 14335)],
            run: 1
        }
    );
    assert_eq!(
        g.locate(14336).unwrap(),
        Placement {
            copies: vec![(1, 0)],
            run: 22528
        }
    );
    assert_eq!(
        g.locate(36864).unwrap(),
        Placement {
            copies: vec![(2, 0)],
            run: 14336
        }
    );
    assert_eq!(g.locate(51200), None);
    assert_eq!(g.reverse(1, 100), Some(14436));
    assert_eq!(g.reverse(2, 14336), None);
    assert_eq!(g.used_dev_sectors(1), 22528);
}

#[test]
fn linear_rounding() {
    let g = Geometry::new(Level::Linear, 0, 8, 2, 0, vec![20, 13]).unwrap();
    assert_eq!(g.array_sectors(), 24);
    assert_eq!(g.used_dev_sectors(0), 16);
    assert_eq!(g.locate(16).unwrap().copies, vec![(1, 0)]);
}

#[test]
fn raid1_every_member() {
    let g = geo(Level::Raid1, 0, 0, 3, 1000);
    assert_eq!(g.array_sectors(), 1000);
    assert_eq!(
        g.locate(10).unwrap(),
        Placement {
            copies: vec![(0, 10), (1, 10), (2, 10)],
            run: 990
        }
    );
    assert_eq!(g.reverse(2, 999), Some(999));
    assert_eq!(g.reverse(2, 1000), None);
    assert_eq!(g.reverse(3, 0), None);
    assert_eq!(g.copies(), 3);
    assert_eq!(g.used_dev_sectors(1), 1000);
}
