//! Several steps of a long job (a rebuild's or a check's runs of stripes, a mirrored
//! job's regions) in flight at once, their outcomes taken in order.
//!
//! A job walks its address space one step at a time; a step's member IOs all go out
//! together, but one step at a time leaves the members idle while the job computes. Here
//! a few workers each run a whole step (read, compute, write), so the members see several
//! steps' IOs at once and the parity work of one step overlaps the IO of the others; the
//! job's own
//! thread (the coordinator) hands out the steps in order and takes their outcomes back
//! **in the same order**: whatever a job records (progress, reports, the recovery point,
//! checkpoints) moves exactly as if the steps had run one after another.
//!
//! Twice as many steps are handed out as there are workers ([`STEPS_PER_WORKER`]): the
//! outcomes are committed in order, so with one step per worker a worker whose step is
//! preempted (2 cores, several workers) held up the hand-out of the next steps, and the
//! other workers sat idle until it finished; with a step queued per worker they go on.
//! Buffers are a worker's (taken when it starts a step), so queued steps take no memory,
//! only what they hold (their stripe locks or range holds).
//!
//! The coordinator also takes each step's `Held` value (a stripe lock) before the step is
//! handed out and drops it only after the step's outcome is committed: a rebuild keeps a
//! stripe locked until the recovery point has moved past it, and locks are taken in
//! ascending order, like client writes take them (no cycle).

use crate::error::Result;
use crate::locks::lock;
use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc;
use std::sync::Mutex;

/// Workers at most, whatever the memory allows.
pub(crate) const MAX_DEPTH: usize = 4;

/// Steps handed out (in flight or queued) per worker. Measured on tmpfs members, 2 cores
/// nearly to itself (benchmark in a raised-priority session): a RAID1 check of 2 × 1 GiB
/// 0.21–0.23 s against 0.25–0.28 s with one step per worker; a RAID1 rebuild 0.27–0.31 s
/// against 0.33–0.40 s.
const STEPS_PER_WORKER: usize = 2;

/// Bytes the buffers of the steps in flight may take together (about).
const BUDGET_BYTES: u64 = 64 << 20;

/// How many workers, each with the buffers of a step of `step_bytes` (member bytes a step
/// reads and writes): [`MAX_DEPTH`], fewer when steps are large, at least one.
pub(crate) fn depth_for(step_bytes: u64) -> usize {
    (BUDGET_BYTES / step_bytes.max(1)).clamp(1, MAX_DEPTH as u64) as usize
}

/// The coordinator's side of a pipelined job.
pub(crate) trait Steps {
    /// What names a step (its first sector, say).
    type Key: Copy + Send;
    /// Held from before a step is handed out until its outcome is committed.
    type Held;
    /// A step's outcome, made by a worker.
    type Out: Send;

    /// The next step and what to hold while it runs; `None` when there is no more work
    /// (done, or stopped on request: the implementation records which).
    fn next(&mut self) -> Result<Option<(Self::Key, Self::Held)>>;

    /// Take a step's outcome, in the order the steps were handed out. An error ends the
    /// job: nothing more is handed out, and what is in flight is waited for and dropped.
    fn commit(&mut self, key: Self::Key, out: Self::Out, held: Self::Held) -> Result<()>;
}

/// A worker's outcome: the step's sequence number, and its output (or its panic).
type Done<O> = (u64, std::thread::Result<O>);

/// Run the steps of `steps` on `depth` worker threads (they live as long as the job), each
/// step by `work`, with up to [`STEPS_PER_WORKER`] steps per worker handed out. With
/// `depth` 1 the steps run on the calling thread, one after another.
pub(crate) fn run<S: Steps>(
    depth: usize,
    steps: &mut S,
    work: impl Fn(S::Key) -> S::Out + Sync,
) -> Result<()> {
    if depth <= 1 {
        while let Some((key, held)) = steps.next()? {
            let out = work(key);
            steps.commit(key, out, held)?;
        }
        return Ok(());
    }
    let (job_tx, job_rx) = mpsc::channel::<(u64, S::Key)>();
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done<S::Out>>();
    std::thread::scope(|scope| {
        for _ in 0..depth {
            let (job_rx, done_tx, work) = (&job_rx, done_tx.clone(), &work);
            scope.spawn(move || loop {
                // The lock is released once a step is received (the guard is a temporary).
                let Ok((seq, key)) = lock(job_rx).recv() else {
                    break;
                };
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(key)));
                if done_tx.send((seq, out)).is_err() {
                    break;
                }
            });
        }
        drop(done_tx);
        let r = coordinate(depth * STEPS_PER_WORKER, steps, &job_tx, &done_rx);
        // Closing the queue ends the workers; the scope joins them.
        drop(job_tx);
        r
    })
}

/// The coordinator's loop: keep `depth` steps handed out, commit outcomes in order.
fn coordinate<S: Steps>(
    depth: usize,
    steps: &mut S,
    job_tx: &mpsc::Sender<(u64, S::Key)>,
    done_rx: &mpsc::Receiver<Done<S::Out>>,
) -> Result<()> {
    let mut st = Coordinator::<S> {
        in_flight: VecDeque::with_capacity(depth),
        finished: BTreeMap::new(),
        commit_seq: 0,
        more: true,
        failed: None,
        panicked: None,
    };
    let mut next_seq = 0u64;
    loop {
        while st.more && st.in_flight.len() < depth {
            // Commit what has finished before asking for the next step: `next` may sleep
            // (a speed limit), and progress, checkpoints and stop points must not wait
            // for it.
            while let Ok(done) = done_rx.try_recv() {
                st.take(steps, done);
            }
            if !st.more {
                break;
            }
            match steps.next() {
                Ok(Some((key, held))) => {
                    if job_tx.send((next_seq, key)).is_err() {
                        // Every worker is gone (they only end when the queue closes).
                        unreachable!("pipeline workers ended with the queue open");
                    }
                    st.in_flight.push_back((key, held));
                    next_seq += 1;
                }
                Ok(None) => st.more = false,
                Err(e) => {
                    st.more = false;
                    st.failed = Some(e);
                }
            }
        }
        if st.in_flight.is_empty() {
            break;
        }
        let Ok(done) = done_rx.recv() else {
            unreachable!("pipeline workers ended with steps in flight");
        };
        st.take(steps, done);
    }
    if let Some(panic) = st.panicked {
        std::panic::resume_unwind(panic);
    }
    st.failed.map_or(Ok(()), Err)
}

/// The coordinator's record of the steps handed out and their outcomes.
struct Coordinator<S: Steps> {
    in_flight: VecDeque<(S::Key, S::Held)>,
    finished: BTreeMap<u64, std::thread::Result<S::Out>>,
    commit_seq: u64,
    more: bool,
    failed: Option<crate::error::EngineError>,
    /// The first step's panic: re-raised once no step is in flight, so that no step's
    /// held state (its stripe locks, its range hold) is dropped while it still runs.
    panicked: Option<Box<dyn std::any::Any + Send>>,
}

impl<S: Steps> Coordinator<S> {
    /// Take a worker's outcome, and commit every outcome now next in order.
    fn take(&mut self, steps: &mut S, (seq, out): Done<S::Out>) {
        self.finished.insert(seq, out);
        while let Some(out) = self.finished.remove(&self.commit_seq) {
            self.commit_seq += 1;
            let Some((key, held)) = self.in_flight.pop_front() else {
                unreachable!("an outcome for a step not in flight");
            };
            match out {
                Err(panic) => {
                    self.more = false;
                    self.panicked.get_or_insert(panic);
                }
                Ok(out) if self.failed.is_some() || self.panicked.is_some() => {
                    drop((key, out, held))
                }
                Ok(out) => {
                    if let Err(e) = steps.commit(key, out, held) {
                        self.more = false;
                        self.failed = Some(e);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EngineError;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    /// Steps 0..n, committed into `seen`; fails at `fail_at`.
    struct Count {
        n: u64,
        at: u64,
        seen: Vec<u64>,
        fail_at: Option<u64>,
    }

    impl Steps for Count {
        type Key = u64;
        type Held = u64;
        type Out = u64;
        fn next(&mut self) -> Result<Option<(u64, u64)>> {
            if self.at == self.n {
                return Ok(None);
            }
            self.at += 1;
            Ok(Some((self.at - 1, self.at - 1)))
        }
        fn commit(&mut self, key: u64, out: u64, held: u64) -> Result<()> {
            assert_eq!((key * 10, key), (out, held));
            if self.fail_at == Some(key) {
                return Err(EngineError::Invalid("stop here".into()));
            }
            self.seen.push(key);
            Ok(())
        }
    }

    #[test]
    fn outcomes_are_committed_in_order_whatever_order_they_finish_in() {
        for depth in [1, 2, 4] {
            let mut c = Count {
                n: 40,
                at: 0,
                seen: Vec::new(),
                fail_at: None,
            };
            run(depth, &mut c, |k| {
                // Later steps finish first.
                std::thread::sleep(std::time::Duration::from_micros((40 - k) * 50));
                k * 10
            })
            .unwrap();
            assert_eq!(c.seen, (0..40).collect::<Vec<_>>(), "depth {depth}");
        }
    }

    /// Steps 0..n whose held state checks, when dropped, that its step has finished.
    struct Guarded {
        n: u64,
        at: u64,
        done: Arc<Mutex<Vec<u64>>>,
        early_drops: Arc<AtomicU64>,
    }

    /// What [`Guarded`] holds for step `.0`.
    struct Guard(u64, Arc<Mutex<Vec<u64>>>, Arc<AtomicU64>);

    impl Drop for Guard {
        fn drop(&mut self) {
            if !lock(&self.1).contains(&self.0) {
                self.2.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    impl Steps for Guarded {
        type Key = u64;
        type Held = Guard;
        type Out = ();
        fn next(&mut self) -> Result<Option<(u64, Guard)>> {
            if self.at == self.n {
                return Ok(None);
            }
            self.at += 1;
            let g = Guard(self.at - 1, self.done.clone(), self.early_drops.clone());
            Ok(Some((self.at - 1, g)))
        }
        fn commit(&mut self, _: u64, (): (), _: Guard) -> Result<()> {
            Ok(())
        }
    }

    /// A step that panics: the panic reaches the caller only once every step in flight
    /// has finished, so no step's held state (its locks) is dropped while it still runs.
    #[test]
    fn a_panic_is_raised_after_the_steps_in_flight_finished() {
        for depth in [2, 4] {
            let done = Arc::new(Mutex::new(Vec::new()));
            let early_drops = Arc::new(AtomicU64::new(0));
            let mut g = Guarded {
                n: 40,
                at: 0,
                done: done.clone(),
                early_drops: early_drops.clone(),
            };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(depth, &mut g, |k| {
                    if k == 3 {
                        lock(&done).push(k);
                        panic!("step 3 fails");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    lock(&done).push(k);
                })
            }));
            assert!(r.is_err(), "depth {depth}: the panic reaches the caller");
            assert_eq!(early_drops.load(Ordering::Relaxed), 0, "depth {depth}");
        }
    }

    #[test]
    fn an_error_commits_nothing_after_it_and_hands_out_nothing_more() {
        let mut c = Count {
            n: 100,
            at: 0,
            seen: Vec::new(),
            fail_at: Some(7),
        };
        let e = run(4, &mut c, |k| k * 10).unwrap_err();
        assert!(e.to_string().contains("stop here"), "{e}");
        assert_eq!(c.seen, (0..7).collect::<Vec<_>>());
        assert!(
            c.at <= 7 + 1 + 4 * STEPS_PER_WORKER as u64,
            "handed out {} steps",
            c.at
        );
    }

    /// A step held up (preempted, slow) does not leave the other workers idle: with 2
    /// workers, while step 0 runs, steps 1 and 2 both start (one step per worker handed
    /// out would wait for step 0's commit before handing out step 2).
    #[test]
    fn a_slow_step_does_not_hold_up_the_other_workers() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let started = AtomicU64::new(0);
        let overtaken = AtomicBool::new(false);
        let mut c = Count {
            n: 6,
            at: 0,
            seen: Vec::new(),
            fail_at: None,
        };
        run(2, &mut c, |k| {
            started.fetch_add(1, Ordering::SeqCst);
            if k == 0 {
                let t0 = std::time::Instant::now();
                while t0.elapsed() < std::time::Duration::from_secs(5) {
                    if started.load(Ordering::SeqCst) >= 3 {
                        overtaken.store(true, Ordering::SeqCst);
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            k * 10
        })
        .unwrap();
        assert!(
            overtaken.load(Ordering::SeqCst),
            "step 2 did not start while step 0 ran"
        );
        assert_eq!(c.seen, (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn depth_keeps_the_buffers_within_the_budget() {
        assert_eq!(depth_for(2 << 20), MAX_DEPTH);
        assert_eq!(depth_for(20 << 20), 3);
        assert_eq!(depth_for(1 << 30), 1);
        assert_eq!(depth_for(0), MAX_DEPTH);
    }
}
