//! The read turn: which of a connection's workers reads the socket next.
//!
//! The worker holding the turn reads one request. Passing the turn on before processing
//! it wakes a waiting worker, which then often finds the socket drained and sleeps in
//! `recv`, while this one sleeps waiting for the turn once its request is done: up to
//! two context switches and two futex calls per request, and on two cores the woken
//! worker competes with the client for a CPU. When the client pipelines (requests are
//! already buffered behind the one just read), a 4 KiB request on memory-speed members
//! takes less than the hand-off, so the worker keeps the turn as it processes its
//! request, then reads the next one itself (the caller decides when; see
//! [`super::Conn::work`]).
//!
//! A kept turn is guarded, so a request stuck on a slow member cannot hold up the
//! requests behind it for long: the first waiting worker is the guard; while turns are
//! being kept it wakes every [`KEEP_BOUND`], and it takes the turn from a worker that has
//! kept it that long (it then reads the socket as the holder, as if the turn had been
//! passed). A turn is kept only when there is a guard to take it.

use crate::util::lock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest a kept turn holds up a request waiting on the socket (plus a wake-up).
pub(super) const KEEP_BOUND: Duration = Duration::from_millis(1);
/// The guard stays on short sleeps this long after a turn was last kept.
const ALERT_FOR: Duration = Duration::from_millis(20);

#[derive(Default)]
struct State {
    /// A worker holds the turn.
    held: bool,
    /// The holder keeps the turn while processing a request: since when, and the
    /// keep's number (a worker whose turn the guard took cannot end a later keep).
    keeping: Option<(Instant, u64)>,
    /// Keeps so far.
    keeps: u64,
    /// When a turn was last kept.
    last_keep: Option<Instant>,
    /// A waiting worker is the guard.
    guard: bool,
    /// The guard sleeps at most `KEEP_BOUND` (else it waits to be woken).
    alert: bool,
    /// Waiting workers other than the guard.
    benched: usize,
}

/// The read turn of one connection.
#[derive(Default)]
pub(super) struct Turn {
    st: Mutex<State>,
    guard: Condvar,
    bench: Condvar,
    /// Workers waiting for the turn (the guard included).
    waiting: AtomicUsize,
    /// Where workers woken for the turn (and turns taken by the guard) are counted.
    #[cfg(test)]
    counts: std::sync::OnceLock<std::sync::Arc<super::Counts>>,
}

impl Turn {
    /// Count workers woken for the turn in `c`.
    #[cfg(test)]
    pub(super) fn count_in(&self, c: &std::sync::Arc<super::Counts>) {
        let _ = self.counts.set(std::sync::Arc::clone(c));
    }

    /// Count a worker woken for the turn.
    fn woke(&self) {
        #[cfg(test)]
        if let Some(c) = self.counts.get() {
            c.wakes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Workers waiting for the turn now.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Wait for the turn. True if it was taken from a keeper that overran (its
    /// deferred replies are then the taker's to send).
    pub(super) fn take(&self) -> bool {
        let mut st = lock(&self.st);
        if !st.held {
            st.held = true;
            return false;
        }
        let mut stolen = false;
        self.waiting.fetch_add(1, Ordering::AcqRel);
        while st.held {
            if st.guard {
                st.benched += 1;
                st = self.bench.wait(st).unwrap_or_else(|p| p.into_inner());
                st.benched -= 1;
            } else {
                st.guard = true;
                let (g, took) = self.watch(st);
                st = g;
                stolen = took;
                st.guard = false;
                st.alert = false;
                break;
            }
        }
        st.held = true;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        stolen
    }

    /// The guard's wait: until the turn is free, or taken from a keeper that overran
    /// (then true). Returns with the turn free (`keeping` cleared).
    fn watch<'a>(&'a self, mut st: MutexGuard<'a, State>) -> (MutexGuard<'a, State>, bool) {
        loop {
            if !st.held {
                return (st, false);
            }
            let mut wait = None;
            if let Some((since, _)) = st.keeping {
                let kept = since.elapsed();
                if kept >= KEEP_BOUND {
                    st.keeping = None;
                    st.held = false;
                    self.woke();
                    return (st, true);
                }
                wait = Some(KEEP_BOUND.saturating_sub(kept));
            } else if st.last_keep.is_some_and(|t| t.elapsed() < ALERT_FOR) {
                wait = Some(KEEP_BOUND);
            }
            st.alert = wait.is_some();
            st = match wait {
                Some(d) => self
                    .guard
                    .wait_timeout(st, d)
                    .map_or_else(|p| p.into_inner().0, |r| r.0),
                None => self.guard.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }

    /// The holder processes a request without passing the turn on, if a guard is there
    /// to take it; the keep's number if it keeps it (for [`Turn::unkeep`]).
    pub(super) fn keep(&self) -> Option<u64> {
        let mut st = lock(&self.st);
        if !st.guard {
            return None;
        }
        let now = Instant::now();
        st.keeps += 1;
        let n = st.keeps;
        st.keeping = Some((now, n));
        st.last_keep = Some(now);
        let rouse = !st.alert;
        st.alert = true;
        drop(st);
        if rouse {
            // The guard sleeps without a timeout: from now on it watches.
            self.guard.notify_one();
            self.woke();
        }
        Some(n)
    }

    /// Keep `n` is over (its request done): true if its worker still holds the turn
    /// (the guard did not take it).
    pub(super) fn unkeep(&self, n: u64) -> bool {
        let mut st = lock(&self.st);
        if st.keeping.is_some_and(|(_, k)| k == n) {
            st.keeping = None;
            return true;
        }
        false
    }

    /// Give the turn up, waking one waiting worker (`all`: every one, the connection is
    /// done). The waiter is woken after the state's lock is dropped, so it does not wake
    /// only to wait for that lock.
    pub(super) fn release(&self, all: bool) {
        let mut st = lock(&self.st);
        st.held = false;
        st.keeping = None;
        let (benched, guard) = (st.benched > 0, st.guard);
        drop(st);
        if all {
            self.bench.notify_all();
            self.guard.notify_all();
        } else if benched {
            self.bench.notify_one();
            self.woke();
        } else if guard {
            self.guard.notify_one();
            self.woke();
        }
    }
}
