//! The kernel judges `raidkit grow --bitmap` and `raidkit manage --replace` done on arrays
//! served by `raidkit serve`: after a clean stop, Linux md assembles them, mdadm sees the
//! bitmap (or none) as mdadm would have made it, the data is exact and `check` finds no
//! mismatch. A replacement stopped half-way is continued by the kernel.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::rebuild::RebuildOptions;
use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::proc::{self, wait_for};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

fn status(d: &Path) -> Vec<Value> {
    serde_json::from_str::<Value>(&ok(d, &["status", "--json"]))
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

struct Served(Child);
impl Served {
    fn start(d: &Path, members: &[&str]) -> Served {
        let mut args = vec!["serve", "--socket", "s.sock", "--export", "x"];
        args.extend_from_slice(members);
        let child = Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", d.join("run"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Served(child);
        wait_for("the control socket", 30, || status(d).len() == 1);
        s
    }
    /// SIGTERM: the server stops the array cleanly.
    fn stop(mut self) {
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let st = self.0.wait().unwrap();
        assert!(st.success(), "serve exited with {st:?}");
    }
}
impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn create(d: &Path, level: &str, meta: &str, name: &str, members: &[&str], extra: &[&str]) {
    let n = members.len().to_string();
    let mut args = vec![
        "create",
        "--level",
        level,
        "--raid-devices",
        &n,
        "--size",
        "16M",
        "--metadata",
        meta,
        "--name",
        name,
        "--homehost",
        "none",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(members);
    ok(d, &args);
    let data: Vec<u8> = (0..3u64 << 20)
        .map(|i| raidkit_testkit::pattern::pattern_word(name.len() as u64, i / 8) as u8)
        .collect();
    std::fs::write(d.join(format!("{name}.in")), &data).unwrap();
    let input = format!("{name}.in");
    let mut args = vec!["import", "--input", &input];
    args.extend_from_slice(members);
    ok(d, &args);
}

fn expected(d: &Path, name: &str, members: &[&str]) -> PathBuf {
    let out = d.join(format!("{name}.expected"));
    let o = out.display().to_string();
    let mut args = vec!["export", "--output", &o];
    args.extend_from_slice(members);
    ok(d, &args);
    out
}

#[test]
fn kernel_accepts_grown_bitmaps_and_replacements() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-igrow").unwrap();
    let d = t.path();
    let file = |n: &str| {
        std::fs::File::create(d.join(n))
            .unwrap()
            .set_len(16 << 20)
            .unwrap()
    };
    // A: RAID5 1.2 without bitmap; a bitmap is added live (mdadm's default chunk).
    create(d, "5", "1.2", "ga", &["a0", "a1", "a2"], &["--chunk", "64"]);
    let s = Served::start(d, &["a0", "a1", "a2"]);
    ok(d, &["grow", "x", "--bitmap", "internal"]);
    s.stop();
    // B: RAID1 1.0 with a bitmap; removed live.
    create(
        d,
        "1",
        "1.0",
        "gb",
        &["b0", "b1"],
        &["--bitmap", "internal"],
    );
    let s = Served::start(d, &["b0", "b1"]);
    ok(d, &["grow", "x", "--bitmap", "none"]);
    s.stop();
    // C: RAID6, member c1 replaced live by a new device.
    create(
        d,
        "6",
        "1.2",
        "gc",
        &["c0", "c1", "c2", "c3"],
        &["--chunk", "64"],
    );
    file("cs");
    let s = Served::start(d, &["c0", "c1", "c2", "c3"]);
    ok(d, &["manage", "x", "--replace", "c1", "--with", "cs"]);
    wait_for("the replacement", 120, || {
        let st = &status(d)[0];
        st["sync"]["action"] == "idle"
            && st["members"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["device"].as_str().unwrap().ends_with("/cs") && m["state"] == "in_sync")
    });
    s.stop();
    // D: RAID5, replacement of member 0 stopped at 40% (engine), left for the kernel.
    create(d, "5", "1.2", "gd", &["d0", "d1", "d2"], &["--chunk", "64"]);
    file("ds");
    {
        let ps: Vec<PathBuf> = ["d0", "d1", "d2"].iter().map(|n| d.join(n)).collect();
        let arr = assemble_paths(
            &ps,
            &AssembleOptions {
                writable: true,
                ..Default::default()
            },
        )
        .unwrap();
        arr.add_spare(
            Arc::new(raidkit_engine::FileDev::open(&d.join("ds"), true).unwrap()),
            false,
        )
        .unwrap();
        let old = arr
            .members()
            .into_iter()
            .find(|m| m.role == Some(0))
            .unwrap()
            .device;
        arr.start_replace(&old, None).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        raidkit_engine::replace::replace(
            &arr,
            &RebuildOptions {
                stop: Some(stop),
                checkpoint_every: Some(Duration::ZERO),
                ..Default::default()
            },
            &mut |x, tot| {
                if x * 10 >= tot * 4 {
                    st.store(true, Ordering::Relaxed);
                }
            },
        )
        .unwrap();
        assert_eq!(arr.replacement_roles(), vec![0]);
        arr.stop().unwrap();
    }
    let ea = expected(d, "ga", &["a0", "a1", "a2"]);
    let eb = expected(d, "gb", &["b0", "b1"]);
    let ec = expected(d, "gc", &["c0", "cs", "c2", "c3"]);
    let ed = expected(d, "gd", &["d0", "d1", "d2", "ds"]);
    let disks: Vec<PathBuf> = [
        "a0", "a1", "a2", "b0", "b1", "c0", "cs", "c2", "c3", "d0", "d1", "d2", "ds",
    ]
    .iter()
    .map(|n| d.join(n))
    .collect();
    let script = r#"exec 2>&1
mdadm -X /dev/vda
echo "RESULT a chunk=$(mdadm -X /dev/vda | sed -n 's/^ *Chunksize : //p')"
echo "RESULT a dirty=$(mdadm -X /dev/vdb | sed -n 's/.* \([0-9]*\) dirty.*/\1/p')"
echo "RESULT a bitmap=$(mdadm --examine /dev/vdc | grep -c 'Internal Bitmap')"
echo "RESULT b bitmap=$(mdadm --examine /dev/vdd | grep -c 'Internal Bitmap')"
mdadm --examine /dev/vdh | grep -E 'Feature|Recovery|Array State|Device Role'
mdadm --examine /dev/vdm | grep -E 'Feature|Recovery|Array State|Device Role'
mdadm --assemble --run /dev/md0 /dev/vda /dev/vdb /dev/vdc || exit 2
mdadm --assemble --run /dev/md1 /dev/vdd /dev/vde || exit 2
mdadm --assemble --run /dev/md2 /dev/vdf /dev/vdg /dev/vdh /dev/vdi || exit 2
mdadm --assemble --run /dev/md3 /dev/vdj /dev/vdk /dev/vdl /dev/vdm || exit 2
cat /proc/mdstat
mdref-wait md0 md1 md2 md3
cat /proc/mdstat
mdadm --detail /dev/md3 | grep -E 'State|replac|/dev/vd'
echo "RESULT md0 bitmap=$(cat /sys/block/md0/md/bitmap/location)"
echo "RESULT md1 bitmap=$(cat /sys/block/md1/md/bitmap/location)"
for m in md0 md1 md2 md3; do echo check > /sys/block/$m/md/sync_action; done
mdref-wait md0 md1 md2 md3
i=0
for e in ga gb gc gd; do
  cmp /dev/md$i /root/$e.expected && echo "RESULT md$i data=ok" || echo "RESULT md$i data=BAD"
  echo "RESULT md$i mismatch_cnt=$(cat /sys/block/md$i/md/mismatch_cnt) degraded=$(cat /sys/block/md$i/md/degraded)"
  i=$((i+1))
done
echo "RESULT md3 vdm=$(cat /sys/block/md3/md/dev-vdm/slot) vdj=$(cat /sys/block/md3/md/dev-vdj/state)"
"#
    .to_string();
    let out = md
        .run(&Run {
            disks,
            snapshot: true,
            files: vec![ea, eb, ec, ed],
            timeout_secs: 400,
            script,
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let mut want = vec![
        "RESULT a chunk=64 MB".to_string(),
        "RESULT a dirty=0".into(),
        "RESULT a bitmap=1".into(),
        "RESULT b bitmap=0".into(),
        "RESULT md0 bitmap=+8".into(),
        "RESULT md1 bitmap=none".into(),
        // md3: the kernel finished the replacement: the new device holds role 0, the
        // old one is faulty.
        "RESULT md3 vdm=0 vdj=faulty".into(),
    ];
    for i in 0..4 {
        want.push(format!("RESULT md{i} data=ok"));
        want.push(format!("RESULT md{i} mismatch_cnt=0 degraded=0"));
    }
    // The kernel continued the half-done replacement (vdm shown as a replacement).
    assert!(out.stdout.contains("vdm[3](R)"), "{}", out.stdout);
    for line in want {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            out.stdout
        );
    }
}
