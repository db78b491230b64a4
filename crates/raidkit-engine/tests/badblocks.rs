//! Bad blocks that survive a restart: a rebuild's unrebuildable sectors are written into
//! the members' bad-block logs (a log is created where there is none), reassembly derives
//! the lost array ranges from the logs, write errors on a member with a log become bad
//! blocks instead of failures, `--update no-bbl` repairs and removes the logs, and a slow
//! member is reported.

use raidkit_engine::array::ArrayEvent;
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_format::v1::{feature, SuperblockV1};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

mod bbl;
use bbl::{cleared, drain, make_raid5, rebuild_onto_spare, rw, sb_and_log};

/// Rebuild over an unreadable source sector → exact loss report, bad blocks recorded (with
/// events) on the target and on the source in newly created logs → stop → reassemble
/// without any fault: reads of exactly the lost range fail, everything else is right.
#[test]
fn rebuild_loss_survives_a_restart_through_the_bad_block_logs() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, model) = make_raid5(&dir, 2, false);
    assert_eq!(sb_and_log(&ps[0]).1, None, "no log unless asked");
    // Member 0 cannot read device sectors 2088..=2095 (stripe 1, data sectors 40..47).
    let bad = PathBuf::from(format!("fault:reio@2088-2095:{}", ps[0].display()));
    let arr = assemble_paths(&[bad, ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    let (sp, rep) = rebuild_onto_spare(&arr, &dir);
    // Stripe 1: P on role 1 (the spare), data k=0 on role 2, k=1 on role 0.
    assert_eq!(rep.lost, vec![(53248, 4096)]);
    let ev = drain(&rx);
    let rec: Vec<&ArrayEvent> = ev
        .iter()
        .filter(|e| matches!(e, ArrayEvent::BadBlockRecorded { .. }))
        .collect();
    assert_eq!(
        rec,
        vec![
            &ArrayEvent::BadBlockRecorded {
                role: 1,
                device: sp.display().to_string(),
                sector: 2088,
                sectors: 8
            },
            &ArrayEvent::BadBlockRecorded {
                role: 0,
                device: format!("{} (fault-injected)", ps[0].display()),
                sector: 2088,
                sectors: 8
            },
        ]
    );
    let created: Vec<(usize, i32)> = ev
        .iter()
        .filter_map(|e| match e {
            ArrayEvent::BadBlockLogCreated { role, offset, .. } => Some((*role, *offset)),
            _ => None,
        })
        .collect();
    assert_eq!(created, vec![(1, 16), (0, 16)]);
    arr.stop().unwrap();
    // On disk: both logs hold exactly that entry, with the BAD_BLOCKS bit; the third
    // member has no log.
    for p in [&ps[0], &sp] {
        let (sb, log) = sb_and_log(p);
        assert_eq!(log, Some(vec![(2088, 8)]), "{}", p.display());
        assert_eq!((sb.bblog_offset, sb.bblog_size), (16, 8));
        assert_ne!(sb.feature_map & feature::BAD_BLOCKS, 0);
    }
    assert_eq!(sb_and_log(&ps[2]).1, None);
    // Restart with healthy devices: the loss is still known.
    let arr = assemble_paths(&[ps[0].clone(), sp.clone(), ps[2].clone()], &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(53248, 4096)]);
    for (o, n) in [
        (53248u64, 4096usize),
        (53248 + 4095, 1),
        (53248 - 512, 1024),
    ] {
        let mut b = vec![0u8; n];
        let e = arr.read(o, &mut b).unwrap_err().to_string();
        assert!(e.contains("data lost") && e.contains("53248..57344"), "{e}");
    }
    let mut b = vec![0u8; 4096];
    arr.read(53248 - 4096, &mut b).unwrap();
    assert!(b == model[53248 - 4096..53248]);
    arr.read(53248 + 4096, &mut b).unwrap();
    assert!(b == model[53248 + 4096..53248 + 8192]);
    for (i, ch) in model.chunks(4096).enumerate() {
        let o = (i * 4096) as u64;
        if o == 53248 {
            continue;
        }
        let mut b = vec![0u8; ch.len()];
        arr.read(o, &mut b).unwrap();
        assert!(b == ch, "offset {o}");
    }
    // The loss cannot be repaired: --update no-bbl refuses and names the range...
    let err = arr.remove_bbl(false).unwrap_err();
    assert_eq!(err.remedy(), Some(raidkit_engine::Remedy::RestoreLostData));
    let e = err.to_string();
    assert!(
        e.contains("[53248..57344]") && e.contains("after forcing the removal"),
        "{e}"
    );
    assert_eq!(sb_and_log(&ps[0]).1, Some(vec![(2088, 8)]));
    // ...and with force the logs go, the range reads as zeros, redundancy is consistent.
    let r = arr.remove_bbl(true).unwrap();
    assert_eq!(r.lost, vec![(53248, 4096)]);
    assert_eq!(arr.lost_ranges(), vec![]);
    assert_eq!(arr.lost_zeroed_ranges(), vec![(53248, 4096)]);
    let mut b = vec![1u8; 4096];
    arr.read(53248, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0));
    assert_consistent(&arr, "after the bad blocks");
    arr.stop().unwrap();
    for p in [&ps[0], &sp, &ps[2]] {
        let (sb, log) = sb_and_log(p);
        assert_eq!(log, None);
        assert_eq!(sb.feature_map & feature::BAD_BLOCKS, 0);
    }
}

/// With `--bbl`, a write error on a member records a bad block instead of failing the
/// member; reads there are reconstructed; `--update no-bbl` rewrites the sectors from
/// redundancy and removes every log. Without a log the member is failed (md).
#[test]
fn write_error_becomes_a_bad_block_and_no_bbl_repairs_it() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, mut model) = make_raid5(&dir, 2, true);
    for p in &ps {
        let (sb, log) = sb_and_log(p);
        assert_eq!((sb.bblog_offset, sb.bblog_size, log), (16, 8, Some(vec![])));
    }
    // Writes to member 1's device sectors 2060..=2061 fail: role 1 holds data k=1 of
    // stripe 0 (left-symmetric), those are its data sectors 12..13.
    let spec = PathBuf::from(format!("fault:weio@2060-2061:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec.clone(), ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    let lay = arr.geometry().stripe(0).unwrap();
    assert_eq!((lay.data.clone(), lay.p), (vec![0, 1], 2));
    // Array bytes of role 1's data sectors 8..16 in stripe 0: chunk k=1 at 16 KiB.
    let off = 16384 + 8 * 512;
    let data = vec![0xA5u8; 4096];
    arr.write(off, &data).unwrap();
    model[off as usize..off as usize + 4096].copy_from_slice(&data);
    assert!(!arr.is_degraded(), "the member was kept");
    let ev = drain(&rx);
    assert!(
        ev.contains(&ArrayEvent::BadBlockRecorded {
            role: 1,
            device: format!("{} (fault-injected)", ps[1].display()),
            sector: 2056,
            sectors: 8
        }),
        "{ev:?}"
    );
    let mut b = vec![0u8; 4096];
    arr.read(off, &mut b).unwrap();
    assert!(b == data, "reconstructed from parity");
    arr.stop().unwrap();
    assert_eq!(sb_and_log(&ps[1]).1, Some(vec![(2056, 8)]));
    // Online removal: the entry is rewritten from redundancy, every log goes.
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![]);
    let rx = arr.subscribe();
    let r = arr.remove_bbl(false).unwrap();
    assert_eq!(r.repaired, vec![(1, 2056, 8)]);
    assert_eq!(r.lost, vec![]);
    assert!(drain(&rx).contains(&ArrayEvent::BadBlockLogRemoved {
        repaired: vec![(1, 2056, 8)],
        lost: vec![]
    }));
    assert_consistent(&arr, "after the bad blocks");
    arr.stop().unwrap();
    let f = std::fs::File::open(&ps[1]).unwrap();
    let mut raw = vec![0u8; 4096];
    f.read_exact_at(&mut raw, 2056 * 512).unwrap();
    assert!(raw == data, "the member itself holds the data again");
    let mut z = vec![1u8; 4096];
    f.read_exact_at(&mut z, 24 * 512).unwrap();
    assert!(z.iter().all(|&x| x == 0), "old log area zeroed");
    for p in &ps {
        let (sb, log) = sb_and_log(p);
        assert_eq!((sb.bblog_offset, sb.bblog_size, log), (0, 0, None));
    }
    let arr = assemble_paths(&ps, &AssembleOptions::default()).unwrap();
    let mut all = vec![0u8; model.len()];
    arr.read(0, &mut all).unwrap();
    assert!(all == model);
    // Without a log: the same write error fails the member.
    let spec = PathBuf::from(format!("fault:weio@2060-2061:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec, ps[2].clone()], &rw()).unwrap();
    arr.write(off, &data).unwrap();
    assert_eq!(arr.missing_roles(), vec![1]);
}

/// A member much slower than its peers raises one SlowMember event.
#[test]
fn slow_member_is_reported() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, model) = make_raid5(&dir, 2, false);
    let spec = PathBuf::from(format!("fault:slow=4ms:{}", ps[0].display()));
    let arr = assemble_paths(&[spec.clone(), ps[1].clone(), ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    // Chunk-sized reads: every chunk of role 0 is read from role 0.
    let mut b = vec![0u8; 16384];
    for o in (0..(96 * 16384u64).min(model.len() as u64)).step_by(16384) {
        arr.read(o, &mut b).unwrap();
    }
    let slow: Vec<ArrayEvent> = drain(&rx)
        .into_iter()
        .filter(|e| matches!(e, ArrayEvent::SlowMember { .. }))
        .collect();
    assert!(!slow.is_empty(), "no SlowMember event");
    for e in &slow {
        let ArrayEvent::SlowMember {
            role,
            device,
            member_us,
            peers_us,
        } = e
        else {
            unreachable!()
        };
        assert_eq!(
            (*role, device.clone()),
            (0, format!("{} (fault-injected)", ps[0].display()))
        );
        assert!(*member_us >= 5 * peers_us, "{e:?}");
    }
}

/// 0.90 metadata has no bad-block log: the loss is still recorded in memory (reads fail,
/// `lost_ranges` lists it) and a loud event says it will not survive a restart.
#[test]
fn without_a_log_format_the_loss_is_kept_in_memory_and_said_loudly() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let ps = member_files(dir.path(), 3);
    let mut o = create_options(Level::Raid5, &ps);
    o.chunk_bytes = Some(16 * 1024);
    o.create_size = Some(2 << 20);
    o.metadata = raidkit_engine::sb::Metadata::V090;
    o.bbl = true;
    let err = create(&o, &mut |_, _| {}).unwrap_err();
    assert_eq!(
        err.remedy(),
        Some(raidkit_engine::Remedy::BadBlockLogNeeds1x)
    );
    let e = err.to_string();
    assert!(e.contains("0.90") && e.contains("bad-block log"), "{e}");
    o.bbl = false;
    let arr = create(&o, &mut |_, _| {}).unwrap();
    arr.stop().unwrap();
    // 0.90 data starts at sector 0: data sectors 40..47 of member 0.
    let bad = PathBuf::from(format!("fault:reio@40-47:{}", ps[0].display()));
    let arr = assemble_paths(&[bad, ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    let (_, rep) = rebuild_onto_spare(&arr, &dir);
    assert_eq!(rep.lost, vec![(53248, 4096)]);
    assert_eq!(arr.lost_ranges(), vec![(53248, 4096)]);
    let not: Vec<usize> = drain(&rx)
        .into_iter()
        .filter_map(|e| match e {
            ArrayEvent::BadBlockNotPersisted { role, reason, .. } => {
                assert!(reason.contains("0.90"), "{reason}");
                Some(role)
            }
            _ => None,
        })
        .collect();
    assert_eq!(not, vec![1, 0]);
    let bb: Vec<String> = arr
        .bad_blocks()
        .into_iter()
        .map(|b| format!("{} {:?} {}", b.role, b.ranges, b.logged))
        .collect();
    assert_eq!(bb, vec!["0 [(40, 8)] false", "1 [(40, 8)] false"]);
    let mut b = vec![0u8; 512];
    assert!(arr.read(53248, &mut b).is_err());
    // A write over it makes it good in memory too (nothing to persist).
    let rx = arr.subscribe();
    arr.write(53248, &[0x3Cu8; 4096]).unwrap();
    let ev = drain(&rx);
    assert_eq!(cleared(&ev), vec![(0, 40, 8), (1, 40, 8)]);
    assert!(!ev
        .iter()
        .any(|e| matches!(e, ArrayEvent::BadBlockNotPersisted { .. })));
    assert_eq!(arr.lost_ranges(), vec![]);
    assert!(arr.bad_blocks().is_empty());
    arr.read(53248, &mut b).unwrap();
    assert!(b == [0x3Cu8; 512]);
}

/// `--bbl` puts the log where mdadm does: 1.0 right below the superblock (below it the
/// bitmap), 1.2 after the bitmap.
#[test]
fn create_bbl_uses_mdadms_placement() {
    for (meta, bitmap, want_bm, want_bbl) in [
        ("1.0", true, -16, -8),
        ("1.2", true, 8, 16),
        ("1.2", false, 0, 16),
    ] {
        let dir = TempDir::new("rk-bbl").unwrap();
        let ps = member_files(dir.path(), 2);
        let mut o = create_options(Level::Raid1, &ps);
        o.create_size = Some(64 << 20);
        o.metadata = raidkit_engine::sb::Metadata::parse(meta).unwrap();
        o.bitmap = bitmap;
        o.bbl = true;
        o.assume_clean = true;
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let f = std::fs::File::open(&ps[0]).unwrap();
        let so = if meta == "1.0" { 131056 } else { 8 };
        let mut b = vec![0u8; 4096];
        f.read_exact_at(&mut b, so * 512).unwrap();
        let sb = SuperblockV1::parse(&b).unwrap();
        assert_eq!(
            (
                sb.bitmap_offset,
                sb.bblog_offset,
                sb.bblog_size,
                sb.bblog_shift
            ),
            (want_bm, want_bbl, 8, 0),
            "{meta} bitmap={bitmap}"
        );
        assert_eq!(sb.feature_map & feature::BAD_BLOCKS, 0);
        let mut log = vec![0u8; 4096];
        f.read_exact_at(&mut log, (so as i64 + i64::from(want_bbl)) as u64 * 512)
            .unwrap();
        assert!(log.iter().all(|&x| x == 0xff), "an empty log");
    }
}
