//! Inputs and situations the CLI must take calmly: a closed stdout, causes said once,
//! FIFO members, impossible benchmark sizes, conflicting options, member file modes,
//! alert paths that fail, a silent metrics client, TLS hints.

use raidkit_testkit::proc::{self, run_timeout, words, Daemon, Killing};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");

fn rk(run: &Path, dir: &Path, args: &[&str]) -> Output {
    proc::bin_in(RAIDKIT, dir, Some(run), args)
}

fn ok(run: &Path, dir: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, dir, Some(run), args)
}

fn err(run: &Path, dir: &Path, args: &[&str]) -> String {
    proc::bin_err(RAIDKIT, dir, Some(run), args)
}

fn create(run: &Path, d: &Path, level: &str, name: &str, members: &[&str]) {
    let n = members.len().to_string();
    let mut a = vec![
        "create",
        "-l",
        level,
        "-n",
        &n,
        "-z",
        "8M",
        "--name",
        name,
        "--homehost",
        "none",
    ];
    a.extend_from_slice(members);
    ok(run, d, &a);
}

/// A pipe whose reading end is already closed.
fn closed_pipe() -> Stdio {
    let mut fds = [0i32; 2];
    // SAFETY: pipe fills two valid descriptors; the read end is closed at once and the
    // write end handed to Stdio, which owns it from then on.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        std::os::unix::io::FromRawFd::from_raw_fd(fds[1])
    }
}

/// A command whose stdout is closed ends quietly with 141, as one killed by SIGPIPE.
#[test]
fn a_closed_stdout_ends_commands_quietly() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "1", "pipe", &["a", "b"]);
    for args in [
        &["examine", "a"][..],
        &["examine", "--json", "a", "b"],
        &["detail", "a", "b"],
        &["export", "a", "b"],
        &["completions", "bash"],
        &["man"],
        &["status"],
    ] {
        let o = Command::new(RAIDKIT)
            .current_dir(d)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(141), "{args:?}: {e}");
        assert!(!e.contains("panicked") && e.is_empty(), "{args:?}: {e}");
    }
}

/// An error's cause is printed once, not again after a message that already says it;
/// a long list of missing roles is said as runs.
#[test]
fn causes_are_printed_once() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    for args in [
        &["detail", "nonexistent"][..],
        &["export", "-o", "x", "nonexistent"],
        &["check", "nonexistent", "other"],
    ] {
        let e = err(&run, d, args);
        assert!(e.contains("No such file or directory"), "{args:?}: {e}");
        assert_eq!(
            e.matches("No such file or directory").count(),
            1,
            "{args:?}: {e}"
        );
    }
}

/// A FIFO (or another non-file) given as a member is refused at once instead of hanging
/// in open().
#[test]
fn fifo_members_are_refused_before_opening() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "5", "fifo", &["a", "b", "c"]);
    assert!(Command::new("mkfifo")
        .arg(d.join("p"))
        .status()
        .unwrap()
        .success());
    for args in [
        &["examine", "p"][..],
        &["detail", "a", "p"],
        &["export", "-o", "x", "a", "p", "c"],
        &["check", "a", "b", "p"],
        &["serve", "--socket", "s.sock", "a", "b", "p"],
    ] {
        let mut c = Command::new(RAIDKIT);
        c.current_dir(d).env("RAIDKIT_RUN_DIR", &run).args(args);
        let t0 = Instant::now();
        let o = run_timeout(&mut c, 20);
        // examine lists each device's problem on stdout, the others say it on stderr.
        let e =
            String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            e.contains("p is a FIFO: members are regular files or block devices"),
            "{args:?}: {e}"
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "{args:?} hung");
    }
}

/// `bench parity` refuses a working set larger than memory (a bare number is KiB) instead
/// of aborting in the allocator.
#[test]
fn bench_parity_refuses_a_working_set_beyond_memory() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    let o = rk(
        &run,
        d,
        &words(
            "bench parity --working-set 268435456 --op xor --data-disks 4 \
            --chunk 4K --threads 1 --time-ms 3",
        ),
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("--working-set 256.00 GiB") && e.contains("available memory"),
        "{e}"
    );
}

/// A fixed stripe cache size and an upper bound for the automatic one are exclusive.
#[test]
fn stripe_cache_options_conflict() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "5", "sc", &["a", "b", "c"]);
    // Bounded: without the check these would start serving / benchmarking.
    let refused = |args: &[&str]| {
        let mut c = Command::new(RAIDKIT);
        c.current_dir(d).env("RAIDKIT_RUN_DIR", &run).args(args);
        let o = run_timeout(&mut c, 60);
        assert!(!o.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = refused(&words(
        "serve --stripe-cache 512 --stripe-cache-max 1G a b c",
    ));
    assert!(e.contains("cannot be used with"), "{e}");
    let e = refused(&words(
        "bench io --create 5:3:8M --rw write --runtime 1 --stripe-cache 512 \
        --stripe-cache-max 1G",
    ));
    assert!(
        e.contains(
            "--stripe-cache 512 is a fixed size; --stripe-cache-max bounds the automatic size"
        ),
        "{e}"
    );
}

/// Member files made by `create --size` are readable by their owner only.
#[test]
fn created_member_files_are_private() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "1", "mode", &["a", "b"]);
    for m in ["a", "b"] {
        let mode = std::fs::metadata(d.join(m)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{m}");
    }
}

/// A webhook receiver: every POST body, answered 200.
fn webhook() -> (String, Receiver<Value>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let l = line.trim().to_ascii_lowercase();
                if let Some(v) = l.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if l.is_empty() {
                    break;
                }
            }
            let mut body = vec![0u8; len];
            if r.read_exact(&mut body).is_ok() {
                let mut w = c;
                let _ = w.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                if let Ok(v) = serde_json::from_slice(&body) {
                    let _ = tx.send(v);
                }
            }
        }
    });
    (url, rx)
}

/// A folder with a `sendmail` that always fails (an MTA that is down) and an alert
/// program that appends its arguments to `program.log`.
fn alert_tools(d: &Path) -> std::path::PathBuf {
    let bin = d.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("sendmail"), "#!/bin/sh\ncat >/dev/null\nexit 75\n").unwrap();
    let prog = d.join("alert");
    std::fs::write(
        &prog,
        format!("#!/bin/sh\necho \"$1 $2\" >> {}/program.log\n", d.display()),
    )
    .unwrap();
    for p in [bin.join("sendmail"), prog] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

fn wait_event(rx: &Receiver<Value>, kind: &str, secs: u64) -> Value {
    let t0 = Instant::now();
    loop {
        let left = Duration::from_secs(secs).saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(v) if v["kind"] == kind => return v,
            Ok(_) => {}
            Err(_) => panic!("the webhook did not get a {kind} event within {secs} s"),
        }
    }
}

/// Each alert path is independent: mail failing (its MTA is down) neither stops the
/// monitor nor keeps the webhook and the program from getting every event.
#[test]
fn monitor_goes_on_when_a_delivery_fails() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    let bin = alert_tools(d);
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (url, rx) = webhook();
    let alerts = |extra: &[&str]| {
        let mut c = Command::new(RAIDKIT);
        c.current_dir(d)
            .env("RAIDKIT_RUN_DIR", &run)
            .env("PATH", &path)
            .args([
                "monitor",
                "--json",
                "--program",
                "./alert",
                "--mail",
                "root@example.invalid",
                "--webhook",
                &url,
            ])
            .args(extra);
        c
    };
    // --test: every path is tried; the failing one is named, the others got the event.
    let o = run_timeout(&mut alerts(&["--test"]), 60);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("the test event did not reach: mail to root@example.invalid"),
        "{e}"
    );
    assert_eq!(wait_event(&rx, "test", 5)["array"], "test");
    let log = std::fs::read_to_string(d.join("program.log")).unwrap();
    assert!(log.contains("test test"), "{log}");

    // Streaming: two events from a served array reach the webhook and the program while
    // mail keeps failing.
    create(&run, d, "1", "mon", &["a", "b", "c"]);
    let mut serve = Command::new(RAIDKIT);
    serve
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", &run)
        .args(["serve", "--socket", "nbd.sock", "a", "b", "c"]);
    let mut s = Daemon::spawn(&mut serve, |l| l.starts_with("raidkit: serving"), 60);
    let mut mon = Killing(
        alerts(&[])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(2500));
    ok(
        &run,
        d,
        &[
            "manage",
            "mon",
            "--fail",
            &d.join("c").display().to_string(),
        ],
    );
    let ev = wait_event(&rx, "member_failed", 30);
    assert_eq!(ev["array"], "mon");
    ok(&run, d, &["sync-action", "mon", "check"]);
    wait_event(&rx, "sync_started", 30);
    assert!(mon.0.try_wait().unwrap().is_none(), "the monitor exited");
    let log = std::fs::read_to_string(d.join("program.log")).unwrap();
    assert!(log.contains("member_failed mon"), "{log}");
    drop(mon.0.kill());
    let mut e = String::new();
    mon.0.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    assert!(
        e.contains("mail to root@example.invalid: sendmail exited with exit status: 75; trying the member_failed event of mon again in 1 s (attempt 2 of 5)"),
        "{e}"
    );
    let (code, err) = s.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
}

fn get_metrics(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    let _ = c.read_to_string(&mut body);
    body
}

/// A client that connects and says nothing holds up nobody; the connections served at
/// once are bounded.
#[test]
fn prometheus_endpoint_is_not_blocked_by_silent_clients() {
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    let mut p = Killing(
        Command::new(RAIDKIT)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(["stats", "--prometheus", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    BufReader::new(p.0.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .trim_end_matches("/metrics")
        .to_string();
    let silent = TcpStream::connect(&addr).unwrap();
    let t0 = Instant::now();
    let body = get_metrics(&addr);
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(
        body.contains("# TYPE raidkit_requests_total counter"),
        "{body}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    // 16 silent connections at once: the 17th is told to come back. (Fresh ones: each
    // holds its slot for the server's request time, 10 s from when it was taken in, so
    // the first silent client, older by the request above, could already be let go.)
    // They are opened once the server has let the first silent client and the request
    // above go (their threads ended): a slot those still held would have turned one of
    // the 16 away with a 503, and the 17th would then find a free slot.
    drop(silent);
    proc::wait_for("the metrics server's connection threads to end", 10, || {
        std::fs::read_dir(format!("/proc/{}/task", p.0.id())).map_or(0, |d| d.count()) == 1
    });
    let more: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // The server takes the 16 in as it gets to them (slowly on a loaded machine): asked
    // until they hold every slot, within a bounded time shorter than the request time.
    let deadline = Instant::now() + Duration::from_secs(8);
    let body = loop {
        std::thread::sleep(Duration::from_millis(50));
        let body = get_metrics(&addr);
        if body.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break body;
        }
    };
    assert!(body.starts_with("HTTP/1.1 503"), "{body}");
    drop(more);
    let t0 = Instant::now();
    loop {
        let body = get_metrics(&addr);
        if body.starts_with("HTTP/1.1 200 OK") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// In TLS mode the printed `nbd-client` command carries the TLS options it needs (X.509),
/// or says nbd-client cannot do it (PSK) instead of printing a command that fails.
#[test]
fn nbd_client_hint_follows_tls() {
    let Some(openssl) = proc::which("openssl") else {
        println!("skip: openssl is not installed");
        return;
    };
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    let run = d.join("run");
    create(&run, d, "1", "tls", &["a", "b"]);
    proc::self_signed_cert(&openssl, &d.join("cert.pem"), &d.join("key.pem"), &[]);
    std::fs::write(
        d.join("keys.psk"),
        "alice:0123456789abcdef0123456789abcdef\n",
    )
    .unwrap();
    for (tls, want) in [
        (
            &["--tls-cert", "cert.pem", "--tls-key", "key.pem"][..],
            "-N tls -x -A ",
        ),
        (
            &["--tls-psk", "keys.psk"][..],
            "nbd-client has no TLS-PSK support",
        ),
    ] {
        let mut c = Command::new(RAIDKIT);
        c.current_dir(d)
            .env("RAIDKIT_RUN_DIR", &run)
            .args(["serve", "--listen", "127.0.0.1:0", "--tls-required"])
            .args(tls)
            .args(["a", "b"]);
        let mut s = Daemon::spawn(&mut c, |l| l.starts_with("raidkit: serving"), 60);
        let hint: Vec<&String> = s
            .stdout
            .iter()
            .filter(|l| l.contains("nbd-client"))
            .collect();
        assert!(hint.iter().any(|l| l.contains(want)), "{tls:?}: {hint:?}");
        assert!(
            hint.iter()
                .all(|l| !l.trim_start().starts_with("nbd-client 127.0.0.1") || l.contains(" -x ")),
            "{tls:?}: {hint:?}"
        );
        let (code, err) = s.stop("TERM");
        assert_eq!(code, Some(0), "{err}");
    }
}

/// A mount made without root (through the setuid fusermount3) stops on SIGTERM: it is
/// unmounted with `fusermount3 -u`, flushed and marked clean.
#[test]
fn unprivileged_mount_stops_on_sigterm() {
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    let tools = ["setpriv", "fusermount3"]
        .iter()
        .all(|t| proc::which(t).is_some());
    if !root || !tools || !Path::new("/dev/fuse").exists() {
        println!("skip: needs root (to play another user), setpriv, fusermount3 and /dev/fuse");
        return;
    }
    let t = TempDir::new("rk-hard").unwrap();
    let d = t.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = d.join("run");
    create(&d.join("root-run"), d, "1", "user", &["a", "b"]);
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for p in ["a", "b", "mnt"] {
        std::os::unix::fs::chown(d.join(p), Some(65534), Some(65534)).unwrap();
    }
    let mut c = Command::new("setpriv");
    c.current_dir(d)
        .env("RAIDKIT_RUN_DIR", &run)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            RAIDKIT,
        ])
        .args(["mount", "a", "b", "mnt"]);
    let fuse_mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o777;
    if fuse_mode & 0o006 != 0o006 {
        // Only root may open /dev/fuse here: the mount must say so (and what to do).
        let out = c.stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let want = format!("/dev/fuse is mode {fuse_mode:04o}, so only root can mount");
        assert!(err.contains(&want), "{err}");
        println!("skip the rest: /dev/fuse is mode {fuse_mode:04o} (only root may use it)");
        return;
    }
    let mut m = Daemon::spawn(&mut c, |l| l.contains(" mounted read-write as "), 60);
    let (code, err) = m.stop("TERM");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("SIGTERM: unmounting"), "{err}");
    let ex: Value = serde_json::from_str(&ok(&run, d, &["examine", "--json", "a", "b"])).unwrap();
    for m in ex.as_array().unwrap() {
        assert_eq!(m["state"], "clean", "{m}");
    }
}
