//! Network members (issue #16): a RAID1 of a local file and a remote nbdkit export (file
//! plugin, log filter) served by `raidkit serve`, written through raidkit's NBD server.
//! The remote is SIGSTOPped (a black hole) and killed: client writes go on succeeding
//! within the member deadline, the member is failed, shutdown does not wait on it; the
//! remote comes back and is re-added by itself with a catch-up of only the bitmap's dirty
//! regions (nbdkit's log counts the bytes written to it); a remote that ran on its own
//! meanwhile (split brain) is refused until `manage --re-add --discard-its-changes`.
//!
//! Skips (printing why) without nbdkit (tests/nbd/install-deps.sh installs it).

use raidkit_nbd::client::{Client, ClientOptions};
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const RAIDKIT: &str = env!("CARGO_BIN_EXE_raidkit");
const MIB: u64 = 1 << 20;
/// Member files: 32 MiB; data offset 1 MiB (1.2 superblock, 1 MiB bitmap chunks).
const MEMBER_BYTES: u64 = 32 * MIB;
const DATA_OFFSET: u64 = MIB;
/// The member deadline the server runs with.
const TIMEOUT_SECS: u64 = 2;

fn rk(d: &Path, args: &[&str]) -> Output {
    proc::bin_in(RAIDKIT, d, Some(&d.join("run")), args)
}

fn ok(d: &Path, args: &[&str]) -> String {
    proc::bin_ok(RAIDKIT, d, Some(&d.join("run")), args)
}

fn status(d: &Path) -> Option<Value> {
    let o = rk(d, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).ok()?;
    v.as_array()?.first().cloned()
}

/// The member in role `role` from `status --json`.
fn member(d: &Path, role: u64) -> Value {
    let st = status(d).expect("status");
    st["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["role"] == role).cloned())
        .unwrap_or_else(|| panic!("no role {role} in {st}"))
}

/// A process killed (and reaped) when dropped.
struct Killing(Option<Child>);

impl Killing {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status();
    }
    /// Send `sig` and wait for the exit (at most `secs`); the time it took.
    fn stop(&mut self, sig: &str, secs: u64) -> Duration {
        let t0 = Instant::now();
        self.signal(sig);
        let mut c = self.0.take().expect("running");
        loop {
            if let Ok(Some(_)) = c.try_wait() {
                return t0.elapsed();
            }
            if t0.elapsed() > Duration::from_secs(secs) {
                let _ = c.kill();
                let _ = c.wait();
                panic!("pid {} did not exit within {secs} s of SIG{sig}", c.id());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Killing {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// nbdkit serving `file` on the Unix socket `sock`, writes logged to `log`.
fn nbdkit(nbdkit: &Path, d: &Path, sock: &Path, file: &str, log: &str) -> Killing {
    let _ = std::fs::remove_file(sock);
    let c = Command::new(nbdkit)
        .current_dir(d)
        .args(["-f", "-U"])
        .arg(sock)
        .args(["--filter=log", "file", file])
        .arg(format!("logfile={}", d.join(log).display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nbdkit");
    let k = Killing(Some(c));
    // Until it accepts (the socket file exists from bind(), before listen()).
    proc::wait_for("nbdkit's socket", 20, || {
        std::os::unix::net::UnixStream::connect(sock).is_ok()
    });
    k
}

/// `raidkit serve` of `members`, stderr (its event lines) to `serve.log`.
fn serve(d: &Path, members: &[&str]) -> Killing {
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    let c = Command::new(RAIDKIT)
        .current_dir(d)
        .env("RAIDKIT_RUN_DIR", d.join("run"))
        .args(["serve", "--socket", "a.sock", "--export", "net"])
        .args(["--member-timeout", &format!("{TIMEOUT_SECS}s")])
        .args(members)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start raidkit serve");
    let k = Killing(Some(c));
    proc::wait_for("the control socket", 60, || status(d).is_some());
    k
}

/// The event lines of kind `kind` the server logged so far.
fn events(d: &Path, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    let tag = format!("]: {kind} ");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, j)| j))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

fn wait_event(d: &Path, kind: &str, secs: u64) -> Value {
    proc::wait_for(kind, secs, || !events(d, kind).is_empty());
    events(d, kind).remove(0)
}

/// Bytes nbdkit's log filter saw written at or past `from` (the data area).
fn logged_write_bytes(d: &Path, log: &str, from: u64) -> u64 {
    let text = std::fs::read_to_string(d.join(log)).unwrap_or_default();
    let field = |l: &str, k: &str| -> Option<u64> {
        let v = l.split_whitespace().find_map(|w| w.strip_prefix(k))?;
        u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
    };
    text.lines()
        .filter(|l| l.contains(" Write id=") && l.contains("count="))
        .filter_map(|l| Some((field(l, "offset=")?, field(l, "count=")?)))
        .filter(|(off, _)| *off >= from)
        .map(|(_, n)| n)
        .sum()
}

fn client(d: &Path) -> Client {
    let uri = format!("nbd+unix:///net?socket={}", d.join("a.sock").display());
    Client::connect(&uri, &ClientOptions::default()).expect("connect to raidkit serve")
}

/// Write `data` at `offset` and flush, through the array; the time it took.
fn write_flush(c: &Client, offset: u64, data: &[u8]) -> Duration {
    let t0 = Instant::now();
    c.write(offset, data, false, Duration::from_secs(60))
        .expect("client write");
    c.flush(Duration::from_secs(60)).expect("client flush");
    t0.elapsed()
}

fn data_area(p: &Path) -> Vec<u8> {
    let all = std::fs::read(p).unwrap();
    all[DATA_OFFSET as usize..].to_vec()
}

/// A RAID1 of `local.img` and `remote.img` behind nbdkit; returns (dir, nbdkit, URI).
fn setup(tag: &str) -> Option<(TempDir, PathBuf, Killing, String)> {
    let nbdkit_bin = proc::system_tool("nbdkit", "nbd_members")?;
    let td = TempDir::new(&format!("rk-netmem-{tag}")).unwrap();
    let d = td.path().to_path_buf();
    for f in ["local.img", "remote.img"] {
        std::fs::File::create(d.join(f))
            .unwrap()
            .set_len(MEMBER_BYTES)
            .unwrap();
    }
    let sock = d.join("r.sock");
    let remote = nbdkit(&nbdkit_bin, &d, &sock, "remote.img", "r1.log");
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    ok(
        &d,
        &[
            "create",
            "--level",
            "1",
            "--raid-devices",
            "2",
            "--bitmap",
            "internal",
            "--bitmap-chunk",
            "1M",
            "--name",
            "net",
            "--homehost",
            "none",
            "local.img",
            &uri,
        ],
    );
    Some((td, nbdkit_bin, remote, uri))
}

#[test]
fn black_holed_remote_is_failed_at_its_deadline_and_stop_does_not_wait() {
    let Some((td, _bin, remote, uri)) = setup("stop") else {
        return;
    };
    let d = td.path();
    let mut server = serve(d, &["local.img", &uri]);
    let st = member(d, 1);
    assert_eq!(st["state"], "in_sync", "{st}");
    assert_eq!(st["link"]["state"], "connected", "{st}");
    let c = client(d);
    write_flush(&c, 0, &proc::xorshift_bytes(MIB as usize, 1));
    let text = ok(d, &["status"]);
    assert!(
        text.contains(&format!("{uri}: connected for")) && text.contains("latency"),
        "{text}"
    );

    remote.signal("STOP");
    let data = proc::xorshift_bytes(MIB as usize, 2);
    let took = write_flush(&c, 4 * MIB, &data);
    // One member deadline, plus scheduling slack on a loaded machine.
    assert!(
        took < Duration::from_secs(TIMEOUT_SECS + 3),
        "a write took {took:?} with the remote stopped (deadline {TIMEOUT_SECS} s)"
    );
    let st = member(d, 1);
    assert_eq!(st["state"], "failed", "{st}");
    let ev = wait_event(d, "member_disconnected", 10);
    let st = member(d, 1);
    assert_eq!(st["link"]["state"], "disconnected", "{st}");
    let text = ok(d, &["status"]);
    assert!(text.contains(&format!("{uri}: disconnected for")), "{text}");
    assert_eq!(ev["role"], 1, "{ev}");
    // Later writes do not wait at all on the failed member.
    let took = write_flush(&c, 8 * MIB, &data);
    assert!(took < Duration::from_secs(TIMEOUT_SECS), "{took:?}");
    let mut back = vec![0u8; data.len()];
    c.read(4 * MIB, &mut back, Duration::from_secs(30)).unwrap();
    assert!(back == data, "read back differs");
    drop(c);

    // Graceful stop with the remote still stopped: never waits on it.
    let took = server.stop("TERM", 30);
    assert!(
        took < Duration::from_secs(TIMEOUT_SECS + 5),
        "stop took {took:?}"
    );
    // The local member has everything.
    let local = data_area(&d.join("local.img"));
    assert!(local[4 * MIB as usize..5 * MIB as usize] == data[..]);
}

#[test]
fn killed_remote_returns_with_only_the_dirty_regions_copied() {
    let Some((td, bin, mut remote, uri)) = setup("return") else {
        return;
    };
    let d = td.path();
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    remote.stop("KILL", 10);
    let data = proc::xorshift_bytes(MIB as usize, 3);
    let took = write_flush(&c, 8 * MIB, &data);
    assert!(
        took < Duration::from_secs(TIMEOUT_SECS + 3),
        "a write took {took:?} with the remote gone"
    );
    wait_event(d, "member_disconnected", 10);
    assert_eq!(member(d, 1)["state"], "failed");
    // The member is retried while it is away.
    proc::wait_for("failed reconnection attempts", 20, || {
        member(d, 1)["link"]["failed_attempts"].as_u64() >= Some(1)
    });

    // The remote comes back on the same socket: re-added by itself.
    let _remote = nbdkit(&bin, d, &d.join("r.sock"), "remote.img", "r2.log");
    let ev = wait_event(d, "member_reconnected", 60);
    assert_eq!(ev["role"], 1, "{ev}");
    let ev = wait_event(d, "resync_finished", 60);
    assert_eq!(ev["error"], Value::Null, "{ev}");
    assert_eq!(ev["bytes_copied"], MIB, "{ev}");
    assert_eq!(
        events(d, "resync_started")[0]["bitmap_guided"],
        true,
        "{:?}",
        events(d, "resync_started")
    );
    proc::wait_for("the member in sync", 30, || {
        member(d, 1)["state"] == "in_sync"
    });
    let st = member(d, 1);
    assert_eq!(st["link"]["state"], "connected", "{st}");
    assert_eq!(st["link"]["connects"], 2, "{st}");
    // Only the dirty region (1 MiB: one bitmap chunk) was written to the data area.
    assert_eq!(logged_write_bytes(d, "r2.log", DATA_OFFSET), MIB);
    // New writes reach both again.
    let more = proc::xorshift_bytes(MIB as usize, 4);
    write_flush(&c, 16 * MIB, &more);
    drop(c);
    assert!(data_area(&d.join("local.img")) == data_area(&d.join("remote.img")));
}

#[test]
fn remote_that_ran_on_its_own_is_refused_until_its_changes_are_discarded() {
    let Some((td, bin, mut remote, uri)) = setup("split") else {
        return;
    };
    let d = td.path();
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    remote.stop("KILL", 10);
    write_flush(&c, 2 * MIB, &proc::xorshift_bytes(MIB as usize, 5));
    wait_event(d, "member_disconnected", 10);

    // Meanwhile the remote's disk is assembled on its own (degraded) and written: split
    // brain.
    let other = d.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let remote_img = d.join("remote.img");
    let log = std::fs::File::create(other.join("serve.log")).unwrap();
    let alone = Command::new(RAIDKIT)
        .current_dir(&other)
        .env("RAIDKIT_RUN_DIR", other.join("run"))
        .args(["serve", "--socket", "a.sock", "--export", "net"])
        .arg(&remote_img)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut alone = Killing(Some(alone));
    proc::wait_for("the lone array", 60, || status(&other).is_some());
    write_flush(
        &client(&other),
        6 * MIB,
        &proc::xorshift_bytes(MIB as usize, 6),
    );
    alone.stop("TERM", 30);

    let _remote = nbdkit(&bin, d, &d.join("r.sock"), "remote.img", "r2.log");
    let ev = wait_event(d, "member_refused", 60);
    let why = ev["why"].as_str().unwrap_or_default();
    assert!(why.contains("split brain"), "{ev}");
    assert!(why.contains("discarding its changes"), "{ev}");
    assert_eq!(member(d, 1)["state"], "failed");
    assert_eq!(logged_write_bytes(d, "r2.log", 0), 0, "nothing written");
    // A plain re-add is refused too, naming the explicit choice.
    let o = rk(d, &["manage", "net", "--re-add", &uri]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("split brain"), "{err}");
    assert!(err.contains("--discard-its-changes"), "{err}");

    ok(
        d,
        &["manage", "net", "--re-add", &uri, "--discard-its-changes"],
    );
    proc::wait_for("the member in sync", 60, || {
        member(d, 1)["state"] == "in_sync"
    });
    let ev = wait_event(d, "resync_finished", 30);
    assert_eq!(ev["bytes_copied"], MEMBER_BYTES - DATA_OFFSET, "{ev}");
    drop(c);
    assert!(data_area(&d.join("local.img")) == data_area(&remote_img));
}
