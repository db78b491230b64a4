//! Bad blocks that survive a restart: a rebuild's unrebuildable sectors are written into
//! the members' bad-block logs (a log is created where there is none), reassembly derives
//! the lost array ranges from the logs, write errors on a member with a log become bad
//! blocks instead of failures, `--update no-bbl` repairs and removes the logs, and a slow
//! member is reported.

use raidkit_engine::array::ArrayEvent;
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions, RebuildReport};
use raidkit_engine::{Array, EngineError};
use raidkit_format::badblocks;
use raidkit_format::v1::{feature, SuperblockV1};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// A 3-member 1.2 RAID5 (16 KiB chunks) of `mib` MiB members holding a tagged pattern.
fn make_raid5(dir: &TempDir, mib: u64, bbl: bool) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir.path(), 3);
    let mut o = create_options(Level::Raid5, &ps);
    o.chunk_bytes = Some(16 * 1024);
    o.create_size = Some(mib << 20);
    o.name = "t".into();
    o.bbl = bbl;
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let mut model = vec![0u8; arr.size_bytes() as usize];
    fill_tagged(7, 0, &mut model);
    arr.write(0, &model).unwrap();
    arr.stop().unwrap();
    (ps, model)
}

/// The 1.2 superblock of a member and its decoded bad-block log (None: no log).
fn sb_and_log(p: &Path) -> (SuperblockV1, Option<Vec<(u64, u64)>>) {
    let f = std::fs::File::open(p).unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 8 * 512).unwrap();
    let sb = SuperblockV1::parse(&b).unwrap();
    if sb.bblog_size == 0 || sb.bblog_offset == 0 {
        return (sb, None);
    }
    let at = (sb.super_offset as i64 + i64::from(sb.bblog_offset)) as u64;
    let mut log = vec![0u8; usize::from(sb.bblog_size) * 512];
    f.read_exact_at(&mut log, at * 512).unwrap();
    let list = badblocks::parse(&log, sb.bblog_shift)
        .unwrap()
        .into_iter()
        .map(|r| (r.start, r.len))
        .collect();
    (sb, Some(list))
}

fn drain(rx: &std::sync::mpsc::Receiver<ArrayEvent>) -> Vec<ArrayEvent> {
    rx.try_iter().collect()
}

fn spare(dir: &TempDir, name: &str, mib: u64) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    p
}

/// Add a blank 2 MiB spare `s.img` in `dir` to `arr` and rebuild onto it: the spare's
/// path and the rebuild's report.
fn rebuild_onto_spare(arr: &Array, dir: &TempDir) -> (PathBuf, RebuildReport) {
    let sp = spare(dir, "s.img", 2);
    arr.add_spare(
        std::sync::Arc::new(raidkit_engine::FileDev::open(&sp, true).unwrap()),
        false,
    )
    .unwrap();
    let rep = rebuild(arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    (sp, rep)
}

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

/// Rebuild of a 3-member RAID5 over an unreadable source sector: role 0 (data k=1 of
/// stripe 1) and role 1 (the rebuilt P) hold no valid data at device sectors 2088..2095,
/// array bytes 53248..57344 are lost. Returns the paths (role order) and the model.
fn lost_after_rebuild(dir: &TempDir) -> (Vec<PathBuf>, Vec<u8>) {
    let (ps, model) = make_raid5(dir, 2, false);
    let bad = PathBuf::from(format!("fault:reio@2088-2095:{}", ps[0].display()));
    let arr = assemble_paths(&[bad, ps[2].clone()], &rw()).unwrap();
    let (sp, rep) = rebuild_onto_spare(&arr, dir);
    assert_eq!(rep.lost, vec![(53248, 4096)]);
    arr.stop().unwrap();
    (vec![ps[0].clone(), sp, ps[2].clone()], model)
}

/// Raw bytes of a member file.
fn raw(p: &Path, sector: u64, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(p).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, sector * 512).unwrap();
    b
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// (role, sector, sectors) of each bad-block event: those recorded, or those cleared.
fn bad_block_events(ev: &[ArrayEvent], want_recorded: bool) -> Vec<(usize, u64, u64)> {
    ev.iter()
        .filter_map(|e| match (e, want_recorded) {
            (
                ArrayEvent::BadBlockRecorded {
                    role,
                    sector,
                    sectors,
                    ..
                },
                true,
            )
            | (
                ArrayEvent::BadBlockCleared {
                    role,
                    sector,
                    sectors,
                    ..
                },
                false,
            ) => Some((*role, *sector, *sectors)),
            _ => None,
        })
        .collect()
}

fn cleared(ev: &[ArrayEvent]) -> Vec<(usize, u64, u64)> {
    bad_block_events(ev, false)
}

fn recorded(ev: &[ArrayEvent]) -> Vec<(usize, u64, u64)> {
    bad_block_events(ev, true)
}

/// A client write over part of a lost range makes exactly that part valid: the bad
/// entries under it leave memory and the on-disk logs (with events), the lost range
/// shrinks, the new bytes read back, the rest still fails; parity is recomputed (not
/// read-modify-written from the bad block). Writing the rest clears everything and a
/// check finds no mismatch.
#[test]
fn a_write_over_a_lost_range_makes_exactly_that_part_valid() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, mut model) = lost_after_rebuild(&dir);
    // What the bad sectors hold is garbage: a read-modify-write that used it would leave
    // wrong parity behind.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ps[0])
        .unwrap()
        .write_all_at(&[0xEEu8; 4096], 2088 * 512)
        .unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(53248, 4096)]);
    let rx = arr.subscribe();
    // The first 2 KiB of the lost 4 KiB: device sectors 2088..2091 of roles 0 and 1.
    let new = vec![0x5Au8; 2048];
    arr.write(53248, &new).unwrap();
    model[53248..55296].copy_from_slice(&new);
    let ev = drain(&rx);
    assert_eq!(cleared(&ev), vec![(0, 2088, 4), (1, 2088, 4)]);
    assert_eq!(recorded(&ev), vec![]);
    assert_eq!(arr.lost_ranges(), vec![(55296, 2048)]);
    let bb: Vec<(usize, Vec<(u64, u64)>)> = arr
        .bad_blocks()
        .into_iter()
        .map(|b| (b.role, b.ranges))
        .collect();
    assert_eq!(bb, vec![(0, vec![(2092, 4)]), (1, vec![(2092, 4)])]);
    // On disk at once (not only at stop).
    assert_eq!(sb_and_log(&ps[0]).1, Some(vec![(2092, 4)]));
    assert_eq!(sb_and_log(&ps[1]).1, Some(vec![(2092, 4)]));
    let mut b = vec![0u8; 2048];
    arr.read(53248, &mut b).unwrap();
    assert!(b == new);
    let e = arr.read(55296, &mut b).unwrap_err().to_string();
    assert!(e.contains("data lost") && e.contains("55296..57344"), "{e}");
    let e = arr
        .read(53248, &mut vec![0u8; 4096])
        .unwrap_err()
        .to_string();
    assert!(e.contains("55296..57344"), "{e}");
    // Parity of the written rows is right: P (role 1) = k0 (role 2) ^ k1 (role 0).
    let (p, k0, k1) = (
        raw(&ps[1], 2088, 2048),
        raw(&ps[2], 2088, 2048),
        raw(&ps[0], 2088, 2048),
    );
    assert!(k1 == new, "role 0 holds the new data");
    assert!(
        p == xor(&k0, &k1),
        "parity recomputed over the written rows"
    );
    arr.stop().unwrap();
    // After a restart: the same.
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(55296, 2048)]);
    let rx = arr.subscribe();
    // The rest, inside a larger write (whole stripe rows 0..16 of data block k=1).
    let new2 = vec![0xC3u8; 8192];
    arr.write(49152, &new2).unwrap();
    model[49152..57344].copy_from_slice(&new2);
    assert_eq!(cleared(&drain(&rx)), vec![(0, 2092, 4), (1, 2092, 4)]);
    assert_eq!(arr.lost_ranges(), vec![]);
    assert!(arr.bad_blocks().is_empty());
    for p in &ps[..2] {
        let (sb, log) = sb_and_log(p);
        assert_eq!(log, Some(vec![]), "{}", p.display());
        assert_eq!(sb.feature_map & feature::BAD_BLOCKS, 0);
    }
    assert_consistent(&arr, "after the bad blocks");
    let mut all = vec![0u8; model.len()];
    arr.read(0, &mut all).unwrap();
    assert!(all == model);
    arr.stop().unwrap();
}

/// Two data blocks of a RAID5 row are lost (write errors on a log-carrying array). A write
/// of one of them cannot recompute parity: the parity is recorded bad first, the data is
/// written and made good, only the other block stays lost. Writing that one too makes
/// the row whole again (parity recomputed, every entry cleared, check clean).
#[test]
fn a_write_next_to_another_lost_block_marks_parity_stale_then_heals() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, mut model) = make_raid5(&dir, 2, true);
    // Stripe 1 rows 8..15: data k=0 on role 2, k=1 on role 0, P on role 1.
    let f0 = PathBuf::from(format!("fault:weio@2088-2095:{}", ps[0].display()));
    let f2 = PathBuf::from(format!("fault:weio@2088-2095:{}", ps[2].display()));
    let arr = assemble_paths(&[f0, ps[1].clone(), f2], &rw()).unwrap();
    let old = vec![0x11u8; 4096];
    arr.write(36864, &old).unwrap();
    // The second block's write fails too: the row has no redundancy left for it, and the
    // client is told (not acknowledged).
    assert!(matches!(
        arr.write(53248, &old),
        Err(EngineError::WriteFailed { .. })
    ));
    assert_eq!(arr.lost_ranges(), vec![(36864, 4096), (53248, 4096)]);
    arr.stop().unwrap();
    for p in [&ps[0], &ps[2]] {
        assert_eq!(sb_and_log(p).1, Some(vec![(2088, 8)]));
    }
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(36864, 4096), (53248, 4096)]);
    let rx = arr.subscribe();
    let k1 = vec![0x77u8; 4096];
    arr.write(53248, &k1).unwrap();
    model[53248..57344].copy_from_slice(&k1);
    let ev = drain(&rx);
    assert_eq!(recorded(&ev), vec![(1, 2088, 8)], "parity marked stale");
    assert_eq!(cleared(&ev), vec![(0, 2088, 8)]);
    let first = |want: fn(&ArrayEvent) -> bool| ev.iter().position(want).unwrap();
    assert!(
        first(|e| matches!(e, ArrayEvent::BadBlockRecorded { .. }))
            < first(|e| matches!(e, ArrayEvent::BadBlockCleared { .. }))
    );
    assert_eq!(arr.lost_ranges(), vec![(36864, 4096)]);
    assert_eq!(sb_and_log(&ps[0]).1, Some(vec![]));
    assert_eq!(sb_and_log(&ps[1]).1, Some(vec![(2088, 8)]));
    assert_eq!(sb_and_log(&ps[2]).1, Some(vec![(2088, 8)]));
    let mut b = vec![0u8; 4096];
    arr.read(53248, &mut b).unwrap();
    assert!(b == k1);
    assert!(arr.read(36864, &mut b).is_err());
    // The other block: every data block is known now, so parity is recomputed.
    let k0 = vec![0x99u8; 4096];
    arr.write(36864, &k0).unwrap();
    model[36864..40960].copy_from_slice(&k0);
    let ev = drain(&rx);
    assert_eq!(recorded(&ev), vec![]);
    assert_eq!(cleared(&ev), vec![(2, 2088, 8), (1, 2088, 8)]);
    assert_eq!(arr.lost_ranges(), vec![]);
    for p in &ps {
        assert_eq!(sb_and_log(p).1, Some(vec![]), "{}", p.display());
    }
    assert!(raw(&ps[1], 2088, 4096) == xor(&k0, &k1));
    assert_consistent(&arr, "after the bad blocks");
    let mut all = vec![0u8; model.len()];
    arr.read(0, &mut all).unwrap();
    assert!(all == model);
}

/// RAID1: both copies of a range bad (writes to both failed) → lost; a later write of
/// part of it clears exactly that part on both mirrors.
#[test]
fn raid1_write_over_a_lost_range_clears_both_copies() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(2 << 20);
    o.bbl = true;
    o.assume_clean = true;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let f: Vec<PathBuf> = ps
        .iter()
        .map(|p| PathBuf::from(format!("fault:weio@2100-2107:{}", p.display())))
        .collect();
    let arr = assemble_paths(&f, &rw()).unwrap();
    // Data sectors 52..59 (data offset 2048): array bytes 26624..30720.
    let e = arr.write(26624, &[1u8; 4096]).unwrap_err().to_string();
    assert!(e.contains("no member"), "{e}");
    arr.stop().unwrap();
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(26624, 4096)]);
    let rx = arr.subscribe();
    let new = vec![0xE1u8; 1024];
    arr.write(26624 + 1024, &new).unwrap();
    assert_eq!(cleared(&drain(&rx)), vec![(0, 2102, 2), (1, 2102, 2)]);
    assert_eq!(arr.lost_ranges(), vec![(26624, 1024), (28672, 2048)]);
    for p in &ps {
        assert_eq!(sb_and_log(p).1, Some(vec![(2100, 2), (2104, 4)]));
    }
    let mut b = vec![0u8; 1024];
    arr.read(26624 + 1024, &mut b).unwrap();
    assert!(b == new);
    assert!(arr.read(26624, &mut b).is_err());
    assert!(arr.read(28672, &mut b).is_err());
}

/// A read error that cannot be corrected (the rewrite fails too) on a member with a
/// log: the block is recorded bad (event) and the member kept; without a log the member
/// is failed (md).
#[test]
fn uncorrectable_read_error_becomes_a_bad_block_with_a_log() {
    for bbl in [true, false] {
        let dir = TempDir::new("rk-bbl").unwrap();
        let (ps, model) = make_raid5(&dir, 2, bbl);
        let spec = PathBuf::from(format!("fault:eio@2060-2061:{}", ps[1].display()));
        let arr = assemble_paths(&[ps[0].clone(), spec, ps[2].clone()], &rw()).unwrap();
        let rx = arr.subscribe();
        // Role 1's data sectors 8..16 of stripe 0 = array bytes 20480..24576.
        let mut b = vec![0u8; 4096];
        arr.read(20480, &mut b).unwrap();
        assert!(b == model[20480..24576], "reconstructed");
        let ev = drain(&rx);
        if bbl {
            assert_eq!(recorded(&ev), vec![(1, 2056, 8)]);
            assert_eq!(arr.missing_roles(), Vec::<usize>::new());
            assert!(!ev
                .iter()
                .any(|e| matches!(e, ArrayEvent::MemberFailed { .. })));
            assert_eq!(sb_and_log(&ps[1]).1, Some(vec![(2056, 8)]));
            // Never read again: served from parity without touching the bad sectors.
            arr.read(20480, &mut b).unwrap();
            assert!(b == model[20480..24576]);
            assert_eq!(recorded(&drain(&rx)), vec![]);
        } else {
            assert_eq!(recorded(&ev), vec![]);
            assert_eq!(arr.missing_roles(), vec![1]);
            assert_eq!(sb_and_log(&ps[1]).1, None);
        }
    }
}

/// Fill member `p`'s (1.2, log at +16) bad-block log with 512 one-sector entries below
/// the data area, so that no further entry fits.
fn fill_log(p: &Path) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 8 * 512).unwrap();
    let mut sb = SuperblockV1::parse(&b).unwrap();
    let ranges: Vec<badblocks::BadRange> = (0..512)
        .map(|i| badblocks::BadRange {
            start: 100 + 2 * i,
            len: 1,
        })
        .collect();
    f.write_all_at(&badblocks::encode(&ranges, 0, 4096).unwrap(), 24 * 512)
        .unwrap();
    sb.feature_map |= feature::BAD_BLOCKS;
    f.write_all_at(&sb.encode()[..sb.write_len()], 8 * 512)
        .unwrap();
}

/// A full bad-block log: a write error fails the member when the array runs without it
/// (md), and keeps it when it would not; both loudly.
#[test]
fn full_log_fails_the_member_only_if_the_array_survives() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, _) = make_raid5(&dir, 2, true);
    fill_log(&ps[1]);
    let spec = PathBuf::from(format!("fault:weio@2060-2061:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec.clone(), ps[2].clone()], &rw()).unwrap();
    assert_eq!(arr.bad_blocks()[0].ranges.len(), 512);
    let rx = arr.subscribe();
    arr.write(20480, &[3u8; 4096]).unwrap();
    let ev = drain(&rx);
    let np: Vec<&ArrayEvent> = ev
        .iter()
        .filter(|e| matches!(e, ArrayEvent::BadBlockNotPersisted { .. }))
        .collect();
    assert_eq!(np.len(), 1, "{ev:?}");
    let ArrayEvent::BadBlockNotPersisted { role, reason, .. } = np[0] else {
        unreachable!()
    };
    assert_eq!(*role, 1);
    assert!(
        reason.contains("cannot hold") && reason.contains("member is failed"),
        "{reason}"
    );
    assert_eq!(arr.missing_roles(), vec![1]);
    let mut b = vec![0u8; 4096];
    arr.read(20480, &mut b).unwrap();
    assert!(b == [3u8; 4096]);
    drop(arr);
    // Degraded already (role 0 absent): failing role 1 would stop the array, so it stays.
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, model) = make_raid5(&dir, 2, true);
    fill_log(&ps[1]);
    let spec = PathBuf::from(format!("fault:weio@2060-2061:{}", ps[1].display()));
    let arr = assemble_paths(&[spec, ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    // Degraded and the write failed: the data is on no member, and the write says so.
    assert!(matches!(
        arr.write(20480, &[3u8; 4096]),
        Err(EngineError::WriteFailed { .. })
    ));
    let ev = drain(&rx);
    let reason = ev
        .iter()
        .find_map(|e| match e {
            ArrayEvent::BadBlockNotPersisted {
                role: 1, reason, ..
            } => Some(reason.clone()),
            _ => None,
        })
        .unwrap();
    assert!(reason.contains("KEPT"), "{reason}");
    assert!(!ev
        .iter()
        .any(|e| matches!(e, ArrayEvent::MemberFailed { .. })));
    assert_eq!(arr.missing_roles(), vec![0]);
    assert_eq!(arr.lost_ranges(), vec![(4096, 4096), (20480, 4096)]);
    // The sectors are known bad in memory: the range reads as an error, never stale data.
    assert!(arr.read(20480, &mut b).is_err());
    arr.read(0, &mut b).unwrap();
    assert!(b == model[..4096]);
}

/// `--update no-bbl` refused because data is lost: a failure to write the shrunk logs is
/// part of the refusal message.
#[test]
fn no_bbl_refusal_reports_a_failed_log_rewrite() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, _) = lost_after_rebuild(&dir);
    // Role 0's log area (1.2: superblock at 8, log at +16) cannot be written.
    let spec = PathBuf::from(format!("fault:weio@24-31:{}", ps[0].display()));
    let arr = assemble_paths(&[spec, ps[1].clone(), ps[2].clone()], &rw()).unwrap();
    let e = arr.remove_bbl(false).unwrap_err().to_string();
    assert!(e.contains("[53248..57344]"), "{e}");
    assert!(
        e.contains("writing the shrunk bad-block logs failed (role 0: writing")
            && e.contains("bad-block log failed"),
        "{e}"
    );
    // A healthy member's rewrite does not appear.
    assert!(!e.contains("role 1:"), "{e}");
}

/// The ordering rules, with the log writes failing (what a crash between data and log
/// leaves behind): (a) entries made good whose log cannot be rewritten stay listed on
/// disk, so after a restart the sector is reconstructed from the fresh parity (the new
/// data), never read stale; (b) if parity cannot be recorded stale before the data
/// changes, nothing is written and the write fails, naming why.
#[test]
fn log_write_failures_never_expose_stale_data() {
    // (a)
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, _) = lost_after_rebuild(&dir);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ps[0])
        .unwrap()
        .write_all_at(&[0xEEu8; 4096], 2088 * 512)
        .unwrap();
    // Role 0's log (superblock at 8, log at +16) cannot be written.
    let spec = PathBuf::from(format!("fault:weio@24-31:{}", ps[0].display()));
    let arr = assemble_paths(&[spec, ps[1].clone(), ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    let new = vec![0x6Bu8; 4096];
    arr.write(53248, &new).unwrap();
    let ev = drain(&rx);
    assert_eq!(cleared(&ev), vec![(0, 2088, 8), (1, 2088, 8)]);
    let np: Vec<(usize, String)> = ev
        .iter()
        .filter_map(|e| match e {
            ArrayEvent::BadBlockNotPersisted { role, reason, .. } => Some((*role, reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(np.len(), 1, "{ev:?}");
    assert_eq!(np[0].0, 0);
    assert!(
        np[0].1.contains("still lists the rewritten sectors"),
        "{}",
        np[0].1
    );
    drop(arr);
    assert_eq!(sb_and_log(&ps[0]).1, Some(vec![(2088, 8)]));
    assert_eq!(sb_and_log(&ps[1]).1, Some(vec![]));
    let arr = assemble_paths(&ps, &rw()).unwrap();
    assert_eq!(arr.lost_ranges(), vec![]);
    let mut b = vec![0u8; 4096];
    arr.read(53248, &mut b).unwrap();
    assert!(b == new, "reconstructed from the fresh parity");
    drop(arr);
    // (b)
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, _) = make_raid5(&dir, 2, true);
    let f0 = PathBuf::from(format!("fault:weio@2088-2095:{}", ps[0].display()));
    let f2 = PathBuf::from(format!("fault:weio@2088-2095:{}", ps[2].display()));
    let arr = assemble_paths(&[f0, ps[1].clone(), f2], &rw()).unwrap();
    arr.write(36864, &[0x11u8; 4096]).unwrap();
    // Not acknowledged: this block's data is on no member (see the test above).
    assert!(arr.write(53248, &[0x11u8; 4096]).is_err());
    arr.stop().unwrap();
    let before = raw(&ps[0], 2088, 4096);
    // Role 1 (the parity) cannot have its log written.
    let spec = PathBuf::from(format!("fault:weio@24-31:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec, ps[2].clone()], &rw()).unwrap();
    let e = arr.write(53248, &[0x77u8; 4096]).unwrap_err().to_string();
    assert!(
        e.contains("parity on role 1 cannot be recomputed")
            && e.contains("marking that parity stale failed")
            && e.contains("nothing was written"),
        "{e}"
    );
    assert!(
        raw(&ps[0], 2088, 4096) == before,
        "the data block is untouched"
    );
    assert_eq!(arr.lost_ranges(), vec![(36864, 4096), (53248, 4096)]);
    assert_eq!(sb_and_log(&ps[1]).1, Some(vec![]));
}

#[test]
fn a_write_whose_data_ends_up_with_no_valid_copy_is_not_acknowledged() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, _model) = make_raid5(&dir, 2, true);
    // Stripe 0's data block k=1 (role 1) and its parity (role 2) both refuse the write of
    // their data sectors 8..16 (device sectors 2056..2063): each becomes a bad block, and
    // the new data is then on no member at all.
    let f1 = PathBuf::from(format!("fault:weio@2056-2063:{}", ps[1].display()));
    let f2 = PathBuf::from(format!("fault:weio@2056-2063:{}", ps[2].display()));
    let arr = assemble_paths(&[ps[0].clone(), f1, f2], &rw()).unwrap();
    let lay = arr.geometry().stripe(0).unwrap();
    assert_eq!((lay.data.clone(), lay.p), (vec![0, 1], 2));
    let off = 16384 + 8 * 512;
    match arr.write(off, &[0xA5u8; 4096]) {
        Err(EngineError::WriteFailed { offset, end, why }) => {
            assert_eq!((offset, end), (off, off + 4096), "{why}");
            assert!(why.contains("no valid copy"), "{why}");
        }
        other => panic!("the lost write was acknowledged: {other:?}"),
    }
    assert_eq!(arr.lost_ranges(), vec![(off, 4096)]);
    let mut b = vec![0u8; 4096];
    assert!(
        arr.read(off, &mut b).is_err(),
        "no wrong bytes are returned"
    );
    // A write elsewhere in the array is unaffected.
    arr.write(0, &[1u8; 4096]).unwrap();
}
