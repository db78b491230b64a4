//! TRIM and WRITE_ZEROES through `raidkit serve` reach a network member as WRITE_ZEROES
//! (nbdkit's log filter shows Zero requests over the range and no Write into it), and
//! the local member's file as punched holes; the range reads as zeros through the array
//! and from both copies, the bytes around it are unchanged. WRITE_ZEROES with NO_HOLE is
//! written as zeros (Write requests).
//!
//! Skips (printing why) without nbdkit (tests/nbd/install-deps.sh installs it).

mod netmem;

use netmem::*;
use raidkit_nbd::client::ZeroFlags;
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

/// Requests of `kind` in nbdkit's log from line `from` on that touch member bytes
/// `[a, b)`.
fn logged_into(log: &std::path::Path, kind: &str, skip: usize, a: u64, b: u64) -> Vec<(u64, u64)> {
    logged(log, kind)
        .into_iter()
        .skip(skip)
        .filter(|&(off, n)| off < b && a < off + n)
        .collect()
}

#[test]
fn trim_and_write_zeroes_reach_the_remote_as_write_zeroes() {
    let Some(bin) = Program::Nbdkit.available("nbd_zeroes") else {
        return;
    };
    let td = TempDir::new("rk-netmem-zeroes").unwrap();
    let d = td.path();
    sparse(d, "local.img", MEMBER_BYTES);
    let mut remote = Remote::new(Program::Nbdkit, bin, d, "r", MEMBER_BYTES);
    remote.start();
    let uri = remote.uri();
    create(d, "1", &["local.img", &uri], &["--assume-clean"]);
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    assert!(c.info().can_trim() && c.info().can_write_zeroes());
    let t = Duration::from_secs(30);
    let data = proc::xorshift_bytes((8 * MIB) as usize, 5);
    write_flush(&c, 4 * MIB, &data);
    let local_before = std::fs::metadata(d.join("local.img")).unwrap().blocks() * 512;
    let log = remote.log(1);
    let (zeros0, writes0) = (logged(&log, "Zero").len(), logged(&log, "Write").len());
    // TRIM of 2 MiB at 5 MiB, WRITE_ZEROES of 1 MiB + 4 KiB at 8 MiB + 4 KiB.
    let ranges = [(5 * MIB, 2 * MIB), (8 * MIB + 4096, MIB + 4096)];
    c.trim(ranges[0].0, ranges[0].1, false, t).unwrap();
    c.write_zeroes(ranges[1].0, ranges[1].1, ZeroFlags::default(), t)
        .unwrap();
    c.flush(t).unwrap();
    let mut model = data.clone();
    for &(at, n) in &ranges {
        model[(at - 4 * MIB) as usize..(at - 4 * MIB + n) as usize].fill(0);
    }
    assert!(
        read(&c, 4 * MIB, model.len()) == model,
        "bytes through the array"
    );
    for &(at, n) in &ranges {
        let (a, b) = (DATA_OFFSET + at, DATA_OFFSET + at + n);
        let zeroed: u64 = logged_into(&log, "Zero", zeros0, a, b)
            .iter()
            .map(|&(off, len)| off.max(a).min(b).abs_diff((off + len).min(b)))
            .sum();
        assert_eq!(
            zeroed, n,
            "WRITE_ZEROES over member bytes {a}..{b} in {log:?}"
        );
        assert_eq!(
            logged_into(&log, "Write", writes0, a, b),
            vec![],
            "no WRITE into the zeroed range"
        );
    }
    let local_after = std::fs::metadata(d.join("local.img")).unwrap().blocks() * 512;
    assert!(
        local_before - local_after.min(local_before) >= 3 * MIB,
        "the local member gave its storage back: {local_before} -> {local_after} bytes"
    );
    // NO_HOLE: zeros are written, never punched.
    let writes1 = logged(&log, "Write").len();
    let zeros1 = logged(&log, "Zero").len();
    let keep = ZeroFlags {
        no_hole: true,
        ..ZeroFlags::default()
    };
    c.write_zeroes(10 * MIB, MIB, keep, t).unwrap();
    c.flush(t).unwrap();
    let (a, b) = (DATA_OFFSET + 10 * MIB, DATA_OFFSET + 11 * MIB);
    assert_eq!(logged_into(&log, "Zero", zeros1, a, b), vec![]);
    assert!(!logged_into(&log, "Write", writes1, a, b).is_empty());
    assert_eq!(read(&c, 10 * MIB, MIB as usize), vec![0u8; MIB as usize]);
    drop(c);
    drop(_server);
    let remote_data = remote.read_export(None);
    let local = data_area(&d.join("local.img"));
    for (name, copy) in [
        ("local", &local),
        ("remote", &remote_data[DATA_OFFSET as usize..].to_vec()),
    ] {
        let got = &copy[(4 * MIB) as usize..(4 * MIB) as usize + model.len()];
        let mut want = model.clone();
        want[(6 * MIB) as usize..(7 * MIB) as usize].fill(0);
        assert!(got == want.as_slice(), "{name} copy");
    }
}
