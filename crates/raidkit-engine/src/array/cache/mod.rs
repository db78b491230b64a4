//! The stripe cache of RAID4/5/6: data pages of recently written (and read-for-parity)
//! stripes, so that partial-stripe writes need fewer member reads, and adjacent partial
//! writes of a stripe merge into one parity computation (a full-stripe write once the
//! stripe is complete), the way md's stripe_heads do.
//!
//! Unit: an *entry* is one 4 KiB row of a stripe (one page per data member, like md's
//! `stripe_cache_size` counts stripe_heads). Parity is never cached: it is always read
//! from the members or computed, so a cached page can never hide a member error.
//!
//! Memory: at most `capacity × 4 KiB × data members`, at every moment: a page is counted
//! ([`StripeCache::reserve`]) before it is allocated, and only while that keeps the count
//! within the capacity. A client write makes room first (evicting, or writing out a
//! dirty stripe) and, if it still finds none, goes to the members around the cache; data
//! read for a write-out is kept only where there is room. (The count may exceed a
//! capacity that was just lowered, until the next eviction. It counts the pages entries
//! hold or are about to take; the page pool's free pages, kept for reuse, are not
//! counted.) The capacity sizes itself
//! ([`StripeCache::capacity`]): it starts at a few stripes; for small writes it is what
//! the miss-ratio curve measured on the writes says pays ([`reuse`]: grow over a reused
//! working set that memory can hold, bypass one it cannot); for streams it grows when
//! partial stripes must be written out early for lack of room and shrinks when that stops
//! while the cache is full; it never exceeds a quarter of `MemAvailable` nor the admin's
//! bound. A fixed size can be forced instead.
//! A stripe that clients wrote whole and that went out merged is dropped at once unless
//! written pages are being found in the cache again: a sequential stream leaves nothing
//! worth keeping, and its clean stripes would only spread it over more memory.
//!
//! Locking: stripes live in sharded maps; each stripe's entry has its own mutex, taken
//! before the array's per-stripe IO lock. Nothing global is locked per request.

pub(crate) mod drain;
mod known_row;
mod pages;
mod reuse;
mod tune;
pub(crate) mod write;

use crate::error::EngineError;
use crate::iostats::PerCpu;
use crate::locks::lock;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tune::TuneState;

/// Bytes per cached page.
pub(crate) const PAGE: usize = 4096;
/// Sectors per cached page.
pub(crate) const PAGE_SECTORS: u64 = 8;
const SHARDS: usize = 64;
/// How long a partial stripe may wait by default for the rest of its data before it is
/// written.
pub const HOLD: Duration = Duration::from_millis(4);
/// Smallest automatic capacity, entries.
const MIN_ENTRIES: usize = 512;

/// What the cache counts (summed over the CPUs' copies by [`StripeCache::counted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    /// Pages found in the cache instead of read from members.
    Hits,
    /// Pages read from members.
    Misses,
    /// Merges: write-outs whose rows clients completed between them (no member reads, no
    /// cached clean data).
    Merges,
    /// Write-outs of runs of dirty rows.
    Drains,
    /// Pages written out without a member read thanks to the cache.
    Saved,
    /// Pages written by clients.
    Written,
    /// Pages written by clients that were already in the cache (re-references).
    Rewritten,
}
const COUNTS: usize = 7;

/// A value on two cache lines of its own (the adjacent-line prefetcher pairs them).
#[repr(align(128))]
struct OwnLine<T>(T);

/// One cached page: a row of one data block.
pub(crate) struct Page {
    /// The bytes (valid where `valid` says so; a recycled page keeps old bytes elsewhere).
    pub data: pages::PageBuf,
    /// Sectors (bit i = sector i of the page) holding the current contents.
    pub valid: u8,
    /// Sectors newer than the member (subset of `valid`).
    pub dirty: u8,
    /// Written by a client since it was cached (not only read from the members).
    pub written: bool,
}

/// The mutable part of an entry, under its mutex.
pub(crate) struct EntryState {
    /// `pages[k * rows + row]`.
    pub pages: Vec<Option<Page>>,
    /// Removed from the cache: whoever holds an `Arc` must look the stripe up again.
    pub dead: bool,
    /// Pages allocated.
    pub alloc: usize,
    /// Pages with dirty sectors.
    pub dirty_pages: usize,
    /// Pages written by clients since the entry was made (see [`Page::written`]).
    pub written_pages: usize,
    /// Rows `[lo, hi)` holding every dirty page (a write-out looks only there: a stripe
    /// that keeps what it read for later writes may hold pages over the whole chunk).
    dirty_lo: usize,
    dirty_hi: usize,
}

impl EntryState {
    /// Rows that may hold dirty pages.
    pub fn dirty_rows(&self) -> std::ops::Range<usize> {
        self.dirty_lo..self.dirty_hi.max(self.dirty_lo)
    }

    /// True if some page holds data not yet on the members.
    pub fn is_dirty(&self) -> bool {
        self.dirty_pages > 0
    }

    /// Mark sectors `bits` of page `idx` (allocated, in page row `row`) dirty.
    pub fn set_dirty(&mut self, idx: usize, row: usize, bits: u8) {
        if bits != 0 {
            self.dirty_lo = self.dirty_lo.min(row);
            self.dirty_hi = self.dirty_hi.max(row + 1);
        }
        if let Some(p) = &mut self.pages[idx] {
            debug_assert!(
                p.valid & bits == bits,
                "page {idx}: sectors {bits:#010b} dirty but not valid ({:#010b})",
                p.valid
            );
            if p.dirty == 0 && bits != 0 {
                self.dirty_pages += 1;
            }
            p.dirty |= bits;
        }
        debug_assert!(
            self.dirty_pages <= self.alloc,
            "{} dirty pages of {} allocated",
            self.dirty_pages,
            self.alloc
        );
    }

    /// The data of page `idx` is on the members.
    pub fn set_clean(&mut self, idx: usize) {
        if let Some(p) = &mut self.pages[idx] {
            if p.dirty != 0 {
                debug_assert!(self.dirty_pages > 0, "page {idx} dirty, none counted");
                self.dirty_pages -= 1;
            }
            p.dirty = 0;
        }
        if self.dirty_pages == 0 {
            self.dirty_lo = usize::MAX;
            self.dirty_hi = 0;
        }
    }
}

/// A cached stripe.
pub(crate) struct Entry {
    /// Stripe number.
    pub stripe: u64,
    /// Pages and state.
    pub state: Mutex<EntryState>,
    last_used: AtomicU64,
    /// Milliseconds since the cache's epoch + 1 when the entry became dirty; 0 = clean.
    dirty_since: AtomicU64,
}

/// A shard of the map, on cache lines of its own: every write locks the shard of its
/// stripe, and shards packed 88 bytes apart shared lines with their neighbours, which
/// the other core's writers were locking.
#[repr(align(128))]
struct Shard {
    map: HashMap<u64, Arc<Entry>>,
    /// Stripes in the order they became dirty (may hold stale ids).
    dirty: VecDeque<u64>,
}

/// Counters and sizes for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StripeCacheStats {
    /// `auto` or `fixed`.
    pub mode: String,
    /// Current capacity, entries (one entry = one 4 KiB row: a page per data member).
    pub size_entries: u64,
    /// Entries in use.
    pub used_entries: u64,
    /// Upper bound of the automatic size, entries (admin bound and memory).
    pub max_entries: u64,
    /// Bytes of page memory in use.
    pub memory_bytes: u64,
    /// The most bytes of page memory in use or reserved by a writer about to use it at
    /// once since the array was opened (never above the bound, unless the bound was
    /// lowered below what was in use).
    pub peak_memory_bytes: u64,
    /// Admin bound, bytes (None: only the memory-derived bound).
    pub max_bytes: Option<u64>,
    /// Pages found in the cache instead of read from members.
    pub hits: u64,
    /// Pages that had to be read from members.
    pub misses: u64,
    /// Stripes holding data not yet written to the members.
    pub dirty_stripes: u64,
    /// Partial stripes merged into a full-stripe write before going out.
    pub full_stripe_merges: u64,
    /// Small writes to stripes the cache holds nothing of go straight to the members (the
    /// cache would not pay for them).
    pub bypassing: bool,
    /// Times the small-write decision switched between bypassing and using the cache.
    pub bypass_switches: u64,
}

/// What [`StripeCache::victim`] found to make room.
pub(crate) enum Victim {
    /// A dirty entry that must be written first (then evict it).
    Dirty(Arc<Entry>),
}

/// The cache.
pub(crate) struct StripeCache {
    /// Data blocks per stripe.
    pub kc: usize,
    /// Parity blocks per stripe.
    parity_blocks: usize,
    /// Pages per chunk.
    pub rows: usize,
    shards: Box<[Mutex<Shard>]>,
    /// Pages counted: allocated, or reserved by a writer about to allocate them.
    pages: AtomicUsize,
    /// The most pages counted at once (see [`StripeCacheStats::peak_memory_bytes`]).
    peak_pages: AtomicUsize,
    /// Where pages come from and go back to.
    pool: pages::PagePool,
    target: AtomicUsize,
    fixed: AtomicUsize,
    admin_max: AtomicU64,
    mem_cap: AtomicUsize,
    min_entries: usize,
    /// Delay partial stripes (a drainer thread is running).
    pub writeback: AtomicBool,
    /// The recency clock, ticked by every lookup from both cores: on a cache line of its
    /// own, so that its ticks do not take the line of the fields every write reads.
    clock: OwnLine<AtomicU64>,
    hold_ms: AtomicU64,
    epoch: Instant,
    evict_cursor: AtomicUsize,
    dirty_cursor: AtomicUsize,
    /// What the cache counts ([`Count`]), one copy per CPU: every small write adds to
    /// several of them, and one shared copy was a cache line both cores' writers bounced.
    counts: PerCpu<[AtomicU64; COUNTS]>,
    /// Recent write-outs merged often enough that holding partial stripes pays.
    merging: AtomicBool,
    /// Small writes would gain too little from the cache: most go straight to the members.
    bypass: AtomicBool,
    /// Small writes reuse their rows enough that filling whole rows pays.
    fill: AtomicBool,
    /// See [`StripeCacheStats::bypass_switches`].
    bypass_switches: AtomicU64,
    /// Reuse times of the small writes' page rows.
    sampler: Mutex<reuse::Sampler>,
    /// Tests: 0 = decided by `tune`, 1 = always (but one write in 128), 2 = never.
    bypass_forced: std::sync::atomic::AtomicU8,
    rereferenced: AtomicBool,
    dirty_stripes: AtomicUsize,
    grow_signal: AtomicUsize,
    /// When `tune` last ran and the counters it saw then (one tuner at a time).
    last_tune: Mutex<TuneState>,
    /// The coarse clock's milliseconds (`supervisor::coarse_ms`) before which `tune` has
    /// nothing to do (checked without its lock).
    tune_at: AtomicU64,
    /// `now_ms` before which writers need not help write out aged stripes.
    help_at: AtomicU64,
    /// A failure while writing out held data, reported by the next flush.
    pending: Mutex<Option<EngineError>>,
    /// Wakes the write-back thread when a stripe starts waiting.
    pub(crate) wake: Arc<Wake>,
}

/// How the write-back thread sleeps while nothing waits: on a condition variable that the
/// first held write wakes, not by polling (it used to wake every `HOLD / 2`, 500 times a
/// second, on an idle array).
#[derive(Default)]
pub(crate) struct Wake {
    /// A stripe became dirty since the thread last looked.
    dirtied: AtomicBool,
    /// Passes the thread made (for tests).
    pub(crate) passes: AtomicU64,
    sleeping: AtomicBool,
    lock: Mutex<()>,
    cv: std::sync::Condvar,
}

impl Wake {
    /// A stripe became dirty: wake the thread if it sleeps. With the fences, either the
    /// thread sees `dirtied` before it sleeps, or this sees it sleeping (and the notify,
    /// under the lock it waits with, reaches it).
    fn dirtied(&self) {
        self.dirtied.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            let _g = lock(&self.lock);
            self.cv.notify_one();
        }
    }

    /// The thread starts a pass: what is dirtied from now on wakes it.
    pub(crate) fn looking(&self) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.dirtied.store(false, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The thread found nothing to do: sleep until a stripe is dirtied (since
    /// [`Wake::looking`]) or for `at_most`.
    pub(crate) fn idle(&self, at_most: Duration) {
        let g = lock(&self.lock);
        self.sleeping.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.dirtied.load(Ordering::Relaxed) {
            drop(crate::locks::wait_timeout(&self.cv, g, at_most));
        }
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

impl StripeCache {
    /// A cache for stripes of `kc` data blocks and `parity_blocks` parity blocks of
    /// `chunk_sectors` sectors (a multiple of 8).
    pub fn new(kc: usize, parity_blocks: usize, chunk_sectors: u64) -> StripeCache {
        let rows = (chunk_sectors / PAGE_SECTORS) as usize;
        let min_entries = MIN_ENTRIES.max(4 * rows);
        let c = StripeCache {
            kc,
            parity_blocks,
            rows,
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        dirty: VecDeque::new(),
                    })
                })
                .collect(),
            pages: AtomicUsize::new(0),
            peak_pages: AtomicUsize::new(0),
            pool: pages::PagePool::default(),
            target: AtomicUsize::new(min_entries),
            fixed: AtomicUsize::new(0),
            admin_max: AtomicU64::new(u64::MAX),
            mem_cap: AtomicUsize::new(usize::MAX),
            min_entries,
            writeback: AtomicBool::new(false),
            clock: OwnLine(AtomicU64::new(1)),
            hold_ms: AtomicU64::new(HOLD.as_millis() as u64),
            epoch: Instant::now(),
            evict_cursor: AtomicUsize::new(0),
            dirty_cursor: AtomicUsize::new(0),
            counts: PerCpu::default(),
            merging: AtomicBool::new(false),
            bypass: AtomicBool::new(false),
            fill: AtomicBool::new(false),
            bypass_switches: AtomicU64::new(0),
            sampler: Mutex::new(reuse::Sampler::new(0)),
            bypass_forced: std::sync::atomic::AtomicU8::new(tune::bypass_from_env()),
            rereferenced: AtomicBool::new(false),
            dirty_stripes: AtomicUsize::new(0),
            grow_signal: AtomicUsize::new(0),
            last_tune: Mutex::new(TuneState::new(min_entries)),
            tune_at: AtomicU64::new(0),
            help_at: AtomicU64::new(0),
            pending: Mutex::new(None),
            wake: Arc::new(Wake::default()),
        };
        c.refresh_memory();
        c
    }

    fn shard(&self, stripe: u64) -> &Mutex<Shard> {
        let h = stripe.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    fn tick(&self) -> u64 {
        self.clock.0.fetch_add(1, Ordering::Relaxed)
    }

    /// The entry of `stripe`, if cached.
    pub fn get(&self, stripe: u64) -> Option<Arc<Entry>> {
        let entry = lock(self.shard(stripe)).map.get(&stripe).cloned();
        if let Some(entry) = &entry {
            entry.last_used.store(self.tick(), Ordering::Relaxed);
        }
        entry
    }

    /// True if `stripe` has an entry (cached pages, or a writer working on it).
    pub fn contains(&self, stripe: u64) -> bool {
        lock(self.shard(stripe)).map.contains_key(&stripe)
    }

    /// The entry of `stripe`, created if needed.
    pub fn get_or_create(&self, stripe: u64) -> Arc<Entry> {
        let t = self.tick();
        let mut sh = lock(self.shard(stripe));
        if let Some(entry) = sh.map.get(&stripe) {
            entry.last_used.store(t, Ordering::Relaxed);
            return Arc::clone(entry);
        }
        let entry = Arc::new(Entry {
            stripe,
            state: Mutex::new(EntryState {
                pages: Vec::new(),
                dead: false,
                alloc: 0,
                dirty_pages: 0,
                written_pages: 0,
                dirty_lo: usize::MAX,
                dirty_hi: 0,
            }),
            last_used: AtomicU64::new(t),
            dirty_since: AtomicU64::new(0),
        });
        sh.map.insert(stripe, Arc::clone(&entry));
        entry
    }

    /// Count `n` pages about to be allocated, if that keeps the count within the
    /// capacity; false (nothing counted) if not.
    pub fn reserve(&self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let limit = self.capacity_pages();
        let mut cur = self.pages.load(Ordering::Relaxed);
        loop {
            if cur + n > limit {
                return false;
            }
            match self.pages.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if cur + n > self.peak_pages.load(Ordering::Relaxed) {
                        self.peak_pages.fetch_max(cur + n, Ordering::Relaxed);
                    }
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Give back `n` reserved pages that were not allocated.
    pub fn unreserve(&self, n: usize) {
        if n > 0 {
            self.pages.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// The indices (`block * rows + row`) of the pages a write piece falls into.
    pub fn piece_pages(&self, p: &crate::array::parity_write::Piece<'_>) -> std::ops::Range<usize> {
        let first = p.block * self.rows;
        let rows = p.at / PAGE_SECTORS..(p.at + p.sectors).div_ceil(PAGE_SECTORS);
        first + rows.start as usize..first + rows.end as usize
    }

    /// Pages of `held` that a write of `pieces` would allocate.
    pub fn new_pages(
        &self,
        held: &EntryState,
        pieces: &[crate::array::parity_write::Piece<'_>],
    ) -> usize {
        pieces
            .iter()
            .flat_map(|p| self.piece_pages(p))
            .filter(|&i| held.pages.get(i).is_none_or(Option::is_none))
            .count()
    }

    /// A page for writing; one not allocated yet takes one of the `reserved` pages (see
    /// [`StripeCache::reserve`]).
    pub fn page<'a>(
        &self,
        held: &'a mut EntryState,
        idx: usize,
        reserved: &mut usize,
    ) -> &'a mut Page {
        if held.pages.is_empty() {
            held.pages.resize_with(self.kc * self.rows, || None);
        }
        if held.pages[idx].is_none() {
            debug_assert!(*reserved > 0, "page {idx} allocated without a reservation");
            if *reserved > 0 {
                *reserved -= 1;
            } else {
                // Counted all the same: the count must match what `clear` gives back.
                let n = self.pages.fetch_add(1, Ordering::Relaxed) + 1;
                self.peak_pages.fetch_max(n, Ordering::Relaxed);
            }
            held.alloc += 1;
        }
        held.pages[idx].get_or_insert_with(|| Page {
            data: self.pool.take(),
            valid: 0,
            dirty: 0,
            written: false,
        })
    }

    /// Page `idx` to keep data read from the members in: the page if allocated, a new one
    /// if there is room for it, else None.
    pub fn kept_page<'a>(&self, held: &'a mut EntryState, idx: usize) -> Option<&'a mut Page> {
        let allocated = held.pages.get(idx).is_some_and(Option::is_some);
        let mut reserved = usize::from(!allocated);
        if !allocated && !self.reserve(1) {
            return None;
        }
        Some(self.page(held, idx, &mut reserved))
    }

    /// Free every page of an entry (its data is on the members or superseded).
    pub fn clear(&self, entry: &Entry, held: &mut EntryState) {
        let pages = std::mem::take(&mut held.pages);
        if held.alloc > 0 {
            self.pool
                .put(pages.into_iter().flatten().map(|p| p.data), self.slack());
        }
        self.pages.fetch_sub(held.alloc, Ordering::Relaxed);
        held.alloc = 0;
        held.dirty_pages = 0;
        held.dirty_lo = usize::MAX;
        held.dirty_hi = 0;
        held.written_pages = 0;
        self.mark_clean(entry);
    }

    /// Add `n` to a counter (this CPU's copy).
    pub fn count(&self, what: Count, n: u64) {
        self.counts.local()[what as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// A counter's total over the CPUs. Never less than an earlier total: each copy only
    /// grows.
    pub fn counted(&self, what: Count) -> u64 {
        self.counts
            .all()
            .map(|c| c[what as usize].load(Ordering::Relaxed))
            .sum()
    }

    /// Note that an entry got dirty data.
    pub fn mark_dirty(&self, entry: &Entry) {
        if entry.dirty_since.load(Ordering::Relaxed) == 0 {
            let now = self.epoch.elapsed().as_millis() as u64 + 1;
            entry.dirty_since.store(now, Ordering::Relaxed);
            self.dirty_stripes.fetch_add(1, Ordering::Relaxed);
            lock(self.shard(entry.stripe)).dirty.push_back(entry.stripe);
            self.wake.dirtied();
        }
    }

    /// Note that an entry holds no dirty data any more.
    pub fn mark_clean(&self, entry: &Entry) {
        if entry.dirty_since.swap(0, Ordering::Relaxed) != 0 {
            self.dirty_stripes.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Remove an entry (its lock held, clean) from the cache.
    pub fn remove(&self, entry: &Entry, held: &mut EntryState) {
        self.clear(entry, held);
        held.dead = true;
        let mut sh = lock(self.shard(entry.stripe));
        if sh
            .map
            .get(&entry.stripe)
            .is_some_and(|x| std::ptr::eq(&**x, entry))
        {
            sh.map.remove(&entry.stripe);
        }
    }

    /// Over capacity (it was lowered below what is in use)?
    pub fn over(&self) -> bool {
        self.short_of(0)
    }

    /// Is there no room for `room` more pages within the capacity?
    pub fn short_of(&self, room: usize) -> bool {
        self.pages.load(Ordering::Relaxed) + room > self.capacity_pages()
    }

    /// Pages to free below capacity once eviction starts (evicting in batches).
    fn slack(&self) -> usize {
        self.capacity_pages() / 64
    }

    /// Evict clean entries until there is room for `room` more pages (and, evicting in
    /// batches, some slack); returns a dirty entry to write out when only dirty ones are
    /// left to evict (the caller writes it, then calls [`StripeCache::remove`]).
    pub fn make_room(&self, room: usize) -> Option<Victim> {
        let mut dirty_pick: Option<Arc<Entry>> = None;
        let mut scanned = 0;
        let goal = self.capacity_pages().saturating_sub(self.slack().max(room));
        let above = |c: &StripeCache| c.pages.load(Ordering::Relaxed) > goal;
        while above(self) && scanned < SHARDS {
            let i = self.evict_cursor.fetch_add(1, Ordering::Relaxed) % SHARDS;
            scanned += 1;
            // The least recently used of a sample of this shard's entries go first.
            let mut cands: Vec<Arc<Entry>> = {
                let sh = lock(&self.shards[i]);
                sh.map.values().take(32).cloned().collect()
            };
            cands.sort_by_key(|entry| entry.last_used.load(Ordering::Relaxed));
            let excess = self.pages.load(Ordering::Relaxed).saturating_sub(goal);
            // Take from this shard about an eighth of the excess, so eviction spreads.
            let mut freed = 0usize;
            for entry in cands {
                if !above(self) || freed > excess / 8 + self.kc {
                    break;
                }
                let since = entry.dirty_since.load(Ordering::Relaxed);
                if since != 0 {
                    if dirty_pick
                        .as_ref()
                        .is_none_or(|d| d.dirty_since.load(Ordering::Relaxed) > since)
                    {
                        dirty_pick = Some(Arc::clone(&entry));
                    }
                    continue;
                }
                let Some(mut held) = crate::locks::try_lock(&entry.state) else {
                    continue;
                };
                if held.dead || held.is_dirty() {
                    continue;
                }
                freed += held.alloc;
                self.remove(&entry, &mut held);
            }
        }
        if self.short_of(room) {
            if let Some(d) = dirty_pick {
                return Some(Victim::Dirty(d));
            }
        }
        None
    }

    /// Set how long partial stripes may wait (milliseconds).
    pub fn set_hold(&self, d: Duration) {
        self.hold_ms.store(
            d.as_millis().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// Milliseconds since the cache was made, plus one.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Should a writer help write out stripes that waited long enough? At most once a
    /// millisecond over all writers (the background thread does it every `HOLD / 2`), so
    /// small writes do not each lock shards looking for them.
    pub fn help_due(&self) -> bool {
        if !self.has_dirty() {
            return false;
        }
        let now = self.now_ms();
        let at = self.help_at.load(Ordering::Relaxed);
        now >= at
            && self
                .help_at
                .compare_exchange(at, now + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// A dirty entry that has waited at least the hold time.
    /// Looks at `shards` shards (from a rotating start).
    pub fn aged(&self, shards: usize) -> Option<Arc<Entry>> {
        if !self.has_dirty() {
            return None;
        }
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let hold = self.hold_ms.load(Ordering::Relaxed);
        for _ in 0..shards.min(SHARDS) {
            let i = self.dirty_cursor.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let mut sh = lock(&self.shards[i]);
            while let Some(&s) = sh.dirty.front() {
                let Some(entry) = sh.map.get(&s).cloned() else {
                    sh.dirty.pop_front();
                    continue;
                };
                let since = entry.dirty_since.load(Ordering::Relaxed);
                if since == 0 {
                    sh.dirty.pop_front();
                    continue;
                }
                if now.saturating_sub(since) >= hold {
                    sh.dirty.pop_front();
                    return Some(entry);
                }
                break;
            }
        }
        None
    }

    /// Every entry with dirty data now.
    pub fn all_dirty(&self) -> Vec<Arc<Entry>> {
        let mut v = Vec::new();
        for sh in self.shards.iter() {
            let sh = lock(sh);
            v.extend(
                sh.map
                    .values()
                    .filter(|entry| entry.dirty_since.load(Ordering::Relaxed) != 0)
                    .cloned(),
            );
        }
        v
    }

    /// True if `stripe`'s entry holds written data not yet on the members (acknowledged:
    /// a checksum sidecar already has its new checksums). Only a write-out clears it,
    /// and a write-out holds the stripe's lock: with that lock held a true answer stands (a false one may turn true: a write can be held meanwhile).
    pub fn holds_unwritten(&self, stripe: u64) -> bool {
        lock(self.shard(stripe))
            .map
            .get(&stripe)
            .is_some_and(|e| e.dirty_since.load(Ordering::Relaxed) != 0)
    }

    /// True if any entry holds dirty data.
    pub fn has_dirty(&self) -> bool {
        self.dirty_stripes.load(Ordering::Relaxed) > 0
    }

    /// Record a failure while writing out held data.
    pub fn set_pending(&self, entry: EngineError) {
        lock(&self.pending).get_or_insert(entry);
    }

    /// Take the recorded failure.
    pub fn take_pending(&self) -> Option<EngineError> {
        lock(&self.pending).take()
    }
}
