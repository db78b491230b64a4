//! End-to-end: `raidkit serve` on real RAID arrays (sparse files), driven by real NBD
//! clients. A missing client tool prints `SKIP` and the part that needs it is skipped;
//! install them with tests/nbd/install-deps.sh.
//!
//! `RAIDKIT_SERVE_BIN` may name another binary that provides `serve` (development aid).

use raidkit_testkit::proc::{self, Daemon};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
/// 4 × 32 MiB members, RAID5, 64 KiB chunks: 3 × (32 MiB − 1 MiB data offset).
const ARRAY_BYTES: u64 = 97_517_568;

fn tempdir(tag: &str) -> TempDir {
    TempDir::new(&format!("rk-serve-{tag}")).expect("create a temporary directory")
}

fn tool(name: &str) -> Option<PathBuf> {
    proc::system_tool(name, "nbd_serve")
}

fn run(prog: &Path, args: &[&str]) -> Output {
    proc::run_system(prog, args)
}

fn ok(prog: &Path, args: &[&str]) -> String {
    proc::run_system_ok(prog, args)
}

fn raidkit(dir: &Path, args: &[&str]) -> Output {
    Command::new(RAIDKIT)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn create(dir: &Path, level: &str, names: &[&str], extra: &[&str]) {
    let n = names.len().to_string();
    let mut args = vec![
        "create",
        "--level",
        level,
        "--raid-devices",
        &n,
        "--size",
        "32M",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(names);
    let out = raidkit(dir, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// States of every member from `raidkit examine --json`.
fn states(dir: &Path, names: &[&str]) -> Vec<String> {
    let mut args = vec!["examine", "--json"];
    args.extend_from_slice(names);
    let out = raidkit(dir, &args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("\"state\": \""))
        .map(|s| s.trim_end_matches([',', '"']).to_string())
        .collect()
}

fn serve(dir: &Path, args: &[&str]) -> Daemon {
    let mut cmd = match std::env::var_os("RAIDKIT_SERVE_BIN") {
        Some(b) => Command::new(b),
        None => Command::new(RAIDKIT),
    };
    cmd.current_dir(dir).arg("serve").args(args);
    // Ready when the last start-up line is printed.
    Daemon::spawn(&mut cmd, |l| l.starts_with("raidkit: serving;"), 30)
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    proc::xorshift_bytes(n, seed)
}

fn export(dir: &Path, names: &[&str]) -> Vec<u8> {
    let out_file = dir.join("export.img");
    let mut args = vec!["export", "--output", out_file.to_str().unwrap()];
    args.extend_from_slice(names);
    let out = raidkit(dir, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(out_file).unwrap()
}

const M: [&str; 4] = ["a", "b", "c", "d"];

#[test]
fn raid5_served_to_real_clients_then_sigterm_leaves_it_clean() {
    let t = tempdir("r5");
    let dir = t.path();
    create(dir, "5", &M, &["--chunk", "64K", "--name", "vol"]);
    let sock = dir.join("vol.sock");
    let mut s = serve(
        dir,
        &[
            "--socket",
            sock.to_str().unwrap(),
            "--export",
            "vol",
            "a",
            "b",
            "c",
            "d",
        ],
    );
    let uri = format!("nbd+unix:///vol?socket={}", sock.display());
    // Exact client commands are printed.
    assert!(
        s.stdout.contains(&format!("  nbdinfo '{uri}'")),
        "{:?}",
        s.stdout
    );
    assert!(s.stdout.contains(&format!("  qemu-img info '{uri}'")));
    assert!(s.stdout.contains(&format!(
        "  nbd-client -unix {} -N vol /dev/nbd0",
        sock.display()
    )));
    assert_eq!(
        s.line_with("raidkit: listening on unix socket "),
        sock.display().to_string()
    );
    let mut expect = vec![0u8; ARRAY_BYTES as usize];

    if let Some(nbdinfo) = tool("nbdinfo") {
        let text = ok(&nbdinfo, &["--json", &uri]);
        for want in [
            format!("\"export-size\": {ARRAY_BYTES}"),
            "\"block_size_minimum\": 512".into(),
            "\"block_size_preferred\": 65536".into(),
            "\"block_size_maximum\": 33554432".into(),
            "\"is_read_only\": false".into(),
            "\"can_multi_conn\": true".into(),
            "\"can_flush\": true".into(),
            "\"can_fua\": true".into(),
            "\"can_trim\": true".into(),
            "\"can_zero\": true".into(),
            "\"can_fast_zero\": true".into(),
        ] {
            assert!(text.contains(&want), "missing {want} in {text}");
        }
        assert!(text.contains("raidkit raid5 array"), "{text}");
    }
    if let (Some(qio), Some(qimg)) = (tool("qemu-io"), tool("qemu-img")) {
        let info = ok(&qimg, &["info", &uri]);
        assert!(info.contains(&format!("({ARRAY_BYTES} bytes)")), "{info}");
        // Odd offsets straddling chunk (64 KiB) and stripe (192 KiB) boundaries.
        let out = ok(
            &qio,
            &[
                "-f",
                "raw",
                &uri,
                "-c",
                "write -P 0x5a 65535 131075",
                "-c",
                "write -P 0xc3 196607 3",
                "-c",
                "read -P 0x5a 65535 131072",
                "-c",
                "read -P 0xc3 196607 3",
                "-c",
                "read -P 0 196610 1",
            ],
        );
        assert!(!out.contains("fail"), "{out}");
        expect[65535..65535 + 131075].fill(0x5a);
        expect[196607..196610].fill(0xc3);
        // qemu-img convert in (over those writes), compare, convert out.
        let src = dir.join("src.img");
        let data = pattern(8 << 20, 3);
        std::fs::write(&src, &data).unwrap();
        let srcs = src.to_str().unwrap();
        ok(
            &qimg,
            &["convert", "-n", "-f", "raw", "-O", "raw", srcs, &uri],
        );
        expect[..8 << 20].copy_from_slice(&data);
        ok(&qimg, &["compare", "-f", "raw", "-F", "raw", srcs, &uri]);
        let dst = dir.join("dst.img");
        ok(
            &qimg,
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "raw",
                &uri,
                dst.to_str().unwrap(),
            ],
        );
        assert!(std::fs::read(&dst).unwrap() == expect);
        std::fs::remove_file(&dst).unwrap();
    }
    if let Some(nbdcopy) = tool("nbdcopy") {
        // 16 MiB at offset 0 over 4 connections (multi-conn), then everything back out.
        let src = dir.join("copy.img");
        let data = pattern(16 << 20, 11);
        std::fs::write(&src, &data).unwrap();
        ok(
            &nbdcopy,
            &[
                "--connections=4",
                "--requests=8",
                "--flush",
                src.to_str().unwrap(),
                &uri,
            ],
        );
        expect[..16 << 20].copy_from_slice(&data);
        let dst = dir.join("copy-out.img");
        ok(&nbdcopy, &["--connections=4", &uri, dst.to_str().unwrap()]);
        assert!(std::fs::read(&dst).unwrap() == expect);
        std::fs::remove_file(&dst).unwrap();
    }
    if let Some(fio) = tool("fio") {
        if String::from_utf8_lossy(&run(&fio, &["--enghelp"]).stdout).contains("nbd") {
            let out = ok(
                &fio,
                &[
                    "--name=raid5",
                    "--ioengine=nbd",
                    &format!("--uri={uri}"),
                    "--rw=randwrite",
                    "--bs=4k",
                    "--offset=32M",
                    "--size=8M",
                    "--iodepth=16",
                    "--verify=crc32c",
                    "--do_verify=1",
                    "--output-format=terse",
                ],
            );
            let f: Vec<&str> = out.lines().last().unwrap_or("").split(';').collect();
            assert_eq!(f.get(4), Some(&"0"), "fio errors: {out}");
            // fio's data is random: take it from the array for the final comparison.
            if let Some(nbdcopy) = tool("nbdcopy") {
                let dst = dir.join("fio.img");
                ok(&nbdcopy, &[&uri, dst.to_str().unwrap()]);
                let got = std::fs::read(&dst).unwrap();
                expect[32 << 20..40 << 20].copy_from_slice(&got[32 << 20..40 << 20]);
                std::fs::remove_file(&dst).unwrap();
            }
        } else {
            eprintln!("SKIP: fio without the nbd engine");
        }
    }
    if let Some(nbdsh) = tool("nbdsh") {
        let script = format!(
            r#"
def err(f):
    try:
        f()
        return "ok"
    except nbd.Error as e:
        return e.errno
def chk(got, want):
    import inspect
    if got != want:
        raise Exception("line %d: got %r want %r" % (inspect.currentframe().f_back.f_lineno, got, want))
h.set_strict_mode(0)
h.connect_uri({uri:?})
S = h.get_size()
chk(S, {ARRAY_BYTES})
chk(err(lambda: h.pread(4096, S - 4095)), "EINVAL")
chk(err(lambda: h.pread(1, 2**63)), "EINVAL")
chk(err(lambda: h.pwrite(b"x" * 4096, S - 512)), "ENOSPC")
chk(err(lambda: h.zero(1 << 20, S - 4096)), "ENOSPC")
chk(err(lambda: h.pread(32 * 1048576 + 512, 0)), "EINVAL")
chk(err(lambda: h.pwrite(bytes(32 * 1048576 + 512), 0)), "EINVAL")
chk(err(lambda: h.cache(512, 0)), "EINVAL")
chk(err(lambda: h.zero(65536, 0, nbd.CMD_FLAG_FAST_ZERO)), "ENOTSUP")
chk(h.pread(0, S), b"")
h.pwrite(b"", 0)
h.pwrite(b"end!" * 128, S - 512, nbd.CMD_FLAG_FUA)
h.zero(3 << 20, 50 << 20)
h.trim(1 << 20, 60 << 20)
h.pwrite(b"\xee" * 1000, (60 << 20) + 7)
h.flush()
chk(h.pread(4, S - 4), b"end!")
h.shutdown()
print("ok")
"#
        );
        assert_eq!(ok(&nbdsh, &["-c", &script]).trim(), "ok");
        let n = expect.len();
        for (i, b) in b"end!".repeat(128).into_iter().enumerate() {
            expect[n - 512 + i] = b;
        }
        expect[(50 << 20)..(53 << 20)].fill(0);
        expect[(60 << 20) + 7..(60 << 20) + 1007].fill(0xee);
    }
    // Writes have been idle > 1 s: marked clean while still serving.
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(states(dir, &M), vec!["clean"; 4]);
    // A last write right before SIGTERM.
    if let Some(nbdsh) = tool("nbdsh") {
        let script =
            format!("h.connect_uri({uri:?})\nh.pwrite(b'LAST' * 1024, 70 << 20)\nh.shutdown()\n");
        ok(&nbdsh, &["-c", &script]);
        expect[70 << 20..(70 << 20) + 4096].copy_from_slice(&b"LAST".repeat(1024));
    }
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("SIGTERM: finishing in-flight requests"),
        "{err}"
    );
    assert!(!sock.exists());
    assert_eq!(states(dir, &M), vec!["clean"; 4]);
    assert!(
        export(dir, &M) == expect,
        "array contents differ from what was written"
    );
}

#[test]
fn unclean_stop_is_resynced_and_read_only_serves() {
    let t = tempdir("dirty");
    let dir = t.path();
    create(dir, "5", &M, &["--chunk", "64K", "--name", "d"]);
    let Some(nbdsh) = tool("nbdsh") else { return };
    let sock = dir.join("d.sock");
    let ss = sock.to_str().unwrap();
    let mut s = serve(dir, &["--socket", ss, "a", "b", "c", "d"]);
    // Default export name: the array name without the home host.
    let uri = format!("nbd+unix:///d?socket={ss}");
    ok(
        &nbdsh,
        &["-c", &format!("h.connect_uri({uri:?})\nh.pwrite(b'\\x77' * 65536, 12288)\nh.flush()\nh.shutdown()\n")],
    );
    // Killed hard while dirty.
    let (code, _) = s.stop("KILL");
    assert_eq!(code, None);
    assert_eq!(states(dir, &M), vec!["active"; 4]);
    // Read-only serving does not resync and does not write.
    let mut s = serve(dir, &["--socket", ss, "--read-only", "a", "b", "c", "d"]);
    let script = format!(
        "h.set_strict_mode(0)\nh.connect_uri({uri:?})\nassert h.is_read_only()\nassert h.pread(4, 12288) == b'\\x77' * 4\ntry:\n    h.pwrite(b'x' * 512, 0)\n    raise Exception('write allowed')\nexcept nbd.Error as e:\n    assert e.errno == 'EPERM', e.errno\nh.shutdown()\n"
    );
    ok(&nbdsh, &["-c", &script]);
    let (code, err) = s.stop("INT");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(states(dir, &M), vec!["active"; 4]);
    // Writable serving resyncs first.
    let mut s = serve(dir, &["--socket", ss, "a", "b", "c", "d"]);
    let (code, err) = s.stop("INT");
    assert_eq!(code, Some(0));
    assert!(
        err.contains("was not stopped cleanly: resyncing before accepting writes"),
        "{err}"
    );
    assert_eq!(states(dir, &M), vec!["clean"; 4]);
    assert!(export(dir, &M)[12288..12288 + 65536]
        .iter()
        .all(|&b| b == 0x77));
}

#[test]
fn config_file_tcp_and_tls_psk() {
    let t = tempdir("cfg");
    let dir = t.path();
    create(dir, "1", &["m0", "m1"], &["--name", "mirror"]);
    create(
        dir,
        "0",
        &["s0", "s1"],
        &["--chunk", "128K", "--name", "stripe"],
    );
    let psk = dir.join("keys.psk");
    std::fs::write(&psk, "alice:00112233445566778899aabbccddeeff\n").unwrap();
    std::fs::write(
        dir.join("serve.toml"),
        format!(
            "# two arrays\nlisten = \"127.0.0.1:0\"\ntls_psk = {:?}\ntls_required = true\n\n[[array]]\nname = \"mirror\"\nmembers = [\"m0\", \"m1\"]\nread_only = true\n\n[[array]]\nname = \"stripe\"\nmembers = [\n  \"s0\",\n  \"s1\",\n]\ndescription = \"fast scratch\"\n",
            psk.display().to_string()
        ),
    )
    .unwrap();
    let mut s = serve(dir, &["--config", "serve.toml"]);
    let addr = s.line_with("raidkit: listening on tcp ");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let port = addr.rsplit(':').next().unwrap();
    assert!(s.stdout.contains(&format!(
        "  nbdinfo 'nbds://alice@{addr}/stripe?tls-psk-file={}'",
        psk.display()
    )));
    if let Some(nbdinfo) = tool("nbdinfo") {
        let tls = |name: &str| {
            format!(
                "nbds://alice@127.0.0.1:{port}/{name}?tls-psk-file={}",
                psk.display()
            )
        };
        let text = ok(&nbdinfo, &["--json", &tls("mirror")]);
        assert!(
            text.contains("\"TLS\": true") && text.contains("\"is_read_only\": true"),
            "{text}"
        );
        // RAID1: 32 MiB members minus the 1 MiB data offset.
        assert!(text.contains("\"export-size\": 32505856"), "{text}");
        let text = ok(&nbdinfo, &["--json", &tls("stripe")]);
        assert!(text.contains("\"is_read_only\": false"), "{text}");
        assert!(text.contains("\"description\": \"fast scratch\""), "{text}");
        assert!(text.contains("\"block_size_preferred\": 262144"), "{text}");
        let list = ok(&nbdinfo, &["--list", "--json", &tls("")]);
        assert!(
            list.contains("\"mirror\"") && list.contains("\"stripe\""),
            "{list}"
        );
        // Plaintext refused.
        let out = run(
            &nbdinfo,
            &["--size", &format!("nbd://127.0.0.1:{port}/stripe")],
        );
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("TLS"));
    }
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(states(dir, &["m0", "m1", "s0", "s1"]), vec!["clean"; 4]);
    // Bad configurations are refused with a message.
    std::fs::write(dir.join("bad.toml"), "[[array]]\nname = \"x\"\n").unwrap();
    let mut cmd = match std::env::var_os("RAIDKIT_SERVE_BIN") {
        Some(b) => Command::new(b),
        None => Command::new(RAIDKIT),
    };
    let out = cmd
        .current_dir(dir)
        .args(["serve", "--config", "bad.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("members = [\"...\", ...] is required"));
}

/// `serve` with a config of a socket and `arrays` (its `[[array]]` sections), which it
/// must refuse (exit 1, within 30 s): what it said on stderr.
fn serve_refused(dir: &Path, arrays: &str) -> String {
    let config = format!("socket = \"nbd.sock\"\n{arrays}");
    std::fs::write(dir.join("twice.toml"), config).unwrap();
    let out = proc::run_timeout(
        Command::new(RAIDKIT)
            .current_dir(dir)
            .env("RAIDKIT_RUN_DIR", dir.join("run"))
            .args(["serve", "--config", "twice.toml"]),
        30,
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    err
}

/// Two `[[array]]` sections over the same members (through a symlink, under other
/// names) were both served: two arrays in one process writing one set of disks, each
/// with its own cache and superblock updates. Now refused before anything is opened.
#[test]
fn config_arrays_sharing_a_member_are_refused() {
    let t = tempdir("share");
    let dir = t.path();
    create(dir, "1", &["m0", "m1"], &["--name", "mirror"]);
    std::os::unix::fs::symlink("m1", dir.join("link1")).unwrap();
    // (It served both before: killed after 30 s, the test fails.)
    let err = serve_refused(
        dir,
        "[[array]]\nname = \"x\"\nmembers = [\"m0\", \"m1\"]\n[[array]]\nname = \"y\"\nmembers = [\"link1\", \"m0\"]\n",
    );
    assert_eq!(
        err,
        "raidkit: error: m1 (array #1) and link1 (array #2) are the same device: a member belongs to one array only (read-only entries too)\n"
    );
    assert_eq!(states(dir, &["m0", "m1"]), vec!["clean"; 2]);
}

/// Paths that do not exist are matched as the engine matches a member list's (the same
/// name in the same directory), not by their text: `gone` and `./gone` are one member.
#[test]
fn config_arrays_sharing_a_missing_member_are_refused() {
    let t = tempdir("share-missing");
    let dir = t.path();
    let err = serve_refused(
        dir,
        "[[array]]\nname = \"x\"\nmembers = [\"gone\"]\n[[array]]\nname = \"y\"\nread_only = true\nmembers = [\"./gone\"]\n",
    );
    assert_eq!(
        err,
        "raidkit: error: gone (array #1) and ./gone (array #2) are the same device: a member belongs to one array only (read-only entries too)\n"
    );
}
