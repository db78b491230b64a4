//! Hostile clients of a serving process's control socket: monitors that hang up, a
//! request trickled a byte at a time, and the readers of `--socket-group` taking every
//! slot. Each test failed before the fix it covers.

use raidkit_testkit::proc::{wait_for, Daemon};
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
/// Set in the re-executed test binary that plays another user's client.
const CLIENT_ENV: &str = "RK_CTL_HOSTILE_CLIENT";

fn serve(d: &Path, run: &Path, extra: &[&str]) -> Daemon {
    let o = raidkit_testkit::proc::bin_in(
        RAIDKIT,
        d,
        Some(run),
        &[
            "create",
            "-l",
            "1",
            "-n",
            "2",
            "-z",
            "8M",
            "--name",
            "ctl",
            "--homehost",
            "none",
            "a",
            "b",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let mut c = Command::new(RAIDKIT);
    c.current_dir(d)
        .env("RAIDKIT_RUN_DIR", run)
        .args(["serve", "--socket", "nbd.sock"])
        .args(extra)
        .args(["a", "b"]);
    Daemon::spawn(&mut c, |l| l.starts_with("raidkit: serving"), 60)
}

fn control_socket(run: &Path) -> PathBuf {
    std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("a control socket")
}

/// Connect, send `req` and read one reply line (the connection stays open).
fn ask(sock: &Path, req: &str) -> (Value, UnixStream) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // A refusal may come (and the server close) before the request is sent.
    let _ = s.write_all(format!("{req}\n").as_bytes());
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    (serde_json::from_str(&line).unwrap(), s)
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// A monitor client that hung up held its connection slot, its thread and a forwarding
/// thread per array until the next event: 64 of them (a `raidkit monitor` killed 64
/// times) locked every command out of the server for as long as the arrays were quiet.
/// Now a hang-up is noticed within half a second and everything it held is freed.
#[test]
fn monitors_that_hang_up_free_their_slots() {
    let t = TempDir::new("rk-ctlh").unwrap();
    let d = t.path();
    let run = d.join("run");
    let srv = serve(d, &run, &[]);
    let sock = control_socket(&run);
    let before = threads(srv.id());
    for _round in 0..2 {
        for _ in 0..64 {
            let (v, s) = ask(&sock, r#"{"cmd":"monitor"}"#);
            assert_eq!(v["ok"], true, "{v}");
            drop(s);
        }
        wait_for("a status request to be served again", 10, || {
            ask(&sock, r#"{"cmd":"status"}"#).0["ok"] == true
        });
        // Every slot is free again (the next round needs all 64).
        wait_for("the monitors' threads to end", 10, || {
            threads(srv.id()) <= before + 1
        });
    }
}

/// A request trickled a byte a second was served for as long as it kept trickling (the
/// time limit was per read); now it has 10 s in all.
#[test]
fn a_trickled_request_is_cut_off() {
    let t = TempDir::new("rk-ctlh").unwrap();
    let d = t.path();
    let run = d.join("run");
    let _srv = serve(d, &run, &[]);
    let mut s = UnixStream::connect(control_socket(&run)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(900)))
        .unwrap();
    let start = Instant::now();
    let mut got = Vec::new();
    for b in br#"{"cmd":"status"       "#.iter().cycle() {
        if start.elapsed() > Duration::from_secs(16) {
            break;
        }
        let sent = s.write_all(&[*b]).is_ok();
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) if !sent => break,
            Err(_) => {}
        }
        if got.contains(&b'\n') {
            break;
        }
    }
    let took = start.elapsed();
    let reply = String::from_utf8_lossy(&got);
    assert!(
        reply.contains("no complete request within 10 s"),
        "{reply:?} after {took:?}"
    );
    assert!(took < Duration::from_secs(13), "{took:?}");
}

/// The client of `group_readers_cannot_take_every_slot`: run as another user, it opens
/// the connections asked for, prints each reply, and holds them until stdin closes.
#[test]
fn client_child() {
    let Ok(spec) = std::env::var(CLIENT_ENV) else {
        return;
    };
    let (sock, n) = spec.rsplit_once(':').unwrap();
    let mut held = Vec::new();
    for _ in 0..n.parse::<usize>().unwrap() {
        let (v, s) = ask(Path::new(sock), r#"{"cmd":"monitor"}"#);
        println!("REPLY {v}");
        held.push(s);
    }
    println!("HOLDING");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// Members of `--socket-group` could open all 64 connections (monitors stay connected)
/// and lock root out of its own server; now they hold at most 16, and root gets in.
#[test]
fn group_readers_cannot_take_every_slot() {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root || raidkit_testkit::proc::which("setpriv").is_none() {
        println!("skip: needs root and setpriv to play another user");
        return;
    }
    let t = TempDir::new("rk-ctlh").unwrap();
    let d = t.path();
    let run = d.join("run");
    let group = 4244u32;
    let _srv = serve(d, &run, &["--socket-group", &group.to_string()]);
    let sock = control_socket(&run);
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={group}"))
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["client_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CLIENT_ENV, format!("{}:17", sock.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut replies = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        // The harness's "test client_child ... " may start the first line.
        if let Some((_, r)) = l.split_once("REPLY ") {
            replies.push(serde_json::from_str::<Value>(r).unwrap());
        }
        if l.ends_with("HOLDING") {
            break;
        }
    }
    let (v, _) = ask(&sock, r#"{"cmd":"status"}"#);
    drop(child.stdin.take());
    let _ = child.wait();
    assert_eq!(replies.len(), 17, "{replies:?}");
    assert!(replies[..16].iter().all(|r| r["ok"] == true), "{replies:?}");
    assert_eq!(
        replies[16]["error"],
        "the server has its maximum of 16 control connections from users other than root; close one and try again",
    );
    assert_eq!(v["ok"], true, "root's status: {v}");
}

/// Run raidkit as user 65534 (no groups) with `run` as the run directory.
fn as_nobody(d: &Path, run: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(RAIDKIT)
        .args(args)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", run)
        .stdin(Stdio::null());
    c
}

/// A user who may not use a server's control socket is told so by `stats` (which
/// printed nothing and succeeded) and by `monitor` (which watched nothing in silence),
/// as by `status`.
#[test]
fn stats_and_monitor_say_whom_they_may_not_ask() {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root || raidkit_testkit::proc::which("setpriv").is_none() {
        println!("skip: needs root and setpriv to play another user");
        return;
    }
    let t = TempDir::new("rk-ctlh").unwrap();
    let d = t.path();
    let run = d.join("run");
    let _srv = serve(d, &run, &[]);
    let sock = control_socket(&run);
    let denied = format!(
        "raidkit: permission denied: control socket {} belongs to root (mode 0600): you may not connect to it",
        sock.display()
    );

    let o = as_nobody(d, &run, &["stats"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "stats succeeded: {stderr}");
    assert!(stderr.contains(&denied), "{stderr}");
    assert!(
        stderr.contains("1 serving process(es) would not tell you their arrays' statistics"),
        "{stderr}"
    );
    let o = as_nobody(d, &run, &["stats", "ctl"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("no running array named \"ctl\" that you may use; permission denied"),
        "{stderr}"
    );

    let mut mon = as_nobody(d, &run, &["monitor"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let err = mon.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(err).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20));
    let _ = mon.kill();
    let _ = mon.wait();
    let line = line.expect("monitor said nothing in 20 s");
    assert!(
        line.starts_with("raidkit monitor: permission denied: control socket"),
        "{line}"
    );
}
