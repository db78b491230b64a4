//! Parity of the new layout that a crash left stale where the array is served as
//! redundant: (a) a stretch assembly takes as moved past the recorded position because
//! the old and new copies of its data agree (its parity was never compared), and (b) the
//! part already reshaped of an array not stopped cleanly (client writes in flight at the
//! crash: md's write hole), which md resyncs after an unclean stop.

use crate::common::*;
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::jobs::reshape::{
    continue_reshape, reshape, ReshapeEnd, ReshapeOptions, ReshapeRequest,
};
use raidkit_engine::supervisor::{Event, Supervisor};
use raidkit_format::v1::SuperblockV1;
use raidkit_layout::{Geometry, Level};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Chunk of the test arrays, sectors (64 KiB).
const CHUNK: u64 = 128;

/// Rewrite the 1.2 superblock (sector 8) of `file` through `f`, checksum fixed; returns
/// it as it is now.
fn patch_v1(file: &Path, f: impl FnOnce(&mut SuperblockV1)) -> SuperblockV1 {
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut buf = vec![0u8; 4096];
    fd.read_exact_at(&mut buf, 8 * 512).unwrap();
    let mut sb = SuperblockV1::parse(&buf).unwrap();
    f(&mut sb);
    let len = sb.write_len();
    fd.write_all_at(&sb.encode()[..len], 8 * 512).unwrap();
    sb
}

/// RAID5 of 4 (+1 new member) grown to 5 members and stopped half-way: the members (the
/// new one last) and the recorded position.
fn grown_half_way(m: &Made) -> (Vec<PathBuf>, u64) {
    let req = ReshapeRequest {
        raid_disks: Some(5),
        add: add(m),
        ..Default::default()
    };
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    let opts = ReshapeOptions {
        stop_at: Some(m.bytes / 512 / 2),
        ..Default::default()
    };
    let (cur, end) = reshape(&arr, &req, &opts, &mut |_| {}).unwrap();
    let ReshapeEnd::Stopped { position } = end else {
        panic!("not stopped: {end:?}");
    };
    drop(cur);
    drop(arr);
    let mut all = m.members.clone();
    all.extend(m.extra.iter().cloned());
    (all, position)
}

/// Where stripe `k` of the new geometry (RAID5 of 5, left-symmetric) keeps its blocks:
/// (P's file and byte offset, the file of its first data block).
fn new_stripe(all: &[PathBuf], k: u64) -> ((PathBuf, u64), PathBuf) {
    let g = Geometry::new(Level::Raid5, 2, CHUNK, 5, 1 << 20, Vec::new()).unwrap();
    let s = g.stripe(k).unwrap();
    let of_role = |role: usize| -> (PathBuf, SuperblockV1) {
        all.iter()
            .map(|p| (p.clone(), patch_v1(p, |_| {})))
            .find(|(_, sb)| usize::from(sb.dev_roles[sb.dev_number as usize]) == role)
            .unwrap()
    };
    let (pf, sb) = of_role(s.p);
    let start = sb
        .data_offset
        .saturating_add_signed(i64::from(sb.new_offset));
    let p = (pf, (start + k * CHUNK) * 512);
    (p, of_role(s.data[0]).0)
}

/// Overwrite the P block of new stripe `k` with bytes that are no parity of its data.
fn stale_parity(all: &[PathBuf], k: u64) -> PathBuf {
    let ((file, off), data0) = new_stripe(all, k);
    let fd = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    fd.write_all_at(&vec![0x5a; (CHUNK * 512) as usize], off)
        .unwrap();
    data0
}

/// (a) The record lags two steps behind the data moved (both copies of that stretch
/// agree), and one stripe of the stretch has its data in the new layout but not its
/// parity. A writable assembly takes the stretch as moved and rewrites its parity before
/// it serves: a check finds nothing, and a degraded read of that stripe is right.
#[test]
fn a_stretch_inferred_as_moved_gets_its_parity_before_it_is_served() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, pos) = grown_half_way(&m);
    // Two whole steps of both geometries (3 and 4 data chunks: 1536 sectors).
    let back = pos - 3072;
    for p in &all {
        patch_v1(p, |sb| sb.reshape_position = back);
    }
    // A stripe inside the stretch: its new data landed, its parity write did not.
    let k = (pos - 1024) / (4 * CHUNK);
    assert!(k * 4 * CHUNK >= back, "stripe {k} outside {back}..{pos}");
    let data0 = stale_parity(&all, k);

    let arr = Arc::new(assemble_paths(&all, &rw()).unwrap());
    let st = arr.reshape_status().unwrap();
    assert_eq!(
        (st.recorded_sectors, st.progress_sectors),
        (back, pos),
        "{:?}",
        st.notes
    );
    clean_check("stretch inferred as moved", &arr);
    assert!(
        st.notes
            .iter()
            .any(|n| n.contains("was rewritten from its data")),
        "{:?}",
        st.notes
    );
    check("stretch inferred as moved", &arr, m.seed, m.bytes);
    // Record the inferred progress (the mover's first checkpoint), then read the stripe
    // without one of its data members: rebuilt from the parity.
    let o = ReshapeOptions {
        stop_at: Some(pos),
        ..Default::default()
    };
    let end = continue_reshape(&arr, &o, &mut |_| {}).unwrap();
    assert_eq!(end, ReshapeEnd::Stopped { position: pos });
    arr.mark_clean().unwrap();
    drop(arr);
    let rest: Vec<PathBuf> = all.iter().filter(|p| **p != data0).cloned().collect();
    let arr = assemble_paths(&rest, &AssembleOptions::default()).unwrap();
    assert!(arr.is_degraded());
    assert_eq!(arr.reshape_status().unwrap().recorded_sectors, pos);
    check("degraded read of the stretch", &arr, m.seed, m.bytes);
}

/// (b) A grow stopped half-way by a crash while clients wrote (every superblock says the
/// array was in use; one stripe already reshaped has stale parity). Served, the array is
/// reshaped to the end and then resynced: the unclean stop is reported,
/// no resync is left owed, and a check finds nothing.
#[test]
fn an_unclean_stop_mid_reshape_is_resynced_when_served() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, pos) = grown_half_way(&m);
    assert!(pos > 3 * 4 * CHUNK, "{pos}");
    for p in &all {
        patch_v1(p, |sb| sb.resync_offset = 0);
    }
    stale_parity(&all, 2);
    let arr = Arc::new(assemble_paths(&all, &rw()).unwrap());
    assert!(arr.needs_resync());
    let sup = Supervisor::start("t", arr.clone());
    sup.wait_idle();
    let cur = arr.current();
    assert!(cur.reshape_status().is_none());
    assert_eq!(cur.geometry().raid_disks, 5);
    check("unclean stop mid-reshape", &cur, m.seed, m.bytes);
    clean_check("unclean stop mid-reshape", &cur);
    assert!(!cur.needs_resync(), "the unclean stop's resync never ran");
    let ev = sup.recent_events();
    assert!(
        ev.iter()
            .any(|e| matches!(e.event, Event::UncleanStopDetected { .. })),
        "{ev:?}"
    );
}

/// (b, stopped) The unclean stop's resync of the reshaped part does not clear the resync
/// owed: the part not yet moved may hold stale parity too, so until the reshape has moved
/// it (and the resync after it ran), the array stays recorded as needing one (a degraded
/// start would still need forcing).
#[test]
fn a_reshape_continued_after_an_unclean_stop_keeps_the_resync_owed_until_it_ends() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, pos) = grown_half_way(&m);
    for p in &all {
        patch_v1(p, |sb| sb.resync_offset = 0);
    }
    let arr = Arc::new(assemble_paths(&all, &rw()).unwrap());
    assert!(arr.needs_resync());
    let o = ReshapeOptions {
        stop_at: Some(pos + 4 * 4 * CHUNK),
        ..Default::default()
    };
    let end = continue_reshape(&arr, &o, &mut |_| {}).unwrap();
    assert!(matches!(end, ReshapeEnd::Stopped { .. }), "{end:?}");
    assert!(
        arr.current().needs_resync(),
        "the resync owed was cleared mid-reshape"
    );
    let end = continue_reshape(&arr, &ReshapeOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(end, ReshapeEnd::Finished);
    let cur = arr.current();
    assert!(
        !cur.needs_resync(),
        "the resync after the reshape never ran"
    );
    check("after the reshape and its resync", &cur, m.seed, m.bytes);
    clean_check("after the reshape and its resync", &cur);
}

/// A RAID4 stopped uncleanly while its parity member was part-way rebuilt starts (the
/// missing part holds only parity), is said degraded, and is resynced and then recovered:
/// it ends whole, with no resync owed, and its parity right.
#[test]
fn a_dirty_array_rebuilding_its_parity_member_is_resynced_then_recovered() {
    let m = make(Level::Raid4, "parity-last", 4, "1.2", 64, 0);
    for p in &m.members {
        patch_v1(p, |sb| sb.resync_offset = 0);
    }
    patch_v1(&m.members[3], |sb| {
        sb.feature_map |= raidkit_format::v1::feature::RECOVERY_OFFSET;
        sb.recovery_offset = 1024;
    });
    let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
    assert!(arr.needs_resync() && arr.is_degraded());
    let sup = Supervisor::start("t", arr.clone());
    sup.wait_idle();
    let cur = arr.current();
    assert!(!cur.needs_resync(), "the resync never ran");
    assert!(!cur.is_degraded(), "the parity member was never recovered");
    check("dirty, parity member rebuilt", &cur, m.seed, m.bytes);
    clean_check("dirty, parity member rebuilt", &cur);
    let ev = sup.recent_events();
    assert!(
        ev.iter().any(|e| matches!(e.event, Event::Degraded { .. })),
        "{ev:?}"
    );
}
