//! Bad blocks and writes: a write over a lost range makes exactly that part valid (RAID5
//! and RAID1), an uncorrectable read error becomes a bad block, a full log fails a member
//! only if the array survives, and a failed log write never exposes stale data or
//! acknowledges a write left with no valid copy.

use raidkit_engine::array::ArrayEvent;
use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::EngineError;
use raidkit_format::badblocks;
use raidkit_format::v1::{feature, SuperblockV1};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod bbl;
use bbl::{cleared, drain, make_raid5, rebuild_onto_spare, recorded, rw, sb_and_log};

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
    let ranges: Vec<badblocks::BadRange> = (0..512)
        .map(|i| badblocks::BadRange {
            start: 100 + 2 * i,
            len: 1,
        })
        .collect();
    write_log(p, &ranges);
}

/// Write `ranges` as they are (in this order, overlaps included) into member `p`'s (1.2,
/// log at +16) bad-block log, as a buggy or hostile writer could.
fn write_log(p: &Path, ranges: &[badblocks::BadRange]) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 8 * 512).unwrap();
    let mut sb = SuperblockV1::parse(&b).unwrap();
    f.write_all_at(&badblocks::encode(ranges, 0, 4096).unwrap(), 24 * 512)
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

/// A log whose entries overlap and are unsorted (md merges them when it loads the log):
/// a write error on that member still lands in the on-disk log (were the overlaps counted
/// twice, a new range as long as the overlap looked already known and was kept in memory
/// only: after a restart its stale sectors would be read).
#[test]
fn a_new_bad_block_reaches_a_log_whose_entries_overlap() {
    let dir = TempDir::new("rk-bbl").unwrap();
    let (ps, model) = make_raid5(&dir, 2, true);
    let r = |start: u64, len: u64| badblocks::BadRange { start, len };
    write_log(&ps[1], &[r(3008, 4), r(3000, 8), r(3000, 8)]);
    let spec = PathBuf::from(format!("fault:weio@2060-2061:{}", ps[1].display()));
    let arr = assemble_paths(&[ps[0].clone(), spec, ps[2].clone()], &rw()).unwrap();
    let rx = arr.subscribe();
    arr.write(20480, &[3u8; 4096]).unwrap();
    let ev = drain(&rx);
    assert_eq!(recorded(&ev), vec![(1, 2056, 8)], "{ev:?}");
    assert_eq!(arr.missing_roles(), Vec::<usize>::new());
    arr.stop().unwrap();
    assert_eq!(
        sb_and_log(&ps[1]).1,
        Some(vec![(2056, 8), (3000, 12)]),
        "the new range is on disk, the old ones merged"
    );
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let mut b = vec![0u8; 4096];
    arr.read(20480, &mut b).unwrap();
    assert!(b == [3u8; 4096]);
    arr.read(16384, &mut b).unwrap();
    assert!(b == model[16384..20480]);
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
