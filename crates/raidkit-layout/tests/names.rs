//! Level and layout names (mdadm spellings), both directions.

use raidkit_layout::names::{default_layout, layout_name, parse_layout};
use raidkit_layout::{layout_valid, LayoutError, Level};

const LEVELS: [Level; 7] = [
    Level::Linear,
    Level::Raid0,
    Level::Raid1,
    Level::Raid4,
    Level::Raid5,
    Level::Raid6,
    Level::Raid10,
];

#[test]
fn levels() {
    for (md, l) in [
        (-1, Level::Linear),
        (0, Level::Raid0),
        (1, Level::Raid1),
        (4, Level::Raid4),
    ]
    .into_iter()
    .chain([(5, Level::Raid5), (6, Level::Raid6), (10, Level::Raid10)])
    {
        assert_eq!(Level::from_md(md), Some(l));
        assert_eq!(l.to_md(), md);
        assert_eq!(Level::parse(&l.to_string()), Ok(l));
    }
    for md in [-5, -4, -1000000, 2, 3, 7, 11, i32::MAX, i32::MIN] {
        assert_eq!(Level::from_md(md), None);
    }
    for (w, l) in [
        ("linear", Level::Linear),
        ("0", Level::Raid0),
        ("RAID0", Level::Raid0),
        ("stripe", Level::Raid0),
        ("1", Level::Raid1),
        ("Mirror", Level::Raid1),
        ("raid1", Level::Raid1),
        ("4", Level::Raid4),
        ("raid4", Level::Raid4),
        ("5", Level::Raid5),
        ("Raid5", Level::Raid5),
        ("6", Level::Raid6),
        ("raid6", Level::Raid6),
        ("10", Level::Raid10),
        ("RAID10", Level::Raid10),
    ] {
        assert_eq!(Level::parse(w), Ok(l), "{w}");
    }
    for w in ["", "raid", "multipath", "faulty", "-4", "raid3", "2"] {
        assert_eq!(
            Level::parse(w),
            Err(LayoutError::UnknownLevel(w.to_string()))
        );
    }
    assert!(Level::Raid6.has_parity() && !Level::Raid10.has_parity());
    assert!(
        Level::Raid10.uses_chunk() && !Level::Raid1.uses_chunk() && !Level::Linear.uses_chunk()
    );
}

#[test]
fn raid5_names() {
    let l = Level::Raid5;
    for (name, v) in [
        ("left-asymmetric", 0),
        ("right-asymmetric", 1),
        ("left-symmetric", 2),
        ("right-symmetric", 3),
        ("parity-first", 4),
        ("parity-last", 5),
        ("la", 0),
        ("ra", 1),
        ("ls", 2),
        ("rs", 3),
        ("ddf-zero-restart", 1),
        ("ddf-N-restart", 0),
        ("ddf-N-continue", 2),
        ("default", 2),
        ("3", 3),
    ] {
        assert_eq!(parse_layout(l, name), Ok(v), "{name}");
    }
    for (v, name) in [
        (0, "left-asymmetric"),
        (1, "right-asymmetric"),
        (2, "left-symmetric"),
        (3, "right-symmetric"),
        (4, "parity-first"),
        (5, "parity-last"),
        (6, "layout-0x6"),
    ] {
        assert_eq!(layout_name(l, v), name);
    }
    for bad in ["6", "left-symmetric-6", "n2", "original", "", "ls2"] {
        assert!(parse_layout(l, bad).is_err(), "{bad}");
    }
}

#[test]
fn raid6_names() {
    let l = Level::Raid6;
    let named = [
        (0, "left-asymmetric"),
        (1, "right-asymmetric"),
        (2, "left-symmetric"),
        (3, "right-symmetric"),
        (4, "parity-first"),
        (5, "parity-last"),
        (8, "ddf-zero-restart"),
        (9, "ddf-N-restart"),
        (10, "ddf-N-continue"),
        (16, "left-asymmetric-6"),
        (17, "right-asymmetric-6"),
        (18, "left-symmetric-6"),
        (19, "right-symmetric-6"),
        (20, "parity-first-6"),
    ];
    for (v, name) in named {
        assert_eq!(layout_name(l, v), name);
        assert_eq!(parse_layout(l, name), Ok(v));
    }
    assert_eq!(parse_layout(l, "ls"), Ok(2));
    assert_eq!(parse_layout(l, "ddf-n-continue"), Ok(10));
    assert_eq!(parse_layout(l, "parity-last-6"), Ok(5));
    assert_eq!(parse_layout(l, "default"), Ok(2));
    assert_eq!(parse_layout(l, "18"), Ok(18));
    assert!(parse_layout(l, "7").is_err());
    assert!(parse_layout(l, "21").is_err());
    assert_eq!(layout_name(l, 7), "layout-0x7");
}

#[test]
fn raid10_names() {
    let l = Level::Raid10;
    for (name, v) in [
        ("n2", 0x102),
        ("n3", 0x103),
        ("f2", 0x201),
        ("f3", 0x301),
        ("o2", 0x10201),
        ("o3", 0x10301),
        ("f2s2", 0x40201),
        ("f2s1", 0x20201),
        ("o2s2", 0x50201),
        ("near=2", 0x102),
        ("far=2", 0x201),
        ("offset=2", 0x10201),
        ("default", 0x102),
        ("n255", 0x1ff),
        ("N2", 0x102),
    ] {
        assert_eq!(parse_layout(l, name), Ok(v), "{name}");
    }
    for (v, name) in [
        (0x102, "n2"),
        (0x104, "n4"),
        (0x201, "f2"),
        (0x10201, "o2"),
        (0x40201, "f2s2"),
        (0x20301, "f3s1"),
        (0x50201, "o2s2"),
        (0x202, "layout-0x202"),
        (0x60201, "layout-0x60201"),
        (0x80102, "layout-0x80102"),
    ] {
        assert_eq!(layout_name(l, v), name);
    }
    assert_eq!(parse_layout(l, "layout-0x202"), Ok(0x202));
    assert_eq!(parse_layout(l, "514"), Ok(0x202));
    for bad in [
        "n0", "n256", "f", "x2", "n2s2", "f2s3", "f2s", "n-1", "0x60201", "257",
    ] {
        assert!(parse_layout(l, bad).is_err(), "{bad}");
    }
}

#[test]
fn raid0_raid4_linear_raid1_names() {
    for (name, v) in [
        ("original", 1),
        ("alternate", 2),
        ("dangerous", 0),
        ("layout-original", 1),
        ("layout-alternate", 2),
        ("layout-unspecified", 0),
        ("default", 1),
        ("2", 2),
    ] {
        assert_eq!(parse_layout(Level::Raid0, name), Ok(v), "{name}");
    }
    assert!(parse_layout(Level::Raid0, "3").is_err());
    assert_eq!(layout_name(Level::Raid0, 0), "dangerous");
    assert_eq!(layout_name(Level::Raid0, 1), "original");
    assert_eq!(layout_name(Level::Raid0, 2), "alternate");
    assert_eq!(layout_name(Level::Raid0, 3), "layout-0x3");

    assert_eq!(parse_layout(Level::Raid4, "parity-last"), Ok(0));
    assert_eq!(parse_layout(Level::Raid4, "default"), Ok(0));
    assert!(parse_layout(Level::Raid4, "left-symmetric").is_err());
    assert_eq!(layout_name(Level::Raid4, 0), "parity-last");

    for l in [Level::Linear, Level::Raid1] {
        assert_eq!(parse_layout(l, "default"), Ok(0));
        assert!(parse_layout(l, "left-symmetric").is_err());
        assert_eq!(layout_name(l, 0), "default");
    }
}

#[test]
fn defaults_and_round_trip() {
    assert_eq!(default_layout(Level::Raid5), 2);
    assert_eq!(default_layout(Level::Raid6), 2);
    assert_eq!(default_layout(Level::Raid10), 0x102);
    assert_eq!(default_layout(Level::Raid0), 1);
    for l in [Level::Linear, Level::Raid1, Level::Raid4] {
        assert_eq!(default_layout(l), 0);
    }
    // Every printed name of a valid layout parses back to the same value.
    for l in LEVELS {
        for v in (0..0x400u32).chain([0x10201, 0x10301, 0x20201, 0x40201, 0x50301]) {
            let name = layout_name(l, v);
            if layout_valid(l, v) {
                let back = parse_layout(l, &name);
                if l == Level::Raid4 && v == 5 {
                    assert_eq!(back, Ok(0)); // both print as parity-last
                } else {
                    assert_eq!(back, Ok(v), "{l} {v:#x} {name}");
                }
            } else {
                assert!(parse_layout(l, &name).is_err(), "{l} {v:#x} {name}");
            }
        }
        assert!(layout_valid(l, default_layout(l)));
    }
}
