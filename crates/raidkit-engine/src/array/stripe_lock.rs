//! Per-stripe IO locks: a stripe is locked while its members are read for parity or
//! written, so two writers never interleave their read-modify-write of one stripe.

use crate::array::Array;
use crate::locks::lock;
use std::sync::{Condvar, Mutex};

/// Per-stripe IO locks: a stripe is locked while its members are read for parity or
/// written. Sharded by stripe number, so locking unrelated stripes touches different
/// mutexes and an unlock wakes only the waiters of its own shard.
pub(crate) struct StripeLocks {
    shards: Box<[StripeLockShard]>,
}

#[derive(Default)]
pub(crate) struct StripeLockShard {
    /// Stripes locked now (few: at most one per thread).
    held: Mutex<Vec<u64>>,
    cv: Condvar,
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
        lock(&self.shard(stripe).held).contains(&stripe)
    }

    /// Lock `stripe`, waiting while another thread holds it.
    pub(crate) fn lock(&self, stripe: u64) -> StripeGuard<'_> {
        let shard = self.shard(stripe);
        let mut held = lock(&shard.held);
        while held.contains(&stripe) {
            held = crate::locks::wait(&shard.cv, held);
        }
        held.push(stripe);
        StripeGuard { shard, stripe }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let mut held = lock(&self.shard.held);
        if let Some(i) = held.iter().position(|&s| s == self.stripe) {
            held.swap_remove(i);
        }
        drop(held);
        self.shard.cv.notify_all();
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
                        let _ = self.cache_drain(c, &e, &mut st);
                    }
                    c.remove(&e, &mut st);
                }
            }
        }
        self.locks.lock(stripe)
    }
}
