//! Client writes ordered against background copies of mirrored data, range by range.
//!
//! A mirrored rebuild reads a region from one copy and writes it onto the target; a
//! resync/check/repair of mirrors reads every copy, compares them and rewrites the wrong
//! ones. A client write landing in that region between the job's read and its write would
//! be undone on one copy (the target left stale for good). [`Array::pause_writes`] holds
//! every client write for that, which allows one region at a time; this gate holds only
//! the writes into the regions being copied, so a job can keep several regions in flight
//! while client writes elsewhere go on.
//!
//! * A job announces itself with [`Array::order_writes_by_range`] (once, under
//!   `pause_writes`, so no client write is in flight unregistered), then takes a
//!   [`RangeHold`] on each region, in array sectors, before it reads it
//!   ([`Array::hold_ranges`]); the hold waits for client writes in flight into the region
//!   and makes new ones wait until it is dropped, after the region's copy is written.
//! * A client write of a mirrored level registers its array sector range for the time it
//!   is in flight ([`Array::enter_write_range`]), waiting first while a hold covers any of
//!   it. While no job uses the gate that is one atomic load.
//!
//! Holds never wait for other holds (the supervisor runs one job per array at a time), and
//! a job's holds are taken on one thread while its copies run on others: a job waits only
//! for client writes in flight, which finish without it.

use crate::array::Array;
use crate::locks::{lock, wait};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// See the module documentation.
#[derive(Default)]
pub(crate) struct RangeGate {
    /// Jobs using the gate now: client writes register only while it is non-zero.
    users: AtomicUsize,
    state: Mutex<GateState>,
    /// Signalled whenever a hold or a registered write is dropped.
    cv: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Held array sector ranges `[start, end)`, with the hold they belong to.
    holds: Vec<(u64, u64, u64)>,
    /// Client writes in flight (registered), `[start, end)` each.
    writes: Vec<(u64, u64)>,
    /// The next hold's id.
    next_id: u64,
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl GateState {
    fn held(&self, r: (u64, u64)) -> bool {
        self.holds.iter().any(|&(_, s, e)| overlaps(r, (s, e)))
    }

    fn written(&self, ranges: &[(u64, u64)]) -> bool {
        self.writes
            .iter()
            .any(|&w| ranges.iter().any(|&r| overlaps(r, w)))
    }
}

/// A job's use of the gate (client writes register while one exists).
pub(crate) struct RangeUse<'a> {
    gate: &'a RangeGate,
}

impl Drop for RangeUse<'_> {
    fn drop(&mut self) {
        self.gate.users.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Array sector ranges a job holds: client writes into them wait until it is dropped.
pub(crate) struct RangeHold<'a> {
    gate: &'a RangeGate,
    id: u64,
}

impl Drop for RangeHold<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.gate.state);
        st.holds.retain(|h| h.0 != self.id);
        drop(st);
        self.gate.cv.notify_all();
    }
}

/// A client write in flight, registered with the gate.
pub(crate) struct WriteEntry<'a> {
    gate: &'a RangeGate,
    range: (u64, u64),
}

impl Drop for WriteEntry<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.gate.state);
        if let Some(i) = st.writes.iter().position(|&w| w == self.range) {
            st.writes.swap_remove(i);
        }
        drop(st);
        self.gate.cv.notify_all();
    }
}

impl Array {
    /// Start ordering client writes against this job's [`RangeHold`]s (until the guard is
    /// dropped). Waits for the client writes in flight, once.
    pub(crate) fn order_writes_by_range(&self) -> RangeUse<'_> {
        let gate = &self.ranges;
        // Under the exclusive write gate no client write is in flight, and every write
        // after it sees the count (it is read under the shared gate).
        let _quiet = self.pause_writes();
        gate.users.fetch_add(1, Ordering::AcqRel);
        RangeUse { gate }
    }

    /// Hold array sector ranges `[start, end)` (each non-empty) against client writes:
    /// new writes into them wait until the hold is dropped, and this waits until the
    /// writes into them already in flight are done. The caller holds a [`RangeUse`].
    pub(crate) fn hold_ranges(&self, ranges: &[(u64, u64)]) -> RangeHold<'_> {
        let gate = &self.ranges;
        debug_assert!(
            gate.users.load(Ordering::Acquire) > 0,
            "a range hold without order_writes_by_range"
        );
        let mut st = lock(&gate.state);
        let id = st.next_id;
        st.next_id += 1;
        st.holds.extend(ranges.iter().map(|&(s, e)| (id, s, e)));
        while st.written(ranges) {
            st = wait(&gate.cv, st);
        }
        RangeHold { gate, id }
    }

    /// Register a client write of array sectors `[start, start + n)` while a job orders
    /// writes by range (None otherwise), waiting while a hold covers any of it. Keep the
    /// entry until the write is done on every copy.
    pub(crate) fn enter_write_range(&self, start: u64, n: u64) -> Option<WriteEntry<'_>> {
        let gate = &self.ranges;
        if gate.users.load(Ordering::Acquire) == 0 {
            return None;
        }
        let range = (start, start + n);
        let mut st = lock(&gate.state);
        while st.held(range) {
            st = wait(&gate.cv, st);
        }
        st.writes.push(range);
        Some(WriteEntry { gate, range })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_half_open() {
        assert!(overlaps((0, 8), (7, 9)));
        assert!(!overlaps((0, 8), (8, 9)));
        assert!(!overlaps((8, 9), (0, 8)));
        assert!(overlaps((0, 100), (10, 20)));
    }

    #[test]
    fn holds_and_writes_see_each_other() {
        let mut st = GateState::default();
        st.holds.push((0, 100, 200));
        st.holds.push((0, 400, 500));
        assert!(st.held((150, 160)));
        assert!(st.held((0, 101)));
        assert!(!st.held((200, 400)));
        st.writes.push((199, 201));
        assert!(st.written(&[(0, 10), (200, 300)]));
        assert!(!st.written(&[(0, 199), (201, 300)]));
    }
}
