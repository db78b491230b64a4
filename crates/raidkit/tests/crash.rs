//! kill -9 in a loop: a RAID5 with a write-intent bitmap is served over FUSE, written with
//! flushes, and the server is killed. Every flushed write survives; every restart resyncs
//! exactly the bitmap chunks written since the last clean point (the count is asserted);
//! `check` finds nothing; the real kernel assembles the result clean.

use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::proc::{self, words};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, None, args)
}

fn mount(d: &Path) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut c = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["mount", "m0", "m1", "m2", "m3", "mnt"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = lines.clone();
    let err = c.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(|l| l.ok()) {
            l2.lock().unwrap().push(l);
        }
    });
    let t0 = Instant::now();
    while !d.join("mnt/crash").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "mount did not come up: {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (c, lines)
}

#[test]
fn kill_9_loop_keeps_flushed_writes_and_resyncs_only_dirty_chunks() {
    if !Path::new("/dev/fuse").exists() {
        println!("SKIP: /dev/fuse not available");
        return;
    }
    let t = TempDir::new("rk-crash").unwrap();
    let d = t.path();
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    rk(
        d,
        &words(
            "create --level 5 --raid-devices 4 --chunk 64K --size 32M \
            --bitmap internal --bitmap-chunk 256K --name crash --homehost none m0 m1 m2 m3",
        ),
    );
    let det: Value =
        serde_json::from_str(&rk(d, &["detail", "--json", "m0", "m1", "m2", "m3"])).unwrap();
    let size = det["array_bytes"].as_u64().unwrap() as usize;
    let mut model = vec![0u8; size];
    let mut expected_chunks: Option<BTreeSet<u64>> = None;
    let mut rng: u64 = 0x1234_5678;
    for iter in 0..4u8 {
        let (mut child, lines) = mount(d);
        if let Some(exp) = &expected_chunks {
            // The mount is up once the resync is over, but its last log line may still
            // be in the pipe: wait for it (bounded).
            let t0 = Instant::now();
            let line = loop {
                let log = lines.lock().unwrap().clone();
                if let Some(l) = log.iter().find(|l| l.contains("resync done")) {
                    break l.clone();
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "no resync after kill -9: {log:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            let n: u64 = line
                .split("resync done: ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap();
            // Bitmap chunk = 256 KiB = 512 device sectors.
            assert_eq!(n, exp.len() as u64 * 512, "iteration {iter}: {line}");
        }
        // Flushed writes at random 4 KiB-aligned places.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(d.join("mnt/crash"))
            .unwrap();
        let mut chunks = BTreeSet::new();
        for k in 0..6u8 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let off = (rng % (size as u64 / 4096)) * 4096;
            let buf = vec![iter.wrapping_mul(16).wrapping_add(k + 1); 4096];
            f.write_all_at(&buf, off).unwrap();
            f.sync_data().unwrap();
            model[off as usize..off as usize + 4096].copy_from_slice(&buf);
            // RAID5, 4 members, 64 KiB chunks: stripe = off / 192 KiB; its rows start at
            // device sector stripe × 128; the bitmap chunk covers 512 device sectors.
            let s = off / 512;
            let dev = (s / 384) * 128 + s % 128;
            chunks.insert(dev / 512);
        }
        drop(f);
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = Command::new("umount").arg("-l").arg(d.join("mnt")).status();
        let ex: Value =
            serde_json::from_str(&rk(d, &["examine", "--json", "m0", "m1", "m2", "m3"])).unwrap();
        assert_eq!(ex[0]["state"], "active", "killed while dirty");
        expected_chunks = Some(chunks);
    }
    // A last clean cycle, then everything is checked.
    let (child, lines) = mount(d);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let mut child = child;
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "mount did not stop: {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ex: Value =
        serde_json::from_str(&rk(d, &["examine", "--json", "m0", "m1", "m2", "m3"])).unwrap();
    for m in ex.as_array().unwrap() {
        assert_eq!(m["state"], "clean");
    }
    let out = Command::new(RAIDKIT)
        .current_dir(d)
        .args(["export", "--output", "-", "m0", "m1", "m2", "m3"])
        .output()
        .unwrap();
    assert!(out.stdout == model, "a flushed write was lost");
    rk(d, &["check", "m0", "m1", "m2", "m3"]);
    let Some(md) = locate_or_skip() else { return };
    std::fs::write(d.join("expected"), &model).unwrap();
    let o = md
        .run(&Run {
            disks: (0..4).map(|i| d.join(format!("m{i}"))).collect(),
            snapshot: true,
            files: vec![d.join("expected")],
            timeout_secs: 240,
            script: r#"exec 2>&1
mdadm --assemble --run /dev/md0 $MDREF_DISKS || exit 2
echo "resync_start=$(cat /sys/block/md0/md/resync_start)"
cmp /dev/md0 /root/expected && echo DATA-OK
echo check > /sys/block/md0/md/sync_action
mdref-wait md0
echo "mismatch_cnt=$(cat /sys/block/md0/md/mismatch_cnt)"
"#
            .into(),
            ..Default::default()
        })
        .unwrap();
    assert!(o.stdout.contains("resync_start=none"), "{}", o.stdout);
    assert!(o.stdout.contains("DATA-OK"), "{}", o.stdout);
    assert!(o.stdout.contains("mismatch_cnt=0"), "{}", o.stdout);
}
