//! A pass (check, repair, resync) that meets a member's read error writes the block back
//! from redundancy, as md does, so the drive can remap the sector; but only what the
//! redundancy vouches for: never data rebuilt from parity a resync does not trust yet, nor
//! from a stripe found inconsistent.
//!
//! Each test hides wrong bytes under an unreadable range (a fault-injected member): they
//! stay there unless the pass writes the block back, so a member's file tells exactly
//! whether it did, and with which bytes.

use raidkit_engine::array::ArrayEvent;
use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::sync::{self, SyncMode, SyncReport};
use raidkit_layout::Level;
use raidkit_testkit::arrays::data_offset_bytes;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod cases;
use cases::{make, ro, rw, Case};

const CHUNK_SECTORS: u64 = 32;
const CHUNK_BYTES: usize = CHUNK_SECTORS as usize * 512;

fn read_at(p: &Path, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    std::fs::File::open(p)
        .unwrap()
        .read_exact_at(&mut b, at)
        .unwrap();
    b
}

fn write_at(p: &Path, at: u64, b: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(b, at).unwrap();
}

/// Member `role`'s chunk of stripe 0: its bytes flipped on the file, and its first sector
/// made unreadable. Returns the original bytes and the fault-injecting path to assemble.
fn hide_wrong_bytes(ps: &[PathBuf], role: usize) -> (Vec<u8>, PathBuf) {
    let off = data_offset_bytes(&ps[role]);
    let good = read_at(&ps[role], off, CHUNK_BYTES);
    let bad: Vec<u8> = good.iter().map(|b| b ^ 0x5a).collect();
    write_at(&ps[role], off, &bad);
    let sector = off / 512;
    let spec = format!("fault:reio@{sector}:{}", ps[role].display());
    (good, PathBuf::from(spec))
}

/// Run a pass over the array of `paths` (writable or not); its report and its
/// `ReadErrorCorrected` events as (role, member sector, sectors).
fn pass(paths: &[PathBuf], writable: bool, mode: SyncMode) -> (SyncReport, Vec<(usize, u64, u64)>) {
    let arr = assemble_paths(paths, &if writable { rw() } else { ro() }).unwrap();
    let ev = arr.subscribe();
    let rep = sync::run(&arr, mode, true, &mut |_, _| {}).unwrap();
    arr.stop().unwrap();
    let fixed = ev
        .try_iter()
        .filter_map(|e| match e {
            ArrayEvent::ReadErrorCorrected {
                role,
                sector,
                sectors,
                ..
            } => Some((role, sector, sectors)),
            _ => None,
        })
        .collect();
    (rep, fixed)
}

fn with_fault(ps: &[PathBuf], role: usize, spec: &Path) -> Vec<PathBuf> {
    let mut v = ps.to_vec();
    v[role] = spec.to_path_buf();
    v
}

fn stripe0(ps: &[PathBuf]) -> raidkit_layout::StripeLayout {
    let arr = assemble_paths(ps, &ro()).unwrap();
    let lay = arr.geometry().stripe(0).unwrap();
    drop(arr);
    lay
}

#[test]
fn a_check_writes_back_a_data_block_it_could_not_read() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[1];
    let (good, spec) = hide_wrong_bytes(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!(rep.sectors_read_error_rewritten, CHUNK_SECTORS);
    let sector = data_offset_bytes(&ps[role]) / 512;
    assert_eq!(fixed, vec![(role, sector, CHUNK_SECTORS)]);
    let off = data_offset_bytes(&ps[role]);
    assert!(
        read_at(&ps[role], off, CHUNK_BYTES) == good,
        "the block written back"
    );
}

#[test]
fn a_resync_writes_back_parity_it_could_not_read() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).p;
    let (good, spec) = hide_wrong_bytes(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Resync);
    assert_eq!(rep.sectors_read_error_rewritten, CHUNK_SECTORS);
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    let off = data_offset_bytes(&ps[role]);
    assert!(
        read_at(&ps[role], off, CHUNK_BYTES) == good,
        "P recomputed and written"
    );
}

#[test]
fn a_resync_does_not_write_data_rebuilt_from_parity_it_does_not_trust() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[0];
    let (_, spec) = hide_wrong_bytes(&ps, role);
    let off = data_offset_bytes(&ps[role]);
    let hidden = read_at(&ps[role], off, CHUNK_BYTES);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Resync);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(
        read_at(&ps[role], off, CHUNK_BYTES) == hidden,
        "nothing written"
    );
}

#[test]
fn a_check_does_not_write_back_a_block_of_an_inconsistent_stripe() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid6, "left-symmetric", 5, 16, 2), &dir);
    let lay = stripe0(&ps);
    let (role, other) = (lay.data[0], lay.data[1]);
    let (_, spec) = hide_wrong_bytes(&ps, role);
    let off = data_offset_bytes(&ps[role]);
    let hidden = read_at(&ps[role], off, CHUNK_BYTES);
    // Another data block of the stripe silently wrong: rebuilt from P, the unreadable one
    // would be wrong too.
    let o = data_offset_bytes(&ps[other]) + 100;
    write_at(&ps[other], o, &[0xa5; 8]);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Check);
    assert!(!rep.mismatches.is_empty(), "the corruption is found");
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(
        read_at(&ps[role], off, CHUNK_BYTES) == hidden,
        "nothing written"
    );
}

#[test]
fn a_check_of_an_array_opened_read_only_writes_nothing() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[1];
    let (_, spec) = hide_wrong_bytes(&ps, role);
    let off = data_offset_bytes(&ps[role]);
    let hidden = read_at(&ps[role], off, CHUNK_BYTES);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), false, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(
        read_at(&ps[role], off, CHUNK_BYTES) == hidden,
        "nothing written"
    );
}

/// A mirror's pass (a check of a RAID1 here) `ReadErrorCorrected` events, and whether
/// the unreadable copy's first chunk now holds copy 0's bytes.
fn mirror_check(
    n: usize,
    corrupt_copy: Option<usize>,
) -> (SyncReport, Vec<(usize, u64, u64)>, bool) {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid1, "default", n, 16, 2), &dir);
    let (_, spec) = hide_wrong_bytes(&ps, 1);
    if let Some(c) = corrupt_copy {
        write_at(&ps[c], data_offset_bytes(&ps[c]) + 4096, &[0xa5; 8]);
    }
    let (rep, fixed) = pass(&with_fault(&ps, 1, &spec), true, SyncMode::Check);
    let first = read_at(&ps[0], data_offset_bytes(&ps[0]), CHUNK_BYTES);
    let same = read_at(&ps[1], data_offset_bytes(&ps[1]), CHUNK_BYTES) == first;
    (rep, fixed, same)
}

#[test]
fn a_mirror_check_writes_back_a_copy_it_could_not_read() {
    let (rep, fixed, same) = mirror_check(2, None);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    assert_eq!(fixed[0].0, 1);
    assert_eq!(rep.sectors_read_error_rewritten, fixed[0].2);
    assert!(same, "copy 1 written back from copy 0");
}

#[test]
fn a_mirror_check_does_not_write_back_a_copy_when_the_others_disagree() {
    let (rep, fixed, same) = mirror_check(3, Some(2));
    assert!(!rep.mismatches.is_empty(), "copies 0 and 2 differ");
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(!same, "the hidden bytes stay");
}
