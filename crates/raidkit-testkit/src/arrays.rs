//! Arrays over member files in a test's directory: the files' paths and the options to
//! create an array over them (the test sets what it needs on top).

use raidkit_engine::create::{CreateOptions, MemberSpec};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::Array;
use raidkit_layout::Level;
use std::path::{Path, PathBuf};

/// The paths of `n` member files `m0.img`, `m1.img`, … in `dir` (`create` makes them).
pub fn member_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(format!("m{i}.img"))).collect()
}

/// Options to create a `level` array over the member files `ps`, everything else default.
pub fn create_options(level: Level, ps: &[PathBuf]) -> CreateOptions {
    CreateOptions::new(level, ps.iter().cloned().map(MemberSpec::Path).collect())
}

/// Where the data area of the member file `p` starts, in bytes (from its superblock).
pub fn data_offset_bytes(p: &Path) -> u64 {
    let dev = raidkit_engine::FileDev::open(p, false).expect("open the member");
    let found = raidkit_engine::sb::probe(&dev)
        .expect("probe the member")
        .found;
    found
        .first()
        .expect("a superblock on the member")
        .0
        .data_offset()
        * 512
}

/// A check of the whole array finds every copy and parity consistent (no mismatch);
/// `what` names the case when it does not.
pub fn assert_consistent(arr: &Array, what: &str) {
    let rep = sync::run(arr, SyncMode::Check, true, &mut |_, _| {}).expect("check");
    assert_eq!(rep.mismatches, vec![], "{what}: the check found mismatches");
}
