//! Corrupt and crafted metadata on real member files (issue 14, items 4 and 5): a damaged
//! bitmap is reported and ignored, never fatal to the recovery path; fields that would size
//! an allocation or place client writes on metadata are refused, naming the field.

use raidkit_format::v090::{self, SuperblockV090};
use raidkit_format::v1::SuperblockV1;
use raidkit_testkit::proc::{self, Daemon};
use raidkit_testkit::tempdir::TempDir;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

/// Run raidkit in `dir`, killed (and the test failed) after 60 s: the defects included
/// commands that never returned.
fn rk(dir: &Path, args: &[&str]) -> Output {
    proc::run_timeout(Command::new(RAIDKIT).current_dir(dir).args(args), 60)
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let out = rk(dir, args);
    assert!(
        out.status.success(),
        "raidkit {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// stderr of a command that must fail (not crash: exit code 1).
fn refused(dir: &Path, args: &[&str]) -> String {
    let out = rk(dir, args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "raidkit {args:?}: {err}");
    err
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn create(dir: &Path, extra: &[&str], members: &[&str]) {
    let n = members.len().to_string();
    let mut args = vec!["create", "--level", "1", "--raid-devices", &n];
    args.extend_from_slice(extra);
    args.extend_from_slice(members);
    ok(dir, &args);
}

/// Rewrite the 1.x superblock at `sector` of `file` through `f`, checksum fixed.
fn patch_v1(file: &Path, sector: u64, f: impl FnOnce(&mut SuperblockV1)) {
    raidkit_testkit::superblock::patch_v1_at(file, sector, f);
}

/// Rewrite the 0.90 superblock of `file` through `f`, checksum fixed.
fn patch_v090(file: &Path, f: impl FnOnce(&mut SuperblockV090)) {
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let at = v090::super_offset(fd.metadata().unwrap().len() / 512).unwrap() * 512;
    let mut buf = vec![0u8; v090::SB_BYTES];
    fd.read_exact_at(&mut buf, at).unwrap();
    let mut sb = SuperblockV090::parse(&buf).unwrap();
    f(&mut sb);
    fd.write_all_at(&sb.encode(), at).unwrap();
}

/// Every read-only command, and `serve`, ends with a refusal that says `want`.
fn every_command_refuses(dir: &Path, members: &[&str], want: &str) {
    for cmd in [
        &["detail"][..],
        &["export", "--output", "x.img"],
        &["check"],
        &["serve", "--socket", "s.sock"],
    ] {
        let mut args = cmd.to_vec();
        args.extend_from_slice(members);
        let err = refused(dir, &args);
        assert!(err.contains(want), "raidkit {args:?}: {err}");
    }
}

#[test]
fn damaged_bitmap_superblock_is_reported_and_ignored() {
    let t = TempDir::new("rk-hostile").unwrap();
    let d = t.path();
    create(d, &["--bitmap", "internal", "--size", "64M"], &["m0", "m1"]);
    let data = proc::xorshift_bytes(3 << 20, 7);
    std::fs::write(d.join("in.img"), &data).unwrap();
    ok(d, &["import", "--input", "in.img", "m0", "m1"]);
    // The flipped byte: the top bytes of the bitmap's sync_size on m0 (1.2: the
    // superblock at 4 KiB, the bitmap 4 KiB after it, sync_size at byte 40).
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("m0"))
        .unwrap()
        .write_all_at(&[0xc7], 8238)
        .unwrap();
    let warning = "m0: the write-intent bitmap is ignored (bitmap sync_size 56013520365549568 sectors at chunksize 67108864 bytes needs 53418656001 bytes on disk, but only 1040384 bytes are free at the bitmap's place";
    let out = ok(d, &["detail", "m0", "m1"]);
    assert!(stderr(&out).contains(warning), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("State : clean"));
    let v: serde_json::Value =
        serde_json::from_slice(&ok(d, &["detail", "--json", "m0", "m1"]).stdout).unwrap();
    assert_eq!(v["notes"][0]["note"], "bitmap_ignored", "{v}");
    assert_eq!(v["notes"][0]["full_resync"], false, "{v}");
    let out = ok(d, &["export", "--output", "x.img", "m0", "m1"]);
    assert!(stderr(&out).contains(warning), "{}", stderr(&out));
    assert_eq!(std::fs::read(d.join("x.img")).unwrap()[..data.len()], data);
    let out = ok(d, &["check", "m0", "m1"]);
    assert!(stderr(&out).contains(warning), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 mismatched range(s)"),
        "{out:?}"
    );
    let sock = d.join("s.sock");
    let mut s = Daemon::spawn(
        Command::new(RAIDKIT).current_dir(d).args([
            "serve",
            "--socket",
            sock.to_str().unwrap(),
            "m0",
            "m1",
        ]),
        |l| l.starts_with("raidkit: serving;"),
        30,
    );
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(warning), "{err}");
    // The remedy the warning names works: remove the bitmap, add a new one.
    ok(d, &["grow", "--bitmap", "none", "m0", "m1"]);
    ok(d, &["grow", "--bitmap", "internal", "m0", "m1"]);
    let out = ok(d, &["detail", "m0", "m1"]);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn raid_disks_beyond_the_format_is_refused_naming_the_field() {
    let t = TempDir::new("rk-hostile").unwrap();
    let d = t.path();
    create(d, &["--size", "16M"], &["m0", "m1"]);
    patch_v1(&d.join("m0"), 8, |sb| sb.raid_disks = 0xffff_ffff);
    every_command_refuses(d, &["m0", "m1"], "raid_disks");
    // examine shows what it can and says what is wrong, promptly.
    let out = rk(d, &["examine", "m0"]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(text.contains("raid_disks"), "{text}");
}

#[test]
fn data_offset_over_the_superblock_is_refused_naming_the_field() {
    let t = TempDir::new("rk-hostile").unwrap();
    let d = t.path();
    create(d, &["--size", "16M"], &["m0", "m1"]);
    patch_v1(&d.join("m0"), 8, |sb| sb.data_offset = 0);
    every_command_refuses(
        d,
        &["m0", "m1"],
        "m0: the data area (data_offset) at device sectors 0..",
    );
    // Left out, the array runs degraded from the good member.
    ok(d, &["export", "--output", "x.img", "m1"]);
}

#[test]
fn v090_size_beyond_the_device_is_refused_naming_the_field() {
    let t = TempDir::new("rk-hostile").unwrap();
    let d = t.path();
    create(d, &["--metadata", "0.90", "--size", "16M"], &["m0", "m1"]);
    for m in ["m0", "m1"] {
        patch_v090(&d.join(m), |sb| sb.size_kib = 0xffff_ffff);
    }
    every_command_refuses(
        d,
        &["m0", "m1"],
        "m0: the data area (size) covers device sectors 0..8589934590, but the device has only 32768 sectors",
    );
}

/// `examine` multiplied sector counts from the superblock by 512 unchecked: a size, data
/// size or reshape position near 2^64 panicked (debug) or printed a wrapped size
/// (release), and a new offset below sector 0 or past 2^63 overflowed too. It shows
/// them now, saturated, and marks an impossible new offset.
#[test]
fn examine_shows_huge_sector_counts_without_overflowing() {
    use raidkit_format::v1::feature;
    let t = TempDir::new("rk-hostile").unwrap();
    let d = t.path();
    ok(
        d,
        &[
            "create",
            "--level",
            "5",
            "--raid-devices",
            "3",
            "--size",
            "16M",
            "m0",
            "m1",
            "m2",
        ],
    );
    patch_v1(&d.join("m0"), 8, |sb| {
        sb.size = u64::MAX;
        sb.data_size = u64::MAX;
        sb.feature_map |= feature::RESHAPE_ACTIVE | feature::NEW_OFFSET;
        sb.reshape_position = u64::MAX - 255;
        sb.new_level = sb.level;
        sb.new_layout = sb.layout;
        sb.new_chunk = sb.chunksize;
        sb.new_offset = -0x7fff_ffff;
    });
    let out = ok(d, &["examine", "m0"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for want in [
        "Avail Dev Size : 18446744073709551615 sectors (16384.00 PiB)",
        "Used Dev Size : 18446744073709551615 sectors (16384.00 PiB)",
        "Reshape pos'n : 9223372036854775680 (16384.00 PiB)",
        "New Offset : out of range (data offset 4096 sectors + new_offset -2147483647 sectors)",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    let out = ok(d, &["examine", "--json", "m0"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v[0]["reshape"]["new_offset"],
        serde_json::Value::Null,
        "{v}"
    );
    // The array itself is refused, naming what is wrong.
    refused(d, &["detail", "m0", "m1", "m2"]);
}
