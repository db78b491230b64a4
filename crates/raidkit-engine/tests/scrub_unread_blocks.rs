//! A RAID6 stripe where a present member's block was not read — a bad-block entry, a read
//! error that persists — has one redundancy left there, as with a missing member: the
//! block not read is rebuilt from P, so a silently wrong data block shows as "Q differs".
//! Check must say undecided (not blame Q), and repair must write nothing there: rewriting
//! Q from the data would destroy the one copy of the truth left.

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_layout::{Level, StripeLayout};
use raidkit_testkit::arrays::data_offset_bytes;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod cases;
use cases::{make, ro, rw, Case};

const STRIPE: u64 = 2;

/// Flip `len` bytes of member file `p` at byte `at`.
fn corrupt(p: &Path, at: u64, len: usize) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, at).unwrap();
    b.iter_mut().for_each(|x| *x ^= 0x3c);
    f.write_all_at(&b, at).unwrap();
}

/// Give member file `p` a bad-block log listing member sectors `[start, start + len)`.
fn add_bad_block(p: &Path, start: u64, len: u64) {
    use raidkit_format::badblocks::{self, BadRange};
    use raidkit_format::v1::{feature, SuperblockV1};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut sbuf = vec![0u8; 4096];
    f.read_exact_at(&mut sbuf, 8 * 512).unwrap();
    let mut sb = SuperblockV1::parse(&sbuf).unwrap();
    sb.bblog_offset = 16;
    sb.bblog_size = 8;
    sb.bblog_shift = 0;
    sb.feature_map |= feature::BAD_BLOCKS;
    f.write_all_at(&sb.encode()[..sb.write_len()], 8 * 512)
        .unwrap();
    let bad = [BadRange { start, len }];
    f.write_all_at(&badblocks::encode(&bad, 0, 4096).unwrap(), 24 * 512)
        .unwrap();
}

/// A RAID6 array whose data block 0 of stripe [`STRIPE`] is silently wrong (3 bytes of
/// its first page). Its member files, the stripe's layout and chunk sectors.
fn array_with_a_wrong_block(dir: &TempDir) -> (Vec<PathBuf>, StripeLayout, u64) {
    let c = Case::v12(Level::Raid6, "left-symmetric", 5, 16, 2);
    let (ps, _) = make(&c, dir);
    let g = assemble_paths(&ps, &ro()).unwrap().geometry().clone();
    let cs = g.chunk_sectors;
    let lay = g.stripe(STRIPE).unwrap();
    let d0 = lay.data[0];
    corrupt(
        &ps[d0],
        data_offset_bytes(&ps[d0]) + STRIPE * cs * 512 + 7,
        3,
    );
    (ps, lay, cs)
}

/// Every member's data area.
fn data_areas(ps: &[PathBuf]) -> Vec<Vec<u8>> {
    ps.iter()
        .map(|p| std::fs::read(p).unwrap()[data_offset_bytes(p) as usize..].to_vec())
        .collect()
}

/// Check (read-only) then repair the array of `paths`: each must report one undecided
/// mismatch in stripe [`STRIPE`] and repair nothing; no member's data area (of `ps`, the
/// plain files) may change.
fn check_then_repair_write_nothing(ps: &[PathBuf], paths: &[PathBuf]) {
    let before = data_areas(ps);
    for mode in [SyncMode::Check, SyncMode::Repair] {
        let opts = if mode == SyncMode::Check { ro() } else { rw() };
        let arr = assemble_paths(paths, &opts).unwrap();
        let rep = sync::run(&arr, mode, true, &mut |_, _| {}).unwrap();
        assert_eq!(rep.verdicts.len(), 1, "{mode:?}: {:?}", rep.verdicts);
        let v = &rep.verdicts[0];
        assert_eq!(
            (v.stripe, v.role, v.repaired),
            (STRIPE, None, false),
            "{v:?}"
        );
        assert_eq!(v.decided_by, "undecided", "{v:?}");
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
    let after = data_areas(ps);
    for r in 0..ps.len() {
        assert!(after[r] == before[r], "repair wrote member {r}");
    }
}

/// Data block 2 of the stripe is listed in its member's bad-block log: it is rebuilt from
/// P, never read.
#[test]
fn raid6_mismatch_beside_a_bad_block_is_undecided_and_repair_writes_nothing() {
    let dir = TempDir::new("rk-engine").unwrap();
    let (ps, lay, cs) = array_with_a_wrong_block(&dir);
    let d2 = lay.data[2];
    add_bad_block(&ps[d2], data_offset_bytes(&ps[d2]) / 512 + STRIPE * cs, cs);
    check_then_repair_write_nothing(&ps, &ps);
}

/// Data block 2's first page cannot be read (page by page again, it still fails): that
/// page is rebuilt from P.
#[test]
fn raid6_mismatch_beside_a_read_error_is_undecided_and_repair_writes_nothing() {
    let dir = TempDir::new("rk-engine").unwrap();
    let (ps, lay, cs) = array_with_a_wrong_block(&dir);
    let d2 = lay.data[2];
    let sector = data_offset_bytes(&ps[d2]) / 512 + STRIPE * cs;
    let spec = format!("fault:reio@{sector}-{}:{}", sector + 7, ps[d2].display());
    let mut paths = ps.clone();
    paths[d2] = PathBuf::from(spec);
    check_then_repair_write_nothing(&ps, &paths);
}
