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
//!
//! The guard acting means the holder overran: a slow request, or, on a crowded machine,
//! a holder preempted in the middle of a short one. Either way every request behind it
//! waited the whole bound (the slow request alone is caught by the caller, which keeps
//! no turn after a long request; a preemption is not): so after the guard takes a turn,
//! no turn is kept for a while ([`BACKOFF_MIN`], doubled
//! for each take that follows soon after the last, up to [`BACKOFF_MAX`]) and requests
//! are handed off as when the client does not pipeline (several workers run, and none
//! holds up the others).

use crate::util::lock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest a kept turn holds up a request waiting on the socket (plus a wake-up).
pub(super) const KEEP_BOUND: Duration = Duration::from_millis(1);
/// The guard stays on short sleeps this long after a turn was last kept.
const ALERT_FOR: Duration = Duration::from_millis(20);
/// No turn is kept for this long after the guard took one ...
pub(super) const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// ... doubled for each take within [`BACKOFF_RENEW`] back-offs of the last one, up to
/// this.
pub(super) const BACKOFF_MAX: Duration = Duration::from_millis(640);
/// A take this many back-offs after the last one doubles the back-off (later: it starts
/// again from [`BACKOFF_MIN`]).
const BACKOFF_RENEW: u32 = 4;

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
    /// The guard last took a turn: when, and the back-off it set.
    last_take: Option<(Instant, Duration)>,
    /// No turn is kept before this (the guard had to take one).
    no_keep_until: Option<Instant>,
    /// The first back-off ([`BACKOFF_MIN`]; tests lengthen it).
    backoff_min: Duration,
}

impl State {
    /// The guard takes the turn from a keeper that overran: keeps back off.
    fn taken(&mut self, now: Instant) {
        let backoff = match self.last_take {
            Some((t, b)) if now.saturating_duration_since(t) < b * BACKOFF_RENEW => {
                (b * 2).min(BACKOFF_MAX.max(self.backoff_min))
            }
            _ => self.backoff_min,
        };
        self.last_take = Some((now, backoff));
        self.no_keep_until = Some(now + backoff);
        self.keeping = None;
        self.held = false;
    }
}

/// The read turn of one connection.
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

impl Default for Turn {
    fn default() -> Turn {
        Turn::with_backoff(BACKOFF_MIN)
    }
}

impl Turn {
    /// A turn whose keeps back off for `backoff_min` after the guard's first take.
    fn with_backoff(backoff_min: Duration) -> Turn {
        Turn {
            st: Mutex::new(State {
                backoff_min,
                ..State::default()
            }),
            guard: Condvar::new(),
            bench: Condvar::new(),
            waiting: AtomicUsize::new(0),
            #[cfg(test)]
            counts: std::sync::OnceLock::new(),
        }
    }

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
                let now = Instant::now();
                let kept = now.saturating_duration_since(since);
                if kept >= KEEP_BOUND {
                    st.taken(now);
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
    /// to take it and keeps are not backing off; the keep's number if it keeps it (for
    /// [`Turn::unkeep`]).
    pub(super) fn keep(&self) -> Option<u64> {
        let mut st = lock(&self.st);
        if !st.guard {
            return None;
        }
        let now = Instant::now();
        if st.no_keep_until.is_some_and(|t| now < t) {
            return None;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    /// Wait (bounded) until `n` workers wait for the turn.
    fn until_waiting(t: &Turn, n: usize) {
        let t0 = Instant::now();
        while t.waiting() != n {
            assert!(t0.elapsed() < Duration::from_secs(20), "no waiter");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    #[test]
    fn no_turn_is_kept_for_a_while_after_the_guard_took_one() {
        // A back-off no loaded machine outlasts; ended by hand below.
        let t = Arc::new(Turn::with_backoff(Duration::from_secs(600)));
        assert!(!t.take());
        let (took, rx) = mpsc::channel();
        let (go, release) = mpsc::channel::<()>();
        let t2 = Arc::clone(&t);
        let taker = std::thread::spawn(move || {
            // The guard: takes the turn from the keeper below once it overran.
            let stolen = t2.take();
            took.send(stolen).unwrap();
            release.recv().unwrap();
            until_waiting(&t2, 1);
            let backing_off = t2.keep();
            let until = lock(&t2.st).no_keep_until.take();
            let after = t2.keep();
            if let Some(n) = after {
                assert!(t2.unkeep(n));
            }
            t2.release(false);
            (backing_off, until, after.is_some())
        });
        until_waiting(&t, 1);
        let n = t.keep().expect("a guard is there: the turn is kept");
        assert!(rx.recv().unwrap(), "the guard took the turn kept too long");
        assert!(!t.unkeep(n), "the turn is no longer this worker's");
        go.send(()).unwrap();
        // This worker waits again (the guard now) while the taker holds the turn.
        let t1 = Instant::now();
        t.take();
        let (backing_off, until, after) = taker.join().unwrap();
        assert_eq!(backing_off, None, "no keep right after the guard acted");
        let until = until.expect("the take set a back-off");
        assert!(until > t1 + Duration::from_secs(500), "{until:?} {t1:?}");
        assert!(after, "keeps resume once the back-off is over");
    }

    #[test]
    fn takes_soon_after_one_another_double_the_back_off_up_to_a_bound() {
        let mut st = State {
            backoff_min: BACKOFF_MIN,
            ..State::default()
        };
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        st.taken(t0);
        assert_eq!(st.no_keep_until, Some(t0 + BACKOFF_MIN));
        let mut at = t0;
        let mut b = BACKOFF_MIN;
        for _ in 0..10 {
            at += b * 3;
            st.taken(at);
            b = (b * 2).min(BACKOFF_MAX);
            assert_eq!(st.no_keep_until, Some(at + b));
        }
        assert_eq!(b, BACKOFF_MAX);
        // Quiet for a while: back to the shortest back-off.
        at += BACKOFF_MAX * BACKOFF_RENEW + ms(1);
        st.taken(at);
        assert_eq!(st.no_keep_until, Some(at + BACKOFF_MIN));
        assert!(!st.held && st.keeping.is_none());
    }
}
