//! A member's hole test, bounded: the hole found by one query is remembered, so a pass
//! that asks about every step of a long hole asks the device once, not once per step.
//!
//! A file's hole test (`SEEK_DATA`) walks from the offset asked to the next data: on a
//! blank preallocated tmpfs member that is every page to its end, and a check or resync
//! asking at each step paid it again and again (quadratic in the member's size). The
//! hole `[start, end)` found is kept with the member's write generation read *before*
//! the query; it answers later questions inside it only while no write to the member has
//! finished since ([`HoleHint::wrote`] is called after every member write, whatever its
//! outcome), so a write that lands after the query — however it raced it — makes the
//! device be asked again. Passes start with the hint forgotten ([`HoleHint::forget`]), so
//! what changed a file outside the array between passes is seen.

use crate::dev::BlockDev;
use crate::locks::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The last hole found on one member, and the member's write generation.
#[derive(Default)]
pub(crate) struct HoleHint {
    /// Member writes finished (any outcome): a hole known under an older count may
    /// have been written since.
    writes: AtomicU64,
    /// A hole `[start, end)` (device bytes) and the write count read before it was found.
    known: Mutex<Option<(u64, u64, u64)>>,
}

impl HoleHint {
    /// A write to the member finished (successfully or not): what was known is stale.
    pub(crate) fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::AcqRel);
    }

    /// Forget the hole known (a pass starts: the files may have changed outside the array).
    pub(crate) fn forget(&self) {
        *lock(&self.known) = None;
    }

    /// Does `dev` read as a hole over device bytes `[offset, offset + len)`? Answered from
    /// the hole last found when it covers the range and nothing was written since; else the
    /// device is asked ([`BlockDev::hole_end`], falling back to [`BlockDev::is_hole`]).
    pub(crate) fn is_hole(&self, dev: &dyn BlockDev, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let gen = self.writes.load(Ordering::Acquire);
        if let Some((a, b, g)) = *lock(&self.known) {
            if g == gen && a <= offset && end <= b {
                return true;
            }
        }
        let Some(hole_end) = dev.hole_end(offset) else {
            return dev.is_hole(offset, len);
        };
        if hole_end > offset {
            *lock(&self.known) = Some((offset, hole_end, gen));
        }
        hole_end >= end && len > 0
    }
}
