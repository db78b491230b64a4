//! File and block-device IOs without io_uring: a small fixed pool of IO threads shared by
//! the whole process (started on first use, never one per request). A batch of one IO
//! runs in the calling thread; a larger batch is handed to the pool and waited for.

use super::{op_name, sync_fd, timed_out, IoOp, IoReq};
use std::collections::VecDeque;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

/// One IO handed to a pool thread. The buffer is the caller's: the batch waits until
/// every job it handed out is finished before it returns.
struct Job {
    fd: RawFd,
    op: RawOp,
    offset: u64,
    done: Arc<Done>,
    index: usize,
}

enum RawOp {
    Read(*mut u8, usize),
    Write(*const u8, usize),
    Flush,
}

// SAFETY: the pointers refer to buffers the submitting batch keeps borrowed (and does not
// touch) until `Done` says the job finished; one job is run by exactly one thread.
unsafe impl Send for Job {}

/// A job's outcome and when it finished.
type Outcome = Option<(io::Result<()>, Instant)>;

/// Completions of one batch.
struct Done {
    st: Mutex<Vec<Outcome>>,
    cv: Condvar,
}

struct Pool {
    queue: Mutex<VecDeque<Job>>,
    cv: Condvar,
}

/// IO threads: two per CPU, 4 to 16.
fn threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cpus).clamp(4, 16)
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let p: &'static Pool = Box::leak(Box::new(Pool {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
        }));
        for n in 0..threads() {
            let spawned = std::thread::Builder::new()
                .name(format!("raidkit-io-{n}"))
                .spawn(move || worker(p));
            if let Err(e) = spawned {
                eprintln!("raidkit: starting IO thread {n}: {e}");
            }
        }
        p
    })
}

fn worker(p: &'static Pool) {
    loop {
        let job = {
            let mut q = crate::locks::lock(&p.queue);
            loop {
                if let Some(j) = q.pop_front() {
                    break j;
                }
                q = crate::locks::wait(&p.cv, q);
            }
        };
        let mut op = match job.op {
            // SAFETY: see `Job`: the buffer is alive and reserved for this job.
            RawOp::Read(ptr, len) => {
                IoOp::Read(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
            }
            // SAFETY: as above, read only.
            RawOp::Write(ptr, len) => IoOp::Write(unsafe { std::slice::from_raw_parts(ptr, len) }),
            RawOp::Flush => IoOp::Flush,
        };
        let r = sync_fd(job.fd, &mut op, job.offset);
        let mut st = crate::locks::lock(&job.done.st);
        st[job.index] = Some((r, Instant::now()));
        drop(st);
        job.done.cv.notify_all();
    }
}

/// Run the batch's descriptor IOs (`fds`: index into `reqs`, descriptor).
pub(super) fn run(reqs: &mut [IoReq<'_>], fds: &[(usize, RawFd)], on_late: &mut dyn FnMut(usize)) {
    if let [(i, fd)] = fds {
        let r = &mut reqs[*i];
        let res = sync_fd(*fd, &mut r.op, r.offset);
        r.finish(res, Instant::now());
        return;
    }
    let done = Arc::new(Done {
        st: Mutex::new((0..fds.len()).map(|_| None).collect()),
        cv: Condvar::new(),
    });
    let p = pool();
    {
        let mut q = crate::locks::lock(&p.queue);
        for (k, &(i, fd)) in fds.iter().enumerate() {
            let r = &mut reqs[i];
            let op = match &mut r.op {
                IoOp::Read(b) => RawOp::Read(b.as_mut_ptr(), b.len()),
                IoOp::Write(b) => RawOp::Write(b.as_ptr(), b.len()),
                IoOp::Flush => RawOp::Flush,
            };
            q.push_back(Job {
                fd,
                op,
                offset: r.offset,
                done: Arc::clone(&done),
                index: k,
            });
        }
    }
    p.cv.notify_all();
    let mut late = vec![false; fds.len()];
    let mut st = crate::locks::lock(&done.st);
    loop {
        if st.iter().all(Option::is_some) {
            break;
        }
        let now = Instant::now();
        let mut next = None::<Instant>;
        for (k, &(i, _)) in fds.iter().enumerate() {
            if st[k].is_some() || late[k] {
                continue;
            }
            if now >= reqs[i].deadline {
                late[k] = true;
                drop(st);
                on_late(i);
                st = crate::locks::lock(&done.st);
            } else {
                next = Some(next.map_or(reqs[i].deadline, |n: Instant| n.min(reqs[i].deadline)));
            }
        }
        if st.iter().all(Option::is_some) {
            break;
        }
        st = match next {
            Some(t) => {
                let d = t.saturating_duration_since(Instant::now());
                crate::locks::wait_timeout(&done.cv, st, d)
            }
            None => crate::locks::wait(&done.cv, st),
        };
    }
    for (k, &(i, _)) in fds.iter().enumerate() {
        let Some((res, at)) = st[k].take() else {
            continue;
        };
        let r = &mut reqs[i];
        if late[k] {
            let e = timed_out(r.dev, op_name(&r.op), r.timeout);
            r.finish(Err(e), r.deadline);
        } else {
            r.finish(res, at);
        }
    }
}
