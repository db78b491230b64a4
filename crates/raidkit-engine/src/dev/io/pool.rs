//! File and block-device IOs handed to threads: a small fixed pool of IO threads shared by
//! the whole process (used without io_uring), and writer lanes for large buffered writes
//! (one thread per lane, a file always on the same lane). Threads start on first use and
//! are never one per request. A batch hands its IOs to the threads and waits for them
//! together; its buffers stay borrowed (and untouched) until every IO it handed out is
//! finished.

use super::{op_name, sync_fd, timed_out, IoOp, IoReq};
use std::collections::VecDeque;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

/// One IO handed to a thread. The buffer is the caller's: the batch waits until every job
/// it handed out is finished before it returns (see [`Pending`]).
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
    st: Mutex<DoneState>,
    cv: Condvar,
    /// Wake-ups of the batch's waiter (for tests).
    #[cfg(test)]
    wakes: std::sync::atomic::AtomicUsize,
}

/// The outcomes of a batch's jobs, and whether its thread sleeps on them: the last job
/// to finish wakes it, and only if it sleeps (a `notify` is a system call even with
/// nobody waiting, and the thread wants all of them anyway).
struct DoneState {
    outcomes: Vec<Outcome>,
    waiting: bool,
}

impl DoneState {
    fn all_done(&self) -> bool {
        self.outcomes.iter().all(Option::is_some)
    }
}

/// Wait for `done`'s next wake-up (at most `d`), marked as sleeping meanwhile.
fn sleep_on<'a>(
    done: &'a Done,
    mut st: std::sync::MutexGuard<'a, DoneState>,
    d: Option<std::time::Duration>,
) -> std::sync::MutexGuard<'a, DoneState> {
    st.waiting = true;
    st = match d {
        Some(d) => crate::locks::wait_timeout(&done.cv, st, d),
        None => crate::locks::wait(&done.cv, st),
    };
    st.waiting = false;
    st
}

/// A queue and the threads that take jobs from it.
pub(super) struct Pool {
    queue: Mutex<Queue>,
    cv: Condvar,
    /// Wake-ups of the queue's threads by submitters (for tests).
    #[cfg(test)]
    wakes: std::sync::atomic::AtomicUsize,
}

/// Jobs waiting for a thread, and the threads sleeping for lack of one (a submitter
/// wakes one only if one sleeps).
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    idle: usize,
}

impl Pool {
    /// A queue served by `threads` new threads named `name-N`.
    pub(super) fn start(name: &str, threads: usize) -> &'static Pool {
        let p: &'static Pool = Box::leak(Box::new(Pool {
            queue: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            #[cfg(test)]
            wakes: Default::default(),
        }));
        for n in 0..threads {
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{n}"))
                .spawn(move || worker(p));
            if let Err(e) = spawned {
                eprintln!("raidkit: starting IO thread {name}-{n}: {e}");
            }
        }
        p
    }
}

/// IO threads: two per CPU, 4 to 16.
fn threads() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cpus).clamp(4, 16)
}

/// The shared pool (IOs without io_uring).
pub(super) fn shared(_fd: RawFd) -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::start("raidkit-io", threads()))
}

/// Writer lanes: a file's large writes always go to the same lane, so no two of them wait
/// for each other on the file's lock (a buffered write holds the inode lock for its whole
/// copy) and the writes of a full stripe are copied by as many threads as it has members.
pub(super) const LANES: usize = 16;

/// The writer lane of descriptor `fd` (its thread starts on first use).
pub(super) fn lane(fd: RawFd) -> &'static Pool {
    static LANE: [OnceLock<&'static Pool>; LANES] = [const { OnceLock::new() }; LANES];
    let i = fd.unsigned_abs() as usize % LANES;
    LANE[i].get_or_init(|| Pool::start(&format!("raidkit-wr{i}"), 1))
}

fn worker(p: &'static Pool) {
    loop {
        let job = {
            let mut q = crate::locks::lock(&p.queue);
            loop {
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                q.idle += 1;
                q = crate::locks::wait(&p.cv, q);
                q.idle -= 1;
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
        st.outcomes[job.index] = Some((r, Instant::now()));
        // A late job's waiter also wakes at its deadline, by itself.
        let wake = st.waiting && st.all_done();
        drop(st);
        if wake {
            #[cfg(test)]
            job.done
                .wakes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            job.done.cv.notify_all();
        }
    }
}

/// IOs of a batch handed to threads and not yet waited for. Dropping it waits for them
/// (the threads use the batch's buffers until then), so an early return or an unwind
/// between [`submit`] and [`Pending::wait`] cannot free a buffer a thread still uses.
pub(super) struct Pending {
    done: Arc<Done>,
    fds: Vec<(usize, RawFd)>,
    /// The outcomes were taken by [`Pending::wait`].
    waited: bool,
}

/// Hand the batch's descriptor IOs `fds` (index into `reqs`, descriptor) to the queues
/// `route` picks for their descriptors; IOs to one queue keep their order.
pub(super) fn submit(
    reqs: &mut [IoReq<'_>],
    fds: &[(usize, RawFd)],
    route: fn(RawFd) -> &'static Pool,
) -> Pending {
    let done = Arc::new(Done {
        st: Mutex::new(DoneState {
            outcomes: (0..fds.len()).map(|_| None).collect(),
            waiting: false,
        }),
        cv: Condvar::new(),
        #[cfg(test)]
        wakes: Default::default(),
    });
    // The queues given jobs, and whether one of their threads sleeps.
    let mut woken: Vec<(&'static Pool, bool)> = Vec::new();
    for (k, &(i, fd)) in fds.iter().enumerate() {
        let r = &mut reqs[i];
        let op = match &mut r.op {
            IoOp::Read(b) => RawOp::Read(b.as_mut_ptr(), b.len()),
            IoOp::Write(b) => RawOp::Write(b.as_ptr(), b.len()),
            IoOp::Flush => RawOp::Flush,
        };
        let p = route(fd);
        let mut q = crate::locks::lock(&p.queue);
        q.jobs.push_back(Job {
            fd,
            op,
            offset: r.offset,
            done: Arc::clone(&done),
            index: k,
        });
        let idle = q.idle > 0;
        drop(q);
        match woken.iter_mut().find(|w| std::ptr::eq(w.0, p)) {
            Some(w) => w.1 |= idle,
            None => woken.push((p, idle)),
        }
    }
    for (p, idle) in woken {
        if idle {
            #[cfg(test)]
            p.wakes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            p.cv.notify_all();
        }
    }
    Pending {
        done,
        fds: fds.to_vec(),
        waited: false,
    }
}

impl Pending {
    /// Wait for every IO (each until its deadline: `on_late` as in [`super::run`]) and
    /// put the outcomes into `reqs`.
    pub(super) fn wait(mut self, reqs: &mut [IoReq<'_>], on_late: &mut dyn FnMut(usize)) {
        let fds = std::mem::take(&mut self.fds);
        let done = Arc::clone(&self.done);
        let mut late = vec![false; fds.len()];
        let mut st = crate::locks::lock(&done.st);
        loop {
            if st.all_done() {
                break;
            }
            let now = Instant::now();
            let mut next = None::<Instant>;
            for (k, &(i, _)) in fds.iter().enumerate() {
                if st.outcomes[k].is_some() || late[k] {
                    continue;
                }
                if now >= reqs[i].deadline {
                    late[k] = true;
                    drop(st);
                    on_late(i);
                    st = crate::locks::lock(&done.st);
                } else {
                    let d = reqs[i].deadline;
                    next = Some(next.map_or(d, |n: Instant| n.min(d)));
                }
            }
            if st.all_done() {
                break;
            }
            let d = next.map(|t| t.saturating_duration_since(Instant::now()));
            st = sleep_on(&done, st, d);
        }
        // Every job is finished: nothing uses the buffers any more.
        self.waited = true;
        for (k, &(i, _)) in fds.iter().enumerate() {
            let Some((res, at)) = st.outcomes[k].take() else {
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
}

#[cfg(test)]
impl Pool {
    /// Submitters' wake-ups of the queue's threads so far.
    pub(super) fn wakes(&self) -> usize {
        self.wakes.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// The queue's threads asleep for lack of a job, and the jobs queued.
    pub(super) fn idle_and_queued(&self) -> (usize, usize) {
        let q = crate::locks::lock(&self.queue);
        (q.idle, q.jobs.len())
    }
}

#[cfg(test)]
impl Pending {
    /// The waiter's wake-ups so far, once every job is finished (`None` before).
    pub(super) fn wakes_when_done(&self) -> Option<usize> {
        let st = crate::locks::lock(&self.done.st);
        st.all_done()
            .then(|| self.done.wakes.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.waited {
            return;
        }
        let mut st = crate::locks::lock(&self.done.st);
        while !st.all_done() {
            st = sleep_on(&self.done, st, None);
        }
    }
}

/// Run the batch's descriptor IOs (`fds`: index into `reqs`, descriptor) on the shared
/// pool; a batch of one IO runs in the calling thread.
pub(super) fn run(reqs: &mut [IoReq<'_>], fds: &[(usize, RawFd)], on_late: &mut dyn FnMut(usize)) {
    if let [(i, fd)] = fds {
        let r = &mut reqs[*i];
        let res = sync_fd(*fd, &mut r.op, r.offset);
        r.finish(res, Instant::now());
        return;
    }
    submit(reqs, fds, shared).wait(reqs, on_late);
}
