//! Network members (issue #16): a RAID1 of a local file and a remote nbdkit export (file
//! plugin, log filter) served by `raidkit serve`, written through raidkit's NBD server.
//! The remote is SIGSTOPped (a black hole) and killed: client writes go on succeeding
//! within the member deadline, the member is failed, shutdown does not wait on it; the
//! remote comes back and is re-added by itself with a catch-up of only the bitmap's dirty
//! regions (nbdkit's log counts the bytes written to it); a remote that ran on its own
//! meanwhile (split brain) is refused until `manage --re-add --discard-its-changes`.
//!
//! Skips (printing why) without nbdkit (tests/nbd/install-deps.sh installs it).

mod netmem;

use netmem::*;
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A RAID1 of `local.img` and a remote nbdkit (`r`); returns (dir, remote, URI).
fn setup(tag: &str) -> Option<(TempDir, Remote, String)> {
    let bin = Program::Nbdkit.available("nbd_members")?;
    let td = TempDir::new(&format!("rk-netmem-{tag}")).unwrap();
    let d = td.path();
    sparse(d, "local.img", MEMBER_BYTES);
    let mut remote = Remote::new(Program::Nbdkit, bin, d, "r", MEMBER_BYTES);
    remote.start();
    let uri = remote.uri();
    create(d, "1", &["local.img", &uri], &[]);
    Some((td, remote, uri))
}

#[test]
fn black_holed_remote_is_failed_at_its_deadline_and_stop_does_not_wait() {
    let Some((td, remote, uri)) = setup("stop") else {
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

    let st = member(d, 1);
    assert!(st["link"]["latency_us"].as_u64() > Some(0), "{st}");
    assert!(st["link"]["requests"].as_u64() > Some(0), "{st}");
    assert_eq!(st["link"]["error"], Value::Null, "{st}");
    let stopped_at = unix_now();
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
    // Disconnected since the deadline passed, and why.
    let since = st["link"]["since"].as_u64().unwrap_or(0);
    assert!(since >= stopped_at && since <= unix_now(), "{st}");
    assert!(st["link"]["error"].is_string(), "{st}");
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
    let Some((td, mut remote, uri)) = setup("return") else {
        return;
    };
    let d = td.path();
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    remote.kill();
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
    remote.start();
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
    assert_eq!(logged_write_bytes(&remote.log(2), DATA_OFFSET), MIB);
    // New writes reach both again.
    let more = proc::xorshift_bytes(MIB as usize, 4);
    write_flush(&c, 16 * MIB, &more);
    drop(c);
    assert!(data_area(&d.join("local.img")) == data_area(&remote.backing));
}

#[test]
fn remote_that_ran_on_its_own_is_refused_until_its_changes_are_discarded() {
    let Some((td, mut remote, uri)) = setup("split") else {
        return;
    };
    let d = td.path();
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    remote.kill();
    write_flush(&c, 2 * MIB, &proc::xorshift_bytes(MIB as usize, 5));
    wait_event(d, "member_disconnected", 10);

    // Meanwhile the remote's disk is assembled on its own (degraded) and written: split
    // brain.
    let other = d.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let remote_img = remote.backing.clone();
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

    remote.start();
    let ev = wait_event(d, "member_refused", 60);
    let why = ev["why"].as_str().unwrap_or_default();
    assert!(why.contains("split brain"), "{ev}");
    assert!(why.contains("discarding its changes"), "{ev}");
    assert_eq!(member(d, 1)["state"], "failed");
    assert_eq!(logged_write_bytes(&remote.log(2), 0), 0, "nothing written");
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

/// The remote is the mirror's last leg (the local member was failed) and its server dies:
/// client IO fails (no member holds the data), but the member is not failed (md never
/// fails the last leg of a mirror): it stays in its slot, in sync, reported disconnected.
/// When the server is back the reconnector connects it again and IO resumes — no re-add,
/// nothing to catch up — and every byte written before reads back exactly: nothing is
/// marked lost, no bad block is recorded on it.
#[test]
fn last_leg_remote_is_kept_and_serves_again_when_it_returns() {
    let Some((td, mut remote, uri)) = setup("lastleg") else {
        return;
    };
    let d = td.path();
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    let a = proc::xorshift_bytes(2 * MIB as usize, 31);
    write_flush(&c, 0, &a);
    ok(d, &["manage", "net", "--fail", "local.img"]);
    // Written to the remote alone.
    let b = proc::xorshift_bytes(MIB as usize, 32);
    write_flush(&c, 4 * MIB, &b);

    remote.kill();
    let t = Duration::from_secs(30);
    let lost = c.write(8 * MIB, &b, false, t).and_then(|()| c.flush(t));
    assert!(lost.is_err(), "a write with no member left succeeded");
    let mut back = vec![0u8; 4096];
    assert!(
        c.read(0, &mut back, t).is_err(),
        "a read with no member left succeeded"
    );
    let ev = wait_event(d, "member_disconnected", 10);
    assert_eq!(ev["role"], 1, "{ev}");
    let st = member(d, 1);
    assert_eq!(st["state"], "in_sync", "the last leg was failed: {st}");
    assert_eq!(st["link"]["state"], "disconnected", "{st}");
    assert_eq!(
        events(d, "member_failed").len(),
        1,
        "only local.img was failed"
    );

    remote.start();
    let ev = wait_event(d, "member_reconnected", 60);
    assert_eq!(ev["role"], 1, "{ev}");
    proc::wait_for("the link up", 30, || {
        member(d, 1)["link"]["state"] == "connected"
    });
    assert_eq!(member(d, 1)["state"], "in_sync");
    assert_eq!(events(d, "resync_started"), Vec::<Value>::new());
    assert_eq!(events(d, "bad_block_recorded"), Vec::<Value>::new());
    let st = status(d).expect("status");
    assert_eq!(st["lost_ranges"], serde_json::json!([]), "{st}");
    assert!(
        read(&c, 0, a.len()) == a,
        "the first write reads back differently"
    );
    assert!(
        read(&c, 4 * MIB, b.len()) == b,
        "the second write reads back differently"
    );
    // And the array goes on.
    let more = proc::xorshift_bytes(MIB as usize, 33);
    write_flush(&c, 12 * MIB, &more);
    assert!(read(&c, 12 * MIB, more.len()) == more);
}

/// The member of `status --json` whose device is `uri`.
fn member_named(d: &std::path::Path, uri: &str) -> Value {
    let st = status(d).expect("status");
    st["members"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["device"] == uri).cloned())
        .unwrap_or_else(|| panic!("no {uri} in {st}"))
}

/// The remote does not answer when `serve` starts: the array starts degraded without it
/// (as md assembles a clean mirror with a member missing), which is listed as away,
/// disconnected, with its connection error and the attempts so far. Writes go on; when
/// its server starts, it is recognised by its superblock and re-added with a catch-up of
/// only the bitmap's dirty regions.
#[test]
fn remote_unreachable_at_start_runs_degraded_then_is_re_added() {
    let Some((td, mut remote, uri)) = setup("away") else {
        return;
    };
    let d = td.path();
    let a = proc::xorshift_bytes(MIB as usize, 41);
    {
        let mut server = serve(d, &["local.img", &uri]);
        write_flush(&client(d), 0, &a);
        server.stop("TERM", 30);
    }
    remote.kill();

    let _server = serve(d, &["local.img", &uri]);
    let st = status(d).expect("status");
    assert_eq!(st["degraded"], true, "{st}");
    assert_eq!(st["missing_roles"], serde_json::json!([1]), "{st}");
    let away = member_named(d, &uri);
    assert_eq!(away["state"], "away", "{away}");
    assert_eq!(away["link"]["state"], "disconnected", "{away}");
    assert!(away["link"]["error"].is_string(), "{away}");
    assert!(
        away["link"]["failed_attempts"].as_u64() >= Some(1),
        "{away}"
    );
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    assert!(log.contains("could not be reached"), "{log}");
    let c = client(d);
    let b = proc::xorshift_bytes(MIB as usize, 42);
    write_flush(&c, 8 * MIB, &b);
    proc::wait_for("a retry", 20, || {
        member_named(d, &uri)["link"]["failed_attempts"].as_u64() >= Some(2)
    });

    remote.start();
    let ev = wait_event(d, "member_reconnected", 60);
    assert_eq!(ev["role"], 1, "{ev}");
    let ev = wait_event(d, "resync_finished", 60);
    assert_eq!(ev["error"], Value::Null, "{ev}");
    assert_eq!(ev["bytes_copied"], MIB, "only the dirty region: {ev}");
    assert_eq!(events(d, "resync_started")[0]["bitmap_guided"], true);
    proc::wait_for("the member in sync", 30, || {
        member(d, 1)["state"] == "in_sync"
    });
    assert_eq!(member(d, 1)["device"], uri.as_str());
    let st = status(d).expect("status");
    assert_eq!(st["degraded"], false, "{st}");
    assert_eq!(logged_write_bytes(&remote.log(2), DATA_OFFSET), MIB);
    drop(c);
    assert!(data_area(&d.join("local.img")) == data_area(&remote.backing));
}

/// Unreachable members the array cannot run without: the error names each, with its
/// connection error, and says what to do; so does one with no member reachable at all.
#[test]
fn unreachable_members_the_array_needs_are_named() {
    let Some(bin) = Program::Nbdkit.available("nbd_members") else {
        return;
    };
    let td = TempDir::new("rk-netmem-need").unwrap();
    let d = td.path();
    sparse(d, "local.img", MEMBER_BYTES);
    let mut remote = Remote::new(Program::Nbdkit, bin, d, "r", MEMBER_BYTES);
    remote.start();
    let uri = remote.uri();
    ok(
        d,
        &[
            "create",
            "--level",
            "0",
            "--raid-devices",
            "2",
            "--name",
            "net",
            "--homehost",
            "none",
            "local.img",
            &uri,
        ],
    );
    remote.kill();
    for members in [vec!["local.img", uri.as_str()], vec![uri.as_str()]] {
        let mut args = vec!["serve", "--socket", "a.sock", "--export", "net"];
        args.extend(members.iter().copied());
        let o = rk(d, &args);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("could not reach {uri} (")), "{err}");
        assert!(err.to_lowercase().contains("start the server"), "{err}");
        if members.len() == 2 {
            assert!(err.contains("cannot start without it"), "{err}");
            assert!(err.contains("role(s) 1 missing"), "{err}");
        } else {
            assert!(
                err.contains("no member of the array could be reached"),
                "{err}"
            );
        }
    }
}

/// The remote is the mirror's last leg, its server dies, and its disk comes back restored
/// from a snapshot taken before the array last wrote to it: it would serve old data, so it
/// is refused — once, with one event — and then left alone (not reconnected and refused
/// again every tick); kept in its slot, IO that needs it keeps failing.
#[test]
fn last_leg_restored_from_a_snapshot_is_refused_once() {
    let Some((td, mut remote, uri)) = setup("snapshot") else {
        return;
    };
    let d = td.path();
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    write_flush(&c, 0, &proc::xorshift_bytes(MIB as usize, 41));
    let snap = d.join("snap.img");
    std::fs::copy(&remote.backing, &snap).unwrap();
    ok(d, &["manage", "net", "--fail", "local.img"]);
    write_flush(&c, 4 * MIB, &proc::xorshift_bytes(MIB as usize, 42));

    remote.kill();
    let t = Duration::from_secs(30);
    let b = proc::xorshift_bytes(MIB as usize, 43);
    let lost = c.write(8 * MIB, &b, false, t).and_then(|()| c.flush(t));
    assert!(lost.is_err(), "a write with no member left succeeded");
    wait_event(d, "member_disconnected", 10);
    std::fs::copy(&snap, &remote.backing).unwrap();

    remote.start();
    let ev = wait_event(d, "member_refused", 60);
    let why = ev["why"].as_str().unwrap_or_default();
    assert!(why.contains("not the last one this array wrote"), "{ev}");
    assert!(!why.contains("discard"), "{ev}");
    // Left alone: no reconnection, re-add or refusal after it (the reconnector looks
    // every 200 ms).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(events(d, "member_refused").len(), 1);
    assert_eq!(events(d, "member_reconnected").len(), 1);
    assert_eq!(events(d, "resync_started"), Vec::<Value>::new());
    // Kept in its slot (the array cannot run without it), its link down: the snapshot's
    // old data is never served.
    assert_eq!(member(d, 1)["link"]["state"], "disconnected");
    let mut old = vec![0u8; MIB as usize];
    assert!(
        c.read(4 * MIB, &mut old, t).is_err(),
        "the snapshot was served"
    );
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A client FLUSH on the array is a FLUSH on the remote member, after the write it covers;
/// a FUA write too (FUA is a write, then a flush of every member). `detail --json` shows
/// the link of the network member.
#[test]
fn client_flush_and_fua_reach_the_remote_as_flush() {
    let Some((td, remote, uri)) = setup("flush") else {
        return;
    };
    let d = td.path();
    let det: Value =
        serde_json::from_str(&ok(d, &["detail", "--json", "local.img", &uri])).unwrap();
    let link = &det["members"][1]["link"];
    assert_eq!(link["state"], "connected", "{det}");
    assert_eq!(link["uri"], uri.as_str(), "{det}");
    assert_eq!(link["tls"], false, "{det}");
    assert_eq!(link["flush"], true, "{det}");
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    let log = remote.log(1);
    // The index of the log line of the write at member offset `at`, and the flushes after it.
    let after_write = |at: u64| -> (bool, usize) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tag = format!("offset={at:#x} ");
        let Some(i) = lines
            .iter()
            .rposition(|l| l.contains(" Write id=") && l.contains(&tag))
        else {
            return (false, 0);
        };
        let flushes = lines[i..]
            .iter()
            .filter(|l| l.contains(" Flush id="))
            .count();
        (true, flushes)
    };
    for (i, fua) in [(0u64, false), (1, true)] {
        let at = (4 + i) * MIB;
        let data = proc::xorshift_bytes(4096, 20 + i as u32);
        c.write(at, &data, fua, Duration::from_secs(30)).unwrap();
        if !fua {
            c.flush(Duration::from_secs(30)).unwrap();
        }
        // Read at once: before the idle timer (1 s) could flush for its own reasons.
        let (seen, flushes) = after_write(DATA_OFFSET + at);
        assert!(seen, "the write at {at} is not in nbdkit's log");
        assert!(
            flushes >= 1,
            "fua={fua}: no flush reached the remote after the write"
        );
    }
}
