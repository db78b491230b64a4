//! End-to-end engine tests of recovery over real files: hot-spare rebuild and its
//! checkpoints, read errors repaired from redundancy, scrub verdicts, bitmap-limited resync
//! and re-add, the supervisor's spare take-over, and rebuilds past unreadable sectors.

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;

mod cases;
use cases::{make, read_all, ro, rw, Case};

fn spare_file(dir: &TempDir, name: &str, mib: u64) -> std::sync::Arc<dyn raidkit_engine::BlockDev> {
    let p = dir.path().join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    std::sync::Arc::new(raidkit_engine::FileDev::open(&p, true).unwrap())
}

#[test]
fn hot_spare_rebuild_every_redundant_level() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    for (level, layout, n, missing) in [
        (Level::Raid5, "left-symmetric", 4usize, vec![1usize]),
        (Level::Raid6, "left-asymmetric", 5, vec![0, 3]),
        (Level::Raid6, "ddf-N-restart", 5, vec![2, 4]),
        (Level::Raid1, "default", 3, vec![0, 2]),
        (Level::Raid10, "n2", 4, vec![1, 2]),
        (Level::Raid10, "o2", 3, vec![0]),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let c = Case::v12(level, layout, n, 16, 2);
        let (ps, model) = make(&c, &dir);
        let sub: Vec<PathBuf> = ps
            .iter()
            .enumerate()
            .filter(|(i, _)| !missing.contains(i))
            .map(|(_, p)| p.clone())
            .collect();
        let arr = assemble_paths(&sub, &rw()).unwrap();
        let ev = arr.subscribe();
        let mut spares = Vec::new();
        for i in 0..missing.len() {
            let name = format!("spare{i}.img");
            arr.add_spare(spare_file(&dir, &name, 2), false).unwrap();
            spares.push(dir.path().join(name));
        }
        let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(rep.roles.len(), missing.len(), "{level:?} {layout}");
        assert!(rep.lost.is_empty());
        assert!(!arr.is_degraded());
        arr.stop().unwrap();
        let evs: Vec<_> = ev.try_iter().collect();
        assert!(
            evs.iter()
                .any(|e| matches!(e, raidkit_engine::array::ArrayEvent::RebuildFinished { .. })),
            "{evs:?}"
        );
        // The survivors plus the rebuilt spares form the complete array, in any order.
        let mut all = sub.clone();
        all.extend(spares.iter().cloned());
        all.reverse();
        let a2 = assemble_paths(&all, &ro()).unwrap();
        assert!(
            a2.missing_roles().is_empty() && !a2.is_degraded(),
            "{level:?} {layout}"
        );
        assert_consistent(&a2, &format!("{level:?} {layout}"));
        drop(a2);
        assert!(
            read_all(&all, &ro()).unwrap() == model,
            "{level:?} {layout}"
        );
        // Each rebuilt member alone with the minimum of others still gives the data.
        if level == Level::Raid1 {
            assert!(read_all(&spares[..1], &ro()).unwrap() == model);
        }
    }
}

#[test]
fn rebuild_resumes_from_checkpoint() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 16, 4);
    let (ps, model) = make(&c, &dir);
    let sub = vec![ps[0].clone(), ps[2].clone()];
    let arr = assemble_paths(&sub, &rw()).unwrap();
    arr.add_spare(spare_file(&dir, "s.img", 4), false).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let opts = RebuildOptions {
        stop: Some(stop.clone()),
        checkpoint_every: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    let mut seen = 0;
    rebuild(&arr, &opts, &mut |d, t| {
        seen = d;
        if d * 3 >= t {
            st.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert!(arr.is_degraded(), "stopped part-way");
    arr.stop().unwrap();
    // The spare's superblock records where to resume.
    let mut all = sub.clone();
    all.push(dir.path().join("s.img"));
    let a2 = assemble_paths(&all, &rw()).unwrap();
    let info = a2.members();
    assert!(info.iter().any(|m| m.state == "recovering"), "{info:?}");
    assert!(
        read_all(&all, &ro()).unwrap() == model,
        "reads during a half-done rebuild"
    );
    let ev = a2.subscribe();
    rebuild(&a2, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    let from = ev.try_iter().find_map(|e| match e {
        raidkit_engine::array::ArrayEvent::RebuildStarted { from, .. } => Some(from),
        _ => None,
    });
    assert!(
        from.unwrap_or(0) > 0 && from.unwrap_or(0) <= seen,
        "resumed from {from:?}, stopped at {seen}"
    );
    a2.stop().unwrap();
    let a3 = assemble_paths(&all, &ro()).unwrap();
    assert!(!a3.is_degraded());
    assert_consistent(&a3, "after the rebuild");
    drop(a3);
    assert!(
        read_all(&all[1..], &ro()).unwrap() == model,
        "rebuilt member serves data"
    );
}

#[test]
fn read_errors_are_repaired_from_redundancy() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2);
    let (ps, model) = make(&c, &dir);
    // Member 1 holds data in stripe 0 (data offset 2048): its sectors 2050..2055 fail reads.
    let spec = PathBuf::from(format!("fault:reio@2050-2055:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec, ps[2].clone()], &rw()).unwrap();
    let ev = arr.subscribe();
    let mut out = vec![0u8; model.len()];
    arr.read(0, &mut out).unwrap();
    assert!(out == model);
    let evs: Vec<_> = ev.try_iter().collect();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            raidkit_engine::array::ArrayEvent::ReadErrorCorrected { role: 1, .. }
        )),
        "{evs:?}"
    );
    arr.stop().unwrap();
}

fn corrupt(p: &std::path::Path, byte: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, byte).unwrap();
    for x in b.iter_mut() {
        *x ^= 0x3c;
    }
    f.write_all_at(&b, byte).unwrap();
}

#[test]
fn scrub_verdicts_raid6_locates_the_bad_member() {
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid6, "left-asymmetric", 5, 16, 2);
    let (ps, model) = make(&c, &dir);
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let g = arr.geometry().clone();
    drop(arr);
    let cs = g.chunk_sectors; // 32 sectors
                              // Stripe 2: corrupt 100 bytes in page 1 of data block k=1, and page 0 of P, on the disk.
    let lay = g.stripe(2).unwrap();
    let data_role = lay.data[1];
    let data_off = (2048 + 2 * cs) * 512 + 4096 + 10;
    corrupt(&ps[data_role], data_off, 100);
    let p_off = (2048 + 2 * cs) * 512 + 7;
    corrupt(&ps[lay.p], p_off, 3);
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    assert_eq!(rep.verdicts.len(), 2, "{:?}", rep.verdicts);
    let v0 = &rep.verdicts[0];
    assert_eq!((v0.role, v0.what.as_str()), (Some(lay.p), "P"));
    let v1 = &rep.verdicts[1];
    assert_eq!(v1.role, Some(data_role));
    let k = g.data_disks() as u64;
    let expect_off = (2 * k + 1) * cs * 512 + 4096;
    assert!(
        v1.what.starts_with(&format!(
            "data (array bytes {}..{})",
            expect_off,
            expect_off + 4096
        )),
        "{}",
        v1.what
    );
    assert!(!v1.repaired);
    drop(arr);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let rep = sync::run(&arr, SyncMode::Repair, true, &mut |_, _| {}).unwrap();
    assert_eq!(rep.verdicts.len(), 2);
    assert!(rep.verdicts.iter().all(|v| v.repaired));
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &ro()).unwrap();
    assert!(sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})
        .unwrap()
        .verdicts
        .is_empty());
    drop(arr);
    assert!(
        read_all(&ps, &ro()).unwrap() == model,
        "repair restored the original data"
    );
}

/// A RAID6 stripe with a member missing has one redundancy left: a mismatch there cannot
/// be located (the missing block is rebuilt from P, so a bad P or a bad data block shows
/// as "Q differs"). Check must say undecided, not blame Q, and repair must write nothing:
/// rewriting Q from the data would destroy the one copy of the truth left.
#[test]
fn degraded_raid6_mismatch_is_undecided_and_repair_keeps_the_redundancy() {
    let c = Case::v12(Level::Raid6, "left-symmetric", 5, 16, 2);
    // (the member left out, the member corrupted) in stripe 2 (by index into data roles,
    // or P): a data member out and P bad; P's member out and a data block bad.
    for (gone, bad) in [(Some(0), None), (None, Some(1))] {
        let dir = TempDir::new("rk-engine").unwrap();
        let (ps, _) = make(&c, &dir);
        let g = assemble_paths(&ps, &ro()).unwrap().geometry().clone();
        let cs = g.chunk_sectors;
        let lay = g.stripe(2).unwrap();
        let role = |k: Option<usize>| k.map_or(lay.p, |k| lay.data[k]);
        let (gone, bad) = (role(gone), role(bad));
        corrupt(&ps[bad], (2048 + 2 * cs) * 512 + 7, 3);
        let sub: Vec<PathBuf> = (0..ps.len())
            .filter(|&r| r != gone)
            .map(|r| ps[r].clone())
            .collect();
        let region = |r: usize| {
            let b = std::fs::read(&ps[r]).unwrap();
            b[2048 * 512..].to_vec()
        };
        let before: Vec<Vec<u8>> = (0..ps.len()).map(region).collect();
        for mode in [SyncMode::Check, SyncMode::Repair] {
            let arr =
                assemble_paths(&sub, &if mode == SyncMode::Check { ro() } else { rw() }).unwrap();
            let rep = sync::run(&arr, mode, true, &mut |_, _| {}).unwrap();
            assert_eq!(rep.verdicts.len(), 1, "{:?}", rep.verdicts);
            let v = &rep.verdicts[0];
            assert_eq!((v.stripe, v.role, v.repaired), (2, None, false), "{v:?}");
            assert_eq!(v.decided_by, "undecided");
            assert!(
                v.what.starts_with(
                    "a block of the stripe was not read (a member missing, a bad block, a read \
                     error): P and Q cannot locate the bad block"
                ),
                "{}",
                v.what
            );
            arr.stop().unwrap();
        }
        for r in (0..ps.len()).filter(|&r| r != gone) {
            assert!(
                region(r) == before[r],
                "repair wrote member {r} (gone {gone}, bad {bad})"
            );
        }
    }
}

#[test]
fn scrub_raid5_reports_exact_ranges_and_mirrors_vote() {
    // RAID5: a flipped byte makes one 4 KiB row inconsistent: every data block of the row is
    // reported (RAID5 cannot tell which block is wrong).
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 4, 64, 2);
    let (ps, _) = make(&c, &dir);
    corrupt(&ps[0], 2048 * 512 + 5 * 4096 + 1, 1); // stripe 0, member 0 = D0, page 5
    let arr = assemble_paths(&ps, &ro()).unwrap();
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    let cb = 64 * 1024;
    assert_eq!(
        rep.mismatches,
        vec![
            (5 * 4096, 4096),
            (cb + 5 * 4096, 4096),
            (2 * cb + 5 * 4096, 4096)
        ]
    );
    assert_eq!(rep.verdicts.len(), 1);
    assert_eq!(rep.verdicts[0].role, None);
    drop(arr);
    // Three-way mirror: the odd copy out is named and repaired.
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 3, 0, 2);
    let (ps, model) = make(&c, &dir);
    corrupt(&ps[2], 2048 * 512 + 300_000, 10);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let rep = sync::run(&arr, SyncMode::Repair, true, &mut |_, _| {}).unwrap();
    assert_eq!(rep.verdicts.len(), 1, "{:?}", rep.verdicts);
    assert_eq!(rep.verdicts[0].role, Some(2));
    assert!(
        rep.verdicts[0].what.contains("outvoted 2 to 1"),
        "{}",
        rep.verdicts[0].what
    );
    arr.stop().unwrap();
    for keep in 0..3 {
        assert!(
            read_all(&ps[keep..keep + 1], &ro()).unwrap() == model,
            "copy {keep}"
        );
    }
}

/// An unclean stop with a write-intent bitmap: only the regions written since the last
/// clean mark are resynced.
#[test]
fn bitmap_limits_resync_after_unclean_stop() {
    for (level, layout, n) in [
        (Level::Raid5, "left-symmetric", 4usize),
        (Level::Raid1, "default", 2),
        (Level::Raid10, "n2", 4),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let ps = member_files(dir.path(), n);
        let mut o = create_options(level, &ps);
        o.layout = Some(names::parse_layout(level, layout).unwrap());
        if level != Level::Raid1 {
            o.chunk_bytes = Some(64 * 1024);
        }
        o.create_size = Some(8 << 20);
        o.bitmap = true;
        o.bitmap_chunk_bytes = Some(128 * 1024);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        arr.write(0, &[1u8; 4096]).unwrap();
        arr.write(3 << 20, &[2u8; 4096]).unwrap();
        arr.flush().unwrap();
        drop(arr); // crash: superblocks say dirty, bits are set
        let arr = assemble_paths(&ps, &rw()).unwrap();
        assert!(arr.needs_resync(), "{level:?}: unclean stop not detected");
        let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
        // Two writes → two dirty bitmap chunks of 256 sectors each.
        assert_eq!(
            rep.sectors_done,
            2 * 256,
            "{level:?}: resync visited {} sectors",
            rep.sectors_done
        );
        arr.stop().unwrap();
        let arr = assemble_paths(&ps, &ro()).unwrap();
        assert!(!arr.needs_resync());
        assert!(sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})
            .unwrap()
            .mismatches
            .is_empty());
    }
}

/// fail → remove → writes while degraded → re-add: with a bitmap only the regions written
/// meanwhile are resynced; without one, everything is.
#[test]
fn re_add_resyncs_only_what_was_missed() {
    use raidkit_engine::rebuild::RebuildOptions;
    for (level, bitmap) in [
        (Level::Raid1, true),
        (Level::Raid5, true),
        (Level::Raid10, true),
        (Level::Raid5, false),
    ] {
        let dir = TempDir::new("rk-engine").unwrap();
        let n = if level == Level::Raid1 { 2 } else { 4 };
        let ps = member_files(dir.path(), n);
        let mut o = create_options(level, &ps);
        if level != Level::Raid1 {
            o.chunk_bytes = Some(64 * 1024);
        }
        o.create_size = Some(8 << 20);
        o.bitmap = bitmap;
        o.bitmap_chunk_bytes = bitmap.then_some(128 * 1024);
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let arr = assemble_paths(&ps, &rw()).unwrap();
        let size = arr.size_bytes() as usize;
        let mut model = vec![0u8; size];
        arr.fail_member(1, "test").unwrap();
        arr.remove_member(&ps[1].display().to_string()).unwrap();
        for (off, byte) in [(100_000usize, 7u8), (size - 50_000, 9u8)] {
            arr.write(off as u64, &[byte; 4096]).unwrap();
            model[off..off + 4096].fill(byte);
        }
        let dev: std::sync::Arc<dyn raidkit_engine::BlockDev> =
            std::sync::Arc::new(raidkit_engine::FileDev::open(&ps[1], true).unwrap());
        let rep = arr
            .re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
            .unwrap();
        assert!(!arr.is_degraded(), "{level:?}");
        let full = if level.has_parity() {
            arr.geometry().stripes() * arr.geometry().chunk_sectors
        } else {
            arr.geometry().used_dev_sectors(1)
        };
        if bitmap {
            assert!(
                rep.sectors <= 2 * 256 + 2 * 128,
                "{level:?}: bitmap re-add resynced {} sectors",
                rep.sectors
            );
            assert!(rep.sectors > 0);
        } else {
            assert_eq!(
                rep.sectors, full,
                "{level:?}: without a bitmap everything is rebuilt"
            );
        }
        arr.stop().unwrap();
        assert!(read_all(&ps, &ro()).unwrap() == model, "{level:?}");
        let a = assemble_paths(&ps, &ro()).unwrap();
        assert!(
            sync::run(&a, SyncMode::Check, true, &mut |_, _| {})
                .unwrap()
                .mismatches
                .is_empty(),
            "{level:?}"
        );
    }
}

/// A hot spare takes over a failed member on its own; events tell the story.
#[test]
fn supervisor_hot_spare_takes_over() {
    use raidkit_engine::supervisor::Supervisor;
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 4, 16, 2);
    let (ps, model) = make(&c, &dir);
    let arr = std::sync::Arc::new(assemble_paths(&ps, &rw()).unwrap());
    let sup = Supervisor::start("t", arr.clone());
    let ev = sup.subscribe();
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    sup.add(&spare, false).unwrap();
    sup.fail(&ps[2].display().to_string()).unwrap();
    // The event thread starts recovery; wait for it.
    let t0 = std::time::Instant::now();
    while arr.is_degraded() && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sup.wait_idle();
    assert!(!arr.is_degraded(), "{:?}", sup.status());
    let expected = [
        "spare_added",
        "member_failed",
        "degraded",
        "rebuild_started",
        "rebuild_finished",
        "spare_activated",
    ];
    // Array events reach the supervisor through its event thread, which may still be
    // delivering them when the job is done: wait for them (bounded).
    let mut kinds: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !expected.iter().all(|k| kinds.iter().any(|x| x == k)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match ev.recv_timeout(left) {
            Ok(e) => kinds.push(e.kind().to_string()),
            Err(_) => break,
        }
    }
    for k in expected {
        assert!(kinds.iter().any(|x| x == k), "missing event {k}: {kinds:?}");
    }
    sup.remove(&ps[2].display().to_string()).unwrap();
    let st = sup.status();
    assert_eq!(st.state, "clean");
    assert_eq!(st.members.len(), 4);
    sup.shutdown().unwrap();
    drop(sup);
    drop(arr);
    let now: Vec<PathBuf> = vec![ps[0].clone(), ps[1].clone(), spare.clone(), ps[3].clone()];
    assert!(read_all(&now, &ro()).unwrap() == model);
    // The failed member, given back, is stale and refused.
    let mut with_old = now.clone();
    with_old.push(ps[2].clone());
    let e = read_all(&with_old, &ro())
        .map(|v| v.len())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("m2.img") && (e.contains("out of date") || e.contains("faulty")),
        "{e}"
    );
}

/// A rebuild that meets an unreadable sector on a survivor keeps going, reports exactly the
/// array bytes it could not reconstruct, and reads there fail instead of returning garbage.
#[test]
fn rebuild_survives_unreadable_sectors_and_reports_the_loss() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2);
    let (ps, model) = make(&c, &dir);
    // Member 0 cannot read device sectors 2048+40 .. 2048+47 (stripe 1; chunk 32 sectors).
    let bad = PathBuf::from(format!("fault:reio@2088-2095:{}", ps[0].display()));
    let arr = assemble_paths(&[bad, ps[2].clone()], &rw()).unwrap();
    arr.add_spare(spare_file(&dir, "s.img", 2), false).unwrap();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!arr.is_degraded(), "the rebuild completed");
    // Stripe 1 of left-symmetric N=3: P on member 1 (rebuilt), data k=0 on member 2 and
    // k=1 on member 0. Member 0's unreadable sectors are data sectors 40..47 = k=1, page 1
    // of the chunk: with the old member 1 gone nothing can supply them. Array bytes:
    // (stripe 1 × 2 data + k 1) × 16 KiB + 4 KiB = 53248, one 4 KiB page.
    let g = arr.geometry().clone();
    let lay = g.stripe(1).unwrap();
    assert_eq!((lay.p, lay.data.clone()), (1, vec![2, 0]));
    assert_eq!(rep.lost, vec![(53248, 4096)]);
    let mut b = vec![0u8; 512];
    let e = arr.read(53248 + 100, &mut b).unwrap_err().to_string();
    assert!(e.contains("data lost"), "{e}");
    // Page 0 of the same chunk was rebuilt: readable and right.
    let mut p0 = vec![0u8; 4096];
    arr.read(49152, &mut p0).unwrap();
    assert!(p0 == model[49152..53248]);
    // Everything else reads back exactly.
    let lost = rep.lost.clone();
    for (i, ch) in model.chunks(4096).enumerate() {
        let o = (i * 4096) as u64;
        if lost.iter().any(|&(lo, ll)| o < lo + ll && lo < o + 4096) {
            continue;
        }
        let mut b = vec![0u8; ch.len()];
        arr.read(o, &mut b).unwrap();
        assert!(b == ch, "offset {o}");
    }
}

/// A subscription made with `subscribe_while` ends when its token is dropped, with no
/// event needed: subscribers that come and go between events pile up nothing, and one
/// still there gets every event.
#[test]
fn subscriptions_end_with_their_token() {
    use raidkit_engine::supervisor::{Event, Supervisor};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 2, 16, 2);
    let (ps, _) = make(&c, &dir);
    let arr = std::sync::Arc::new(assemble_paths(&ps, &rw()).unwrap());
    let sup = Supervisor::start("t", arr);
    let base = sup.subscribers();
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = std::sync::Arc::new(());
    sup.subscribe_while(tx.clone(), &kept);
    for _ in 0..100 {
        let gone = std::sync::Arc::new(());
        sup.subscribe_while(tx.clone(), &gone);
    }
    assert_eq!(sup.subscribers(), base + 1);
    sup.emit(Event::Test { note: "x".into() });
    assert_eq!(rx.recv().unwrap().kind(), "test");
    assert!(rx.try_recv().is_err(), "only the live subscription got it");
    drop(kept);
    assert_eq!(sup.subscribers(), base);
}

/// A mirrored rebuild that meets an unreadable sector loses only the unreadable 4 KiB,
/// not the whole 1 MiB step it was copying (as a parity rebuild and a replace do).
#[test]
fn mirrored_rebuild_loses_only_the_unreadable_pages() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 2, 64, 2);
    let (ps, model) = make(&c, &dir);
    // Member 0 cannot read device sectors 3000..3007: data sectors 952..959 (the data
    // starts at device sector 2048), array bytes 487424.. (4 KiB).
    let bad = PathBuf::from(format!("fault:reio@3000-3007:{}", ps[0].display()));
    let arr = assemble_paths(&[bad], &rw()).unwrap();
    arr.add_spare(spare_file(&dir, "s.img", 2), false).unwrap();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!arr.is_degraded(), "the rebuild completed");
    assert_eq!(rep.lost, vec![(487424, 4096)]);
    let mut b = vec![0u8; 512];
    let e = arr.read(487424, &mut b).unwrap_err().to_string();
    assert!(e.contains("data lost"), "{e}");
    for (i, ch) in model.chunks(4096).enumerate() {
        let o = (i * 4096) as u64;
        if o == 487424 {
            continue;
        }
        let mut b = vec![0u8; ch.len()];
        arr.read(o, &mut b).unwrap();
        assert!(b == ch, "offset {o}");
    }
}

/// A rebuild whose target stops answering (it vanishes after 30 IOs: adding it takes
/// fewer, the rebuild of 64 MiB more) ends with an error that
/// names the target and says what to do, and leaves the array degraded with the target
/// failed (no false "array bytes 0..0" write error).
#[test]
fn a_rebuild_target_that_vanishes_is_named_in_the_error() {
    use raidkit_engine::rebuild::{rebuild, RebuildOptions};
    let dir = TempDir::new("rk-engine").unwrap();
    let c = Case::v12(Level::Raid1, "default", 2, 64, 64);
    let (ps, _) = make(&c, &dir);
    let arr = assemble_paths(&ps[..1], &rw()).unwrap();
    let sp = dir.path().join("sp.img");
    std::fs::File::create(&sp)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let spec = PathBuf::from(format!("fault:vanish@30:{}", sp.display()));
    arr.add_spare(
        raidkit_engine::dev::open_member(&spec, true).unwrap(),
        false,
    )
    .unwrap();
    let e = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(
            &e,
            raidkit_engine::EngineError::CopyTargetFailed { what: "rebuild target", device }
                if device.contains("sp.img")
        ),
        "{e}"
    );
    assert!(e.to_string().contains("add another device"), "{e}");
    assert!(arr.is_degraded());
}
