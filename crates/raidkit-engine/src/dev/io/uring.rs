//! File and block-device IOs through io_uring: one ring per thread (made on first use),
//! so a batch is submitted and waited for with one `io_uring_enter`, without handing
//! anything to another thread.

use super::{finish_short, op_name, sync_fd, timed_out, IoOp, IoReq};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::io;
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// Submission queue entries of a thread's ring (a batch larger than this is submitted in
/// parts).
const ENTRIES: u32 = 128;
/// `user_data` of cancel requests (their completions are ignored).
const CANCEL: u64 = u64::MAX;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Can this process make an io_uring (not disabled by sysctl, not refused by seccomp)?
pub(super) fn available() -> bool {
    match IoUring::new(4) {
        Ok(_) => true,
        Err(e) => {
            eprintln!(
                "raidkit: io_uring is not available ({e}); member IO uses a pool of IO threads"
            );
            false
        }
    }
}

/// Run the batch's descriptor IOs (`fds`: index into `reqs`, descriptor). Err if no ring
/// could be made (nothing was submitted; the caller uses the IO threads).
pub(super) fn run(
    reqs: &mut [IoReq<'_>],
    fds: &[(usize, RawFd)],
    on_late: &mut dyn FnMut(usize),
) -> io::Result<()> {
    RING.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = Some(new_ring()?);
            }
            match slot.as_mut() {
                Some(ring) => {
                    run_on(ring, reqs, fds, on_late);
                    Ok(())
                }
                None => Err(io::Error::other("no ring")),
            }
        }
        // A batch started from inside another one's `on_late` (failing a member writes
        // superblocks): a ring of its own.
        Err(_) => {
            let mut ring = new_ring()?;
            run_on(&mut ring, reqs, fds, on_late);
            Ok(())
        }
    })
}

fn new_ring() -> io::Result<IoUring> {
    IoUring::builder().build(ENTRIES).inspect_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) {
            super::give_up_io_uring();
        }
    })
}

/// What happened to one descriptor IO of the batch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    InFlight,
    Late,
    Done,
}

fn run_on(
    ring: &mut IoUring,
    reqs: &mut [IoReq<'_>],
    fds: &[(usize, RawFd)],
    on_late: &mut dyn FnMut(usize),
) {
    let mut state = vec![State::Queued; fds.len()];
    let mut left = fds.len();
    let mut next = 0;
    while left > 0 {
        // Queue what fits.
        while next < fds.len() {
            let (i, fd) = fds[next];
            let entry = sqe(fd, &mut reqs[i].op, reqs[i].offset).user_data(next as u64);
            // SAFETY: the entry points into `reqs[i].op`'s buffer, which is borrowed for
            // the whole batch; this function does not return before the kernel has
            // completed (or cancelled) every entry it was given.
            if unsafe { ring.submission().push(&entry) }.is_err() {
                break;
            }
            state[next] = State::InFlight;
            next += 1;
        }
        let wait = earliest(reqs, fds, &state);
        let r = match wait {
            Some(at) => {
                let d = at.saturating_duration_since(Instant::now());
                let ts = types::Timespec::from(d.max(Duration::from_micros(1)));
                let args = types::SubmitArgs::new().timespec(&ts);
                ring.submitter().submit_with_args(1, &args)
            }
            None => ring.submit_and_wait(1),
        };
        match r {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) => {}
            Err(e) => {
                // The ring is unusable: what is still queued (never submitted) runs with
                // plain syscalls; what is in flight is waited for below.
                for k in 0..fds.len() {
                    if state[k] == State::Queued {
                        let (i, fd) = fds[k];
                        let res =
                            sync_fd(fd, &mut reqs[i].op, reqs[i].offset).map_err(|_| e_copy(&e));
                        reqs[i].finish(res, Instant::now());
                        state[k] = State::Done;
                        left -= 1;
                    }
                }
            }
        }
        left -= reap(ring, reqs, fds, &mut state);
        // Deadlines: report late IOs and ask the kernel to cancel them.
        let now = Instant::now();
        for k in 0..fds.len() {
            let i = fds[k].0;
            if state[k] == State::InFlight && now >= reqs[i].deadline {
                state[k] = State::Late;
                on_late(i);
                let cancel = opcode::AsyncCancel::new(k as u64).build().user_data(CANCEL);
                // SAFETY: a cancel request carries no buffer.
                let _ = unsafe { ring.submission().push(&cancel) };
            }
        }
    }
}

fn e_copy(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

/// The earliest deadline of the IOs in flight and not yet late.
fn earliest(reqs: &[IoReq<'_>], fds: &[(usize, RawFd)], state: &[State]) -> Option<Instant> {
    fds.iter()
        .zip(state)
        .filter(|(_, s)| **s == State::InFlight)
        .map(|((i, _), _)| reqs[*i].deadline)
        .min()
}

/// Take the completions that are there; returns how many IOs of the batch finished.
fn reap(
    ring: &mut IoUring,
    reqs: &mut [IoReq<'_>],
    fds: &[(usize, RawFd)],
    state: &mut [State],
) -> usize {
    let done: Vec<(u64, i32)> = ring
        .completion()
        .map(|c| (c.user_data(), c.result()))
        .collect();
    let mut finished = 0;
    for (k, res) in done {
        let Some(&(i, fd)) = fds.get(k as usize) else {
            continue; // a cancel's own completion
        };
        let k = k as usize;
        let was_late = state[k] == State::Late;
        if state[k] == State::Done {
            continue;
        }
        state[k] = State::Done;
        finished += 1;
        let r = &mut reqs[i];
        let out = if was_late {
            Err(timed_out(r.dev, op_name(&r.op), r.timeout))
        } else if res < 0 {
            let e = io::Error::from_raw_os_error(-res);
            if matches!(-res, libc::EAGAIN | libc::EINTR) {
                sync_fd(fd, &mut r.op, r.offset)
            } else {
                Err(e)
            }
        } else if res as usize == r.op.len() || matches!(r.op, IoOp::Flush) {
            Ok(())
        } else {
            finish_short(fd, &mut r.op, r.offset, res as usize)
        };
        let at = if was_late { r.deadline } else { Instant::now() };
        r.finish(out, at);
    }
    finished
}

/// The submission entry of one IO.
fn sqe(fd: RawFd, op: &mut IoOp<'_>, offset: u64) -> io_uring::squeue::Entry {
    let fd = types::Fd(fd);
    match op {
        IoOp::Read(b) => opcode::Read::new(fd, b.as_mut_ptr(), b.len() as u32)
            .offset(offset)
            .build(),
        IoOp::Write(b) => opcode::Write::new(fd, b.as_ptr(), b.len() as u32)
            .offset(offset)
            .build(),
        IoOp::Flush => opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build(),
    }
}
