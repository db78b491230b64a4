//! The kernel and raidkit agree on bad-block logs both ways: the logs raidkit writes after
//! a rebuild that met an unreadable sector, and shrinks after a client write over part of
//! the lost range, are what mdadm and the kernel read (the kernel returns the written part
//! and refuses to read the rest too); a kernel-made log is removed online by
//! `raidkit manage NAME --update no-bbl`, after which mdadm sees no log and the kernel's
//! `check` finds nothing. raidkit decodes a kernel-made log exactly as mdadm prints it and
//! never reads the sectors it lists (filled with garbage on the host, the export is still
//! the data the kernel was given).
//!
//! The kernel-made array is made once per run of this file (one VM boot) and copied for
//! each test that needs it.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::{create, CreateOptions, MemberSpec};
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_format::badblocks;
use raidkit_format::v1::{feature, SuperblockV1};
use raidkit_layout::Level;
use raidkit_testkit::mdref::{locate_or_skip, Mdref, Run};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::proc::{Daemon, Killing};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn result_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .collect()
}

/// `mdadm --examine-badblocks` lines "  S for N sectors" → (S, N).
fn mdadm_list(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 4 && w[1] == "for" && w[3] == "sectors")
                .then(|| Some((w[0].parse().ok()?, w[2].parse().ok()?)))
                .flatten()
        })
        .collect()
}

/// The array data of the kernel-made array: 8 MiB of the pattern at its start.
fn kernel_data() -> Vec<u8> {
    let mut data = vec![0u8; 8 << 20];
    fill_tagged(5, 0, &mut data);
    data
}

/// A RAID5 the kernel made over three 16 MiB members (name `kbbl`, 64 KiB chunk), holding
/// [`kernel_data`] with two ranges in the kernel's bad-block log of role 1 (`m1.img`,
/// the VM's vdb). Made once (one VM boot) and copied into `d` with the data as `d/data`;
/// returns the members and mdadm's list of role 1's bad blocks.
fn kernel_bbl_array(md: &Mdref, d: &Path) -> (Vec<PathBuf>, Vec<(u64, u64)>) {
    /// Where the made array is, and mdadm's list (or why it could not be made).
    type Made = Result<(PathBuf, Vec<(u64, u64)>), String>;
    static MADE: OnceLock<Made> = OnceLock::new();
    let made = MADE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-bbl");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let disks: Vec<_> = (0..3).map(|i| dir.join(format!("m{i}.img"))).collect();
        for p in &disks {
            std::fs::File::create(p).unwrap().set_len(16 << 20).unwrap();
        }
        std::fs::write(dir.join("data"), kernel_data()).unwrap();
        let script = r#"exec 2>&1
set -e
mdadm --create /dev/md0 --run --level=5 --raid-devices=3 --chunk=64 --assume-clean --homehost=mdref --name=kbbl $MDREF_DISKS
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
                disks,
                files: vec![dir.join("data")],
                timeout_secs: 240,
                script: script.into(),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        println!("{}", out.stdout);
        if out.status != 0 {
            return Err(format!("{}\n{}", out.stdout, out.stderr));
        }
        let mut theirs = mdadm_list(&out.stdout);
        theirs.sort_unstable();
        if theirs.is_empty() {
            return Err(format!("mdadm printed no bad blocks:\n{}", out.stdout));
        }
        Ok((dir, theirs))
    });
    let (dir, theirs) = made
        .as_ref()
        .unwrap_or_else(|e| panic!("the kernel-made array: {e}"));
    let disks: Vec<_> = (0..3).map(|i| d.join(format!("m{i}.img"))).collect();
    for (i, p) in disks.iter().enumerate() {
        std::fs::copy(dir.join(format!("m{i}.img")), p).unwrap();
    }
    std::fs::copy(dir.join("data"), d.join("data")).unwrap();
    (disks, theirs.clone())
}

/// Fill the sectors `ranges` of member file `p` with garbage (0xEE).
fn garble(p: &Path, ranges: &[(u64, u64)]) {
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    for &(s, n) in ranges {
        f.write_all_at(&vec![0xEEu8; (n * 512) as usize], s * 512)
            .unwrap();
    }
}

#[test]
fn kernel_bad_block_log_is_decoded_and_honoured() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-bbl").unwrap();
    let d = t.path();
    let (disks, theirs) = kernel_bbl_array(&md, d);
    // Our decoding of the same log.
    let f = std::fs::File::open(&disks[1]).unwrap();
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
    garble(&disks[1], &ours);
    let exp = Command::new(RAIDKIT)
        .current_dir(d)
        .args(["export", "--output", "-", "m0.img", "m1.img", "m2.img"])
        .output()
        .unwrap();
    assert!(
        exp.status.success(),
        "{}",
        String::from_utf8_lossy(&exp.stderr)
    );
    let data = kernel_data();
    assert!(
        exp.stdout[..data.len()] == data[..],
        "export read sectors listed as bad"
    );
}

#[test]
fn kernel_reads_the_bad_block_logs_raidkit_writes() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-ibbl").unwrap();
    let d = t.path();
    let ps: Vec<_> = (0..3).map(|i| d.join(format!("m{i}.img"))).collect();
    let mut o = CreateOptions::new(
        Level::Raid5,
        ps.iter().cloned().map(MemberSpec::Path).collect(),
    );
    o.chunk_bytes = Some(16 * 1024);
    o.create_size = Some(8 << 20);
    o.name = "rb".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let mut data = vec![0u8; arr.size_bytes() as usize];
    fill_tagged(3, 0, &mut data);
    arr.write(0, &data).unwrap();
    arr.stop().unwrap();
    // Member 1 is gone; member 0 cannot read device sectors 2088..=2103 while a spare is
    // rebuilt: array bytes 53248..61440 are lost (stripe 1, data block of member 0).
    let bad = format!("fault:reio@2088-2103:{}", ps[0].display());
    let rw = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = assemble_paths(&[bad.into(), ps[2].clone()], &rw).unwrap();
    let spare = d.join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    arr.add_spare(
        Arc::new(raidkit_engine::FileDev::open(&spare, true).unwrap()),
        false,
    )
    .unwrap();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(rep.lost, vec![(53248, 8192)]);
    arr.stop().unwrap();
    // A client write over the first half of the lost range (one 4 KiB page, md's unit)
    // makes that half valid: both logs shrink to the other half.
    let arr = assemble_paths(&[ps[0].clone(), spare.clone(), ps[2].clone()], &rw).unwrap();
    let new = vec![0x5Au8; 4096];
    arr.write(53248, &new).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(57344, 4096)]);
    arr.stop().unwrap();
    std::fs::write(d.join("head"), &data[..53248]).unwrap();
    std::fs::write(d.join("new"), &new).unwrap();
    std::fs::write(d.join("tail"), &data[61440..]).unwrap();
    // vda = m0 (role 0, bad 2096+8), vdb = m2 (role 2, no log), vdc = spare (role 1, bad
    // 2096+8).
    let script = r#"exec 2>&1
for v in vda vdb vdc; do echo "== $v"; mdadm --examine-badblocks /dev/$v; done
mdadm --examine /dev/vda | grep -E "Bad Block|Feature Map|Checksum"
mdadm --assemble --run /dev/md0 /dev/vda /dev/vdb /dev/vdc || exit 2
cat /proc/mdstat
for v in vda vdb vdc; do echo "RESULT sysfs $v $(cat /sys/block/md0/md/dev-$v/bad_blocks | tr '\n' ' ')"; done
cmp -n 53248 /dev/md0 /root/head && echo "RESULT head=ok" || echo "RESULT head=BAD"
dd if=/dev/md0 of=/root/t bs=4096 skip=15 iflag=direct status=none && cmp /root/t /root/tail && echo "RESULT tail=ok" || echo "RESULT tail=BAD"
dd if=/dev/md0 of=/root/w bs=4096 skip=13 count=1 iflag=direct status=none && cmp /root/w /root/new && echo "RESULT written=ok" || echo "RESULT written=BAD"
if dd if=/dev/md0 of=/dev/null bs=4096 skip=14 count=1 iflag=direct status=none; then echo "RESULT lost=readable"; else echo "RESULT lost=EIO"; fi
mdadm --stop /dev/md0
"#;
    let out = md
        .run(&Run {
            disks: vec![ps[0].clone(), ps[2].clone(), spare.clone()],
            files: vec![d.join("head"), d.join("new"), d.join("tail")],
            timeout_secs: 240,
            script: script.into(),
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let sections: Vec<&str> = out.stdout.split("== ").collect();
    let list = |v: &str| {
        mdadm_list(
            sections
                .iter()
                .find(|s| s.starts_with(v))
                .copied()
                .unwrap_or(""),
        )
    };
    assert_eq!(list("vda"), vec![(2096, 8)], "{}", out.stdout);
    assert_eq!(list("vdb"), vec![], "{}", out.stdout);
    assert_eq!(list("vdc"), vec![(2096, 8)], "{}", out.stdout);
    assert!(out
        .stdout
        .contains("Bad Block Log : 512 entries available at offset 16 sectors"));
    assert!(out.stdout.contains("- correct"), "{}", out.stdout);
    assert_eq!(
        result_lines(&out.stdout),
        vec![
            "RESULT sysfs vda 2096 8 ",
            "RESULT sysfs vdb ",
            "RESULT sysfs vdc 2096 8 ",
            "RESULT head=ok",
            "RESULT tail=ok",
            "RESULT written=ok",
            "RESULT lost=EIO",
        ],
        "{}",
        out.stdout
    );
}

#[test]
fn kernel_made_bad_block_log_is_removed_online() {
    let Some(md) = locate_or_skip() else { return };
    let t = TempDir::new("rk-ibbl").unwrap();
    let d = t.path();
    let (disks, theirs) = kernel_bbl_array(&md, d);
    // The bad sectors hold garbage on the host: only redundancy can supply them.
    garble(&disks[1], &theirs);
    // Serve it, watch events, remove the log online.
    let run = d.join("run");
    let mut server = Daemon::spawn(
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", &run)
            .args([
                "serve", "--socket", "nbd.sock", "m0.img", "m1.img", "m2.img",
            ]),
        |l| l.starts_with("raidkit: serving;"),
        60,
    );
    let rk = |args: &[&str]| {
        Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(args)
            .output()
            .unwrap()
    };
    let st: Value = serde_json::from_slice(&rk(&["status", "--json"]).stdout).unwrap();
    let ranges: Vec<(u64, u64)> =
        serde_json::from_value(st[0]["bad_blocks"][0]["ranges"].clone()).unwrap();
    let mut sorted = theirs.clone();
    sorted.sort_unstable();
    let mut ours = ranges.clone();
    ours.sort_unstable();
    // Our coalesced view covers exactly mdadm's sectors.
    let sectors = |v: &[(u64, u64)]| -> Vec<u64> {
        let mut s: Vec<u64> = v.iter().flat_map(|&(a, n)| a..a + n).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    assert_eq!(sectors(&ours), sectors(&sorted));
    assert_eq!(st[0]["lost_ranges"], serde_json::json!([]));
    let mon = Killing(
        Command::new(RAIDKIT)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(["monitor", "--json", "--count", "20"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let o = rk(&["manage", "kbbl", "--update", "no-bbl"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut mon = mon;
    // Other events may come first (a `slow_member` warning on a loaded machine).
    let out = mon.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let ev: Value = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("no bad_block_log_removed event ({e}); saw {seen:?}"));
        let ev: Value = serde_json::from_str(&line).unwrap();
        if ev["kind"] == "bad_block_log_removed" {
            break ev;
        }
        seen.push(ev["kind"].clone());
    };
    assert_eq!(ev["detail"]["lost"], serde_json::json!([]));
    let repaired: Vec<(usize, u64, u64)> =
        serde_json::from_value(ev["detail"]["repaired"].clone()).unwrap();
    assert!(repaired.iter().all(|&(r, _, _)| r == 1));
    let rep: Vec<(u64, u64)> = repaired.iter().map(|&(_, s, n)| (s, n)).collect();
    assert_eq!(sectors(&rep), sectors(&sorted));
    let st: Value = serde_json::from_slice(&rk(&["status", "--json"]).stdout).unwrap();
    assert_eq!(st[0]["bad_blocks"], serde_json::json!([]));
    let (code, log) = server.stop("TERM");
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("bad_block_log_removed"), "{log}");
    for p in &disks {
        let f = std::fs::File::open(p).unwrap();
        let mut b = vec![0u8; 4096];
        f.read_exact_at(&mut b, 8 * 512).unwrap();
        let sb = SuperblockV1::parse(&b).unwrap();
        assert_eq!((sb.bblog_offset, sb.bblog_size), (0, 0), "{}", p.display());
        assert_eq!(sb.feature_map & feature::BAD_BLOCKS, 0);
    }
    // The kernel agrees: no log, right data, consistent parity.
    let script = r#"exec 2>&1
for v in vda vdb vdc; do echo "RESULT $v bbl-lines=$(mdadm --examine /dev/$v | grep -c 'Bad Block Log')"; done
mdadm --examine /dev/vdb | grep -q -- '- correct' && echo "RESULT csum=ok"
mdadm --assemble --run /dev/md0 $MDREF_DISKS || exit 2
echo "RESULT sysfs $(cat /sys/block/md0/md/dev-vdb/bad_blocks | wc -l)"
cmp -n 8388608 /dev/md0 /root/data && echo "RESULT data=ok" || echo "RESULT data=BAD"
echo check > /sys/block/md0/md/sync_action
mdref-wait md0
echo "RESULT mismatch_cnt=$(cat /sys/block/md0/md/mismatch_cnt)"
mdadm --stop /dev/md0
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
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        result_lines(&out.stdout),
        vec![
            "RESULT vda bbl-lines=0",
            "RESULT vdb bbl-lines=0",
            "RESULT vdc bbl-lines=0",
            "RESULT csum=ok",
            "RESULT sysfs 0",
            "RESULT data=ok",
            "RESULT mismatch_cnt=0",
        ],
        "{}",
        out.stdout
    );
}
