//! Tests of the writer lanes' wake-ups and of the batch thread's share of the laned writes.

use super::large::keep_callers_share;
use super::tests::{pattern, temp_file};
use super::*;
use std::os::unix::io::AsRawFd;

/// The batch's thread writes its share of the laned writes itself: the writes spread over
/// the batch's cores, the caller one thread, at least one write left to a lane, and only
/// writes to a file no other laned write goes to (one file's writes keep their order).
#[test]
fn the_caller_writes_its_share_of_the_laned_writes() {
    type Laned = [(usize, RawFd)];
    let cases: [(&Laned, usize, &Laned); 6] = [
        // A mirrored 1 MiB write on 2 cores: four copies, two written by the caller.
        (
            &[(0, 10), (1, 11), (2, 12), (3, 13)],
            2,
            &[(0, 10), (1, 11)],
        ),
        // Two copies: one each.
        (&[(0, 10), (1, 11)], 2, &[(0, 10)]),
        // Many cores: the caller takes one, as each lane does.
        (
            &[(0, 10), (1, 11), (2, 12), (3, 13)],
            8,
            &[(0, 10), (1, 11), (2, 12)],
        ),
        // A file with two writes stays on its lane, both writes.
        (
            &[(0, 10), (1, 11), (2, 10), (3, 11)],
            2,
            &[(0, 10), (1, 11), (2, 10), (3, 11)],
        ),
        (
            &[(0, 10), (1, 11), (2, 11), (3, 12)],
            2,
            &[(1, 11), (2, 11)],
        ),
        // One write: nothing to overlap it with, it stays as it was.
        (&[(0, 10)], 2, &[(0, 10)]),
    ];
    for (laned, cores, want) in cases {
        let mut got = laned.to_vec();
        keep_callers_share(&mut got, cores, |_| true);
        assert_eq!(got, want, "{laned:?} on {cores} cores");
    }
    // Writes the caller may not keep (to files not in memory: no deadline would stop
    // its blocking write) stay on their lanes; it keeps others instead.
    let mut got = vec![(0, 10), (1, 11), (2, 12), (3, 13)];
    keep_callers_share(&mut got, 2, |i| i < 2);
    assert_eq!(got, [(2, 12), (3, 13)]);
    let mut got = vec![(0, 10), (1, 11)];
    keep_callers_share(&mut got, 2, |_| false);
    assert_eq!(got, [(0, 10), (1, 11)]);
}

/// A lane job finishing wakes the batch's thread only when it is the last one and the
/// thread sleeps on them: jobs done before it waits wake nobody (each wake-up is a
/// system call).
#[test]
fn lane_jobs_done_before_the_batch_waits_wake_nobody() {
    let (dir_a, a) = temp_file("wake-a", 1 << 20);
    let (dir_b, b) = temp_file("wake-b", 1 << 20);
    let data = pattern(LARGE_WRITE_BYTES, 8);
    let t = Duration::from_secs(30);
    let mut reqs = [
        IoReq::new(&a, 0, IoOp::Write(&data), t),
        IoReq::new(&b, 0, IoOp::Write(&data), t),
    ];
    let fds = [(0, a.file.as_raw_fd()), (1, b.file.as_raw_fd())];
    let pending = pool::submit(&mut reqs, &fds, pool::lane);
    let wakes = loop {
        if let Some(w) = pending.wakes_when_done() {
            break w;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    pending.wait(&mut reqs, &mut |i| panic!("IO {i} late"));
    for r in &mut reqs {
        r.take_result().expect("written");
    }
    assert_eq!(wakes, 0, "nobody slept on the jobs");
    let mut back = vec![0u8; data.len()];
    b.read_at(&mut back, 0).expect("read");
    assert!(back == data);
    let _ = std::fs::remove_dir_all(dir_a);
    let _ = std::fs::remove_dir_all(dir_b);
}

/// A submission wakes a queue's thread only when it sleeps: a job queued while the thread
/// is busy with another is taken when that one is done, with no wake-up (each one is a
/// system call).
#[test]
fn a_job_queued_behind_a_busy_thread_wakes_nobody() {
    static POOL: std::sync::OnceLock<&'static pool::Pool> = std::sync::OnceLock::new();
    fn route(_: RawFd) -> &'static pool::Pool {
        POOL.get_or_init(|| pool::Pool::start("test-wake", 1))
    }
    let (dir, d) = temp_file("queue-wake", 96 << 20);
    let fd = d.file.as_raw_fd();
    let long = pattern(64 << 20, 10);
    let short = pattern(4096, 11);
    let t = Duration::from_secs(30);
    let p = route(fd);
    let mut quiet = false;
    for _ in 0..10 {
        // The thread asleep, then given the long write: one wake-up.
        let t0 = Instant::now();
        while p.idle_and_queued() != (1, 0) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the thread never slept"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = p.wakes();
        let mut first = [IoReq::new(&d, 0, IoOp::Write(&long), t)];
        let busy = pool::submit(&mut first, &[(0, fd)], route);
        // Until the thread has taken it: (0, 0). Back at (1, 0) (submitting made it
        // (1, 1)), the long write was over between two looks: try again.
        let t1 = Instant::now();
        let taken = loop {
            match p.idle_and_queued() {
                (0, 0) => break true,
                (1, 0) => break false,
                _ => {
                    assert!(
                        t1.elapsed() < Duration::from_secs(20),
                        "the job was never taken"
                    );
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        };
        if !taken {
            busy.wait(&mut first, &mut |i| panic!("IO {i} late"));
            first[0].take_result().expect("long write");
            continue;
        }
        // Busy with it: the next job is queued without waking anybody (unless the long
        // write was over already, on a crowded machine: then try again).
        let mut second = [IoReq::new(&d, 80 << 20, IoOp::Write(&short), t)];
        let queued = pool::submit(&mut second, &[(0, fd)], route);
        queued.wait(&mut second, &mut |i| panic!("IO {i} late"));
        busy.wait(&mut first, &mut |i| panic!("IO {i} late"));
        first[0].take_result().expect("long write");
        second[0].take_result().expect("short write");
        let mut back = vec![0u8; short.len()];
        d.read_at(&mut back, 80 << 20).expect("read");
        assert!(back == short);
        if p.wakes() - before == 1 {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "every job queued behind a busy thread woke it");
    let _ = std::fs::remove_dir_all(dir);
}
