//! A stripe-cache write-out of one page row that the cache holds whole on every data block
//! (a write onto a stripe it filled before, or a row clients completed): P/Q straight from
//! the cached pages, no gathering copy (see `drain`).

use crate::array::cache::{Count, Entry, EntryState, Page, StripeCache, PAGE_SECTORS};
use crate::array::member_io::MemberOp;
use crate::array::parity_write::plan::{plan, Plan, StripeState};
use crate::array::scratch::scratch_blocks;
use crate::array::stripe::parity_into;
use crate::array::Array;
use crate::error::Result;
use raidkit_layout::{StripeLayout, SECTOR};
use smallvec::SmallVec;
use std::ops::Range;

impl Array {
    /// A write-out of one page row whose data the cache holds whole on every block (a
    /// write onto a stripe it filled before, or a row clients completed): P/Q are computed
    /// straight from the cached pages and the dirty spans written from them, with no
    /// gathering copy and nothing to keep. `None` when that is not the case or the plan
    /// for the row is not to compute (then the general write-out decides).
    pub(super) fn cache_drain_known_row(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
        layout: &StripeLayout,
        page_rows: &Range<usize>,
    ) -> Option<Result<bool>> {
        if page_rows.len() != 1 {
            return None;
        }
        let row = page_rows.start;
        let pages: SmallVec<[&Page; 8]> = (0..cache.kc)
            .map(|block| held.pages[block * cache.rows + row].as_ref())
            .collect::<Option<_>>()?;
        if pages.iter().any(|p| p.valid != 0xff) {
            return None;
        }
        // The dirty sectors' extent over the row, as the general write-out takes it.
        let dirty = pages.iter().fold(0u8, |d, p| d | p.dirty);
        if dirty == 0 {
            return Some(Ok(false));
        }
        let (first, last) = (
            u64::from(dirty.trailing_zeros()),
            PAGE_SECTORS - u64::from(dirty.leading_zeros()),
        );
        let row_start = row as u64 * PAGE_SECTORS;
        let rows = row_start + first..row_start + last;
        let row_sectors = last - first;
        let stripe_start = entry.stripe * self.geo.chunk_sectors;
        let span = |p: &Page| {
            (p.dirty != 0).then(|| {
                u64::from(p.dirty.trailing_zeros())
                    ..PAGE_SECTORS - u64::from(p.dirty.leading_zeros())
            })
        };
        let state = StripeState {
            data_blocks: cache.kc,
            parity_blocks: 1 + usize::from(layout.q.is_some()),
            row_sectors,
            span_sectors: pages
                .iter()
                .filter_map(|p| span(p))
                .map(|s| s.end - s.start)
                .sum(),
            known_sectors: cache.kc as u64 * row_sectors,
            all_readable: self.stripe_readable(layout, stripe_start + rows.start, row_sectors),
            parity_gone: self.parity_gone(layout),
            prefer_fill: cache.reuse_likely(),
            ..StripeState::default()
        };
        if plan(&state) != Plan::Compute {
            return None;
        }
        let in_page = |s: &Range<u64>| (s.start * SECTOR) as usize..(s.end * SECTOR) as usize;
        let over = first..last;
        // Known sectors that clients did not write now: found in the cache.
        let mask = super::write::sector_bits(first, row_sectors);
        let clean_known: u64 = pages
            .iter()
            .map(|p| u64::from((!p.dirty & mask).count_ones()))
            .sum();
        let written: Result<()> = (|| {
            self.bitmap_mark(stripe_start + rows.start, row_sectors)?;
            cache.count(Count::Drains, 1);
            if clean_known == 0 {
                cache.count(Count::Merges, 1);
            }
            let data: SmallVec<[&[u8]; 8]> =
                pages.iter().map(|p| &p.data[in_page(&over)]).collect();
            let len = (row_sectors * SECTOR) as usize;
            let mut pq = scratch_blocks(1 + usize::from(layout.q.is_some()), len);
            let (p, q) = pq.split_at_mut(1);
            let q: &mut [u8] = q.first_mut().map_or(&mut [], |q| q.as_mut_slice());
            parity_into(layout, &data, &mut p[0], q);
            let mut ops: SmallVec<[MemberOp<'_>; 10]> = SmallVec::new();
            for (block, page) in pages.iter().enumerate() {
                if let Some(s) = span(page) {
                    ops.push(MemberOp::write(
                        layout.data[block],
                        stripe_start + row_start + s.start,
                        &page.data[in_page(&s)],
                    ));
                }
            }
            for (role, buf) in std::iter::once(layout.p).chain(layout.q).zip(pq.iter()) {
                ops.push(MemberOp::write(role, stripe_start + rows.start, buf));
            }
            self.member_io(&mut ops);
            ops.into_iter()
                .try_for_each(|op| op.write_result().map(drop))?;
            Ok(())
        })();
        if let Err(e) = written {
            return Some(Err(e));
        }
        drop(pages);
        let row_pages = (row_sectors * cache.kc as u64).div_ceil(PAGE_SECTORS);
        cache.count(Count::Hits, clean_known.div_ceil(PAGE_SECTORS));
        cache.count(Count::Saved, row_pages);
        for block in 0..cache.kc {
            held.set_clean(block * cache.rows + row);
        }
        Some(Ok(true))
    }
}
