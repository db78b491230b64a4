//! Arrays the real kernel left in the middle of a reshape (`tests/fixtures/kernel-reshape`):
//! raidkit reads each one exactly as it stands (read-only: every byte is the pattern it
//! was filled with, mdadm's backup file served where given), then finishes the reshape
//! itself: afterwards the array is plain, has the new shape, holds the pattern and its
//! redundancy checks clean. The stale-position arrays of Linux 6.1 are finished with
//! their data intact (the kernel's own resume corrupts them).

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::jobs::reshape::{continue_reshape, ReshapeEnd, ReshapeOptions};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::Array;
use raidkit_testkit::fixtures::decompress_file;
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct Fix {
    name: String,
    seed: u64,
    bytes: u64,
    members: Vec<PathBuf>,
    backup: Option<PathBuf>,
    /// The kernel's own resume corrupted this one (a stale recorded position).
    kernel_bad: bool,
}

fn fixtures() -> Vec<PathBuf> {
    let dir = raidkit_testkit::repo_root().join("tests/fixtures/kernel-reshape");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    v.sort();
    v
}

/// Decompress a fixture into `tmp` (None if xz/zstd are missing).
fn unpack(dir: &Path, tmp: &Path) -> Option<Fix> {
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let name = m["fixture"].as_str().unwrap().to_string();
    let mut members = Vec::new();
    for (i, mm) in m["members"].as_array().unwrap().iter().enumerate() {
        let out = tmp.join(format!("{name}-{i}.img"));
        if let Err(e) = decompress_file(&dir.join(mm["file"].as_str().unwrap()), &out) {
            eprintln!("skipping {name}: {e} (scripts/deps.sh installs xz and zstd)");
            return None;
        }
        members.push(out);
    }
    let backup = m["backup"].as_str().map(|f| {
        let out = tmp.join(format!("{name}-backup"));
        decompress_file(&dir.join(f), &out).unwrap();
        out
    });
    Some(Fix {
        name,
        seed: m["seed"].as_u64().unwrap(),
        bytes: m["array_bytes"].as_u64().unwrap(),
        members,
        backup,
        kernel_bad: m["resumed_by_kernel"]["pattern"].as_str() == Some("BAD"),
    })
}

/// Every byte of the array (up to the pattern's length) is the pattern.
fn check_pattern(name: &str, arr: &Array, seed: u64, bytes: u64) {
    let n = arr.size_bytes().min(bytes);
    let mut got = vec![0u8; 1 << 20];
    let mut want = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < n {
        let len = (n - off).min(got.len() as u64) as usize;
        arr.read(off, &mut got[..len]).unwrap();
        fill_tagged(seed, off, &mut want[..len]);
        if got[..len] != want[..len] {
            let bad = (0..len).find(|&i| got[i] != want[i]).unwrap();
            panic!("{name}: array byte {} is not the pattern", off + bad as u64);
        }
        off += len as u64;
    }
}

/// Run `body` on every committed fixture, unpacked into a temporary directory of its own;
/// all 9 must have run (a missing decompressor skips the whole test, said by `unpack`).
fn for_each_fixture(tag: &str, mut body: impl FnMut(&Fix)) {
    let mut done = 0;
    for dir in fixtures() {
        let tmp = TempDir::new(tag).unwrap();
        let Some(f) = unpack(&dir, tmp.path()) else {
            return;
        };
        body(&f);
        done += 1;
    }
    assert!(done >= 9, "fixtures done: {done}");
}

impl Fix {
    /// The array assembled for writing, as the kernel left it.
    fn assemble_rw(&self) -> Array {
        let rw = AssembleOptions {
            writable: true,
            backup_file: self.backup.clone(),
            ..Default::default()
        };
        assemble_paths(&self.members, &rw)
            .unwrap_or_else(|e| panic!("{}: assembly for writing: {e}", self.name))
    }

    /// What an array of `size` bytes holds: the pattern, then zeros.
    fn model(&self, size: u64) -> Vec<u8> {
        let mut model = vec![0u8; size as usize];
        fill_tagged(self.seed, 0, &mut model[..self.bytes.min(size) as usize]);
        model
    }
}

/// Every byte of `arr` is `model`'s (`what`: when, for the message).
fn assert_holds(name: &str, what: &str, arr: &Array, model: &[u8]) {
    let mut got = vec![0u8; model.len()];
    arr.read(0, &mut got).unwrap();
    if got != model {
        let bad = got.iter().zip(model).position(|(a, b)| a != b).unwrap();
        panic!("{name} {what}: array byte {bad} is not what it should hold");
    }
}

/// A check of the whole array finds no mismatch and checks something.
fn assert_check_clean(name: &str, what: &str, arr: &Array) {
    let rep = sync::run(arr, SyncMode::Check, true, &mut |_, _| {}).unwrap();
    assert!(
        rep.mismatches.is_empty(),
        "{name} {what}: mismatches {:?}",
        rep.mismatches
    );
    assert!(rep.sectors_done > 0, "{name} {what}: nothing checked");
}

#[test]
fn kernel_reshapes_read_as_they_stand_and_raidkit_finishes_them() {
    for_each_fixture("rk-reshape-k", |f| {
        // As it stands, read-only.
        let ro = AssembleOptions {
            backup_file: f.backup.clone(),
            ..Default::default()
        };
        let arr = assemble_paths(&f.members, &ro)
            .unwrap_or_else(|e| panic!("{}: read-only assembly: {e}", f.name));
        let st = arr.reshape_status().expect("a reshape in progress");
        eprintln!(
            "{}: {} {} -> {} {}, recorded {} progress {} notes {:?}",
            f.name,
            st.old.level,
            st.old.raid_disks,
            st.new.level,
            st.new.raid_disks,
            st.recorded_sectors,
            st.progress_sectors,
            st.notes
        );
        // The stale records of Linux 6.1 are found and said so.
        assert_eq!(
            st.notes
                .iter()
                .any(|n| n.starts_with("WARNING") && n.contains("stale")),
            f.kernel_bad,
            "{}: {:?}",
            f.name,
            st.notes
        );
        check_pattern(&f.name, &arr, f.seed, f.bytes);
        drop(arr);
        // Finished by raidkit.
        let arr = Arc::new(f.assemble_rw());
        let end = continue_reshape(&arr, &ReshapeOptions::default(), &mut |_| {})
            .unwrap_or_else(|e| panic!("{}: continuing: {e}", f.name));
        assert_eq!(end, ReshapeEnd::Finished, "{}", f.name);
        assert!(arr.reshape_status().is_none(), "{}", f.name);
        check_pattern(&f.name, &arr, f.seed, f.bytes);
        let new = st.new.clone();
        drop(arr);
        let arr = f.assemble_rw();
        assert!(
            arr.reshape_status().is_none(),
            "{}: reshape still recorded",
            f.name
        );
        let g = arr.geometry();
        assert_eq!(
            (g.level.to_string(), g.raid_disks, g.layout, g.chunk_sectors),
            (
                new.level.clone(),
                new.raid_disks,
                new.layout_value,
                new.chunk_sectors
            ),
            "{}",
            f.name
        );
        check_pattern(&f.name, &arr, f.seed, f.bytes);
        assert_check_clean(&f.name, "after finishing", &arr);
        arr.stop().unwrap();
    });
}

/// A kernel-made array just assembled for writing, before anything continues its reshape:
/// client writes anywhere are taken — around the recorded position too, where an old
/// stripe is cut by it or the data was moved past the record (md's reshape thread would
/// move that window; here the write moves it to the next resting position and goes on).
/// Every byte written reads back, before and after raidkit finishes the reshape.
#[test]
fn kernel_reshapes_take_writes_anywhere_before_they_are_continued() {
    for_each_fixture("rk-reshape-kw", |f| {
        let arr = Arc::new(f.assemble_rw());
        let st = arr.reshape_status().expect("a reshape in progress");
        let size = arr.size_bytes();
        let mut model = f.model(size);
        // Both positions, each with 1 MiB either side (clipped to the array), and the ends.
        let mut ranges = Vec::new();
        for p in [st.recorded_sectors * 512, st.progress_sectors * 512] {
            let lo = p.saturating_sub(1 << 20).min(size);
            let hi = (p + (1 << 20)).min(size);
            ranges.push((lo, hi));
        }
        ranges.push((0, 64 << 10));
        ranges.push((size - (64 << 10), size));
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            // Odd sizes: 12 KiB pieces, not aligned to any stripe.
            let mut at = lo;
            while at < hi {
                let len = (hi - at).min(12 << 10);
                let mut buf = vec![0u8; len as usize];
                fill_tagged(0x5eed_0000 + i as u64, at, &mut buf);
                arr.write(at, &buf).unwrap_or_else(|e| {
                    panic!(
                        "{}: a write of {len} bytes at {at} (recorded position {}): {e}",
                        f.name,
                        st.recorded_sectors * 512
                    )
                });
                model[at as usize..(at + len) as usize].copy_from_slice(&buf);
                at += len;
            }
        }
        assert_holds(&f.name, "right after the writes", &arr, &model);
        let end = continue_reshape(&arr, &ReshapeOptions::default(), &mut |_| {})
            .unwrap_or_else(|e| panic!("{}: continuing: {e}", f.name));
        assert_eq!(end, ReshapeEnd::Finished, "{}", f.name);
        assert_holds(&f.name, "after raidkit finished the reshape", &arr, &model);
        assert_check_clean(&f.name, "after finishing", &arr);
        arr.mark_clean().unwrap();
    });
}

/// Redundancy passes over the arrays as the kernel left them mid-reshape: a check takes
/// each side of the position in its own geometry and finds nothing; a resync (as after an
/// unclean stop) rewrites only the part in the new geometry and leaves every byte as it
/// was; a repair is refused. A resync in the new geometry over the whole array rewrote
/// not-yet-moved RAID6 data as parity.
#[test]
fn kernel_reshapes_check_and_resync_each_side_in_its_geometry() {
    for_each_fixture("rk-reshape-ks", |f| {
        let arr = f.assemble_rw();
        assert!(arr.reshape_status().is_some(), "{}", f.name);
        let model = f.model(arr.size_bytes());
        assert_check_clean(&f.name, "as the kernel left it", &arr);
        sync::run(&arr, SyncMode::Resync, true, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{}: resync: {e}", f.name));
        assert_holds(&f.name, "after the resync", &arr, &model);
        assert_check_clean(&f.name, "after the resync", &arr);
        let e = sync::run(&arr, SyncMode::Repair, true, &mut |_, _| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the array is in the middle of a reshape: a repair would rewrite parity or copies across two geometries",
            "{}",
            f.name
        );
    });
}
