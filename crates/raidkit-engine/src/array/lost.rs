//! Lost ranges: array bytes no member holds valid data for (bad blocks beyond the
//! redundancy, held writes that could not be written out). Reads there fail rather than
//! return wrong bytes; writes make them valid again.

use crate::array::member::Member;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use crate::ranges::coalesce_pairs;
use raidkit_layout::SECTOR;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Array byte ranges `(offset, length)` known to be lost (no valid copy on any member).
#[derive(Default)]
pub(crate) struct LostRanges {
    /// The ranges, coalesced.
    pub(crate) ranges: Mutex<Vec<(u64, u64)>>,
    /// Fast check: is anything lost?
    pub(crate) any: AtomicBool,
    /// Lost ranges that were zeroed when the bad-block log was removed by force.
    pub(crate) zeroed: Mutex<Vec<(u64, u64)>>,
}

impl Array {
    /// Is any array byte lost? (A fast check, without the lock.)
    pub(crate) fn any_lost(&self) -> bool {
        self.lost.any.load(Ordering::Relaxed)
    }

    /// A read of array bytes `[offset, offset + len)` fails where data is lost, rather
    /// than return wrong bytes.
    pub(crate) fn check_lost_read(&self, offset: u64, len: u64) -> Result<()> {
        if !self.lost.any.load(Ordering::Relaxed) {
            return Ok(());
        }
        let end = offset + len;
        let lost = lock(&self.lost.ranges);
        match lost.iter().find(|&&(o, lost)| o < end && offset < o + lost) {
            None => Ok(()),
            Some(&(o, lost)) => Err(EngineError::DataLost {
                offset: o.max(offset),
                end: (o + lost).min(end),
                lost_offset: o,
                lost_end: o + lost,
            }),
        }
    }

    /// Record array byte ranges whose data is lost, so reads there fail instead of
    /// returning wrong bytes.
    pub(crate) fn add_lost(&self, ranges: &[(u64, u64)]) {
        if ranges.is_empty() {
            return;
        }
        debug_assert!(
            ranges
                .iter()
                .all(|&(offset, len)| offset.is_multiple_of(SECTOR)
                    && len.is_multiple_of(SECTOR)
                    && offset + len <= self.size_bytes()),
            "lost ranges are whole sectors of the array, in bytes: {ranges:?}"
        );
        let mut lost = lock(&self.lost.ranges);
        lost.extend_from_slice(ranges);
        crate::ranges::coalesce_pairs(&mut lost);
        self.lost.any.store(true, Ordering::Relaxed);
    }

    /// Keep only the parts of the lost ranges that are also in `still` (coalesced): after
    /// a write made some of them valid again.
    pub(crate) fn shrink_lost(&self, still: &[(u64, u64)]) {
        let mut lost = lock(&self.lost.ranges);
        *lost = crate::ranges::intersect_pairs(&lost, still);
        self.lost.any.store(!lost.is_empty(), Ordering::Relaxed);
    }

    /// Forget lost ranges (their data was replaced, e.g. zeroed by `--update no-bbl
    /// --force`); they are kept in [`Array::lost_zeroed_ranges`].
    pub(crate) fn take_lost(&self) -> Vec<(u64, u64)> {
        let mut lost = lock(&self.lost.ranges);
        self.lost.any.store(false, Ordering::Relaxed);
        let v = std::mem::take(&mut *lost);
        let mut z = lock(&self.lost.zeroed);
        z.extend_from_slice(&v);
        crate::ranges::coalesce_pairs(&mut z);
        v
    }

    /// Array byte ranges whose lost data was replaced by zeros (`--update no-bbl --force`).
    pub fn lost_zeroed_ranges(&self) -> Vec<(u64, u64)> {
        lock(&self.lost.zeroed).clone()
    }

    /// Array byte ranges known to be lost.
    pub fn lost_ranges(&self) -> Vec<(u64, u64)> {
        lock(&self.lost.ranges).clone()
    }

    /// A write that went through makes the lost bytes it covered valid again, except where
    /// bad blocks beyond the redundancy still hold them (those are cleared as the members
    /// take the write: `made_good`). What this clears: ranges lost because held writes
    /// could not be written out of the stripe cache (say, a degraded array with an
    /// unreadable sector and no bad-block log), which no bad block records. A write-out
    /// fails before it writes anything unless the array stops, so the members hold a
    /// consistent stripe there, and the message for that loss tells the admin to restore
    /// the range: that write must be taken.
    pub(crate) fn written_over_lost(&self, offset: u64, len: u64) {
        if !self.lost.any.load(Ordering::Relaxed) || len == 0 {
            return;
        }
        let end = offset + len;
        let overlaps = |lost: &[(u64, u64)]| lost.iter().any(|&(o, n)| o < end && offset < o + n);
        if !overlaps(&lock(&self.lost.ranges)) {
            return;
        }
        // Only for a write over a lost range: the bad-block scan is not on every write.
        let backed = self.derive_lost();
        let mut lost = lock(&self.lost.ranges);
        let outside = [(0, offset), (end, u64::MAX - end)];
        let mut keep = crate::ranges::intersect_pairs(&lost, &outside);
        keep.extend(crate::ranges::intersect_pairs(
            &crate::ranges::intersect_pairs(&lost, &[(offset, len)]),
            &backed,
        ));
        crate::ranges::coalesce_pairs(&mut keep);
        *lost = keep;
        self.lost.any.store(!lost.is_empty(), Ordering::Relaxed);
    }

    /// A write "succeeds" member by member even when its errors turned into bad blocks on
    /// more members than the level survives; then the data cannot be read back, and the
    /// client must be told its write was not stored rather than get an acknowledgement.
    pub(crate) fn check_not_lost(&self, offset: u64, len: u64) -> Result<()> {
        if !self.lost.any.load(Ordering::Relaxed) || len == 0 {
            return Ok(());
        }
        let end = offset + len;
        let lost = lock(&self.lost.ranges);
        match lost.iter().find(|&&(o, lost)| o < end && offset < o + lost) {
            None => Ok(()),
            Some(&(o, lost)) => Err(EngineError::WriteFailed {
                offset: o.max(offset),
                end: (o + lost).min(end),
                why: "the written data has no valid copy on any member (write errors on more members than the level survives, recorded as bad blocks); replace the failing members".into(),
            }),
        }
    }

    /// Array byte ranges no member holds valid data for, derived from the members' bad
    /// ranges: a stripe row (or every copy) where the unreadable members exceed the
    /// redundancy. Exact to the sector, coalesced.
    pub(crate) fn derive_lost(&self) -> Vec<(u64, u64)> {
        let geo = &self.geo;
        let slots: Vec<Option<Arc<Member>>> = self.slots().clone();
        let mut out: Vec<(u64, u64)> = Vec::new();
        let tol = geo.level.parity_blocks();
        for (role, m) in slots.iter().enumerate() {
            let Some(m) = m else { continue };
            for r in m.bad_ranges() {
                let a = r.start.max(m.data_offset) - m.data_offset;
                let b = (r.start + r.len).max(m.data_offset) - m.data_offset;
                for d in a..b {
                    if geo.level.has_parity() {
                        let c = geo.chunk_sectors;
                        let stripe = d / c;
                        let Some(lay) = geo.stripe(stripe) else { break };
                        let mut roles = lay.data.clone();
                        roles.push(lay.p);
                        roles.extend(lay.q);
                        let unread = roles.iter().filter(|&&x| !self.readable(x, d, 1)).count();
                        if unread > tol {
                            let kc = lay.data.len() as u64;
                            for (k, &x) in lay.data.iter().enumerate() {
                                if !self.readable(x, d, 1) {
                                    let s = (stripe * kc + k as u64) * c + d % c;
                                    out.push((s * SECTOR, SECTOR));
                                }
                            }
                        }
                    } else {
                        let Some(s) = geo.reverse(role, d) else {
                            continue;
                        };
                        let Some(p) = geo.locate(s) else { continue };
                        if p.copies.iter().all(|&(x, dd)| !self.readable(x, dd, 1)) {
                            out.push((s * SECTOR, SECTOR));
                        }
                    }
                }
            }
        }
        coalesce_pairs(&mut out);
        out
    }
}
