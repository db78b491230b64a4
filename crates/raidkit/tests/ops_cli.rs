//! Operability through the binary: `examine --bitmap`, names (UUID, `host:name`, 0.90
//! names from the config, `scan`), health metrics and the systemd units.

use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

fn rk(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_raidkit"))
        .args(args)
        .output()
        .expect("run raidkit");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rk-ops-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn paths(dir: &Path, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| dir.join(format!("m{i}.img")).display().to_string())
        .collect()
}

fn json(args: &[&str]) -> Value {
    let (ok, out, err) = rk(args);
    assert!(ok, "raidkit {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Set bits `bits` of the bitmap of member file `p` (bitmap superblock at `sector`).
fn set_bits(p: &str, sector: u64, bits: &[u64]) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    for &i in bits {
        let at = sector * 512 + 256 + i / 8;
        let mut b = [0u8];
        f.seek(SeekFrom::Start(at)).unwrap();
        f.read_exact(&mut b).unwrap();
        b[0] |= 1 << (i % 8);
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&b).unwrap();
    }
}

#[test]
fn examine_bitmap_shows_dirty_regions_and_the_resync_plan() {
    let dir = tmpdir("bitmap");
    let m = paths(&dir, 3);
    let mut args = vec![
        "create",
        "--level",
        "5",
        "--raid-devices",
        "3",
        "--bitmap",
        "internal",
        "--bitmap-chunk",
        "1M",
        "--size",
        "20M",
        "--name",
        "bm",
        "--homehost",
        "none",
    ];
    args.extend(m.iter().map(String::as_str));
    let (ok, _, err) = rk(&args);
    assert!(ok, "{err}");
    let ex = json(&["examine", "--json", &m[0]]);
    let at = ex[0]["bitmap_sector"].as_u64().unwrap();

    // A fresh array: every bit clear, nothing to copy.
    let mut a = vec!["examine", "--bitmap", "--json"];
    a.extend(m.iter().map(String::as_str));
    let v = json(&a);
    assert_eq!(v["members"].as_array().unwrap().len(), 3);
    assert_eq!(v["members"][0]["bits"], 18);
    assert_eq!(v["members"][0]["chunk_bytes"], 1 << 20);
    assert_eq!(v["members"][0]["dirty_bits"], 0);
    assert_eq!(v["arrays"][0]["copy_bits"], 0);
    assert_eq!(v["arrays"][0]["clean"], true);

    // Bits 1-3 and 10 dirty on every member: 1 MiB bits of member data; a row of the
    // raid5 (512 KiB chunks, 2 data members) is 1 MiB of array per 512 KiB of member.
    for p in &m {
        set_bits(p, at, &[1, 2, 3, 10]);
    }
    let v = json(&a);
    let d = &v["members"][1]["dirty"];
    assert_eq!(v["members"][1]["dirty_bits"], 4);
    assert_eq!(d[0]["first_bit"], 1);
    assert_eq!(d[0]["last_bit"], 3);
    assert_eq!(d[0]["member_sectors"], serde_json::json!([2048, 8192]));
    assert_eq!(d[0]["array_bytes"], serde_json::json!([2 << 20, 8 << 20]));
    assert_eq!(d[1]["array_bytes"], serde_json::json!([20 << 20, 22 << 20]));
    assert_eq!(v["arrays"][0]["copy_bits"], 4);
    assert_eq!(v["arrays"][0]["copy_member_bytes"], 4 << 20);

    let mut t = vec!["examine", "--bitmap"];
    t.extend(m.iter().map(String::as_str));
    let (ok, out, err) = rk(&t);
    assert!(ok, "{err}");
    assert!(
        out.contains("Bitmap : 18 bits (chunks), 4 dirty (22.2%)"),
        "{out}"
    );
    assert!(
        out.contains("dirty bits 1-3: member data sectors 2048-8191"),
        "{out}"
    );
    assert!(out.contains("would copy 4 of 18 regions"), "{out}");

    // A bitmap older than its superblock counts as all dirty (as the kernel does).
    let mut f = std::fs::OpenOptions::new().write(true).open(&m[0]).unwrap();
    f.seek(SeekFrom::Start(at * 512 + 24)).unwrap();
    f.write_all(&0u64.to_le_bytes()).unwrap();
    drop(f);
    let v = json(&a);
    assert_eq!(v["members"][0]["stale"], true);
    assert_eq!(v["arrays"][0]["bitmap_from"], m[0].as_str());
    assert_eq!(v["arrays"][0]["stale_bitmap"], true);
    assert_eq!(v["arrays"][0]["copy_bits"], 18);

    // No bitmap: said so, with what to do.
    let plain = dir.join("plain").display().to_string();
    let (ok, _, err) = rk(&[
        "create",
        "--level",
        "1",
        "--raid-devices",
        "2",
        "--size",
        "4M",
        &format!("{plain}0"),
        &format!("{plain}1"),
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = rk(&["examine", "--bitmap", &format!("{plain}0")]);
    assert!(!ok);
    assert!(out.contains("no internal write-intent bitmap"), "{out}");
    assert!(err.contains("no readable bitmap"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
