//! A reshape that builds a member in a role the old shape has (the Q member of a
//! RAID5→6 conversion, empty before it): stopped half-way by a crash (the array not
//! stopped cleanly) it still assembles, since the member holds only parity where the
//! reshape has not been yet, and its `recovery_offset` follows the position as md keeps
//! it; it is never turned back (the old shape would take the half-built member for
//! complete).

use crate::common::*;
use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::jobs::reshape::{
    continue_reshape, revert, ReshapeEnd, ReshapeOptions, ReshapeRequest,
};
use raidkit_layout::Level;
use std::sync::Arc;

/// RAID5 of 4 (+1 spare) reshaped towards RAID6 and stopped half-way; the members (the
/// spare last) and where it stopped.
fn half_way_to_raid6(m: &Made) -> (Vec<std::path::PathBuf>, u64) {
    let req = ReshapeRequest {
        level: Some(Level::Raid6),
        add: add(m),
        ..Default::default()
    };
    half_way(m, req, Some(768))
}

#[test]
fn raid5_to_6_crashed_half_way_assembles_and_finishes() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, position) = half_way_to_raid6(&m);
    assert!(position > 0 && position < m.bytes / 512, "{position}");
    // The crash: every superblock says the array was in use.
    let mut q = None;
    for p in &all {
        let sb = patch_v1(p, |sb| sb.resync_offset = 0);
        if p == all.last().unwrap() {
            q = Some(sb);
        }
    }
    // The new Q member is built as far as the position (whole stripes of 3 data
    // chunks of 128 sectors), as md records it.
    let q = q.unwrap();
    assert_eq!(q.recovery_offset, position / 384 * 128, "{q:?}");
    let arr = Arc::new(
        assemble_paths(&all, &rw()).unwrap_or_else(|e| panic!("assembly after the crash: {e}")),
    );
    check("raid5->6 crashed", &arr, m.seed, m.bytes);
    let end = continue_reshape(&arr, &ReshapeOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(end, ReshapeEnd::Finished);
    let cur = arr.current();
    assert_eq!(
        (cur.geometry().level, cur.geometry().raid_disks),
        (Level::Raid6, 5)
    );
    check("raid5->6 continued", &cur, m.seed, m.bytes);
    clean_check("raid5->6 continued", &cur);
}

#[test]
fn a_reshape_building_a_member_is_not_turned_back() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, _) = half_way_to_raid6(&m);
    let arr = Arc::new(assemble_paths(&all, &rw()).unwrap());
    let e = revert(&arr, &ReshapeOptions::default()).expect_err("turned back");
    assert!(
        e.to_string().contains("builds the member in role 4")
            && e.to_string().contains("cannot be turned back"),
        "{e}"
    );
    // Nothing changed: it still finishes, data and redundancy right.
    let end = continue_reshape(&arr, &ReshapeOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(end, ReshapeEnd::Finished);
    let cur = arr.current();
    check("raid5->6 after a refused revert", &cur, m.seed, m.bytes);
    clean_check("raid5->6 after a refused revert", &cur);
}

/// A RAID0 grows through RAID4 with its parity role empty (md's way): crashed half-way,
/// the dirty array lacks only parity and assembles; continued, it is a RAID0 of 4.
#[test]
fn raid0_grow_crashed_half_way_assembles_and_finishes() {
    let m = make(Level::Raid0, "default", 3, "1.2", 64, 1);
    let req = ReshapeRequest {
        raid_disks: Some(4),
        add: add(&m),
        ..Default::default()
    };
    let (all, _) = half_way(&m, req, Some(768));
    for p in &all {
        patch_v1(p, |sb| sb.resync_offset = 0);
    }
    let arr = Arc::new(
        assemble_paths(&all, &rw()).unwrap_or_else(|e| panic!("assembly after the crash: {e}")),
    );
    check("raid0 3->4 crashed", &arr, m.seed, m.bytes);
    let end = continue_reshape(&arr, &ReshapeOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(end, ReshapeEnd::Finished);
    let cur = arr.current();
    check("raid0 3->4 continued", &cur, m.seed, m.bytes);
}
