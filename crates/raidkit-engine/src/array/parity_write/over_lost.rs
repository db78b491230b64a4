//! Writes into stripe rows where data is lost (bad blocks beyond the redundancy): row runs
//! with the same unreadable members and the same written blocks are planned together
//! ([`plan`] with `over_lost`). Where every data block can be known (read, reconstructed,
//! or written now) parity is recomputed from them and written with the data (never
//! read-modify-write), which clears the bad entries under it; otherwise the parity blocks
//! are recorded bad first (on disk), then the data is written, so a crash can never
//! reconstruct a block from stale parity.

use super::plan::{plan, Plan, StripeState};
use super::{rows_of, stripe_members, Piece};
use crate::array::stripe::compute_parity;
use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::meta::sb::Metadata;
use raidkit_layout::{StripeLayout, SECTOR};
use std::ops::Range;

impl Array {
    /// A RAID4/5/6 write into a stripe range where data is lost. The caller holds the
    /// stripe lock.
    pub(crate) fn write_stripe_over_lost(
        &self,
        stripe: u64,
        layout: &StripeLayout,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        self.debug_assert_stripe_locked(stripe);
        let stripe_start = stripe * self.geo.chunk_sectors;
        let rows = rows_of(pieces);
        // Rows differ by which members can be read there and which pieces cover them.
        let key = |row: u64| -> (Vec<bool>, Vec<bool>) {
            (
                stripe_members(layout)
                    .map(|r| self.readable(r, stripe_start + row, 1))
                    .collect(),
                pieces.iter().map(|p| p.rows().contains(&row)).collect(),
            )
        };
        let mut start = rows.start;
        while start < rows.end {
            let first = key(start);
            let mut end = start + 1;
            while end < rows.end && key(end) == first {
                end += 1;
            }
            self.write_rows_over_lost(stripe, layout, start..end, pieces)?;
            start = end;
        }
        Ok(())
    }

    /// One run of [`Array::write_stripe_over_lost`]: chunk sectors `rows`, where every
    /// piece covers all of the rows or none.
    fn write_rows_over_lost(
        &self,
        stripe: u64,
        layout: &StripeLayout,
        rows: Range<u64>,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let chunk = self.geo.chunk_sectors;
        let member_sector = stripe * chunk + rows.start;
        let row_sectors = rows.end - rows.start;
        let len = (row_sectors * SECTOR) as usize;
        // The written part of each block in these rows.
        let parts: Vec<Piece<'_>> = pieces
            .iter()
            .filter(|pc| pc.at <= rows.start && rows.end <= pc.at + pc.sectors)
            .map(|pc| {
                let from = ((rows.start - pc.at) * SECTOR) as usize;
                Piece {
                    block: pc.block,
                    at: rows.start,
                    sectors: row_sectors,
                    data: &pc.data[from..from + len],
                }
            })
            .collect();
        let written = |block: usize| parts.iter().any(|p| p.block == block);
        let mut state = StripeState {
            data_blocks: layout.data.len(),
            parity_blocks: 1 + usize::from(layout.q.is_some()),
            row_sectors,
            span_sectors: parts.len() as u64 * row_sectors,
            known_sectors: parts.len() as u64 * row_sectors,
            over_lost: true,
            unwritten_unreadable: (0..layout.data.len())
                .filter(|&k| {
                    !written(k) && !self.readable(layout.data[k], member_sector, row_sectors)
                })
                .count(),
            written_member_missing: parts.iter().any(|p| !self.present(layout.data[p.block])),
            ..StripeState::default()
        };
        loop {
            let known: Option<Vec<Vec<u8>>> = match plan(&state) {
                Plan::Compute => Some(vec![vec![0u8; len]; layout.data.len()]),
                Plan::Reconstruct => {
                    match self.read_stripe(stripe, layout, rows.start, row_sectors, false) {
                        Ok(sd) => Some(sd.data),
                        Err(EngineError::Unreadable { .. }) => {
                            state.reconstruct_failed = true;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
                Plan::ReadUnwritten => {
                    let mut data = vec![vec![0u8; len]; layout.data.len()];
                    let all = data.iter_mut().enumerate().all(|(k, buf)| {
                        let role = layout.data[k];
                        written(k)
                            || (self.readable(role, member_sector, row_sectors)
                                && self.read_block(role, member_sector, buf).is_ok())
                    });
                    if !all {
                        state.read_failed = true;
                        continue;
                    }
                    Some(data)
                }
                Plan::Refuse => {
                    let block = parts
                        .iter()
                        .map(|p| p.block)
                        .find(|&k| !self.present(layout.data[k]))
                        .unwrap_or(0);
                    return Err(self.over_lost_error(stripe, &rows, &parts, format!(
                        "role {} (data block {block} of stripe {stripe}) is missing and another block of the stripe is lost, so the data could be stored nowhere; add a member",
                        layout.data[block]
                    )));
                }
                Plan::StaleParity => None,
                step => {
                    debug_assert!(false, "{step:?} planned over lost data");
                    return Err(EngineError::Invalid(format!(
                        "internal error: {step:?} planned over lost data of stripe {stripe}"
                    )));
                }
            };
            return match known {
                Some(mut data) => {
                    for pc in &parts {
                        data[pc.block].copy_from_slice(pc.data);
                    }
                    let (p, q) = compute_parity(layout, &data, len);
                    self.write_pieces_and_parity(layout, member_sector, &parts, &p, &q)
                }
                None => {
                    // Parity cannot be recomputed: it goes stale. Record that before the
                    // data changes.
                    self.mark_parity_stale(stripe, layout, &rows, &parts)?;
                    parts.iter().try_for_each(|pc| {
                        self.write_block(layout.data[pc.block], member_sector, pc.data)
                            .map(drop)
                    })
                }
            };
        }
    }

    /// Record the parity of `rows` as bad on every parity member there is (on disk; with
    /// 0.90 metadata, which has no log, in memory only, loudly, like the loss itself).
    fn mark_parity_stale(
        &self,
        stripe: u64,
        layout: &StripeLayout,
        rows: &Range<u64>,
        parts: &[Piece<'_>],
    ) -> Result<()> {
        let member_sector = stripe * self.geo.chunk_sectors + rows.start;
        let row_sectors = rows.end - rows.start;
        for role in std::iter::once(layout.p).chain(layout.q) {
            if !self.present(role) {
                continue;
            }
            if self.metadata == Metadata::V090 {
                self.record_bad(role, member_sector, row_sectors);
            } else {
                self.record_bad_inner(role, member_sector, row_sectors, true)
                    .map_err(|reason| {
                        self.over_lost_error(stripe, rows, parts, format!(
                            "stripe {stripe} has a lost block, so its parity on role {role} cannot be recomputed, and marking that parity stale failed: {reason}; nothing was written"
                        ))
                    })?;
            }
        }
        Ok(())
    }

    /// The error of a write over lost data: the array bytes of the first written block's
    /// rows.
    fn over_lost_error(
        &self,
        stripe: u64,
        rows: &Range<u64>,
        parts: &[Piece<'_>],
        why: String,
    ) -> EngineError {
        let chunk = self.geo.chunk_sectors;
        let data_blocks = self.geo.data_disks() as u64;
        let block = parts.first().map_or(0, |p| p.block) as u64;
        let offset = ((stripe * data_blocks + block) * chunk + rows.start) * SECTOR;
        EngineError::WriteFailed {
            offset,
            end: offset + (rows.end - rows.start) * SECTOR,
            why,
        }
    }
}
