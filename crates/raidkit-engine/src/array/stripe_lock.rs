//! Per-stripe IO locks: a stripe is locked while its members are read for parity or
//! written, so two writers never interleave their read-modify-write of one stripe.

use crate::array::Array;
use crate::locks::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// Per-stripe IO locks: a stripe is locked while its members are read for parity or
/// written. Sharded by stripe number, so locking unrelated stripes touches different
/// mutexes and an unlock wakes only the waiters of its own shard.
pub(crate) struct StripeLocks {
    shards: Box<[StripeLockShard]>,
}

/// A shard, on cache lines of its own (the adjacent-line prefetcher pairs them): every
/// parity write locks and unlocks the shard of its stripe, and shards packed 56 bytes
/// apart shared lines with their neighbours, which the other core's writers were locking.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct StripeLockShard {
    held: Mutex<Held>,
    cv: Condvar,
    /// Unlocks that woke waiters (the others made no system call).
    wakeups: AtomicU64,
}

/// A shard's state, under its mutex.
#[derive(Default)]
struct Held {
    /// Stripes locked now (few: at most one per thread).
    stripes: Vec<u64>,
    /// Threads waiting in [`StripeLocks::lock`] for a stripe of this shard. An unlock
    /// signals the condition variable only when some thread waits: a notify is a futex
    /// system call even without waiters, and every parity write unlocks a stripe (it was
    /// one `futex` call per 4 KiB NBD write, `perf record -e syscalls:sys_enter_futex`).
    waiters: usize,
}

pub(crate) const STRIPE_LOCK_SHARDS: usize = 64;

pub(crate) struct StripeGuard<'a> {
    shard: &'a StripeLockShard,
    stripe: u64,
}

impl StripeLocks {
    pub(crate) fn new() -> StripeLocks {
        StripeLocks {
            shards: (0..STRIPE_LOCK_SHARDS)
                .map(|_| StripeLockShard::default())
                .collect(),
        }
    }

    fn shard(&self, stripe: u64) -> &StripeLockShard {
        let hash = (stripe.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
        &self.shards[hash % STRIPE_LOCK_SHARDS]
    }

    /// Is `stripe` locked (by anyone)? For assertions.
    pub(crate) fn is_locked(&self, stripe: u64) -> bool {
        lock(&self.shard(stripe).held).stripes.contains(&stripe)
    }

    /// Unlocks that had to wake waiting threads, over all shards.
    #[cfg(test)]
    pub(crate) fn wakeups(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.wakeups.load(Ordering::Relaxed))
            .sum()
    }

    /// Lock `stripe`, waiting while another thread holds it.
    pub(crate) fn lock(&self, stripe: u64) -> StripeGuard<'_> {
        let shard = self.shard(stripe);
        let mut held = lock(&shard.held);
        while held.stripes.contains(&stripe) {
            held.waiters += 1;
            held = crate::locks::wait(&shard.cv, held);
            held.waiters -= 1;
        }
        held.stripes.push(stripe);
        StripeGuard { shard, stripe }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let mut held = lock(&self.shard.held);
        if let Some(i) = held.stripes.iter().position(|&s| s == self.stripe) {
            held.stripes.swap_remove(i);
        }
        // Waiters count themselves under the mutex before they wait (which releases it
        // atomically), so one that waits for this stripe is counted here.
        let wake = held.waiters > 0;
        drop(held);
        if wake {
            self.shard.wakeups.fetch_add(1, Ordering::Relaxed);
            self.shard.cv.notify_all();
        }
    }
}

impl Array {
    /// Debug builds: panic unless `stripe`'s IO lock is held (callers that read or write
    /// a stripe's members for parity must hold it).
    pub(crate) fn debug_assert_stripe_locked(&self, stripe: u64) {
        debug_assert!(
            self.locks.is_locked(stripe),
            "stripe {stripe} is written without its IO lock"
        );
    }

    /// Lock a stripe for direct member IO (sync, rebuild): held writes of the stripe are
    /// written out first and its cached pages dropped, so members and cache agree.
    pub(crate) fn lock_stripe(&self, stripe: u64) -> impl Drop + '_ {
        if let Some(c) = &self.cache {
            if let Some(e) = c.get(stripe) {
                let mut st = lock(&e.state);
                if !st.dead {
                    if st.is_dirty() {
                        // A failure is recorded for the next flush.
                        let _ = self.cache_drain_to_remove(c, &e, &mut st);
                    }
                    c.remove(&e, &mut st);
                }
            }
        }
        self.locks.lock(stripe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Unlocking a stripe nobody waits for wakes nobody (no futex call); unlocking one a
    /// thread waits for wakes it, once.
    #[test]
    fn an_unlock_wakes_only_when_a_thread_waits() {
        let locks = Arc::new(StripeLocks::new());
        for i in 0..1000u64 {
            drop(locks.lock(i % 7));
            let a = locks.lock(i);
            let b = locks.lock(i + 1);
            drop((a, b));
        }
        assert_eq!(locks.wakeups(), 0, "uncontended unlocks woke waiters");

        let held = locks.lock(5);
        let l2 = Arc::clone(&locks);
        let waiter = std::thread::spawn(move || {
            let g = l2.lock(5);
            drop(g);
        });
        // Bounded wait until the other thread waits for stripe 5.
        let t0 = Instant::now();
        while lock(&locks.shard(5).held).waiters == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the waiter never waited"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(held);
        waiter.join().unwrap();
        assert_eq!(locks.wakeups(), 1, "one unlock had a waiter");
        assert!(!locks.is_locked(5));
        assert_eq!(lock(&locks.shard(5).held).waiters, 0);
    }
}
