//! md's write-mostly and write-behind through the binary (issue 16 item 4): `create
//! --write-mostly MEMBER --write-behind N`, what `examine`, `examine --bitmap`, `detail`
//! and `status` show, the refusals, and `manage --write-mostly / --readwrite /
//! --write-behind` on a served array.

use raidkit_testkit::proc::{self, Daemon};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

fn err(d: &Path, args: &[&str]) -> String {
    proc::bin_err(RAIDKIT, d, Some(&d.join("run")), args)
}

fn json(d: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(d, args)).unwrap()
}

/// The `raidkit: error:` line of a failed command.
fn error_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("raidkit: error:"))
        .unwrap_or(stderr)
}

const CREATE: &[&str] = &[
    "create",
    "-l",
    "1",
    "-n",
    "2",
    "-z",
    "16M",
    "--name",
    "wb",
    "--homehost",
    "none",
];

#[test]
fn create_shows_and_changes_write_mostly_and_write_behind() {
    let t = TempDir::new("rk-wbcli").unwrap();
    let d = t.path();
    std::fs::create_dir_all(d.join("run")).unwrap();
    // Refusals, exact, and nothing created.
    let mut args = CREATE.to_vec();
    args.extend(["--write-mostly", "b", "--write-behind", "8", "a", "b"]);
    assert_eq!(
        error_line(&err(d, &args)),
        "raidkit: error: write-behind needs a write-intent bitmap (the regions written behind stay dirty in it until the write-mostly member has them); add --bitmap internal (on a running array first `raidkit grow NAME --bitmap internal`)"
    );
    let mut args = CREATE.to_vec();
    args.extend(["--bitmap", "internal", "--write-behind", "8", "a", "b"]);
    assert_eq!(
        error_line(&err(d, &args)),
        "raidkit: error: write-behind applies only to write-mostly members, and there is none; mark the slow member(s) with --write-mostly MEMBER"
    );
    let mut args = CREATE.to_vec();
    args.extend(["--write-mostly", "c", "a", "b"]);
    assert_eq!(
        error_line(&err(d, &args)),
        "raidkit: error: --write-mostly c: not one of the members given; name it exactly as in the member list"
    );
    assert!(!d.join("a").exists());
    // Created with b write-mostly and write-behind 8.
    let mut args = CREATE.to_vec();
    args.extend([
        "--bitmap",
        "internal",
        "--write-mostly",
        "b",
        "--write-behind",
        "8",
        "a",
        "b",
    ]);
    ok(d, &args);
    let ex = json(d, &["examine", "--json", "a", "b"]);
    assert_eq!(
        (&ex[0]["write_mostly"], &ex[1]["write_mostly"]),
        (&Value::Bool(false), &Value::Bool(true))
    );
    let text = ok(d, &["examine", "b"]);
    assert!(text.contains("           Flags : write-mostly\n"), "{text}");
    assert!(!ok(d, &["examine", "a"]).contains("write-mostly"));
    let bm = ok(d, &["examine", "--bitmap", "a"]);
    assert!(
        bm.contains("Write Mode : Allow write behind, max 8\n"),
        "{bm}"
    );
    let det = json(d, &["detail", "--json", "a", "b"]);
    assert_eq!(det["write_behind"], 8, "{det}");
    assert_eq!(det["members"][0]["write_mostly"], false);
    assert_eq!(det["members"][1]["write_mostly"], true);
    assert_eq!(det["members"][1]["write_behind_backlog"], 0);
    let text = ok(d, &["detail", "a", "b"]);
    assert!(text.contains("       1  in_sync      b (W)\n"), "{text}");
    assert!(text.contains("       0  in_sync      a\n"), "{text}");

    // Served: status shows it, manage changes it.
    let mut cmd = Command::new(RAIDKIT);
    cmd.current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["serve", "--socket", "wb.sock", "a", "b"]);
    let mut s = Daemon::spawn(&mut cmd, |l| l.starts_with("raidkit: serving;"), 30);
    let st = json(d, &["status", "--json"]);
    assert_eq!(st[0]["members"][1]["write_mostly"], true, "{st}");
    assert_eq!(st[0]["members"][1]["write_behind_backlog"], 0, "{st}");
    let text = ok(d, &["status"]);
    assert!(text.contains(" b[1](W)"), "{text}");
    // The last write-mostly member of an array writing behind keeps the flag.
    let e = err(d, &["manage", "wb", "--readwrite", "b"]);
    assert!(
        e.contains("is the last write-mostly member and the array writes behind (max 8); turn write-behind off first"),
        "{e}"
    );
    ok(d, &["manage", "wb", "--write-behind", "0"]);
    ok(d, &["manage", "wb", "--readwrite", "b"]);
    ok(d, &["manage", "wb", "--write-mostly", "a"]);
    let st = json(d, &["status", "--json"]);
    assert_eq!(st[0]["members"][0]["write_mostly"], true, "{st}");
    assert_eq!(st[0]["members"][1]["write_mostly"], false, "{st}");
    let (code, e) = s.stop("TERM");
    assert_eq!(code, Some(0), "{e}");
    let ex = json(d, &["examine", "--json", "a", "b"]);
    assert_eq!(
        (&ex[0]["write_mostly"], &ex[1]["write_mostly"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    let bm = ok(d, &["examine", "--bitmap", "a"]);
    assert!(bm.contains("Write Mode : Normal\n"), "{bm}");
    // mdadm's `--grow --write-behind`, on the members of the stopped array.
    ok(d, &["grow", "--write-behind", "32", "a", "b"]);
    for m in ["a", "b"] {
        let bm = ok(d, &["examine", "--bitmap", m]);
        assert!(
            bm.contains("Write Mode : Allow write behind, max 32\n"),
            "{bm}"
        );
    }
    assert_eq!(json(d, &["detail", "--json", "a", "b"])["write_behind"], 32);
}
