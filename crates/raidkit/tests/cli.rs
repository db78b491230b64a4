//! The CLI contract: the `--help` examples work as printed, JSON keys are present, and the
//! errors a user can hit say what is wrong (exact texts).

use raidkit_testkit::proc::{self, words};
use raidkit_testkit::tempdir::TempDir;
use std::path::Path;
use std::process::Output;

fn rk(dir: &Path, args: &[&str]) -> Output {
    proc::bin_in(env!("CARGO_BIN_EXE_raidkit"), dir, None, args)
}

fn ok(dir: &Path, args: &[&str]) -> String {
    proc::bin_ok(env!("CARGO_BIN_EXE_raidkit"), dir, None, args)
}

fn err(dir: &Path, args: &[&str]) -> String {
    proc::bin_err(env!("CARGO_BIN_EXE_raidkit"), dir, None, args)
}

#[test]
fn help_examples_work() {
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    let help = ok(d, &["--help"]);
    let cmds: Vec<String> = help
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("raidkit ") && !l.contains("/dev/"))
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .collect();
    assert_eq!(cmds.len(), 5, "{help}");
    for c in &cmds {
        let args: Vec<&str> = c.split_whitespace().skip(1).collect();
        ok(d, &args);
    }
    // The exported copy starts with /etc/services.
    let services = std::fs::read("/etc/services").unwrap();
    let copy = std::fs::read(d.join("copy.img")).unwrap();
    assert_eq!(&copy[..services.len()], &services[..]);
}

/// The command lines of a help text's examples that start with one of `tools`, without
/// their comments.
fn example_lines(help: &str, tools: &[&str]) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Examples:"))
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| tools.iter().any(|t| l.starts_with(&format!("{t} "))))
        .collect()
}

/// Run one example line in `d`: `raidkit ...` through the binary, another tool as itself.
fn run_example(d: &Path, line: &str) {
    let w = words(line);
    if w[0] == "raidkit" {
        ok(d, &w[1..]);
    } else {
        let st = std::process::Command::new(w[0])
            .args(&w[1..])
            .current_dir(d)
            .status()
            .unwrap();
        assert!(st.success(), "{line}");
    }
}

/// The offline examples of the subcommands run as printed (with the array a help
/// assumes made first): `checksums`, `check`, `repair` (`grow`'s are run by
/// reshape_cli.rs, the serving commands' by their own tests).
#[test]
fn subcommand_help_examples_work() {
    let cases: [(&[&str], Option<&str>); 3] = [
        (&["checksums", "init", "--help"], None),
        (&["check", "--help"], None),
        (
            &["repair", "--help"],
            Some("raidkit create --level 5 --raid-devices 3 --size 64M d0.img d1.img d2.img"),
        ),
    ];
    for (help_args, setup) in cases {
        let t = TempDir::new("rk-cli").unwrap();
        let d = t.path();
        let help = ok(d, help_args);
        let lines: Vec<String> = example_lines(&help, &["raidkit", "truncate"])
            .into_iter()
            .filter(|l| !l.contains(" serve ") && !l.contains("--continue") && !l.contains(" md0"))
            .collect();
        assert!(lines.len() >= 2, "{help_args:?}: {help}");
        for l in setup.iter().map(|s| s.to_string()).chain(lines) {
            run_example(d, &l);
        }
    }
}

#[test]
fn json_keys_and_round_trip() {
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    ok(
        d,
        &words(
            "create --level 5 --raid-devices 3 --chunk 64 --size 8M --name alpha \
            --homehost none --uuid 5ee1c0de:00000000:00000000:00000005 a b c",
        ),
    );
    let ex: serde_json::Value =
        serde_json::from_str(&ok(d, &["examine", "--json", "a", "b", "c"])).unwrap();
    let list = ex.as_array().unwrap();
    assert_eq!(list.len(), 3);
    for (i, m) in list.iter().enumerate() {
        for k in [
            "metadata",
            "uuid",
            "name",
            "level",
            "layout",
            "chunk_bytes",
            "raid_disks",
            "role",
            "events",
            "data_offset",
            "data_size",
            "super_offset",
            "checksum_ok",
            "array_bytes",
        ] {
            assert!(m.get(k).is_some(), "examine --json lacks {k}: {m}");
        }
        assert_eq!(m["metadata"], "1.2");
        assert_eq!(m["uuid"], "5ee1c0de:00000000:00000000:00000005");
        assert_eq!(m["name"], "alpha");
        assert_eq!(m["level"], "raid5");
        assert_eq!(m["layout"], "left-symmetric");
        assert_eq!(m["chunk_bytes"], 65536);
        assert_eq!(m["role"], i);
        assert_eq!(m["checksum_ok"], true);
        assert_eq!(m["data_offset"], 2048);
        assert_eq!(m["super_offset"], 8);
        assert_eq!(m["data_offset_sectors"], 2048);
        assert_eq!(m["super_offset_sectors"], 8);
        assert_eq!(m["data_size_sectors"], m["data_size"]);
        assert_eq!(m["resync_offset_sectors"], serde_json::Value::Null);
        assert_eq!(m["state"], "clean");
        // 8 MiB members, 1 MiB data offset, 64K chunks: 7 MiB per member, 2 data members.
        assert_eq!(m["array_bytes"], 14 * 1024 * 1024);
    }
    let det: serde_json::Value =
        serde_json::from_str(&ok(d, &["detail", "--json", "c", "a", "b"])).unwrap();
    assert_eq!(det["state"], "clean");
    assert_eq!(det["array_bytes"], 14 * 1024 * 1024);
    assert_eq!(det["missing_roles"], serde_json::json!([]));
    let det: serde_json::Value =
        serde_json::from_str(&ok(d, &["detail", "--json", "c", "a"])).unwrap();
    assert_eq!(det["state"], "clean, degraded");
    assert_eq!(det["missing_roles"], serde_json::json!([1]));
    // import at an offset, export through stdout, degraded.
    std::fs::write(d.join("in"), b"hello raid").unwrap();
    ok(
        d,
        &[
            "import", "--input", "in", "--offset", "1000000", "a", "b", "c",
        ],
    );
    let o = rk(d, &["export", "--output", "-", "b", "c"]);
    assert!(o.status.success());
    assert_eq!(o.stdout.len(), 14 * 1024 * 1024);
    assert_eq!(&o.stdout[1_000_000..1_000_010], b"hello raid");
}

#[test]
fn user_errors_say_what_to_do() {
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    let e = err(d, &words("create --level 5 --raid-devices 3 a b c"));
    assert!(
        e.contains("a does not exist; pass --size SIZE to create member files (sparse)"),
        "{e}"
    );
    let e = err(d, &words("create --level 7 --raid-devices 2 --size 4M a b"));
    assert!(e.contains("unknown RAID level"), "{e}");
    let e = err(
        d,
        &words("create --level 5 --raid-devices 4 --size 4M a b c"),
    );
    assert!(
        e.contains("the array has 4 member slots but 3 member(s) were given; give exactly 4 (`missing` for an empty slot); --raid-devices must equal the number of members given"),
        "{e}"
    );
    let e = err(
        d,
        &words("create --level 6 --raid-devices 4 --layout n2 --size 4M a b c d"),
    );
    assert!(e.contains("layout \"n2\" is not valid for raid6"), "{e}");
    let e = err(
        d,
        &words("create --level 1 --raid-devices 2 --chunk 64 --size 4M a b"),
    );
    assert!(e.contains("raid1 has no chunk size; drop --chunk"), "{e}");
    ok(d, &words("create --level 1 --raid-devices 2 --size 4M a b"));
    let e = err(
        d,
        &["create", "--level", "1", "--raid-devices", "2", "a", "b"],
    );
    assert!(
        e.contains("carries a 1.2 MD superblock") && e.contains("Use --force"),
        "{e}"
    );
    std::fs::write(d.join("junk"), vec![7u8; 1 << 20]).unwrap();
    let e = err(d, &words("grow a b --add nosuch --raid-devices 3"));
    assert!(
        e.contains("--add nosuch: no such file or device; a new disk must exist first (for a file: `truncate -s SIZE nosuch`"),
        "{e}"
    );
    let e = err(d, &["examine", "junk"]);
    assert!(e.contains("no usable MD superblock"), "{e}");
    let e = err(d, &["examine", "a", "nosuch"]);
    assert!(
        e.contains("1 of 2 device(s) have no usable MD superblock or could not be read (each is said above)"),
        "{e}"
    );
    let e = err(d, &["export", "--output", "x", "a", "junk"]);
    assert!(e.contains("junk: no MD superblock found"), "{e}");
    let e = err(
        d,
        &["import", "--input", "junk", "--offset", "4000000", "a", "b"],
    );
    assert!(
        e.contains("does not fit in the array") && e.contains("nothing was written"),
        "{e}"
    );
}

#[test]
fn corrupt_and_truncated_members_are_named() {
    use std::os::unix::fs::FileExt;
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    ok(
        d,
        &words("create --level 5 --raid-devices 3 --chunk 64 --size 8M a b c"),
    );
    // Flip one byte of b's superblock (its name field, inside the checksummed area).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.join("b"))
        .unwrap();
    let mut x = [0u8; 1];
    f.read_exact_at(&mut x, 4096 + 40).unwrap();
    f.write_all_at(&[x[0] ^ 0x55], 4096 + 40).unwrap();
    let e = err(d, &["detail", "a", "b", "c"]);
    assert!(
        e.contains(
            "b: the 1.2 superblock has a bad checksum; if this device is a member, leave it out"
        ),
        "{e}"
    );
    let ex: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(
        &rk(d, &["examine", "--json", "b"]).stdout,
    ))
    .unwrap();
    assert_eq!(ex[0]["checksum_ok"], false);
    // Leaving it out works (degraded).
    ok(d, &["export", "--output", "x.img", "a", "c"]);
    // Truncate c: refused with the sizes named.
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("c"))
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let e = err(d, &["export", "--output", "x.img", "a", "c"]);
    assert!(
        e.contains("c: the data area (data_offset) covers device sectors 2048..16384, but the device has only 8192 sectors: the device was truncated"),
        "{e}"
    );
}

#[test]
fn check_and_repair_offline() {
    use std::os::unix::fs::FileExt;
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    ok(
        d,
        &words("create --level 6 --raid-devices 4 --chunk 64 --size 8M a b c d"),
    );
    std::fs::write(d.join("in"), vec![0x42u8; 3 << 20]).unwrap();
    ok(d, &["import", "--input", "in", "a", "b", "c", "d"]);
    ok(d, &["check", "a", "b", "c", "d"]);
    // Corrupt one byte of member c inside stripe 0.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("c"))
        .unwrap();
    f.write_all_at(&[0x99], 2048 * 512 + 4096 * 3 + 17).unwrap();
    let o = rk(d, &["check", "--json", "a", "b", "c", "d"]);
    assert!(!o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["verdicts"][0]["role"], 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("run `raidkit repair` to fix them"));
    let out = ok(d, &["repair", "a", "b", "c", "d"]);
    assert!(
        out.contains("role 2 (c) is wrong") && out.contains("rewritten"),
        "{out}"
    );
    ok(d, &["check", "a", "b", "c", "d"]);
    let o = rk(d, &["export", "--output", "-", "a", "b", "c", "d"]);
    assert!(o.stdout[..3 << 20].iter().all(|&b| b == 0x42));
}

/// `raidkit repair --help` examples work as printed, on an array whose bad-block logs
/// hold a loss: the plain repair scrubs; `--update no-bbl` refuses, naming the lost range
/// and the way out; `--zero-lost` removes every log and zeroes exactly that range.
#[test]
fn repair_update_no_bbl_offline() {
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    let help = ok(d, &["repair", "--help"]);
    let cmds: Vec<Vec<String>> = help
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("raidkit repair "))
        .map(|l| l.split_whitespace().skip(1).map(String::from).collect())
        .collect();
    assert_eq!(cmds.len(), 3, "{help}");
    let run = |c: &[String]| rk(d, &c.iter().map(String::as_str).collect::<Vec<_>>());
    ok(
        d,
        &words(
            "create --level 5 --raid-devices 3 --chunk 16K --size 8M --bbl \
            d0.img d1.img d2.img",
        ),
    );
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("in"), &data).unwrap();
    ok(
        d,
        &["import", "--input", "in", "d0.img", "d1.img", "d2.img"],
    );
    let o = run(&cmds[0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Stripe 0 (data on roles 0 and 1) is rewritten while neither can be written there:
    // both get bad blocks over their whole chunk, array bytes 0..32768 are lost — and the
    // import says so instead of reporting success.
    let e = err(
        d,
        &words(
            "import --input in fault:weio@2048-2055:d0.img \
            fault:weio@2048-2055:d1.img d2.img",
        ),
    );
    assert!(
        e.contains("write to array bytes 0..32768 failed: the written data has no valid copy"),
        "{e}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(d, &["detail", "--json", "d0.img", "d1.img", "d2.img"])).unwrap();
    let bb: Vec<(u64, String)> = v["bad_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["role"].as_u64().unwrap(), b["ranges"].to_string()))
        .collect();
    assert_eq!(
        bb,
        vec![(0, "[[2048,32]]".into()), (1, "[[2048,32]]".into())]
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(d, &["examine", "--json", "d0.img"])).unwrap();
    assert_eq!(v[0]["bad_block_log"]["sectors"], 8, "{v}");
    let o = run(&cmds[1]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("no member holds valid data for array bytes [0..32768]")
            && e.contains("`raidkit repair --update no-bbl --zero-lost MEMBER...`"),
        "{e}"
    );
    let o = run(&cmds[2]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("the bad-block log is removed from every member")
            && out.contains("array bytes 0..32768 had no valid data and now read as zeros"),
        "{out}"
    );
    for m in ["d0.img", "d1.img", "d2.img"] {
        let v: serde_json::Value = serde_json::from_str(&ok(d, &["examine", "--json", m])).unwrap();
        assert_eq!(v[0]["bad_block_log"], serde_json::Value::Null, "{v}");
    }
    ok(d, &["check", "d0.img", "d1.img", "d2.img"]);
    let o = rk(
        d,
        &["export", "--output", "-", "d0.img", "d1.img", "d2.img"],
    );
    assert!(o.stdout[..32768].iter().all(|&b| b == 0));
    assert!(o.stdout[32768..1 << 20] == data[32768..]);
    // Without logs there is nothing to remove: the second example now succeeds.
    let o = run(&cmds[1]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `scan` names the paths it was given and could not look at (a typo, a glob that
/// matched nothing) instead of skipping them silently.
#[test]
fn scan_says_which_paths_it_could_not_read() {
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    ok(d, &words("create --level 1 --raid-devices 2 --size 4M a b"));
    let o = rk(d, &words("scan a b nonexist"));
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(
            "raidkit: warning: nonexist: No such file or directory (os error 2); skipped"
        ),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("[[array]]"));
    let e = err(d, &words("scan --json /no/such/*.img"));
    assert!(
        e.contains("/no/such/*.img: No such file or directory")
            && e.contains("no MD superblock on the paths given"),
        "{e}"
    );
}

/// Every page the main man page refers to (`raidkit-create(1)` ...) can be printed, with
/// its own options; an unknown command is refused by name.
#[test]
fn man_pages_of_the_commands_exist() {
    let t = TempDir::new("rk-cli").unwrap();
    let d = t.path();
    let main = ok(d, &["man"]);
    let refs: Vec<String> = main
        .lines()
        .filter_map(|l| l.strip_prefix("raidkit\\-")?.strip_suffix("(1)"))
        .map(|n| n.replace("\\-", "-"))
        .collect();
    assert!(
        refs.len() > 20 && refs.iter().any(|r| r == "create"),
        "{main}"
    );
    for r in &refs {
        let page = ok(d, &["man", r]);
        assert!(
            page.contains(&format!(".TH raidkit-{r} 1")),
            "{r}: {}",
            &page[..page.len().min(300)]
        );
    }
    let create = ok(d, &["man", "create"]);
    assert!(create.contains("raid\\-devices"), "{create}");
    let parity = ok(d, &["man", "bench", "parity"]);
    assert!(parity.contains(".TH raidkit-bench-parity 1"), "{parity}");
    let e = err(d, &["man", "nosuch"]);
    assert!(
        e.contains("no command \"nosuch\" under `raidkit`: `raidkit --help` lists them"),
        "{e}"
    );
}
