//! Write-behind through `raidkit serve` (issue 16): the NBD server lends each write's
//! request buffer to the array, and a write queued behind for the write-mostly remote
//! keeps that buffer (no copy) while the server goes on reading requests into others.
//! With the remote stopped for a while (writes pile up in the queue) and then failed
//! (its deadline passes with writes queued), every byte lands exactly on each leg that
//! took it: a buffer reused while still queued would put another request's bytes there.
//!
//! Skips (printing why) without nbdkit (tests/nbd/install-deps.sh installs it).

mod netmem;

use netmem::*;
use raidkit_testkit::proc;
use raidkit_testkit::tempdir::TempDir;
use std::time::{Duration, Instant};

/// Writes of several sizes (so pooled buffers of one size carry requests of another),
/// `k`-tagged, back to back from `at`: (offset, data) each.
fn writes(k: u32, at: u64) -> Vec<(u64, Vec<u8>)> {
    let sizes = [MIB, 4096, 3 * MIB, 64 << 10, 2 * MIB, 512 << 10];
    let mut off = at;
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let w = (off, proc::xorshift_bytes(n as usize, k * 16 + i as u32));
            off += n;
            w
        })
        .collect()
}

/// Send every write at once (many requests in flight, so several server workers and
/// buffers are busy), then wait for the answers.
fn write_all(c: &raidkit_nbd::client::Client, ws: &[(u64, Vec<u8>)]) {
    let (tx, rx) = std::sync::mpsc::channel();
    for (off, data) in ws {
        let tx = tx.clone();
        c.start_write(
            *off,
            data,
            Instant::now() + Duration::from_secs(60),
            Box::new(move |r| tx.send(r.map(|_| ())).unwrap()),
        )
        .expect("send write");
    }
    for _ in ws {
        rx.recv().unwrap().expect("client write");
    }
    c.flush(Duration::from_secs(60)).expect("client flush");
}

/// What the array holds after `ws`.
fn apply(model: &mut [u8], ws: &[(u64, Vec<u8>)]) {
    for (off, data) in ws {
        model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
    }
}

fn backlog(d: &std::path::Path) -> u64 {
    member(d, 1)["write_behind_backlog"].as_u64().unwrap_or(0)
}

#[test]
fn queued_request_buffers_reach_both_legs_exactly_through_a_stall_and_a_failure() {
    let Some(bin) = Program::Nbdkit.available("write_behind_nbd") else {
        return;
    };
    let td = TempDir::new("rk-wbnbd").unwrap();
    let d = td.path();
    sparse(d, "local.img", MEMBER_BYTES);
    let mut remote = Remote::new(Program::Nbdkit, bin, d, "r", MEMBER_BYTES);
    remote.start();
    let uri = remote.uri();
    create(
        d,
        "1",
        &["local.img", &uri],
        &["--write-mostly", &uri, "--write-behind", "256"],
    );
    let _server = serve(d, &["local.img", &uri]);
    let c = client(d);
    let mut model = vec![0u8; (MEMBER_BYTES - 2 * MIB) as usize];

    // Every region written below first, so its bitmap bit is set while the remote is
    // stopped (setting a bit writes the remote's bitmap synchronously).
    let pre = [(0, proc::xorshift_bytes(20 * MIB as usize, 99))];
    write_all(&c, &pre);
    apply(&mut model, &pre);

    // The remote stalls (well inside its deadline): the writes are acknowledged and
    // wait in the queue, holding their request buffers; rewrites of the same ranges
    // follow them in order.
    let first = writes(1, 0);
    let again = writes(2, MIB / 2);
    remote.signal("STOP");
    write_all(&c, &first);
    write_all(&c, &again);
    let queued = backlog(d);
    remote.signal("CONT");
    apply(&mut model, &first);
    apply(&mut model, &again);
    assert!(queued > 0, "nothing was queued behind the stalled remote");
    proc::wait_for("the queue drained", 30, || backlog(d) == 0);
    assert_eq!(member(d, 1)["state"], "in_sync");
    let n = model.len();
    assert!(
        same_prefix(&data_area(&d.join("local.img"))[..n], &model),
        "local leg"
    );
    assert!(
        same_prefix(&data_area(&remote.backing)[..n], &model),
        "remote leg"
    );

    // The remote stops for good with writes queued: its deadline fails it, the local
    // leg and the array keep every byte.
    remote.signal("STOP");
    let later = writes(3, 12 * MIB);
    write_all(&c, &later);
    apply(&mut model, &later);
    wait_event(d, "member_disconnected", 30);
    proc::wait_for("the queue emptied", 30, || backlog(d) == 0);
    assert_eq!(member(d, 1)["state"], "failed");
    assert!(
        same_prefix(&data_area(&d.join("local.img"))[..n], &model),
        "local leg"
    );
    assert!(read(&c, 0, n) == model, "array read");
    remote.signal("CONT");
}
