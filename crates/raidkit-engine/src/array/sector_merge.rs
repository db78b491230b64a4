//! Client writes that begin or end inside a 512-byte sector, ordered against each other and
//! against whole-sector writes of the same sectors.
//!
//! The members take whole sectors, so a write of `[offset, offset + len)` that starts or ends
//! inside one reads that sector, puts its bytes in and writes it back whole: a merge. Two
//! merges of disjoint bytes of one sector in flight together (a FUSE file opened with
//! parallel direct writes does this: two threads writing neighbouring records) would both
//! read the old sector and the later write would undo the earlier one's bytes. A whole-sector
//! write landing between a merge's read and its write would be undone the same way outside
//! the merge's bytes. Here:
//!
//! * a merge locks the slots of its first and last sector (a fixed table of mutexes, by
//!   sector number) for its read and write, and waits for the whole-sector writes that
//!   started before it announced itself;
//! * a whole-sector write costs two atomic operations on its CPU's own counter (one cache
//!   line per CPU, not one that every core's writers bounce) and a read of the merge count
//!   while no merge is in flight; while one is, it locks the slots of its sectors (all of them when it covers as many sectors as
//!   there are slots) for its duration.
//!
//! Slots are always locked in ascending order and only here, before any stripe lock, so
//! two writes never wait for each other in a cycle. Merges are rare (block clients write
//! whole sectors), so a whole-sector write that must take slots is too.

use crate::array::iostats::PerCpu;
use crate::locks::lock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Mutexes in the table (sector numbers map onto them modulo this).
const SLOTS: usize = 64;

/// See the module documentation.
pub(crate) struct SectorMerges {
    /// Merges in flight.
    merging: AtomicUsize,
    /// Whole-sector writes in flight that took no slot (they saw no merge), counted on the
    /// copy of the CPU each began on and ended on that same copy, so no copy is ever below
    /// the writes it counts (a merge looks at each copy in turn).
    unordered: PerCpu<AtomicUsize>,
    slots: Box<[Mutex<()>]>,
    /// Signalled when the last slotless whole-sector write ends while a merge waits.
    quiet: Condvar,
    quiet_lock: Mutex<()>,
}

impl Default for SectorMerges {
    fn default() -> SectorMerges {
        SectorMerges {
            merging: AtomicUsize::new(0),
            unordered: PerCpu::default(),
            slots: (0..SLOTS).map(|_| Mutex::new(())).collect(),
            quiet: Condvar::new(),
            quiet_lock: Mutex::new(()),
        }
    }
}

/// Held for the time of one write; dropping it lets the writes it ordered go on.
pub(crate) struct SectorGuard<'a> {
    gate: &'a SectorMerges,
    kind: Kind,
    /// Unlocked after the counts are updated (`Drop::drop` runs before the fields drop).
    _held: Vec<MutexGuard<'a, ()>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Merge,
    /// The copy of `unordered` this write counted itself on.
    Unordered(usize),
    Slotted,
}

impl SectorMerges {
    /// Order a merge whose first and last sectors are `first` and `last` (array sectors).
    pub(crate) fn merge(&self, first: u64, last: u64) -> SectorGuard<'_> {
        debug_assert!(first <= last);
        self.merging.fetch_add(1, Ordering::SeqCst);
        let mut slots = vec![slot_of(first), slot_of(last)];
        slots.sort_unstable();
        slots.dedup();
        let held = self.lock_slots(&slots);
        // Whole-sector writes that began before the count above was raised took no slot:
        // let them land before this merge reads.
        let mut g = lock(&self.quiet_lock);
        while self.unordered_any() {
            g = match self.quiet.wait_timeout(g, Duration::from_millis(1)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        drop(g);
        SectorGuard {
            gate: self,
            kind: Kind::Merge,
            _held: held,
        }
    }

    /// Order a write of `count` whole sectors from array sector `first`.
    pub(crate) fn whole(&self, first: u64, count: u64) -> SectorGuard<'_> {
        let copy = self.unordered.local_index();
        self.unordered.at(copy).fetch_add(1, Ordering::SeqCst);
        if self.merging.load(Ordering::SeqCst) == 0 {
            return SectorGuard {
                gate: self,
                kind: Kind::Unordered(copy),
                _held: Vec::new(),
            };
        }
        self.end_unordered(copy);
        let slots: Vec<usize> = if count >= SLOTS as u64 {
            (0..SLOTS).collect()
        } else {
            let mut v: Vec<usize> = (first..first + count).map(slot_of).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        SectorGuard {
            gate: self,
            kind: Kind::Slotted,
            _held: self.lock_slots(&slots),
        }
    }

    /// Lock `slots` (ascending, distinct).
    fn lock_slots(&self, slots: &[usize]) -> Vec<MutexGuard<'_, ()>> {
        debug_assert!(slots.windows(2).all(|w| w[0] < w[1]));
        slots.iter().map(|&i| lock(&self.slots[i])).collect()
    }

    /// Any slotless whole-sector write in flight? (Each copy only counts writes that
    /// raised it and have not ended, so a write that raised its copy before a merge raised
    /// `merging` is seen here.)
    fn unordered_any(&self) -> bool {
        self.unordered.all().any(|c| c.load(Ordering::SeqCst) > 0)
    }

    fn end_unordered(&self, copy: usize) {
        if self.unordered.at(copy).fetch_sub(1, Ordering::SeqCst) == 1
            && self.merging.load(Ordering::SeqCst) > 0
        {
            let _g = lock(&self.quiet_lock);
            self.quiet.notify_all();
        }
    }
}

impl Drop for SectorGuard<'_> {
    fn drop(&mut self) {
        match self.kind {
            Kind::Merge => {
                self.gate.merging.fetch_sub(1, Ordering::SeqCst);
            }
            Kind::Unordered(copy) => self.gate.end_unordered(copy),
            Kind::Slotted => {}
        }
    }
}

fn slot_of(sector: u64) -> usize {
    (sector % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Assert that `take` (run on another thread) waits while `held` is held and goes
    /// on once it is dropped.
    fn waits_for<'a>(g: &'a SectorMerges, held: SectorGuard<'a>, take: fn(&SectorMerges)) {
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || {
                take(g);
                tx.send(()).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
            drop(held);
            assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok());
        });
    }

    #[test]
    fn a_merge_waits_for_a_whole_write_that_started_before_it() {
        let g = SectorMerges::default();
        waits_for(&g, g.whole(10, 1), |g| drop(g.merge(10, 10)));
    }

    #[test]
    fn a_whole_write_waits_for_a_merge_of_its_sectors_and_not_of_others() {
        let g = SectorMerges::default();
        let m = g.merge(100, 101);
        // Slots of sectors 102..=105 are free: no wait.
        drop(g.whole(102, 4));
        waits_for(&g, m, |g| drop(g.whole(96, 8)));
        // No merge in flight: a whole write takes no slot.
        assert!(matches!(g.whole(0, 1 << 20).kind, Kind::Unordered(_)));
    }

    /// A whole write counts itself on the copy of the CPU it began on; a merge begun on
    /// any CPU waits for it, whichever copy that is, and only until that write ends.
    #[test]
    fn a_merge_waits_for_a_whole_write_counted_on_any_cpus_copy() {
        let g = SectorMerges::default();
        let copies = g.unordered.all().count();
        for copy in 0..copies {
            let held = SectorGuard {
                gate: &g,
                kind: Kind::Unordered(copy),
                _held: Vec::new(),
            };
            g.unordered.at(copy).fetch_add(1, Ordering::SeqCst);
            waits_for(&g, held, |g| drop(g.merge(3, 3)));
            assert!(!g.unordered_any(), "copy {copy}");
        }
    }

    #[test]
    fn two_merges_of_one_sector_run_one_at_a_time() {
        let g = SectorMerges::default();
        waits_for(&g, g.merge(7, 7 + SLOTS as u64), |g| drop(g.merge(7, 7)));
        assert_eq!(g.merging.load(Ordering::SeqCst), 0);
        assert!(!g.unordered_any());
    }
}
