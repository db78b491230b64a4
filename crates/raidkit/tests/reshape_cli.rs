//! The reshape CLI contract (issue 15), offline: `grow MEMBER...` in the foreground (killed
//! and continued, stopped by SIGTERM at a safe position), `grow --continue`, `--dry-run`'s
//! plan and refusals, kernel arrays stopped half-way through a reshape, the reshape fields of
//! `examine`, `detail` and `status`, and the exact errors. The online half (`grow NAME ...`
//! on a served array) is in `reshape_online.rs`.

mod reshape_common;

use raidkit_testkit::proc::{self, wait_for, words};
use raidkit_testkit::tempdir::TempDir;
use reshape_common::*;
use serde_json::Value;
use std::process::{Command, Stdio};

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
