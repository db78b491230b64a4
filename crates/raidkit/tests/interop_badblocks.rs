//! A kernel-made array whose member has entries in its bad-block log: raidkit decodes the
//! log exactly as mdadm prints it, and never reads those sectors — even filled with garbage
//! on the host, the export is the data the kernel was given.

use raidkit_format::badblocks;
use raidkit_format::v1::SuperblockV1;
use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::process::Command;

#[test]
fn kernel_bad_block_log_is_decoded_and_honoured() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-bbl").unwrap();
    let d = t.path();
    let disks: Vec<_> = (0..3).map(|i| d.join(format!("m{i}.img"))).collect();
    for p in &disks {
        std::fs::File::create(p).unwrap().set_len(16 << 20).unwrap();
    }
    // 8 MiB of known data at the start of the 30 MiB array.
    let mut data = vec![0u8; 8 << 20];
    fill_tagged(5, 0, &mut data);
    std::fs::write(d.join("data"), &data).unwrap();
    let script = r#"exec 2>&1
set -e
mdadm --create /dev/md0 --run --level=5 --raid-devices=3 --chunk=64 --assume-clean --homehost=mdref --name=bbl $MDREF_DISKS
dd if=/root/data of=/dev/md0 bs=1M oflag=direct status=none
echo "2100 16" > /sys/block/md0/md/dev-vdb/bad_blocks
echo "9000 200" > /sys/block/md0/md/dev-vdb/bad_blocks
dd if=/root/data of=/dev/md0 bs=1M count=1 oflag=direct status=none
sync
mdadm --stop /dev/md0
mdadm --examine-badblocks /dev/vdb
"#;
    let out = md
        .run(&Run {
            disks: disks.clone(),
            files: vec![d.join("data")],
            timeout_secs: 240,
            script: script.into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}", out.stdout);
    assert_eq!(out.status, 0, "{}\n{}", out.stdout, out.stderr);
    // mdadm's list: lines like "          2148 for 16 sectors".
    let mut theirs: Vec<(u64, u64)> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 4 && w[1] == "for" && w[3] == "sectors")
                .then(|| (w[0].parse().ok(), w[2].parse().ok()))
                .and_then(|(a, b)| Some((a?, b?)))
        })
        .collect();
    theirs.sort_unstable();
    assert!(
        !theirs.is_empty(),
        "mdadm printed no bad blocks:\n{}",
        out.stdout
    );
    // Our decoding of the same log.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&disks[1])
        .unwrap();
    let mut sb = vec![0u8; 4096];
    f.read_exact_at(&mut sb, 8 * 512).unwrap();
    let sb = SuperblockV1::parse(&sb).unwrap();
    let at = (sb.super_offset as i64 + i64::from(sb.bblog_offset)) as u64;
    let mut log = vec![0u8; usize::from(sb.bblog_size) * 512];
    f.read_exact_at(&mut log, at * 512).unwrap();
    let mut ours: Vec<(u64, u64)> = badblocks::parse(&log, sb.bblog_shift)
        .unwrap()
        .into_iter()
        .map(|r| (r.start, r.len))
        .collect();
    ours.sort_unstable();
    assert_eq!(ours, theirs, "bad-block list differs from mdadm's");
    // Garbage in the bad sectors must never reach the reader.
    for &(s, n) in &ours {
        f.write_all_at(&vec![0xEEu8; (n * 512) as usize], s * 512)
            .unwrap();
    }
    drop(f);
    let exp = Command::new(env!("CARGO_BIN_EXE_raidkit"))
        .current_dir(d)
        .args(["export", "--output", "-", "m0.img", "m1.img", "m2.img"])
        .output()
        .unwrap();
    assert!(
        exp.status.success(),
        "{}",
        String::from_utf8_lossy(&exp.stderr)
    );
    assert!(
        exp.stdout[..data.len()] == data[..],
        "export read sectors listed as bad"
    );
}
