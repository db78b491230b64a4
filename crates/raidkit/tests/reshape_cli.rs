//! The reshape CLI contract (issue 15): `grow MEMBER...` in the foreground (killed and
//! continued, stopped by SIGTERM at a safe position), `grow --continue`, `--dry-run`'s
//! plan and refusals, `grow NAME ...` on a served array (speed limit, pause, resume,
//! revert; the export grows for new connections), the reshape fields of `examine`,
//! `detail` and `status`, and the exact errors.

use raidkit_testkit::proc::{self, wait_for, words};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn run_dir(d: &Path) -> std::path::PathBuf {
    d.join("run")
}

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&run_dir(d)), args)
}

/// stderr of a command that must succeed.
fn ok_err(d: &Path, args: &[&str]) -> String {
    let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn err(d: &Path, args: &[&str]) -> String {
    proc::bin_err(RAIDKIT, d, Some(&run_dir(d)), args)
}

fn files(d: &Path, names: &[&str], bytes: u64) {
    for n in names {
        std::fs::File::create(d.join(n))
            .unwrap()
            .set_len(bytes)
            .unwrap();
    }
}

/// A RAID `level` over `members` (16 MiB each), 64K chunk, 1.2, filled with `bytes` of
/// data (written to `data.in`).
fn array(d: &Path, level: &str, members: &[&str], bytes: usize) -> Vec<u8> {
    files(d, members, 16 << 20);
    let n = members.len().to_string();
    let mut args = vec![
        "create",
        "--level",
        level,
        "--raid-devices",
        &n,
        "--chunk",
        "64",
        "--name",
        "rs",
        "--homehost",
        "none",
    ];
    args.extend_from_slice(members);
    ok(d, &args);
    let data = proc::xorshift_bytes(bytes, 4242);
    std::fs::write(d.join("data.in"), &data).unwrap();
    let mut args = vec!["import", "--input", "data.in"];
    args.extend_from_slice(members);
    ok(d, &args);
    data
}

fn exported(d: &Path, members: &[&str]) -> Vec<u8> {
    let mut args = vec!["export", "--output", "out.img"];
    args.extend_from_slice(members);
    ok(d, &args);
    std::fs::read(d.join("out.img")).unwrap()
}

fn examine_json(d: &Path, member: &str) -> Value {
    serde_json::from_str::<Value>(&ok(d, &["examine", "--json", member])).unwrap()[0].clone()
}

fn position(d: &Path, member: &str) -> Option<u64> {
    let o = proc::bin_in(RAIDKIT, d, None, &["examine", "--json", member]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v[0]["reshape"]["position_sectors"].as_u64()
}

fn spawn(d: &Path, args: &[&str]) -> Child {
    Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", run_dir(d))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The help examples of `grow` as printed: the offline ones on a RAID6 (the grow killed
/// with SIGKILL once a position is recorded, then continued), the online ones on a served
/// array. Mid-reshape, examine/detail/export tell the truth.
#[test]
fn grow_help_examples_work() {
    let t = TempDir::new("rk-reshape-cli").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    let help = ok(d, &["grow", "--help"]);
    let cmds: Vec<Vec<String>> = help
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("raidkit grow "))
        .map(|l| {
            l.split('#')
                .next()
                .unwrap()
                .split_whitespace()
                .skip(1)
                .map(String::from)
                .collect()
        })
        .collect();
    assert_eq!(cmds.len(), 9, "{help}");
    let args = |i: usize| cmds[i].iter().map(String::as_str).collect::<Vec<_>>();
    let old = ["d0.img", "d1.img", "d2.img", "d3.img"];
    let all = ["d0.img", "d1.img", "d2.img", "d3.img", "d4.img"];
    let data = array(d, "6", &old, 24 << 20);
    // The new disk, made as the help says.
    let make: Vec<&str> = help
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .find(|l| l.starts_with("truncate "))
        .expect("the help makes the new disk")
        .split_whitespace()
        .collect();
    let st = Command::new(make[0])
        .args(&make[1..])
        .current_dir(d)
        .status()
        .unwrap();
    assert!(st.success(), "{make:?}");
    // --dry-run: the plan, nothing written.
    let before = std::fs::read(d.join("d0.img")).unwrap();
    let plan = ok(d, &args(0));
    assert!(plan.starts_with("reshape plan (nothing changed):\n  now:          raid6 4 devices left-symmetric 64K, 30.00 MiB (31457280 bytes)\n  after:        raid6 5 devices left-symmetric 64K, 45.00 MiB (47185920 bytes)\n  stage 1:      restripe to raid6 5 devices left-symmetric 64K\n"), "{plan}");
    assert_eq!(
        std::fs::read(d.join("d0.img")).unwrap(),
        before,
        "--dry-run wrote a member"
    );
    // The grow, killed once a position is recorded.
    let mut c = spawn(d, &args(1));
    wait_for("a recorded reshape position", 60, || {
        position(d, "d0.img").is_some()
    });
    c.kill().unwrap();
    assert!(!c.wait().unwrap().success());
    let x = examine_json(d, "d0.img");
    assert_eq!(x["reshape"]["delta_devices"], 1, "{x}");
    assert_eq!(x["reshape"]["old_raid_disks"], 4, "{x}");
    assert_eq!(x["reshape"]["new_level"], "raid6", "{x}");
    assert_eq!(x["raid_disks"], 5, "{x}");
    let pos = x["reshape"]["position_sectors"].as_u64().unwrap();
    let new_offset = x["reshape"]["new_offset"].as_i64().unwrap();
    let text = ok(d, &["examine", "d0.img"]);
    for line in [
        format!("   Reshape pos'n : {} ({})", pos / 2, human(pos * 512)),
        "   Delta Devices : 1 (4->5)".to_string(),
        format!("      New Offset : {new_offset} sectors"),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let detail = ok(d, &{
        let mut a = vec!["detail"];
        a.extend_from_slice(&all);
        a
    });
    assert!(detail.contains("  Reshape Status : "), "{detail}");
    assert!(
        detail.contains("   Delta Devices : 1, (4->5)\n"),
        "{detail}"
    );
    assert!(
        exported(d, &all)[..data.len()] == data[..],
        "export mid-reshape"
    );
    // --continue finishes it.
    let e = ok_err(d, &args(2));
    assert!(e.contains("raidkit: reshape finished: raid6 5 devices, left-symmetric, 64K chunk; array size 45.00 MiB (47185920 bytes)"), "{e}");
    assert_eq!(position(d, "d0.img"), None);
    let out = exported(d, &all);
    assert!(out[..data.len()] == data[..] && out[data.len()..].iter().all(|&b| b == 0));
    // Online: serve it as md0, then the examples in order.
    let serve = proc::Stopping(
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", run_dir(d))
            .args(["serve", "--socket", "s.sock", "--export", "md0"])
            .args(all)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let status = || -> Value {
        let v: Value = serde_json::from_str(&ok(d, &["status", "--json"])).unwrap();
        v[0].clone()
    };
    wait_for("the control socket", 30, || {
        proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), &["status", "--json"])
            .status
            .success()
            && !status().is_null()
    });
    assert_eq!(
        ok_err(d, &args(3)),
        "raidkit: md0: speed limit 20.00 MiB/s\n"
    );
    assert_eq!(
        ok_err(d, &args(4)),
        "raidkit: md0: reshape started in the background (progress in `raidkit status`)\n"
    );
    assert_eq!(
        ok_err(d, &args(5)),
        "raidkit: md0: the reshape pauses at its next safe position (`--resume` to go on)\n"
    );
    // The job may not have written its first superblocks yet: bounded wait.
    wait_for("the paused reshape in status", 30, || {
        status()["reshape"]["paused"] == true
    });
    let s = status();
    assert_eq!(s["reshape"]["new"]["chunk_sectors"], 256, "{s}");
    let text = ok(d, &["status"]);
    assert!(text.contains("      reshape raid6 5 devices left-symmetric 64K -> raid6 5 devices left-symmetric 128K, "), "{text}");
    assert!(
        text.contains("paused (`raidkit grow md0 --resume`)"),
        "{text}"
    );
    assert_eq!(ok_err(d, &args(6)), "raidkit: md0: the reshape goes on\n");
    assert_eq!(ok_err(d, &args(7)), "raidkit: md0: the reshape is being turned back to the old shape (progress in `raidkit status`)\n");
    wait_for("the revert to finish", 120, || {
        let s = status();
        s["reshape"].is_null() && s["sync"]["action"] == "idle"
    });
    let s = status();
    assert_eq!(s["chunk_bytes"], 65536, "{s}");
    assert_eq!(s["last_result"]["action"], "reshape-revert", "{s}");
    assert_eq!(s["last_result"]["end"], "finished", "{s}");
    ok_err(d, &args(8));
    assert_eq!(status()["members"].as_array().unwrap().len(), 5);
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &all);
    assert!(
        out[..data.len()] == data[..],
        "data after the online reshape and revert"
    );
    let e = ok(d, &{
        let mut a = vec!["check"];
        a.extend_from_slice(&all);
        a
    });
    assert!(e.contains(": 0 mismatched range(s)"), "{e}");
}

fn human(b: u64) -> String {
    // The same words `examine` uses (units.rs is private to the binary).
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

/// `--dry-run` on a healthy array: the plan's fixed lines; on a degraded one: the
/// refusal, exactly, unless --force; `--json` says the same.
#[test]
fn dry_run_plan_and_refusals() {
    let t = TempDir::new("rk-reshape-plan").unwrap();
    let d = t.path();
    array(d, "5", &["a0", "a1", "a2"], 1 << 20);
    files(d, &["a3"], 16 << 20);
    let plan = ok(
        d,
        &words("grow --dry-run --add a3 --raid-devices 4 a0 a1 a2"),
    );
    let lines: Vec<&str> = plan.lines().collect();
    assert_eq!(
        &lines[..7],
        &[
            "reshape plan (nothing changed):",
            "  now:          raid5 3 devices left-symmetric 64K, 30.00 MiB (31457280 bytes)",
            "  after:        raid5 4 devices left-symmetric 64K, 45.00 MiB (47185920 bytes)",
            "  stage 1:      restripe to raid5 4 devices left-symmetric 64K",
            "  data moved:   45.00 MiB (47185920 bytes)",
            "  room:         data offset moves 384 sectors down, into the room before the data on every member (no backup file)",
            "  stripe cache: 31.88 MiB per batch (sized from the geometry)",
        ],
        "{plan}"
    );
    assert!(lines[7].starts_with("  member speed: "), "{plan}");
    assert!(lines[8].starts_with("  estimate:     "), "{plan}");
    assert_eq!(
        lines[9],
        "  checks:       healthy (not degraded, no lost ranges, no slow member)"
    );
    // Degraded: refused, each problem saying what to do.
    let want = "raidkit: error: refusing to reshape:\n  - the array is degraded (roles [2] missing): a reshape reads every stripe, and one more failure during it loses data; add the missing members and let them rebuild first\n(--force reshapes anyway)\n";
    let e = err(d, &["grow", "--dry-run", "--chunk", "128", "a0", "a1"]);
    assert_eq!(e, want);
    let e = err(d, &["grow", "--chunk", "128", "a0", "a1"]);
    assert_eq!(e, want);
    let plan = ok(
        d,
        &["grow", "--dry-run", "--force", "--chunk", "128", "a0", "a1"],
    );
    assert!(
        plan.contains("  checks:       1 problem(s): the reshape is refused without --force\n"),
        "{plan}"
    );
    let o = proc::bin_in(
        RAIDKIT,
        d,
        None,
        &["grow", "--dry-run", "--json", "--chunk", "128", "a0", "a1"],
    );
    assert!(!o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["refused"], true, "{v}");
    assert_eq!(v["to"]["chunk_sectors"], 256, "{v}");
    assert_eq!(v["problems"].as_array().unwrap().len(), 1, "{v}");
}

/// Exact errors of the contract's misuse.
#[test]
fn grow_errors() {
    let t = TempDir::new("rk-reshape-err").unwrap();
    let d = t.path();
    array(d, "5", &["a0", "a1", "a2"], 1 << 20);
    let m = ["a0", "a1", "a2"];
    let e = |extra: &[&str]| {
        let mut a = vec!["grow"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&m);
        err(d, &a)
    };
    assert_eq!(e(&[]), "raidkit: error: say what to change: --raid-devices, --add, --level, --layout, --chunk or --array-size (or --bitmap); --continue finishes a reshape found on the members\n");
    assert_eq!(e(&["--pause"]), "raidkit: error: --pause steers the reshape of a running array: give its name (as in `raidkit status`); on a stopped array, finish it with --continue\n");
    assert_eq!(
        e(&["--continue"]),
        "raidkit: error: no reshape is in progress on these members (nothing to continue)\n"
    );
    assert_eq!(
        e(&["--continue", "--chunk", "128"]),
        "raidkit: error: --continue steers the reshape in progress: give it without a new shape\n"
    );
    assert_eq!(
        e(&["--bitmap", "internal", "--raid-devices", "4"]),
        "raidkit: error: --bitmap is a change of its own: give it without reshape options\n"
    );
    let level = e(&["--level", "7"]);
    assert!(level.starts_with("raidkit: error: --level: "), "{level}");
    let shrink = e(&["--raid-devices", "2"]);
    assert!(shrink.starts_with("raidkit: error: the reshaped array holds 15728640 bytes, less than the 31457280 it holds now: shrink what is on it (the filesystem) to fit first, then confirm the new size"), "{shrink}");
    // Nothing was changed by the refusals.
    assert!(examine_json(d, "a0")["reshape"].is_null());
    // A bitmap is refused by the plan as by the reshape, forced or not.
    ok_err(d, &["grow", "--bitmap", "internal", "a0", "a1", "a2"]);
    let want = "raidkit: error: the array has a write-intent bitmap: remove it first (grow the bitmap to none), reshape, then add it back\n";
    assert_eq!(e(&["--dry-run", "--chunk", "128"]), want);
    assert_eq!(e(&["--dry-run", "--force", "--chunk", "128"]), want);
    assert_eq!(e(&["--chunk", "128"]), want);
}

/// SIGTERM stops a foreground reshape at a safe position and says how to go on.
#[test]
fn sigterm_stops_at_a_safe_position() {
    let t = TempDir::new("rk-reshape-term").unwrap();
    let d = t.path();
    let data = array(d, "5", &["a0", "a1", "a2"], 20 << 20);
    files(d, &["a3"], 16 << 20);
    let c = spawn(
        d,
        &words("grow --speed-limit 8M --add a3 --raid-devices 4 a0 a1 a2"),
    );
    wait_for("a recorded reshape position", 60, || {
        position(d, "a0").is_some()
    });
    proc::terminate(&c);
    let o = c.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{e}");
    let p = position(d, "a0").expect("stopped mid-reshape");
    let want = format!("raidkit: reshape stopped at array sector {p} (recorded on the members); finish it with `raidkit grow --continue a0 a1 a2 a3` (or serve the array, or let the kernel)");
    assert!(e.lines().any(|l| l == want), "missing {want:?} in\n{e}");
    let all = ["a0", "a1", "a2", "a3"];
    assert!(exported(d, &all)[..data.len()] == data[..]);
    ok_err(d, &["grow", "--continue", "a0", "a1", "a2", "a3"]);
    assert!(exported(d, &all)[..data.len()] == data[..]);
}

/// `grow NAME --add ... --raid-devices` on a served array: new NBD connections see the
/// grown size once the reshape finishes; the data is all there after.
#[test]
fn online_grow_export_grows() {
    use raidkit_nbd::client::{Client, ClientOptions};
    let t = TempDir::new("rk-reshape-nbd").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    let data = array(d, "5", &["a0", "a1", "a2"], 8 << 20);
    files(d, &["a3"], 16 << 20);
    let serve = serve_logged(d, &["a0", "a1", "a2"]);
    let uri = format!("nbd+unix:///vol?socket={}", d.join("s.sock").display());
    let size = || Client::connect(&uri, &ClientOptions::default()).map(|c| c.info().size);
    wait_for("the NBD socket", 30, || size().is_ok());
    let before = size().unwrap();
    let status = || -> Value {
        let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), &["status", "--json"]);
        serde_json::from_slice::<Value>(&o.stdout)
            .map(|v| v[0].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(status()["array_bytes"], before);
    let e = ok_err(d, &["grow", "vol", "--add", "a3", "--raid-devices", "4"]);
    assert_eq!(
        e,
        "raidkit: vol: reshape started in the background (progress in `raidkit status`)\n"
    );
    wait_for("the reshape to finish", 120, || {
        let s = status();
        s["reshape"].is_null() && s["last_result"]["end"] == "finished"
    });
    let after = size().unwrap();
    assert_eq!(after, before / 2 * 3, "3 data members instead of 2");
    // Its own events: started 3 -> 4, finished with every byte of the new size moved.
    let started = events(d, "reshape_started");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["action"], "reshape");
    assert_eq!(started[0]["from"]["raid_disks"], 3);
    assert_eq!(started[0]["to"]["raid_disks"], 4);
    let fin = events(d, "reshape_finished");
    assert_eq!(fin.len(), 1, "{fin:?}");
    assert_eq!(fin[0]["end"], "finished", "{fin:?}");
    assert_eq!(fin[0]["from"]["array_sectors"], before / 512, "{fin:?}");
    assert_eq!(fin[0]["to"]["array_sectors"], after / 512, "{fin:?}");
    assert_eq!(fin[0]["bytes_moved"], after, "{fin:?}");
    assert_eq!(fin[0]["array_bytes"], after, "{fin:?}");
    assert!(events(d, "rebuild_finished").is_empty());
    assert_eq!(status()["array_bytes"], after);
    assert_eq!(status()["raid_disks"], 4);
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &["a0", "a1", "a2", "a3"]);
    assert_eq!(out.len() as u64, after);
    assert!(out[..data.len()] == data[..]);
}

/// The event lines of `kind` that `serve` logged to `serve.log` (their JSON detail).
fn events(d: &Path, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    let tag = format!("]: {kind} ");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, j)| j))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

/// `raidkit serve` of `members` as `vol`, stderr (its event lines) to `serve.log`.
fn serve_logged(d: &Path, members: &[&str]) -> proc::Stopping {
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    proc::Stopping(
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", run_dir(d))
            .args(["serve", "--socket", "s.sock", "--export", "vol"])
            .args(members)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

fn status_of(d: &Path) -> Value {
    let o = proc::bin_in(RAIDKIT, d, Some(&run_dir(d)), &["status", "--json"]);
    serde_json::from_slice::<Value>(&o.stdout)
        .map(|v| v[0].clone())
        .unwrap_or(Value::Null)
}

/// A RAID5 of a0..a2 (8 MiB of data written: returned) served, with a blank a3 beside it
/// to add, and the reshape speed limited to 2 MiB/s so a test can act half-way.
fn served_slowly(d: &Path) -> (Vec<u8>, proc::Stopping) {
    std::fs::create_dir(run_dir(d)).unwrap();
    let data = array(d, "5", &["a0", "a1", "a2"], 8 << 20);
    files(d, &["a3"], 16 << 20);
    let serve = serve_logged(d, &["a0", "a1", "a2"]);
    wait_for("the control socket", 30, || !status_of(d).is_null());
    ok_err(d, &["grow", "vol", "--speed-limit", "2M"]);
    (data, serve)
}

/// `grow NAME --revert` half-way: `status` counts the way back from where the reshape was
/// turned (not from the far end of the array), on the reshape line and the job line alike,
/// with the speed of this job (within the speed limit) and an ETA that follows from it.
/// The reshape jobs say what they did in their own events: `reshape_started`,
/// `reshape_finished` (the forward job, stopped by the revert) and `reshape_reverted`, with
/// the shapes before and after and the bytes moved.
#[test]
fn online_revert_counts_back_and_reshape_events() {
    let t = TempDir::new("rk-reshape-rev").unwrap();
    let d = t.path();
    let (data, serve) = served_slowly(d);
    let before = status_of(d)["array_bytes"].clone();
    let limit: u64 = 2 << 20;
    ok_err(d, &["grow", "vol", "--add", "a3", "--raid-devices", "4"]);
    // Let it move 6 MiB or more (of 48), then turn it back.
    wait_for("the reshape to move 6 MiB", 60, || {
        status_of(d)["reshape"]["progress_sectors"]
            .as_u64()
            .is_some_and(|p| p >= 12288)
    });
    ok_err(d, &["grow", "vol", "--revert"]);
    let s = status_of(d);
    let r = &s["reshape"];
    assert_eq!(r["direction"], "backwards", "{s}");
    let (start, total, done, p) = (
        r["start_sectors"].as_u64().unwrap(),
        r["total_sectors"].as_u64().unwrap(),
        r["done_sectors"].as_u64().unwrap(),
        r["progress_sectors"].as_u64().unwrap(),
    );
    // The way back is from the turn to 0: as long as the way there was.
    assert_eq!(r["end_sectors"], 0, "{s}");
    assert_eq!(total, start, "{s}");
    assert!(
        (12288..=32768).contains(&start),
        "turned at {start} sectors of 65536: {s}"
    );
    assert_eq!(done + p, total, "{s}");
    // The job line: the same span, this job's own speed (once it has moved 3 MiB: the
    // limiter lets half a second's worth go at once), an ETA from it.
    wait_for("the revert job to move 3 MiB", 30, || {
        let s = status_of(d);
        s["reshape"].is_null() || s["sync"]["done_sectors"].as_u64().unwrap_or(0) >= 6144
    });
    let s = status_of(d);
    if !s["reshape"].is_null() {
        let j = &s["sync"];
        assert_eq!(j["total_sectors"], total, "{s}");
        let jd = j["done_sectors"].as_u64().unwrap();
        assert!(jd <= total, "{s}");
        let speed = j["speed_bytes_per_sec"].as_u64().unwrap();
        assert!(
            speed <= 2 * limit,
            "speed {speed} over twice the limit: {s}"
        );
        let eta = j["eta_seconds"].as_u64().unwrap();
        assert_eq!(eta, (total - jd) * 512 / speed, "{s}");
    }
    wait_for("the revert to finish", 120, || {
        let s = status_of(d);
        s["reshape"].is_null() && s["last_result"]["action"] == "reshape-revert"
    });
    assert_eq!(status_of(d)["raid_disks"], 3);
    // The events.
    let started = events(d, "reshape_started");
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(started[0]["action"], "reshape");
    assert_eq!(
        (
            started[0]["from"]["raid_disks"].clone(),
            started[0]["to"]["raid_disks"].clone()
        ),
        (3.into(), 4.into())
    );
    assert_eq!(started[1]["action"], "reshape-revert");
    assert_eq!(
        (
            started[1]["from"]["raid_disks"].clone(),
            started[1]["to"]["raid_disks"].clone()
        ),
        (4.into(), 3.into())
    );
    let fin = events(d, "reshape_finished");
    assert_eq!(fin.len(), 1, "{fin:?}");
    assert_eq!(
        (fin[0]["action"].clone(), fin[0]["end"].clone()),
        ("reshape".into(), "stopped".into())
    );
    let fwd = fin[0]["bytes_moved"].as_u64().unwrap();
    assert!(fwd >= 12288 * 512, "{fin:?}");
    let rev = events(d, "reshape_reverted");
    assert_eq!(rev.len(), 1, "{rev:?}");
    assert_eq!(rev[0]["end"], "finished", "{rev:?}");
    assert_eq!(rev[0]["to"]["raid_disks"], 3, "{rev:?}");
    assert_eq!(rev[0]["bytes_moved"], total * 512, "{rev:?}");
    assert_eq!(rev[0]["array_bytes"], before, "{rev:?}");
    assert!(
        events(d, "rebuild_finished").is_empty(),
        "a reshape reported as a rebuild"
    );
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &["a0", "a1", "a2"]);
    assert!(out[..data.len()] == data[..], "data after the revert");
}

/// `grow NAME --revert` of a RAID5→6 conversion (it builds the new Q member as it goes):
/// refused, saying why, and the reshape goes on as if not asked; it finishes as RAID6.
#[test]
fn online_raid5_to_6_is_not_turned_back_and_goes_on() {
    let t = TempDir::new("rk-reshape-r6rev").unwrap();
    let d = t.path();
    let (data, serve) = served_slowly(d);
    ok_err(d, &["grow", "vol", "--add", "a3", "--level", "6"]);
    wait_for("the restripe to move 1 MiB", 60, || {
        status_of(d)["reshape"]["progress_sectors"]
            .as_u64()
            .is_some_and(|p| p >= 2048)
    });
    let e = err(d, &["grow", "vol", "--revert"]);
    assert!(e.contains("this reshape builds the member in role 3 (it holds nothing where the reshape has not been yet): it cannot be turned back; let it finish, then reshape back"), "{e}");
    let s = status_of(d);
    assert_eq!(s["reshape"]["direction"], "forwards", "{s}");
    assert_eq!(
        s["sync"]["action"], "reshape",
        "the reshape was left stopped: {s}"
    );
    ok_err(d, &["grow", "vol", "--speed-limit", "0"]);
    wait_for("the reshape to finish", 120, || {
        let s = status_of(d);
        s["reshape"].is_null() && s["last_result"]["end"] == "finished"
    });
    let s = status_of(d);
    assert_eq!(
        (s["level"].clone(), s["raid_disks"].clone()),
        ("raid6".into(), 4.into()),
        "{s}"
    );
    let st = serve.stop();
    assert!(st.is_some_and(|s| s.success()), "serve: {st:?}");
    let out = exported(d, &["a0", "a1", "a2", "a3"]);
    assert!(
        out[..data.len()] == data[..],
        "data after the refused revert"
    );
}

/// Arrays the kernel left mid-reshape (the committed fixtures, no VM) through the CLI:
/// `examine` prints mdadm's reshape lines as mdadm printed them for the same members, and
/// the fields in `--json`; `export` (with mdadm's backup file on 0.90) and `detail` work
/// on them as they stand; `grow --continue [--backup-file FILE]` finishes them with the
/// data intact and a clean check.
#[test]
fn kernel_mid_reshape_arrays_through_the_cli() {
    use raidkit_testkit::fixtures::decompress_file;
    use raidkit_testkit::pattern::fill_tagged;
    for fx in ["r5-to-r6-4to5", "r5-grow-3to4-m090"] {
        let t = TempDir::new("rk-reshape-kfx").unwrap();
        let d = t.path();
        std::fs::create_dir(run_dir(d)).unwrap();
        let src = raidkit_testkit::repo_root()
            .join("tests/fixtures/kernel-reshape")
            .join(fx);
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("manifest.json")).unwrap())
                .unwrap();
        let mut members = Vec::new();
        for (i, mm) in m["members"].as_array().unwrap().iter().enumerate() {
            let out = d.join(format!("m{i}.img"));
            if let Err(e) = decompress_file(&src.join(mm["file"].as_str().unwrap()), &out) {
                eprintln!("skipping {fx}: {e} (scripts/deps.sh installs xz and zstd)");
                return;
            }
            members.push(format!("m{i}.img"));
        }
        let backup = m["backup"].as_str().map(|f| {
            decompress_file(&src.join(f), &d.join("md.backup")).unwrap();
            "md.backup"
        });
        let with = |cmd: &[&str]| -> Vec<String> {
            let mut a: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            if let Some(b) = backup {
                a.extend(["--backup-file".to_string(), b.to_string()]);
            }
            a.extend(members.iter().cloned());
            a
        };
        let run = |a: Vec<String>| ok(d, &a.iter().map(String::as_str).collect::<Vec<_>>());
        // examine: mdadm's reshape lines, as mdadm printed them for member 0.
        let ours = ok(d, &["examine", "m0.img"]);
        let theirs = std::fs::read_to_string(src.join("examine-0.txt")).unwrap();
        let labels = [
            "Reshape pos'n :",
            "Delta Devices :",
            "New Level :",
            "New Layout :",
            "New Chunksize :",
            "New Offset :",
        ];
        let pick = |text: &str| -> Vec<String> {
            text.lines()
                .map(str::trim)
                .filter(|l| labels.iter().any(|p| l.starts_with(p)))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                // mdadm adds the size in decimal units too: "(7.50 MiB 7.86 MB)".
                .map(|l| match l.split_once(" (") {
                    Some((a, _)) if l.starts_with("Reshape") => a.to_string(),
                    _ => l,
                })
                .collect()
        };
        assert!(!pick(&theirs).is_empty(), "{fx}: {theirs}");
        assert_eq!(pick(&ours), pick(&theirs), "{fx}: ours\n{ours}");
        let x = examine_json(d, "m0.img");
        let pos = x["reshape"]["position_sectors"].as_u64().unwrap();
        let line = pick(&theirs)
            .into_iter()
            .find(|l| l.starts_with("Reshape pos'n"))
            .unwrap();
        let kib: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert_eq!(pos, kib * 2, "{fx}: {x}");
        let delta: i64 = pick(&theirs)
            .iter()
            .find_map(|l| l.strip_prefix("Delta Devices : "))
            .map_or(0, |v| v.split_whitespace().next().unwrap().parse().unwrap());
        assert_eq!(x["reshape"]["delta_devices"], delta, "{fx}: {x}");
        // export, detail, check as it stands.
        let bytes = m["array_bytes"].as_u64().unwrap() as usize;
        let mut want = vec![0u8; bytes];
        fill_tagged(m["seed"].as_u64().unwrap(), 0, &mut want);
        run(with(&["export", "--output", "out.img"]));
        let out = std::fs::read(d.join("out.img")).unwrap();
        assert!(out[..bytes] == want[..], "{fx}: export mid-reshape");
        let detail = run(with(&["detail"]));
        assert!(detail.contains("  Reshape Status : "), "{fx}: {detail}");
        // (`check` as it stands: see check_of_kernel_mid_reshape_arrays_is_clean.)
        // grow --continue finishes it.
        let e = {
            let a = with(&["grow", "--continue"]);
            ok_err(d, &a.iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert!(e.contains("raidkit: reshape finished: "), "{fx}: {e}");
        assert_eq!(position(d, "m0.img"), None, "{fx}");
        let mut a = vec!["export", "--output", "out.img"];
        a.extend(members.iter().map(String::as_str));
        ok(d, &a);
        let out = std::fs::read(d.join("out.img")).unwrap();
        assert!(
            out[..bytes] == want[..],
            "{fx}: export after grow --continue"
        );
        let mut a = vec!["check"];
        a.extend(members.iter().map(String::as_str));
        let c = ok(d, &a);
        assert!(c.contains(": 0 mismatched range(s)"), "{fx}: {c}");
    }
}

/// `check` of a kernel-made array as it stands mid-reshape: each side of the position in
/// its own geometry (checked in the new geometry throughout, the part not yet moved showed
/// 2821 mismatched ranges on the RAID5->6 fixture); `repair` is refused there.
#[test]
fn check_of_kernel_mid_reshape_arrays_is_clean() {
    use raidkit_testkit::fixtures::decompress_file;
    let t = TempDir::new("rk-reshape-kck").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    let src = raidkit_testkit::repo_root().join("tests/fixtures/kernel-reshape/r5-to-r6-4to5");
    let mut args = vec!["check".to_string()];
    for i in 0..5 {
        let out = d.join(format!("m{i}.img"));
        if let Err(e) = decompress_file(&src.join(format!("{i}.img.xz")), &out) {
            eprintln!("skipping: {e} (scripts/deps.sh installs xz and zstd)");
            return;
        }
        args.push(format!("m{i}.img"));
    }
    let c = ok(d, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(c.contains(": 0 mismatched range(s)"), "{c}");
    args[0] = "repair".to_string();
    let e = err(d, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        e.contains("the array is in the middle of a reshape: a repair would rewrite parity or copies across two geometries; let the reshape finish first"),
        "{e}"
    );
}

/// `grow NAME --add ... --raid-devices` on an array served by `raidkit mount`: the file
/// grows with the array once the reshape finishes (it kept the size it had when mounted,
/// so the space added could not be written: ENOSPC), and what is written past the old
/// end is on the members.
#[test]
fn online_grow_mounted_file_grows() {
    use std::os::unix::fs::FileExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if !Path::new("/dev/fuse").exists() || !root {
        println!("skip: needs /dev/fuse and root");
        return;
    }
    let t = TempDir::new("rk-reshape-fuse").unwrap();
    let d = t.path();
    std::fs::create_dir(run_dir(d)).unwrap();
    std::fs::create_dir(d.join("mnt")).unwrap();
    let data = array(d, "5", &["a0", "a1", "a2"], 8 << 20);
    files(d, &["a3"], 16 << 20);
    let mount = proc::Stopping(
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", run_dir(d))
            .args(["mount", "a0", "a1", "a2", "mnt"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let file = d.join("mnt/rs");
    wait_for("the mounted file and its control socket", 30, || {
        file.exists() && !status_of(d).is_null()
    });
    let before = std::fs::metadata(&file).unwrap().len();
    ok_err(d, &["grow", "rs", "--add", "a3", "--raid-devices", "4"]);
    wait_for("the reshape to finish", 120, || {
        let s = status_of(d);
        s["reshape"].is_null() && s["last_result"]["end"] == "finished"
    });
    let after = status_of(d)["array_bytes"].as_u64().unwrap();
    assert_eq!(after, before / 2 * 3, "3 data members instead of 2");
    // The kernel asks for the size again once its cached attributes expire (1 s).
    wait_for("the file to grow", 10, || {
        std::fs::metadata(&file).unwrap().len() == after
    });
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    f.write_all_at(b"past the old end", before + 4096).unwrap();
    drop(f);
    let st = mount.stop();
    assert!(st.is_some_and(|s| s.success()), "mount: {st:?}");
    let out = exported(d, &["a0", "a1", "a2", "a3"]);
    assert_eq!(out.len() as u64, after);
    assert!(out[..data.len()] == data[..]);
    let at = (before + 4096) as usize;
    assert_eq!(&out[at..at + 16], b"past the old end");
}
