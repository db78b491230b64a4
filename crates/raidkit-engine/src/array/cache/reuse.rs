//! How much a bigger stripe cache would save, measured on the writes themselves, and the
//! one decision made from it: grow (and by how much) or bypass.
//!
//! **Measuring.** Every small write's page rows are offered to a [`Sampler`]; one row in
//! [`SAMPLE`] (chosen by a hash of the row, so a sampled row is seen on every write to it)
//! is followed: the *reuse time* of each access (how many sampled accesses since that row's
//! last one) goes into a histogram. The sampler sees the writes whether they go through the
//! cache or bypass it, so what it measures does not depend on what was decided: the old
//! measure (ghost hits and pages saved, counted through the cache) changed with the
//! decision it fed, and flipped with it (a bypassing period saw only the 1-in-128 learning
//! writes, a few ghost hits either side of the threshold).
//!
//! **Predicting.** From the reuse times, the average-eviction-time model (Hu et al., "Kinetic
//! modeling of data eviction in cache", USENIX ATC 2016) gives the miss ratio of an LRU
//! cache of any size ([`Curve::miss_at`]): a cache of `C` rows keeps a row for about the
//! time `T` at which `∫₀ᵀ P(reuse time > t) dt = C`, and misses the accesses whose reuse
//! time exceeds `T`. For writes spread uniformly over `H` rows it gives `1 − C/H`, as it
//! should; rows seen once count as never reused.
//!
//! **Deciding** ([`decide`], a pure function): the member reads per write with the cache at
//! the most memory allows, against bypassing; grow when that saves at least [`ENTER`] of
//! the reads, and keep the cache until it saves less than [`LEAVE`] (hysteresis); the size
//! is what reaches within [`MISS_SLACK`] of the best miss ratio, with headroom, and moves
//! only when the wanted size leaves a band around the current one.

use std::collections::HashMap;

/// One page row in this many is followed (chosen by a hash of the row).
pub(super) const SAMPLE: u64 = 16;
/// Sampled accesses needed before the curve is trusted.
pub(super) const MIN_SAMPLES: f64 = 512.0;
/// The histogram is halved when it holds this many accesses (it follows the last ~1–2 of
/// these windows: about 0.5–1 s of a 250k writes/s load).
const WINDOW: f64 = 16384.0;
/// Reuse-time buckets: bucket `i` holds reuse times `[2^i, 2^(i+1))`.
const BUCKETS: usize = 40;
/// Grow when the cache would save at least this share of the member reads...
pub(super) const ENTER: f64 = 0.25;
/// ... and go back to bypassing only when it would save less than this share.
pub(super) const LEAVE: f64 = 0.10;
/// The size aimed at reaches within this of the best miss ratio memory allows.
const MISS_SLACK: f64 = 0.02;

/// The reuse times of the sampled page rows.
pub(super) struct Sampler {
    /// Sampled row → the sampled access (tick) it was last written at.
    last: HashMap<u64, u64>,
    tick: u64,
    /// Accesses by reuse-time bucket (halved every [`WINDOW`]: a decaying window).
    hist: [f64; BUCKETS],
    /// Accesses to rows not seen before (never reused, as far as the sampler knows).
    cold: f64,
    /// Most rows followed; past it the map starts again (its rows then count as cold).
    cap: usize,
}

/// Is page row `key` (stripe × 2^20 + row) one of the followed ones?
pub(super) fn sampled(key: u64) -> bool {
    (key ^ (key >> 29)).wrapping_mul(0xd6e8_feb8_6659_fd93) >> 60 == 0
}

impl Sampler {
    /// A sampler following at most `cap` rows.
    pub(super) fn new(cap: usize) -> Sampler {
        Sampler {
            last: HashMap::new(),
            tick: 0,
            hist: [0.0; BUCKETS],
            cold: 0.0,
            cap: cap.max(1024),
        }
    }

    /// Follow at most `cap` rows (about 4× what the memory bound allows, in sampled rows).
    pub(super) fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(1024);
    }

    /// A sampled row was written.
    pub(super) fn access(&mut self, key: u64) {
        self.tick += 1;
        match self.last.insert(key, self.tick) {
            Some(prev) => {
                let t = self.tick - prev;
                self.hist[(63 - t.leading_zeros() as usize).min(BUCKETS - 1)] += 1.0;
            }
            None => self.cold += 1.0,
        }
        if self.last.len() > self.cap {
            self.last.clear();
        }
        if self.samples() >= WINDOW {
            self.decay();
        }
    }

    /// Sampled accesses so far.
    pub(super) fn ticks(&self) -> u64 {
        self.tick
    }

    /// Accesses in the window.
    pub(super) fn samples(&self) -> f64 {
        self.cold + self.hist.iter().sum::<f64>()
    }

    /// Halve what was seen (older accesses weigh less; with no writes the curve fades
    /// until it is not trusted, and the cache goes back to its smallest size).
    pub(super) fn decay(&mut self) {
        self.cold /= 2.0;
        for h in &mut self.hist {
            *h /= 2.0;
        }
    }

    /// The miss-ratio curve of what was seen.
    pub(super) fn curve(&self) -> Curve {
        Curve {
            hist: self.hist,
            cold: self.cold,
        }
    }
}

/// A miss-ratio curve, in sampled rows (a cache of `C` rows holds about `C / SAMPLE`
/// sampled ones).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Curve {
    hist: [f64; BUCKETS],
    cold: f64,
}

/// Integration steps per bucket.
const STEPS: usize = 8;

impl Curve {
    /// Accesses.
    pub(super) fn samples(&self) -> f64 {
        self.cold + self.hist.iter().sum::<f64>()
    }

    /// Share of accesses with a reuse time of at least `2^i` (`i = BUCKETS`: never
    /// reused).
    fn at_least(&self, i: usize) -> f64 {
        (self.cold + self.hist[i.min(BUCKETS)..].iter().sum::<f64>()) / self.samples()
    }

    /// Walk the curve: for each step, (cache size reached, miss ratio there), until `stop`
    /// says so; returns what it stopped at, or the end of the histogram.
    fn walk(&self, mut stop: impl FnMut(f64, f64) -> bool) -> (f64, f64) {
        // P(reuse time > t) is 1 up to t = 1, then falls linearly within each bucket.
        let mut area = 1.0;
        for i in 0..BUCKETS {
            let (lo, hi) = ((1u64 << i) as f64, (1u64 << (i + 1)) as f64);
            let (pa, pb) = (self.at_least(i), self.at_least(i + 1));
            for s in 0..STEPS {
                let (f0, f1) = (s as f64 / STEPS as f64, (s + 1) as f64 / STEPS as f64);
                let (p0, p1) = (pa + (pb - pa) * f0, pa + (pb - pa) * f1);
                let next = area + (hi - lo) / STEPS as f64 * (p0 + p1) / 2.0;
                if stop(next, p1) {
                    return (next, p1);
                }
                area = next;
            }
        }
        (area, self.at_least(BUCKETS))
    }

    /// Miss ratio of an LRU cache of `rows` sampled rows.
    pub(super) fn miss_at(&self, rows: f64) -> f64 {
        if self.samples() <= 0.0 {
            return 1.0;
        }
        let mut before = (1.0f64, 1.0f64);
        let (area, miss) = self.walk(|area, miss| {
            if area >= rows {
                return true;
            }
            before = (area, miss);
            false
        });
        if area < rows {
            return miss;
        }
        // Linear between the last step below and the one reaching `rows`.
        let (a0, m0) = before;
        if area - a0 <= f64::EPSILON {
            return miss;
        }
        m0 + (miss - m0) * ((rows - a0) / (area - a0)).clamp(0.0, 1.0)
    }

    /// Sampled rows a cache needs for a miss ratio of at most `miss` (infinite if none
    /// reaches it).
    pub(super) fn rows_for(&self, miss: f64) -> f64 {
        if self.samples() <= 0.0 {
            return f64::INFINITY;
        }
        let (area, m) = self.walk(|_, m| m <= miss);
        if m <= miss {
            area
        } else {
            f64::INFINITY
        }
    }
}

/// What [`decide`] decides from.
#[derive(Clone, Debug)]
pub(super) struct Inputs<'a> {
    /// The miss-ratio curve of the small writes lately.
    pub curve: &'a Curve,
    /// Entries the memory (and the admin's bound) allow.
    pub max_entries: usize,
    /// The smallest automatic size, entries.
    pub min_entries: usize,
    /// Data blocks per stripe.
    pub data_blocks: usize,
    /// Parity blocks per stripe (1 or 2).
    pub parity_blocks: usize,
    /// The decision in force.
    pub was: Decision,
}

/// The cache's use for small writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Decision {
    /// Capacity wanted for small writes, entries.
    pub target_entries: usize,
    /// Small writes to stripes the cache holds nothing of go straight to the members.
    pub bypass: bool,
    /// Rows are reused enough that the cache pays: fill them whole on a miss.
    pub fill: bool,
}

impl Decision {
    /// Before anything was measured: through the cache at its smallest size.
    pub(super) fn initial(min_entries: usize) -> Decision {
        Decision {
            target_entries: min_entries,
            bypass: false,
            fill: false,
        }
    }
}

/// Member reads of a one-page write: bypassing (the cheaper of read-modify-write and
/// reconstruct-write), and through a cache whose rows are found with probability `hit`
/// (rows filled whole where the planner does, else only the old data saved on a hit).
pub(super) fn reads_per_write(data_blocks: usize, parity_blocks: usize, hit: f64) -> (f64, f64) {
    let rmw = (1 + parity_blocks) as f64;
    let rcw = data_blocks.saturating_sub(1) as f64;
    let bypass = rmw.min(rcw);
    // The planner fills whole rows when that costs at most twice read-modify-write.
    let cached = if rcw <= 2.0 * rmw {
        (1.0 - hit) * rcw.max(bypass)
    } else {
        rmw - hit
    };
    (bypass, cached)
}

/// Grow or bypass, and the size: a pure function of the measured curve, the memory bound,
/// the geometry and the decision in force.
pub(super) fn decide(inp: &Inputs<'_>) -> Decision {
    let min = inp.min_entries.min(inp.max_entries);
    if inp.curve.samples() < MIN_SAMPLES {
        // Nothing (or nothing lately) to go by: the smallest cache, used.
        return Decision::initial(min);
    }
    let grown = !inp.was.bypass;
    let best_rows = inp.max_entries as f64 / SAMPLE as f64;
    let best_miss = inp.curve.miss_at(best_rows);
    let (bypass_reads, cached_reads) =
        reads_per_write(inp.data_blocks, inp.parity_blocks, 1.0 - best_miss);
    let saving = if bypass_reads > 0.0 {
        (bypass_reads - cached_reads) / bypass_reads
    } else {
        0.0
    };
    let pays = saving >= if grown { LEAVE } else { ENTER };
    if !pays {
        return Decision {
            target_entries: min,
            bypass: true,
            fill: false,
        };
    }
    let need = inp.curve.rows_for(best_miss + MISS_SLACK).min(best_rows) * SAMPLE as f64;
    // Headroom: the sampled rows are a sample (their count varies by a few %).
    let want = ((need * 1.25) as usize).clamp(min, inp.max_entries.max(min));
    let cur = inp.was.target_entries;
    // Keep the size in force while the wanted one stays within [3/4, 5/4] of it (and
    // within memory).
    let target = if grown && cur <= inp.max_entries && want * 4 >= cur * 3 && want * 4 <= cur * 5 {
        cur
    } else {
        want
    };
    Decision {
        target_entries: target,
        bypass: false,
        fill: true,
    }
}

#[cfg(test)]
mod tests;
