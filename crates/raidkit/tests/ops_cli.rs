//! Operability through the binary: `examine --bitmap`, names (UUID, `host:name`, 0.90
//! names from the config, `scan`), health metrics and the systemd units.

use raidkit_testkit::proc;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

fn rk(args: &[&str]) -> (bool, String, String) {
    proc::bin_here(env!("CARGO_BIN_EXE_raidkit"), args)
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

use raidkit_testkit::proc::{bin_err, bin_ok, words, Daemon};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

/// `raidkit serve` on a Unix socket in `dir`, control socket in `run`.
fn serve(dir: &Path, run: &Path, tag: &str, args: &[&str]) -> Daemon {
    let mut c = Command::new(RAIDKIT);
    c.current_dir(dir)
        .env("RAIDKIT_RUN_DIR", run)
        .args(["serve", "--socket"])
        .arg(dir.join(format!("{tag}.nbd")))
        .args(args);
    Daemon::spawn(&mut c, |l| l.starts_with("raidkit: serving"), 60)
}

fn create(dir: &Path, args: &[&str]) -> String {
    let mut a = vec![
        "create",
        "--level",
        "1",
        "--raid-devices",
        "2",
        "--size",
        "4M",
    ];
    a.extend_from_slice(args);
    let o = raidkit_testkit::proc::bin_in(RAIDKIT, dir, None, &a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn names_uuids_and_scan() {
    let d = tmpdir("names");
    let run = d.join("run");
    create(&d, &["--name", "dup", "--homehost", "alpha", "a0", "a1"]);
    create(&d, &["--name", "dup", "--homehost", "beta", "b0", "b1"]);
    let note = create(&d, &["-e", "0.90", "--name", "old", "o0", "o1"]);
    assert!(
        note.contains("0.90 superblocks have no name field, so --name \"old\" is not stored"),
        "{note}"
    );
    assert!(note.contains("name = \"old\""), "{note}");
    let uuid_of = |m: &str| {
        let v: Value =
            serde_json::from_str(&bin_ok(RAIDKIT, &d, None, &["examine", "--json", m])).unwrap();
        v[0]["uuid"].as_str().unwrap().to_string()
    };
    let (ua, ub, uo) = (uuid_of("a0"), uuid_of("b0"), uuid_of("o0"));

    // Two servers export one name each: never picked silently.
    let mut sa = serve(&d, &run, "a", &["a0", "a1"]);
    let mut sb = serve(&d, &run, "b", &["b0", "b1"]);
    let e = bin_err(RAIDKIT, &d, Some(&run), &["sync-action", "dup", "check"]);
    assert!(e.contains("\"dup\" names 2 running arrays"), "{e}");
    assert!(
        e.contains(&ua) && e.contains(&ub) && e.contains("beta:dup"),
        "{e}"
    );
    bin_ok(
        RAIDKIT,
        &d,
        Some(&run),
        &["sync-action", "beta:dup", "check"],
    );
    bin_ok(
        RAIDKIT,
        &d,
        Some(&run),
        &["sync-action", &ua.replace(':', ""), "idle"],
    );
    let st: Value =
        serde_json::from_str(&bin_ok(RAIDKIT, &d, Some(&run), &["status", "--json"])).unwrap();
    let mds: Vec<&str> = st
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["md_name"].as_str().unwrap())
        .collect();
    assert!(
        mds.contains(&"alpha:dup") && mds.contains(&"beta:dup"),
        "{st}"
    );
    // The text form tells the two apart too.
    let text = bin_ok(RAIDKIT, &d, Some(&run), &["status"]);
    assert!(
        text.contains("dup (alpha:dup) : active") && text.contains("dup (beta:dup) : active"),
        "{text}"
    );
    sa.stop("TERM");
    sb.stop("TERM");

    // scan writes a config serve reads: the clash renamed, 0.90 by UUID; a name given
    // in the file survives the next scan.
    let cfg = d.join("arrays.toml");
    bin_ok(
        RAIDKIT,
        &d,
        None,
        &[
            "scan",
            "--config",
            cfg.to_str().unwrap(),
            d.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    let short = |u: &str| u.chars().take(8).collect::<String>();
    assert!(
        text.contains(&format!("name = \"dup-{}\"", short(&ua))),
        "{text}"
    );
    assert!(
        text.contains(&format!("name = \"dup-{}\"", short(&ub))),
        "{text}"
    );
    assert!(text.contains(&format!("name = \"{uo}\"")), "{text}");
    assert!(
        text.contains(&format!(
            "members = [\"{}\", \"{}\"]",
            d.join("o0").display(),
            d.join("o1").display()
        )),
        "{text}"
    );
    std::fs::write(
        &cfg,
        text.replace(&format!("name = \"{uo}\""), "name = \"old\""),
    )
    .unwrap();
    bin_ok(
        RAIDKIT,
        &d,
        None,
        &[
            "scan",
            "--config",
            cfg.to_str().unwrap(),
            d.to_str().unwrap(),
        ],
    );
    assert!(std::fs::read_to_string(&cfg)
        .unwrap()
        .contains("name = \"old\""));
    let c = cfg.to_str().unwrap();
    let mut s = Daemon::spawn(
        Command::new(RAIDKIT)
            .current_dir(&d)
            .env("RAIDKIT_RUN_DIR", &run)
            .args([
                "serve",
                "--socket",
                d.join("all.nbd").to_str().unwrap(),
                "--config",
                c,
            ]),
        |l| l.starts_with("raidkit: serving"),
        60,
    );
    let st: Value =
        serde_json::from_str(&bin_ok(RAIDKIT, &d, Some(&run), &["status", "--json"])).unwrap();
    let mut names: Vec<&str> = st
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    names.sort();
    let mut want = vec![
        format!("dup-{}", short(&ua)),
        format!("dup-{}", short(&ub)),
        "old".to_string(),
    ];
    want.sort();
    assert_eq!(names, want);
    bin_ok(RAIDKIT, &d, Some(&run), &["sync-action", &uo, "check"]);
    s.stop("TERM");

    // A config whose uuid no longer matches its members is refused.
    std::fs::write(
        &cfg,
        format!("[[array]]\nname = \"x\"\nuuid = \"{ua}\"\nmembers = [\"b0\", \"b1\"]\n"),
    )
    .unwrap();
    let e = bin_err(
        RAIDKIT,
        &d,
        Some(&run),
        &["serve", "--socket", "x.nbd", "--config", c],
    );
    assert!(e.contains(&format!("hold array {ub}, not {ua}")), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// GET `path` from `addr` and return the body.
fn http_get(addr: &str, path: &str) -> String {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    let (head, body) = s.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// Every `raidkit_...` metric name in `text`.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(k) = text[i..].find("raidkit_") {
        let s = i + k;
        let mut e = s;
        while e < b.len() && (b[e].is_ascii_lowercase() || b[e].is_ascii_digit() || b[e] == b'_') {
            e += 1;
        }
        let before = if s > 0 { b[s - 1] } else { b' ' };
        if !(before.is_ascii_alphanumeric() || before == b'_' || before == b'-' || before == b'/') {
            out.insert(text[s..e].to_string());
        }
        i = e;
    }
    out
}

/// Series present only with network (NBD) members (`raidkit_member_link_*`); the unit tests
/// of `ctl/health.rs` check them from a status with a link.
fn network_only(m: &str) -> bool {
    m.starts_with("raidkit_member_link_")
}

#[test]
fn health_metrics_back_the_shipped_rules_and_dashboard() {
    let d = tmpdir("metrics");
    let run = d.join("run");
    let mut a = vec![
        "create",
        "--level",
        "5",
        "--raid-devices",
        "3",
        "--size",
        "8M",
        "--name",
        "hm",
        "--homehost",
        "none",
    ];
    a.extend(["m0", "m1", "m2"]);
    bin_ok(RAIDKIT, &d, None, &a);
    let mut s = serve(&d, &run, "hm", &["m0", "m1", "m2"]);
    bin_ok(RAIDKIT, &d, Some(&run), &["sync-action", "hm", "check"]);
    raidkit_testkit::proc::wait_for("the check to finish", 60, || {
        let st: Value =
            serde_json::from_str(&bin_ok(RAIDKIT, &d, Some(&run), &["status", "--json"])).unwrap();
        st[0]["last_result"]["action"] == "check"
    });
    let mut p = raidkit_testkit::proc::Killing(
        Command::new(RAIDKIT)
            .current_dir(&d)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(["stats", "--prometheus", "127.0.0.1:0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(p.0.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("raidkit: Prometheus metrics on http://")
        .and_then(|l| l.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let body = http_get(&addr, "/metrics");
    for l in [
        "raidkit_md_state{device=\"hm\",array=\"hm\",state=\"active\"} 1",
        "raidkit_md_disks{device=\"hm\",array=\"hm\",state=\"active\"} 3",
        "raidkit_md_disks_required{device=\"hm\",array=\"hm\"} 3",
        "raidkit_mismatch_bytes{array=\"hm\",action=\"check\"} 0",
        "raidkit_array_degraded{array=\"hm\"} 0",
    ] {
        assert!(body.lines().any(|x| x == l), "missing {l}:\n{body}");
    }
    let have = metric_names(&body);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rules = std::fs::read_to_string(root.join("docs/prometheus/raidkit-rules.yml")).unwrap();
    let dash = std::fs::read_to_string(root.join("docs/grafana/raidkit-dashboard.json")).unwrap();
    let dv: Value = serde_json::from_str(&dash).unwrap();
    let mut exprs = String::new();
    for p in dv["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push_str(t["expr"].as_str().unwrap());
            exprs.push('\n');
        }
    }
    for (what, used) in [
        ("rules", metric_names(&rules)),
        ("dashboard", metric_names(&exprs)),
    ] {
        assert!(used.len() > 5, "{what}: {used:?}");
        for m in used.iter().filter(|m| !network_only(m)) {
            assert!(
                have.contains(m),
                "{what} uses {m}, which the endpoint does not export"
            );
        }
    }
    if let Some(promtool) = raidkit_testkit::proc::which("promtool") {
        let o = Command::new(promtool)
            .args(["check", "rules"])
            .arg(root.join("docs/prometheus/raidkit-rules.yml"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    } else {
        println!(
            "skip promtool check: promtool not installed (scripts/deps.sh installs prometheus)"
        );
    }

    // A failed member shows in the md names and in raidkit's own.
    bin_ok(RAIDKIT, &d, Some(&run), &["manage", "hm", "--fail", "m1"]);
    let body = http_get(&addr, "/metrics");
    for l in [
        "raidkit_md_disks{device=\"hm\",array=\"hm\",state=\"active\"} 2",
        "raidkit_md_disks{device=\"hm\",array=\"hm\",state=\"failed\"} 1",
        "raidkit_array_degraded{array=\"hm\"} 1",
    ] {
        assert!(body.lines().any(|x| x == l), "missing {l}:\n{body}");
    }
    assert!(
        body.lines().any(
            |x| x.starts_with("raidkit_member_state{array=\"hm\",device=\"")
                && x.contains("m1\",role=\"1\",state=\"failed\"} 1")
        ),
        "{body}"
    );
    drop(p);
    s.stop("TERM");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn units_install_and_verify() {
    let d = tmpdir("units");
    let units = d.join("units");
    let conf = d.join("etc");
    bin_ok(
        RAIDKIT,
        &d,
        None,
        &[
            "install-units",
            "--no-reload",
            "--dir",
            units.to_str().unwrap(),
            "--config-dir",
            conf.to_str().unwrap(),
        ],
    );
    assert!(conf.is_dir());
    let serve = std::fs::read_to_string(units.join("raidkit-serve@.service")).unwrap();
    assert!(
        serve.contains(&format!(
            "ExecStart={RAIDKIT} serve --config /etc/raidkit/%i.toml"
        )),
        "{serve}"
    );
    assert!(
        serve.contains("Type=notify") && serve.contains("DeviceAllow=block-* rw"),
        "{serve}"
    );
    assert!(
        !serve.contains("PrivateDevices=yes"),
        "block devices must stay reachable"
    );
    let mon = std::fs::read_to_string(units.join("raidkit-monitor.service")).unwrap();
    assert!(
        mon.contains(&format!(
            "ExecStart={RAIDKIT} monitor $RAIDKIT_MONITOR_ARGS"
        )),
        "{mon}"
    );
    match raidkit_testkit::proc::which("systemd-analyze") {
        Some(sa) => {
            // An instance of the template, as systemd would load it.
            std::fs::copy(
                units.join("raidkit-serve@.service"),
                units.join("raidkit-serve@vol.service"),
            )
            .unwrap();
            for u in ["raidkit-serve@vol.service", "raidkit-monitor.service"] {
                let o = Command::new(&sa)
                    .arg("verify")
                    .arg(units.join(u))
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(
                    o.status.success() && !err.contains(u),
                    "systemd-analyze verify {u}: {err}"
                );
            }
        }
        None => println!(
            "skip systemd-analyze verify: not installed (scripts/deps.sh installs systemd)"
        ),
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn serve_notifies_systemd_and_errors_carry_journal_levels() {
    use std::os::unix::fs::MetadataExt;
    let d = tmpdir("notify");
    let run = d.join("run");
    bin_ok(
        RAIDKIT,
        &d,
        None,
        &words("create --level 1 --raid-devices 2 --size 4M --name sd m0 m1"),
    );
    let sock = d.join("notify");
    let l = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
    l.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut c = Command::new(RAIDKIT);
    c.current_dir(&d)
        .env("RAIDKIT_RUN_DIR", &run)
        .env("NOTIFY_SOCKET", &sock)
        .args(["serve", "--socket", "sd.nbd", "m0", "m1"]);
    let mut s = Daemon::spawn(&mut c, |l| l.starts_with("raidkit: serving"), 60);
    let mut b = [0u8; 256];
    let n = l.recv(&mut b).unwrap();
    let msg = String::from_utf8_lossy(&b[..n]).to_string();
    assert!(msg.starts_with("READY=1\nSTATUS=serving sd"), "{msg}");
    s.signal("TERM");
    let n = l.recv(&mut b).unwrap();
    assert_eq!(&b[..n], b"STOPPING=1");
    s.stop("TERM");

    // Under journald (JOURNAL_STREAM names stderr), errors carry the <3> level prefix.
    let log = d.join("journal");
    let f = std::fs::File::create(&log).unwrap();
    let md = f.metadata().unwrap();
    let o = Command::new(RAIDKIT)
        .current_dir(&d)
        .env("RAIDKIT_RUN_DIR", &run)
        .env("JOURNAL_STREAM", format!("{}:{}", md.dev(), md.ino()))
        .args(["sync-action", "nosuch", "check"])
        .stderr(f)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.starts_with("<3>raidkit: error: no running array named \"nosuch\""),
        "{text}"
    );
    let o = rk(&["sync-action", "nosuch", "check"]);
    assert!(o.2.starts_with("raidkit: error:"), "{}", o.2);
    let _ = std::fs::remove_dir_all(&d);
}
