//! Metadata edge cases the kernel judges:
//! - 1.0 superblocks (at the end) on members whose size is not a multiple of 4 KiB: an
//!   array mdadm made is read and written by raidkit, one raidkit made is assembled by
//!   the kernel; both read back exactly and `check` finds nothing;
//! - a resync the kernel stopped at a checkpoint X (frozen, then stopped): raidkit's resync
//!   resumes at X (below it the kernel had already made the copies agree), not at 0.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::sb::Metadata;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_layout::Level;
use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::pattern::mdref_bytes;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};

const M: u64 = 1 << 20;

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

fn images(dir: &Path, tag: &str, n: usize, bytes: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{tag}{i}.img"));
            std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
            p
        })
        .collect()
}

fn result_line(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("RESULT {key}=")))
        .unwrap_or_else(|| panic!("no RESULT {key}:\n{out}"))
        .to_string()
}

#[test]
fn odd_sized_1_0_members_and_a_resync_stopped_at_a_checkpoint() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-metaedge").unwrap();
    let d = t.path();
    let k = images(d, "k", 2, 64 * M + 3072);
    let s = images(d, "s", 2, 32 * M);
    let mut disks = k.clone();
    disks.extend(s.iter().cloned());
    let script = r#"exec 2>&1
mdadm --create /dev/md1 --run --metadata=1.0 --level=1 --raid-devices=2 --bitmap=internal /dev/vda /dev/vdb || exit 2
echo 1000 > /proc/sys/dev/raid/speed_limit_max
echo 1000 > /proc/sys/dev/raid/speed_limit_min
mdadm --create /dev/md2 --run --metadata=1.2 --level=1 --raid-devices=2 /dev/vdc /dev/vdd || exit 2
sleep 3
echo frozen > /sys/block/md2/md/sync_action
echo "RESULT x=$(cat /sys/block/md2/md/resync_start)"
echo 200000 > /proc/sys/dev/raid/speed_limit_max
mdref-wait md1
for m in 1 2; do mdref-pattern $m $(blockdev --getsize64 /dev/md$m) > /dev/md$m; done
sync
mdadm --stop /dev/md2
"#;
    let o = md
        .run(&Run {
            disks: disks.clone(),
            timeout_secs: 240,
            script: script.into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", o.stdout, o.stderr);
    assert_eq!(o.status, 0);
    let x: u64 = result_line(&o.stdout, "x").parse().unwrap();
    assert!(x > 0, "the kernel's resync did not start");

    // mdadm's 1.0 array: read, then 1 MiB of seed 11 written at 3 MiB.
    let arr = assemble_paths(&k, &rw()).unwrap();
    let size = arr.size_bytes();
    let mut got = vec![0u8; size as usize];
    arr.read(0, &mut got).unwrap();
    assert!(
        got == mdref_bytes(1, 0, size as usize),
        "md1 as mdadm wrote it"
    );
    arr.write(3 * M, &mdref_bytes(11, 0, M as usize)).unwrap();
    arr.stop().unwrap();

    // The resync the kernel stopped at x resumes there.
    let arr = assemble_paths(&s, &rw()).unwrap();
    assert!(arr.needs_resync());
    let rep = sync::run(&arr, SyncMode::Resync, false, &mut |_, _| {}).unwrap();
    let member_sectors = arr.size_bytes() / 512;
    assert_eq!(rep.sectors_done, member_sectors - x, "resumed at {x}");
    assert_eq!(rep.sectors_written, 0);
    arr.stop().unwrap();

    // raidkit's 1.0 RAID5 on members of 64 MiB + 512 B.
    let r = images(d, "r", 3, 64 * M + 512);
    let mut c = CreateOptions::new(
        Level::Raid5,
        r.iter().cloned().map(MemberSpec::Path).collect(),
    );
    c.metadata = Metadata::parse("1.0").unwrap();
    c.chunk_bytes = Some(64 * 1024);
    c.bitmap = true;
    let arr = create(&c, &mut |_, _| {}).unwrap();
    arr.write(0, &mdref_bytes(3, 0, arr.size_bytes() as usize))
        .unwrap();
    arr.stop().unwrap();

    disks.extend(r.iter().cloned());
    let judge = r#"exec 2>&1
mdadm --assemble --run /dev/md1 /dev/vda /dev/vdb || exit 2
mdadm --assemble --run /dev/md2 /dev/vdc /dev/vdd || exit 2
mdadm --assemble --run /dev/md3 /dev/vde /dev/vdf /dev/vdg || exit 2
cat /proc/mdstat
mdref-wait md1 md2 md3
S=$(blockdev --getsize64 /dev/md1)
dd if=/dev/md1 bs=1M count=3 2>/dev/null | mdref-pattern -c 1 3M 0 && dd if=/dev/md1 bs=1M skip=3 count=1 2>/dev/null | mdref-pattern -c 11 1M 0 && dd if=/dev/md1 bs=1M skip=4 2>/dev/null | mdref-pattern -c 1 $((S-4194304)) 4M && echo "RESULT md1 data=ok"
mdref-pattern -c 2 $(blockdev --getsize64 /dev/md2) < /dev/md2 && echo "RESULT md2 data=ok"
mdref-pattern -c 3 $(blockdev --getsize64 /dev/md3) < /dev/md3 && echo "RESULT md3 data=ok"
for m in md1 md2 md3; do echo check > /sys/block/$m/md/sync_action; done
mdref-wait md1 md2 md3
for m in md1 md2 md3; do echo "RESULT $m mismatch_cnt=$(cat /sys/block/$m/md/mismatch_cnt) degraded=$(cat /sys/block/$m/md/degraded)"; done
"#;
    let o = md
        .run(&Run {
            disks,
            snapshot: true,
            timeout_secs: 300,
            script: judge.into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", o.stdout, o.stderr);
    for m in ["md1", "md2", "md3"] {
        assert_eq!(result_line(&o.stdout, &format!("{m} data")), "ok");
        assert_eq!(
            result_line(&o.stdout, &format!("{m} mismatch_cnt")),
            "0 degraded=0"
        );
    }
}
