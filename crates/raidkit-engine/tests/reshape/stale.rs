//! Parity of the new layout that a crash left stale where the array is served as
//! redundant: (a) a stretch assembly takes as moved past the recorded position because
//! the old and new copies of its data agree (its parity was never compared), and (b) the
//! part already reshaped of an array not stopped cleanly (client writes in flight at the
//! crash: md's write hole), which md resyncs after an unclean stop.

use crate::common::*;
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::jobs::reshape::{
    continue_reshape, revert, ReshapeEnd, ReshapeOptions, ReshapeRequest,
};
use raidkit_engine::supervisor::{Event, Supervisor};
use raidkit_engine::sync::{self, SyncMode, SyncOptions, SyncReport};
use raidkit_engine::Array;
use raidkit_format::v1::SuperblockV1;
use raidkit_layout::{Geometry, Level};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Chunk of the test arrays, sectors (64 KiB).
const CHUNK: u64 = 128;

/// RAID5 of 4 (+1 new member) grown to 5 members and stopped half-way: the members (the
/// new one last) and the recorded position.
fn grown_half_way(m: &Made) -> (Vec<PathBuf>, u64) {
    let req = ReshapeRequest {
        raid_disks: Some(5),
        add: add(m),
        ..Default::default()
    };
    half_way(m, req, None)
}

/// Where stripe `k` of the new geometry (RAID5 of 5, left-symmetric) keeps its blocks:
/// (P's file and byte offset, the file of its first data block).
fn new_stripe(all: &[PathBuf], k: u64) -> ((PathBuf, u64), PathBuf) {
    let g = Geometry::new(Level::Raid5, 2, CHUNK, 5, 1 << 20, Vec::new()).unwrap();
    let s = g.stripe(k).unwrap();
    let of_role = |role: usize| -> (PathBuf, SuperblockV1) {
        all.iter()
            .map(|p| (p.clone(), read_v1(p)))
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
    finished_and_resynced("after the reshape and its resync", &arr, &m);
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

/// One resync pass over `arr` (mid-reshape: the part already reshaped), stopped after
/// its first step if `stop_early`: the report and the sync sectors it set out to do.
fn resync_pass(arr: &Array, stop_early: bool) -> (SyncReport, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    // Slowed (1 MiB/s) when it is to stop early, so that it stops before the end.
    let limit = stop_early.then(|| Arc::new(AtomicU64::new(1 << 20)));
    let so = SyncOptions {
        stop: Some(stop.clone()),
        max_bytes_per_sec: limit,
        ..Default::default()
    };
    let mut todo = None;
    let rep = sync::run_opts(arr, SyncMode::Resync, &so, &mut |d, t| {
        todo.get_or_insert(t);
        if stop_early && d > 0 {
            stop.store(true, Ordering::SeqCst);
        }
    })
    .unwrap();
    (rep, todo.unwrap())
}

/// A grow stopped half-way by a crash, assembled, its resync over the reshaped part
/// stopped after its first step and the array marked clean: the members, the array,
/// where the resync stopped and the sync sectors it set out to do. While the array was
/// dirty its superblocks said 0 (a crash resyncs everything); marked clean, they record
/// where the resync resumes (md's resync_offset).
fn resync_stopped_mid_reshape(m: &Made) -> (Vec<PathBuf>, Arc<Array>, u64, u64) {
    let (all, _) = grown_half_way(m);
    for p in &all {
        patch_v1(p, |sb| sb.resync_offset = 0);
    }
    let arr = Arc::new(assemble_paths(&all, &rw()).unwrap());
    let (rep, todo) = resync_pass(&arr, true);
    let at = rep.stopped_at.expect("stopped");
    assert!(at > 0 && at < todo, "stopped at {at} of {todo}");
    assert!(arr.needs_resync());
    assert_eq!(read_v1(&all[0]).resync_offset, 0, "dirty");
    arr.mark_clean().unwrap();
    assert_eq!(read_v1(&all[0]).resync_offset, at, "clean");
    (all, arr, at, todo)
}

/// (b, stopped part-way) The resync of an array not stopped cleanly, stopped in the
/// middle of a reshape, resumes where it stopped, and once the reshaped part is done the
/// resync after the reshape goes on from its end. The array owes a resync until then.
#[test]
fn a_resync_stopped_mid_reshape_resumes_where_it_stopped() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, arr, at, todo) = resync_stopped_mid_reshape(&m);
    drop(arr);
    let arr = Arc::new(assemble_paths(&all, &rw()).unwrap());
    let (rep, rest) = resync_pass(&arr, false);
    assert_eq!((rep.stopped_at, rest), (None, todo - at));
    assert!(
        arr.needs_resync(),
        "the resync owed was cleared mid-reshape"
    );
    // Dirty again: a crash now must resync everything, below the resume point too.
    assert_eq!(read_v1(&all[0]).resync_offset, 0, "dirty again");
    arr.mark_clean().unwrap();
    assert_eq!(
        read_v1(&all[0]).resync_offset,
        todo,
        "resumes after the part done"
    );
    finished_and_resynced("resync resumed mid-reshape", &arr, &m);
}

/// Continue the reshape of `arr` to its end: then no resync is owed (the one after the
/// reshape ran), and data and redundancy are right.
fn finished_and_resynced(name: &str, arr: &Arc<Array>, m: &Made) {
    let end = continue_reshape(arr, &ReshapeOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(end, ReshapeEnd::Finished, "{name}");
    let cur = arr.current();
    assert!(
        !cur.needs_resync(),
        "{name}: the resync after the reshape never ran"
    );
    check(name, &cur, m.seed, m.bytes);
    clean_check(name, &cur);
}

/// Turned back, the reshape leaves the new geometry's sync space, where the resync's
/// resume point lies: the resync owed starts again from 0.
#[test]
fn a_reverted_reshape_owes_its_resync_from_the_start() {
    let m = make(Level::Raid5, "left-symmetric", 4, "1.2", 64, 1);
    let (all, arr, _, _) = resync_stopped_mid_reshape(&m);
    let back = revert(&arr, &ReshapeOptions::default()).unwrap();
    assert!(back.needs_resync());
    back.mark_clean().unwrap();
    assert_eq!(read_v1(&all[0]).resync_offset, 0);
}
