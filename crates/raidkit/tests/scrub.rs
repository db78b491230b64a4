//! Scrub verdicts with the checksum sidecar (2-way mirrors, RAID5), stale sidecars,
//! windows, and an online check that is stopped, survives a server restart and resumes.

use raidkit_testkit::proc::{self, wait_for, words};
use raidkit_testkit::tempdir::TempDir;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(dir: &Path, args: &[&str]) -> Output {
    proc::bin_in(RAIDKIT, dir, Some(&dir.join("run")), args)
}

fn ok(dir: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, dir, Some(&dir.join("run")), args)
}

/// `check --json` that is expected to find mismatches (exit status 1).
fn check_json(dir: &Path, args: &[&str]) -> (Value, String) {
    let mut a = vec!["check", "--json"];
    a.extend_from_slice(args);
    let o = rk(dir, &a);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "check {args:?}: {e}: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (v, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn data_offset(dir: &Path, member: &str) -> u64 {
    let v: Value = serde_json::from_str(&ok(dir, &["examine", "--json", member])).unwrap();
    v[0]["data_offset"].as_u64().unwrap() * 512
}

fn flip(dir: &Path, member: &str, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(member))
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

fn export(dir: &Path, members: &[&str]) -> Vec<u8> {
    let mut a = vec!["export", "--output", "-"];
    a.extend_from_slice(members);
    let o = rk(dir, &a);
    assert!(o.status.success());
    o.stdout
}

const M: u64 = 1 << 20;

#[test]
fn help_examples_work() {
    let t = TempDir::new("rk-scrub").unwrap();
    let d = t.path();
    for (sub, n) in [
        (&["check", "--help"][..], 5),
        (&["checksums", "init", "--help"], 4),
    ] {
        let help = ok(d, sub);
        let cmds: Vec<String> = help
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("raidkit ") && !l.starts_with("raidkit serve "))
            .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
            .collect();
        assert_eq!(cmds.len(), n, "{help}");
        for c in &cmds {
            let args: Vec<&str> = c.split_whitespace().skip(1).collect();
            ok(d, &args);
        }
    }
}

#[test]
fn mirror2_checksums_name_the_wrong_copy_and_repair_it() {
    let t = TempDir::new("rk-scrub").unwrap();
    let d = t.path();
    ok(d, &words("create -l 1 -n 2 -z 9M --checksums a.csum a b"));
    let size = 8 * M as usize;
    let data = pattern(size, 7);
    std::fs::write(d.join("in"), &data).unwrap();
    ok(
        d,
        &["import", "--checksums", "a.csum", "--input", "in", "a", "b"],
    );
    let off = data_offset(d, "a");
    // Block 261 (array bytes 1069056..1073152) is wrong on b; block 1300 on a.
    flip(d, "b", off + 261 * 4096 + 100);
    flip(d, "a", off + 1300 * 4096 + 4095);
    let exp_ranges = json!([
        {"offset": 261 * 4096, "len": 4096},
        {"offset": 1300 * 4096, "len": 4096},
    ]);

    // Without the sidecar: the exact ranges, but undecided.
    let (v, _) = check_json(d, &["a", "b"]);
    assert_eq!(v["mismatch_ranges"], exp_ranges);
    let vs = v["verdicts"].as_array().unwrap();
    assert_eq!(vs.len(), 2, "{v}");
    for x in vs {
        assert_eq!(x["decided_by"], "undecided");
        assert_eq!(x["role"], Value::Null);
        assert!(
            x["what"]
                .as_str()
                .unwrap()
                .contains("no checksum sidecar: a 2-way mirror cannot tell which copy is right; like md, repair copies the first readable copy (role 0)"),
            "{x}"
        );
    }

    // With it: which copy is wrong.
    let (v, err) = check_json(d, &["--checksums", "a.csum", "a", "b"]);
    assert!(!err.contains("WARNING"), "{err}");
    assert_eq!(v["checksums"], true);
    assert_eq!(v["mismatch_ranges"], exp_ranges);
    assert_eq!(
        v["verdicts"],
        json!([
            {"stripe": 0, "offset": 261 * 4096, "len": 4096, "role": 1, "device": "b",
             "what": "mirror copy (does not match its checksum)", "decided_by": "checksum", "repaired": false},
            {"stripe": 0, "offset": 1300 * 4096, "len": 4096, "role": 0, "device": "a",
             "what": "mirror copy (does not match its checksum)", "decided_by": "checksum", "repaired": false},
        ])
    );

    // Repair rewrites exactly the wrong copies: the data is the original everywhere,
    // whichever copy is read.
    let out = ok(d, &["repair", "--checksums", "a.csum", "a", "b"]);
    assert!(
        out.contains("array bytes 1069056..1073152: role 1 (b) is wrong [checksum]")
            && out.contains("16 sectors rewritten"),
        "{out}"
    );
    ok(d, &["check", "--checksums", "a.csum", "a", "b"]);
    assert_eq!(export(d, &["a"]), data[..]);
    assert_eq!(export(d, &["b"]), data[..]);
    // The repair kept the sidecar in step with the array (its events follow).
    assert!(ok(
        d,
        &["checksums", "status", "--checksums", "a.csum", "a", "b"]
    )
    .contains("usable"));
}

#[test]
fn raid5_checksums_tell_data_from_parity() {
    let t = TempDir::new("rk-scrub").unwrap();
    let d = t.path();
    ok(
        d,
        &[
            "create", "-l", "5", "-n", "3", "-c", "64", "-z", "9M", "a", "b", "c",
        ],
    );
    // Enable on an existing array.
    let out = ok(
        d,
        &["checksums", "init", "--checksums", "s.csum", "a", "b", "c"],
    );
    assert!(out.contains("checksums of 4096 blocks"), "{out}");
    let size = 16 * M as usize;
    let data = pattern(size, 11);
    std::fs::write(d.join("in"), &data).unwrap();
    ok(d, &words("import --checksums s.csum --input in a b c"));
    let off = data_offset(d, "a");
    // left-symmetric, 3 disks, 64 KiB chunks: stripe 0 = D0 on a, D1 on b, P on c;
    // stripe 1 = D0 on c, D1 on a, P on b.
    // Data: page 2 of D0 of stripe 0 (array bytes 8192..12288) on a.
    flip(d, "a", off + 2 * 4096 + 7);
    // Parity: page 5 of stripe 1's P, on b.
    flip(d, "b", off + 65536 + 5 * 4096 + 1);
    let exp_ranges = json!([
        {"offset": 8192, "len": 4096},
        {"offset": 65536 + 8192, "len": 4096},
        {"offset": 131072 + 5 * 4096, "len": 4096},
        {"offset": 196608 + 5 * 4096, "len": 4096},
    ]);
    let (v, _) = check_json(d, &["a", "b", "c"]);
    assert_eq!(v["mismatch_ranges"], exp_ranges);
    for x in v["verdicts"].as_array().unwrap() {
        assert_eq!(x["decided_by"], "undecided", "{x}");
        assert_eq!(
            x["what"],
            "data or parity: RAID5 cannot tell which without a checksum sidecar; like md, repair recomputes parity from the data"
        );
    }
    let (v, _) = check_json(d, &["--checksums", "s.csum", "a", "b", "c"]);
    assert_eq!(v["mismatch_ranges"], exp_ranges);
    assert_eq!(
        v["verdicts"],
        json!([
            {"stripe": 0, "offset": 8192, "len": 4096, "role": 0, "device": "a",
             "what": "data (array bytes 8192..12288); it does not match its checksum, its reconstruction from parity does",
             "decided_by": "checksum", "repaired": false},
            {"stripe": 1, "offset": 131072 + 5 * 4096, "len": 4096, "role": 1, "device": "b",
             "what": "P (every data block matches its checksum)", "decided_by": "checksum", "repaired": false},
        ])
    );
    ok(d, &["repair", "--checksums", "s.csum", "a", "b", "c"]);
    ok(d, &["check", "a", "b", "c"]);
    assert_eq!(export(d, &["a", "b", "c"]), data[..]);
    // Degraded reads (which use parity) return the original data too.
    assert_eq!(export(d, &["a", "c"]), data[..]);
}

#[test]
fn stale_sidecar_is_ignored_loudly() {
    let t = TempDir::new("rk-scrub").unwrap();
    let d = t.path();
    ok(d, &words("create -l 1 -n 2 -z 5M --checksums a.csum a b"));
    // Written without the sidecar: its checksums no longer describe the data.
    std::fs::write(d.join("in"), pattern(M as usize, 3)).unwrap();
    ok(d, &["import", "--input", "in", "a", "b"]);
    let off = data_offset(d, "a");
    flip(d, "b", off + 4096 * 3);
    let (v, err) = check_json(d, &["--checksums", "a.csum", "a", "b"]);
    assert!(
        err.contains("raidkit: WARNING: checksum sidecar a.csum: stale: it matches array event count 2 but the members are at 4")
            && err.contains("continuing without checksums"),
        "{err}"
    );
    assert_eq!(v["checksums"], false);
    assert_eq!(v["verdicts"][0]["decided_by"], "undecided");
    let o = rk(
        d,
        &["checksums", "status", "--checksums", "a.csum", "a", "b"],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("recompute them with `raidkit checksums init`")
    );
    // init refuses while the copies disagree, and works after a repair.
    let o = rk(d, &["checksums", "init", "--checksums", "a.csum", "a", "b"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains(
        "the check found 1 mismatched range(s) (first at array byte 12288): checksums computed now could record wrong data as right; run `raidkit repair` first"
    ));
    ok(d, &["repair", "a", "b"]);
    ok(d, &["checksums", "init", "--checksums", "a.csum", "a", "b"]);
    // Another array's sidecar is refused.
    ok(d, &words("create -l 1 -n 2 -z 5M --checksums x.csum x y"));
    let o = rk(d, &["check", "--checksums", "x.csum", "a", "b"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("it belongs to another array"));
}

#[test]
fn windowed_check_reports_only_inside_the_window() {
    let t = TempDir::new("rk-scrub").unwrap();
    let d = t.path();
    ok(d, &["create", "-l", "1", "-n", "2", "-z", "9M", "a", "b"]);
    std::fs::write(d.join("in"), pattern(8 * M as usize, 5)).unwrap();
    ok(d, &["import", "--input", "in", "a", "b"]);
    let off = data_offset(d, "a");
    flip(d, "b", off + M + 4096);
    flip(d, "b", off + 5 * M);
    let (v, _) = check_json(d, &["--from", "4M", "--to", "6M", "a", "b"]);
    assert_eq!(v["covered"], json!({"offset": 4 * M, "end": 6 * M}));
    assert_eq!(v["covered_bytes"], json!({"start": 4 * M, "end": 6 * M}));
    assert_eq!(
        v["mismatch_ranges"],
        json!([{"offset": 5 * M, "len": 4096}])
    );
    // Unaligned bounds round out to 4 KiB pages.
    let (v, _) = check_json(d, &["--from", "1000", "--to", "1052673", "a", "b"]);
    assert_eq!(v["covered"], json!({"offset": 0, "end": M + 8192}));
    assert_eq!(
        v["mismatch_ranges"],
        json!([{"offset": M + 4096, "len": 4096}])
    );
    // A window without mismatches passes.
    let out = ok(d, &["check", "--from", "2M", "--to", "5M", "a", "b"]);
    assert!(
        out.starts_with("check of array bytes 2097152..5242880: 0 mismatched range(s)"),
        "{out}"
    );
    let o = rk(d, &["check", "--from", "5M", "--to", "5M", "a", "b"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty window"));
    // A window starting at the end names the end, not a --to the user did not give.
    let size = serde_json::from_str::<Value>(&ok(d, &["detail", "--json", "a", "b"])).unwrap()
        ["array_bytes"]
        .as_u64()
        .unwrap();
    let (from, to) = (size.to_string(), (size + 4096).to_string());
    let o = rk(d, &["check", "--from", &from, "--to", &to, "a", "b"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("raidkit: error: empty window: --from {size} is at or past the end of the array ({size} bytes)\n")
    );
}

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(d: &Path) -> Server {
    let child = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args([
            "serve",
            "--socket",
            "nbd.sock",
            "--checksums",
            "a.csum",
            "a",
            "b",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = Server(child);
    wait_for("the control socket", 30, || status(d).is_some());
    s
}

fn stop(mut s: Server) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(s.0.id() as i32, libc::SIGTERM) };
    let st = s.0.wait().unwrap();
    assert!(st.success(), "serve exited with {st}");
}

fn status(d: &Path) -> Option<Value> {
    let o = rk(d, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v.as_array()?.first().cloned()
}

fn finished(d: &Path) -> Value {
    let mut last = Value::Null;
    wait_for("the check to finish", 60, || {
        last = status(d)
            .map(|s| s["last_result"].clone())
            .unwrap_or_default();
        !last.is_null() && status(d).is_some_and(|s| s["sync"]["action"] == "idle")
    });
    last
}

#[test]
fn stopped_check_resumes_after_a_server_restart() {
    let t = TempDir::new("rk-scrub").unwrap();
    let d = t.path();
    ok(
        d,
        &words(
            "create -l 1 -n 2 -z 9M --name rs --homehost none \
            --checksums a.csum a b",
        ),
    );
    std::fs::write(d.join("in"), pattern(8 * M as usize, 9)).unwrap();
    ok(
        d,
        &["import", "--checksums", "a.csum", "--input", "in", "a", "b"],
    );
    let off = data_offset(d, "a");
    // One bad block near the start, one near the end.
    let early = 64 * 1024u64;
    let late = 8 * M - 4096;
    flip(d, "b", off + early);
    flip(d, "a", off + late + 9);

    let s = serve(d);
    let o = rk(d, &["sync-action", "rs", "check", "--resume"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no stopped check or repair of rs to resume")
    );
    // Slow, so that it can be stopped part way.
    ok(d, &["sync-action", "rs", "check", "--speed-limit", "1M"]);
    wait_for("progress", 30, || {
        status(d).is_some_and(|s| s["sync"]["done_sectors"].as_u64().unwrap_or(0) >= 512)
    });
    ok(d, &["sync-action", "rs", "idle"]);
    let first = finished(d);
    let stopped = first["resume_from"].as_u64().expect("stopped part way");
    assert!(stopped > 0 && stopped < 8 * M, "{first}");
    assert_eq!(first["covered"], json!([0, stopped]));
    stop(s);

    // A new serving process continues from the recorded position.
    let s = serve(d);
    ok(d, &words("sync-action rs check --resume --speed-limit 0"));
    let second = finished(d);
    assert_eq!(second["covered"], json!([stopped, 8 * M]));
    assert_eq!(second["resume_from"], Value::Null);
    // Each bad block is reported exactly once, by the run that covered it, with the
    // checksum's verdict.
    let mut seen: Vec<(u64, u64)> = Vec::new();
    for r in [&first, &second] {
        for v in r["verdicts"].as_array().unwrap() {
            assert_eq!(v["decided_by"], "checksum", "{v}");
            seen.push((v["offset"].as_u64().unwrap(), v["role"].as_u64().unwrap()));
        }
        let (a, e) = (
            r["covered"][0].as_u64().unwrap(),
            r["covered"][1].as_u64().unwrap(),
        );
        for m in r["mismatch_ranges"].as_array().unwrap() {
            let o = m[0].as_u64().unwrap();
            assert!(a <= o && o < e, "{r}");
        }
    }
    seen.sort();
    assert_eq!(seen, vec![(early, 1), (late, 0)]);
    // Finished: nothing left to resume.
    let o = rk(d, &["sync-action", "rs", "check", "--resume"]);
    assert!(!o.status.success());
    stop(s);
}
