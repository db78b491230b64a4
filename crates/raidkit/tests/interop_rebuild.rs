//! The kernel judges raidkit's rebuilds: an array rebuilt onto a hot spare by raidkit, and
//! one whose rebuild was stopped half-way (recovery_offset checkpoint), are assembled by
//! Linux md; the kernel finishes the second rebuild itself; contents and `check` are exact.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_layout::Level;
use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn build(
    dir: &Path,
    tag: &str,
    level: Level,
    n: usize,
    leave_out: usize,
    stop_at: Option<f64>,
) -> (Vec<PathBuf>, PathBuf) {
    let ps: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("{tag}{i}.img"))).collect();
    let mut o = CreateOptions::new(level, ps.iter().cloned().map(MemberSpec::Path).collect());
    o.chunk_bytes = Some(64 * 1024);
    o.create_size = Some(8 << 20);
    o.name = tag.into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let mut data = vec![0u8; arr.size_bytes() as usize];
    fill_tagged(11, 0, &mut data);
    arr.write(0, &data).unwrap();
    arr.stop().unwrap();
    // Degrade, write more while degraded, add a spare, rebuild (maybe only part-way).
    let sub: Vec<PathBuf> = ps
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leave_out)
        .map(|(_, p)| p.clone())
        .collect();
    let rw = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = assemble_paths(&sub, &rw).unwrap();
    let patch = vec![0xA5u8; 300_000];
    arr.write(123_456, &patch).unwrap();
    data[123_456..123_456 + patch.len()].copy_from_slice(&patch);
    let spare = dir.join(format!("{tag}-spare.img"));
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    arr.add_spare(
        Arc::new(raidkit_engine::FileDev::open(&spare, true).unwrap()),
        false,
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let opts = RebuildOptions {
        stop: Some(stop),
        checkpoint_every: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    rebuild(&arr, &opts, &mut |d, t| {
        if let Some(f) = stop_at {
            if d as f64 >= t as f64 * f {
                st.store(true, Ordering::Relaxed);
            }
        }
    })
    .unwrap();
    assert_eq!(arr.is_degraded(), stop_at.is_some());
    arr.stop().unwrap();
    let expected = dir.join(format!("{tag}.expected"));
    std::fs::write(&expected, &data).unwrap();
    let mut members = sub;
    members.push(spare);
    (members, expected)
}

#[test]
fn kernel_accepts_raidkit_rebuilds() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-rebuild").unwrap();
    let (a, ea) = build(t.path(), "full", Level::Raid5, 3, 1, None);
    let (b, eb) = build(t.path(), "half", Level::Raid6, 4, 2, Some(0.4));
    let mut disks = a.clone();
    disks.extend(b.iter().cloned());
    let script = format!(
        r#"exec 2>&1
A="/dev/vda /dev/vdb /dev/vdc"; B="/dev/vdd /dev/vde /dev/vdf /dev/vdg"
mdadm --assemble --run /dev/md0 $A || exit 2
mdadm --assemble --run /dev/md1 $B || exit 2
cat /proc/mdstat
mdref-wait md0 md1
for m in md0 md1; do echo check > /sys/block/$m/md/sync_action; done
mdref-wait md0 md1
cmp /dev/md0 /root/{ea} && echo "RESULT md0 data=ok" || echo "RESULT md0 data=BAD"
cmp /dev/md1 /root/{eb} && echo "RESULT md1 data=ok" || echo "RESULT md1 data=BAD"
for m in md0 md1; do echo "RESULT $m mismatch_cnt=$(cat /sys/block/$m/md/mismatch_cnt) degraded=$(cat /sys/block/$m/md/degraded)"; done
"#,
        ea = ea.file_name().unwrap().to_string_lossy(),
        eb = eb.file_name().unwrap().to_string_lossy()
    );
    let out = md
        .run(&Run {
            disks,
            snapshot: true,
            files: vec![ea, eb],
            timeout_secs: 240,
            script,
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.status, 0, "{}", out.stdout);
    for line in [
        "RESULT md0 data=ok",
        "RESULT md1 data=ok",
        "RESULT md0 mismatch_cnt=0 degraded=0",
        "RESULT md1 mismatch_cnt=0 degraded=0",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            out.stdout
        );
    }
    // The half-done rebuild was continued by the kernel, not started from scratch.
    assert!(
        out.stdout.contains("recovery"),
        "kernel did not report a recovery:\n{}",
        out.stdout
    );
}
