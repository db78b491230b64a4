//! Sizing the stripe cache and deciding how it is used: the capacity (automatic from the
//! small writes' miss-ratio curve and streams' early write-outs, or fixed; bounded by
//! memory and the admin), whether partial stripes wait, whether small writes bypass it,
//! and its counters.

use super::reuse::{self, Decision};
use super::{Count, StripeCache, StripeCacheStats, PAGE, PAGE_SECTORS};
use crate::array::parity_write::Piece;
use crate::locks::try_lock;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// With bypassing forced on (tests, benchmarks), one small write in this many still goes
/// through the cache, so both paths run. The automatic decision needs no such writes: it
/// learns from every write's rows ([`StripeCache::observe`]).
pub(super) const LEARN_EVERY: u64 = 128;
/// With no small write sampled for this long, the measured curve fades by half per period
/// (so an idle cache goes back to its smallest size).
const IDLE_FADE: Duration = Duration::from_secs(1);

thread_local! {
    /// Writes this thread offered to bypass the cache (counted per thread: one counter
    /// shared by every writer was a contended cache line on every small write).
    static LEARN_TICK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// `tune`'s memory: when it last ran, and the counters it read then (merges, drains,
/// written pages, rewritten pages, misses, saved pages); the small-write decision in
/// force; the size streams asked for; when the sampler last saw a write.
pub(super) struct TuneState {
    pub(super) at: Instant,
    pub(super) seen: [u64; 6],
    decision: Decision,
    stream_target: usize,
    sampled: u64,
    sampled_at: Instant,
}

impl TuneState {
    pub(super) fn new(min_entries: usize) -> TuneState {
        TuneState {
            at: Instant::now(),
            seen: [0; 6],
            decision: Decision::initial(min_entries),
            stream_target: min_entries,
            sampled: 0,
            sampled_at: Instant::now(),
        }
    }
}

/// Benchmarks: `RAIDKIT_STRIPE_CACHE_BYPASS=on` makes small writes to stripes the cache
/// holds nothing of bypass it (all but the learning ones), `off` sends them all through
/// it; unset (or anything else) lets the cache decide. As [`StripeCache::force_bypass`].
pub(super) fn bypass_from_env() -> u8 {
    match std::env::var("RAIDKIT_STRIPE_CACHE_BYPASS").as_deref() {
        Ok("on") => 1,
        Ok("off") => 2,
        _ => 0,
    }
}

fn mem_available() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let l = t.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl StripeCache {
    pub(super) fn entry_bytes(&self) -> u64 {
        (PAGE * self.kc) as u64
    }

    pub(super) fn refresh_memory(&self) {
        if let Some(m) = mem_available() {
            let used = self.pages.load(Ordering::Relaxed) as u64 * PAGE as u64;
            let cap = ((m + used) / 4 / self.entry_bytes()) as usize;
            self.mem_cap.store(cap.max(1), Ordering::Relaxed);
        }
    }

    /// Largest automatic size, entries.
    pub fn max_entries(&self) -> usize {
        let admin = self.admin_max.load(Ordering::Relaxed);
        let by_admin = if admin == u64::MAX {
            usize::MAX
        } else {
            (admin / self.entry_bytes()) as usize
        };
        by_admin.min(self.mem_cap.load(Ordering::Relaxed)).max(1)
    }

    /// Current capacity, pages (entries × data blocks).
    pub fn capacity_pages(&self) -> usize {
        self.capacity() * self.kc
    }

    /// Current capacity, entries.
    pub fn capacity(&self) -> usize {
        let f = self.fixed.load(Ordering::Relaxed);
        if f > 0 {
            return f;
        }
        self.target.load(Ordering::Relaxed).min(self.max_entries())
    }

    /// Set the admin bound (bytes) and/or a fixed size (entries). A fixed size above the
    /// bound is refused.
    pub fn configure(&self, max_bytes: Option<u64>, fixed: Option<usize>) -> Result<(), String> {
        if let (Some(m), Some(f)) = (max_bytes, fixed) {
            if f as u64 * self.entry_bytes() > m {
                return Err(format!(
                    "a stripe cache of {f} entries needs {} bytes ({} per entry), more than the \
                     bound of {m} bytes; lower the entries or raise the bound",
                    f as u64 * self.entry_bytes(),
                    self.entry_bytes()
                ));
            }
        }
        if fixed == Some(0) {
            return Err("the stripe cache needs at least 1 entry".into());
        }
        if let Some(m) = max_bytes {
            if m < self.entry_bytes() {
                return Err(format!(
                    "the stripe cache bound of {m} bytes is below one entry ({} bytes: 4 KiB \
                     per data member); raise it",
                    self.entry_bytes()
                ));
            }
        }
        self.admin_max
            .store(max_bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
        self.fixed.store(fixed.unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    /// A partial stripe of at least a chunk of data had to be written early for lack of
    /// room (a sequential stream that more room would have merged): ask to grow.
    /// Only while write-outs have been merging lately (a stream is on).
    pub fn early_write_out(&self) {
        if self.fixed.load(Ordering::Relaxed) == 0 && self.merging.load(Ordering::Relaxed) {
            self.grow_signal.fetch_add(self.rows, Ordering::Relaxed);
        }
    }

    /// Is filling whole rows (reading every data block instead of old data and parity)
    /// likely to pay off: written pages found in the cache again (at least 1/8 of them
    /// lately), or small writes reusing their rows enough that the cache pays?
    pub fn reuse_likely(&self) -> bool {
        self.rereferenced.load(Ordering::Relaxed) || self.fill.load(Ordering::Relaxed)
    }

    /// Have written pages been found in the cache again lately (at least 1/8 of them)?
    pub fn rewrites_seen(&self) -> bool {
        self.rereferenced.load(Ordering::Relaxed)
    }

    /// May a write to a stripe the cache holds nothing of go straight to the members?
    /// Yes while the measured reuse says the cache would not pay ([`reuse::decide`]).
    /// Forced on, all but one write in [`LEARN_EVERY`].
    pub fn bypass(&self) -> bool {
        match self.bypass_forced.load(Ordering::Relaxed) {
            1 => !LEARN_TICK.with(|t| {
                let n = t.get();
                t.set(n.wrapping_add(1));
                n.is_multiple_of(LEARN_EVERY)
            }),
            2 => false,
            _ => self.bypass.load(Ordering::Relaxed),
        }
    }

    /// A small write (not a whole stripe) to `stripe`: offer its page rows to the reuse
    /// sampler. One row in [`reuse::SAMPLE`] is followed; the others cost a hash. A writer
    /// never waits for the sampler: while another thread holds it (a writer preempted
    /// there, or the tuner), the rows are not counted (a sample lost, no write delayed).
    pub fn observe(&self, stripe: u64, pieces: &[Piece<'_>]) {
        let mut keys: SmallVec<[u64; 4]> = SmallVec::new();
        for p in pieces {
            let (r0, r1) = (
                p.at / PAGE_SECTORS,
                (p.at + p.sectors).div_ceil(PAGE_SECTORS),
            );
            for r in r0..r1 {
                let key = (stripe << 20) | r;
                if reuse::sampled(key) && !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        if keys.is_empty() {
            return;
        }
        let Some(mut s) = try_lock(&self.sampler) else {
            return;
        };
        for key in keys {
            s.access(key);
        }
    }

    /// Force the bypass decision (tests): `Some(on)`, or `None` to let `tune` decide.
    pub fn force_bypass(&self, on: Option<bool>) {
        let v = match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.bypass_forced.store(v, Ordering::Relaxed);
    }

    /// Should a partial stripe wait for more data? Yes when recent write-outs often
    /// merged (a stream), when the stripe already waits (its stream continues), or when
    /// the write ends on a chunk boundary (how a sequential stream looks); not for
    /// scattered small writes, which gain nothing from waiting.
    pub fn should_hold(&self, was_dirty: bool, ends_on_chunk: bool) -> bool {
        self.writeback.load(Ordering::Acquire)
            && (was_dirty || ends_on_chunk || self.merging.load(Ordering::Relaxed))
    }

    /// Decide (at most every 25 ms): whether partial stripes wait (write-outs merging),
    /// whether small writes bypass the cache and the size they want ([`reuse::decide`],
    /// from the reuse the sampler measured), and the size streams want (grown by early
    /// write-outs; shrunk by 1/8 when the cache is full and of little use: under a quarter
    /// of the pages written out saved a member read). The size is the larger of the two.
    pub fn tune(&self) {
        // Every small write asks; the coarse clock answers without reading the time-stamp
        // counter (clock reads were 2–3 % of a 4 KiB parity write's CPU, five or six per
        // write, this one of them): its tick of a few milliseconds is well inside 25 ms.
        let now = crate::supervisor::coarse_ms();
        if now < self.tune_at.load(Ordering::Relaxed) {
            return;
        }
        let Some(mut last) = crate::locks::try_lock(&self.last_tune) else {
            return;
        };
        if last.at.elapsed() < Duration::from_millis(25) {
            return;
        }
        last.at = Instant::now();
        self.tune_at
            .store(now.saturating_add(25), Ordering::Relaxed);
        self.refresh_memory();
        let grow = self.grow_signal.swap(0, Ordering::Relaxed);
        // What each counter gained since the last tune.
        let counters = [
            Count::Merges,
            Count::Drains,
            Count::Written,
            Count::Rewritten,
            Count::Misses,
            // Benefit: pages written out without reading (found in the cache, or merged).
            Count::Saved,
        ];
        let mut d = [0u64; 6];
        for (i, c) in counters.iter().enumerate() {
            let v = self.counted(*c);
            d[i] = v - last.seen[i];
            last.seen[i] = v;
        }
        let [dmg, ddr, dw, drw, dm, dsv] = d;
        if ddr > 0 {
            // A stream: at least half of the write-outs needed no member reads.
            self.merging.store(dmg * 2 >= ddr, Ordering::Relaxed);
        }
        if dw > 0 {
            self.rereferenced.store(drw * 8 >= dw, Ordering::Relaxed);
        }
        let fixed = self.fixed.load(Ordering::Relaxed);
        let max = if fixed > 0 { fixed } else { self.max_entries() };
        let decision = self.decide_small_writes(&mut last, max);
        self.fill.store(decision.fill, Ordering::Relaxed);
        if decision.bypass != last.decision.bypass {
            self.bypass_switches.fetch_add(1, Ordering::Relaxed);
        }
        self.bypass.store(decision.bypass, Ordering::Relaxed);
        last.decision = decision;
        // Streams: grown by early write-outs, doubling at most per step.
        let min = self.min_entries.min(max);
        let t = last.stream_target;
        let used = self.pages.load(Ordering::Relaxed).div_ceil(self.kc);
        let cur = self.target.load(Ordering::Relaxed);
        let stream = if grow > 0 && fixed == 0 {
            t + grow.min(t)
        } else if used * 8 >= cur * 7 && dsv * 4 < dsv + dm + 1 {
            t - t / 8
        } else {
            t
        };
        last.stream_target = stream.clamp(min, max);
        let new = decision.target_entries.max(last.stream_target);
        self.target.store(new.clamp(min, max), Ordering::Relaxed);
    }

    /// The small-write decision from the sampler's curve (faded while no write is seen);
    /// the decision in force while a writer holds the sampler (the tuner may be a writer
    /// too: it does not wait either).
    fn decide_small_writes(&self, last: &mut TuneState, max: usize) -> Decision {
        let curve = {
            let Some(mut s) = try_lock(&self.sampler) else {
                return last.decision;
            };
            s.set_cap(4 * max / reuse::SAMPLE as usize);
            if s.ticks() != last.sampled {
                last.sampled = s.ticks();
                last.sampled_at = Instant::now();
            } else if last.sampled_at.elapsed() >= IDLE_FADE {
                s.decay();
                last.sampled_at = Instant::now();
            }
            s.curve()
        };
        reuse::decide(&reuse::Inputs {
            curve: &curve,
            max_entries: max,
            min_entries: self.min_entries,
            data_blocks: self.kc,
            parity_blocks: self.parity_blocks,
            was: last.decision,
        })
    }

    /// Counters and sizes.
    pub fn stats(&self) -> StripeCacheStats {
        let fixed = self.fixed.load(Ordering::Relaxed);
        let admin = self.admin_max.load(Ordering::Relaxed);
        let pages = self.pages.load(Ordering::Relaxed);
        StripeCacheStats {
            mode: if fixed > 0 { "fixed" } else { "auto" }.into(),
            size_entries: self.capacity() as u64,
            used_entries: pages.div_ceil(self.kc) as u64,
            max_entries: if fixed > 0 {
                fixed as u64
            } else {
                self.max_entries() as u64
            },
            memory_bytes: (pages * PAGE) as u64,
            peak_memory_bytes: (self.peak_pages.load(Ordering::Relaxed) * PAGE) as u64,
            max_bytes: (admin != u64::MAX).then_some(admin),
            hits: self.counted(Count::Hits),
            misses: self.counted(Count::Misses),
            dirty_stripes: self.dirty_stripes.load(Ordering::Relaxed) as u64,
            full_stripe_merges: self.counted(Count::Merges),
            bypassing: match self.bypass_forced.load(Ordering::Relaxed) {
                1 => true,
                2 => false,
                _ => self.bypass.load(Ordering::Relaxed),
            },
            bypass_switches: self.bypass_switches.load(Ordering::Relaxed),
        }
    }
}
