//! Network members on other real NBD servers (issue #16): qemu-nbd, nbd-server and another
//! `raidkit serve` as the remote half of a RAID1 (nbdkit's runs are in nbd_members.rs).
//! For each: write, take the remote away (killed, or black-holed with SIGSTOP), writes go
//! on succeeding within the member deadline, the member is failed; the remote comes back
//! and is re-added by itself with a catch-up of only the bitmap's dirty region; both
//! halves end identical. Then the kernel (mdref) assembles the local member file and the
//! remote's backing file of one such run and finds `mismatch_cnt=0`.
//!
//! Skips (printing why) when a server is not installed (scripts/deps.sh installs them).

mod netmem;

use netmem::*;
use raidkit_testkit::mdref::{locate_or_skip, Run};
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::path::PathBuf;

/// How the remote goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outage {
    /// SIGKILL, then started again on the same socket.
    Kill,
    /// SIGSTOP (a black hole: connections stay open, nothing answers), then SIGCONT.
    Stop,
}

/// The run: RAID1 of `local.img` and a remote on `server`; the remote goes away as
/// `outage` says and comes back. Returns the directory and the remote (stopped) for
/// further checks, or None when the server is not installed.
fn outage_and_return(server: Program, outage: Outage, tag: &str) -> Option<(TempDir, Remote)> {
    let bin = server.available("net_servers")?;
    let td = TempDir::new(&format!("rk-netsrv-{tag}")).unwrap();
    let d = td.path();
    sparse(d, "local.img", MEMBER_BYTES);
    let mut remote = Remote::new(server, bin, d, "r", MEMBER_BYTES);
    remote.start();
    let uri = remote.uri();
    create(d, "1", &["local.img", &uri], &[]);
    let mut array = serve(d, &["local.img", &uri]);
    let st = member(d, 1);
    assert_eq!(st["state"], "in_sync", "{st}");
    assert_eq!(st["link"]["state"], "connected", "{st}");
    let c = client(d);
    let first = proc::xorshift_bytes(MIB as usize, 1);
    write_flush(&c, 0, &first);
    wait_clean(d);

    match outage {
        Outage::Kill => remote.kill(),
        Outage::Stop => remote.signal("STOP"),
    }
    // Two regions written while it is away: 8 MiB (whole) and 2 KiB at 12 MiB + 4 KiB.
    let away = proc::xorshift_bytes(MIB as usize, 2);
    let took = write_flush(&c, 8 * MIB, &away);
    assert!(
        took < WRITE_BOUND,
        "{server:?}: a write took {took:?} with the remote {outage:?} (deadline {TIMEOUT_SECS} s)"
    );
    let small = proc::xorshift_bytes(2048, 3);
    let took = write_flush(&c, 12 * MIB + 4096, &small);
    assert!(took < WRITE_BOUND, "{server:?}: {took:?}");
    wait_event(d, "member_disconnected", 10);
    let st = member(d, 1);
    assert_eq!(st["state"], "failed", "{st}");
    assert_eq!(st["link"]["state"], "disconnected", "{st}");
    assert!(read(&c, 8 * MIB, MIB as usize) == away);

    match outage {
        Outage::Kill => remote.start(),
        Outage::Stop => remote.signal("CONT"),
    }
    let ev = wait_event(d, "member_reconnected", 60);
    assert_eq!(ev["role"], 1, "{ev}");
    let ev = wait_event(d, "resync_finished", 60);
    assert_eq!(ev["error"], Value::Null, "{ev}");
    // Exactly the two dirty bitmap chunks (1 MiB each).
    assert_eq!(ev["bytes_copied"], 2 * MIB, "{server:?}: {ev}");
    assert_eq!(events(d, "resync_started")[0]["bitmap_guided"], true);
    proc::wait_for("the member in sync", 30, || {
        member(d, 1)["state"] == "in_sync"
    });
    let st = member(d, 1);
    assert_eq!(st["link"]["state"], "connected", "{st}");
    // Writes reach both again.
    write_flush(&c, 20 * MIB, &proc::xorshift_bytes(MIB as usize, 4));
    drop(c);
    array.stop("TERM", 30);
    let local = data_area(&d.join("local.img"));
    let theirs = remote.read_export(None);
    assert!(
        same_prefix(&local, &theirs[DATA_OFFSET as usize..]),
        "{server:?}: the remote's data differs from the local member's"
    );
    remote.kill();
    Some((td, remote))
}

#[test]
fn qemu_nbd_member_black_holed() {
    let _ = outage_and_return(Program::QemuNbd, Outage::Stop, "qemu-stop");
}

#[test]
fn nbd_server_member_killed_and_restarted() {
    let _ = outage_and_return(Program::NbdServer, Outage::Kill, "nbdsrv-kill");
}

#[test]
fn nbd_server_member_black_holed() {
    let _ = outage_and_return(Program::NbdServer, Outage::Stop, "nbdsrv-stop");
}

#[test]
fn raidkit_member_killed_and_restarted() {
    let _ = outage_and_return(Program::Raidkit, Outage::Kill, "rk-kill");
}

#[test]
fn raidkit_member_black_holed() {
    let _ = outage_and_return(Program::Raidkit, Outage::Stop, "rk-stop");
}

/// qemu-nbd killed and restarted; afterwards the kernel assembles the local member file
/// and the remote's backing file: in sync, the data the client wrote, `mismatch_cnt=0`.
#[test]
fn qemu_nbd_member_killed_and_restarted_then_the_kernel_agrees() {
    let Some((td, remote)) = outage_and_return(Program::QemuNbd, Outage::Kill, "qemu-kill") else {
        return;
    };
    let Some(md) = locate_or_skip() else { return };
    let d = td.path();
    let expected = d.join("expected");
    let mut want = vec![0u8; 21 * MIB as usize];
    want[..MIB as usize].copy_from_slice(&proc::xorshift_bytes(MIB as usize, 1));
    want[8 * MIB as usize..9 * MIB as usize]
        .copy_from_slice(&proc::xorshift_bytes(MIB as usize, 2));
    let at = 12 * MIB as usize + 4096;
    want[at..at + 2048].copy_from_slice(&proc::xorshift_bytes(2048, 3));
    want[20 * MIB as usize..].copy_from_slice(&proc::xorshift_bytes(MIB as usize, 4));
    std::fs::write(&expected, &want).unwrap();
    let disks: Vec<PathBuf> = vec![d.join("local.img"), remote.backing.clone()];
    let script = format!(
        r#"exec 2>&1
mdadm --assemble --run /dev/md0 /dev/vda /dev/vdb || exit 2
cat /proc/mdstat
mdref-wait md0
echo check > /sys/block/md0/md/sync_action
mdref-wait md0
cmp -n {n} /dev/md0 /root/expected && echo "RESULT data=ok" || echo "RESULT data=BAD"
echo "RESULT mismatch_cnt=$(cat /sys/block/md0/md/mismatch_cnt) degraded=$(cat /sys/block/md0/md/degraded)"
"#,
        n = want.len()
    );
    let out = md
        .run(&Run {
            disks,
            snapshot: true,
            files: vec![expected],
            timeout_secs: 240,
            script,
            ..Default::default()
        })
        .unwrap();
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.status, 0, "{}", out.stdout);
    for line in ["RESULT data=ok", "RESULT mismatch_cnt=0 degraded=0"] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{}",
            out.stdout
        );
    }
}

const PSK: &str = "alice:00112233445566778899aabbccddeeff\n";

/// A RAID1 of `local.img` and the TLS remote `remote` (started), created, served and
/// written with the member TLS option `tls_opt`; the link says TLS and the remote has the
/// data.
fn tls_mirror(d: &std::path::Path, remote: &mut Remote, tls_opt: &[&str]) {
    sparse(d, "local.img", MEMBER_BYTES);
    remote.start();
    let uri = remote.uri();
    create(d, "1", &["local.img", &uri], tls_opt);
    // examine and detail open the member too.
    let mut args = vec!["examine", "--json"];
    args.extend_from_slice(tls_opt);
    args.push(&uri);
    let ex: Value = serde_json::from_str(&ok(d, &args)).unwrap();
    assert_eq!(ex[0]["role"], 1, "{ex}");
    let mut array = serve_with(d, &["local.img", &uri], tls_opt);
    let st = member(d, 1);
    assert_eq!(st["link"]["state"], "connected", "{st}");
    assert_eq!(st["link"]["tls"], true, "{st}");
    let c = client(d);
    let data = proc::xorshift_bytes(MIB as usize, 7);
    write_flush(&c, 3 * MIB, &data);
    drop(c);
    array.stop("TERM", 30);
    let mut args = vec!["detail", "--json"];
    args.extend_from_slice(tls_opt);
    args.extend_from_slice(&["local.img", &uri]);
    let det: Value = serde_json::from_str(&ok(d, &args)).unwrap();
    assert_eq!(det["state"], "clean", "{det}");
    let local = data_area(&d.join("local.img"));
    assert!(local[3 * MIB as usize..4 * MIB as usize] == data[..]);
}

#[test]
fn tls_psk_member_over_a_unix_socket() {
    let Some(bin) = Program::Nbdkit.available("net_servers") else {
        return;
    };
    let td = TempDir::new("rk-netsrv-psk").unwrap();
    let d = td.path();
    std::fs::write(d.join("keys.psk"), PSK).unwrap();
    let mut remote = Remote::new(Program::Nbdkit, bin, d, "r", MEMBER_BYTES);
    remote.tls = Some(RemoteTls::Psk(d.join("keys.psk")));
    assert!(remote.uri().starts_with("nbds+unix:///?socket="));
    tls_mirror(d, &mut remote, &["--member-tls-psk", "keys.psk"]);
    // The remote got the data, encrypted on the way.
    assert!(logged_write_bytes(&remote.log(1), DATA_OFFSET) >= MIB);
    let local = data_area(&d.join("local.img"));
    assert!(same_prefix(&local, &data_area(&remote.backing)));
}

#[test]
fn tls_x509_member_over_tcp() {
    let td = TempDir::new("rk-netsrv-x509").unwrap();
    let d = td.path();
    let Some(certs) = x509_dir(&d.join("certs")) else {
        return;
    };
    let mut remote = Remote::new(Program::Raidkit, RAIDKIT.into(), d, "r", MEMBER_BYTES);
    remote.tls = Some(RemoteTls::X509(certs));
    remote.tcp = Some(free_port());
    assert!(remote.uri().starts_with("nbds://127.0.0.1:"));
    tls_mirror(d, &mut remote, &["--member-tls-certificates", "certs"]);
    remote.kill();
}

#[test]
fn a_wrong_psk_is_refused_with_a_clear_error() {
    let Some(bin) = Program::Nbdkit.available("net_servers") else {
        return;
    };
    let td = TempDir::new("rk-netsrv-badpsk").unwrap();
    let d = td.path();
    std::fs::write(d.join("keys.psk"), PSK).unwrap();
    std::fs::write(
        d.join("wrong.psk"),
        "alice:ffeeddccbbaa99887766554433221100\n",
    )
    .unwrap();
    sparse(d, "local.img", MEMBER_BYTES);
    let mut remote = Remote::new(Program::Nbdkit, bin, d, "r", MEMBER_BYTES);
    remote.tls = Some(RemoteTls::Psk(d.join("keys.psk")));
    remote.start();
    let uri = remote.uri();
    let o = rk(
        d,
        &[
            "create",
            "--level",
            "1",
            "--raid-devices",
            "2",
            "--member-tls-psk",
            "wrong.psk",
            "local.img",
            &uri,
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        format!(
            "raidkit: error: {uri}: IO error while opening the member for writing: {uri}: TLS: handshake failed (unexpected EOF): the server refused the pre-shared key of user \"alice\" (a wrong key, or a user the server does not know)\n"
        )
    );
    assert_eq!(logged_write_bytes(&remote.log(1), 0), 0, "nothing written");
}
