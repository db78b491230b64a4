//! The kernel judges re-adds guided by the write-intent bitmap, in both directions:
//! - the kernel fails a member and writes while it is out; raidkit re-adds it and copies
//!   only the bitmap's dirty regions; the kernel then assembles every member, reads the
//!   exact bytes and `check` finds nothing;
//! - raidkit fails a member and writes while it is out; the kernel re-adds it (`mdadm
//!   --re-add`), recovers it from raidkit's bitmap, reads the exact bytes, `check` is clean.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::rebuild::RebuildOptions;
use raidkit_engine::{BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

fn images(dir: &Path, tag: &str, n: usize, mib: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{tag}{i}.img"));
            std::fs::File::create(&p)
                .unwrap()
                .set_len(mib << 20)
                .unwrap();
            p
        })
        .collect()
}

fn read_all(ps: &[PathBuf]) -> Vec<u8> {
    let arr = assemble_paths(ps, &AssembleOptions::default()).unwrap();
    let mut v = vec![0u8; arr.size_bytes() as usize];
    arr.read(0, &mut v).unwrap();
    v
}

fn without(ps: &[PathBuf], out: usize) -> Vec<PathBuf> {
    ps.iter()
        .enumerate()
        .filter(|(i, _)| *i != out)
        .map(|(_, p)| p.clone())
        .collect()
}

/// Re-add `ps[out]` to the array the others form; the data sectors copied.
fn re_add(ps: &[PathBuf], out: usize) -> u64 {
    let arr = assemble_paths(&without(ps, out), &rw()).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&ps[out], true).unwrap());
    let rep = arr
        .re_add(dev, &RebuildOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(!arr.is_degraded());
    arr.stop().unwrap();
    rep.sectors
}

#[test]
fn kernel_degraded_writes_then_raidkit_re_add() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-readd").unwrap();
    let d = t.path();
    let a = images(d, "a", 2, 32);
    let b = images(d, "b", 4, 32);
    let mut disks = a.clone();
    disks.extend(b.iter().cloned());
    let script = r#"exec 2>&1
mdadm --create /dev/md0 --run --level=1 --raid-devices=2 --bitmap=internal --bitmap-chunk=64K /dev/vda /dev/vdb || exit 2
mdadm --create /dev/md1 --run --level=5 --raid-devices=4 --chunk=64 --bitmap=internal --bitmap-chunk=128K /dev/vdc /dev/vdd /dev/vde /dev/vdf || exit 2
mdref-wait md0 md1
for m in md0 md1; do mdref-pattern 1 $(blockdev --getsize64 /dev/$m) > /dev/$m; done
sync
mdadm /dev/md0 --fail /dev/vdb --remove /dev/vdb
mdadm /dev/md1 --fail /dev/vdd --remove /dev/vdd
mdref-pattern 2 192K > /root/p
dd if=/root/p of=/dev/md0 bs=64K seek=100 conv=notrunc,fsync 2>/dev/null
dd if=/root/p of=/dev/md1 bs=64K seek=300 conv=notrunc,fsync 2>/dev/null
cat /dev/md0 > /share/md0
cat /dev/md1 > /share/md1
mdadm -X /dev/vda /dev/vdc | grep -E "Events|Bitmap"
"#;
    let o = md
        .run(&Run {
            disks: disks.clone(),
            share: Some(d.to_path_buf()),
            timeout_secs: 240,
            script: script.into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", o.stdout, o.stderr);
    assert_eq!(o.status, 0);
    let exp0 = std::fs::read(d.join("md0")).unwrap();
    let exp1 = std::fs::read(d.join("md1")).unwrap();
    let n0 = re_add(&a, 1);
    let n1 = re_add(&b, 1);
    println!("re-add copied {n0} and {n1} sectors");
    // 192 KiB written: RAID1 three 64 KiB bits (384 sectors); RAID5 the stripes of two
    // 128 KiB bits (at most 4 stripes of 128 member sectors).
    assert_eq!(n0, 384);
    assert!(n1 > 0 && n1 <= 512, "{n1}");
    assert!(read_all(&a) == exp0);
    assert!(read_all(&b) == exp1);
    let o = md
        .run(&Run {
            disks,
            snapshot: true,
            timeout_secs: 240,
            share: Some(d.to_path_buf()),
            script: r#"exec 2>&1
mdadm --assemble --run /dev/md0 /dev/vda /dev/vdb || exit 2
mdadm --assemble --run /dev/md1 /dev/vdc /dev/vdd /dev/vde /dev/vdf || exit 2
cat /proc/mdstat
mdref-wait md0 md1
for m in md0 md1; do echo check > /sys/block/$m/md/sync_action; done
mdref-wait md0 md1
for m in md0 md1; do cmp /dev/$m /share/$m && echo "RESULT $m data=ok"; echo "RESULT $m mismatch_cnt=$(cat /sys/block/$m/md/mismatch_cnt) degraded=$(cat /sys/block/$m/md/degraded)"; done
"#
            .into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", o.stdout, o.stderr);
    for l in [
        "RESULT md0 data=ok",
        "RESULT md1 data=ok",
        "RESULT md0 mismatch_cnt=0 degraded=0",
        "RESULT md1 mismatch_cnt=0 degraded=0",
    ] {
        assert!(o.stdout.lines().any(|x| x == l), "{l}:\n{}", o.stdout);
    }
}

fn rk_array(d: &Path, tag: &str, level: Level, n: usize, bitmap_chunk: u64) -> Vec<PathBuf> {
    let ps = images(d, tag, n, 32);
    let mut o = CreateOptions::new(level, ps.iter().cloned().map(MemberSpec::Path).collect());
    if level != Level::Raid1 {
        o.chunk_bytes = Some(64 * 1024);
    }
    o.name = tag.into();
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(bitmap_chunk);
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let mut data = vec![0u8; arr.size_bytes() as usize];
    fill_tagged(7, 0, &mut data);
    arr.write(0, &data).unwrap();
    arr.stop().unwrap();
    ps
}

#[test]
fn raidkit_degraded_writes_then_kernel_re_add() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-readd").unwrap();
    let d = t.path();
    let a = rk_array(d, "a", Level::Raid1, 2, 64 << 10);
    let b = rk_array(d, "b", Level::Raid5, 4, 128 << 10);
    for ps in [&a, &b] {
        let arr = assemble_paths(ps, &rw()).unwrap();
        arr.fail_member(1, "test").unwrap();
        arr.remove_member(&ps[1].display().to_string()).unwrap();
        arr.write(100 << 16, &[0x5a; 3 << 16]).unwrap();
        arr.stop().unwrap();
    }
    std::fs::write(d.join("md0"), read_all(&without(&a, 1))).unwrap();
    std::fs::write(d.join("md1"), read_all(&without(&b, 1))).unwrap();
    let mut disks = a.clone();
    disks.extend(b.iter().cloned());
    let o = md
        .run(&Run {
            disks,
            snapshot: true,
            timeout_secs: 240,
            share: Some(d.to_path_buf()),
            script: r#"exec 2>&1
mdadm --assemble --run /dev/md0 /dev/vda || exit 2
mdadm --assemble --run /dev/md1 /dev/vdc /dev/vde /dev/vdf || exit 2
mdadm -X /dev/vda /dev/vdc | grep -E "Events|Bitmap"
mdadm /dev/md0 --re-add /dev/vdb || echo "RESULT md0 re-add refused"
mdadm /dev/md1 --re-add /dev/vdd || echo "RESULT md1 re-add refused"
cat /proc/mdstat
mdref-wait md0 md1
cat /proc/mdstat
for m in md0 md1; do echo check > /sys/block/$m/md/sync_action; done
mdref-wait md0 md1
for m in md0 md1; do cmp /dev/$m /share/$m && echo "RESULT $m data=ok"; echo "RESULT $m mismatch_cnt=$(cat /sys/block/$m/md/mismatch_cnt) degraded=$(cat /sys/block/$m/md/degraded)"; done
"#
            .into(),
            log: Some(d.join("console.log")),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", o.stdout, o.stderr);
    let log = std::fs::read_to_string(d.join("console.log")).unwrap_or_default();
    println!(
        "{}",
        log.lines()
            .filter(|l| l.contains("md"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for l in [
        "RESULT md0 data=ok",
        "RESULT md1 data=ok",
        "RESULT md0 mismatch_cnt=0 degraded=0",
        "RESULT md1 mismatch_cnt=0 degraded=0",
    ] {
        assert!(o.stdout.lines().any(|x| x == l), "{l}:\n{}", o.stdout);
    }
}
