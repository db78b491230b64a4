//! RAID4/5/6 stripes of a pass: a run of them verified in pieces where every member is in
//! memory (`jobs::pieces`), else read at once and verified in one pass per stripe; a
//! stripe that does not verify has its parity recomputed and compared page by page; who
//! is wrong when it disagrees (RAID6: P and Q locate a single bad block; RAID4/5: the
//! checksum sidecar), and the fix.

use super::read_errors;
use super::{SyncMode, SyncReport, Verdict, PAGE};
use crate::array::parity_write::stripe_members;
use crate::array::stripe::{compute_parity, parity_into, parity_matches, Blocks};
use crate::array::Array;
use crate::checksums::Judgement;
use crate::error::Result;
use crate::jobs::pieces;
use crate::jobs::stripe_run::{Run, RunBufs};
use raidkit_layout::StripeLayout;
use std::sync::atomic::Ordering;

/// Check (and in resync/repair, fix) stripes `[first, first + count)`: each run of them
/// that is not all holes verified in pieces (members in memory, see `jobs::pieces`) or
/// read with one IO per member (see `stripe_run`), then checked stripe by stripe where it
/// did not verify. Returns the sync-space sectors done.
///
/// The stripes are locked for the whole run, in ascending order (as client writes take
/// them), their held writes written out first ([`Array::lock_stripe`]): a client write's
/// member IO into one of them waits until it is checked and fixed, so it can neither be
/// reported as a mismatch nor be undone by a fix computed from the bytes before it. (A
/// write the stripe cache holds meanwhile is acknowledged before it reaches the members;
/// it is written out after the run, over what the run fixed, and the checksum sidecar is
/// not taken as the members' truth there: see [`Array::stripe_unwritten`].)
pub(super) fn parity_run(
    arr: &Array,
    first: u64,
    count: u64,
    mode: SyncMode,
    bufs: &RunBufs,
    rep: &mut SyncReport,
) -> Result<u64> {
    let chunk = arr.geometry().chunk_sectors;
    let end = first + count;
    let _locks: Vec<_> = (first..end).map(|s| arr.lock_stripe(s)).collect();
    let mut s = first;
    while s < end {
        if all_holes(arr, s)? {
            rep.sectors_skipped_holes += chunk;
            s += 1;
            continue;
        }
        let mut e = s + 1;
        while e < end && !all_holes(arr, e)? {
            e += 1;
        }
        match pieces::verify_run(arr, bufs, s, e - s)? {
            // Healthy: verified in pieces; each stretch of stripes that did not verify is
            // checked as a run, as before.
            Some(ok) => {
                let mut i = 0;
                while i < ok.len() {
                    if ok[i] {
                        i += 1;
                        continue;
                    }
                    let j = (i..ok.len()).find(|&j| ok[j]).unwrap_or(ok.len());
                    let last_ok = check_run(arr, bufs, s + i as u64, (j - i) as u64, mode, rep)?;
                    bufs.last_unverified.store(!last_ok, Ordering::Relaxed);
                    i = j;
                }
            }
            None => {
                let last_ok = check_run(arr, bufs, s, e - s, mode, rep)?;
                bufs.last_unverified.store(!last_ok, Ordering::Relaxed);
            }
        }
        s = e;
    }
    Ok(count * chunk)
}

/// Check stripes `[first, first + count)` (locked by the caller) read as a run: every
/// member's chunks at once, what is missing reconstructed; a stripe whose blocks (as read
/// or reconstructed) are consistent is done after one verification pass, the others are
/// recomputed and compared page by page. Returns whether the last stripe was found
/// consistent (before any fix).
fn check_run(
    arr: &Array,
    bufs: &RunBufs,
    first: u64,
    count: u64,
    mode: SyncMode,
    rep: &mut SyncReport,
) -> Result<bool> {
    let mut run = Run::read(arr, bufs, first, count, None);
    let mut last_ok = true;
    for i in 0..run.count() {
        last_ok = match run.complete(i)? {
            Some(layout) => {
                let degraded = run.rebuilt_any(i, &layout);
                let (known, p, q) = run.stripe(i, &layout);
                // A parity block of a member not present was recomputed from the data
                // (consistent by construction: the page compare skips it too), so this
                // is true exactly when the page compare would find nothing.
                let known_q = known.q.unwrap_or_default();
                if fused() && parity_matches(&layout, &known.data, known.p, known_q) {
                    true
                } else {
                    parity_into(&layout, &known.data, p, q);
                    let q: &[u8] = if layout.q.is_some() { q } else { &[] };
                    let stripe = first + i;
                    check_stripe(arr, stripe, &layout, known, p, q, mode, degraded, rep)?
                }
            }
            None => stripe_alone(arr, first + i, mode, rep)?,
        };
    }
    Ok(last_ok)
}

/// Verify a stripe in one pass before computing its parity (`RAIDKIT_CHECK_FUSED=0`
/// turns it off, for measurements); read once.
fn fused() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("RAIDKIT_CHECK_FUSED").map_or(true, |v| v != "0"))
}

/// Does every member present hold a file hole over the stripe (all zeros: consistent)?
fn all_holes(arr: &Array, stripe: u64) -> Result<bool> {
    let chunk = arr.geometry().chunk_sectors;
    let layout = arr.stripe_layout(stripe)?;
    let holes = stripe_members(&layout)
        .all(|r| !arr.present(r) || arr.member_hole(r, stripe * chunk, chunk));
    Ok(holes)
}

/// Check one stripe (locked by the caller) read on its own: where a run's read missed a
/// member that can be read (a read error, say), the stripe's own read takes it again. A
/// block whose read failed is read again page by page: the pages that read are judged as
/// usual, those that still fail are written back where redundancy vouches for them (see
/// [`read_errors`]). Returns whether it was found consistent.
fn stripe_alone(arr: &Array, stripe: u64, mode: SyncMode, rep: &mut SyncReport) -> Result<bool> {
    let chunk = arr.geometry().chunk_sectors;
    let layout = arr.stripe_layout(stripe)?;
    let len = (chunk * 512) as usize;
    let dsec = stripe * chunk;
    let mut known = arr.read_stripe(stripe, &layout, 0, chunk, true)?;
    let pages = read_errors::block_pages(len);
    let failed: Vec<(usize, Vec<bool>)> = std::mem::take(&mut known.read_errors)
        .into_iter()
        .map(|role| {
            let block = known.block_of_mut(&layout, role);
            (role, read_errors::reread(arr, role, dsec, block, &pages))
        })
        .collect();
    let (p, q) = compute_parity(&layout, &known.data, len);
    // Per page: a block not read from its member (a page whose read failed again counts;
    // one that read now does not).
    let degraded: Vec<bool> = (0..pages.len())
        .map(|i| {
            known.rebuilt.iter().any(|r| {
                failed
                    .iter()
                    .find(|(f, _)| f == r)
                    .is_none_or(|(_, bad)| bad[i])
            })
        })
        .collect();
    let blocks = known.blocks();
    let matched = check_pages(arr, stripe, &layout, blocks, &p, &q, mode, &degraded, rep)?;
    // Data rebuilt from parity only in a check or repair (a resync does not trust the
    // parity yet), and only where nothing says the parity may be behind.
    let trusted = !failed.is_empty()
        && mode != SyncMode::Resync
        && read_errors::parity_trusted(arr, dsec, chunk);
    for (role, bad) in &failed {
        let parity = *role == layout.p || Some(*role) == layout.q;
        let block = known.block_of(&layout, *role);
        // P and Q are recomputed from the data: in a resync the data is what counts. Data
        // rebuilt from parity is not written back where its checksum says it is wrong.
        let vouched =
            |i: usize| (matched[i] && (parity || trusted)) || (parity && mode == SyncMode::Resync);
        let judged: Vec<bool> = (0..pages.len()).map(|i| bad[i] && vouched(i)).collect();
        let refused =
            refused_by_checksum(arr, stripe, &layout, *role, block, &pages, &judged, rep)?;
        let allowed = |i: usize| vouched(i) && !refused[i];
        read_errors::rewrite(arr, (*role, dsec), block, &pages, bad, allowed, rep);
    }
    Ok(matched.iter().all(|&m| m))
}

/// Per page of data block `role` of `stripe` rebuilt from parity (`judged`: the pages
/// about to be written back): does the checksum sidecar say the rebuilt bytes are wrong?
/// Then another block of the row is silently wrong (RAID5 cannot see which): the page is
/// not written back, and the row is a mismatch nothing fixed, with a verdict. Not refused
/// where the sidecar is ahead of the members (the stripe cache holds written data of the
/// stripe not yet on them).
#[allow(clippy::too_many_arguments)]
fn refused_by_checksum(
    arr: &Array,
    stripe: u64,
    layout: &StripeLayout,
    role: usize,
    block: &[u8],
    pages: &[(usize, usize)],
    judged: &[bool],
    rep: &mut SyncReport,
) -> Result<Vec<bool>> {
    let mut refused = vec![false; pages.len()];
    let Some(k) = layout.data.iter().position(|&r| r == role) else {
        return Ok(refused);
    };
    if arr.checksums().is_none() {
        return Ok(refused);
    }
    let chunk = arr.geometry().chunk_sectors;
    let row_off = |j: u64, lo: usize| row_offset(stripe, layout, chunk, j, lo);
    for (i, &(lo, hi)) in pages.iter().enumerate() {
        refused[i] =
            judged[i] && read_errors::checksum_refuses(arr, row_off(k as u64, lo), &block[lo..hi])?;
    }
    // Asked after judging (a write can be held under the pass's stripe lock, its checksum
    // stored, at any time; once held it stays so while the lock is held): the checksums
    // judged may be a held write's, not the members'.
    if arr.stripe_unwritten(stripe) {
        return Ok(vec![false; pages.len()]);
    }
    for (i, &(lo, hi)) in pages.iter().enumerate() {
        if !refused[i] {
            continue;
        }
        let len = (hi - lo) as u64;
        for j in 0..layout.data.len() as u64 {
            rep.add_mismatch(row_off(j, lo), len);
        }
        rep.add_verdict(Verdict {
            stripe,
            offset: row_off(0, lo),
            len,
            role: None,
            device: None,
            what: format!(
                "data (role {role} could not be read and its reconstruction from parity \
                 does not match its checksum: another block of the row is wrong and parity \
                 alone cannot tell which; nothing was written back)"
            ),
            decided_by: "checksum".into(),
            repaired: false,
        });
    }
    Ok(refused)
}

/// Array byte offset of data block `k` of `stripe` (`chunk` sectors) at chunk byte
/// `in_chunk`.
fn row_offset(stripe: u64, layout: &StripeLayout, chunk: u64, k: u64, in_chunk: usize) -> u64 {
    ((stripe * layout.data.len() as u64 + k) * chunk) * 512 + in_chunk as u64
}

/// [`check_pages`]: whether every page matched.
#[allow(clippy::too_many_arguments)]
fn check_stripe(
    arr: &Array,
    stripe: u64,
    layout: &StripeLayout,
    known: Blocks<'_>,
    p: &[u8],
    q: &[u8],
    mode: SyncMode,
    degraded: bool,
    rep: &mut SyncReport,
) -> Result<bool> {
    let pages = read_errors::block_pages(p.len()).len();
    let degraded = vec![degraded; pages];
    let matched = check_pages(arr, stripe, layout, known, p, q, mode, &degraded, rep)?;
    Ok(matched.iter().all(|&m| m))
}

/// Compare a stripe's parity with `p`/`q` (computed from its data) page by page (4 KiB,
/// like md, so reports are precise); decide, fix and report each mismatch. `degraded`:
/// per page, whether a block of the stripe there was not read from its member (rebuilt
/// from the others). Per page ([`read_errors::block_pages`]), whether it matched.
#[allow(clippy::too_many_arguments)]
fn check_pages(
    arr: &Array,
    stripe: u64,
    layout: &StripeLayout,
    known: Blocks<'_>,
    p: &[u8],
    q: &[u8],
    mode: SyncMode,
    degraded: &[bool],
    rep: &mut SyncReport,
) -> Result<Vec<bool>> {
    let chunk = arr.geometry().chunk_sectors;
    let len = (chunk * 512) as usize;
    let check = StripeCheck {
        arr,
        stripe,
        chunk,
        mode,
        p_present: arr.present(layout.p),
        q_present: layout.q.is_some_and(|r| arr.present(r)),
        layout,
        known,
        p,
        q,
    };
    read_errors::block_pages(len)
        .into_iter()
        .zip(degraded.iter().chain(std::iter::repeat(&true)))
        .map(|((lo, hi), &degraded)| check.page(lo, hi, degraded, rep))
        .collect()
}

/// One stripe's blocks (with what is missing reconstructed), and its parity recomputed.
struct StripeCheck<'a> {
    arr: &'a Array,
    stripe: u64,
    chunk: u64,
    mode: SyncMode,
    layout: &'a StripeLayout,
    known: Blocks<'a>,
    /// P and Q computed from the data.
    p: &'a [u8],
    q: &'a [u8],
    p_present: bool,
    q_present: bool,
}

impl StripeCheck<'_> {
    /// Array byte offset of data block `k`'s bytes at chunk byte `in_chunk`.
    fn row_offset(&self, k: u64, in_chunk: usize) -> u64 {
        row_offset(self.stripe, self.layout, self.chunk, k, in_chunk)
    }

    /// Compare chunk bytes `[start, end)`; on a mismatch, decide who is wrong, fix it
    /// (resync, repair) and report it (check, repair). `degraded`: a block of the stripe
    /// there was not read from its member (rebuilt from the others). Returns whether they
    /// matched.
    fn page(&self, start: usize, end: usize, degraded: bool, rep: &mut SyncReport) -> Result<bool> {
        let (known, mode) = (&self.known, self.mode);
        let bad_p = self.p_present && known.p[start..end] != self.p[start..end];
        let bad_q = self.q_present && known.q.map(|x| &x[start..end]) != Some(&self.q[start..end]);
        if !bad_p && !bad_q {
            return Ok(true);
        }
        let data_blocks = self.layout.data.len() as u64;
        if mode != SyncMode::Resync {
            for k in 0..data_blocks {
                rep.add_mismatch(self.row_offset(k, start), (end - start) as u64);
            }
        }
        let (culprit, by, why) = self.culprit(start, end, degraded, bad_p, bad_q)?;
        let bad = (bad_p, bad_q);
        let (role, what, fix) = self.fix(culprit, by, why, start, end, degraded, bad);
        let repaired = mode != SyncMode::Check && !fix.is_empty();
        if repaired {
            for (r, bytes) in &fix {
                let at = self.stripe * self.chunk + start as u64 / 512;
                self.arr.write_block(*r, at, bytes)?;
                rep.sectors_written += bytes.len() as u64 / 512;
            }
        }
        if mode != SyncMode::Resync {
            rep.add_verdict(Verdict {
                stripe: self.stripe,
                offset: self.row_offset(0, start),
                len: (end - start) as u64,
                role,
                device: role
                    .and_then(|r| self.arr.member(r))
                    .map(|m| m.dev.name().to_string()),
                what,
                decided_by: by.into(),
                repaired,
            });
        }
        Ok(false)
    }

    /// Who is wrong? RAID6 can tell when exactly one block of the page is bad; RAID4/5
    /// can with the checksum sidecar. Returns the culprit, how it was decided, and why
    /// it could not be.
    fn culprit(
        &self,
        start: usize,
        end: usize,
        degraded: bool,
        bad_p: bool,
        bad_q: bool,
    ) -> Result<(Culprit, &'static str, String)> {
        if self.mode == SyncMode::Resync {
            return Ok((Culprit::Unknown, "undecided", String::new()));
        }
        if self.layout.q.is_some() && degraded {
            // One redundancy left: the block not read is rebuilt from it, so any bad
            // block shows as the other parity differing. Nothing can be located.
            let why = "a block of the stripe was not read (a member missing, a bad block, \
                       a read error): P and Q cannot locate the bad block (the block not \
                       read is rebuilt from one of them)";
            return Ok((Culprit::Unknown, "undecided", why.into()));
        }
        if self.layout.q.is_some() {
            let (layout, known) = (self.layout, &self.known);
            let c = locate_raid6(layout, known, self.p, self.q, start, end, bad_p, bad_q);
            let by = if matches!(c, Culprit::Unknown) {
                "undecided"
            } else {
                "P+Q"
            };
            return Ok((c, by, "more than one block (cannot locate)".into()));
        }
        let data_blocks = self.layout.data.len() as u64;
        let offs: Vec<u64> = (0..data_blocks)
            .map(|k| self.row_offset(k, start))
            .collect();
        let c = locate_by_checksums(self.arr, &self.known, self.p, start, end, &offs)?;
        // Asked after judging, as in `refused_by_checksum`: the sidecar may hold the
        // checksums of writes the members do not have yet (held by the cache).
        if self.arr.stripe_unwritten(self.stripe) {
            let why = "data or parity: the checksums are ahead of the members here (written data still in the stripe cache)";
            return Ok((Culprit::Unknown, "undecided", why.into()));
        }
        Ok(c)
    }

    /// The member found wrong, what was wrong, and the blocks to rewrite (md's repair
    /// when undecided: parity recomputed from the data).
    #[allow(clippy::too_many_arguments)]
    fn fix(
        &self,
        culprit: Culprit,
        by: &str,
        why: String,
        start: usize,
        end: usize,
        degraded: bool,
        (bad_p, bad_q): (bool, bool),
    ) -> (Option<usize>, String, Vec<Fix>) {
        let (layout, p, q) = (self.layout, self.p, self.q);
        match culprit {
            Culprit::P => (
                Some(layout.p),
                if by == "checksum" {
                    "P (every data block matches its checksum)".into()
                } else {
                    "P".into()
                },
                vec![(layout.p, p[start..end].to_vec())],
            ),
            Culprit::Q => {
                let q_role = layout.q.unwrap_or(layout.p);
                (
                    Some(q_role),
                    "Q".into(),
                    vec![(q_role, q[start..end].to_vec())],
                )
            }
            Culprit::Data(k, fixed) => (
                Some(layout.data[k]),
                format!(
                    "data (array bytes {}..{}){}",
                    self.row_offset(k as u64, start),
                    self.row_offset(k as u64, start) + (end - start) as u64,
                    if by == "checksum" {
                        "; it does not match its checksum, its reconstruction from parity does"
                    } else {
                        ""
                    }
                ),
                vec![(layout.data[k], fixed)],
            ),
            Culprit::Unknown if degraded && self.mode != SyncMode::Resync => (
                None,
                format!(
                    "{why}; nothing was written: recomputing parity from the data would \
                     overwrite the only redundancy left, which may be the right copy"
                ),
                Vec::new(),
            ),
            Culprit::Unknown => {
                let mut v = Vec::new();
                if bad_p {
                    v.push((layout.p, p[start..end].to_vec()));
                }
                if bad_q {
                    if let Some(q_role) = layout.q {
                        v.push((q_role, q[start..end].to_vec()));
                    }
                }
                (
                    None,
                    format!("{why}; like md, repair recomputes parity from the data"),
                    v,
                )
            }
        }
    }
}

/// A block to rewrite: (role, bytes).
type Fix = (usize, Vec<u8>);

enum Culprit {
    P,
    Q,
    /// Logical data index and its corrected bytes for the page.
    Data(usize, Vec<u8>),
    Unknown,
}

/// Use P and Q to find the single bad block of a RAID6 page (the method of md's raid6check):
/// with ΔP = P ⊕ P' and ΔQ = Q ⊕ Q', a single bad data block in slot z gives
/// ΔQ = g^z · ΔP at every byte.
#[allow(clippy::too_many_arguments)]
fn locate_raid6(
    lay: &StripeLayout,
    sd: &Blocks<'_>,
    p: &[u8],
    q: &[u8],
    start: usize,
    end: usize,
    bad_p: bool,
    bad_q: bool,
) -> Culprit {
    use raidkit_parity::gf;
    let Some(sq) = sd.q else {
        return Culprit::Unknown;
    };
    if bad_p && !bad_q {
        return Culprit::P;
    }
    if bad_q && !bad_p {
        return Culprit::Q;
    }
    let mut slot: Option<u8> = None;
    for i in start..end {
        let dp = sd.p[i] ^ p[i];
        let dq = sq[i] ^ q[i];
        match (dp, dq) {
            (0, 0) => continue,
            (0, _) | (_, 0) => return Culprit::Unknown,
            _ => {
                let z = match (gf::log(dq), gf::log(dp)) {
                    (Some(a), Some(b)) => ((a as u16 + 255 - b as u16) % 255) as u8,
                    _ => return Culprit::Unknown,
                };
                if slot.is_some_and(|s| s != z) {
                    return Culprit::Unknown;
                }
                slot = Some(z);
            }
        }
    }
    let Some(z) = slot else {
        return Culprit::Unknown;
    };
    let Some(k) = lay.slot.iter().position(|&s| s == z as usize) else {
        return Culprit::Unknown;
    };
    let mut fixed = sd.data[k][start..end].to_vec();
    for (j, b) in fixed.iter_mut().enumerate() {
        *b ^= sd.p[start + j] ^ p[start + j];
    }
    Culprit::Data(k, fixed)
}

/// RAID4/5: use the checksum sidecar to tell whether the data blocks of a page with a
/// parity mismatch are right (then P is wrong) or exactly one is wrong (then it is rebuilt
/// from parity, and the rebuilt bytes must match the checksum). `offs`: array byte offset
/// of each data block's page. Returns the culprit, how it was decided, and why not.
fn locate_by_checksums(
    arr: &Array,
    sd: &Blocks<'_>,
    p: &[u8],
    start: usize,
    end: usize,
    offs: &[u64],
) -> Result<(Culprit, &'static str, String)> {
    let undecided = |why: &str| Ok((Culprit::Unknown, "undecided", why.to_string()));
    let Some(cs) = arr.checksums() else {
        return undecided("data or parity: RAID5 cannot tell which without a checksum sidecar");
    };
    if end - start != PAGE || offs.iter().any(|o| !o.is_multiple_of(PAGE as u64)) {
        return undecided("data or parity: the range is not made of whole checksum blocks");
    }
    let mut bad = Vec::new();
    for (k, &o) in offs.iter().enumerate() {
        match cs.judge(o / PAGE as u64, &sd.data[k][start..end])? {
            Judgement::Match => {}
            Judgement::Mismatch => bad.push(k),
            Judgement::Unknown => {
                return undecided("data or parity: the checksums are not authoritative here (region written during an unclean stop, or a write in flight)");
            }
        }
    }
    match bad[..] {
        [] => Ok((Culprit::P, "checksum", String::new())),
        [k] => {
            let mut fixed = sd.data[k][start..end].to_vec();
            for (j, b) in fixed.iter_mut().enumerate() {
                *b ^= sd.p[start + j] ^ p[start + j];
            }
            if cs.judge(offs[k] / PAGE as u64, &fixed)? == Judgement::Match {
                Ok((Culprit::Data(k, fixed), "checksum", String::new()))
            } else {
                undecided("a data block does not match its checksum and neither does its reconstruction from parity (more than one block is bad)")
            }
        }
        _ => undecided(&format!(
            "{} data blocks of the row do not match their checksums",
            bad.len()
        )),
    }
}
