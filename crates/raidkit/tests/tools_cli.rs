//! `raidkit advise`, `trace analyze`, `bench io`, `probe` and the disk checks of `create` and
//! `detail` through the binary.

use raidkit_testkit::proc::{self, words};
use serde_json::Value;

fn rk(args: &[&str]) -> (bool, String, String) {
    proc::bin_here(env!("CARGO_BIN_EXE_raidkit"), args)
}

fn data(name: &str) -> String {
    format!(
        "{}/../raidkit-tools/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn advise_worked_example() {
    let (ok, out, err) = rk(&words(
        "advise --level 6 --raid-devices 8 --chunk 8K --json",
    ));
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stride"], 2);
    assert_eq!(v["stripe_width"], 12);
    assert_eq!(v["groups"]["blocks_per_group"], 32744);
    assert_eq!(v["groups"]["default_members_hit"], 3);
    assert_eq!(
        v["command"],
        "mkfs.ext4 -b 4096 -E stride=2,stripe_width=12 -g 32744 -J size=1026 DEVICE"
    );
    let (ok, _, err) = rk(&["advise", "--level", "6"]);
    assert!(!ok);
    assert!(err.contains("--raid-devices"), "{err}");
}

#[test]
fn advise_from_members() {
    let dir = std::env::temp_dir().join(format!("rk-tools-adv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m: Vec<String> = (0..4)
        .map(|i| dir.join(format!("d{i}.img")).display().to_string())
        .collect();
    let mut args = vec![
        "create",
        "--level",
        "5",
        "--raid-devices",
        "4",
        "--chunk",
        "64K",
        "--size",
        "16M",
    ];
    args.extend(m.iter().map(String::as_str));
    let (ok, _, err) = rk(&args);
    assert!(ok, "{err}");
    let mut args = vec!["advise", "--fs", "xfs"];
    args.extend(m.iter().map(String::as_str));
    let (ok, out, err) = rk(&args);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "{err}");
    assert!(
        out.contains("mkfs.xfs -b size=4096 -d su=64k,sw=3 -l su=64k DEVICE"),
        "{out}"
    );
}

#[test]
fn trace_analyze_json() {
    let (ok, out, err) = rk(&["trace", "analyze", "--json", &data("sample-blkparse.txt")]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ios"], 42);
    assert_eq!(v["reads"], 28);
    assert_eq!(v["mode_size"], 4096);
    assert_eq!(v["by_who"][0]["name"], "fio");
    for k in [
        "size_histogram",
        "read_fraction",
        "mean_size",
        "summary",
        "actions",
    ] {
        assert!(v.get(k).is_some(), "{k}");
    }
    let (ok, _, err) = rk(&["trace", "analyze", "/nonexistent/trace"]);
    assert!(!ok && err.contains("reading"), "{err}");
}

#[test]
fn bench_io_on_a_created_array() {
    let (ok, out, err) = rk(&words(
        "bench io --create 5:4:16M --chunk 64K --rw randrw:40 --bs 16K \
        --iodepth 2 --size 4M --json",
    ));
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ios"], 256);
    assert_eq!(v["reads"], 102);
    assert_eq!(v["writes"], 154);
    for k in ["p50", "p90", "p99", "p999", "max"] {
        assert!(v["lat_ns"][k].as_u64().is_some(), "{k}");
    }
    let ms = v["members"].as_array().unwrap();
    assert_eq!(ms.len(), 4);
    let io: f64 = ms.iter().map(|m| m["io_share"].as_f64().unwrap()).sum();
    let by: f64 = ms.iter().map(|m| m["byte_share"].as_f64().unwrap()).sum();
    assert!(
        (io - 1.0).abs() < 1e-9 && (by - 1.0).abs() < 1e-9,
        "{io} {by}"
    );
    // Every write of RAID5 touches a data and a parity member, so members see more IOs.
    let member_ios: u64 = ms
        .iter()
        .map(|m| m["reads"].as_u64().unwrap() + m["writes"].as_u64().unwrap())
        .sum();
    assert!(member_ios >= 256 + 154, "{member_ios}");
}

#[test]
fn bench_io_file_sweep_and_refusals() {
    let f = std::env::temp_dir().join(format!("rk-tools-bench-{}.img", std::process::id()));
    let fs = f.display().to_string();
    let (ok, out, err) = rk(&[
        "bench",
        "io",
        &fs,
        "--file-size",
        "4M",
        "--rw",
        "read",
        "--sweep",
        "bs=4K,64K",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["param"], "bs");
    assert_eq!(v["points"][0]["result"]["ios"], 1024);
    assert_eq!(v["points"][1]["result"]["ios"], 64);
    let (ok, _, err) = rk(&["bench", "io", &fs, "--sweep", "chunk=64K"]);
    assert!(!ok && err.contains("--create"), "{err}");
    let (ok, _, err) = rk(&["bench", "io", "--rw", "scan", &fs]);
    assert!(!ok && err.contains("unknown workload"), "{err}");
    let (ok, _, err) = rk(&["probe", &fs]);
    assert!(!ok && err.contains("--force"), "{err}");
    let (ok, out, err) = rk(&["probe", "--no-write", "--json", &fs]);
    let _ = std::fs::remove_file(&f);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["kind"].as_str().unwrap().starts_with("file on "), "{out}");
}

#[test]
fn create_and_detail_name_members_that_share_a_disk() {
    let dir = std::env::temp_dir().join(format!("rk-tools-dom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m: Vec<String> = (0..3)
        .map(|i| dir.join(format!("d{i}.img")).display().to_string())
        .collect();
    let mut args = vec![
        "create",
        "--level",
        "5",
        "--raid-devices",
        "3",
        "--size",
        "8M",
    ];
    args.extend(m.iter().map(String::as_str));
    let (ok, _, err) = rk(&args);
    assert!(ok, "{err}");
    // Warned before writing: the files do not exist yet, they will share one file system.
    let warn = format!(
        "raidkit: warning: members 0 ({}), 1 ({}) and 2 ({}) are files on one ",
        m[0], m[1], m[2]
    );
    assert!(err.starts_with(&warn), "{err}");
    assert!(
        err.contains("that is more than a raid5 of 3 can lose: the array's data would be lost"),
        "{err}"
    );
    let mut args = vec!["detail", "--json"];
    args.extend(m.iter().map(String::as_str));
    let (ok, out, err) = rk(&args);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let w = v["disk_warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        ["same_disk", "same_filesystem"].contains(&w[0]["kind"].as_str().unwrap()),
        "{w:?}"
    );
    assert_eq!(w[0]["members"].as_array().unwrap().len(), 3);
    let smart = v["smart"].as_array().unwrap();
    assert_eq!(smart.len(), 3, "one SMART verdict per member: {smart:?}");
    for (i, f) in smart.iter().enumerate() {
        assert_eq!(f["member"]["role"], i);
        assert!(f["status"].is_string());
    }
    let mut args = vec!["detail"];
    args.extend(m.iter().map(String::as_str));
    let (ok, out, _) = rk(&args);
    assert!(ok);
    assert!(
        out.contains("\n    Disks:\n    warning: members 0 ("),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn probe_compares_members_read_only_and_charts_draw() {
    let dir = std::env::temp_dir().join(format!("rk-tools-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m: Vec<String> = (0..3)
        .map(|i| {
            let p = dir.join(format!("m{i}.img"));
            std::fs::write(&p, vec![7u8; 2 << 20]).unwrap();
            p.display().to_string()
        })
        .collect();
    let png = dir.join("peers.png").display().to_string();
    let mut args = vec!["probe", "--json", "--bytes-per-point", "1M", "--plot", &png];
    args.extend(m.iter().map(String::as_str));
    let (ok, out, err) = rk(&args);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 3);
    assert_eq!(samples[1]["path"], m[1].as_str());
    assert_eq!(samples[1]["bytes"], 1 << 20);
    assert!(v["findings"].is_array());
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
    for p in &m {
        assert!(
            std::fs::read(p).unwrap().iter().all(|&b| b == 7),
            "read-only"
        );
    }
    // A bench chart says what was measured, in its SVG text.
    let svg = dir.join("b.svg").display().to_string();
    let (ok, _, err) = rk(&[
        "bench",
        "io",
        "--create",
        "6:4:16M",
        "--chunk",
        "64K",
        "--rw",
        "randwrite",
        "--bs",
        "4K",
        "--iodepth",
        "4",
        "--size",
        "1M",
        "--plot",
        &svg,
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("raid6 4×16 MiB, 64 KiB chunk · 4K random write QD4 · "),
        "title"
    );
    assert!(text.contains("member traffic: "), "member panel");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_plot_draws_a_csv_and_names_bad_lines() {
    let dir = std::env::temp_dir().join(format!("rk-tools-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("m.csv");
    std::fs::write(
        &csv,
        "round,panel,x,series,value\n1,\"4 KiB reads, one client\",1,nbdkit,20919\n\
         1,\"4 KiB reads, one client\",2,nbdkit,27588\n1,\"4 KiB reads, one client\",1,raidkit RAID0,29949\n",
    )
    .unwrap();
    let svg = dir.join("m.svg");
    let (cs, ss) = (csv.display().to_string(), svg.display().to_string());
    let (ok, _, err) = rk(&[
        "bench", "plot", &cs, "--out", &ss, "--title", "QD sweep", "--y", "IOPS",
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    for want in [
        "QD sweep",
        "4 KiB reads, one client",
        "raidkit RAID0",
        "nbdkit",
        "IOPS",
    ] {
        assert!(text.contains(want), "{want} missing from the SVG");
    }
    std::fs::write(&csv, "panel,x,series,value\np,1,s,fast\n").unwrap();
    let (ok, _, err) = rk(&["bench", "plot", &cs, "--out", &ss]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{cs}:2: value \"fast\" is not a number")),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
