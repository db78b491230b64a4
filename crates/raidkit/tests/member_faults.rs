//! Members that fail the way real ones do, served to a real NBD client (qemu-io; issue 14
//! items 6 and 7): a leg whose flushes fail is failed and the array goes on on the other
//! copy; when every copy fails the same write, the last one is kept and only that write
//! fails. Skips (printing why) without qemu-io.

use raidkit_testkit::proc::{self, Daemon};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(d: &Path, args: &[&str]) -> Output {
    proc::bin_in(RAIDKIT, d, Some(&d.join("run")), args)
}

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

fn qemu_io() -> Option<PathBuf> {
    proc::system_tool("qemu-io", "member_faults")
}

/// RAID1 of two 32 MiB files `a` and `b`, served as `vol` with `members` as given.
fn serve(d: &Path, members: &[&str]) -> (Daemon, String) {
    std::fs::create_dir_all(d.join("run")).unwrap();
    ok(
        d,
        &[
            "create", "-l", "1", "-n", "2", "-z", "32M", "--name", "vol", "a", "b",
        ],
    );
    let sock = d.join("vol.sock");
    let mut cmd = Command::new(RAIDKIT);
    cmd.current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["serve", "--socket", sock.to_str().unwrap()])
        .args(members);
    let s = Daemon::spawn(&mut cmd, |l| l.starts_with("raidkit: serving;"), 30);
    (s, format!("nbd+unix:///vol?socket={}", sock.display()))
}

/// qemu-io commands against `uri`; its combined output.
fn qio(qio: &Path, uri: &str, cmds: &[String]) -> String {
    let mut args = vec!["-f".to_string(), "raw".into(), uri.into()];
    for c in cmds {
        args.push("-c".into());
        args.push(c.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = proc::run_system(qio, &args);
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn status(d: &Path) -> Value {
    let o = rk(d, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0].clone()
}

#[test]
fn a_leg_whose_flushes_fail_is_failed_and_writes_go_on() {
    let Some(qio_bin) = qemu_io() else { return };
    let t = TempDir::new("rk-memfault").unwrap();
    let d = t.path();
    // b makes its first two flushes durable, then none.
    let (mut s, uri) = serve(d, &["a", "fault:feio@3:b"]);
    let mut cmds = Vec::new();
    for i in 0..11u64 {
        cmds.push(format!("write -P {} {} 64k", 0x10 + i, i << 20));
        cmds.push("flush".into());
    }
    for i in 0..11u64 {
        cmds.push(format!("read -P {} {} 64k", 0x10 + i, i << 20));
    }
    let out = qio(&qio_bin, &uri, &cmds);
    assert_eq!(out.matches("wrote 65536/65536").count(), 11, "{out}");
    assert_eq!(out.matches("read 65536/65536").count(), 11, "{out}");
    assert!(!out.contains("failed") && !out.contains("error"), "{out}");
    // status says what happened: b failed, the array degraded.
    let st = status(d);
    assert_eq!(st["members"][1]["state"], "failed", "{st}");
    assert_eq!(st["missing_roles"], serde_json::json!([1]), "{st}");
    assert_eq!(st["degraded"], true, "{st}");
    let text = ok(d, &["status"]);
    assert!(text.contains("[1/2] [U_]"), "{text}");
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
    // Failed once, logged once.
    assert_eq!(
        err.matches("raidkit[vol]: member_failed").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("\"reason\":\"flush failed: Input/output error"),
        "{err}"
    );
    // a holds every write and records b as gone (mdadm's "A.").
    let ex = ok(d, &["examine", "--json", "a"]);
    assert!(ex.contains("\"array_state\": \"A.\""), "{ex}");
    ok(d, &["export", "--output", "x.img", "a"]);
    let x = std::fs::read(d.join("x.img")).unwrap();
    for i in 0..11usize {
        assert!(x[i << 20..(i << 20) + 65536]
            .iter()
            .all(|&b| b == 0x10 + i as u8));
    }
}

#[test]
fn when_both_legs_fail_the_same_write_the_last_copy_is_kept() {
    let Some(qio_bin) = qemu_io() else { return };
    let t = TempDir::new("rk-memfault").unwrap();
    let d = t.path();
    // The rule: device sectors 4096-4103 on both members, data offset 2048
    // sectors: array bytes 1 MiB..+4 KiB.
    let (mut s, uri) = serve(d, &["fault:weio@4096-4103:a", "fault:weio@4096-4103:b"]);
    let out = qio(
        &qio_bin,
        &uri,
        &[
            "write -P 0x77 0 1M".into(),
            "write -P 0x88 1M 4k".into(),
            "write -P 0x99 2M 1M".into(),
            "flush".into(),
            "read -P 0x77 0 1M".into(),
            "read -P 0x99 2M 1M".into(),
            "read 1M 4k".into(),
        ],
    );
    // The write to the failed 4 KiB fails, and reads there fail rather than return what
    // the failed write left; everything else works.
    assert_eq!(out.matches("wrote 1048576/1048576").count(), 2, "{out}");
    assert_eq!(out.matches("read 1048576/1048576").count(), 2, "{out}");
    assert!(out.contains("write failed: Input/output error"), "{out}");
    assert!(out.contains("read failed: Input/output error"), "{out}");
    let st = status(d);
    let states: Vec<&str> = st["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["failed", "in_sync"], "{st}");
    assert_eq!(
        st["lost_ranges"],
        serde_json::json!([[1 << 20, 4096]]),
        "{st}"
    );
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_member_that_does_not_answer_in_time_is_failed_and_stop_finishes() {
    let Some(qio_bin) = qemu_io() else { return };
    let t = TempDir::new("rk-memfault").unwrap();
    let d = t.path();
    std::fs::create_dir_all(d.join("run")).unwrap();
    ok(
        d,
        &[
            "create", "-l", "0", "-n", "2", "-z", "32M", "--name", "vol", "a", "b",
        ],
    );
    // b's data area (sectors 4096.. of 65536; its superblocks still read) answers after
    // 60 s: far beyond the member timeout, and beyond the 20 s the stop below may take.
    let sock = d.join("vol.sock");
    let mut cmd = Command::new(RAIDKIT);
    cmd.current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .env("RAIDKIT_MEMBER_TIMEOUT", "2s")
        .args(["serve", "--socket", sock.to_str().unwrap()])
        .args(["a", "fault:slow=60s@4096-60000:b"]);
    let mut s = Daemon::spawn(&mut cmd, |l| l.starts_with("raidkit: serving;"), 30);
    let uri = format!("nbd+unix:///vol?socket={}", sock.display());
    // A client writes over both members; the server is stopped while the write waits
    // for b.
    let client = Command::new(&qio_bin)
        .args([
            "-f",
            "raw",
            &uri,
            "-c",
            "write -P 1 0 1M",
            "-c",
            "read 0 64k",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let t0 = std::time::Instant::now();
    // Daemon::stop panics if the server has not exited 20 s after the signal.
    let (code, err) = s.stop("TERM");
    let took = t0.elapsed();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        took < std::time::Duration::from_secs(15),
        "stop took {took:?}: {err}"
    );
    assert!(
        err.contains("did not complete a write within 2000 ms (member timeout)"),
        "{err}"
    );
    // The client got errors, not a hang.
    let mut c = client;
    proc::wait_for("qemu-io to end", 20, || matches!(c.try_wait(), Ok(Some(_))));
    let o = c.wait_with_output().unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("write failed"), "{out}");
    assert!(!out.contains("wrote 1048576/1048576"), "{out}");
}

/// Whether the served array's members are all in sync and no job runs.
fn settled(d: &Path) -> bool {
    let st = status(d);
    st["sync"]["action"] == "idle"
        && st["members"]
            .as_array()
            .is_some_and(|m| m.iter().all(|m| m["state"] == "in_sync"))
}

#[test]
fn fault_wrapped_members_are_managed_by_their_path_or_spec_from_another_directory() {
    let t = TempDir::new("rk-memfault").unwrap();
    let d = t.path();
    let (mut s, _uri) = serve(d, &["fault:slow=100us:a", "fault:slow=100us:b"]);
    let sub = d.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::File::create(d.join("c"))
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let here = |args: &[&str]| proc::bin_ok(RAIDKIT, &sub, Some(&d.join("run")), args);
    // A spec with other rules than the served one's, a relative path inside it.
    here(&["manage", "vol", "--fail", "fault:reio@7:../b"]);
    assert_eq!(status(d)["members"][1]["state"], "failed");
    here(&["manage", "vol", "--remove", "../b"]);
    here(&["manage", "vol", "--re-add", "fault:slow=100us:../b"]);
    proc::wait_for("the re-add", 30, || settled(d));
    here(&["manage", "vol", "--write-mostly", "../b"]);
    assert_eq!(status(d)["members"][1]["write_mostly"], true);
    here(&["manage", "vol", "--readwrite", "fault:eio@1:../b"]);
    assert_eq!(status(d)["members"][1]["write_mostly"], false);
    here(&[
        "manage",
        "vol",
        "--replace",
        "fault:eio@1:../a",
        "--with",
        "../c",
    ]);
    proc::wait_for("the replace", 30, || {
        settled(d) && status(d)["members"].as_array().unwrap().len() == 2
    });
    let st = status(d);
    let names: Vec<&str> = st["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["device"].as_str().unwrap())
        .collect();
    assert!(
        names[0].ends_with("/c") && names[1].ends_with("/b (fault-injected)"),
        "{st}"
    );
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
}
