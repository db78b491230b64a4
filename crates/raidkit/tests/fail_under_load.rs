//! Fail a member under fio load through NBD (project issue #4): a RAID5 and a RAID10 (n2),
//! each with a hot spare and a checksum sidecar, are served; fio writes with
//! `verify=crc32c`; mid-run a member is failed with `raidkit manage --fail`; the spare
//! rebuilds on its own; fio's writes and its read-verify pass; status shows the former
//! spare in the role; offline `check` finds 0 mismatches (and the sidecar still agrees);
//! then the kernel assembles the members in the mdref VM, its check gives mismatch_cnt 0
//! and each /dev/mdX has the same sha256 as raidkit's export.
//!
//! Skips (printing why) without fio's nbd engine; the kernel part skips without mdref.

use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::proc::{self, wait_for};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(d: &Path, args: &[&str]) -> Output {
    proc::bin_in(RAIDKIT, d, Some(&d.join("run")), args)
}

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

fn status(d: &Path) -> Option<Value> {
    let o = rk(d, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v.as_array()?.first().cloned()
}

struct Killer(Child);
impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// fio job options shared by the write and the verify-only run (same seed, same blocks).
fn fio_args(uri: &str) -> Vec<String> {
    [
        "--name=load",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randwrite",
        "--bs=4k",
        "--size=24M",
        "--iodepth=8",
        "--verify=crc32c",
        "--randseed=4242",
        "--output-format=terse",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// fio's terse error field (the 5th) must be 0.
fn assert_fio_ok(what: &str, o: &Output) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "fio {what} failed: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let f: Vec<&str> = out.lines().last().unwrap_or("").split(';').collect();
    assert_eq!(f.get(4), Some(&"0"), "fio {what} errors: {out}");
}

fn member_writes(st: &Value) -> u64 {
    st["io"]
        .as_array()
        .map(|v| v.iter().map(|m| m["writes"].as_u64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

fn sha256(p: &Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// One array: create LEVEL over `members` (role order, `b` is role 1) with a sidecar,
/// serve it, add a spare, fail `b` under fio load, wait for the rebuild, verify, stop,
/// check offline. Returns the sha256 of the array's contents and the members left.
fn fail_under_load(fio: &Path, d: &Path, level: &str, members: &[&str]) -> (String, Vec<PathBuf>) {
    std::fs::create_dir_all(d).unwrap();
    let n = members.len().to_string();
    let mut args = vec![
        "create",
        "-l",
        level,
        "-n",
        &n,
        "-c",
        "64",
        "-z",
        "24M",
        "--name",
        "fl",
        "--homehost",
        "none",
        "--checksums",
        "fl.csum",
    ];
    args.extend_from_slice(members);
    ok(d, &args);
    std::fs::File::create(d.join("spare"))
        .unwrap()
        .set_len(24 << 20)
        .unwrap();
    let sock = d.join("fl.sock");
    let server = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["serve", "--socket", "fl.sock", "--checksums", "fl.csum"])
        .args(members)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Killer(server);
    wait_for("the control socket", 30, || status(d).is_some());
    let spare = d.join("spare");
    ok(d, &["manage", "fl", "--add", spare.to_str().unwrap()]);
    let st = status(d).unwrap();
    assert_eq!(st["degraded"], false);
    assert_eq!(st["members"][members.len()]["state"], "spare", "{st}");

    // fio writes 24 MiB of 4 KiB random blocks with crc32c verify headers, then reads
    // every block back and verifies it.
    let uri = format!("nbd+unix:///fl?socket={}", sock.display());
    let base = member_writes(&status(d).unwrap());
    // Rate-capped (about 6 s of writes), so the failure lands mid-run even on a slow
    // machine (a loaded one only makes fio slower).
    let mut load = Command::new(fio)
        .args(fio_args(&uri))
        .args(["--do_verify=1", "--rate_iops=1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-run (a quarter of fio's 6144 writes reached the members, each at least two
    // member writes: data and parity, or two copies): fail member b.
    wait_for("fio's writes", 60, || {
        status(d).is_some_and(|s| member_writes(&s) >= base + 2 * 1536)
    });
    ok(d, &["manage", "fl", "--fail", "b"]);
    assert!(
        load.try_wait().unwrap().is_none(),
        "fio finished before the member was failed"
    );
    let out = load.wait_with_output().unwrap();
    assert_fio_ok("write+verify", &out);

    // The spare took role 1 and the array is whole again.
    wait_for("the rebuild", 60, || {
        status(d).is_some_and(|s| s["degraded"] == false && s["sync"]["action"] == "idle")
    });
    let st = status(d).unwrap();
    let role1: Vec<&Value> = st["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == 1)
        .collect();
    assert_eq!(role1.len(), 1, "{st}");
    assert!(
        role1[0]["device"].as_str().unwrap().ends_with("spare") && role1[0]["state"] == "in_sync",
        "{st}"
    );
    assert_eq!(st["missing_roles"], serde_json::json!([]));
    assert_eq!(st["lost_ranges"], serde_json::json!([]), "{st}");

    // Read-verify phase over the rebuilt array.
    let out = Command::new(fio)
        .args(fio_args(&uri))
        .arg("--verify_only")
        .output()
        .unwrap();
    assert_fio_ok("verify-only", &out);

    // Stop cleanly.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGTERM) };
    let code = server.0.wait().unwrap();
    assert!(code.success(), "serve exited with {code}");

    // Offline: no mismatches; the sidecar followed the whole run (writes, the failure,
    // the rebuild) and agrees with every block.
    let mut left: Vec<&str> = members.iter().copied().filter(|m| *m != "b").collect();
    left.push("spare");
    let mut args = vec!["check", "--checksums", "fl.csum"];
    args.extend_from_slice(&left);
    let out = ok(d, &args);
    assert!(
        out.contains(": 0 mismatched range(s), 0 bytes") && out.contains("(with checksums)"),
        "{out}"
    );
    let img = d.join("export.img");
    let mut args = vec!["export", "--output", img.to_str().unwrap()];
    args.extend_from_slice(&left);
    ok(d, &args);
    let sha = sha256(&img);
    std::fs::remove_file(&img).unwrap();
    (sha, left.iter().map(|m| d.join(m)).collect())
}

#[test]
fn fail_a_member_under_fio_load_then_the_kernel_agrees() {
    let test = "fail_a_member_under_fio_load_then_the_kernel_agrees";
    let Some(fio) = proc::system_tool("fio", test) else {
        return;
    };
    let eng = Command::new(&fio).arg("--enghelp=nbd").output().unwrap();
    if !eng.status.success() || !String::from_utf8_lossy(&eng.stdout).contains("uri") {
        println!("skip: fio lacks the nbd ioengine (run tests/nbd/install-deps.sh)");
        return;
    }
    let t = TempDir::new("rk-fail-load").unwrap();
    let (sha5, disks5) = fail_under_load(&fio, &t.path().join("r5"), "5", &["a", "b", "c"]);
    let (sha10, disks10) =
        fail_under_load(&fio, &t.path().join("r10"), "10", &["a", "b", "c", "d"]);

    // The kernel assembles the members raidkit left behind.
    let Some(md) = locate_or_skip() else { return };
    let script = r#"exec 2>&1
mdadm --assemble --run /dev/md0 /dev/vda /dev/vdb /dev/vdc || exit 2
mdadm --assemble --run /dev/md1 /dev/vdd /dev/vde /dev/vdf /dev/vdg || exit 2
cat /proc/mdstat
mdref-wait md0 md1
for m in md0 md1; do echo check > /sys/block/$m/md/sync_action; done
mdref-wait md0 md1
for m in md0 md1; do
  echo "RESULT $m sha256=$(sha256sum /dev/$m | cut -d' ' -f1)"
  echo "RESULT $m mismatch_cnt=$(cat /sys/block/$m/md/mismatch_cnt) degraded=$(cat /sys/block/$m/md/degraded)"
done
"#;
    let out = md
        .run(&Run {
            disks: disks5.into_iter().chain(disks10).collect(),
            snapshot: true,
            timeout_secs: 240,
            script: script.into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.status, 0, "{}", out.stdout);
    for line in [
        format!("RESULT md0 sha256={sha5}"),
        "RESULT md0 mismatch_cnt=0 degraded=0".to_string(),
        format!("RESULT md1 sha256={sha10}"),
        "RESULT md1 mismatch_cnt=0 degraded=0".to_string(),
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            out.stdout
        );
    }
}
