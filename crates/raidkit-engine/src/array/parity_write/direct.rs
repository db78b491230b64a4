//! Stripe writes that go straight to the members (no stripe cache, or the cache let them
//! by): what [`plan`] decides, carried out on the client's own buffers.

use super::plan::{plan, Plan, StripeState};
use super::{rows_of, Piece};
use crate::array::member_io::MemberOp;
use crate::array::scratch::{
    compute_parity_scratch, scratch_blocks, scratch_put, scratch_sized, scratch_take, ScratchBufs,
};
use crate::array::stripe::{compute_parity, parity_into};
use crate::array::Array;
use crate::error::{EngineError, Result};
use raidkit_layout::{StripeLayout, SECTOR};
use raidkit_parity as parity;
use std::ops::Range;

impl Array {
    /// Write pieces of one stripe to the members, taking the stripe's IO lock.
    pub(crate) fn write_stripe_direct(&self, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        let _stripe_lock = self.locks.lock(stripe);
        self.write_stripe_locked(stripe, pieces)
    }

    /// [`Array::write_stripe_direct`] with the stripe's IO lock held by the caller.
    pub(crate) fn write_stripe_locked(&self, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        self.debug_assert_stripe_locked(stripe);
        let layout = self.stripe_layout(stripe)?;
        let rows = rows_of(pieces);
        let stripe_start = stripe * self.geo.chunk_sectors;
        self.bitmap_mark(stripe_start + rows.start, rows.end - rows.start)?;
        let mut state = self.analyse_pieces(&layout, stripe_start, &rows, pieces);
        let mut reconstruct_error = None;
        loop {
            let step = plan(&state);
            let done = match step {
                Plan::FullStripe => self.write_full_stripe(&layout, stripe_start, pieces),
                Plan::DataOnly => {
                    // Every parity member of this stripe is gone: there is no parity to
                    // keep, so the data is written alone, as md does, with no reads (a
                    // stripe whose other data cannot be read still takes writes).
                    let mut ops: Vec<MemberOp<'_>> = pieces
                        .iter()
                        .map(|pc| {
                            MemberOp::write(layout.data[pc.block], stripe_start + pc.at, pc.data)
                        })
                        .collect();
                    self.member_io(&mut ops);
                    ops.into_iter()
                        .try_for_each(|op| op.write_result().map(drop))
                }
                Plan::Compute | Plan::ReconstructWrite => {
                    self.rcw(&layout, stripe_start, &rows, pieces)
                }
                Plan::ReadModifyWrite => self.rmw(&layout, stripe_start, &rows, pieces),
                Plan::Reconstruct => {
                    match self.read_stripe(
                        stripe,
                        &layout,
                        rows.start,
                        rows.end - rows.start,
                        false,
                    ) {
                        Ok(mut known) => {
                            for pc in pieces {
                                let off = ((pc.at - rows.start) * SECTOR) as usize;
                                known.data[pc.block][off..off + pc.data.len()]
                                    .copy_from_slice(pc.data);
                            }
                            let len = ((rows.end - rows.start) * SECTOR) as usize;
                            let (p, q) = compute_parity(&layout, &known.data, len);
                            self.write_pieces_and_parity(
                                &layout,
                                stripe_start + rows.start,
                                pieces,
                                &p,
                                &q,
                            )
                        }
                        Err(e @ EngineError::Unreadable { .. }) => {
                            state.reconstruct_failed = true;
                            state.bad_blocks = self.stripe_has_bad(
                                &layout,
                                stripe_start + rows.start,
                                rows.end - rows.start,
                            );
                            reconstruct_error = Some(e);
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                // Data is lost in these rows (bad blocks beyond the redundancy): write
                // what can be made valid, row by row.
                Plan::OverLost => self.write_stripe_over_lost(stripe, &layout, pieces),
                Plan::Fail => {
                    Err(reconstruct_error
                        .take()
                        .unwrap_or_else(|| EngineError::Unreadable {
                            offset: 0,
                            end: 0,
                            why: format!("stripe {stripe} cannot be reconstructed"),
                        }))
                }
                Plan::ReadUnwritten | Plan::StaleParity | Plan::Refuse => {
                    debug_assert!(false, "{step:?} planned outside lost data");
                    Err(EngineError::Invalid(format!(
                        "internal error: {step:?} planned for stripe {stripe} outside lost data"
                    )))
                }
            };
            match done {
                Ok(()) => return self.check_still_runs(stripe),
                // A read that read-modify-write or reconstruct-write counted on failed:
                // reconstruct instead.
                Err(EngineError::Io { .. } | EngineError::Unreadable { .. })
                    if matches!(step, Plan::ReadModifyWrite | Plan::ReconstructWrite) =>
                {
                    state.read_failed = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// What a direct write of `pieces` finds in the stripe (see [`StripeState`]).
    fn analyse_pieces(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        rows: &Range<u64>,
        pieces: &[Piece<'_>],
    ) -> StripeState {
        let chunk = self.geo.chunk_sectors;
        let row_sectors = rows.end - rows.start;
        let written: u64 = pieces.iter().map(|p| p.sectors).sum();
        StripeState {
            data_blocks: layout.data.len(),
            parity_blocks: 1 + usize::from(layout.q.is_some()),
            row_sectors,
            whole_stripe: pieces.len() == layout.data.len()
                && pieces.iter().all(|p| p.at == 0 && p.sectors == chunk),
            span_sectors: written,
            known_sectors: written,
            all_readable: self.stripe_readable(layout, stripe_start + rows.start, row_sectors),
            parity_gone: self.parity_gone(layout),
            ..StripeState::default()
        }
    }

    /// Every data block written whole: P/Q generated from the new data and the stripe
    /// written a slice at a time, into reused scratch buffers (no allocation, zeroing or
    /// fresh pages per stripe; the generators overwrite every byte).
    fn write_full_stripe(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let len = (self.geo.chunk_sectors * SECTOR) as usize;
        let has_q = layout.q.is_some();
        let mut p = scratch_take();
        let mut q = scratch_take();
        p.resize(len, 0);
        q.resize(if has_q { len } else { 0 }, 0);
        // The data and P/Q the kernel copies into the members' page cache are still in
        // this core's cache (about 10% more full-stripe bandwidth on tmpfs than chunks).
        let members = layout.data.len() + 1 + usize::from(has_q);
        let slice = full_stripe_slice(members, len);
        let written: Result<()> = (|| {
            let mut off = 0;
            while off < len {
                let n = slice.min(len - off);
                let data: Vec<&[u8]> = pieces.iter().map(|pc| &pc.data[off..off + n]).collect();
                let q_len = if has_q { n } else { 0 };
                parity_into(layout, &data, &mut p[..n], &mut q[..q_len]);
                let sector = stripe_start + (off as u64) / SECTOR;
                // The slice of every member at once.
                let mut ops = Vec::with_capacity(members);
                ops.push(MemberOp::write(layout.p, sector, &p[..n]));
                if let Some(q_role) = layout.q {
                    ops.push(MemberOp::write(q_role, sector, &q[..n]));
                }
                for pc in pieces {
                    ops.push(MemberOp::write(
                        layout.data[pc.block],
                        sector,
                        &pc.data[off..off + n],
                    ));
                }
                self.member_io(&mut ops);
                for op in ops {
                    op.write_result()?;
                }
                off += n;
            }
            Ok(())
        })();
        scratch_put(p);
        scratch_put(q);
        written
    }

    /// Read-modify-write: the old data under the pieces and the old P/Q, read at once;
    /// P/Q += change. The buffers are reused, not cleared: every byte is read before use,
    /// and a failed read returns before any is used (the caller reconstructs instead).
    fn rmw(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        rows: &Range<u64>,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let rows_start = stripe_start + rows.start;
        let len = ((rows.end - rows.start) * SECTOR) as usize;
        let mut pq = scratch_blocks(1 + usize::from(layout.q.is_some()), len);
        let mut olds = ScratchBufs(
            pieces
                .iter()
                .map(|pc| scratch_sized(pc.data.len()))
                .collect(),
        );
        {
            let mut ops = Vec::with_capacity(pieces.len() + 2);
            for (role, buf) in std::iter::once(layout.p).chain(layout.q).zip(pq.iter_mut()) {
                ops.push(MemberOp::read(role, rows_start, buf));
            }
            for (pc, old) in pieces.iter().zip(olds.iter_mut()) {
                ops.push(MemberOp::read(
                    layout.data[pc.block],
                    stripe_start + pc.at,
                    old,
                ));
            }
            self.member_io(&mut ops);
            for op in ops {
                op.read_result()?;
            }
        }
        let (p, mut q) = match pq.split_first_mut() {
            Some((p, q)) => (p, q.first_mut()),
            None => {
                return Err(EngineError::Invalid(
                    "internal error: no parity buffer".into(),
                ))
            }
        };
        for (pc, delta) in pieces.iter().zip(olds.iter_mut()) {
            parity::xor_into(delta, pc.data); // old ^ new
            let off = ((pc.at - rows.start) * SECTOR) as usize;
            parity::xor_into(&mut p[off..off + delta.len()], delta);
            if let Some(q) = q.as_deref_mut() {
                let coef = parity::gf::exp(layout.slot[pc.block]);
                parity::mul_acc(&mut q[off..off + delta.len()], delta, coef);
            }
        }
        let q: &[u8] = q.map_or(&[], |q| q.as_slice());
        self.write_pieces_and_parity(layout, rows_start, pieces, p, q)
    }

    /// Reconstruct-write: read what the pieces do not cover of every data block over the
    /// rows, all at once, compute P/Q (nothing is read when the pieces cover the rows).
    /// The buffers are reused, not cleared: every byte is read or copied from a piece
    /// before use, and a failed read returns before any is used.
    fn rcw(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        rows: &Range<u64>,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let len = ((rows.end - rows.start) * SECTOR) as usize;
        let byte = |sector: u64| ((sector - rows.start) * SECTOR) as usize;
        let mut data = scratch_blocks(layout.data.len(), len);
        {
            let mut ops = Vec::with_capacity(2 * layout.data.len());
            for (block, buf) in data.iter_mut().enumerate() {
                let role = layout.data[block];
                let mine = pieces.iter().find(|p| p.block == block);
                let covered = mine.map_or(rows.start..rows.start, Piece::rows);
                let (before, rest) = buf.split_at_mut(byte(covered.start));
                let after = &mut rest[byte(covered.end) - byte(covered.start)..];
                if !before.is_empty() {
                    ops.push(MemberOp::read(role, stripe_start + rows.start, before));
                }
                if !after.is_empty() {
                    ops.push(MemberOp::read(role, stripe_start + covered.end, after));
                }
            }
            self.member_io(&mut ops);
            for op in ops {
                op.read_result()?;
            }
        }
        for pc in pieces {
            data[pc.block][byte(pc.at)..byte(pc.at) + pc.data.len()].copy_from_slice(pc.data);
        }
        let (p, q) = compute_parity_scratch(layout, &data, len);
        let pq = ScratchBufs(vec![p, q]);
        self.write_pieces_and_parity(layout, stripe_start + rows.start, pieces, &pq[0], &pq[1])
    }

    /// Write the pieces and P (and Q) of the rows starting at member sector `rows_start`,
    /// all at once.
    pub(crate) fn write_pieces_and_parity(
        &self,
        layout: &StripeLayout,
        rows_start: u64,
        pieces: &[Piece<'_>],
        p: &[u8],
        q: &[u8],
    ) -> Result<()> {
        let stripe_start = rows_start - rows_start % self.geo.chunk_sectors;
        let mut ops = Vec::with_capacity(pieces.len() + 2);
        for pc in pieces {
            ops.push(MemberOp::write(
                layout.data[pc.block],
                stripe_start + pc.at,
                pc.data,
            ));
        }
        ops.push(MemberOp::write(layout.p, rows_start, p));
        if let Some(q_role) = layout.q {
            ops.push(MemberOp::write(q_role, rows_start, q));
        }
        self.member_io(&mut ops);
        for op in ops {
            op.write_result()?;
        }
        Ok(())
    }
}

/// Bytes of each member's chunk handled at once by a full-stripe write. When this thread
/// copies the slices into the members itself, the slices of all `members` (data, P and
/// Q) together stay within about 768 KiB, a part of a core's L2 cache, so parity
/// generation and the copies reuse cached data: a multiple of 16 KiB, at least 32 KiB
/// (fewer, larger writes beyond that matter more). When the writer lanes copy them
/// ([`crate::dev::io::large_writes_in_lanes`]), up to 512 KiB. At most the chunk `len`.
pub(crate) fn full_stripe_slice(members: usize, len: usize) -> usize {
    const BUDGET: usize = 768 << 10;
    if crate::dev::io::large_writes_in_lanes() {
        // The writer lanes copy each member's slice on their own threads: the caller's
        // cache does not matter, each hand-over does (whole 512 KiB chunks: 0.42-0.64x of
        // raw under load against 0.43-0.66x in 256 KiB slices and 0.5x in 128 KiB ones).
        return len.min(512 << 10);
    }
    let per = (BUDGET / members.max(1)) / (16 << 10) * (16 << 10);
    per.max(32 << 10).min(len)
}
