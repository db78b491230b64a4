//! State that must not lie (issue 14 item 9): a dirty degraded array started by force is
//! clean on disk after a stop that says so; `detail` calls a dirty array active, not
//! clean; `status` says active while the superblocks do; `export` of an array whose
//! members are all there but one is not in sync does not print an empty role list.

use raidkit_format::v1::feature;
use raidkit_testkit::proc::{self, Daemon};
use raidkit_testkit::superblock::patch_v1;
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

fn json(d: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(d, args)).unwrap()
}

fn setup(level: &str, members: &[&str]) -> TempDir {
    let t = TempDir::new("rk-state").unwrap();
    std::fs::create_dir_all(t.path().join("run")).unwrap();
    let n = members.len().to_string();
    let mut args = vec![
        "create", "-l", level, "-n", &n, "-z", "16M", "--name", "vol",
    ];
    args.extend_from_slice(members);
    ok(t.path(), &args);
    t
}

#[test]
fn a_dirty_degraded_array_forced_up_is_clean_after_its_stop() {
    let t = setup("5", &["a", "b", "c"]);
    let d = t.path();
    // Stopped dirty (as after a crash), then c is lost.
    for m in ["a", "b", "c"] {
        patch_v1(&d.join(m), |sb| sb.resync_offset = 0);
    }
    let det = json(d, &["detail", "--json", "a", "b"]);
    assert_eq!(det["state"], "active, degraded", "{det}");
    let text = ok(d, &["detail", "a", "b"]);
    assert!(text.contains("State : active, degraded"), "{text}");
    // Served by force, and stopped without a write.
    let mut cmd = Command::new(RAIDKIT);
    cmd.current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["serve", "--force", "--socket", "vol.sock", "a", "b"]);
    let mut s = Daemon::spawn(&mut cmd, |l| l.starts_with("raidkit: serving;"), 30);
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("every array is flushed and clean"), "{err}");
    for m in ["a", "b"] {
        let ex = json(d, &["examine", "--json", m]);
        assert_eq!(ex[0]["state"], "clean", "{m}: {ex}");
    }
    let det = json(d, &["detail", "--json", "a", "b"]);
    assert_eq!(det["state"], "clean, degraded", "{det}");
}

#[test]
fn export_of_a_member_not_in_sync_names_no_empty_role_list() {
    let t = setup("1", &["a", "b"]);
    let d = t.path();
    // b's rebuild stopped 1 MiB in.
    patch_v1(&d.join("b"), |sb| {
        sb.feature_map |= feature::RECOVERY_OFFSET;
        sb.recovery_offset = 2048;
    });
    let o = proc::bin_in(
        RAIDKIT,
        d,
        Some(&d.join("run")),
        &["export", "--output", "x.img", "a", "b"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(", degraded (a member is not in sync) to x.img"),
        "{err}"
    );
    assert!(!err.contains("[]"), "{err}");
}
