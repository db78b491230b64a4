//! Redundancy passes over an array: resync (make parity/mirrors consistent, as after
//! creation or an unclean stop), check (count and locate mismatches) and repair.

use crate::array::stripe::compute_parity;
use crate::array::Array;
use crate::checksums::Judgement;
use crate::error::{EngineError, Result};
use crate::locks::lock;
use raidkit_layout::Level;

/// What a pass does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Make redundancy consistent, writing only where it differs.
    Resync,
    /// Report mismatches, write nothing.
    Check,
    /// Report mismatches and fix them.
    Repair,
}

/// Outcome of a pass.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SyncReport {
    /// Sectors of the sync address space processed.
    pub sectors_done: u64,
    /// Sectors skipped because every member had a hole there (all zeros, consistent).
    pub sectors_skipped_holes: u64,
    /// Mismatched ranges as (array byte offset, length). For parity levels a mismatch in a
    /// stripe row is reported as the array range of that row's data.
    pub mismatches: Vec<(u64, u64)>,
    /// Sectors rewritten.
    pub sectors_written: u64,
    /// Per inconsistent page: which member was wrong, when that can be told.
    pub verdicts: Vec<Verdict>,
    /// Where the pass stopped early (sync-space sector to resume from), if it did.
    pub stopped_at: Option<u64>,
    /// The array byte range the pass covered, `[start, end)`: the whole array, its window,
    /// or up to where it stopped.
    pub covered: (u64, u64),
}

/// The verdict on one inconsistent 4 KiB page (parity levels) or region (mirrors).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Stripe number (parity levels) or 0.
    pub stripe: u64,
    /// Array byte offset of the affected region (first data block of the row for parity).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Role of the member found wrong, if it could be told.
    pub role: Option<usize>,
    /// Device of that member.
    pub device: Option<String>,
    /// What was wrong (`P`, `Q`, `data (...)`, `mirror copy`, or why it cannot be told
    /// and what repair does then).
    pub what: String,
    /// How the verdict was reached: `P+Q` (RAID6), `majority` (3+ way mirrors),
    /// `checksum` (the sidecar), or `undecided` (then repair does what md does: mirrors
    /// copy the first readable copy, parity is recomputed from the data).
    pub decided_by: String,
    /// Whether it was rewritten.
    pub repaired: bool,
}

impl SyncReport {
    /// Add a verdict, merging it into the previous one when it continues it (same member,
    /// same finding, adjacent range).
    fn add_verdict(&mut self, v: Verdict) {
        if let Some(last) = self.verdicts.last_mut() {
            if last.offset + last.len == v.offset
                && last.role == v.role
                && last.what == v.what
                && last.stripe == v.stripe
                && last.repaired == v.repaired
            {
                last.len += v.len;
                return;
            }
        }
        self.verdicts.push(v);
    }

    fn add_mismatch(&mut self, off: u64, len: u64) {
        if let Some(last) = self.mismatches.last_mut() {
            if last.0 + last.1 == off {
                last.1 += len;
                return;
            }
        }
        self.mismatches.push((off, len));
    }
}

/// Sectors of the resync address space (device sectors for RAID1/4/5/6, array sectors
/// for RAID10, 0 for levels without redundancy).
pub fn sync_space(arr: &Array) -> u64 {
    let g = arr.geometry();
    match g.level {
        Level::Raid1 => g.array_sectors(),
        Level::Raid4 | Level::Raid5 | Level::Raid6 => g.stripes() * g.chunk_sectors,
        Level::Raid10 => g.array_sectors(),
        Level::Linear | Level::Raid0 => 0,
    }
}

/// Array bytes per sync-space row: for parity levels a stripe row of data maps to one
/// chunk of sync space; for mirrors sync space is array sectors.
fn row(arr: &Array) -> Option<(u64, u64)> {
    let g = arr.geometry();
    match g.level {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => Some((
            g.chunk_sectors,
            g.chunk_sectors * 512 * g.data_disks() as u64,
        )),
        _ => None,
    }
}

/// Convert an array byte window `[from, to)` to the sync-space sectors that cover it:
/// whole stripe rows for parity levels, whole 4 KiB pages for mirrors (`to` is clamped to
/// the array). Use with [`SyncOptions::window`].
pub fn window_for_bytes(arr: &Array, from: u64, to: u64) -> (u64, u64) {
    let total = sync_space(arr);
    let to = to.min(arr.size_bytes());
    match row(arr) {
        Some((c, rb)) => ((from / rb * c).min(total), (to.div_ceil(rb) * c).min(total)),
        None => {
            let p = PAGE as u64;
            (
                (from / p * p / 512).min(total),
                (to.div_ceil(p) * p / 512).min(total),
            )
        }
    }
}

/// The array byte offset where sync-space sector `x` starts (for reports and resuming).
pub fn bytes_for_sync(arr: &Array, x: u64) -> u64 {
    match row(arr) {
        Some((c, rb)) => (x / c * rb).min(arr.size_bytes()),
        None => (x * 512).min(arr.size_bytes()),
    }
}

/// Run a pass. With a bitmap and `Resync`, only regions whose bits are set are visited
/// unless `full`. `progress(done, total)` is called as work proceeds.
pub fn run(
    arr: &Array,
    mode: SyncMode,
    full: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SyncReport> {
    run_opts(
        arr,
        mode,
        &SyncOptions {
            full,
            ..Default::default()
        },
        progress,
    )
}

/// Options of a pass beyond the mode.
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    /// Visit everything even if a bitmap says only some regions are dirty.
    pub full: bool,
    /// Only this window of the sync address space, in sectors `[start, end)` (a scrub
    /// can be split over several runs; `SyncReport::stopped_at` says where to resume).
    pub window: Option<(u64, u64)>,
    /// Stop at the next step when set.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Throttle to this many bytes per second of sync space.
    pub max_bytes_per_sec: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// Run a pass with options. See [`run`].
pub fn run_opts(
    arr: &Array,
    mode: SyncMode,
    opts: &SyncOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SyncReport> {
    let full = opts.full;
    let total = sync_space(arr);
    let (w0, w1) = opts.window.unwrap_or((0, total));
    let mut rep = SyncReport {
        covered: (bytes_for_sync(arr, w0), bytes_for_sync(arr, w1.min(total))),
        ..Default::default()
    };
    if total == 0 {
        if mode == SyncMode::Resync {
            arr.set_resync_done();
        }
        return Ok(rep);
    }
    if mode != SyncMode::Check {
        if !arr.is_writable() {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; a resync or repair needs it writable".into(),
            ));
        }
        arr.ensure_dirty()?;
    }
    // Regions to visit, in the sync address space.
    let regions: Vec<(u64, u64)> = match (arr.bm().as_ref(), mode, full) {
        (Some(bm), SyncMode::Resync, false) => {
            let b = lock(bm);
            let cs = b.chunk_sectors;
            b.dirty()
                .into_iter()
                .map(|i| (i * cs, ((i + 1) * cs).min(total)))
                .filter(|(a, e)| a < e)
                .collect()
        }
        _ => vec![(0, total)],
    };
    let regions: Vec<(u64, u64)> = match opts.window {
        Some((ws, we)) => regions
            .into_iter()
            .map(|(a, e)| (a.max(ws), e.min(we)))
            .filter(|(a, e)| a < e)
            .collect(),
        None => regions,
    };
    let t0 = std::time::Instant::now();
    let stopped = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    let throttle = |done: u64| {
        if let Some(l) = &opts.max_bytes_per_sec {
            let l = l.load(std::sync::atomic::Ordering::Relaxed);
            if l > 0 {
                let should = std::time::Duration::from_secs_f64((done * 512) as f64 / l as f64);
                let el = t0.elapsed();
                if should > el {
                    std::thread::sleep(should - el);
                }
            }
        }
    };
    let todo: u64 = regions.iter().map(|(a, e)| e - a).sum();
    let mut done = 0u64;
    progress(0, todo);
    let g = arr.geometry().clone();
    for (a, e) in regions {
        match g.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let c = g.chunk_sectors;
                let mut stripe = a / c;
                while stripe * c < e {
                    if stopped() {
                        rep.stopped_at = Some(stripe * c);
                        rep.covered.1 = bytes_for_sync(arr, stripe * c);
                        rep.sectors_done = done;
                        return Ok(rep);
                    }
                    let n = parity_stripe(arr, stripe, mode, &mut rep)?;
                    done += n;
                    stripe += 1;
                    progress(done, todo);
                    throttle(done);
                }
            }
            Level::Raid1 | Level::Raid10 => {
                let step = 1024u64;
                let mut s = a;
                while s < e {
                    if stopped() {
                        rep.stopped_at = Some(s);
                        rep.covered.1 = bytes_for_sync(arr, s);
                        rep.sectors_done = done;
                        return Ok(rep);
                    }
                    let n = mirror_region(arr, s, (e - s).min(step), mode, &mut rep)?;
                    s += n;
                    done += n;
                    progress(done, todo);
                    throttle(done);
                }
            }
            _ => {}
        }
    }
    rep.sectors_done = done;
    if mode != SyncMode::Check && opts.window.is_none() {
        arr.set_resync_done();
        // Redundancy is consistent now: record it (and clear the bitmap's bits, when not
        // degraded) at once, as md does when a resync completes, so that a crash right
        // after does not resync the same regions again.
        arr.mark_clean()?;
    }
    Ok(rep)
}

fn parity_stripe(arr: &Array, stripe: u64, mode: SyncMode, rep: &mut SyncReport) -> Result<u64> {
    let g = arr.geometry();
    let c = g.chunk_sectors;
    let lay = arr.stripe_layout(stripe)?;
    let dsec = stripe * c;
    let mut roles = lay.data.clone();
    roles.push(lay.p);
    roles.extend(lay.q);
    if roles
        .iter()
        .all(|&r| !arr.present(r) || arr.member_hole(r, dsec, c))
    {
        rep.sectors_skipped_holes += c;
        return Ok(c);
    }
    let _g = arr.lock_stripe(stripe);
    let len = (c * 512) as usize;
    let sd = arr.read_stripe(stripe, &lay, 0, c, true)?;
    let (p, q) = compute_parity(&lay, &sd.data, len);
    let p_present = arr.present(lay.p);
    let q_present = lay.q.is_some_and(|r| arr.present(r));
    let kc = lay.data.len() as u64;
    // Compare page by page (4 KiB, like md), so reports are precise.
    let page = PAGE.min(len);
    for (pg, start) in (0..len).step_by(page).enumerate() {
        let end = (start + page).min(len);
        let bad_p = p_present && sd.p[start..end] != p[start..end];
        let bad_q = q_present && sd.q.as_deref().map(|x| &x[start..end]) != Some(&q[start..end]);
        if !bad_p && !bad_q {
            continue;
        }
        let in_chunk = start as u64;
        let row_off = |k: u64| ((stripe * kc + k) * c) * 512 + in_chunk;
        if mode != SyncMode::Resync {
            for k in 0..kc {
                rep.add_mismatch(row_off(k), (end - start) as u64);
            }
        }
        let _ = pg;
        // Who is wrong? RAID6 can tell when exactly one block of the page is bad; RAID4/5
        // can with the checksum sidecar.
        let (culprit, by, why): (Culprit, &str, String) = if mode == SyncMode::Resync {
            (Culprit::Unknown, "undecided", String::new())
        } else if lay.q.is_some() {
            let c = locate_raid6(&lay, &sd, &p, &q, start, end, bad_p, bad_q);
            let by = if matches!(c, Culprit::Unknown) {
                "undecided"
            } else {
                "P+Q"
            };
            (c, by, "more than one block (cannot locate)".into())
        } else {
            let offs: Vec<u64> = (0..kc).map(row_off).collect();
            locate_by_checksums(arr, &sd, &p, start, end, &offs)?
        };
        let (role, what, fix): (Option<usize>, String, Vec<Fix>) = match culprit {
            Culprit::P => (
                Some(lay.p),
                if by == "checksum" {
                    "P (every data block matches its checksum)".into()
                } else {
                    "P".into()
                },
                vec![(lay.p, p[start..end].to_vec())],
            ),
            Culprit::Q => {
                let qr = lay.q.unwrap_or(lay.p);
                (Some(qr), "Q".into(), vec![(qr, q[start..end].to_vec())])
            }
            Culprit::Data(k, fixed) => (
                Some(lay.data[k]),
                format!(
                    "data (array bytes {}..{}){}",
                    row_off(k as u64),
                    row_off(k as u64) + (end - start) as u64,
                    if by == "checksum" {
                        "; it does not match its checksum, its reconstruction from parity does"
                    } else {
                        ""
                    }
                ),
                vec![(lay.data[k], fixed)],
            ),
            Culprit::Unknown => {
                // md's repair: recompute parity from the data.
                let mut v = Vec::new();
                if bad_p {
                    v.push((lay.p, p[start..end].to_vec()));
                }
                if bad_q {
                    if let Some(qr) = lay.q {
                        v.push((qr, q[start..end].to_vec()));
                    }
                }
                (
                    None,
                    format!("{why}; like md, repair recomputes parity from the data"),
                    v,
                )
            }
        };
        let repaired = mode != SyncMode::Check;
        if repaired {
            for (r, bytes) in &fix {
                arr.write_block(*r, dsec + in_chunk / 512, bytes)?;
                rep.sectors_written += bytes.len() as u64 / 512;
            }
        }
        if mode != SyncMode::Resync {
            rep.add_verdict(Verdict {
                stripe,
                offset: row_off(0),
                len: (end - start) as u64,
                role,
                device: role
                    .and_then(|r| arr.member(r))
                    .map(|m| m.dev.name().to_string()),
                what,
                decided_by: by.into(),
                repaired,
            });
        }
    }
    Ok(c)
}

/// A block to rewrite: (role, bytes).
type Fix = (usize, Vec<u8>);
/// A copy's place: (role, data sector).
type Loc = (usize, u64);

/// 4 KiB: md's check granularity.
const PAGE: usize = 4096;

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
    lay: &raidkit_layout::StripeLayout,
    sd: &crate::array::stripe::StripeData,
    p: &[u8],
    q: &[u8],
    start: usize,
    end: usize,
    bad_p: bool,
    bad_q: bool,
) -> Culprit {
    use raidkit_parity::gf;
    let Some(sq) = sd.q.as_deref() else {
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
    sd: &crate::array::stripe::StripeData,
    p: &[u8],
    start: usize,
    end: usize,
    offs: &[u64],
) -> Result<(Culprit, &'static str, String)> {
    let undecided = |why: &str| Ok((Culprit::Unknown, "undecided", why.to_string()));
    let Some(cs) = arr.checksums() else {
        return undecided(
            "data or parity: RAID5 cannot tell which without a checksum sidecar (--checksums)",
        );
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

fn mirror_region(
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
    // Copies are read, compared and rewritten with client writes held: a write landing
    // between the read and the rewrite would otherwise be undone on one copy (and a
    // check would report a mismatch that is only a write in flight).
    let _quiet = arr.is_writable().then(|| arr.pause_writes());
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
    let len = (n * 512) as usize;
    // Read every readable copy.
    let mut copies: Vec<(Loc, Option<Vec<u8>>)> = Vec::new();
    for &(r, d) in &live {
        let mut b = vec![0u8; len];
        let ok = arr.readable(r, d, n) && arr.read_block(r, d, &mut b).is_ok();
        copies.push(((r, d), ok.then_some(b)));
    }
    if copies.iter().all(|c| c.1.is_none()) {
        return Err(EngineError::Unreadable {
            offset: s * 512,
            end: (s + n) * 512,
            why: "no copy is readable".into(),
        });
    }
    // Compare page by page (4 KiB of array data, aligned to array offsets, like the
    // checksum sidecar's blocks) so reports and verdicts are precise.
    let spp = PAGE as u64 / 512;
    let mut a = s;
    while a < s + n {
        let b = ((a / spp + 1) * spp).min(s + n);
        let (lo, hi) = (((a - s) * 512) as usize, ((b - s) * 512) as usize);
        mirror_page(arr, &copies, a, lo, hi, mode, rep)?;
        a = b;
    }
    Ok(n)
}

/// Decide and (in repair) fix one page `[lo, hi)` of a mirror region starting at array
/// sector `a`.
fn mirror_page(
    arr: &Array,
    copies: &[(Loc, Option<Vec<u8>>)],
    a: u64,
    lo: usize,
    hi: usize,
    mode: SyncMode,
    rep: &mut SyncReport,
) -> Result<()> {
    let pages: Vec<Option<&[u8]>> = copies
        .iter()
        .map(|c| c.1.as_deref().map(|b| &b[lo..hi]))
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
    // 1. A strict majority among readable copies (3+ way mirrors).
    let mut best: (usize, &[u8]) = (0, readable[0]);
    for cand in &readable {
        let votes = readable.iter().filter(|o| **o == *cand).count();
        if votes > best.0 {
            best = (votes, cand);
        }
    }
    let mut decision: Option<(&[u8], String, &'static str)> = None;
    if best.0 * 2 > readable.len() {
        decision = Some((
            best.1,
            format!(
                "mirror copy (outvoted {} to {})",
                best.0,
                readable.len() - best.0
            ),
            "majority",
        ));
    }
    // 2. The checksum sidecar.
    let mut undecided_why = "no checksum sidecar: a 2-way mirror cannot tell which copy is right";
    let mut none_matched = false;
    if decision.is_none() {
        if let Some(cs) = arr.checksums() {
            if off.is_multiple_of(PAGE as u64)
                && (plen == PAGE as u64 || off + plen == arr.size_bytes())
            {
                let mut matching: Vec<&[u8]> = Vec::new();
                let mut unknown = false;
                for c in &readable {
                    match cs.judge(off / PAGE as u64, c)? {
                        Judgement::Match => matching.push(c),
                        Judgement::Mismatch => {}
                        Judgement::Unknown => unknown = true,
                    }
                }
                if unknown {
                    undecided_why = "the checksum is not authoritative here (region written during an unclean stop, or a write in flight)";
                } else if let Some(m) = matching.first() {
                    decision = Some((
                        m,
                        "mirror copy (does not match its checksum)".into(),
                        "checksum",
                    ));
                } else {
                    none_matched = true;
                    undecided_why = "no copy matches its checksum";
                }
            } else {
                undecided_why = "the range is not a whole checksum block";
            }
        }
    }
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
                        .find(|c| c.1.is_some())
                        .map(|c| c.0 .0)
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
