//! Real NBD clients (libnbd's nbdinfo/nbdsh/nbdcopy, qemu-img/qemu-io, fio) against the
//! server with an in-memory backend. A missing tool prints `SKIP` and passes; install
//! them with tests/nbd/install-deps.sh.

use raidkit_nbd::{Backend, Export, Listen, MemBackend, Server, ServerConfig, TlsConfig};
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

const SIZE: usize = 4 << 20;

fn tempdir(tag: &str) -> TempDir {
    TempDir::new(&format!("rk-nbdc-{tag}")).expect("create a temporary directory")
}

/// The tool's path, or None after printing SKIP.
fn tool(name: &str, test: &str) -> Option<PathBuf> {
    proc::system_tool(name, test)
}

fn run(prog: &Path, args: &[&str]) -> Output {
    proc::run_system(prog, args)
}

struct Srv {
    _dir: TempDir,
    dir: PathBuf,
    sock: PathBuf,
    mem: Arc<MemBackend>,
    handle: raidkit_nbd::ShutdownHandle,
    join: Option<std::thread::JoinHandle<Result<(), raidkit_nbd::NbdError>>>,
}

impl Srv {
    fn start(tag: &str, tls: Option<TlsConfig>, tls_required: bool) -> Srv {
        let d = tempdir(tag);
        let dir = d.path().to_path_buf();
        let sock = dir.join("nbd.sock");
        let mem = Arc::new(
            MemBackend::new(SIZE, false)
                .with_block_sizes(512, 65536, 1 << 20)
                .with_fast_zero(false),
        );
        let ro = Arc::new(MemBackend::new(1 << 20, true));
        let mut cfg = ServerConfig::new(vec![
            Export {
                name: "disk".into(),
                description: "test disk".into(),
                backend: mem.clone() as Arc<dyn Backend>,
            },
            Export {
                name: "ro".into(),
                description: String::new(),
                backend: ro as Arc<dyn Backend>,
            },
        ]);
        cfg.tls = tls;
        cfg.tls_required = tls_required;
        let (handle, join) = Server::bind(cfg, &Listen::Unix(sock.clone()))
            .unwrap()
            .spawn();
        Srv {
            _dir: d,
            dir,
            sock,
            mem,
            handle,
            join: Some(join),
        }
    }
    fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    proc::xorshift_bytes(n, seed)
}

#[test]
fn nbdinfo_reports_size_flags_block_sizes() {
    let Some(nbdinfo) = tool("nbdinfo", "nbdinfo") else {
        return;
    };
    let s = Srv::start("info", None, false);
    let out = run(&nbdinfo, &["--json", &s.uri("disk")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "\"protocol\": \"newstyle-fixed\"",
        "\"structured\": true",
        "\"export-name\": \"disk\"",
        "\"description\": \"test disk\"",
        "\"is_read_only\": false",
        "\"can_flush\": true",
        "\"can_fua\": true",
        "\"can_trim\": true",
        "\"can_zero\": true",
        "\"can_fast_zero\": true",
        "\"can_multi_conn\": true",
        "\"can_cache\": false",
        "\"block_size_minimum\": 512",
        "\"block_size_preferred\": 65536",
        "\"block_size_maximum\": 1048576",
        "\"export-size\": 4194304",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    let out = run(&nbdinfo, &["--json", &s.uri("ro")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"is_read_only\": true"), "{text}");
    assert!(text.contains("\"can_trim\": false"), "{text}");
    let out = run(&nbdinfo, &["--list", "--json", &s.uri("")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"export-name\": \"disk\"") && text.contains("\"export-name\": \"ro\""));
    let out = run(&nbdinfo, &["--size", &s.uri("nope")]);
    assert!(!out.status.success(), "unknown export must fail");
}

#[test]
fn nbdsh_edge_cases_and_hostile_requests() {
    let Some(nbdsh) = tool("nbdsh", "nbdsh") else {
        return;
    };
    let s = Srv::start("sh", None, false);
    let script = format!(
        r#"
import errno  # noqa
def err(f):
    try:
        f()
        return 0
    except nbd.Error as e:
        return e.errno
def chk(got, want):
    import inspect
    if got != want:
        raise Exception("line %d: got %r want %r" % (inspect.currentframe().f_back.f_lineno, got, want))
h.set_strict_mode(0)
h.connect_uri({uri:?})
S = {size}
assert h.get_size() == S
assert h.get_block_size(nbd.SIZE_MAXIMUM) == 1048576
chk(err(lambda: h.pread(512, S)), "EINVAL")
chk(err(lambda: h.pread(512, S - 511)), "EINVAL")
chk(err(lambda: h.pread(512, 2**64 - 256)), "EINVAL")
chk(err(lambda: h.pwrite(b"xy", S - 1)), "ENOSPC")
chk(err(lambda: h.zero(4096, S - 1)), "ENOSPC")
chk(err(lambda: h.trim(2, S - 1)), "EINVAL")
chk(err(lambda: h.pread(2 * 1048576, 0)), "EINVAL")
chk(err(lambda: h.pwrite(b"z" * (2 * 1048576), 0)), "EINVAL")
chk(err(lambda: h.cache(4096, 0)), "EINVAL")
chk(err(lambda: h.zero(4096, 0, nbd.CMD_FLAG_FAST_ZERO)), "ENOTSUP")
assert h.pread(0, S) == b""
assert h.pread(0, 0) == b""
h.pwrite(b"", S)
h.pwrite(b"hello", 4093, nbd.CMD_FLAG_FUA)
assert h.pread(5, 4093) == b"hello"
h.zero(3, 4094, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(5, 4093) == b"h\0\0\0o"
h.trim(4096, 0)
h.flush()
assert h.pread(5, 4093) == b"h\0\0\0o", "trim keeps data"
h.shutdown()

r = nbd.NBD()
r.set_strict_mode(0)
r.connect_uri({ro:?})
assert r.is_read_only()
chk(err(lambda: r.pwrite(b"x" * 512, 0)), "EPERM")
chk(err(lambda: r.zero(512, 0)), "EPERM")
chk(err(lambda: r.trim(512, 0)), "EPERM")
r.flush()
assert r.pread(512, 0) == bytes(512)
r.shutdown()
print("nbdsh-ok")
"#,
        uri = s.uri("disk"),
        ro = s.uri("ro"),
        size = SIZE
    );
    let out = run(&nbdsh, &["-c", &script]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "nbdsh-ok");
    let m = s.mem.contents();
    assert_eq!(&m[4093..4098], b"h\0\0\0o");
}

#[test]
fn qemu_io_and_qemu_img() {
    let (Some(qio), Some(qimg)) = (tool("qemu-io", "qemu"), tool("qemu-img", "qemu")) else {
        return;
    };
    let s = Srv::start("qemu", None, false);
    let uri = s.uri("disk");
    let out = run(&qimg, &["info", &uri]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("virtual size: 4 MiB (4194304 bytes)"),
        "{text}"
    );
    // Odd offsets and lengths.
    let out = run(
        &qio,
        &[
            "-f",
            "raw",
            &uri,
            "-c",
            "write -P 0xa5 1001 3001",
            "-c",
            "write -P 0x3c 65535 70001",
            "-c",
            "read -P 0xa5 1001 3001",
            "-c",
            "read -P 0x3c 65535 70001",
            "-c",
            "read -P 0 0 1001",
            "-c",
            "flush",
        ],
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("fail") && text.matches("read ").count() == 3,
        "{text}"
    );
    let m = s.mem.contents();
    assert!(m[1001..4002].iter().all(|&b| b == 0xa5) && m[1000] == 0 && m[4002] == 0);
    assert!(m[65535..135536].iter().all(|&b| b == 0x3c) && m[135536] == 0);
    // convert in and out, compare.
    let src = s.dir.join("src.img");
    let data = pattern(SIZE, 7);
    std::fs::write(&src, &data).unwrap();
    let srcs = src.to_str().unwrap();
    assert!(run(
        &qimg,
        &["convert", "-n", "-f", "raw", "-O", "raw", srcs, &uri]
    )
    .status
    .success());
    assert!(s.mem.contents() == data);
    assert!(
        run(&qimg, &["compare", "-f", "raw", "-F", "raw", srcs, &uri])
            .status
            .success()
    );
    let dst = s.dir.join("dst.img");
    assert!(run(
        &qimg,
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            dst.to_str().unwrap()
        ]
    )
    .status
    .success());
    assert!(std::fs::read(&dst).unwrap() == data);
}

#[test]
fn nbdcopy_multi_conn_round_trip() {
    let Some(nbdcopy) = tool("nbdcopy", "nbdcopy") else {
        return;
    };
    let s = Srv::start("copy", None, false);
    let src = s.dir.join("src.img");
    let data = pattern(SIZE, 99);
    std::fs::write(&src, &data).unwrap();
    let uri = s.uri("disk");
    let out = run(
        &nbdcopy,
        &[
            "--connections=4",
            "--requests=16",
            "--flush",
            src.to_str().unwrap(),
            &uri,
        ],
    );
    assert!(out.status.success());
    assert!(s.mem.contents() == data);
    let dst = s.dir.join("dst.img");
    let out = run(&nbdcopy, &["--connections=4", &uri, dst.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(std::fs::read(&dst).unwrap() == data);
}

#[test]
fn fio_nbd_engine_verify() {
    let Some(fio) = tool("fio", "fio") else {
        return;
    };
    let help = run(&fio, &["--enghelp"]);
    if !String::from_utf8_lossy(&help.stdout).contains("nbd") {
        eprintln!("SKIP fio: no nbd engine");
        return;
    }
    let s = Srv::start("fio", None, false);
    let uri = s.uri("disk");
    let out = run(
        &fio,
        &[
            "--name=nbdverify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--size=4M",
            "--iodepth=16",
            "--verify=crc32c",
            "--do_verify=1",
            "--output-format=terse",
        ],
    );
    assert!(out.status.success());
    // terse field 5 is the error count.
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.lines().last().unwrap_or("").split(';').collect();
    assert_eq!(fields.get(4), Some(&"0"), "{text}");
}

#[test]
fn tls_psk_required() {
    let Some(nbdinfo) = tool("nbdinfo", "tls") else {
        return;
    };
    let d = tempdir("psk");
    let psk = d.path().join("keys.psk");
    std::fs::write(&psk, "alice:0123456789abcdef0123456789abcdef\n").unwrap();
    let tls = TlsConfig::from_psk_file(&psk).unwrap();
    let s = Srv::start("tls", Some(tls), true);
    let uri = format!(
        "nbds+unix://alice@/disk?socket={}&tls-psk-file={}",
        s.sock.display(),
        psk.display()
    );
    let out = run(&nbdinfo, &["--json", &uri]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"TLS\": true") && text.contains("\"export-size\": 4194304"),
        "{text}"
    );
    // Plaintext is refused (NBD_REP_ERR_TLS_REQD), a wrong key fails the handshake.
    let out = run(&nbdinfo, &["--size", &s.uri("disk")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS"));
    let bad = d.path().join("bad.psk");
    std::fs::write(&bad, "alice:ffffffffffffffffffffffffffffffff\n").unwrap();
    let uri_bad = format!(
        "nbds+unix://alice@/disk?socket={}&tls-psk-file={}",
        s.sock.display(),
        bad.display()
    );
    assert!(!run(&nbdinfo, &["--size", &uri_bad]).status.success());
    // Data through TLS.
    if let Some(nbdsh) = tool("nbdsh", "tls") {
        let script = format!(
            "h.set_uri_allow_local_file(True)\nh.connect_uri({uri:?})\nh.pwrite(b'tls!' * 1024, 8192)\nassert h.pread(4096, 8192) == b'tls!' * 1024\nh.flush()\nh.shutdown()\n"
        );
        assert!(run(&nbdsh, &["-c", &script]).status.success());
        assert_eq!(&s.mem.contents()[8192..8196], b"tls!");
    }
}

#[test]
fn tls_x509_certificate() {
    let (Some(nbdsh), Some(openssl)) = (tool("nbdsh", "x509"), tool("openssl", "x509")) else {
        return;
    };
    let d = tempdir("x509");
    let (cert, key) = (
        d.path().join("ca-cert.pem"),
        d.path().join("server-key.pem"),
    );
    proc::self_signed_cert(&openssl, &cert, &key, &[]);
    let tls = TlsConfig::from_x509(&cert, &key).unwrap();
    assert!(TlsConfig::from_x509(&cert, &cert).is_err());
    let s = Srv::start("x509s", Some(tls), false);
    let script = format!(
        "h.set_tls(nbd.TLS_REQUIRE)\nh.set_tls_certificates({dir:?})\nh.set_tls_verify_peer(False)\nh.connect_uri({uri:?})\nassert h.get_tls_negotiated()\nh.pwrite(b'cert' * 128, 0)\nassert h.pread(512, 0) == b'cert' * 128\nh.shutdown()\n",
        dir = d.path().display().to_string(),
        uri = s.uri("disk"),
    );
    assert!(run(&nbdsh, &["-c", &script]).status.success());
    assert_eq!(&s.mem.contents()[..4], b"cert");
}
