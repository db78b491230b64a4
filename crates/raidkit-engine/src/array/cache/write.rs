//! Client writes through the stripe cache: held, merged, or sent straight out; the
//! write-back thread and making room.

use crate::array::cache::Count;
use crate::array::cache::Entry;
use crate::array::cache::EntryState;
use crate::array::cache::StripeCache;
use crate::array::cache::StripeCacheStats;
use crate::array::cache::Victim;
use crate::array::cache::PAGE_SECTORS;
use crate::array::parity_write::Piece;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use raidkit_layout::SECTOR;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How long the write-back thread sleeps at most while nothing waits to be written.
const IDLE_WAKE: std::time::Duration = std::time::Duration::from_secs(1);

impl Array {
    /// Bound the stripe cache's memory (`max_bytes`) and/or force a fixed size in entries
    /// (one entry = one 4 KiB row: a page per data member). `None, None` = automatic,
    /// bounded only by memory. Levels without parity have no stripe cache: Ok, no effect.
    pub fn configure_stripe_cache(
        &self,
        max_bytes: Option<u64>,
        fixed_entries: Option<usize>,
    ) -> Result<()> {
        match &self.cache {
            Some(cache) => cache
                .configure(max_bytes, fixed_entries)
                .map_err(EngineError::Invalid),
            None => Ok(()),
        }
    }

    /// How long partial stripes may wait for the rest of their data with write-back
    /// (default [`crate::stripe_cache::HOLD`]); flushes never wait for it.
    pub fn set_stripe_cache_hold(&self, hold: std::time::Duration) {
        if let Some(cache) = &self.cache {
            cache.set_hold(hold);
        }
    }

    /// Tests: force whether small writes to stripes the cache holds nothing of bypass it
    /// (`Some(true)`: all but one in 128; `Some(false)`: none), or let the cache decide from
    /// how useful it has been (`None`, the default).
    #[doc(hidden)]
    pub fn force_stripe_cache_bypass(&self, on: Option<bool>) {
        if let Some(cache) = &self.cache {
            cache.force_bypass(on);
        }
    }

    /// Size, memory and hit counters of the stripe cache (None without one).
    pub fn stripe_cache_stats(&self) -> Option<StripeCacheStats> {
        self.cache.as_ref().map(StripeCache::stats)
    }

    /// Let partial-stripe writes wait briefly (bounded by [`crate::stripe_cache::HOLD`] and
    /// the cache size) for the rest of their stripe, so adjacent writes merge into
    /// full-stripe writes. Starts a thread that writes out what waited long enough; it ends
    /// when the array is dropped. Held writes are written by [`Array::flush`],
    /// [`Array::mark_clean`] and [`Array::stop`]; until then they are like a disk's
    /// volatile write cache.
    pub fn start_writeback(self: &Arc<Self>) {
        let Some(cache) = &self.cache else {
            return;
        };
        if !self.writable || cache.writeback.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        let wake = Arc::clone(&cache.wake);
        let spawned = std::thread::Builder::new()
            .name("raidkit-writeback".into())
            .spawn(move || loop {
                std::thread::sleep(crate::stripe_cache::HOLD / 2);
                wake.looking();
                let Some(a) = weak.upgrade() else {
                    break;
                };
                a.cache_background();
                let busy = a.cache.as_ref().is_some_and(|c| c.has_dirty() || c.over());
                // The array is not held while the thread sleeps: dropping it ends the
                // thread at its next wake-up (at most a second later).
                drop(a);
                if !busy {
                    wake.idle(IDLE_WAKE);
                }
            });
        if spawned.is_err() {
            // No thread: keep writing through.
            cache.writeback.store(false, Ordering::Release);
        }
    }

    pub(crate) fn cache_background(&self) {
        let Some(cache) = &self.cache else {
            return;
        };
        cache.tune();
        if !cache.has_dirty() && !cache.over() {
            return;
        }
        let _gate = self.write_gate();
        while let Some(entry) = cache.aged(usize::MAX) {
            let _ = self.cache_drain_entry(cache, &entry);
        }
        self.cache_make_room(cache, 0);
    }

    /// Write out every held write (callers hold the gate).
    pub(crate) fn cache_drain_all(&self, cache: &StripeCache) {
        let all = cache.all_dirty();
        if all.is_empty() {
            return;
        }
        for entry in &all {
            let _ = self.cache_drain_entry(cache, entry);
        }
        // The capacity may have been lowered meanwhile.
        self.cache_make_room(cache, 0);
    }

    pub(crate) fn cache_drain_entry(&self, cache: &StripeCache, entry: &Arc<Entry>) -> Result<()> {
        let mut held = lock(&entry.state);
        if held.dead {
            return Ok(());
        }
        if !held.is_dirty() {
            cache.mark_clean(entry);
            return Ok(());
        }
        let streamed = self.cache_drain(cache, entry, &mut held)?;
        self.drop_streamed(cache, entry, &mut held, streamed);
        Ok(())
    }

    /// After a write-out: a stripe written whole by clients and sent out merged is what a
    /// sequential stream leaves behind. Unless written pages are being found in the cache
    /// again lately, nothing will ask for it, and keeping it until eviction only spreads
    /// the stream over more memory (a 1 MiB stream ran ~20% slower with 32768 entries
    /// than with 1024 before this). Stripes the cache filled from the members (random
    /// writes over a working set) stay. Only where nothing more is written under the
    /// entry: a new entry for the stripe may appear once this one is removed.
    pub(crate) fn drop_streamed(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
        streamed: bool,
    ) {
        if streamed && !cache.rewrites_seen() {
            cache.remove(entry, held);
        }
    }

    /// Make room for `room` more pages within the capacity (no entry lock held): evict
    /// clean stripes, or write out and evict dirty ones when only those are left.
    pub(crate) fn cache_make_room(&self, cache: &StripeCache, room: usize) {
        while cache.short_of(room) {
            match cache.make_room(room) {
                Some(Victim::Dirty(entry)) => {
                    let mut held = lock(&entry.state);
                    if !held.dead {
                        if held.is_dirty() {
                            if held.dirty_pages >= cache.rows {
                                cache.early_write_out();
                            }
                            let _ = self.cache_drain_to_remove(cache, &entry, &mut held);
                        }
                        cache.remove(&entry, &mut held);
                    }
                }
                None => break,
            }
        }
    }

    /// A stripe write through the cache: whole stripes go straight out (the cache's pages
    /// of the stripe are dropped); partial ones are copied in (where the cache has room
    /// for their pages; else they go around it, to the members) and written out once the
    /// stripe's data is complete over the rows written (no member reads needed), once
    /// they have waited long enough, or at once without write-back.
    pub(crate) fn cache_write(
        &self,
        cache: &StripeCache,
        stripe: u64,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let chunk = self.geo.chunk_sectors;
        let full =
            pieces.len() == cache.kc && pieces.iter().all(|p| p.at == 0 && p.sectors == chunk);
        // Whole stripes, writes to arrays with bad blocks or lost data (bbl.rs decides
        // what each row may be written from), and (while the cache is of little use)
        // writes to stripes it holds nothing of, go straight to the members; what the
        // cache held of the stripe is written out first.
        let damaged = self.any_lost()
            || self
                .slots()
                .iter()
                .flatten()
                .any(|m| m.has_bad.load(Ordering::Relaxed));
        if !full {
            cache.observe(stripe, pieces);
        }
        let bypass = !full && !damaged && cache.bypass();
        if bypass {
            // The common case of scattered small writes, without creating an entry: with
            // the stripe's IO lock held, a stripe that has no entry cannot gain cached
            // pages read from the members (those are read under this lock) until the
            // write is done, and data that clients write into a new entry meanwhile is
            // written out later, under this lock, over this write.
            let g = self.locks.lock(stripe);
            if !cache.contains(stripe) {
                let r = self.write_stripe_locked(stripe, pieces);
                drop(g);
                self.cache_housekeeping(cache);
                return r;
            }
        }
        if !full && !damaged {
            // Room for the pages written and a row read for their write-out, made before
            // the entry is locked (making room may write out and lock other stripes).
            let touched: usize = pieces.iter().map(|p| cache.piece_pages(p).len()).sum();
            let room = touched + cache.kc;
            if room <= cache.capacity_pages() {
                self.cache_make_room(cache, room);
            }
        }
        let mut made_room = false;
        loop {
            let entry = cache.get_or_create(stripe);
            let mut held = lock(&entry.state);
            if held.dead {
                continue;
            }
            // A bypassing write goes straight out when the cache has no page where it
            // writes: pages of other blocks or rows stay right (parity is per row, and
            // held data is written out under the stripe's IO lock, reading the members
            // then). Unless written pages have been found in the cache again lately, the
            // stripe's clean pages are dropped with it (while the cache is of little use
            // they would only draw writes into it). A write onto a cached page is reuse:
            // it goes through the cache, which is how the cache learns to stop bypassing.
            if bypass && !touches_cached(cache, &held, pieces) {
                let r = self.write_stripe_direct(stripe, pieces);
                if !held.is_dirty() && !cache.reuse_likely() {
                    cache.remove(&entry, &mut held);
                }
                drop(held);
                self.cache_housekeeping(cache);
                return r;
            }
            // The pages the write allocates are counted first, within the capacity: if
            // there is no room, room is made (once, with the entry unlocked) and the write
            // starts again; if there is none even so, it goes around the cache.
            let need = cache.new_pages(&held, pieces);
            let fits = !(full || damaged) && cache.reserve(need);
            if !fits {
                if !(full || damaged || made_room) && need <= cache.capacity_pages() {
                    drop(held);
                    self.cache_make_room(cache, need);
                    made_room = true;
                    continue;
                }
                let r = self.write_around_cache(cache, &entry, &mut held, stripe, pieces);
                drop(held);
                self.cache_housekeeping(cache);
                return r;
            }
            let mut reserved = need;
            let was_dirty = held.is_dirty();
            for pc in pieces {
                let mut sec = pc.at;
                let end = pc.at + pc.sectors;
                while sec < end {
                    let row = (sec / PAGE_SECTORS) as usize;
                    let in_page = sec % PAGE_SECTORS;
                    let m = (PAGE_SECTORS - in_page).min(end - sec);
                    let idx = pc.block * cache.rows + row;
                    let page = cache.page(&mut held, idx, &mut reserved);
                    if page.valid != 0 {
                        cache.count(Count::Rewritten, 1);
                    }
                    let first_write = !page.written;
                    page.written = true;
                    cache.count(Count::Written, 1);
                    let from = ((sec - pc.at) * SECTOR) as usize;
                    let to = (in_page * SECTOR) as usize;
                    let len = (m * SECTOR) as usize;
                    page.data[to..to + len].copy_from_slice(&pc.data[from..from + len]);
                    let bits = sector_bits(in_page, m);
                    page.valid |= bits;
                    held.set_dirty(idx, row, bits);
                    if first_write {
                        held.written_pages += 1;
                    }
                    sec += m;
                }
            }
            cache.unreserve(reserved);
            let ends_on_chunk = pieces.iter().any(|p| p.at + p.sectors == chunk);
            let r = if !cache.should_hold(was_dirty, ends_on_chunk) || cache_complete(cache, &held)
            {
                // Written out now, under the entry's lock: nobody can see the entry dirty
                // in between, so it is not announced as dirty (no shared count, dirty
                // queue or write-back wake-up per write). A write-out leaves the entry
                // clean, also when it fails (the range is then recorded as lost).
                self.cache_drain(cache, &entry, &mut held)
                    .map(|streamed| self.drop_streamed(cache, &entry, &mut held, streamed))
            } else {
                cache.mark_dirty(&entry);
                Ok(())
            };
            drop(held);
            self.cache_housekeeping(cache);
            return r;
        }
    }

    /// A stripe write straight to the members (entry lock held): what the cache held of
    /// the stripe is written out first and dropped.
    fn write_around_cache(
        &self,
        cache: &StripeCache,
        entry: &Entry,
        held: &mut EntryState,
        stripe: u64,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        if held.is_dirty() {
            self.cache_drain_to_remove(cache, entry, held)?;
        }
        cache.clear(entry, held);
        let r = self.write_stripe_direct(stripe, pieces);
        cache.remove(entry, held);
        r
    }

    /// Does the stripe cache hold written data of `stripe` that is not on the members yet
    /// (see [`StripeCache::holds_unwritten`])?
    pub(crate) fn stripe_unwritten(&self, stripe: u64) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|c| c.holds_unwritten(stripe))
    }

    /// After a write: evict if the capacity was lowered, and help write out partial
    /// stripes that waited long enough.
    pub(crate) fn cache_housekeeping(&self, cache: &StripeCache) {
        self.cache_make_room(cache, 0);
        if cache.help_due() {
            for _ in 0..2 {
                let Some(entry) = cache.aged(4) else {
                    break;
                };
                let _ = self.cache_drain_entry(cache, &entry);
            }
        }
        cache.tune();
    }
}

/// True if the cache holds a page (of any validity) that `pieces` write into.
pub(crate) fn touches_cached(cache: &StripeCache, held: &EntryState, pieces: &[Piece<'_>]) -> bool {
    if held.alloc == 0 {
        return false;
    }
    pieces
        .iter()
        .flat_map(|p| cache.piece_pages(p))
        .any(|i| held.pages.get(i).is_some_and(Option::is_some))
}

/// Sector bits `[first, first + n)` of a page.
pub(crate) fn sector_bits(first: u64, n: u64) -> u8 {
    (((1u16 << n) - 1) << first) as u8
}

/// Does the cache hold data block `k` over chunk sectors `[a, a + n)`: (all, any)?
pub(crate) fn cached_cover(
    cache: &StripeCache,
    held: &EntryState,
    k: usize,
    a: u64,
    n: u64,
) -> (bool, bool) {
    let (mut all, mut any) = (true, false);
    let mut sec = a;
    while sec < a + n {
        let in_page = sec % PAGE_SECTORS;
        let m = (PAGE_SECTORS - in_page).min(a + n - sec);
        let bits = sector_bits(in_page, m);
        let v = held
            .pages
            .get(k * cache.rows + (sec / PAGE_SECTORS) as usize)
            .and_then(Option::as_ref)
            .map_or(0, |p| p.valid & bits);
        all &= v == bits;
        any |= v != 0;
        sec += m;
    }
    (all, any)
}

/// Copy the valid cached sectors of data block `k` from chunk sector `a` over `buf`.
pub(crate) fn copy_from_cache(
    cache: &StripeCache,
    held: &EntryState,
    k: usize,
    a: u64,
    buf: &mut [u8],
) {
    let n = buf.len() as u64 / SECTOR;
    for sec in a..a + n {
        if let Some(Some(p)) = held
            .pages
            .get(k * cache.rows + (sec / PAGE_SECTORS) as usize)
        {
            if p.valid & (1 << (sec % PAGE_SECTORS)) != 0 {
                let from = ((sec % PAGE_SECTORS) * SECTOR) as usize;
                let to = ((sec - a) * SECTOR) as usize;
                buf[to..to + 512].copy_from_slice(&p.data[from..from + 512]);
            }
        }
    }
}

/// Is every sector of every data block known over the rows holding dirty data (so the
/// stripe can be written without reading the members)?
pub(crate) fn cache_complete(cache: &StripeCache, held: &EntryState) -> bool {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for k in 0..cache.kc {
        for row in held.dirty_rows() {
            if held.pages[k * cache.rows + row]
                .as_ref()
                .is_some_and(|p| p.dirty != 0)
            {
                lo = lo.min(row);
                hi = hi.max(row + 1);
            }
        }
    }
    if lo >= hi {
        return false;
    }
    (0..cache.kc).all(|k| {
        (lo..hi).all(|row| {
            held.pages[k * cache.rows + row]
                .as_ref()
                .is_some_and(|p| p.valid == 0xff)
        })
    })
}

#[cfg(test)]
mod tests {
    /// A small write never waits for the reuse sampler: with the sampler held by another
    /// thread (as a writer preempted inside it would), writes to sampled rows complete.
    #[test]
    fn a_write_does_not_wait_for_the_reuse_sampler() {
        let (_dir, arr) = raid5("rk-sampler", 4, 4 << 20, None);
        let cache = arr.cache.as_ref().unwrap();
        let held = crate::locks::lock(&cache.sampler);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                // 4 KiB writes to the first 256 pages (some rows are sampled), for longer
                // than a tune period (the tuner reads the sampler too).
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(100) {
                    for page in 0..256u64 {
                        arr.write(page * 4096, &[page as u8; 4096]).unwrap();
                    }
                }
                tx.send(()).unwrap();
            });
            let done = rx.recv_timeout(Duration::from_secs(10));
            drop(held);
            assert!(done.is_ok(), "writes waited for the sampler");
        });
    }

    use crate::array::test_arrays::raid5;
    use raidkit_testkit::tempdir::TempDir;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A 4 MiB RAID5 of 3 member files in a new directory, its write-back thread running.
    fn raid5_with_writeback(name: &str) -> (TempDir, Arc<crate::array::Array>) {
        let (dir, arr) = raid5(name, 3, 4 << 20, None);
        let arr = Arc::new(arr);
        arr.start_writeback();
        (dir, arr)
    }

    /// An idle array's write-back thread sleeps (it used to wake every 2 ms); a held
    /// write wakes it and is written out within a bounded time.
    #[test]
    fn the_writeback_thread_sleeps_while_idle_and_wakes_for_a_held_write() {
        let (_dir, arr) = raid5_with_writeback("rk-wb");
        let cache = arr.cache.as_ref().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = cache.wake.passes.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(400));
        let idle_passes = cache.wake.passes.load(Ordering::Relaxed) - before;
        assert!(idle_passes <= 2, "{idle_passes} passes in 400 ms idle");
        // A partial stripe write ending on a chunk boundary is held, then written out.
        arr.force_stripe_cache_bypass(Some(false));
        let chunk = arr.geo.chunk_sectors * 512;
        arr.write(chunk - 4096, &[7u8; 4096]).unwrap();
        let t0 = Instant::now();
        while cache.has_dirty() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "a held write was not written out"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
    }

    /// A small write through the cache that is written out at once (not held) is never
    /// announced as dirty: the write-back thread is not woken for it and no shard's dirty
    /// queue keeps its stripe. (Each such write used to wake the thread and queue its
    /// stripe.)
    #[test]
    fn a_write_written_out_at_once_wakes_nothing_and_queues_nothing() {
        let (_dir, arr) = raid5_with_writeback("rk-wb-now");
        arr.force_stripe_cache_bypass(Some(false));
        let cache = arr.cache.as_ref().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = cache.wake.passes.load(Ordering::Relaxed);
        // 4 KiB writes 8 KiB apart: none ends on a chunk boundary, none is held.
        for i in 0..100u64 {
            arr.write(i * 8192, &[i as u8 + 1; 4096]).unwrap();
            std::thread::sleep(Duration::from_millis(4));
        }
        let passes = cache.wake.passes.load(Ordering::Relaxed) - before;
        assert!(
            passes <= 2,
            "{passes} write-back passes for 100 written-out writes"
        );
        let queued: usize = cache
            .shards
            .iter()
            .map(|s| super::lock(s).dirty.len())
            .sum();
        assert_eq!(queued, 0);
        assert!(!cache.has_dirty());
        assert!(cache.counted(super::Count::Drains) >= 100);
        let mut buf = [0u8; 8192];
        for i in 0..100u64 {
            arr.read(i * 8192, &mut buf).unwrap();
            assert!(buf[..4096].iter().all(|&b| b == i as u8 + 1), "write {i}");
            assert!(buf[4096..].iter().all(|&b| b == 0), "after write {i}");
        }
    }

    /// While a pass holds a stripe's IO lock, a client write into that stripe can still be
    /// held by the cache (and acknowledged): the stripe then says it holds unwritten data,
    /// until the write is written out.
    #[test]
    fn a_write_held_under_a_passes_stripe_lock_is_unwritten_until_written_out() {
        let (_dir, arr) = raid5_with_writeback("rk-wb-unwritten");
        arr.force_stripe_cache_bypass(Some(false));
        arr.set_stripe_cache_hold(Duration::from_secs(60));
        let chunk = arr.geo.chunk_sectors * 512;
        assert!(!arr.stripe_unwritten(0));
        let pass_lock = arr.locks.lock(0);
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = {
            let arr = arr.clone();
            std::thread::spawn(move || tx.send(arr.write(chunk - 4096, &[7u8; 4096])))
        };
        let done = rx.recv_timeout(Duration::from_secs(10));
        assert!(matches!(done, Ok(Ok(()))), "the held write is acknowledged");
        assert!(arr.stripe_unwritten(0), "held, not on the members");
        assert!(!arr.stripe_unwritten(1));
        drop(pass_lock);
        writer.join().unwrap().unwrap();
        arr.flush().unwrap();
        assert!(!arr.stripe_unwritten(0), "written out");
    }
}
