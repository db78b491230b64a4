//! Writing a cached stripe's dirty rows out to the members.

use crate::array::cache::Entry;
use crate::array::cache::EntryState;
use crate::array::cache::StripeCache;
use crate::array::cache::PAGE;
use crate::array::cache::PAGE_SECTORS;
use crate::array::scratch::compute_parity_scratch;
use crate::array::scratch::scratch_take;
use crate::array::scratch::ScratchBufs;
use crate::array::stripe::annotate_unreadable;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use raidkit_layout::StripeLayout;
use raidkit_layout::SECTOR;
use raidkit_parity as parity;
use std::sync::atomic::Ordering;

impl Array {
    /// Write an entry's dirty pages to the members (entry lock held). A failure drops the
    /// held data, marks its range lost (reads there fail rather than return old data) and
    /// is reported by the next flush.
    pub(crate) fn cache_drain(
        &self,
        c: &StripeCache,
        e: &Entry,
        st: &mut EntryState,
    ) -> Result<bool> {
        let r = self.cache_drain_inner(c, e, st);
        if let Err(err) = &r {
            let cs = self.geo.chunk_sectors;
            let first = e.stripe * c.kc as u64 * cs;
            let mut lost: Vec<(u64, u64)> = Vec::new();
            for k in 0..c.kc {
                for row in st.rows_used() {
                    if st.pages[k * c.rows + row]
                        .as_ref()
                        .is_some_and(|p| p.dirty != 0)
                    {
                        let off = (first + k as u64 * cs + row as u64 * PAGE_SECTORS) * SECTOR;
                        match lost.last_mut() {
                            Some((o, l)) if *o + *l == off => *l += PAGE as u64,
                            _ => lost.push((off, PAGE as u64)),
                        }
                    }
                }
            }
            self.add_lost(&lost);
            let (o, end) = match (lost.first(), lost.last()) {
                (Some(a), Some(b)) => (a.0, b.0 + b.1),
                _ => (0, 0),
            };
            c.set_pending(EngineError::WriteFailed {
                offset: o,
                end,
                why: format!(
                    "acknowledged writes held in the stripe cache could not be written to the \
                     members ({err}); the range now reads as lost: restore it from a backup"
                ),
            });
            c.clear(e, st);
        }
        r
    }

    /// Write out an entry's dirty rows, each run of adjacent dirty rows on its own (random
    /// writes held together in one stripe are not merged into one wide range). True if
    /// clients had written the whole stripe and it went out without member reads.
    pub(crate) fn cache_drain_inner(
        &self,
        c: &StripeCache,
        e: &Entry,
        st: &mut EntryState,
    ) -> Result<bool> {
        let rows = c.rows;
        let used = st.rows_used();
        let dirty_row = |r: usize| {
            (0..c.kc).any(|k| {
                st.pages[k * rows + r]
                    .as_ref()
                    .is_some_and(|p| p.dirty != 0)
            })
        };
        let runs: Vec<(usize, usize)> = {
            let mut v = Vec::new();
            let mut r = used.start;
            while r < used.end {
                if !dirty_row(r) {
                    r += 1;
                    continue;
                }
                let mut q = r;
                while q < used.end && dirty_row(q) {
                    q += 1;
                }
                v.push((r, q));
                r = q;
            }
            v
        };
        let lay = self.stripe_layout(e.stripe)?;
        let _g = self.locks.lock(e.stripe);
        // Every page of the stripe written by clients (over one or more write-outs): the
        // stripe was written whole, not filled from the members for reuse.
        let whole = st.written_pages == c.kc * c.rows;
        let mut merged = true;
        for (r, q) in runs {
            merged &= self.cache_drain_rows(c, e, st, &lay, r..q)?;
        }
        self.check_still_runs(e.stripe)?;
        c.mark_clean(e);
        Ok(whole && merged)
    }

    /// Write out the dirty data of rows `rows` (stripe lock held). True if that needed no
    /// member reads (the cache knew every data block over the rows: a merge).
    pub(crate) fn cache_drain_rows(
        &self,
        c: &StripeCache,
        e: &Entry,
        st: &mut EntryState,
        lay: &StripeLayout,
        row_range: std::ops::Range<usize>,
    ) -> Result<bool> {
        let cs = self.geo.chunk_sectors;
        let (kc, rows) = (c.kc, c.rows);
        let stripe = e.stripe;
        // Dirty span of each data block, chunk sectors.
        let mut spans: Vec<Option<(u64, u64)>> = vec![None; kc];
        for (k, span) in spans.iter_mut().enumerate() {
            for row in row_range.clone() {
                if let Some(p) = &st.pages[k * rows + row] {
                    if p.dirty != 0 {
                        let r0 = row as u64 * PAGE_SECTORS;
                        let first = r0 + u64::from(p.dirty.trailing_zeros());
                        let last = r0 + PAGE_SECTORS - u64::from(p.dirty.leading_zeros());
                        *span = Some(match *span {
                            None => (first, last),
                            Some((a, b)) => (a.min(first), b.max(last)),
                        });
                    }
                }
            }
        }
        let lo = spans.iter().flatten().map(|s| s.0).min();
        let hi = spans.iter().flatten().map(|s| s.1).max();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Ok(false);
        };
        let rn = hi - lo;
        let len = (rn * SECTOR) as usize;
        let base = stripe * cs;
        // What the cache knows of [lo, hi) of every data block, in reused buffers (a
        // stream writes out a stripe every few hundred microseconds: fresh zeroed buffers
        // made the allocator hand memory back to the kernel and fault it in again).
        let mut bufs = ScratchBufs(Vec::with_capacity(kc));
        let mut known: Vec<Vec<bool>> = vec![vec![false; rn as usize]; kc];
        let mut clean_known = 0u64;
        for (k, kn) in known.iter_mut().enumerate() {
            let mut b = scratch_take();
            b.clear();
            b.reserve(len);
            let mut sec = lo;
            while sec < hi {
                let row_end = ((sec / PAGE_SECTORS + 1) * PAGE_SECTORS).min(hi);
                let i = (sec - lo) as usize;
                match &st.pages[k * rows + (sec / PAGE_SECTORS) as usize] {
                    None => {
                        // Not cached: zeros until read.
                        b.resize(b.len() + ((row_end - sec) * SECTOR) as usize, 0);
                        sec = row_end;
                    }
                    Some(p)
                        if sec % PAGE_SECTORS == 0
                            && row_end - sec == PAGE_SECTORS
                            && p.valid == 0xff =>
                    {
                        // A whole valid page at once.
                        b.extend_from_slice(&p.data);
                        kn[i..i + PAGE_SECTORS as usize].fill(true);
                        clean_known += u64::from((!p.dirty).count_ones());
                        sec = row_end;
                    }
                    Some(p) => {
                        let bit = 1u8 << (sec % PAGE_SECTORS);
                        if p.valid & bit != 0 {
                            let from = ((sec % PAGE_SECTORS) * SECTOR) as usize;
                            b.extend_from_slice(&p.data[from..from + 512]);
                            kn[i] = true;
                            if p.dirty & bit == 0 {
                                clean_known += 1;
                            }
                        } else {
                            b.resize(b.len() + 512, 0);
                        }
                        sec += 1;
                    }
                }
            }
            bufs.push(b);
        }
        let missing: u64 = known.iter().flatten().filter(|&&x| !x).count() as u64;
        if missing > 0 {
            let first_row = (lo / PAGE_SECTORS) as usize;
            let n_rows = (hi.div_ceil(PAGE_SECTORS) - lo / PAGE_SECTORS) as usize;
            c.note_misses(
                stripe,
                (first_row..first_row + n_rows).filter(|&r| {
                    let a = (r as u64 * PAGE_SECTORS).max(lo) - lo;
                    let b = ((r as u64 + 1) * PAGE_SECTORS).min(hi) - lo;
                    known
                        .iter()
                        .any(|kn| kn[a as usize..b as usize].iter().any(|&x| !x))
                }),
            );
        }
        self.bitmap_mark(base + lo, rn)?;
        let is6 = lay.q.is_some();
        let mut roles: Vec<usize> = lay.data.clone();
        roles.push(lay.p);
        roles.extend(lay.q);
        let all_readable = roles.iter().all(|&r| self.can_read(r, base + lo, rn));
        let rmw_reads: u64 =
            spans.iter().flatten().map(|(a, b)| b - a).sum::<u64>() + rn * if is6 { 2 } else { 1 };
        let mut read_secs = 0u64;
        let mut pq: Option<(Vec<u8>, Vec<u8>)> = None;
        c.drains.fetch_add(1, Ordering::Relaxed);
        let parity_gone = self.parity_gone(lay);
        if parity_gone {
            // No parity to keep: the dirty data goes out alone (the parity writes below
            // find no member), nothing is read.
            pq = Some((Vec::new(), Vec::new()));
        } else if missing == 0 {
            pq = Some(compute_parity_scratch(lay, &bufs, len));
            c.merges.fetch_add(1, Ordering::Relaxed);
        } else if all_readable {
            // Reading whole rows fills the cache for later writes: worth it when rows are
            // reused and it costs at most twice the reads of read-modify-write.
            let fill = missing <= 2 * rmw_reads && c.reuse_likely();
            let r = if rmw_reads < missing && !fill {
                read_secs = rmw_reads;
                self.cache_rmw(lay, base, lo, rn, &spans, &mut bufs, &mut known)
            } else {
                read_secs = missing;
                self.cache_rcw(lay, base, lo, &mut bufs, &mut known)
                    .map(|()| compute_parity_scratch(lay, &bufs, len))
            };
            match r {
                Ok(v) => pq = Some(v),
                Err(EngineError::Io { .. }) | Err(EngineError::Unreadable { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // P and Q, handed back to the scratch buffers once written.
        let pq = match pq {
            Some((p, q)) => ScratchBufs(vec![p, q]),
            None => {
                // Degraded (or a read failed): reconstruct what the cache does not know.
                let sd = match self.read_stripe(stripe, lay, lo, rn, false) {
                    Ok(sd) => sd,
                    Err(EngineError::Unreadable { .. })
                        if self.stripe_has_bad(lay, base + lo, rn) =>
                    {
                        // Data is lost here (bad blocks beyond the redundancy): bbl.rs
                        // writes what can be made valid, from the dirty sectors alone.
                        let mut pcs: Vec<(usize, u64, &[u8])> = Vec::new();
                        for (k, buf) in bufs.iter().enumerate() {
                            let dirty = |sec: u64| {
                                st.pages[k * rows + (sec / PAGE_SECTORS) as usize]
                                    .as_ref()
                                    .is_some_and(|p| p.dirty & (1 << (sec % PAGE_SECTORS)) != 0)
                            };
                            let mut sec = lo;
                            while sec < hi {
                                if !dirty(sec) {
                                    sec += 1;
                                    continue;
                                }
                                let mut t = sec;
                                while t < hi && dirty(t) {
                                    t += 1;
                                }
                                let (f, to) =
                                    (((sec - lo) * SECTOR) as usize, ((t - lo) * SECTOR) as usize);
                                pcs.push((k, sec, &buf[f..to]));
                                sec = t;
                            }
                        }
                        self.write_stripe_over_lost(stripe, lay, &pcs)?;
                        for k in 0..kc {
                            for row in row_range.clone() {
                                st.set_clean(k * rows + row);
                            }
                        }
                        return Ok(false);
                    }
                    Err(e) => return Err(annotate_unreadable(e, 0, 0)),
                };
                read_secs = missing;
                for k in 0..kc {
                    for (i, kn) in known[k].iter_mut().enumerate() {
                        if !*kn {
                            bufs[k][i * 512..(i + 1) * 512]
                                .copy_from_slice(&sd.data[k][i * 512..(i + 1) * 512]);
                            *kn = true;
                        }
                    }
                }
                let (p, q) = compute_parity_scratch(lay, &bufs, len);
                ScratchBufs(vec![p, q])
            }
        };
        for (k, span) in spans.iter().enumerate() {
            let Some((a, b)) = *span else {
                continue;
            };
            if parity_gone {
                // Nothing was read: a span may hold sectors the cache does not know
                // (between dirty ones), so only the runs it knows go out.
                let (a, b) = ((a - lo) as usize, (b - lo) as usize);
                let mut i = a;
                while i < b {
                    if !known[k][i] {
                        i += 1;
                        continue;
                    }
                    let mut j = i;
                    while j < b && known[k][j] {
                        j += 1;
                    }
                    self.member_write(
                        lay.data[k],
                        base + lo + i as u64,
                        &bufs[k][i * 512..j * 512],
                    )?;
                    i = j;
                }
                continue;
            }
            let from = ((a - lo) * SECTOR) as usize;
            let to = ((b - lo) * SECTOR) as usize;
            self.member_write(lay.data[k], base + a, &bufs[k][from..to])?;
        }
        self.member_write(lay.p, base + lo, &pq[0])?;
        if let Some(qr) = lay.q {
            self.member_write(qr, base + lo, &pq[1])?;
        }
        drop(pq);
        c.hits
            .fetch_add(clean_known.div_ceil(PAGE_SECTORS), Ordering::Relaxed);
        c.saved.fetch_add(
            if missing == 0 {
                (rn * kc as u64).div_ceil(PAGE_SECTORS)
            } else {
                clean_known.div_ceil(PAGE_SECTORS)
            },
            Ordering::Relaxed,
        );
        c.misses
            .fetch_add(read_secs.div_ceil(PAGE_SECTORS), Ordering::Relaxed);
        // Everything is on the members now; keep what was learnt for later writes.
        for k in 0..kc {
            for sec in lo..hi {
                let i = (sec - lo) as usize;
                let idx = k * rows + (sec / PAGE_SECTORS) as usize;
                let bit = 1u8 << (sec % PAGE_SECTORS);
                if !known[k][i] {
                    continue;
                }
                let pg = c.page(st, idx);
                if pg.valid & bit == 0 {
                    let to = ((sec % PAGE_SECTORS) * SECTOR) as usize;
                    pg.data[to..to + 512].copy_from_slice(&bufs[k][i * 512..(i + 1) * 512]);
                    pg.valid |= bit;
                }
            }
        }
        for k in 0..kc {
            for row in row_range.clone() {
                st.set_clean(k * rows + row);
            }
        }
        Ok(missing == 0)
    }

    /// Read-modify-write of the dirty spans: old data and old parity from the members.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cache_rmw(
        &self,
        lay: &StripeLayout,
        base: u64,
        lo: u64,
        rn: u64,
        spans: &[Option<(u64, u64)>],
        bufs: &mut [Vec<u8>],
        known: &mut [Vec<bool>],
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let (mut p, mut q) = self.read_old_parity(lay, base + lo, rn)?;
        for (k, span) in spans.iter().enumerate() {
            let Some((a, b)) = *span else {
                continue;
            };
            let from = ((a - lo) * SECTOR) as usize;
            let to = ((b - lo) * SECTOR) as usize;
            let mut old = vec![0u8; to - from];
            self.member_read(lay.data[k], base + a, &mut old)?;
            // Sectors of the span the cache does not know are unchanged: the old data.
            for i in 0..(b - a) as usize {
                let j = (a - lo) as usize + i;
                if !known[k][j] {
                    bufs[k][j * 512..(j + 1) * 512].copy_from_slice(&old[i * 512..(i + 1) * 512]);
                    known[k][j] = true;
                }
            }
            parity::xor_into(&mut old, &bufs[k][from..to]); // old := delta
            parity::xor_into(&mut p[from..to], &old);
            if lay.q.is_some() {
                let coef = parity::gf::exp(lay.slot[k]);
                parity::mul_acc(&mut q[from..to], &old, coef);
            }
        }
        Ok((p, q))
    }

    /// Reconstruct-write: read what the cache does not know of every data block.
    pub(crate) fn cache_rcw(
        &self,
        lay: &StripeLayout,
        base: u64,
        lo: u64,
        bufs: &mut [Vec<u8>],
        known: &mut [Vec<bool>],
    ) -> Result<()> {
        for k in 0..bufs.len() {
            let mut i = 0;
            let n = known[k].len();
            while i < n {
                if known[k][i] {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j < n && !known[k][j] {
                    j += 1;
                }
                self.member_read(
                    lay.data[k],
                    base + lo + i as u64,
                    &mut bufs[k][i * 512..j * 512],
                )?;
                for kn in &mut known[k][i..j] {
                    *kn = true;
                }
                i = j;
            }
        }
        Ok(())
    }
}
