//! Writing a cached stripe's dirty rows out to the members: what the cache knows of the
//! rows is gathered ([`WriteOut`]), [`plan`] decides what else to read, and the dirty spans
//! and P/Q go out; what was read stays cached for later writes where there is room (not
//! for a stripe about to be evicted). A single page row the
//! cache holds whole goes out straight from its pages (no gathering copy).

use crate::array::cache::{Count, Entry, EntryState, StripeCache, PAGE, PAGE_SECTORS};
use crate::array::member_io::MemberOp;
use crate::array::parity_write::plan::{plan, Plan, StripeState};
use crate::array::parity_write::Piece;
use crate::array::scratch::{compute_parity_scratch, scratch_put, scratch_take, ScratchBufs};
use crate::array::Array;
use crate::error::{EngineError, Result};
use raidkit_layout::{StripeLayout, SECTOR};
use raidkit_parity as parity;
use smallvec::SmallVec;
use std::ops::Range;

/// Bytes from chunk sector `sector` of a buffer that starts at chunk sector `start`.
fn byte(start: u64, sector: u64) -> usize {
    ((sector - start) * SECTOR) as usize
}

impl Array {
    /// Write an entry's dirty pages to the members (entry lock held). A failure drops the
    /// held data, marks its range lost (reads there fail rather than return old data) and
    /// is reported by the next flush.
    pub(crate) fn cache_drain(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
    ) -> Result<bool> {
        self.cache_drain_keeping(cache, entry, held, true)
    }

    /// As [`Array::cache_drain`], for an entry about to be removed: what is read from the
    /// members for the write-out is not kept (it would only take room from other stripes
    /// until the removal).
    pub(crate) fn cache_drain_to_remove(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
    ) -> Result<bool> {
        self.cache_drain_keeping(cache, entry, held, false)
    }

    fn cache_drain_keeping(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
        keep: bool,
    ) -> Result<bool> {
        let r = self.cache_drain_inner(cache, entry, held, keep);
        if let Err(err) = &r {
            let lost = dirty_byte_ranges(self.geo.chunk_sectors, cache, entry, held);
            self.add_lost(&lost);
            let (offset, end) = match (lost.first(), lost.last()) {
                (Some(a), Some(b)) => (a.0, b.0 + b.1),
                _ => (0, 0),
            };
            cache.set_pending(EngineError::WriteFailed {
                offset,
                end,
                why: format!(
                    "acknowledged writes held in the stripe cache could not be written to the \
                     members ({err}); the range now reads as lost: restore it from a backup"
                ),
            });
            cache.clear(entry, held);
        }
        r
    }

    /// Write out an entry's dirty rows, each run of adjacent dirty page rows on its own
    /// (random writes held together in one stripe are not merged into one wide range).
    /// True if clients had written the whole stripe and it went out without member reads.
    fn cache_drain_inner(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
        keep: bool,
    ) -> Result<bool> {
        let runs = dirty_page_runs(cache, held);
        let layout = self.stripe_layout(entry.stripe)?;
        let _stripe_lock = self.locks.lock(entry.stripe);
        // Every page of the stripe written by clients (over one or more write-outs): the
        // stripe was written whole, not filled from the members for reuse.
        let whole = held.written_pages == cache.kc * cache.rows;
        let mut merged = true;
        for page_rows in runs {
            merged &= self.cache_drain_rows(cache, entry, held, &layout, page_rows, keep)?;
        }
        self.check_still_runs(entry.stripe)?;
        cache.mark_clean(entry);
        Ok(whole && merged)
    }

    /// Write out the dirty data of page rows `page_rows` (stripe lock held), keeping what
    /// was read if `keep` (where there is room). True if that needed no member reads (the
    /// cache knew every data block over the rows: a merge).
    fn cache_drain_rows(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
        layout: &StripeLayout,
        page_rows: Range<usize>,
        keep: bool,
    ) -> Result<bool> {
        if let Some(done) = self.cache_drain_known_row(cache, entry, held, layout, &page_rows) {
            return done;
        }
        let stripe = entry.stripe;
        let Some(mut out) = WriteOut::gather(cache, held, page_rows.clone()) else {
            return Ok(false);
        };
        let stripe_start = stripe * self.geo.chunk_sectors;
        let rows = out.rows.clone();
        let row_sectors = rows.end - rows.start;
        self.bitmap_mark(stripe_start + rows.start, row_sectors)?;
        cache.count(Count::Drains, 1);
        let state = StripeState {
            data_blocks: cache.kc,
            parity_blocks: 1 + usize::from(layout.q.is_some()),
            row_sectors,
            span_sectors: out.spans.iter().flatten().map(|s| s.end - s.start).sum(),
            known_sectors: cache.kc as u64 * row_sectors - out.unknown,
            all_readable: self.stripe_readable(layout, stripe_start + rows.start, row_sectors),
            parity_gone: self.parity_gone(layout),
            prefer_fill: cache.reuse_likely(),
            ..StripeState::default()
        };
        let unknown = out.unknown;
        let (pq, read_sectors) =
            match self.prepare_write_out(cache, held, layout, stripe, &mut out, state)? {
                Prepared::Write { pq, read_sectors } => (pq, read_sectors),
                Prepared::WrittenOverLost => {
                    out.set_clean(cache, held, page_rows);
                    return Ok(false);
                }
            };
        self.write_out(layout, stripe_start, &out, pq.as_ref())?;
        let (clean_pages, row_pages) = (
            out.clean_known.div_ceil(PAGE_SECTORS),
            (row_sectors * cache.kc as u64).div_ceil(PAGE_SECTORS),
        );
        cache.count(Count::Hits, clean_pages);
        cache.count(
            Count::Saved,
            if unknown == 0 { row_pages } else { clean_pages },
        );
        cache.count(Count::Misses, read_sectors.div_ceil(PAGE_SECTORS));
        // Everything is on the members now; keep what was learnt for later writes.
        if keep {
            out.keep_known(cache, held);
        }
        out.set_clean(cache, held, page_rows);
        Ok(unknown == 0)
    }

    /// Carry out the plan of a write-out up to its writes: what to read and compute,
    /// re-planned after a failed read. With data lost in the rows, the dirty sectors are
    /// written row by row here.
    fn prepare_write_out(
        &self,
        cache: &StripeCache,
        held: &EntryState,
        layout: &StripeLayout,
        stripe: u64,
        out: &mut WriteOut,
        mut state: StripeState,
    ) -> Result<Prepared> {
        let mut reconstruct_error = None;
        let unknown = out.unknown;
        let row_sectors = out.rows.end - out.rows.start;
        let stripe_start = stripe * self.geo.chunk_sectors;
        let rows_start = stripe_start + out.rows.start;
        loop {
            let step = plan(&state);
            let read = match step {
                Plan::DataOnly => {
                    return Ok(Prepared::Write {
                        pq: None,
                        read_sectors: 0,
                    })
                }
                Plan::Compute => {
                    // A merge is clients' writes completing the rows between them (what a
                    // stream does, and what holding partial stripes is for); rows completed
                    // by clean cached pages are hits of scattered writes, which holding
                    // would only delay.
                    if out.clean_known == 0 {
                        cache.count(Count::Merges, 1);
                    }
                    return Ok(Prepared::Write {
                        pq: Some(out.parity(layout)),
                        read_sectors: 0,
                    });
                }
                Plan::ReadModifyWrite => self
                    .cache_rmw(layout, stripe_start, out)
                    .map(|(p, q)| (ScratchBufs(vec![p, q]), state.rmw_reads())),
                Plan::ReconstructWrite => self
                    .cache_rcw(layout, stripe_start, out)
                    .map(|()| (out.parity(layout), unknown)),
                Plan::Reconstruct => {
                    match self.read_stripe(stripe, layout, out.rows.start, row_sectors, false) {
                        Ok(known) => {
                            out.fill_unknown(&known.data);
                            return Ok(Prepared::Write {
                                pq: Some(out.parity(layout)),
                                read_sectors: unknown,
                            });
                        }
                        Err(e @ EngineError::Unreadable { .. }) => {
                            state.reconstruct_failed = true;
                            state.bad_blocks = self.stripe_has_bad(layout, rows_start, row_sectors);
                            reconstruct_error = Some(e);
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
                Plan::OverLost => {
                    // Data is lost here (bad blocks beyond the redundancy): write what can
                    // be made valid, from the dirty sectors alone.
                    let pieces = out.dirty_pieces(cache, held);
                    self.write_stripe_over_lost(stripe, layout, &pieces)?;
                    return Ok(Prepared::WrittenOverLost);
                }
                Plan::Fail => {
                    return Err(reconstruct_error.take().unwrap_or_else(|| {
                        EngineError::Unreadable {
                            offset: 0,
                            end: 0,
                            why: format!("stripe {stripe} cannot be reconstructed"),
                        }
                    }))
                }
                Plan::FullStripe | Plan::ReadUnwritten | Plan::StaleParity | Plan::Refuse => {
                    debug_assert!(false, "{step:?} planned for a stripe cache write-out");
                    return Err(EngineError::Invalid(format!(
                        "internal error: {step:?} planned for a write-out of stripe {stripe}"
                    )));
                }
            };
            match read {
                Ok((pq, read_sectors)) => {
                    return Ok(Prepared::Write {
                        pq: Some(pq),
                        read_sectors,
                    })
                }
                // A read the plan counted on failed: reconstruct instead.
                Err(EngineError::Io { .. } | EngineError::Unreadable { .. }) => {
                    state.read_failed = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Write each block's dirty span and P/Q (if there is parity to keep), all at once.
    /// With no parity to keep nothing was read, so a span may hold sectors the cache does
    /// not know (between dirty ones): only the runs it knows go out then.
    fn write_out(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        out: &WriteOut,
        pq: Option<&ScratchBufs>,
    ) -> Result<()> {
        let start = out.rows.start;
        let mut ops = Vec::with_capacity(out.spans.len() + 2);
        for (block, span) in out.spans.iter().enumerate() {
            let Some(span) = span else {
                continue;
            };
            let role = layout.data[block];
            if pq.is_some() {
                let data = &out.bufs[block][byte(start, span.start)..byte(start, span.end)];
                ops.push(MemberOp::write(role, stripe_start + span.start, data));
                continue;
            }
            let known = &out.known[block];
            let (mut i, end) = ((span.start - start) as usize, (span.end - start) as usize);
            while i < end {
                if !known[i] {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j < end && known[j] {
                    j += 1;
                }
                let data = &out.bufs[block][i * SECTOR as usize..j * SECTOR as usize];
                ops.push(MemberOp::write(role, stripe_start + start + i as u64, data));
                i = j;
            }
        }
        if let Some(pq) = pq {
            ops.push(MemberOp::write(layout.p, stripe_start + start, &pq[0]));
            if let Some(q_role) = layout.q {
                ops.push(MemberOp::write(q_role, stripe_start + start, &pq[1]));
            }
        }
        self.member_io(&mut ops);
        for op in ops {
            op.write_result()?;
        }
        Ok(())
    }

    /// Read-modify-write of the dirty spans: old data and old parity from the members.
    /// Sectors of a span the cache did not know become known (they are the old data).
    fn cache_rmw(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        out: &mut WriteOut,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let start = out.rows.start;
        let len = ((out.rows.end - start) * SECTOR) as usize;
        let mut p = scratch_take();
        let mut q = scratch_take();
        p.resize(len, 0);
        q.resize(if layout.q.is_some() { len } else { 0 }, 0);
        let spans: Vec<(usize, Range<u64>)> = out
            .spans
            .iter()
            .enumerate()
            .filter_map(|(block, span)| span.clone().map(|s| (block, s)))
            .collect();
        let mut olds: Vec<Vec<u8>> = spans
            .iter()
            .map(|(_, span)| vec![0u8; ((span.end - span.start) * SECTOR) as usize])
            .collect();
        // Old P/Q and the old data under every span, at once.
        let read = {
            let mut ops = Vec::with_capacity(spans.len() + 2);
            ops.push(MemberOp::read(layout.p, stripe_start + start, &mut p));
            if let Some(q_role) = layout.q {
                ops.push(MemberOp::read(q_role, stripe_start + start, &mut q));
            }
            for ((block, span), old) in spans.iter().zip(olds.iter_mut()) {
                ops.push(MemberOp::read(
                    layout.data[*block],
                    stripe_start + span.start,
                    old,
                ));
            }
            self.member_io(&mut ops);
            ops.into_iter().try_for_each(MemberOp::read_result)
        };
        if let Err(e) = read {
            scratch_put(p);
            scratch_put(q);
            return Err(e);
        }
        for ((block, span), mut delta) in spans.into_iter().zip(olds) {
            let (from, to) = (byte(start, span.start), byte(start, span.end));
            for (i, sector) in span.clone().enumerate() {
                let j = (sector - start) as usize;
                if !out.known[block][j] {
                    let old = &delta[i * SECTOR as usize..(i + 1) * SECTOR as usize];
                    out.bufs[block][j * SECTOR as usize..(j + 1) * SECTOR as usize]
                        .copy_from_slice(old);
                    out.known[block][j] = true;
                }
            }
            parity::xor_into(&mut delta, &out.bufs[block][from..to]); // old ^ new
            parity::xor_into(&mut p[from..to], &delta);
            if layout.q.is_some() {
                let coef = parity::gf::exp(layout.slot[block]);
                parity::mul_acc(&mut q[from..to], &delta, coef);
            }
        }
        Ok((p, q))
    }

    /// Reconstruct-write: read what the cache does not know of every data block.
    fn cache_rcw(
        &self,
        layout: &StripeLayout,
        stripe_start: u64,
        out: &mut WriteOut,
    ) -> Result<()> {
        let start = out.rows.start;
        // Every unknown run of every block, at once.
        let mut ops = Vec::new();
        let mut runs = Vec::new();
        for ((block, known), buf) in out.known.iter().enumerate().zip(out.bufs.iter_mut()) {
            let role = layout.data[block];
            let n = known.len();
            let mut rest: &mut [u8] = buf;
            let mut taken = 0;
            let mut i = 0;
            while i < n {
                if known[i] {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j < n && !known[j] {
                    j += 1;
                }
                let skip = (i - taken) * SECTOR as usize;
                let (run, tail) =
                    std::mem::take(&mut rest)[skip..].split_at_mut((j - i) * SECTOR as usize);
                rest = tail;
                taken = j;
                ops.push(MemberOp::read(role, stripe_start + start + i as u64, run));
                runs.push((block, i..j));
                i = j;
            }
        }
        self.member_io(&mut ops);
        let mut first_err = Ok(());
        for (op, (block, run)) in ops.into_iter().zip(runs) {
            // Known only once read: a failed read leaves its sectors to a reconstruction.
            match op.read_result() {
                Ok(()) => out.known[block][run].fill(true),
                Err(e) => {
                    if first_err.is_ok() {
                        first_err = Err(e);
                    }
                }
            }
        }
        first_err
    }
}

/// What a write-out's plan left to write.
enum Prepared {
    /// The dirty spans, then P/Q if there is parity to keep; `read_sectors` were read.
    Write {
        pq: Option<ScratchBufs>,
        read_sectors: u64,
    },
    /// Data is lost in the rows: the dirty sectors were written row by row.
    WrittenOverLost,
}

/// A write-out of some page rows of a stripe: what the cache knows of the chunk sectors
/// `rows` of every data block, in reused buffers (a stream writes out a stripe every few
/// hundred microseconds: fresh zeroed buffers made the allocator hand memory back to the
/// kernel and fault it in again).
struct WriteOut {
    /// Chunk sectors from the first to the last dirty sector of the page rows.
    rows: Range<u64>,
    /// Dirty span of each data block, chunk sectors (None: nothing dirty).
    spans: Vec<Option<Range<u64>>>,
    /// Data of each block over `rows` (zeros where not known).
    bufs: ScratchBufs,
    /// Per block and sector of `rows`: is the data known?
    known: Vec<Vec<bool>>,
    /// Known sectors that are not dirty (saved a member read).
    clean_known: u64,
    /// Sectors not known.
    unknown: u64,
}

impl WriteOut {
    /// What the cache holds of the dirty page rows `page_rows`; None if nothing is dirty.
    fn gather(cache: &StripeCache, held: &EntryState, page_rows: Range<usize>) -> Option<WriteOut> {
        let spans = dirty_spans(cache, held, page_rows);
        let start = spans.iter().flatten().map(|s| s.start).min()?;
        let end = spans.iter().flatten().map(|s| s.end).max()?;
        let row_sectors = end - start;
        let len = (row_sectors * SECTOR) as usize;
        let mut out = WriteOut {
            rows: start..end,
            spans,
            bufs: ScratchBufs(Vec::with_capacity(cache.kc)),
            known: vec![vec![false; row_sectors as usize]; cache.kc],
            clean_known: 0,
            unknown: 0,
        };
        for block in 0..cache.kc {
            let mut buf = scratch_take();
            buf.clear();
            buf.reserve(len);
            out.clean_known += copy_known(
                cache,
                held,
                block,
                start..end,
                &mut buf,
                &mut out.known[block],
            );
            out.bufs.push(buf);
        }
        out.unknown = out.known.iter().flatten().filter(|&&k| !k).count() as u64;
        Some(out)
    }

    /// P and Q of the data (every sector known), in scratch buffers.
    fn parity(&self, layout: &StripeLayout) -> ScratchBufs {
        debug_assert!(
            self.known.iter().flatten().all(|&k| k),
            "parity of a write-out with unknown data"
        );
        let len = ((self.rows.end - self.rows.start) * SECTOR) as usize;
        let (p, q) = compute_parity_scratch(layout, &self.bufs, len);
        ScratchBufs(vec![p, q])
    }

    /// Take what the cache did not know from a reconstruction of the rows.
    fn fill_unknown(&mut self, data: &[Vec<u8>]) {
        let s = SECTOR as usize;
        for (block, known) in self.known.iter_mut().enumerate() {
            for (i, k) in known.iter_mut().enumerate() {
                if !*k {
                    self.bufs[block][i * s..(i + 1) * s]
                        .copy_from_slice(&data[block][i * s..(i + 1) * s]);
                    *k = true;
                }
            }
        }
    }

    /// The dirty sectors alone, as pieces (for a write over lost data).
    fn dirty_pieces<'a>(&'a self, cache: &StripeCache, held: &EntryState) -> Vec<Piece<'a>> {
        let start = self.rows.start;
        let mut pieces = Vec::new();
        for (block, buf) in self.bufs.iter().enumerate() {
            let dirty = |sector: u64| {
                held.pages[block * cache.rows + (sector / PAGE_SECTORS) as usize]
                    .as_ref()
                    .is_some_and(|p| p.dirty & (1 << (sector % PAGE_SECTORS)) != 0)
            };
            let mut sector = start;
            while sector < self.rows.end {
                if !dirty(sector) {
                    sector += 1;
                    continue;
                }
                let mut end = sector;
                while end < self.rows.end && dirty(end) {
                    end += 1;
                }
                pieces.push(Piece {
                    block,
                    at: sector,
                    sectors: end - sector,
                    data: &buf[byte(start, sector)..byte(start, end)],
                });
                sector = end;
            }
        }
        pieces
    }

    /// Keep what is known now (read from the members) in the cache's pages: per page
    /// row, the known sectors the page does not hold yet, copied run by run (a row read
    /// whole is one 4 KiB copy, not eight of a sector). A page not allocated yet is
    /// kept only if the cache has room for it.
    fn keep_known(&self, cache: &StripeCache, held: &mut EntryState) {
        let start = self.rows.start;
        let s = SECTOR as usize;
        for block in 0..cache.kc {
            let known = &self.known[block];
            let mut sector = start;
            while sector < self.rows.end {
                let row = sector / PAGE_SECTORS;
                let row_end = ((row + 1) * PAGE_SECTORS).min(self.rows.end);
                let bits = (sector..row_end)
                    .filter(|&x| known[(x - start) as usize])
                    .fold(0u8, |b, x| b | 1 << (x % PAGE_SECTORS));
                sector = row_end;
                if bits == 0 {
                    continue;
                }
                let Some(page) = cache.kept_page(held, block * cache.rows + row as usize) else {
                    continue;
                };
                let mut new = bits & !page.valid;
                page.valid |= new;
                // Page sector `first` is buffer sector `row * 8 + first - start`.
                let buf_at = |first: u64| ((row * PAGE_SECTORS + first - start) as usize) * s;
                while new != 0 {
                    let first = u64::from(new.trailing_zeros());
                    let run = u64::from((new >> first).trailing_ones());
                    let (from, len) = (buf_at(first), run as usize * s);
                    page.data[first as usize * s..first as usize * s + len]
                        .copy_from_slice(&self.bufs[block][from..from + len]);
                    new &= !super::write::sector_bits(first, run);
                }
            }
        }
    }

    /// The page rows' data is on the members.
    fn set_clean(&self, cache: &StripeCache, held: &mut EntryState, page_rows: Range<usize>) {
        for block in 0..cache.kc {
            for row in page_rows.clone() {
                held.set_clean(block * cache.rows + row);
            }
        }
    }
}

/// Copy what the cache knows of data block `block` over chunk sectors `rows` into `buf`
/// (zeros where it knows nothing), marking `known`; returns the known sectors that are
/// not dirty.
fn copy_known(
    cache: &StripeCache,
    held: &EntryState,
    block: usize,
    rows: Range<u64>,
    buf: &mut Vec<u8>,
    known: &mut [bool],
) -> u64 {
    let mut clean_known = 0;
    let mut sector = rows.start;
    while sector < rows.end {
        let row_end = ((sector / PAGE_SECTORS + 1) * PAGE_SECTORS).min(rows.end);
        let i = (sector - rows.start) as usize;
        match &held.pages[block * cache.rows + (sector / PAGE_SECTORS) as usize] {
            None => {
                // Not cached: zeros until read.
                buf.resize(buf.len() + ((row_end - sector) * SECTOR) as usize, 0);
                sector = row_end;
            }
            Some(p)
                if sector.is_multiple_of(PAGE_SECTORS)
                    && row_end - sector == PAGE_SECTORS
                    && p.valid == 0xff =>
            {
                // A whole valid page at once.
                buf.extend_from_slice(&p.data);
                known[i..i + PAGE_SECTORS as usize].fill(true);
                clean_known += u64::from((!p.dirty).count_ones());
                sector = row_end;
            }
            Some(p) => {
                let bit = 1u8 << (sector % PAGE_SECTORS);
                if p.valid & bit != 0 {
                    let from = ((sector % PAGE_SECTORS) * SECTOR) as usize;
                    buf.extend_from_slice(&p.data[from..from + SECTOR as usize]);
                    known[i] = true;
                    if p.dirty & bit == 0 {
                        clean_known += 1;
                    }
                } else {
                    buf.resize(buf.len() + SECTOR as usize, 0);
                }
                sector += 1;
            }
        }
    }
    clean_known
}

/// Dirty span of each data block over page rows `page_rows`, in chunk sectors.
fn dirty_spans(
    cache: &StripeCache,
    held: &EntryState,
    page_rows: Range<usize>,
) -> Vec<Option<Range<u64>>> {
    (0..cache.kc)
        .map(|block| {
            let mut span: Option<Range<u64>> = None;
            for row in page_rows.clone() {
                let Some(p) = &held.pages[block * cache.rows + row] else {
                    continue;
                };
                if p.dirty == 0 {
                    continue;
                }
                let row_start = row as u64 * PAGE_SECTORS;
                let first = row_start + u64::from(p.dirty.trailing_zeros());
                let last = row_start + PAGE_SECTORS - u64::from(p.dirty.leading_zeros());
                span = Some(match span {
                    None => first..last,
                    Some(s) => s.start.min(first)..s.end.max(last),
                });
            }
            span
        })
        .collect()
}

/// Runs of adjacent page rows holding dirty data.
fn dirty_page_runs(cache: &StripeCache, held: &EntryState) -> SmallVec<[Range<usize>; 4]> {
    let used = held.dirty_rows();
    let dirty_row = |r: usize| {
        (0..cache.kc).any(|block| {
            held.pages[block * cache.rows + r]
                .as_ref()
                .is_some_and(|p| p.dirty != 0)
        })
    };
    let mut runs = SmallVec::new();
    let mut row = used.start;
    while row < used.end {
        if !dirty_row(row) {
            row += 1;
            continue;
        }
        let mut end = row;
        while end < used.end && dirty_row(end) {
            end += 1;
        }
        runs.push(row..end);
        row = end;
    }
    runs
}

/// Array byte ranges `(offset, length)` of an entry's dirty pages, coalesced.
fn dirty_byte_ranges(
    chunk: u64,
    cache: &StripeCache,
    entry: &Entry,
    held: &EntryState,
) -> Vec<(u64, u64)> {
    let first = entry.stripe * cache.kc as u64 * chunk;
    let mut lost: Vec<(u64, u64)> = Vec::new();
    for block in 0..cache.kc {
        for row in held.dirty_rows() {
            if held.pages[block * cache.rows + row]
                .as_ref()
                .is_some_and(|p| p.dirty != 0)
            {
                let off = (first + block as u64 * chunk + row as u64 * PAGE_SECTORS) * SECTOR;
                match lost.last_mut() {
                    Some((o, l)) if *o + *l == off => *l += PAGE as u64,
                    _ => lost.push((off, PAGE as u64)),
                }
            }
        }
    }
    lost
}
