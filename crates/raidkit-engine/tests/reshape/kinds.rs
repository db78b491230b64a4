//! Reshapes raidkit starts itself, engine level, on small arrays: every kind md supports
//! (grow, shrink, chunk, layout, level changes), 1.x and 0.90 metadata, data offset moved
//! or a backup file; afterwards the data is intact, the new tail reads zeros, redundancy
//! checks clean and the array assembles with the new shape. Crashes at random moments
//! (writes after the crash never land) are continued to the same result.

use crate::common::*;
use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::jobs::reshape::{reshape, ReshapeOptions, ReshapeRequest};
use raidkit_layout::{names, Level};
use std::sync::Arc;

/// What a reshape of the tables below asks (None: keep it as it is).
#[derive(Clone, Copy, Default)]
struct Ask {
    level: Option<Level>,
    disks: Option<usize>,
    chunk_k: Option<u64>,
    layout: Option<&'static str>,
}

/// Make an array `from` = (level, layout, members, chunk KiB, spares) with 1.2 metadata,
/// reshape it as `ask` says (the spares added), and check it became `to` = (level,
/// members, layout, chunk KiB) with its data intact (see [`run`]).
fn case(
    name: &str,
    from: (Level, &str, usize, u64, usize),
    ask: Ask,
    to: (Level, usize, &'static str, u64),
) {
    let (level, layout, n, chunk_k, spares) = from;
    let m = make(level, layout, n, "1.2", chunk_k, spares);
    let req = ReshapeRequest {
        level: ask.level,
        raid_disks: ask.disks,
        chunk_sectors: ask.chunk_k.map(|k| k * 2),
        layout: ask.layout.map(|l| names::parse_layout(to.0, l).unwrap()),
        add: add(&m),
        ..Default::default()
    };
    run(name, &m, req, want(to.0, to.1, to.2, to.3));
}

#[test]
fn grow_raid456_and_raid10_by_offset_change() {
    for (level, layout, n, add_n) in [
        (Level::Raid5, "left-symmetric", 4, 1),
        (Level::Raid5, "left-symmetric", 3, 2),
        (Level::Raid6, "left-symmetric", 4, 1),
        (Level::Raid4, "parity-last", 3, 1),
        (Level::Raid10, "n2", 4, 1),
    ] {
        let ask = Ask {
            disks: Some(n + add_n),
            ..Default::default()
        };
        case(
            &format!("{level} {n}+{add_n}"),
            (level, layout, n, 64, add_n),
            ask,
            (level, n + add_n, layout, 64),
        );
    }
}

#[test]
fn chunk_and_layout_changes() {
    let (r5, r6, r10) = (Level::Raid5, Level::Raid6, Level::Raid10);
    let ls = "left-symmetric";
    let chunk = |k| Ask {
        chunk_k: Some(k),
        ..Default::default()
    };
    let layout = |l| Ask {
        layout: Some(l),
        ..Default::default()
    };
    let both = Ask {
        chunk_k: Some(32),
        layout: Some("right-asymmetric"),
        ..Default::default()
    };
    case(
        "raid5 chunk 64K->128K",
        (r5, ls, 5, 64, 0),
        chunk(128),
        (r5, 5, ls, 128),
    );
    let la = "left-asymmetric";
    case(
        "raid5 ls->la",
        (r5, ls, 4, 64, 0),
        layout(la),
        (r5, 4, la, 64),
    );
    let ra = "right-asymmetric";
    case(
        "raid6 chunk 128K->32K + ra",
        (r6, ls, 5, 128, 0),
        both,
        (r6, 5, ra, 32),
    );
    case(
        "raid10 chunk 64K->128K",
        (r10, "n2", 4, 64, 0),
        chunk(128),
        (r10, 4, "n2", 128),
    );
}

/// A chunk change whose new chunk does not divide the used member size would drop the
/// array's tail. md refuses it; so does raidkit, saying why, with or without an array
/// size (which confirms shrinks, and this is none), and nothing changes.
#[test]
fn chunk_change_that_loses_the_tail_is_refused_with_the_reason() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 0);
    let before = std::fs::read(&m.members[0]).unwrap();
    for array_sectors in [None, Some(3 * 4096 * 4)] {
        let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
        let used_k = arr.geometry().dev_sectors / 2;
        assert_eq!(used_k % 2048, 1024, "the used size is an odd number of MiB");
        let req = ReshapeRequest {
            chunk_sectors: Some(4096),
            array_sectors,
            ..Default::default()
        };
        let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
            .expect_err("the tail would be lost");
        assert!(
            e.to_string().contains(&format!(
                "md cannot reshape to raid5 (4 devices, layout 2, 2048 KiB chunk) without losing data: the used member size ({used_k} KiB) is not a multiple of the new chunk (2048 KiB)"
            )),
            "{e}"
        );
        drop(arr);
    }
    assert!(
        std::fs::read(&m.members[0]).unwrap() == before,
        "nothing written"
    );
}

#[test]
fn shrink_needs_the_array_size_first() {
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let req = ReshapeRequest {
        raid_disks: Some(4),
        ..Default::default()
    };
    let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
        .expect_err("a shrink without the array size is refused");
    assert!(e.to_string().contains("confirm the new size"), "{e}");
    drop(arr);
    // The full new capacity: no room after the data, so the critical section at the end
    // needs a backup file.
    let full = m.bytes / 4 * 3;
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let req = ReshapeRequest {
        raid_disks: Some(4),
        array_sectors: Some(full / 512),
        ..Default::default()
    };
    let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
        .expect_err("no room after the data and no backup file");
    assert!(e.to_string().contains("backup file"), "{e}");
    drop(arr);
    let req = ReshapeRequest {
        raid_disks: Some(4),
        array_sectors: Some(full / 512),
        backup_file: Some(m._dir.path().join("backup")),
        ..Default::default()
    };
    run(
        "raid5 5->4 backup",
        &m,
        req,
        want(Level::Raid5, 4, "left-symmetric", 64),
    );
    // Three chunks less per member (mdadm's minimum offset change for 4→3 data members):
    // the component size shrinks and the data moves up, no backup needed.
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let smaller = full - 9 * 64 * 1024;
    let req = ReshapeRequest {
        raid_disks: Some(4),
        array_sectors: Some(smaller / 512),
        ..Default::default()
    };
    run(
        "raid5 5->4 offset",
        &m,
        req,
        want(Level::Raid5, 4, "left-symmetric", 64),
    );
}

#[test]
fn in_place_with_a_backup_file_on_090_and_10() {
    for (meta, level, n) in [
        ("0.90", Level::Raid5, 3),
        ("1.0", Level::Raid5, 4),
        ("0.90", Level::Raid6, 4),
    ] {
        let name = format!("{meta} {level} {n}+1");
        let m = make(level, "left-symmetric", n, meta, 64, 1);
        let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
        let req = ReshapeRequest {
            raid_disks: Some(n + 1),
            add: add(&m),
            ..Default::default()
        };
        let e = reshape(&arr, &req, &ReshapeOptions::default(), &mut |_| {})
            .expect_err("no room and no backup file");
        assert!(e.to_string().contains("backup file"), "{name}: {e}");
        drop(arr);
        let backup = m._dir.path().join("backup");
        let req = ReshapeRequest {
            raid_disks: Some(n + 1),
            add: add(&m),
            backup_file: Some(backup),
            ..Default::default()
        };
        run(&name, &m, req, want(level, n + 1, "left-symmetric", 64));
    }
}

#[test]
fn level_changes() {
    use Level::{Raid0 as R0, Raid1 as R1, Raid10 as R10, Raid4 as R4, Raid5 as R5, Raid6 as R6};
    let (ls, pl, d) = ("left-symmetric", "parity-last", "default");
    let to = |level| Ask {
        level: Some(level),
        ..Default::default()
    };
    let disks = |n| Ask {
        disks: Some(n),
        ..Default::default()
    };
    // RAID5 -> RAID6 with one more member (takeover to left-symmetric-6, then restripe),
    // and back (restripe to left-symmetric-6, then drop Q).
    case("raid5->6", (R5, ls, 4, 64, 1), to(R6), (R6, 5, ls, 64));
    case("raid6->5", (R6, ls, 5, 64, 0), to(R5), (R5, 4, ls, 64));
    // RAID0 <-> RAID5 (parity-last, parity built).
    case("raid0->5", (R0, d, 3, 64, 1), to(R5), (R5, 4, pl, 64));
    case("raid5->0", (R5, ls, 4, 64, 0), to(R0), (R0, 3, "", 64));
    // RAID0 grow (through RAID4).
    case("raid0 3->4", (R0, d, 3, 64, 1), disks(4), (R0, 4, "", 64));
    // RAID0 -> RAID10 near=2 and back.
    case("raid0->10", (R0, d, 2, 64, 2), to(R10), (R10, 4, "n2", 64));
    case("raid10->0", (R10, "n2", 4, 64, 0), to(R0), (R0, 2, "", 64));
    // RAID1 member count.
    case("raid1 2->3", (R1, d, 2, 64, 1), disks(3), (R1, 3, "", 64));
    // RAID4 <-> RAID5.
    case("raid4->5", (R4, pl, 4, 64, 0), to(R5), (R5, 4, pl, 64));
}
