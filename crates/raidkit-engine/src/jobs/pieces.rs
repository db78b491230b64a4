//! The fast paths of a parity check and rebuild over a healthy run of stripes: every
//! member read in pieces small enough that all members' pieces of a stripe stay in the
//! core's cache (L2) until they are used. Read in 1 MiB per member and then computed, the
//! blocks had left the cache (four workers' runs on two cores): `perf` of a RAID5 check
//! had the XOR (13–15 %) and the comparison (6–7 %) reading memory again, twice the user
//! time of the same work done in one thread.
//!
//! Only where every member is a file in memory (tmpfs, ramfs): there a read is the
//! kernel's copy and costs the same in pieces; a disk or a network member wants its reads
//! large, and keeps the run's one IO per member.
//!
//! * [`verify_run`] (check, resync, repair) verifies each piece in one read pass that
//!   stores nothing ([`parity_matches`]: the XOR of the data blocks and P is zero; RAID6:
//!   P and Q are the data's syndromes). It only says which stripes are consistent: from
//!   the first stripe it cannot vouch for (a piece that does not verify, a read that
//!   failed) on, the run is left to the caller, which reads and checks it as before (as a
//!   run, page by page where it does not verify, who is wrong, the fix), so what a pass
//!   reports and repairs does not depend on this path. Stripes that do not verify come in
//!   stretches (a new array's resync, a region never synced): when the last stripe the
//!   caller checked as a run did not verify either, the next run is left to the caller
//!   unread, and stays so until a run ends with a stripe that verifies. A resync of a new
//!   array so reads each member byte once, but the first piece of a few runs (one per
//!   worker at most); leaving each stripe as its piece failed and reading the others'
//!   pieces on had read one piece per stripe more (chunks larger than a piece), or
//!   everything twice (a piece of several chunks: each piece held stripes not yet left).
//! * [`rebuild_run`] reconstructs the target's piece from the others' (what the stripe's
//!   block needs: RAID6 leaves out Q, or P for a Q block, as the run does) and writes it.
//!   A read that fails leaves the run to the caller's run path, which reads and rebuilds
//!   it again with its handling of errors (pieces written before hold the bytes the run
//!   path writes again).

use crate::array::parity_write::stripe_members;
use crate::array::stripe::parity_into;
use crate::array::stripe::parity_matches;
use crate::array::Array;
use crate::error::Result;
use crate::jobs::stripe_run::{unneeded_by, RunBufs};
use raidkit_layout::SECTOR;
use raidkit_parity as parity;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Member bytes read by these paths since the process started.
static PIECE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Member bytes the piecewise check and rebuild have read since the process started
/// (tests tell by it which path a pass took).
pub fn piece_bytes_read() -> u64 {
    PIECE_BYTES.load(Ordering::Relaxed)
}

/// Member bytes all members' pieces take together, at most (about): well inside a core's
/// L2 (2 MiB on the machine measured), with room for the kernel's side of the copy.
const PIECES_BUDGET_BYTES: usize = 512 << 10;

/// Smallest piece per member: smaller reads cost more in system calls than the cache
/// saves.
const MIN_PIECE_BYTES: usize = 64 << 10;

/// Bounds of a piece `RAIDKIT_PIECES` may ask for (any other value is brought inside).
const ENV_PIECE_BYTES: std::ops::RangeInclusive<usize> = 4096..=(64 << 20);

/// Bytes per member read at once for `raid_disks` members and chunks of `chunk_bytes`:
/// [`PIECES_BUDGET_BYTES`] shared by the members, but at least [`MIN_PIECE_BYTES`]
/// (so over the budget with more than 8 members), rounded down to a power of two; the
/// chunk instead when neither divides the other (a piece never straddles a chunk
/// boundary unless it holds whole chunks). Never 0. `None`: the fast path is off
/// (`RAIDKIT_PIECES=0`).
fn piece_bytes(raid_disks: usize, chunk_bytes: usize) -> Option<usize> {
    let want = match env_piece_kib() {
        Some(0) => return None,
        Some(kib) => kib
            .saturating_mul(1024)
            .clamp(*ENV_PIECE_BYTES.start(), *ENV_PIECE_BYTES.end()),
        None => (PIECES_BUDGET_BYTES / raid_disks.max(1)).max(MIN_PIECE_BYTES),
    };
    let pow2 = if want.is_power_of_two() {
        want
    } else {
        want.next_power_of_two() / 2
    };
    if pow2 == 0 || chunk_bytes == 0 {
        return None; // (not reached: a piece of 0 bytes would never advance)
    }
    if chunk_bytes.is_multiple_of(pow2) || pow2.is_multiple_of(chunk_bytes) {
        Some(pow2)
    } else {
        Some(chunk_bytes)
    }
}

/// Is the member in `role` a file in memory?
fn in_memory(arr: &Array, role: usize) -> bool {
    arr.member(role)
        .is_some_and(|m| m.dev.submission().in_memory())
}

/// `RAIDKIT_PIECES=<KiB>` (0: off), for measurements; read once.
fn env_piece_kib() -> Option<usize> {
    static V: OnceLock<Option<usize>> = OnceLock::new();
    *V.get_or_init(|| std::env::var("RAIDKIT_PIECES").ok()?.parse().ok())
}

/// A run of stripes `[first, first + count)` gone through in pieces.
struct Plan<'a> {
    /// Bytes per chunk.
    chunk: usize,
    /// Bytes per member and piece (at most the run).
    piece: usize,
    /// The run's first data sector on every member, and its sectors.
    dsec: u64,
    sectors: u64,
    /// Bytes per member of the run.
    run_bytes: usize,
    layouts: Vec<std::borrow::Cow<'a, raidkit_layout::StripeLayout>>,
}

impl<'a> Plan<'a> {
    /// `None` when the fast path is turned off (or there is nothing to go through).
    fn new(arr: &'a Array, first: u64, count: u64) -> Result<Option<Plan<'a>>> {
        let chunk_sectors = arr.geometry().chunk_sectors;
        let chunk = (chunk_sectors * SECTOR) as usize;
        let run_bytes = count as usize * chunk;
        let Some(piece) = piece_bytes(arr.geometry().raid_disks, chunk) else {
            return Ok(None);
        };
        if run_bytes == 0 {
            return Ok(None);
        }
        let layouts = (first..first + count)
            .map(|s| arr.stripe_layout(s))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Plan {
            chunk,
            piece: piece.min(run_bytes),
            dsec: first * chunk_sectors,
            sectors: count * chunk_sectors,
            run_bytes,
            layouts,
        }))
    }

    /// The pieces: byte offset in the run and length.
    fn pieces(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.run_bytes)
            .step_by(self.piece)
            .map(|at| (at, self.piece.min(self.run_bytes - at)))
    }

    /// The stripes the piece `[at, at + len)` covers (one, or several whole ones): each
    /// one's index in the run and its bytes in the piece.
    fn stripes(&self, at: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        let chunk = self.chunk;
        (at / chunk..(at + len).div_ceil(chunk)).map(move |i| {
            (
                i,
                (i * chunk).max(at) - at,
                ((i + 1) * chunk).min(at + len) - at,
            )
        })
    }
}

/// Verify stripes `[first, first + count)` (locked by the caller) piece by piece. `None`
/// when the fast path does not apply (a member of the run missing or not readable over
/// it, turned off, or the last stripe the caller checked did not verify: see the module
/// documentation): the caller checks the run as before. Else, per stripe, whether it was
/// read whole and found consistent: every stripe from the first that was not on; the
/// caller checks those.
pub(crate) fn verify_run(
    arr: &Array,
    bufs: &RunBufs,
    first: u64,
    count: u64,
) -> Result<Option<Vec<bool>>> {
    let roles = arr.geometry().raid_disks;
    let Some(plan) = Plan::new(arr, first, count)? else {
        return Ok(None);
    };
    if !(0..roles).all(|r| arr.can_read(r, plan.dsec, plan.sectors) && in_memory(arr, r)) {
        return Ok(None);
    }
    if bufs.last_unverified.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let mut ok = vec![true; count as usize];
    bufs.with_members(roles, plan.piece, |bufs| {
        for (at, len) in plan.pieces() {
            let psec = plan.dsec + (at as u64) / SECTOR;
            let reads = bufs
                .iter_mut()
                .enumerate()
                .map(|(r, b)| (r, psec, &mut b[..len]))
                .collect();
            let read = arr.read_members_at_once(reads);
            PIECE_BYTES.fetch_add((len * roles) as u64, Ordering::Relaxed);
            for (i, a, e) in plan.stripes(at, len) {
                let lay = &plan.layouts[i];
                let whole = stripe_members(lay).all(|r| read[r]);
                let blk = |r: usize| &bufs[r][a..e];
                let data: Vec<&[u8]> = lay.data.iter().map(|&r| blk(r)).collect();
                let q = lay.q.map_or(&[][..], blk);
                if !(whole && parity_matches(lay, &data, blk(lay.p), q)) {
                    // The rest of the run is the caller's (read once, as a run).
                    ok[i..].fill(false);
                    return;
                }
            }
        }
    });
    Ok(Some(ok))
}

/// Rebuild `target`'s blocks of stripes `[first, first + count)` (locked by the caller)
/// piece by piece: each piece of the members its blocks need read, the target's piece
/// reconstructed and written. `Ok(false)` when the fast path does not apply (another
/// member not readable over the run, or turned off) or a read failed: the caller rebuilds
/// the run as before.
pub(crate) fn rebuild_run(
    arr: &Array,
    bufs: &RunBufs,
    target: usize,
    first: u64,
    count: u64,
) -> Result<bool> {
    let roles = arr.geometry().raid_disks;
    let Some(plan) = Plan::new(arr, first, count)? else {
        return Ok(false);
    };
    let source = |r: usize| arr.can_read(r, plan.dsec, plan.sectors) && in_memory(arr, r);
    if !(0..roles).all(|r| r == target || source(r)) || !in_memory(arr, target) {
        return Ok(false);
    }
    // A piece inside one stripe leaves out the member its block does not need; a piece
    // of several whole stripes reads every other member.
    let unneeded = |at: usize, len: usize| {
        (len <= plan.chunk)
            .then(|| unneeded_by(&plan.layouts[at / plan.chunk], target, |_| true))
            .flatten()
    };
    // One buffer per role (the target's takes its piece), and a scratch for a P computed
    // alongside a Q.
    bufs.with_members(roles + 1, plan.piece, |bufs| {
        let (bufs, scratch) = bufs.split_at_mut(roles);
        for (at, len) in plan.pieces() {
            let skip = unneeded(at, len);
            let psec = plan.dsec + (at as u64) / SECTOR;
            let reads: Vec<_> = bufs
                .iter_mut()
                .enumerate()
                .filter(|&(r, _)| r != target && Some(r) != skip)
                .map(|(r, b)| (r, psec, &mut b[..len]))
                .collect();
            let sources = reads.len();
            if !arr.read_members_at_once(reads).into_iter().all(|ok| ok) {
                return Ok(false);
            }
            PIECE_BYTES.fetch_add((len * sources) as u64, Ordering::Relaxed);
            for (i, a, e) in plan.stripes(at, len) {
                rebuild_block(&plan.layouts[i], target, bufs, &mut scratch[0], a, e);
            }
            arr.write_block(target, psec, &bufs[target][..len])?;
        }
        Ok(true)
    })
}

/// `target`'s bytes `[a, e)` of a stripe with this layout into its buffer, from the
/// other members' (all read over the range, but the one its block does not need).
fn rebuild_block(
    lay: &raidkit_layout::StripeLayout,
    target: usize,
    bufs: &mut [Vec<u8>],
    scratch: &mut [u8],
    a: usize,
    e: usize,
) {
    let mut out = std::mem::take(&mut bufs[target]);
    let blk = |r: usize| &bufs[r][a..e];
    let data = || lay.data.iter().map(|&r| blk(r));
    if target == lay.p {
        let srcs: Vec<&[u8]> = data().collect();
        parity::xor_gen(&srcs, &mut out[a..e]);
    } else if Some(target) == lay.q {
        let srcs: Vec<&[u8]> = data().collect();
        parity_into(lay, &srcs, &mut scratch[..e - a], &mut out[a..e]);
    } else {
        // A data block: P and the other data blocks.
        let srcs: Vec<&[u8]> = std::iter::once(blk(lay.p))
            .chain(lay.data.iter().filter(|&&r| r != target).map(|&r| blk(r)))
            .collect();
        parity::xor_gen(&srcs, &mut out[a..e]);
    }
    bufs[target] = out;
}
