//! md's answer to a read error met by a pass (check included): the block is read again a
//! page (4 KiB) at a time, the pages that read are judged as usual, and only the pages
//! that still fail are written back from redundancy, so the drive can remap the sector
//! ([`Array::repair_read_error`]; nothing is written on an array opened read-only).
//!
//! Only bytes the redundancy vouches for are written; the callers decide which pages
//! (parity recomputed from the data; data rebuilt from parity only where the parity is
//! trusted and the page was consistent; a mirror copy only where the other copies agree,
//! or, with a checksum sidecar, the copy its checksum vouches for). Where the checksum
//! sidecar is authoritative, no page it says is wrong is written back.
//! A sector left unreadable is better than a wrong one that reads back.

use super::{SyncReport, PAGE};
use crate::array::Array;
use crate::checksums::Judgement;
use crate::error::Result;

/// Byte ranges `[lo, hi)` of a block, one per page, in order.
pub(super) type Pages = [(usize, usize)];

/// A block of `len` bytes cut into pages from its start.
pub(super) fn block_pages(len: usize) -> Vec<(usize, usize)> {
    let step = PAGE.min(len.max(1));
    (0..len)
        .step_by(step)
        .map(|a| (a, (a + step).min(len)))
        .collect()
}

/// Read `role`'s block at data sector `dsec` again, page by page, over `block`: a page
/// that reads replaces the block's bytes there (which were rebuilt, or not read); a page
/// that fails leaves them. Per page, whether it failed.
pub(super) fn reread(
    arr: &Array,
    role: usize,
    dsec: u64,
    block: &mut [u8],
    pages: &Pages,
) -> Vec<bool> {
    let mut page = vec![0u8; PAGE];
    pages
        .iter()
        .map(|&(lo, hi)| {
            let buf = &mut page[..hi - lo];
            // Read into a page of its own: a failed read may have filled part of it.
            match arr.read_block(role, dsec + (lo / 512) as u64, buf) {
                Ok(()) => {
                    block[lo..hi].copy_from_slice(buf);
                    false
                }
                Err(_) => true,
            }
        })
        .collect()
}

/// Write `block`'s pages that `failed` and that `allowed` lets through back to `role` at
/// data sector `dsec`, a run of adjacent pages at once (one read error counted per run).
pub(super) fn rewrite(
    arr: &Array,
    (role, dsec): (usize, u64),
    block: &[u8],
    pages: &Pages,
    failed: &[bool],
    allowed: impl Fn(usize) -> bool,
    rep: &mut SyncReport,
) {
    debug_assert_eq!(pages.len(), failed.len());
    let take = |i: usize| failed[i] && allowed(i);
    let mut i = 0;
    while i < pages.len() {
        if !take(i) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < pages.len() && take(j) && pages[j].0 == pages[j - 1].1 {
            j += 1;
        }
        let (lo, hi) = (pages[i].0, pages[j - 1].1);
        if arr.repair_read_error(role, dsec + (lo / 512) as u64, &block[lo..hi]) {
            rep.sectors_read_error_rewritten += ((hi - lo) / 512) as u64;
        }
        i = j;
    }
}

/// Does the checksum sidecar say that `bytes`, to be written back at array byte `off`,
/// are wrong? Only where it is authoritative for a whole block there (no sidecar, a
/// partial block, a suspect region or a write in flight: false).
pub(super) fn checksum_refuses(arr: &Array, off: u64, bytes: &[u8]) -> Result<bool> {
    let whole = whole_checksum_block(arr, off, bytes.len() as u64);
    match arr.checksums().filter(|_| whole) {
        Some(cs) => Ok(cs.judge(off / PAGE as u64, bytes)? == Judgement::Mismatch),
        None => Ok(false),
    }
}

/// Are array bytes `[off, off + len)` one whole checksum block (a page, or the array's
/// last, shorter one)?
pub(super) fn whole_checksum_block(arr: &Array, off: u64, len: u64) -> bool {
    off.is_multiple_of(PAGE as u64) && (len == PAGE as u64 || off + len == arr.size_bytes())
}

/// May data be rebuilt from the parity over sync-space sectors `[start, start + n)`? Not
/// while the array needs a resync, nor where the write-intent bitmap says a write may
/// have left the parity behind (a bit set, or a stale bitmap).
pub(super) fn parity_trusted(arr: &Array, start: u64, n: u64) -> bool {
    if arr.needs_resync() {
        return false;
    }
    match arr.bm().as_ref() {
        Some(bm) => !crate::locks::lock(bm).any_set(start, n),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_cut_into_whole_pages_and_a_short_tail() {
        assert_eq!(block_pages(8192), vec![(0, 4096), (4096, 8192)]);
        assert_eq!(block_pages(5120), vec![(0, 4096), (4096, 5120)]);
        assert_eq!(block_pages(1024), vec![(0, 1024)]);
        assert!(block_pages(0).is_empty());
    }
}
