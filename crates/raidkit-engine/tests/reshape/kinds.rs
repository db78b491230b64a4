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

#[test]
fn grow_raid456_and_raid10_by_offset_change() {
    for (level, layout, n, add_n, want_layout) in [
        (Level::Raid5, "left-symmetric", 4, 1, "left-symmetric"),
        (Level::Raid5, "left-symmetric", 3, 2, "left-symmetric"),
        (Level::Raid6, "left-symmetric", 4, 1, "left-symmetric"),
        (Level::Raid4, "parity-last", 3, 1, "parity-last"),
        (Level::Raid10, "n2", 4, 1, "n2"),
    ] {
        let name = format!("{level} {n}+{add_n}");
        let m = make(level, layout, n, "1.2", 64, add_n);
        let req = ReshapeRequest {
            raid_disks: Some(n + add_n),
            add: add(&m),
            ..Default::default()
        };
        run(
            &name,
            &m,
            req,
            Want {
                level,
                n: n + add_n,
                layout: want_layout,
                chunk_k: 64,
            },
        );
    }
}

#[test]
fn chunk_and_layout_changes() {
    let m = make(Level::Raid5, "left-symmetric", 5, "1.2", 64, 0);
    let req = ReshapeRequest {
        chunk_sectors: Some(256),
        ..Default::default()
    };
    run(
        "raid5 chunk 64K->128K",
        &m,
        req,
        Want {
            level: Level::Raid5,
            n: 5,
            layout: "left-symmetric",
            chunk_k: 128,
        },
    );
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        layout: Some(names::parse_layout(Level::Raid5, "left-asymmetric").unwrap()),
        ..Default::default()
    };
    run(
        "raid5 ls->la",
        &m,
        req,
        Want {
            level: Level::Raid5,
            n: 4,
            layout: "left-asymmetric",
            chunk_k: 64,
        },
    );
    let m = make(Level::Raid6, "left-symmetric", 5, "1.2", 128, 0);
    let req = ReshapeRequest {
        chunk_sectors: Some(64),
        layout: Some(names::parse_layout(Level::Raid6, "right-asymmetric").unwrap()),
        ..Default::default()
    };
    run(
        "raid6 chunk 128K->32K + ra",
        &m,
        req,
        Want {
            level: Level::Raid6,
            n: 5,
            layout: "right-asymmetric",
            chunk_k: 32,
        },
    );
    let m = make(Level::Raid10, "n2", 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        chunk_sectors: Some(256),
        ..Default::default()
    };
    run(
        "raid10 chunk 64K->128K",
        &m,
        req,
        Want {
            level: Level::Raid10,
            n: 4,
            layout: "n2",
            chunk_k: 128,
        },
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
        Want {
            level: Level::Raid5,
            n: 4,
            layout: "left-symmetric",
            chunk_k: 64,
        },
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
        Want {
            level: Level::Raid5,
            n: 4,
            layout: "left-symmetric",
            chunk_k: 64,
        },
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
        run(
            &name,
            &m,
            req,
            Want {
                level,
                n: n + 1,
                layout: "left-symmetric",
                chunk_k: 64,
            },
        );
    }
}

#[test]
fn level_changes() {
    let ls = "left-symmetric";
    // RAID5 -> RAID6 with one more member (takeover to left-symmetric-6, then restripe).
    let m = make(Level::Raid5, ls, 4, "1.2", 64, 1);
    let req = ReshapeRequest {
        level: Some(Level::Raid6),
        add: add(&m),
        ..Default::default()
    };
    run(
        "raid5->6",
        &m,
        req,
        Want {
            level: Level::Raid6,
            n: 5,
            layout: ls,
            chunk_k: 64,
        },
    );
    // RAID6 -> RAID5 (restripe to left-symmetric-6, then drop Q).
    let m = make(Level::Raid6, ls, 5, "1.2", 64, 0);
    let req = ReshapeRequest {
        level: Some(Level::Raid5),
        ..Default::default()
    };
    run(
        "raid6->5",
        &m,
        req,
        Want {
            level: Level::Raid5,
            n: 4,
            layout: ls,
            chunk_k: 64,
        },
    );
    // RAID0 -> RAID5 (parity-last, parity built).
    let m = make(Level::Raid0, "default", 3, "1.2", 64, 1);
    let req = ReshapeRequest {
        level: Some(Level::Raid5),
        add: add(&m),
        ..Default::default()
    };
    run(
        "raid0->5",
        &m,
        req,
        Want {
            level: Level::Raid5,
            n: 4,
            layout: "parity-last",
            chunk_k: 64,
        },
    );
    // RAID5 -> RAID0.
    let m = make(Level::Raid5, ls, 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        level: Some(Level::Raid0),
        ..Default::default()
    };
    run(
        "raid5->0",
        &m,
        req,
        Want {
            level: Level::Raid0,
            n: 3,
            layout: "",
            chunk_k: 64,
        },
    );
    // RAID0 grow (through RAID4).
    let m = make(Level::Raid0, "default", 3, "1.2", 64, 1);
    let req = ReshapeRequest {
        raid_disks: Some(4),
        add: add(&m),
        ..Default::default()
    };
    run(
        "raid0 3->4",
        &m,
        req,
        Want {
            level: Level::Raid0,
            n: 4,
            layout: "",
            chunk_k: 64,
        },
    );
    // RAID0 -> RAID10 near=2 and back.
    let m = make(Level::Raid0, "default", 2, "1.2", 64, 2);
    let req = ReshapeRequest {
        level: Some(Level::Raid10),
        add: add(&m),
        ..Default::default()
    };
    run(
        "raid0->10",
        &m,
        req,
        Want {
            level: Level::Raid10,
            n: 4,
            layout: "n2",
            chunk_k: 64,
        },
    );
    let m = make(Level::Raid10, "n2", 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        level: Some(Level::Raid0),
        ..Default::default()
    };
    run(
        "raid10->0",
        &m,
        req,
        Want {
            level: Level::Raid0,
            n: 2,
            layout: "",
            chunk_k: 64,
        },
    );
    // RAID1 member count, and RAID1(2) -> RAID5.
    let m = make(Level::Raid1, "default", 2, "1.2", 64, 1);
    let req = ReshapeRequest {
        raid_disks: Some(3),
        add: add(&m),
        ..Default::default()
    };
    run(
        "raid1 2->3",
        &m,
        req,
        Want {
            level: Level::Raid1,
            n: 3,
            layout: "",
            chunk_k: 64,
        },
    );
    // RAID4 <-> RAID5.
    let m = make(Level::Raid4, "parity-last", 4, "1.2", 64, 0);
    let req = ReshapeRequest {
        level: Some(Level::Raid5),
        ..Default::default()
    };
    run(
        "raid4->5",
        &m,
        req,
        Want {
            level: Level::Raid5,
            n: 4,
            layout: "parity-last",
            chunk_k: 64,
        },
    );
}
