//! One mirrored region of a pass: the copies compared page by page; which one is right
//! (a majority of 3+ copies, or the checksum sidecar), and the fix. Where every copy is
//! a file in memory, a region is first compared a piece at a time in small reused
//! buffers ([`alike_in_pieces`]); only a region that does not compare alike there is read
//! whole and judged page by page.

use super::read_errors;
use super::{SyncMode, SyncReport, Verdict, PAGE};
use crate::array::scratch::{scratch_blocks, scratch_put, scratch_sized};
use crate::array::Array;
use crate::checksums::Judgement;
use crate::error::{EngineError, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A copy's place: (role, data sector).
type Loc = (usize, u64);

pub(super) fn mirror_region(
    arr: &Array,
    s: u64,
    max: u64,
    mode: SyncMode,
    rep: &mut SyncReport,
) -> Result<u64> {
    let g = arr.geometry();
    let p = g
        .locate(s)
        .ok_or_else(|| EngineError::Invalid(format!("sector {s} out of range")))?;
    let n = p.run.min(max);
    // The caller holds the region against client writes (range_gate): a write landing
    // between the read and the rewrite would otherwise be undone on one copy (and a
    // check would report a mismatch that is only a write in flight).
    let live: Vec<(usize, u64)> = p
        .copies
        .iter()
        .copied()
        .filter(|&(r, _)| arr.present(r))
        .collect();
    if live.len() < 2 {
        return Ok(n);
    }
    if live.iter().all(|&(r, d)| arr.member_hole(r, d, n)) {
        rep.sectors_skipped_holes += n;
        return Ok(n);
    }
    // Every copy a file in memory and healthy here: compared in small reused pieces, and
    // done if they all agree; anything else is read and judged again below.
    if alike_in_pieces(arr, &live, n) {
        return Ok(n);
    }
    let len = (n * 512) as usize;
    // Read every readable copy into reused buffers (not cleared: a read that succeeds
    // fills its buffer, a failed one's is not used), a piece of every copy at a time, all
    // at once (one batch: on disks the copies' members work together), and compare each
    // piece as soon as it is read, while it is still in the cache: compared after the
    // whole region was read, a RAID1 check spent 12–14 % of its time in `memcmp`.
    let mut bufs: Vec<Vec<u8>> = live.iter().map(|_| scratch_sized(len)).collect();
    let mut read: Vec<bool> = live.iter().map(|&(r, d)| arr.readable(r, d, n)).collect();
    let tried = read.clone();
    let mut alike = read.iter().all(|&ok| ok);
    let mut at = 0;
    while at < len {
        let end = (at + COMPARE_PIECE_BYTES).min(len);
        let reads: Vec<(usize, u64, &mut [u8])> = live
            .iter()
            .zip(bufs.iter_mut())
            .zip(&read)
            .filter(|(_, &ok)| ok)
            .map(|((&(r, d), b), _)| (r, d + (at / 512) as u64, &mut b[at..end]))
            .collect();
        let mut got = arr.read_members_at_once(reads).into_iter();
        for ok in read.iter_mut().filter(|ok| **ok) {
            // A copy whose piece failed is not read further, nor used.
            *ok = got.next().unwrap_or(false);
        }
        alike = alike
            && read.iter().all(|&ok| ok)
            && bufs[1..].iter().all(|b| b[at..end] == bufs[0][at..end]);
        at = end;
    }
    let mut copies: Vec<(Loc, Option<Vec<u8>>)> = live
        .iter()
        .zip(bufs)
        .zip(read)
        .map(|((&loc, b), ok)| {
            if !ok {
                scratch_put(b);
                return (loc, None);
            }
            (loc, Some(b))
        })
        .collect();
    if copies.iter().all(|c| c.1.is_none()) {
        drop(Copies(copies));
        return Err(EngineError::Unreadable {
            offset: s * 512,
            end: (s + n) * 512,
            why: "no copy is readable".into(),
        });
    }
    // Every copy read and all alike (the common case): no page-by-page work.
    if alike {
        drop(Copies(copies));
        return Ok(n);
    }
    // Pages of 4 KiB of array data, aligned to array offsets like the checksum sidecar's
    // blocks, so reports and verdicts are precise.
    let pages = region_pages(s, n);
    let unread = reread_failed(arr, &mut copies, &tried, (s, &pages), mode, rep)?;
    let copies = Copies(copies);
    for (i, &(lo, hi)) in pages.iter().enumerate() {
        let skip: Vec<bool> = unread.iter().map(|u| u.get(i) == Some(&true)).collect();
        mirror_page(
            arr,
            &copies,
            &skip,
            s + (lo / 512) as u64,
            lo,
            hi,
            mode,
            rep,
        )?;
    }
    Ok(n)
}

/// The pages of a region of `n` sectors from array sector `s`: byte ranges of its
/// buffers, cut at array offsets that are multiples of [`PAGE`].
fn region_pages(s: u64, n: u64) -> Vec<(usize, usize)> {
    let spp = PAGE as u64 / 512;
    let mut pages = Vec::new();
    let mut a = s;
    while a < s + n {
        let b = ((a / spp + 1) * spp).min(s + n);
        pages.push((((a - s) * 512) as usize, ((b - s) * 512) as usize));
        a = b;
    }
    pages
}

/// A copy whose read failed (`tried` and not read) is read again page by page (see
/// [`read_errors`]); the pages that still fail are written back from the other copies
/// (md's answer to a read error) where [`write_back_source`] finds bytes to trust, and
/// judged without that copy. `(s, pages)`: the region's first array sector and its pages.
/// Per copy, per page: whether it is still unreadable.
fn reread_failed(
    arr: &Array,
    copies: &mut [(Loc, Option<Vec<u8>>)],
    tried: &[bool],
    (s, pages): (u64, &[(usize, usize)]),
    mode: SyncMode,
    rep: &mut SyncReport,
) -> Result<Vec<Vec<bool>>> {
    let len = pages.last().map_or(0, |p| p.1);
    let mut unread = vec![Vec::new(); copies.len()];
    for k in 0..copies.len() {
        if !tried[k] || copies[k].1.is_some() {
            continue;
        }
        let ((role, dsec), _) = copies[k];
        let mut b = scratch_sized(len);
        unread[k] = read_errors::reread(arr, role, dsec, &mut b, pages);
        copies[k].1 = Some(b);
    }
    for k in 0..copies.len() {
        if !unread[k].contains(&true) {
            continue;
        }
        let mut sources: Vec<Option<Vec<u8>>> = Vec::with_capacity(pages.len());
        for (i, &page) in pages.iter().enumerate() {
            let source = match unread[k][i] {
                true => write_back_source(arr, copies, &unread, (k, i), page, s)?,
                false => Source::None,
            };
            sources.push(match source {
                Source::Bytes(b) => Some(b),
                Source::None => None,
                Source::RefusedByChecksum(others) => {
                    if mode != SyncMode::Resync {
                        // The array's readable bytes are wrong: a mismatch nothing fixed.
                        rep.add_mismatch(s * 512 + page.0 as u64, (page.1 - page.0) as u64);
                        rep.add_verdict(refused_verdict(arr, s, page, copies[k].0 .0, &others));
                    }
                    None
                }
            });
        }
        let ((role, dsec), Some(buf)) = &mut copies[k] else {
            continue;
        };
        for (i, good) in sources.iter().enumerate() {
            if let Some(good) = good {
                buf[pages[i].0..pages[i].1].copy_from_slice(good);
            }
        }
        let allowed = |i: usize| sources[i].is_some();
        read_errors::rewrite(arr, (*role, *dsec), buf, pages, &unread[k], allowed, rep);
    }
    Ok(unread)
}

/// What an unreadable page of a copy may be written back from.
enum Source {
    /// These bytes.
    Bytes(Vec<u8>),
    /// Nothing: no other copy read, or they disagree and nothing tells which is right.
    None,
    /// Nothing: the other copies (these roles) agree, but not with the page's checksum.
    RefusedByChecksum(Vec<usize>),
}

/// The bytes to write back over page `i` (`lo..hi`) of copy `k`, from the copies read
/// there (region from array sector `s`), decided as the pass decides between copies that
/// differ ([`decide`]): where the other copies agree, their bytes — unless the checksum
/// sidecar says they are wrong; where they disagree, the one that matches its checksum,
/// else a strict majority of them.
fn write_back_source(
    arr: &Array,
    copies: &[(Loc, Option<Vec<u8>>)],
    unread: &[Vec<bool>],
    (k, i): (usize, usize),
    (lo, hi): (usize, usize),
    s: u64,
) -> Result<Source> {
    let (roles, others): (Vec<usize>, Vec<&[u8]>) = copies
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != k && unread[j].get(i) != Some(&true))
        .filter_map(|(_, c)| c.1.as_deref().map(|b| (c.0 .0, &b[lo..hi])))
        .unzip();
    let Some(&first) = others.first() else {
        return Ok(Source::None);
    };
    let (off, plen) = (s * 512 + lo as u64, (hi - lo) as u64);
    if others.iter().all(|p| *p == first) {
        return Ok(match by_checksum(arr, off, plen, &[first])? {
            Err((_, true)) => Source::RefusedByChecksum(roles),
            _ => Source::Bytes(first.to_vec()),
        });
    }
    Ok(match decide(arr, off, plen, &others)?.0 {
        Some((good, _, _)) => Source::Bytes(good.to_vec()),
        None => Source::None,
    })
}

/// Which of copies that differ (`readable`, over array bytes `[off, off + plen)`) is
/// right: 1. the one that matches its checksum, where the sidecar is authoritative (a
/// checksum is kept per write; copies that agree may share one wrong write-out); 2. a
/// strict majority (3+ way mirrors). Else none: why, and whether no copy matched its
/// checksum. One decision for the verdict and for a read-error write-back.
fn decide<'a>(
    arr: &Array,
    off: u64,
    plen: u64,
    readable: &[&'a [u8]],
) -> Result<(Option<Decision<'a>>, &'static str, bool)> {
    let (why, none_matched) = match by_checksum(arr, off, plen, readable)? {
        Ok(d) => return Ok((Some(d), "", false)),
        Err((_, false)) if arr.checksums().is_none() => (
            "no checksum sidecar: a 2-way mirror cannot tell which copy is right",
            false,
        ),
        Err(e) => e,
    };
    Ok((majority(readable), why, none_matched))
}

/// The verdict on page `(lo, hi)` of a region from array sector `s` whose copy on `role`
/// could not be read, and whose other copies (`others`: their roles) agree on bytes their
/// checksum says are wrong: nothing is written back. With one other copy, that copy is
/// the one found wrong.
fn refused_verdict(
    arr: &Array,
    s: u64,
    (lo, hi): (usize, usize),
    role: usize,
    others: &[usize],
) -> Verdict {
    let wrong = match others {
        [r] => Some(*r),
        _ => None,
    };
    Verdict {
        stripe: 0,
        offset: s * 512 + lo as u64,
        len: (hi - lo) as u64,
        role: wrong,
        device: wrong.and_then(|r| arr.member(r).map(|m| m.dev.name().to_string())),
        what: format!(
            "mirror copy (the copy on role {role} could not be read and the other copies \
             agree on bytes that do not match their checksum: nothing was written back)"
        ),
        decided_by: "checksum".into(),
        repaired: false,
    }
}

/// Bytes of each copy read and compared at a time (the copies' pieces and the kernel's
/// source pages fit a core's L2 cache): 1 MiB pieces, compared after they were read,
/// cost the `memcmp` 2–3× as much (0.22–0.31 s against 0.08–0.11 s per 3 GiB compared,
/// tmpfs members, one thread).
const COMPARE_PIECE_BYTES: usize = 256 << 10;

/// Member bytes [`alike_in_pieces`] has vouched for since the process started.
static PIECE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Member bytes of mirrored regions found alike by the in-memory piecewise compare since
/// the process started (tests tell by it which path a pass took).
pub fn mirror_piece_bytes() -> u64 {
    PIECE_BYTES.load(Ordering::Relaxed)
}

/// Do all `live` copies of a region of `n` sectors read and compare equal, read a piece
/// of each at a time into the same small buffers (a worker's pieces stay in its core's
/// cache, for the kernel's copy into them and for the compare)? Only where every copy is
/// a file in memory and readable over the whole region (a disk or a network member
/// wants its reads large): false otherwise, and at the first piece that fails to read
/// or differs, so the caller reads the region again and judges it page by page with its
/// handling of errors: what a pass reports and repairs does not depend on this path.
/// Read whole regions into buffers of the region's size, the copies left the cache
/// between the kernel's copy and the compare (four workers on two cores).
fn alike_in_pieces(arr: &Array, live: &[Loc], n: u64) -> bool {
    if !pieces_on()
        || !live.iter().all(|&(r, d)| {
            arr.readable(r, d, n)
                && arr
                    .member(r)
                    .is_some_and(|m| m.dev.submission().in_memory())
        })
    {
        return false;
    }
    let len = (n * 512) as usize;
    let piece = COMPARE_PIECE_BYTES.min(len);
    let mut bufs = scratch_blocks(live.len(), piece);
    let mut at = 0;
    while at < len {
        let end = (at + piece).min(len);
        let reads: Vec<(usize, u64, &mut [u8])> = live
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(r, d), b)| (r, d + (at / 512) as u64, &mut b[..end - at]))
            .collect();
        if !arr.read_members_at_once(reads).into_iter().all(|ok| ok) {
            return false;
        }
        let first = &bufs[0][..end - at];
        if !bufs[1..].iter().all(|b| &b[..end - at] == first) {
            return false;
        }
        at = end;
    }
    PIECE_BYTES.fetch_add((len * live.len()) as u64, Ordering::Relaxed);
    true
}

/// `RAIDKIT_MIRROR_PIECES=0` turns the in-memory piecewise compare off (measurements,
/// tests); read once.
fn pieces_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RAIDKIT_MIRROR_PIECES").map_or(true, |v| v != "0"))
}

/// A region's copies, their buffers handed back for reuse when dropped.
struct Copies(Vec<(Loc, Option<Vec<u8>>)>);

impl std::ops::Deref for Copies {
    type Target = [(Loc, Option<Vec<u8>>)];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        for (_, b) in self.0.drain(..) {
            if let Some(b) = b {
                scratch_put(b);
            }
        }
    }
}

/// Decide and (in repair) fix one page `[lo, hi)` of a mirror region starting at array
/// sector `a`; `skip`: per copy, whether its page here could not be read (then it is
/// judged without that copy).
#[allow(clippy::too_many_arguments)]
fn mirror_page(
    arr: &Array,
    copies: &[(Loc, Option<Vec<u8>>)],
    skip: &[bool],
    a: u64,
    lo: usize,
    hi: usize,
    mode: SyncMode,
    rep: &mut SyncReport,
) -> Result<()> {
    let pages: Vec<Option<&[u8]>> = copies
        .iter()
        .zip(skip)
        .map(|(c, &unread)| c.1.as_deref().filter(|_| !unread).map(|b| &b[lo..hi]))
        .collect();
    let readable: Vec<&[u8]> = pages.iter().flatten().copied().collect();
    if readable.iter().all(|p| *p == readable[0]) && pages.iter().all(|p| p.is_some()) {
        return Ok(());
    }
    if readable.iter().all(|p| *p == readable[0]) {
        // Some copy unreadable, the rest agree: the read path handles it; not a mismatch.
        return Ok(());
    }
    let off = a * 512;
    let plen = (hi - lo) as u64;
    let (decision, undecided_why, none_matched) = decide(arr, off, plen, &readable)?;
    let decided = decision.is_some();
    let (good, what, by): (Vec<u8>, String, &'static str) = match decision {
        Some((g, w, by)) => (g.to_vec(), w, by),
        None => {
            let first = readable[0];
            (
                first.to_vec(),
                format!(
                    "copies disagree (roles {}) and it cannot be told which is right: {undecided_why}; like md, repair copies the first readable copy (role {}) over the others",
                    copies
                        .iter()
                        .map(|c| c.0 .0.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    copies
                        .iter()
                        .zip(&pages)
                        .find(|(_, p)| p.is_some())
                        .map(|(c, _)| c.0 .0)
                        .unwrap_or(0)
                ),
                "undecided",
            )
        }
    };
    let wrong: Vec<Loc> = copies
        .iter()
        .zip(&pages)
        .filter(|(_, p)| p.is_some_and(|p| p != good.as_slice()))
        .map(|(c, _)| c.0)
        .collect();
    let repaired = mode != SyncMode::Check;
    if repaired {
        for &(r, d) in &wrong {
            arr.write_block(r, d + (lo as u64 / 512), &good)?;
            rep.sectors_written += plen / 512;
        }
        if none_matched {
            // Every copy now holds these bytes: make the sidecar agree with the array.
            if let Some(cs) = arr.checksums() {
                cs.set(off / PAGE as u64, &good)?;
            }
        }
    }
    if mode == SyncMode::Resync {
        return Ok(());
    }
    rep.add_mismatch(off, plen);
    if decided {
        for &(r, _) in &wrong {
            rep.add_verdict(Verdict {
                stripe: 0,
                offset: off,
                len: plen,
                role: Some(r),
                device: arr.member(r).map(|m| m.dev.name().to_string()),
                what: what.clone(),
                decided_by: by.into(),
                repaired,
            });
        }
    } else {
        rep.add_verdict(Verdict {
            stripe: 0,
            offset: off,
            len: plen,
            role: None,
            device: None,
            what,
            decided_by: by.into(),
            repaired,
        });
    }
    Ok(())
}

/// A copy found right: its bytes, what was wrong with the others, how it was told.
type Decision<'a> = (&'a [u8], String, &'static str);

/// The copy a strict majority of the readable copies agree on (3+ way mirrors).
fn majority<'a>(readable: &[&'a [u8]]) -> Option<Decision<'a>> {
    let mut best: (usize, &[u8]) = (0, readable[0]);
    for cand in readable {
        let votes = readable.iter().filter(|o| **o == *cand).count();
        if votes > best.0 {
            best = (votes, cand);
        }
    }
    (best.0 * 2 > readable.len()).then(|| {
        (
            best.1,
            format!(
                "mirror copy (outvoted {} to {})",
                best.0,
                readable.len() - best.0
            ),
            "majority",
        )
    })
}

/// The copy that matches its checksum in the array's sidecar, or why none can be told
/// (and whether no copy matched at all).
fn by_checksum<'a>(
    arr: &Array,
    off: u64,
    plen: u64,
    readable: &[&'a [u8]],
) -> Result<std::result::Result<Decision<'a>, (&'static str, bool)>> {
    let Some(cs) = arr.checksums() else {
        return Ok(Err(("no checksum sidecar", false)));
    };
    if !read_errors::whole_checksum_block(arr, off, plen) {
        return Ok(Err(("the range is not a whole checksum block", false)));
    }
    let mut matching: Vec<&[u8]> = Vec::new();
    let mut unknown = false;
    for c in readable {
        match cs.judge(off / PAGE as u64, c)? {
            Judgement::Match => matching.push(c),
            Judgement::Mismatch => {}
            Judgement::Unknown => unknown = true,
        }
    }
    Ok(if unknown {
        Err(("the checksum is not authoritative here (region written during an unclean stop, or a write in flight)", false))
    } else if let Some(m) = matching.first() {
        Ok((
            m,
            "mirror copy (does not match its checksum)".into(),
            "checksum",
        ))
    } else {
        Err(("no copy matches its checksum", true))
    })
}
