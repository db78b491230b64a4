//! RAID4/5/6 stripes: their layout, reading a stripe's blocks with what is missing
//! reconstructed from parity, and computing P and Q.

use crate::array::cache::write::{cached_cover, copy_from_cache};
use crate::array::cache::{Count, PAGE_SECTORS};
use crate::array::member_io::MemberOp;
use crate::array::parity_write::stripe_members;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use raidkit_layout::StripeLayout;
use raidkit_layout::SECTOR;
use raidkit_parity as parity;
use smallvec::SmallVec;
use std::borrow::Cow;

/// Blocks of one stripe over a sector range, with missing ones reconstructed.
pub(crate) struct StripeData {
    pub data: Vec<Vec<u8>>,
    pub p: Vec<u8>,
    pub q: Option<Vec<u8>>,
    /// Roles whose read failed with an IO error (their blocks were reconstructed or
    /// recomputed): what a pass may write back, as md does after a read error.
    pub read_errors: Vec<usize>,
    /// Roles of the stripe whose blocks were not read from their member (missing, failed,
    /// a bad block, past a rebuild's checkpoint, a read error): reconstructed from parity,
    /// or (P, Q) recomputed from the data.
    pub rebuilt: Vec<usize>,
}

/// A stripe's blocks over a range, borrowed (from a [`StripeData`], or from the buffers
/// of a run of stripes read together).
pub(crate) struct Blocks<'a> {
    pub data: Vec<&'a [u8]>,
    pub p: &'a [u8],
    pub q: Option<&'a [u8]>,
}

impl StripeData {
    /// The blocks, borrowed.
    pub(crate) fn blocks(&self) -> Blocks<'_> {
        Blocks {
            data: self.data.iter().map(Vec::as_slice).collect(),
            p: &self.p,
            q: self.q.as_deref(),
        }
    }

    /// [`StripeData::block_of`], taken out of the stripe (no copy).
    pub(crate) fn into_block(self, layout: &StripeLayout, role: usize) -> Vec<u8> {
        if role == layout.p {
            self.p
        } else if Some(role) == layout.q {
            self.q.unwrap_or_default()
        } else if let Some(k) = layout.data.iter().position(|&r| r == role) {
            self.data.into_iter().nth(k).unwrap_or_default()
        } else {
            Vec::new()
        }
    }

    /// [`StripeData::block_of`], to change.
    pub(crate) fn block_of_mut(&mut self, layout: &StripeLayout, role: usize) -> &mut [u8] {
        if role == layout.p {
            &mut self.p
        } else if Some(role) == layout.q {
            self.q.as_deref_mut().unwrap_or(&mut [])
        } else if let Some(k) = layout.data.iter().position(|&r| r == role) {
            &mut self.data[k]
        } else {
            &mut []
        }
    }

    /// The block of `role` (a data block, P or Q; empty for a role not in the stripe, or
    /// Q when it was not read).
    pub(crate) fn block_of(&self, layout: &StripeLayout, role: usize) -> &[u8] {
        if role == layout.p {
            &self.p
        } else if Some(role) == layout.q {
            self.q.as_deref().unwrap_or(&[])
        } else if let Some(k) = layout.data.iter().position(|&r| r == role) {
            &self.data[k]
        } else {
            &[]
        }
    }
}

impl Array {
    /// Are all of the stripe's parity members (P, and Q for RAID6) failed or missing, with
    /// no replacement being built? Then writes there keep no parity.
    pub(crate) fn parity_gone(&self, layout: &StripeLayout) -> bool {
        if self.replacing() {
            return false;
        }
        // One look at the slots, no member cloned (twice per small write before).
        let slots = self.slots();
        let gone = |r: usize| {
            slots
                .get(r)
                .and_then(Option::as_ref)
                .is_none_or(|m| m.is_failed())
        };
        gone(layout.p) && layout.q.is_none_or(gone)
    }

    /// Can every member of the stripe (data, P, Q) be read over data sectors
    /// `[dsec, dsec + n)`? One look at the role slots for all of them (a small write asks
    /// this once; member by member it took the slots' lock and cloned a member per role).
    pub(crate) fn stripe_readable(&self, layout: &StripeLayout, dsec: u64, n: u64) -> bool {
        let slots = self.slots();
        crate::array::parity_write::stripe_members(layout).all(|r| {
            slots
                .get(r)
                .and_then(Option::as_ref)
                .is_some_and(|m| m.readable(dsec, n))
        })
    }

    /// Read each `(role, data sector, buffer)` all at once (one batch); per read, whether
    /// it succeeded (filled every byte of its buffer).
    pub(crate) fn read_members_at_once(&self, reads: Vec<(usize, u64, &mut [u8])>) -> Vec<bool> {
        let mut ops: Vec<MemberOp<'_>> = reads
            .into_iter()
            .map(|(r, dsec, buf)| MemberOp::read(r, dsec, buf))
            .collect();
        self.member_io(&mut ops);
        ops.into_iter().map(|op| op.read_result().is_ok()).collect()
    }

    /// The layout of `stripe`: the array's copy for its place in the rotation (derived
    /// once at assembly), or derived now where there is none.
    pub(crate) fn stripe_layout(&self, stripe: u64) -> Result<Cow<'_, StripeLayout>> {
        let out_of_range = || EngineError::Invalid(format!("stripe {stripe} out of range"));
        let period = self.layouts.len() as u64;
        if period > 0 {
            if stripe >= self.geo_stripes {
                return Err(out_of_range());
            }
            return Ok(Cow::Borrowed(&self.layouts[(stripe % period) as usize]));
        }
        self.geo
            .stripe(stripe)
            .map(Cow::Owned)
            .ok_or_else(out_of_range)
    }

    /// Read the blocks of `stripe` over chunk sectors `[at, at + sectors)`, reconstructing
    /// what is missing. With `need_parity`, missing P/Q are recomputed too.
    pub(crate) fn read_stripe(
        &self,
        stripe: u64,
        layout: &StripeLayout,
        at: u64,
        sectors: u64,
        need_parity: bool,
    ) -> Result<StripeData> {
        self.read_stripe_with(stripe, layout, at, sectors, need_parity, Vec::new())
            .0
    }

    /// [`Array::read_stripe`], with `others` (member IOs elsewhere: a rebuild's previous
    /// block) submitted in the same batch; their outcomes in order (see
    /// [`MemberOp::write_result`]).
    pub(crate) fn read_stripe_with(
        &self,
        stripe: u64,
        layout: &StripeLayout,
        at: u64,
        sectors: u64,
        need_parity: bool,
        others: Vec<MemberOp<'_>>,
    ) -> (Result<StripeData>, Vec<Result<bool>>) {
        let mut other_results = Vec::with_capacity(others.len());
        let r = self.read_stripe_batch(
            stripe,
            layout,
            at,
            sectors,
            need_parity,
            others,
            &mut other_results,
        );
        (r, other_results)
    }

    #[allow(clippy::too_many_arguments)]
    fn read_stripe_batch(
        &self,
        stripe: u64,
        layout: &StripeLayout,
        at: u64,
        sectors: u64,
        need_parity: bool,
        others: Vec<MemberOp<'_>>,
        other_results: &mut Vec<Result<bool>>,
    ) -> Result<StripeData> {
        let member_sector = stripe * self.geo.chunk_sectors + at;
        let len = (sectors * SECTOR) as usize;
        let mut data: Vec<Vec<u8>> = crate::dev::io::alloc::zeroed_blocks(layout.data.len(), len);
        let mut pq: Vec<Vec<u8>> =
            crate::dev::io::alloc::zeroed_blocks(1 + usize::from(layout.q.is_some()), len);
        // Every readable member of the stripe at once: data, P, Q.
        let roles: Vec<usize> = stripe_members(layout).collect();
        let readable: Vec<bool> = roles
            .iter()
            .map(|&r| self.can_read(r, member_sector, sectors))
            .collect();
        let mut got = vec![false; roles.len()];
        let mut why = Vec::new();
        let mut read_errors = Vec::new();
        {
            let mut ops = Vec::with_capacity(roles.len());
            let mut which = Vec::with_capacity(roles.len());
            for (k, buf) in data.iter_mut().chain(pq.iter_mut()).enumerate() {
                if readable[k] {
                    ops.push(MemberOp::read(roles[k], member_sector, buf));
                    which.push(k);
                }
            }
            let reads = ops.len();
            ops.extend(others);
            self.member_io(&mut ops);
            other_results.extend(ops.drain(reads..).map(MemberOp::write_result));
            for (op, k) in ops.into_iter().zip(which) {
                let data_block = k < layout.data.len();
                match op.read_result() {
                    Ok(()) => got[k] = true,
                    Err(e) => {
                        if matches!(e, EngineError::Io { .. }) {
                            read_errors.push(roles[k]);
                        }
                        if data_block {
                            why.push(e.to_string());
                        }
                    }
                }
            }
        }
        let missing: Vec<usize> = (0..layout.data.len()).filter(|&k| !got[k]).collect();
        let rebuilt: Vec<usize> = (0..roles.len())
            .filter(|&k| !got[k])
            .map(|k| roles[k])
            .collect();
        let nd = layout.data.len();
        let mut pq = pq.into_iter();
        let p = pq.next().filter(|_| got[nd]);
        let q = pq
            .next()
            .filter(|_| got.get(nd + 1).copied().unwrap_or(false));
        reconstruct(layout, &mut data, &missing, p.as_deref(), q.as_deref(), len).map_err(
            |what| EngineError::Unreadable {
                offset: 0,
                end: 0,
                why: format!(
                    "stripe {stripe}: {what}{}{}",
                    if why.is_empty() { "" } else { ": " },
                    why.join("; ")
                ),
            },
        )?;
        let has_q = layout.q.is_some();
        let (p, q) = if need_parity && (p.is_none() || (has_q && q.is_none())) {
            let (new_p, new_q) = compute_parity(layout, &data, len);
            (
                p.unwrap_or(new_p),
                if has_q {
                    Some(q.unwrap_or(new_q))
                } else {
                    None
                },
            )
        } else {
            (p.unwrap_or_else(|| vec![0u8; len]), q)
        };
        Ok(StripeData {
            data,
            p,
            q,
            read_errors,
            rebuilt,
        })
    }

    /// Stripe, data block and chunk sector of array sector `sector` (parity levels).
    pub(crate) fn stripe_place(&self, sector: u64) -> (u64, usize, u64) {
        let chunk = self.geo.chunk_sectors;
        let data_blocks = self.geo.data_disks() as u64;
        (
            sector / chunk / data_blocks,
            (sector / chunk % data_blocks) as usize,
            sector % chunk,
        )
    }

    /// What the stripe cache holds of data block `block` of `stripe` from chunk sector
    /// `at` over `buf`: Some(true) all of it (copied into `buf`), Some(false) some of it,
    /// None nothing.
    pub(crate) fn read_from_cache(
        &self,
        stripe: u64,
        block: usize,
        at: u64,
        buf: &mut [u8],
    ) -> Option<bool> {
        let cache = self.cache.as_ref()?;
        let entry = cache.get(stripe)?;
        let held = lock(&entry.state);
        if held.dead || held.alloc == 0 {
            return None;
        }
        let sectors = buf.len() as u64 / SECTOR;
        match cached_cover(cache, &held, block, at, sectors) {
            (true, _) => {
                copy_from_cache(cache, &held, block, at, buf);
                cache.count(Count::Hits, sectors.div_ceil(PAGE_SECTORS));
                Some(true)
            }
            (false, true) => Some(false),
            (false, false) => None,
        }
    }

    /// Read a piece of one chunk at array sector `sector` of a parity level: what the
    /// stripe cache holds of it from there, the rest from the member (or reconstructed).
    pub(crate) fn read_stripe_piece(&self, sector: u64, buf: &mut [u8]) -> Result<()> {
        let sectors = buf.len() as u64 / SECTOR;
        let (stripe, block, at) = self.stripe_place(sector);
        if let Some(cache) = &self.cache {
            if let Some(entry) = cache.get(stripe) {
                let held = lock(&entry.state);
                if !held.dead && held.alloc > 0 {
                    let (all, any) = cached_cover(cache, &held, block, at, sectors);
                    if all {
                        copy_from_cache(cache, &held, block, at, buf);
                        cache.count(Count::Hits, sectors.div_ceil(PAGE_SECTORS));
                        return Ok(());
                    }
                    if any {
                        self.read_parity_piece(sector, stripe, block, at, buf)?;
                        copy_from_cache(cache, &held, block, at, buf);
                        return Ok(());
                    }
                }
            }
        }
        self.read_parity_piece(sector, stripe, block, at, buf)
    }

    /// Read data block `k` of `stripe` at chunk sector `a` (array sector `s`) from its
    /// member, reconstructing it from the others if that fails.
    pub(crate) fn read_parity_piece(
        &self,
        s: u64,
        stripe: u64,
        k: usize,
        a: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let n = buf.len() as u64 / SECTOR;
        let c = self.geo.chunk_sectors;
        let layout = self.stripe_layout(stripe)?;
        let role = layout.data[k];
        let member_sector = stripe * c + a;
        let direct = if self.can_read(role, member_sector, n) {
            Some(self.member_read(role, member_sector, buf))
        } else {
            None
        };
        if let Some(Ok(())) = direct {
            return Ok(());
        }
        let _g = self.locks.lock(stripe);
        let known = self
            .read_stripe(stripe, &layout, a, n, false)
            .map_err(|e| annotate_unreadable(e, s * SECTOR, (s + n) * SECTOR))?;
        buf.copy_from_slice(&known.data[k]);
        if let Some(Err(EngineError::Io { .. })) = direct {
            self.repair_read_error(role, member_sector, buf);
        }
        Ok(())
    }
}

/// Rebuild the `missing` data blocks (logical indices) of a stripe from the others and
/// the parity that could be read; Err says what is unavailable.
fn reconstruct(
    layout: &StripeLayout,
    data: &mut [Vec<u8>],
    missing: &[usize],
    p: Option<&[u8]>,
    q: Option<&[u8]>,
    len: usize,
) -> std::result::Result<(), String> {
    let from_p = |data: &mut [Vec<u8>], k: usize, p: &[u8]| {
        let mut out = p.to_vec();
        for (j, d) in data.iter().enumerate() {
            if j != k {
                parity::xor_into(&mut out, d);
            }
        }
        data[k] = out;
    };
    match (missing, layout.q.is_some()) {
        ([], _) => {}
        (&[k], false) => {
            let Some(p) = p else {
                return Err("a data block and parity are both unavailable".into());
            };
            from_p(data, k, p);
        }
        (&[k], true) => {
            if let Some(p) = p {
                from_p(data, k, p);
            } else if let Some(q) = q {
                let mut slots = to_slots(layout, data, len);
                {
                    let mut refs: Vec<&mut [u8]> =
                        slots.iter_mut().map(|v| v.as_mut_slice()).collect();
                    parity::recover_one_q(&mut refs, layout.slot[k], q);
                }
                from_slots(layout, data, &mut slots);
            } else {
                return Err("a data block, P and Q are all unavailable".into());
            }
        }
        (&[a, b], true) => {
            let (Some(p), Some(q)) = (p, q) else {
                return Err("two data blocks and a parity block are unavailable".into());
            };
            let (sa, sb) = (layout.slot[a], layout.slot[b]);
            let mut slots = to_slots(layout, data, len);
            {
                let mut refs: Vec<&mut [u8]> = slots.iter_mut().map(|v| v.as_mut_slice()).collect();
                parity::recover_two(&mut refs, sa.min(sb), sa.max(sb), p, q);
            }
            from_slots(layout, data, &mut slots);
        }
        (m, _) => return Err(format!("{} data blocks are unavailable", m.len())),
    }
    Ok(())
}

pub(crate) fn annotate_unreadable(e: EngineError, offset: u64, end: u64) -> EngineError {
    match e {
        EngineError::Unreadable { why, .. } if end > 0 => {
            EngineError::Unreadable { offset, end, why }
        }
        e => e,
    }
}

/// Move data blocks into syndrome-slot order (zero blocks for unused DDF slots).
pub(crate) fn to_slots(layout: &StripeLayout, data: &mut [Vec<u8>], len: usize) -> Vec<Vec<u8>> {
    let mut slots: Vec<Vec<u8>> = vec![Vec::new(); layout.syndrome_width];
    for (k, d) in data.iter_mut().enumerate() {
        slots[layout.slot[k]] = std::mem::take(d);
    }
    for s in slots.iter_mut() {
        if s.is_empty() {
            *s = vec![0u8; len];
        }
    }
    slots
}

pub(crate) fn from_slots(layout: &StripeLayout, data: &mut [Vec<u8>], slots: &mut [Vec<u8>]) {
    for (k, d) in data.iter_mut().enumerate() {
        *d = std::mem::take(&mut slots[layout.slot[k]]);
    }
}

/// P (and Q) over data blocks given in logical order.
pub(crate) fn compute_parity(
    layout: &StripeLayout,
    data: &[Vec<u8>],
    len: usize,
) -> (Vec<u8>, Vec<u8>) {
    let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    compute_parity_refs(layout, &refs, len)
}

pub(crate) fn compute_parity_refs(
    layout: &StripeLayout,
    data: &[&[u8]],
    len: usize,
) -> (Vec<u8>, Vec<u8>) {
    let mut p = vec![0u8; len];
    let mut q = vec![0u8; if layout.q.is_some() { len } else { 0 }];
    parity_into(layout, data, &mut p, &mut q);
    (p, q)
}

/// Do `p` (and `q`, for RAID6) hold the parity of the data blocks given in logical order?
/// One read pass over the blocks, nothing computed into a buffer (`raidkit_parity`'s
/// verification kernels). `q` is ignored without a Q.
pub(crate) fn parity_matches(layout: &StripeLayout, data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
    if layout.q.is_none() {
        let mut all: SmallVec<[&[u8]; 8]> = data.iter().copied().collect();
        all.push(p);
        return parity::xor_zero(&all);
    }
    with_syndrome_slots(layout, data, p.len(), |slots| parity::pq_check(slots, p, q))
}

/// Call `f` with the data blocks (given in logical order) in their syndrome slots, unused
/// slots (DDF layouts) as zero blocks of `len` bytes.
fn with_syndrome_slots<R>(
    layout: &StripeLayout,
    data: &[&[u8]],
    len: usize,
    f: impl FnOnce(&[&[u8]]) -> R,
) -> R {
    let mut slots: Vec<Option<&[u8]>> = vec![None; layout.syndrome_width];
    for (k, d) in data.iter().enumerate() {
        slots[layout.slot[k]] = Some(d);
    }
    let zero = if slots.iter().any(Option::is_none) {
        vec![0u8; len]
    } else {
        Vec::new()
    };
    let slots: Vec<&[u8]> = slots.iter().map(|s| s.unwrap_or(&zero)).collect();
    f(&slots)
}

/// P (and Q, for RAID6) over data blocks given in logical order, written over `p` and
/// `q` (every byte; `q` is ignored without a Q). `p.len()` is the block length.
pub(crate) fn parity_into(layout: &StripeLayout, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    if layout.q.is_none() {
        parity::xor_gen(data, p);
        return;
    }
    let len = p.len();
    with_syndrome_slots(layout, data, len, |slots| parity::pq_gen(slots, p, q));
}
