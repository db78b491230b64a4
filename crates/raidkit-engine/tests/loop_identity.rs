//! A loop device counts as its backing file only when it shows the whole file: two loop
//! devices over windows of one file that do not overlap are two members (two arrays on
//! them were refused as sharing a member). Needs root and `losetup`; skipped otherwise.

use raidkit_engine::member_identity;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Loop devices set up by a test, detached when it ends (even failing).
struct Loops(Vec<PathBuf>);

impl Drop for Loops {
    fn drop(&mut self) {
        for l in &self.0 {
            let _ = Command::new("losetup").arg("-d").arg(l).status();
        }
    }
}

impl Loops {
    /// A loop device over `file` with these `losetup` options, or None if it cannot be
    /// set up (not root, no loop devices).
    fn add(&mut self, file: &Path, opts: &[&str]) -> Option<PathBuf> {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .args(opts)
            .arg(file)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        self.0.push(dev.clone());
        Some(dev)
    }
}

#[test]
fn loop_windows_of_one_file_are_distinct_members() {
    let dir = TempDir::new("rk-loop-id").unwrap();
    let file = dir.path().join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let mut loops = Loops(Vec::new());
    let Some(whole) = loops.add(&file, &[]) else {
        println!("skip: cannot set up a loop device (root and losetup needed)");
        return;
    };
    let a = loops.add(&file, &["--offset", "0", "--sizelimit", "1048576"]);
    let b = loops.add(&file, &["--offset", "2097152", "--sizelimit", "1048576"]);
    let (a, b) = (a.unwrap(), b.unwrap());
    let id = |p: &Path| member_identity(p, true).unwrap().unwrap();
    assert_eq!(
        id(&whole),
        id(&file),
        "a loop over the whole file is the file"
    );
    assert_ne!(
        id(&a),
        id(&file),
        "a window with a size limit is not the file"
    );
    assert_ne!(id(&b), id(&file), "a window at an offset is not the file");
    assert_ne!(id(&a), id(&b), "two windows are two devices");
}
