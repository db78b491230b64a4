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
use raidkit_engine::checksums::Checksums;
use raidkit_engine::sync::{self, SyncMode, SyncReport};
use raidkit_layout::Level;
use raidkit_testkit::arrays::data_offset_bytes;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Member `role`'s chunk of stripe 0: its first `wrong` bytes flipped on the file, and
/// its first `bad` sectors made unreadable. Returns the chunk's original bytes and the
/// fault-injecting path to assemble.
fn hide(ps: &[PathBuf], role: usize, wrong: usize, bad: u64) -> (Vec<u8>, PathBuf) {
    let off = data_offset_bytes(&ps[role]);
    let good = read_at(&ps[role], off, CHUNK_BYTES);
    let flipped: Vec<u8> = good[..wrong].iter().map(|b| b ^ 0x5a).collect();
    write_at(&ps[role], off, &flipped);
    let sector = off / 512;
    let spec = format!(
        "fault:reio@{sector}-{}:{}",
        sector + bad - 1,
        ps[role].display()
    );
    (good, PathBuf::from(spec))
}

/// The page hidden by [`hide`] with `PAGE` wrong bytes under `PAGE_SECTORS` bad ones.
fn hide_page(ps: &[PathBuf], role: usize) -> (Vec<u8>, PathBuf) {
    hide(ps, role, PAGE, PAGE_SECTORS)
}

const PAGE: usize = 4096;
const PAGE_SECTORS: u64 = 8;

fn chunk_of(ps: &[PathBuf], role: usize) -> Vec<u8> {
    read_at(&ps[role], data_offset_bytes(&ps[role]), CHUNK_BYTES)
}

/// A `ReadErrorCorrected` event: (role, member sector, sectors).
type Fixed = (usize, u64, u64);

/// Run a pass over the array of `paths` (writable or not); its report and its
/// `ReadErrorCorrected` events as (role, member sector, sectors).
fn pass(paths: &[PathBuf], writable: bool, mode: SyncMode) -> (SyncReport, Vec<Fixed>) {
    pass_with(paths, writable, mode, None)
}

/// [`pass`], with the checksum sidecar at `sidecar` attached if given.
fn pass_with(
    paths: &[PathBuf],
    writable: bool,
    mode: SyncMode,
    sidecar: Option<&Path>,
) -> (SyncReport, Vec<Fixed>) {
    let arr = assemble_paths(paths, &if writable { rw() } else { ro() }).unwrap();
    if let Some(path) = sidecar {
        let cs = Checksums::open(path, &arr).unwrap();
        arr.attach_checksums(Arc::new(cs)).unwrap();
    }
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
fn a_check_writes_back_a_data_page_it_could_not_read() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[1];
    let (good, spec) = hide_page(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!(rep.sectors_read_error_rewritten, PAGE_SECTORS);
    let sector = data_offset_bytes(&ps[role]) / 512;
    assert_eq!(fixed, vec![(role, sector, PAGE_SECTORS)]);
    assert!(chunk_of(&ps, role) == good, "the page written back");
}

/// One unreadable sector does not hide the rest of the block: the pages that read are
/// judged (their wrong bytes are mismatches), and only the page that failed is written.
#[test]
fn a_check_judges_the_pages_that_read_and_writes_back_only_the_one_that_failed() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[1];
    let (good, spec) = hide(&ps, role, CHUNK_BYTES, 1);
    let hidden = chunk_of(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Check);
    let bytes: u64 = rep.mismatches.iter().map(|m| m.1).sum();
    // Pages 1..4 of the row mismatch: each counted over both data blocks of the row.
    assert_eq!(bytes, 2 * 3 * PAGE as u64, "{:?}", rep.mismatches);
    assert_eq!(rep.sectors_read_error_rewritten, PAGE_SECTORS);
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    let now = chunk_of(&ps, role);
    assert!(
        now[..PAGE] == good[..PAGE],
        "the unreadable page written back"
    );
    assert!(
        now[PAGE..] == hidden[PAGE..],
        "the pages that read are left to a repair"
    );
}

#[test]
fn a_resync_writes_back_parity_it_could_not_read() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).p;
    let (good, spec) = hide_page(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Resync);
    assert_eq!(rep.sectors_read_error_rewritten, PAGE_SECTORS);
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    assert!(chunk_of(&ps, role) == good, "P recomputed and written");
}

#[test]
fn a_resync_does_not_write_data_rebuilt_from_parity_it_does_not_trust() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[0];
    let (_, spec) = hide_page(&ps, role);
    let hidden = chunk_of(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Resync);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(chunk_of(&ps, role) == hidden, "nothing written");
}

#[test]
fn a_check_does_not_write_back_a_page_of_an_inconsistent_stripe() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid6, "left-symmetric", 5, 16, 2), &dir);
    let lay = stripe0(&ps);
    let (role, other) = (lay.data[0], lay.data[1]);
    let (_, spec) = hide_page(&ps, role);
    let hidden = chunk_of(&ps, role);
    // Another data block of the stripe silently wrong in the same page: rebuilt from P,
    // the unreadable page would be wrong too.
    let o = data_offset_bytes(&ps[other]) + 100;
    write_at(&ps[other], o, &[0xa5; 8]);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Check);
    assert!(!rep.mismatches.is_empty(), "the corruption is found");
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(chunk_of(&ps, role) == hidden, "nothing written");
}

#[test]
fn a_check_of_an_array_opened_read_only_writes_nothing() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let role = stripe0(&ps).data[1];
    let (_, spec) = hide_page(&ps, role);
    let hidden = chunk_of(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), false, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(chunk_of(&ps, role) == hidden, "nothing written");
}

/// A mirror's check with copy 1's first `wrong` bytes flipped under `bad` unreadable
/// sectors (and copy `corrupt` silently wrong at byte 100, if given): its report, its
/// `ReadErrorCorrected` events, copy 0's first chunk, copy 1's before and after.
fn mirror_check(
    n: usize,
    wrong: usize,
    bad: u64,
    corrupt: Option<usize>,
) -> (SyncReport, Vec<Fixed>, [Vec<u8>; 3]) {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid1, "default", n, 16, 2), &dir);
    let (_, spec) = hide(&ps, 1, wrong, bad);
    if let Some(c) = corrupt {
        write_at(&ps[c], data_offset_bytes(&ps[c]) + 100, &[0xa5; 8]);
    }
    let hidden = chunk_of(&ps, 1);
    let (rep, fixed) = pass(&with_fault(&ps, 1, &spec), true, SyncMode::Check);
    (rep, fixed, [chunk_of(&ps, 0), hidden, chunk_of(&ps, 1)])
}

#[test]
fn a_mirror_check_writes_back_a_copy_page_it_could_not_read() {
    let (rep, fixed, [first, _, now]) = mirror_check(2, PAGE, PAGE_SECTORS, None);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    assert_eq!((fixed[0].0, fixed[0].2), (1, PAGE_SECTORS));
    assert_eq!(rep.sectors_read_error_rewritten, PAGE_SECTORS);
    assert!(now == first, "copy 1 written back from copy 0");
}

#[test]
fn a_mirror_check_judges_the_pages_that_read_and_writes_back_only_the_one_that_failed() {
    let (rep, fixed, [first, hidden, now]) = mirror_check(2, CHUNK_BYTES, 1, None);
    let bytes: u64 = rep.mismatches.iter().map(|m| m.1).sum();
    assert_eq!(bytes, 3 * PAGE as u64, "{:?}", rep.mismatches);
    assert_eq!(
        (fixed.len(), rep.sectors_read_error_rewritten),
        (1, PAGE_SECTORS)
    );
    assert!(
        now[..PAGE] == first[..PAGE],
        "the unreadable page written back"
    );
    assert!(
        now[PAGE..] == hidden[PAGE..],
        "the pages that read are left to a repair"
    );
}

#[test]
fn a_mirror_check_does_not_write_back_a_page_where_the_other_copies_disagree() {
    let (rep, fixed, [_, hidden, now]) = mirror_check(3, PAGE, PAGE_SECTORS, Some(2));
    assert!(!rep.mismatches.is_empty(), "copies 0 and 2 differ");
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(now == hidden, "the hidden bytes stay");
}

/// A check with a checksum sidecar (made first, in `dir`) of the array of `ps`, after
/// `role`'s first page was hidden (as [`hide_page`]) and byte 100 of each of `corrupt`
/// silently changed (alike): its report, its events, `role`'s original first chunk, the bytes hidden
/// there, and the chunk after the check.
fn check_with_sidecar(
    dir: &TempDir,
    ps: &[PathBuf],
    role: usize,
    corrupt: &[usize],
) -> (SyncReport, Vec<Fixed>, [Vec<u8>; 3]) {
    let sidecar = dir.path().join("s.csum");
    let arr = assemble_paths(ps, &rw()).unwrap();
    let cs = Checksums::init(&sidecar, &arr, &mut |_, _| {}).unwrap();
    arr.attach_checksums(Arc::new(cs)).unwrap();
    arr.stop().unwrap();
    let (good, spec) = hide_page(ps, role);
    for &c in corrupt {
        write_at(&ps[c], data_offset_bytes(&ps[c]) + 100, &[0xa5; 8]);
    }
    let hidden = chunk_of(ps, role);
    let paths = with_fault(ps, role, &spec);
    let (rep, fixed) = pass_with(&paths, true, SyncMode::Check, Some(&sidecar));
    (rep, fixed, [good, hidden, chunk_of(ps, role)])
}

/// [`check_with_sidecar`] of an `n`-way mirror, copy 1's page hidden.
fn mirror_check_with_sidecar(
    n: usize,
    corrupt: &[usize],
) -> (SyncReport, Vec<Fixed>, [Vec<u8>; 3]) {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid1, "default", n, 16, 2), &dir);
    check_with_sidecar(&dir, &ps, 1, corrupt)
}

/// Copies 0 and 2 disagree where copy 1 cannot be read: the sidecar tells that copy 2 is
/// right, and its bytes are written back (without a sidecar nothing is: see above).
#[test]
fn a_mirror_check_writes_back_the_copy_the_checksum_vouches_for() {
    let (rep, fixed, [good, _, now]) = mirror_check_with_sidecar(3, &[0]);
    assert_eq!(fixed.len(), 1, "{fixed:?}");
    assert_eq!((fixed[0].0, fixed[0].2), (1, PAGE_SECTORS));
    assert_eq!(rep.sectors_read_error_rewritten, PAGE_SECTORS);
    assert!(now == good, "copy 1 holds copy 2's (right) bytes again");
    // Copy 0's corruption is found, and told by the checksum.
    assert_eq!(rep.mismatches, vec![(0, PAGE as u64)]);
    let v: Vec<_> = rep
        .verdicts
        .iter()
        .map(|v| (v.offset, v.role, v.decided_by.as_str(), v.repaired))
        .collect();
    assert_eq!(v, vec![(0, Some(0), "checksum", false)]);
}

/// The only other copy, read fine, is wrong by the sidecar: it is not written over the
/// copy that could not be read (which is left as it is), and the report says why.
#[test]
fn a_mirror_check_does_not_write_back_a_copy_its_checksum_says_is_wrong() {
    let (rep, fixed, [_, hidden, now]) = mirror_check_with_sidecar(2, &[0]);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(now == hidden, "nothing written over copy 1");
    let v: Vec<_> = rep
        .verdicts
        .iter()
        .map(|v| (v.offset, v.len, v.role, v.decided_by.as_str(), v.repaired))
        .collect();
    assert_eq!(v, vec![(0, PAGE as u64, Some(0), "checksum", false)]);
    assert_eq!(
        rep.verdicts[0].what,
        "mirror copy (the copy on role 1 could not be read and the other copies agree on \
         bytes that do not match their checksum: nothing was written back)"
    );
    // The bytes the array serves there are wrong and nothing fixed them: a mismatch.
    assert_eq!(rep.mismatches, vec![(0, PAGE as u64)]);
}

/// Four copies, copy 1 unreadable, copies 0 and 2 agreeing against copy 3, which the
/// sidecar vouches for: the write-back and the verdict decide alike, the checksum before
/// the majority, so copy 1 gets copy 3's (right) bytes and copies 0 and 2 are reported
/// wrong — the majority's bytes are never written over the copy that could not be read
/// (a later repair would then have outvoted the last right copy).
#[test]
fn a_mirror_write_back_decides_as_the_verdict_does() {
    let (rep, fixed, [good, _, now]) = mirror_check_with_sidecar(4, &[0, 2]);
    assert_eq!(
        (fixed.len(), rep.sectors_read_error_rewritten),
        (1, PAGE_SECTORS)
    );
    assert!(
        now == good,
        "copy 1 holds the checksum's (right) bytes again"
    );
    let v: Vec<_> = rep
        .verdicts
        .iter()
        .map(|v| (v.offset, v.role, v.decided_by.as_str()))
        .collect();
    assert_eq!(v, vec![(0, Some(0), "checksum"), (0, Some(2), "checksum")]);
}

/// RAID5 cannot see a silently wrong data block; rebuilt from parity with it, the page
/// that could not be read would be wrong too: the sidecar says so, and it is not written.
#[test]
fn a_check_does_not_write_back_a_rebuilt_page_its_checksum_says_is_wrong() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let lay = stripe0(&ps);
    let (rep, fixed, [_, hidden, now]) = check_with_sidecar(&dir, &ps, lay.data[1], &[lay.data[0]]);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(now == hidden, "nothing written");
    let v: Vec<_> = rep
        .verdicts
        .iter()
        .map(|v| (v.offset, v.len, v.role, v.decided_by.as_str(), v.repaired))
        .collect();
    // The row's first data block, as every parity verdict; the row is a mismatch.
    assert_eq!(v, vec![(0, PAGE as u64, None, "checksum", false)]);
    assert!(
        rep.verdicts[0].what.starts_with("data (role"),
        "{:?}",
        rep.verdicts
    );
    assert_eq!(
        rep.mismatches,
        vec![(0, PAGE as u64), (CHUNK_BYTES as u64, PAGE as u64)]
    );
}

/// The same with no other block wrong: the rebuilt page matches its checksum and is
/// written back.
#[test]
fn a_check_writes_back_a_rebuilt_page_its_checksum_vouches_for() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let lay = stripe0(&ps);
    // "Corrupted" where the page is hidden anyway: no other block is wrong.
    let (rep, fixed, [good, _, now]) = check_with_sidecar(&dir, &ps, lay.data[1], &[lay.data[1]]);
    assert_eq!(
        (rep.sectors_read_error_rewritten, fixed.len()),
        (PAGE_SECTORS, 1)
    );
    assert!(rep.verdicts.is_empty(), "{:?}", rep.verdicts);
    assert!(now == good, "the page written back");
}

/// After a crash (the array not marked clean: its parity may be behind its data), a check
/// does not rebuild an unreadable data page from parity to write it back.
#[test]
fn a_check_does_not_write_data_rebuilt_from_parity_a_crash_left_untrusted() {
    let dir = TempDir::new("rk-rerr").unwrap();
    let (ps, _) = make(&Case::v12(Level::Raid5, "left-symmetric", 3, 16, 2), &dir);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    arr.write(arr.size_bytes() - 4096, &[7u8; 4096]).unwrap();
    drop(arr);
    let role = stripe0(&ps).data[1];
    let (_, spec) = hide_page(&ps, role);
    let hidden = chunk_of(&ps, role);
    let (rep, fixed) = pass(&with_fault(&ps, role, &spec), true, SyncMode::Check);
    assert!(rep.mismatches.is_empty(), "{:?}", rep.mismatches);
    assert_eq!((rep.sectors_read_error_rewritten, fixed), (0, vec![]));
    assert!(chunk_of(&ps, role) == hidden, "nothing written");
}
