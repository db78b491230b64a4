//! Runs of consecutive stripes read with one IO per member, for the passes over a
//! RAID4/5/6 array (check, resync, repair, rebuild).
//!
//! A member holds one chunk of every stripe, stripe after stripe: its chunks of stripes
//! `[first, first + count)` are one contiguous range of its data area. A pass reads such
//! a run from every member at once, one IO of up to [`RUN_MEMBER_BYTES`] per member (md
//! merges its page-sized sync reads into large requests; one IO per 64 KiB chunk gave a
//! RAID5 check 0.44× of the members' bandwidth against 0.58× with 512 KiB chunks), then
//! completes each stripe from the run's buffers ([`Run::complete`]): the blocks read are
//! used in place, and the block of a member that is not there to be read (failed,
//! missing, being rebuilt, a bad block) is reconstructed into its buffer. A stripe where
//! a member that can be read was not read by the run (a read error, a member failed or a
//! bad block recorded since) is left to the caller's stripe-by-stripe path, which reads
//! it again on its own and handles the error exactly as before.
//!
//! A rebuild's run (a `target` role given) reads only what the target's blocks need: on
//! RAID6, with every other member of a stripe to be read, one missing block takes P and
//! the other data blocks (plain XOR) and a missing P the data blocks, so the stripe's Q
//! chunk is left out of the member's read (a missing Q takes the data blocks: P is left
//! out). A fifth of the reads of a 6-member rebuild (what `perf` showed: reads are half of
//! a rebuild's CPU), and no Q syndrome computed where P alone is rebuilt. Only the
//! target's blocks are completed then.
//!
//! The buffers are reused from run to run without clearing ([`RunBufs`]): a block of a
//! stripe is looked at only once every byte of it is known — read by a successful read
//! of the whole run, or written by reconstruction (every byte of the block) — so neither
//! a failed read's leftovers nor an earlier run's bytes are ever taken for data.

use crate::array::parity_write::stripe_members;
use crate::array::stripe::{parity_into, Blocks};
use crate::array::Array;
use crate::error::Result;
use crate::locks::lock;
use raidkit_layout::{StripeLayout, SECTOR};
use raidkit_parity as parity;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

/// Member bytes a run reads per member (when a chunk is smaller: else one stripe).
pub(crate) const RUN_MEMBER_BYTES: u64 = 1 << 20;

/// A job of `stripes` stripes has runs of at most this share of them (1/16): a small
/// array still moves its progress, checkpoints and stop points in steps, not at once.
const RUNS_PER_JOB_AT_LEAST: u64 = 16;

/// Stripes per run with chunks of `chunk_sectors`, for a job over `stripes` stripes:
/// enough for [`RUN_MEMBER_BYTES`] per member IO, at most a sixteenth of the job, at
/// least one.
pub(crate) fn stripes_per_run(chunk_sectors: u64, stripes: u64) -> u64 {
    (RUN_MEMBER_BYTES / (chunk_sectors * SECTOR).max(1))
        .min(stripes / RUNS_PER_JOB_AT_LEAST)
        .max(1)
}

/// Bytes the buffers of a run of `run_stripes` stripes take: every member's chunks, and
/// a stripe's recomputed P and Q (for the pipeline's depth).
pub(crate) fn run_bytes(raid_disks: usize, chunk_sectors: u64, run_stripes: u64) -> u64 {
    let chunk_bytes = chunk_sectors * SECTOR;
    raid_disks as u64 * run_stripes * chunk_bytes + 2 * chunk_bytes
}

/// The buffer sets of a job, reused by its runs (a set per run in flight; dropped with
/// the job). Their contents are never cleared: see the module documentation.
#[derive(Default)]
pub(crate) struct RunBufs {
    free: Mutex<Vec<BufSet>>,
    /// A check's: the last stripe a run checked as a whole did not verify (a hint,
    /// see `pieces::verify_run`).
    pub(crate) last_unverified: AtomicBool,
}

/// One run's buffers: a run of chunks per member (by role), and one chunk each for a
/// stripe's P and Q computed from its data.
#[derive(Default)]
pub(crate) struct BufSet {
    members: Vec<Vec<u8>>,
    computed: [Vec<u8>; 2],
}

impl RunBufs {
    /// A set with `members` buffers of at least `len` bytes and two of `chunk` bytes.
    fn take(&self, members: usize, len: usize, chunk: usize) -> BufSet {
        let mut set = lock(&self.free).pop().unwrap_or_default();
        set.members.resize_with(members, Vec::new);
        // Only growth is filled (zeros): what a buffer held before is never used as data.
        for b in set.members.iter_mut() {
            if b.len() < len {
                b.resize(len, 0);
            }
        }
        for b in set.computed.iter_mut() {
            if b.len() < chunk {
                b.resize(chunk, 0);
            }
        }
        set
    }

    fn put(&self, set: BufSet) {
        lock(&self.free).push(set);
    }

    /// Run `f` with `members` buffers of at least `len` bytes each (a set of the job's,
    /// given back after; their contents are whatever was there before).
    pub(crate) fn with_members<R>(
        &self,
        members: usize,
        len: usize,
        f: impl FnOnce(&mut [Vec<u8>]) -> R,
    ) -> R {
        let mut set = self.take(members, len, 0);
        let r = f(&mut set.members);
        self.put(set);
        r
    }
}

/// The chunks of stripes `[first, first + count)` of every member, read in one IO per
/// member, completed stripe by stripe.
pub(crate) struct Run<'a> {
    arr: &'a Array,
    bufs: &'a RunBufs,
    set: BufSet,
    first: u64,
    count: u64,
    chunk_sectors: u64,
    /// A role not read (the one being rebuilt): only its blocks are completed.
    skip: Option<usize>,
    /// Per stripe of the run: the role the target's block does not need (not read).
    unneeded: Vec<Option<usize>>,
    /// Per role, per stripe of the run: every byte of its chunk was read.
    got: Vec<Vec<bool>>,
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        self.bufs.put(std::mem::take(&mut self.set));
    }
}

impl<'a> Run<'a> {
    /// Read stripes `[first, first + count)` of every member that can be read over all
    /// of them (but `skip`, the role a rebuild writes: then only what its blocks need, see
    /// the module documentation), all members at once: one IO per member and stretch of
    /// stripes it is needed in.
    pub(crate) fn read(
        arr: &'a Array,
        bufs: &'a RunBufs,
        first: u64,
        count: u64,
        skip: Option<usize>,
    ) -> Run<'a> {
        let geo = arr.geometry();
        let chunk_sectors = geo.chunk_sectors;
        let chunk = (chunk_sectors * SECTOR) as usize;
        let roles = geo.raid_disks;
        let len = chunk * count as usize;
        let mut set = bufs.take(roles, len, chunk);
        let dsec = first * chunk_sectors;
        let n = count * chunk_sectors;
        let readable: Vec<bool> = (0..roles)
            .map(|r| Some(r) != skip && arr.can_read(r, dsec, n))
            .collect();
        let unneeded: Vec<Option<usize>> = (first..first + count)
            .map(|s| {
                let target = skip?;
                unneeded_by(&*arr.stripe_layout(s).ok()?, target, |r| readable[r])
            })
            .collect();
        let mut reads: Vec<(usize, u64, &mut [u8])> = Vec::with_capacity(roles);
        let mut which: Vec<(usize, usize, usize)> = Vec::with_capacity(roles);
        for (r, b) in set.members.iter_mut().enumerate() {
            if !readable[r] {
                continue;
            }
            let mut rest: &mut [u8] = &mut b[..len];
            let mut at = 0;
            for (a, e) in stretches(&unneeded, r) {
                let tail = std::mem::take(&mut rest).split_at_mut((a - at) * chunk).1;
                let (part, tail) = tail.split_at_mut((e - a) * chunk);
                rest = tail;
                at = e;
                reads.push((r, dsec + a as u64 * chunk_sectors, part));
                which.push((r, a, e));
            }
        }
        let mut got = vec![vec![false; count as usize]; roles];
        for ((r, a, e), ok) in which.into_iter().zip(arr.read_members_at_once(reads)) {
            got[r][a..e].fill(ok);
        }
        Run {
            arr,
            bufs,
            set,
            first,
            count,
            chunk_sectors,
            skip,
            unneeded,
            got,
        }
    }

    /// Stripes in the run.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    fn chunk_bytes(&self) -> usize {
        (self.chunk_sectors * SECTOR) as usize
    }

    /// Complete stripe `first + i` in the run's buffers: every block of it (data, P, Q)
    /// then holds its bytes — read, or reconstructed from the others (P and Q computed
    /// from the data); for a rebuild's run (`skip`), only the target's block. `Ok(None)`:
    /// a member needed there that can be read was not read by the run, or too much is
    /// missing to reconstruct; the caller takes that stripe on its own (which reads it
    /// again and reports what is wrong).
    pub(crate) fn complete(&mut self, i: u64) -> Result<Option<StripeLayout>> {
        debug_assert!(i < self.count, "stripe {i} of a run of {}", self.count);
        let stripe = self.first + i;
        let layout = self.arr.stripe_layout(stripe)?;
        let (dsec, n) = (stripe * self.chunk_sectors, self.chunk_sectors);
        let k = i as usize;
        let unneeded = self.unneeded[k];
        let unread = stripe_members(&layout).any(|r| {
            !self.got[r][k]
                && Some(r) != self.skip
                && Some(r) != unneeded
                && self.arr.can_read(r, dsec, n)
        });
        if unread {
            return Ok(None);
        }
        let got = |r: usize| self.got[r][k];
        let chunk = self.chunk_bytes();
        let at = k * chunk;
        let mut blocks: Vec<&mut [u8]> = self
            .set
            .members
            .iter_mut()
            .map(|b| &mut b[at..at + chunk])
            .collect();
        let mut data: Vec<&mut [u8]> = layout
            .data
            .iter()
            .map(|&r| std::mem::take(&mut blocks[r]))
            .collect();
        let p = std::mem::take(&mut blocks[layout.p]);
        let q = layout.q.map(|r| std::mem::take(&mut blocks[r]));
        let missing: Vec<usize> = (0..data.len()).filter(|&k| !got(layout.data[k])).collect();
        let p_ok = got(layout.p);
        let q_ok = layout.q.is_some_and(got);
        let known_q = q.as_deref().filter(|_| q_ok);
        let known_p: Option<&[u8]> = p_ok.then_some(&*p);
        if reconstruct_in_place(&layout, &mut data, &missing, known_p, known_q, chunk).is_err() {
            return Ok(None);
        }
        // The data blocks, whole now; gathered only where parity is computed (a check
        // whose every block was read computes nothing here).
        let refs = || -> Vec<&[u8]> { data.iter().map(|d| &**d).collect() };
        let [sp, sq] = &mut self.set.computed;
        match self.skip {
            // A rebuild's run: the target's block only (a data block is whole now).
            Some(t) if t == layout.p => parity::xor_gen(&refs(), p),
            Some(t) if Some(t) == layout.q => {
                let q_out = q.unwrap_or_default();
                parity_into(&layout, &refs(), &mut sp[..chunk], q_out);
            }
            Some(_) => {}
            // Recompute what is missing of P and Q from the (now whole) data; a parity
            // block that was read is kept as read (a scratch takes its recomputation).
            None if !p_ok || (q.is_some() && !q_ok) => {
                let p_out: &mut [u8] = if p_ok { &mut sp[..chunk] } else { p };
                let q_out: &mut [u8] = match q {
                    Some(q) if !q_ok => q,
                    Some(_) => &mut sq[..chunk],
                    None => &mut [],
                };
                parity_into(&layout, &refs(), p_out, q_out);
            }
            None => {}
        }
        Ok(Some(layout.into_owned()))
    }

    /// Was a block of stripe `first + i` (with this layout) not read by the run, so that
    /// [`Run::complete`] rebuilt it from the others (a member missing or failed, a bad
    /// block, past a rebuild's checkpoint)?
    pub(crate) fn rebuilt_any(&self, i: u64, layout: &StripeLayout) -> bool {
        stripe_members(layout).any(|r| !self.got[r][i as usize])
    }

    /// Stripe `first + i`'s blocks (after [`Run::complete`] said it is whole), and two
    /// scratch chunks for its P and Q computed from the data.
    pub(crate) fn stripe(
        &mut self,
        i: u64,
        layout: &StripeLayout,
    ) -> (Blocks<'_>, &mut [u8], &mut [u8]) {
        let chunk = self.chunk_bytes();
        let at = i as usize * chunk;
        let m = &self.set.members;
        let blocks = Blocks {
            data: layout.data.iter().map(|&r| &m[r][at..at + chunk]).collect(),
            p: &m[layout.p][at..at + chunk],
            q: layout.q.map(|r| &m[r][at..at + chunk]),
        };
        let [p, q] = &mut self.set.computed;
        (blocks, &mut p[..chunk], &mut q[..chunk])
    }

    /// The blocks of `role` for stripes `first + a .. first + b` (each completed), one
    /// after the other as they lie on the member.
    pub(crate) fn role_blocks(&self, role: usize, a: u64, b: u64) -> &[u8] {
        let chunk = self.chunk_bytes();
        &self.set.members[role][a as usize * chunk..b as usize * chunk]
    }
}

/// The member a rebuild of `target`'s block of a stripe with this layout does not need
/// to read, when every other member of the stripe is `readable`: on RAID6, Q (one data
/// block takes P and the others; P takes the data), or P when the target is Q (Q takes
/// the data). `None`: every member is needed (RAID4/5, or a member is unreadable and the
/// target may need both P and Q).
pub(crate) fn unneeded_by(
    layout: &StripeLayout,
    target: usize,
    readable: impl Fn(usize) -> bool,
) -> Option<usize> {
    let q = layout.q?;
    let left_out = if target == q { layout.p } else { q };
    stripe_members(layout).any(|r| r == target).then_some(())?;
    stripe_members(layout)
        .all(|r| r == target || r == left_out || readable(r))
        .then_some(left_out)
}

/// The stretches `[a, e)` of a run's stripes where `role` is needed (not `unneeded`).
fn stretches(unneeded: &[Option<usize>], role: usize) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, u) in unneeded.iter().enumerate() {
        if *u == Some(role) {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == i => last.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// Rebuild the `missing` data blocks (logical indices) of a stripe in place from the
/// others and the parity that was read; every byte of each missing block is written.
/// Err says what is unavailable.
fn reconstruct_in_place(
    layout: &StripeLayout,
    data: &mut [&mut [u8]],
    missing: &[usize],
    p: Option<&[u8]>,
    q: Option<&[u8]>,
    len: usize,
) -> std::result::Result<(), &'static str> {
    match (missing, layout.q.is_some(), p, q) {
        ([], _, _, _) => Ok(()),
        (&[k], _, Some(p), _) => {
            let out = std::mem::take(&mut data[k]);
            let srcs: Vec<&[u8]> = std::iter::once(p)
                .chain(
                    data.iter()
                        .enumerate()
                        .filter(|&(j, _)| j != k)
                        .map(|(_, d)| &**d),
                )
                .collect();
            parity::xor_gen(&srcs, out);
            data[k] = out;
            Ok(())
        }
        (&[k], true, None, Some(q)) => {
            in_slots(layout, data, len, |slots| {
                parity::recover_one_q(slots, layout.slot[k], q)
            });
            Ok(())
        }
        (&[a, b], true, Some(p), Some(q)) => {
            let (sa, sb) = (layout.slot[a], layout.slot[b]);
            in_slots(layout, data, len, |slots| {
                parity::recover_two(slots, sa.min(sb), sa.max(sb), p, q)
            });
            Ok(())
        }
        _ => Err("too many blocks are unavailable"),
    }
}

/// Run `f` over the data blocks in syndrome-slot order (zero blocks in the slots no data
/// block uses: DDF layouts).
fn in_slots(
    layout: &StripeLayout,
    data: &mut [&mut [u8]],
    len: usize,
    f: impl FnOnce(&mut [&mut [u8]]),
) {
    let unused = layout.syndrome_width.saturating_sub(data.len());
    let mut zeros: Vec<Vec<u8>> = (0..unused).map(|_| vec![0u8; len]).collect();
    let mut slots: Vec<Option<&mut [u8]>> = (0..layout.syndrome_width).map(|_| None).collect();
    for (k, d) in data.iter_mut().enumerate() {
        slots[layout.slot[k]] = Some(&mut **d);
    }
    let mut zeros = zeros.iter_mut();
    let mut slots: Vec<&mut [u8]> = slots
        .into_iter()
        .map(|s| match s {
            Some(s) => s,
            None => zeros.next().map_or(&mut [][..], |z| z.as_mut_slice()),
        })
        .collect();
    f(&mut slots);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid6(p: usize, q: usize, data: &[usize]) -> StripeLayout {
        StripeLayout {
            p,
            q: Some(q),
            data: data.to_vec(),
            slot: (0..data.len()).collect(),
            syndrome_width: data.len(),
        }
    }

    #[test]
    fn a_rebuild_leaves_out_q_or_p_only_when_everything_else_can_be_read() {
        let l = raid6(4, 5, &[0, 1, 2, 3]);
        let all = |_| true;
        // A data block or P: Q is not needed; Q: P is not needed.
        assert_eq!(unneeded_by(&l, 2, all), Some(5));
        assert_eq!(unneeded_by(&l, 4, all), Some(5));
        assert_eq!(unneeded_by(&l, 5, all), Some(4));
        // Another member unreadable: P and Q may both be needed.
        assert_eq!(unneeded_by(&l, 2, |r| r != 0), None);
        assert_eq!(unneeded_by(&l, 5, |r| r != 1), None);
        // The left-out member itself unreadable does not matter.
        assert_eq!(unneeded_by(&l, 2, |r| r != 5), Some(5));
        // RAID5 needs every other member.
        let r5 = StripeLayout {
            q: None,
            syndrome_width: 3,
            ..raid6(3, 0, &[0, 1, 2])
        };
        assert_eq!(unneeded_by(&r5, 1, all), None);
    }

    #[test]
    fn stretches_skip_the_stripes_a_role_is_not_needed_in() {
        let u = [None, Some(2), Some(3), Some(2), None, Some(2)];
        assert_eq!(stretches(&u, 2), vec![(0, 1), (2, 3), (4, 5)]);
        assert_eq!(stretches(&u, 3), vec![(0, 2), (3, 6)]);
        assert_eq!(stretches(&u, 0), vec![(0, 6)]);
        assert_eq!(stretches(&[Some(1)], 1), vec![]);
    }
}
