use super::large::lanes_for;
use super::*;
use crate::dev::fault::{FaultDev, Rule};
use crate::dev::{FileDev, MemDev};
use std::os::unix::io::AsRawFd;

/// `BlockDev` for a test device that takes IO only through its submission path (`size`:
/// its size in bytes, from the device; `submission`: how IO reaches it, by default its
/// `AsyncDev`): plain reads and writes are never called.
macro_rules! async_only_dev {
    ($t:ty, $name:literal, $size:expr) => {
        async_only_dev!($t, $name, $size, |d| Submission::Async(d));
    };
    ($t:ty, $name:literal, $size:expr, $submission:expr) => {
        impl BlockDev for $t {
            fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
                unreachable!()
            }
            fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
                unreachable!()
            }
            fn flush(&self) -> io::Result<()> {
                Ok(())
            }
            fn size_bytes(&self) -> u64 {
                let size: fn(&$t) -> u64 = $size;
                size(self)
            }
            fn name(&self) -> &str {
                $name
            }
            fn submission(&self) -> Submission<'_> {
                let submission: fn(&$t) -> Submission<'_> = $submission;
                submission(self)
            }
        }
    };
}

pub(super) fn temp_file(name: &str, len: u64) -> (std::path::PathBuf, FileDev) {
    let dir = std::env::temp_dir().join(format!("rk-io-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join("m");
    std::fs::File::create(&p)
        .and_then(|f| f.set_len(len))
        .expect("member file");
    let d = FileDev::open(&p, true).expect("open");
    (dir, d)
}

pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Writes then reads of several regions in one batch each, through `runner` (the ring or
/// the pool), exact bytes back; a read past the end is an error of that IO alone.
/// A way of running a batch's descriptor IOs (the ring or the IO threads).
type Runner = fn(&mut [IoReq<'_>], &[(usize, RawFd)], &mut dyn FnMut(usize));

fn batch_round_trip(runner: Runner) {
    let (dir, d) = temp_file("rt", 1 << 20);
    let fd = d.file.as_raw_fd();
    let t = Duration::from_secs(5);
    let data: Vec<Vec<u8>> = (0..6).map(|k| pattern(4096 * (k + 1), k as u8)).collect();
    let mut reqs: Vec<IoReq<'_>> = data
        .iter()
        .enumerate()
        .map(|(k, b)| IoReq::new(&d, (k as u64) << 16, IoOp::Write(b), t))
        .collect();
    let fds: Vec<(usize, RawFd)> = (0..reqs.len()).map(|i| (i, fd)).collect();
    runner(&mut reqs, &fds, &mut |_| panic!("late"));
    for r in &mut reqs {
        r.take_result().expect("write");
    }
    let mut bufs: Vec<Vec<u8>> = data.iter().map(|b| vec![0u8; b.len()]).collect();
    let mut reqs: Vec<IoReq<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(k, b)| IoReq::new(&d, (k as u64) << 16, IoOp::Read(b), t))
        .collect();
    let mut past = vec![0u8; 8192];
    reqs.push(IoReq::new(&d, (1 << 20) - 4096, IoOp::Read(&mut past), t));
    reqs.push(IoReq::new(&d, 0, IoOp::Flush, t));
    let fds: Vec<(usize, RawFd)> = (0..reqs.len()).map(|i| (i, fd)).collect();
    runner(&mut reqs, &fds, &mut |_| panic!("late"));
    let results: Vec<io::Result<()>> = reqs.iter_mut().map(|r| r.take_result()).collect();
    drop(reqs);
    for (k, b) in bufs.iter().enumerate() {
        assert!(results[k].is_ok(), "read {k}: {:?}", results[k]);
        assert!(b == &data[k], "read {k}: wrong bytes");
    }
    let e = results[6].as_ref().expect_err("read past the end");
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    results[7].as_ref().expect("flush");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn io_uring_batches_read_and_write_exact_bytes() {
    if !uring::available() {
        eprintln!("SKIP: io_uring is not available here");
        return;
    }
    batch_round_trip(|r, f, l| uring::run(r, f, l).expect("ring"));
}

#[test]
fn io_threads_batch_read_and_write_exact_bytes() {
    batch_round_trip(pool::run);
}

#[test]
fn run_checks_bounds_before_submitting() {
    let (dir, d) = temp_file("bounds", 8192);
    let data = [1u8; 4096];
    let mut r = [IoReq::new(
        &d,
        8192,
        IoOp::Write(&data),
        Duration::from_secs(1),
    )];
    run(&mut r, &mut |_| {});
    let e = r[0].take_result().expect_err("write past the end");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        std::fs::metadata(dir.join("m")).unwrap().len(),
        8192,
        "file grew"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A device whose IOs complete only when the test says so (or never: a black hole).
struct Held {
    ios: Mutex<Vec<AsyncIo>>,
    size: u64,
}

async_only_dev!(Held, "held", |d| d.size);

impl AsyncDev for Held {
    fn start(&self, io: AsyncIo) -> Started {
        crate::locks::lock(&self.ios).push(io);
        Started::Pending
    }
}

#[test]
fn a_black_hole_misses_its_deadline_and_never_touches_the_buffer_after() {
    let held = Arc::new(Held {
        ios: Mutex::new(Vec::new()),
        size: 1 << 20,
    });
    let mem = MemDev::new("m", 1 << 20);
    let mut a = vec![0u8; 4096];
    let mut b = vec![7u8; 4096];
    let t0 = Instant::now();
    let mut reqs = [
        IoReq::new(&mem, 0, IoOp::Read(&mut a), Duration::from_secs(5)),
        IoReq::new(&*held, 0, IoOp::Read(&mut b), Duration::from_millis(200)),
    ];
    run(&mut reqs, &mut |_| {
        panic!("nothing of the kernel's is late")
    });
    let waited = t0.elapsed();
    reqs[0].take_result().expect("memory read");
    let e = reqs[1].take_result().expect_err("black hole");
    assert!(is_timeout(&e), "{e}");
    assert!(e.to_string().contains("within 200 ms"), "{e}");
    assert!(
        (Duration::from_millis(200)..Duration::from_secs(3)).contains(&waited),
        "waited {waited:?}"
    );
    drop(reqs);
    // The device answers late: its access to the buffer was revoked.
    let io = crate::locks::lock(&held.ios)
        .pop()
        .expect("the IO reached the device");
    assert!(!io.with_read_buf(|buf| buf.fill(0xee)));
    io.complete(Ok(()));
    assert!(
        b.iter().all(|&x| x == 7),
        "a late completion wrote the buffer"
    );
}

#[test]
fn an_async_device_completing_from_another_thread_fills_the_buffer() {
    let held = Arc::new(Held {
        ios: Mutex::new(Vec::new()),
        size: 1 << 20,
    });
    let h2 = Arc::clone(&held);
    let answer = std::thread::spawn(move || {
        for _ in 0..500 {
            if let Some(io) = crate::locks::lock(&h2.ios).pop() {
                assert_eq!(io.kind, AsyncKind::Read(4096));
                assert_eq!(io.offset, 8192);
                assert!(io.with_read_buf(|b| b.copy_from_slice(&pattern(4096, 3))));
                io.complete(Ok(()));
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("no IO arrived");
    });
    let mut buf = vec![0u8; 4096];
    let mut r = [IoReq::new(
        &*held,
        8192,
        IoOp::Read(&mut buf),
        Duration::from_secs(10),
    )];
    run(&mut r, &mut |_| {});
    r[0].take_result().expect("read");
    drop(r);
    answer.join().unwrap();
    assert_eq!(buf, pattern(4096, 3));
}

#[test]
fn modelled_members_serve_one_batch_at_once_and_late_ones_time_out() {
    let slow = |ms: u64| {
        FaultDev::new(
            Box::new(MemDev::new("m", 1 << 20)),
            vec![Rule::Slow(Duration::from_millis(ms))],
        )
    };
    let devs: Vec<FaultDev> = (0..4).map(|_| slow(100)).collect();
    let mut bufs = vec![vec![0u8; 4096]; 4];
    let t0 = Instant::now();
    let mut reqs: Vec<IoReq<'_>> = devs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(d, b)| IoReq::new(d, 0, IoOp::Read(b), Duration::from_secs(5)))
        .collect();
    run(&mut reqs, &mut |_| {});
    let took = t0.elapsed();
    for r in &mut reqs {
        r.take_result().expect("read");
    }
    // In service on all four at once: one latency, not four.
    assert!(
        (Duration::from_millis(100)..Duration::from_millis(350)).contains(&took),
        "4 modelled reads of 100 ms took {took:?}"
    );
    // A member that takes 20 s misses a 150 ms deadline; the batch returns then.
    let dead = slow(20_000);
    let fast = slow(10);
    let (mut a, mut b) = (vec![0u8; 512], vec![0u8; 512]);
    let t0 = Instant::now();
    let mut reqs = [
        IoReq::new(&dead, 0, IoOp::Read(&mut a), Duration::from_millis(150)),
        IoReq::new(&fast, 0, IoOp::Read(&mut b), Duration::from_millis(150)),
    ];
    run(&mut reqs, &mut |_| {});
    let took = t0.elapsed();
    assert!(is_timeout(&reqs[0].take_result().expect_err("late")));
    reqs[1].take_result().expect("in time");
    assert!(
        took < Duration::from_secs(2),
        "waited {took:?} for a 20 s member"
    );
}

#[test]
fn a_hung_kernel_io_is_reported_late_then_cancelled() {
    if !uring::available() {
        eprintln!("SKIP: io_uring is not available here");
        return;
    }
    // A pipe nobody writes to: the read hangs in the kernel.
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    struct Pipe(RawFd);
    async_only_dev!(Pipe, "pipe", |_| 1 << 20, |p| Submission::Fd {
        fd: p.0,
        in_memory: false,
    });
    let dev = Pipe(fds[0]);
    let mut buf = vec![0u8; 512];
    let mut late = Vec::new();
    let t0 = Instant::now();
    let mut r = [IoReq::new(
        &dev,
        0,
        IoOp::Read(&mut buf),
        Duration::from_millis(100),
    )];
    uring::run(&mut r, &[(0, fds[0])], &mut |i| {
        late.push((i, t0.elapsed()))
    })
    .expect("ring");
    let e = r[0].take_result().expect_err("hung read");
    assert!(is_timeout(&e), "{e}");
    assert_eq!(late.len(), 1);
    assert!(late[0].1 >= Duration::from_millis(100), "{late:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // SAFETY: closing the descriptors this test opened.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// By default a batch's large writes go to the lanes only while every batch in progress
/// can have two cores: alone on 2 cores, yes; beside another on 2 cores, inline; up to 4
/// at once on 8 cores. The forced paths ignore the count.
#[test]
fn large_writes_use_the_lanes_while_cores_are_free() {
    use LargeWrites::*;
    let cases = [
        (Auto, 0, 2, true),
        (Auto, 1, 2, false),
        (Auto, 0, 1, false),
        (Auto, 3, 8, true),
        (Auto, 4, 8, false),
        (Auto, usize::MAX, 8, false),
        (Lanes, 5, 2, true),
        (Inline, 0, 8, false),
        (Ring, 0, 8, false),
    ];
    for (path, others, cores, want) in cases {
        assert_eq!(
            lanes_for(path, others, cores),
            want,
            "{path:?} {others} others, {cores} cores"
        );
    }
}

/// Large writes of a batch go to the writer lanes: writes to one file keep their order
/// (the later of two overlapping writes wins), every file gets exact bytes, and a write
/// that fails (a descriptor open for reading only) fails alone.
#[test]
fn large_writes_go_to_the_lanes_in_order_and_fail_alone() {
    let (dir_a, a) = temp_file("lane-a", 4 << 20);
    let (dir_b, b) = temp_file("lane-b", 4 << 20);
    let ro = FileDev::open(&dir_b.join("m"), false).expect("read-only");
    let t = Duration::from_secs(30);
    let big = LARGE_WRITE_BYTES * 2;
    let first = pattern(big, 1);
    let second = pattern(big, 2);
    let other = pattern(big, 3);
    let lost = pattern(big, 4);
    let small = pattern(4096, 5);
    let mut reqs = vec![
        IoReq::new(&a, 0, IoOp::Write(&first), t),
        IoReq::new(&b, 1 << 20, IoOp::Write(&other), t),
        IoReq::new(&ro, 2 << 20, IoOp::Write(&lost), t),
        IoReq::new(&a, 0, IoOp::Write(&second), t),
        IoReq::new(&a, 3 << 20, IoOp::Write(&small), t),
    ];
    assert_eq!(large_writes(&reqs), 4);
    run(&mut reqs, &mut |i| panic!("IO {i} late"));
    let results: Vec<io::Result<()>> = reqs.iter_mut().map(|r| r.take_result()).collect();
    drop(reqs);
    for k in [0, 1, 3, 4] {
        assert!(results[k].is_ok(), "write {k}: {:?}", results[k]);
    }
    let e = results[2]
        .as_ref()
        .expect_err("a write to a read-only descriptor");
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    let mut back = vec![0u8; big];
    a.read_at(&mut back, 0).expect("read a");
    assert!(
        back == second,
        "the later of two writes to one file must win"
    );
    b.read_at(&mut back, 1 << 20).expect("read b");
    assert!(back == other);
    b.read_at(&mut back, 2 << 20).expect("read b");
    assert!(
        back.iter().all(|&x| x == 0),
        "the failed write wrote nothing"
    );
    let mut s = vec![0u8; 4096];
    a.read_at(&mut s, 3 << 20).expect("read a");
    assert!(s == small);
    drop((a, b, ro));
    let _ = std::fs::remove_dir_all(dir_a);
    let _ = std::fs::remove_dir_all(dir_b);
}

/// A lane IO past its deadline is reported late at once, and the batch still returns
/// only when the lane is done with its memory (the bytes are all written).
#[test]
fn a_late_lane_write_is_reported_and_its_memory_waited_for() {
    let (dir, d) = temp_file("lane-late", 96 << 20);
    let fd = d.file.as_raw_fd();
    let ahead = pattern(64 << 20, 6);
    let behind = pattern(LARGE_WRITE_BYTES, 7);
    let mut seen_late = false;
    for _ in 0..10 {
        // A long write holds the file's lane; the one queued behind it is due at once.
        let mut reqs = [
            IoReq::new(&d, 0, IoOp::Write(&ahead), Duration::from_secs(30)),
            IoReq::new(&d, 80 << 20, IoOp::Write(&behind), Duration::ZERO),
        ];
        let fds = [(0, fd), (1, fd)];
        let mut late = Vec::new();
        pool::submit(&mut reqs, &fds, pool::lane).wait(&mut reqs, &mut |i| late.push(i));
        let r1 = reqs[1].take_result();
        reqs[0].take_result().expect("the long write");
        match late[..] {
            [] => r1.expect("not late: written"),
            [1] => {
                let e = r1.expect_err("late");
                assert!(is_timeout(&e), "{e}");
                seen_late = true;
            }
            _ => panic!("late: {late:?}"),
        }
        // Whatever the verdict, the lane finished with the memory before the batch returned.
        let mut back = vec![0u8; behind.len()];
        d.read_at(&mut back, 80 << 20).expect("read");
        assert!(back == behind);
        if seen_late {
            break;
        }
    }
    assert!(seen_late, "the write queued behind 64 MiB was never late");
    drop(d);
    let _ = std::fs::remove_dir_all(dir);
}

/// A device that sends a write's data from the caller's memory in `start` and completes
/// the IO within the send (as a network member whose send fails does), or, if `hold`,
/// keeps the IO for another thread.
struct Sends {
    got: Mutex<Vec<u8>>,
    held: Mutex<Vec<AsyncIo>>,
    hold: bool,
}

async_only_dev!(Sends, "sends", |_| 1 << 20);

impl AsyncDev for Sends {
    fn start(&self, io: AsyncIo) -> Started {
        if self.hold {
            crate::locks::lock(&self.held).push(io);
            return Started::Pending;
        }
        let sent = io.send_write_data(|d, io| {
            crate::locks::lock(&self.got).extend_from_slice(d);
            io.complete(Ok(()));
        });
        match sent {
            Ok(()) => Started::Pending,
            Err(_) => Started::Done(Err(io::Error::other("not sent")), None),
        }
    }
}

#[test]
fn a_write_sent_from_the_callers_memory_in_start_may_complete_within_the_send() {
    let dev = Sends {
        got: Mutex::new(Vec::new()),
        held: Mutex::new(Vec::new()),
        hold: false,
    };
    let data = pattern(8192, 5);
    let mut r = [IoReq::new(
        &dev,
        0,
        IoOp::Write(&data),
        Duration::from_secs(5),
    )];
    run(&mut r, &mut |_| {});
    r[0].take_result().expect("written");
    assert_eq!(*crate::locks::lock(&dev.got), data);
}

#[test]
fn a_write_is_not_sent_from_the_callers_memory_off_the_batch_thread() {
    let dev = Arc::new(Sends {
        got: Mutex::new(Vec::new()),
        held: Mutex::new(Vec::new()),
        hold: true,
    });
    let d2 = Arc::clone(&dev);
    let other = std::thread::spawn(move || {
        for _ in 0..500 {
            if let Some(io) = crate::locks::lock(&d2.held).pop() {
                // Off the batch's thread: refused, then sent through the locked access.
                let io = io
                    .send_write_data(|_, _| ())
                    .expect_err("not the batch thread");
                let mut copy = Vec::new();
                assert!(io.with_write_data(|d| copy = d.to_vec()));
                io.complete(Ok(()));
                return copy;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("no IO arrived");
    });
    let data = pattern(4096, 9);
    let mut r = [IoReq::new(
        &*dev,
        0,
        IoOp::Write(&data),
        Duration::from_secs(10),
    )];
    run(&mut r, &mut |_| {});
    r[0].take_result().expect("written");
    assert_eq!(other.join().unwrap(), data);
}

/// An asynchronous device (a network member) that, when its IO starts, looks at what the
/// batch's other member (a file) holds where the batch writes it, then completes.
struct Peeks {
    file: std::fs::File,
    seen: Mutex<Vec<u8>>,
}

async_only_dev!(Peeks, "peeks", |_| 1 << 20);

impl AsyncDev for Peeks {
    fn start(&self, io: AsyncIo) -> Started {
        use std::os::unix::fs::FileExt;
        let mut b = vec![0u8; 4096];
        self.file.read_exact_at(&mut b, io.offset).expect("peek");
        *crate::locks::lock(&self.seen) = b;
        Started::Done(Ok(()), None)
    }
}

#[test]
fn a_network_members_io_starts_before_the_batchs_inline_file_writes() {
    // A mirror's batch as `write_mapped` makes it: the local copy first, then the remote.
    let (dir, local) = temp_file("order", 1 << 20);
    let remote = Peeks {
        file: std::fs::File::open(dir.join("m")).expect("open"),
        seen: Mutex::new(Vec::new()),
    };
    let data = pattern(4096, 3);
    let t = Duration::from_secs(5);
    let mut reqs = [
        IoReq::new(&local, 8192, IoOp::Write(&data), t),
        IoReq::new(&remote, 8192, IoOp::Write(&data), t),
    ];
    run(&mut reqs, &mut |_| panic!("late"));
    for r in &mut reqs {
        r.take_result().expect("written");
    }
    let seen = crate::locks::lock(&remote.seen).clone();
    assert_eq!(seen.len(), 4096, "the remote's IO was started");
    assert!(
        seen.iter().all(|&b| b == 0),
        "the local write was made before the remote's IO started"
    );
    let local_now = std::fs::read(dir.join("m")).expect("read");
    assert!(
        local_now[8192..12288] == data[..],
        "the local write was made"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_network_members_large_write_does_not_send_the_files_write_to_a_lane() {
    // One local file and one remote, as a mirror's batch: one large descriptor write, so
    // the file is written inline (after the remote's IO has started), not on a lane.
    let (dir, local) = temp_file("no-lane", 1 << 20);
    let remote = Peeks {
        file: std::fs::File::open(dir.join("m")).expect("open"),
        seen: Mutex::new(Vec::new()),
    };
    let data = pattern(LARGE_WRITE_BYTES * 2, 4);
    let t = Duration::from_secs(5);
    let mut reqs = [
        IoReq::new(&local, 0, IoOp::Write(&data), t),
        IoReq::new(&remote, 0, IoOp::Write(&data), t),
    ];
    assert_eq!(large_writes(&reqs), 1, "the remote's write is not a lane's");
    run(&mut reqs, &mut |_| panic!("late"));
    for r in &mut reqs {
        r.take_result().expect("written");
    }
    let seen = crate::locks::lock(&remote.seen).clone();
    assert!(
        seen.iter().all(|&b| b == 0),
        "the local write was made before the remote's IO started"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A directory of files on tmpfs (None where /dev/shm is not one: the kernel copy is
/// only made from files in memory).
fn shm_dir(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new("/dev/shm").join(format!("rk-io-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let probe = dir.join("probe");
    std::fs::write(&probe, b"x").ok()?;
    let in_memory = FileDev::open(&probe, false).is_ok_and(|d| d.submission().in_memory());
    if !in_memory {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return None;
    }
    Some(dir)
}

fn file_with(dir: &std::path::Path, name: &str, bytes: &[u8], write: bool) -> FileDev {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("member file");
    FileDev::open(&p, write).expect("open")
}

#[test]
fn a_kernel_copy_moves_exactly_its_range_in_several_pipe_rounds() {
    let Some(dir) = shm_dir("splice") else { return };
    // More than the pipe holds (1 MiB), not a multiple of it, at different offsets.
    let len = (3 << 20) + 4096;
    let src_bytes = pattern(len + 8192, 9);
    let src = file_with(&dir, "src", &src_bytes, false);
    let dst = file_with(&dir, "dst", &vec![0u8; len + 16384], true);
    let before = kernel_copied_bytes();
    let t = copy_in_kernel(&src, 4096, &dst, 12288, len)
        .expect("a copy between tmpfs files is made in the kernel")
        .expect("copied");
    assert!(kernel_copied_bytes() - before >= len as u64);
    assert!(t.read + t.write > Duration::ZERO);
    let got = std::fs::read(dir.join("dst")).expect("read");
    assert!(got[..12288].iter().all(|&b| b == 0), "before the range");
    assert!(
        got[12288..12288 + len] == src_bytes[4096..4096 + len],
        "the range"
    );
    assert!(
        got[12288 + len..].iter().all(|&b| b == 0),
        "after the range"
    );
    // Past the end of either device: an error, nothing copied.
    assert!(matches!(
        copy_in_kernel(&src, 8192 + 4096, &dst, 0, len),
        Some(Err(_))
    ));
    assert!(matches!(
        copy_in_kernel(&src, 0, &dst, 16384 + 4096, len),
        Some(Err(_))
    ));
    let _ = std::fs::remove_dir_all(dir);
}

/// From an offset inside a page, a pipe's capacity in bytes spans one page more than the
/// pipe has slots: the copy must take out what went in before it splices again (it used
/// to splice into the full pipe and wait for itself for ever).
#[test]
fn a_kernel_copy_from_inside_a_page_finishes_and_is_exact() {
    let Some(dir) = shm_dir("splice-unaligned") else {
        return;
    };
    let len = (2 << 20) + 1536;
    let src_bytes = pattern(len + 8192, 7);
    // The pattern repeats every 256 bytes: make the halves differ, so a byte copied from
    // the wrong place shows.
    let src_bytes: Vec<u8> = src_bytes
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ (i / 4096) as u8)
        .collect();
    drop(file_with(&dir, "src", &src_bytes, false));
    drop(file_with(&dir, "dst", &vec![0u8; len + 8192], true));
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || {
        let src = FileDev::open(&d.join("src"), false).expect("open");
        let dst = FileDev::open(&d.join("dst"), true).expect("open");
        let r = copy_in_kernel(&src, 512, &dst, 3584, len).map(|r| r.map(|_| ()));
        let _ = tx.send(r.map(|r| r.map_err(|e| e.to_string())));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the copy finished (it hung on a full pipe)");
    assert!(matches!(r, Some(Ok(()))), "{r:?}");
    let got = std::fs::read(dir.join("dst")).expect("read");
    assert!(got[..3584].iter().all(|&b| b == 0), "before the range");
    assert!(
        got[3584..3584 + len] == src_bytes[512..512 + len],
        "the range"
    );
    assert!(got[3584 + len..].iter().all(|&b| b == 0), "after the range");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_kernel_copy_that_failed_half_way_leaves_nothing_for_the_next_one() {
    let Some(dir) = shm_dir("splice-fail") else {
        return;
    };
    let len = 256 << 10;
    // Two halves that differ (the pattern repeats every 256 bytes).
    let mut src_bytes = pattern(len, 3);
    src_bytes.extend(pattern(len, 101));
    let src = file_with(&dir, "src", &src_bytes, false);
    // Opened read-only: the pipe is filled from the source, then the write fails.
    let ro = file_with(&dir, "ro", &vec![0u8; len], false);
    assert!(matches!(copy_in_kernel(&src, 0, &ro, 0, len), Some(Err(_))));
    // The next copy (of other bytes) writes those bytes, not what the failed one left.
    let dst = file_with(&dir, "dst", &vec![0u8; len], true);
    copy_in_kernel(&src, len as u64, &dst, 0, len)
        .expect("made in the kernel")
        .expect("copied");
    let got = std::fs::read(dir.join("dst")).expect("read");
    assert!(got == src_bytes[len..], "the second copy's own bytes");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_kernel_copy_is_not_made_from_a_device_that_is_not_a_file_in_memory() {
    let Some(dir) = shm_dir("splice-no") else {
        return;
    };
    let mem = crate::dev::MemDev::new("m", 1 << 20);
    let dst = file_with(&dir, "dst", &vec![0u8; 1 << 20], true);
    assert!(copy_in_kernel(&mem, 0, &dst, 0, 4096).is_none());
    assert!(copy_in_kernel(&dst, 0, &mem, 0, 4096).is_none());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_batchs_small_inline_writes_share_one_completion_stamp() {
    // A mirrored 4 KiB write's batch: one copy per member file, written inline, then one
    // clock read for both; a read in the batch keeps its own stamp.
    let (dir_a, a) = temp_file("stamp-a", 1 << 20);
    let (dir_b, b) = temp_file("stamp-b", 1 << 20);
    let data = pattern(4096, 9);
    let mut back = vec![0u8; 4096];
    let t = Duration::from_secs(5);
    let before = Instant::now();
    let mut reqs = [
        IoReq::new(&a, 4096, IoOp::Write(&data), t),
        IoReq::new(&b, 4096, IoOp::Write(&data), t),
        IoReq::new(&a, 0, IoOp::Read(&mut back), t),
    ];
    run(&mut reqs, &mut |_| panic!("late"));
    let stamps: Vec<Instant> = reqs.iter().map(|r| r.done_at.expect("stamped")).collect();
    for r in &mut reqs {
        r.take_result().expect("done");
    }
    assert_eq!(stamps[0], stamps[1], "the two copies share one stamp");
    assert!(stamps[0] >= before && stamps[2] >= before);
    assert!(
        stamps[2] <= stamps[0],
        "the read was stamped when it completed, before the writes' shared stamp"
    );
    for dir in [&dir_a, &dir_b] {
        let now = std::fs::read(dir.join("m")).expect("read");
        assert!(now[4096..8192] == data[..], "the copy was written");
    }
    let _ = std::fs::remove_dir_all(dir_a);
    let _ = std::fs::remove_dir_all(dir_b);
}
