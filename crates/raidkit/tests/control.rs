//! The control plane of a running array: `raidkit status`, `manage`, `sync-action` and
//! `monitor` against a live `raidkit mount` process (FUSE; skipped without /dev/fuse).

use raidkit_testkit::proc::{self, wait_for, words, Killing};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(run: &Path, dir: &Path, args: &[&str]) -> std::process::Output {
    proc::bin_in(RAIDKIT, dir, Some(run), args)
}

fn ok(run: &Path, dir: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, dir, Some(run), args)
}

fn status(run: &Path, dir: &Path) -> Vec<Value> {
    serde_json::from_str::<Value>(&ok(run, dir, &["status", "--json"]))
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn status_manage_sync_action_monitor() {
    if !Path::new("/dev/fuse").exists() {
        println!("skip: /dev/fuse not available");
        return;
    }
    let t = TempDir::new("rk-ctl").unwrap();
    let d = t.path();
    let run = d.join("run");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    ok(
        &run,
        d,
        &words(
            "create --level 5 --raid-devices 3 --chunk 64 --size 16M --name ctl \
            --homehost none a b c",
        ),
    );
    std::fs::File::create(d.join("spare"))
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let mut child = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", &run)
        .args(["mount", "a", "b", "c", "mnt"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut s);
        s
    });
    let mut guard = Killing(child);
    wait_for("the control socket", 20, || status(&run, d).len() == 1);
    let st = &status(&run, d)[0];
    assert_eq!(st["name"], "ctl");
    assert_eq!(st["state"], "clean");
    assert_eq!(st["sync"]["action"], "idle");
    // While it runs, no other raidkit process may write its members: an offline repair
    // and a second server are refused and told which process holds them.
    let pid = guard.0.id().to_string();
    for args in [
        &["repair", "a", "b", "c"][..],
        &["serve", "--socket", "x.sock", "a", "b", "c"][..],
    ] {
        let o = rk(&run, d, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} must be refused");
        assert!(
            err.contains("is in use by pid ") && err.contains(&pid) && err.contains("mount"),
            "{args:?}: {err}"
        );
    }
    // Readers are not blocked.
    ok(&run, d, &["examine", "a"]);
    // A monitor collects the events of what follows.
    // Other events (a `slow_member` warning on a loaded machine) may come in between:
    // the monitor's lines are collected until the expected kinds are all there.
    let mut mon = Killing(
        Command::new(RAIDKIT)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(["monitor", "--json"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let mon_out = mon.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(mon_out)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let b = d.join("b").display().to_string();
    ok(&run, d, &["manage", "ctl", "--fail", &b]);
    wait_for("degraded", 10, || status(&run, d)[0]["degraded"] == true);
    ok(&run, d, &["manage", "ctl", "--remove", &b]);
    // A path that is not there: refused before the server is asked, saying which path
    // and what to do (not a bare "No such file or directory").
    let o = rk(&run, d, &["manage", "ctl", "--add", "no-such-spare"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--add no-such-spare: no such device or file")
            && err.contains("nothing was changed"),
        "{err}"
    );
    ok(&run, d, &["manage", "ctl", "--add", "spare"]);
    wait_for("recovery onto the spare", 60, || {
        let s = &status(&run, d)[0];
        s["degraded"] == false && s["sync"]["action"] == "idle"
    });
    let st = &status(&run, d)[0];
    let devs: Vec<String> = st["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["device"].as_str().unwrap().to_string())
        .collect();
    assert!(devs.iter().any(|x| x.ends_with("spare")), "{devs:?}");
    ok(
        &run,
        d,
        &["sync-action", "ctl", "check", "--speed-limit", "100M"],
    );
    wait_for("check to finish", 30, || {
        status(&run, d)[0]["sync"]["action"] == "idle"
    });
    let st = &status(&run, d)[0];
    assert_eq!(st["last_result"]["action"], "check");
    assert_eq!(st["last_result"]["mismatch_ranges"], serde_json::json!([]));
    let want = [
        "member_failed",
        "degraded",
        "member_removed",
        "spare_added",
        "rebuild_started",
    ];
    let mut kinds: Vec<String> = Vec::new();
    let t0 = Instant::now();
    while !want.iter().all(|k| kinds.iter().any(|x| x == k)) {
        let Ok(l) = rx.recv_timeout(Duration::from_secs(30).saturating_sub(t0.elapsed())) else {
            break;
        };
        if let Ok(v) = serde_json::from_str::<Value>(&l) {
            kinds.push(v["kind"].as_str().unwrap_or("").to_string());
        }
    }
    drop(mon);
    for k in want {
        assert!(
            kinds.iter().any(|x| x == k),
            "monitor missed {k}: {kinds:?}"
        );
    }
    // Live statistics: write through the FUSE file, then read the counters.
    let file = mnt.join("ctl");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&file)
            .unwrap();
        f.write_all_at(&vec![7u8; 1 << 20], 0).unwrap();
        f.sync_all().unwrap();
    }
    let stats: Value = serde_json::from_str(&ok(&run, d, &["stats", "ctl", "--json"])).unwrap();
    let io = &stats[0]["io"];
    assert!(io["write"]["bytes"].as_u64().unwrap() >= 1 << 20, "{io}");
    assert!(io["flush"]["count"].as_u64().unwrap() >= 1, "{io}");
    let shares: u64 = stats[0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["writes"].as_u64().unwrap())
        .sum();
    assert!(shares > 0);
    // The RAID5 stripe cache: automatic, at its starting size (a few MiB written), and the
    // fsync left nothing held.
    let sc = &stats[0]["stripe_cache"];
    assert_eq!(
        (&sc["mode"], &sc["size_entries"], &sc["dirty_stripes"]),
        (&Value::from("auto"), &Value::from(512), &Value::from(0)),
        "{sc}"
    );
    // The high-water mark of its page memory is served, and covers what it holds now.
    let (now, peak) = (
        sc["memory_bytes"].as_u64(),
        sc["peak_memory_bytes"].as_u64(),
    );
    assert!(matches!((now, peak), (Some(n), Some(p)) if p >= n), "{sc}");
    let st = status(&run, d);
    assert_eq!(st[0]["stripe_cache"]["mode"], "auto", "{st:?}");
    // A trace of client requests, analysed by `trace analyze`.
    let writer = {
        let file = file.clone();
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            for i in 0..40u64 {
                f.write_all_at(&[i as u8; 4096], i * 65536).unwrap();
                f.sync_all().unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    ok(
        &run,
        d,
        &words("trace record ctl --output t.jsonl --seconds 1"),
    );
    writer.join().unwrap();
    let an: Value =
        serde_json::from_str(&ok(&run, d, &["trace", "analyze", "--json", "t.jsonl"])).unwrap();
    assert_eq!(an["format"], "raidkit", "{an}");
    assert!(an["writes"].as_u64().unwrap() >= 10, "{an}");
    assert_eq!(an["mode_size"], 4096, "{an}");
    let lines = std::fs::read_to_string(d.join("t.jsonl")).unwrap();
    assert!(
        lines
            .lines()
            .any(|l| l.contains("\"op\":\"W\"") && l.contains("\"export\":\"ctl\"")),
        "{lines}"
    );
    // Prometheus exposition.
    let mut prom = Command::new(RAIDKIT)
        .env("RAIDKIT_RUN_DIR", &run)
        .args(["stats", "--prometheus", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(prom.stderr.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let addr = first
        .trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .trim_end_matches("/metrics")
        .to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut c, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut c, &mut body).unwrap();
    let _ = prom.kill();
    let _ = prom.wait();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(
        body.contains("raidkit_requests_total{array=\"ctl\",op=\"write\"}"),
        "{body}"
    );
    assert!(
        body.contains("raidkit_member_ios_total{array=\"ctl\",role=\"0\",op=\"write\"}"),
        "{body}"
    );
    // Errors say what is wrong.
    let e = rk(&run, d, &["manage", "nosuch", "--fail", "x"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("no running array named \"nosuch\""));
    let e = rk(&run, d, &["sync-action", "ctl", "bogus"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("unknown sync action"));
    let size = status(&run, d)[0]["array_bytes"].as_u64().unwrap();
    let e = rk(&run, d, &["sync-action", "ctl", "check", "--from", "100M"]);
    let text = String::from_utf8_lossy(&e.stderr);
    assert!(
        text.contains(&format!(
            "empty scrub window 104857600..{size} (the array has {size} bytes); give --from below --to and inside the array"
        )),
        "{text}"
    );
    // Graceful stop leaves the members clean.
    // SAFETY-free: kill(1) via the command line.
    let pid = guard.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let t0 = Instant::now();
    let code = loop {
        if let Some(s) = guard.0.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "mount did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = log.join().unwrap();
    assert!(code.success(), "mount exited {code}: {log}");
    let ex: Value =
        serde_json::from_str(&ok(&run, d, &["examine", "--json", "a", "c", "spare"])).unwrap();
    for m in ex.as_array().unwrap() {
        assert_eq!(m["state"], "clean", "{m}");
    }
    assert!(status(&run, d).is_empty(), "socket removed after stop");
}

#[test]
fn mount_keeps_the_checksum_sidecar_in_step() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: /dev/fuse does not exist");
        return;
    }
    let t = TempDir::new("rk-mountcs").unwrap();
    let d = t.path();
    let run = d.join("run");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    ok(
        &run,
        d,
        &words(
            "create --level 1 --raid-devices 2 --size 8M --name cs --homehost none \
            --checksums a.csum a b",
        ),
    );
    let err_log = d.join("mount.err");
    let child = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", &run)
        .args(["mount", "--checksums", "a.csum", "a", "b", "mnt"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_log).unwrap())
        .spawn()
        .unwrap();
    let mut guard = raidkit_testkit::proc::Stopping(child);
    let file = mnt.join("cs");
    wait_for("the FUSE file", 20, || file.exists());
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.write_all_at(&[0x5a; 65536], 1 << 20).unwrap();
        f.sync_all().unwrap();
        // SIGTERM while the file is still open, closed moments later (as a child
        // process forked while it was open holds it until its exec): the stop waits
        // for the close instead of refusing as busy.
        proc::terminate(&guard.0);
        std::thread::sleep(Duration::from_millis(300));
    }
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = guard.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "mount did not stop after its file was closed; its stderr:\n{}",
            std::fs::read_to_string(&err_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        st.success(),
        "mount exit status {st}; its stderr:\n{}",
        std::fs::read_to_string(&err_log).unwrap_or_default()
    );
    // The writes went through the sidecar: it is still usable (not stale) ...
    assert!(ok(
        &run,
        d,
        &["checksums", "status", "--checksums", "a.csum", "a", "b"]
    )
    .contains("usable"));
    // ... and agrees with the data: corrupt one copy and the sidecar names it.
    let member_b = d.join("b");
    let data_off = {
        let v: Value = serde_json::from_str(&ok(&run, d, &["examine", "--json", "b"])).unwrap();
        v[0]["data_offset"].as_u64().expect("data_offset") * 512
    };
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&member_b)
            .unwrap();
        f.write_all_at(&[0u8; 4096], data_off + (1 << 20)).unwrap();
    }
    let o = rk(
        &run,
        d,
        &["check", "--json", "--checksums", "a.csum", "a", "b"],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdicts"][0]["decided_by"], "checksum", "{v}");
    assert_eq!(v["verdicts"][0]["offset"], 1 << 20, "{v}");
}
