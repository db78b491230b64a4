//! Latency histogram: log-linear buckets (exact below 128, then 64 buckets per power of
//! two, so a reported value is within 1.6 % of the true one), mergeable across threads.

use serde::Serialize;

const LINEAR: u64 = 128;
const SUB: u64 = 64;
const BUCKETS: usize = 128 + 57 * 64;

/// A histogram of `u64` values (nanoseconds for latencies).
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

fn index(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - u64::from(v.leading_zeros()); // ≥ 7
    let shift = e - 6;
    let mant = v >> shift; // 64..128
    (LINEAR + (e - 7) * SUB + (mant - SUB)) as usize
}

/// Largest value that falls in bucket `i`.
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let e = (i - LINEAR) / SUB + 7;
    let mant = (i - LINEAR) % SUB + SUB;
    let shift = e - 6;
    ((mant + 1) << shift).wrapping_sub(1)
}

impl Histogram {
    /// Empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            n: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
    /// Add one value.
    pub fn record(&mut self, v: u64) {
        if let Some(c) = self.counts.get_mut(index(v)) {
            *c += 1;
        }
        self.n += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
    /// Add all values of `o`.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
    /// Number of values.
    pub fn count(&self) -> u64 {
        self.n
    }
    /// Largest value (0 if empty).
    pub fn max(&self) -> u64 {
        self.max
    }
    /// Smallest value (0 if empty).
    pub fn min(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.min
        }
    }
    /// Mean (0 if empty).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }
    /// The `p`-th percentile (0 < p ≤ 100): the smallest bucket value `v` such that at least
    /// `ceil(p/100 × n)` values are ≤ `v`, clamped to the observed min and max. 0 if empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.n as f64)
            .ceil()
            .clamp(1.0, self.n as f64) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper(i).clamp(self.min, self.max);
            }
        }
        self.max
    }
    /// The usual summary.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            min: self.min(),
            mean: self.mean(),
            p50: self.percentile(50.0),
            p90: self.percentile(90.0),
            p99: self.percentile(99.0),
            p999: self.percentile(99.9),
            max: self.max(),
        }
    }
}

/// A [`Histogram`] many threads record into without a lock (relaxed atomic counters; a
/// snapshot taken while recording may miss the values in flight).
#[derive(Debug)]
pub struct AtomicHistogram {
    counts: Vec<std::sync::atomic::AtomicU64>,
    sum: std::sync::atomic::AtomicU64,
    min: std::sync::atomic::AtomicU64,
    max: std::sync::atomic::AtomicU64,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        AtomicHistogram::new()
    }
}

impl AtomicHistogram {
    /// Empty.
    pub fn new() -> AtomicHistogram {
        use std::sync::atomic::AtomicU64;
        AtomicHistogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        }
    }
    /// Add one value.
    pub fn record(&self, v: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(c) = self.counts.get(index(v)) {
            c.fetch_add(1, Relaxed);
        }
        self.sum.fetch_add(v, Relaxed);
        self.min.fetch_min(v, Relaxed);
        self.max.fetch_max(v, Relaxed);
    }
    /// Forget everything.
    pub fn reset(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        for c in &self.counts {
            c.store(0, Relaxed);
        }
        self.sum.store(0, Relaxed);
        self.min.store(u64::MAX, Relaxed);
        self.max.store(0, Relaxed);
    }
    /// A plain histogram of what was recorded so far.
    pub fn snapshot(&self) -> Histogram {
        use std::sync::atomic::Ordering::Relaxed;
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        Histogram {
            n: counts.iter().sum(),
            counts,
            sum: u128::from(self.sum.load(Relaxed)),
            min: self.min.load(Relaxed),
            max: self.max.load(Relaxed),
        }
    }
}

/// Latency percentiles in the histogram's unit (nanoseconds).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_small_values() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), 50);
        assert_eq!(h.percentile(90.0), 90);
        assert_eq!(h.percentile(99.0), 99);
        assert_eq!(h.percentile(99.9), 100);
        assert_eq!(h.percentile(100.0), 100);
        assert_eq!((h.min(), h.max(), h.count()), (1, 100, 100));
        assert_eq!(h.mean(), 50.5);
    }

    #[test]
    fn buckets_are_tight_and_mergeable() {
        for v in [128u64, 129, 1000, 4095, 4096, 1 << 40, u64::MAX] {
            let i = index(v);
            assert!(upper(i) >= v, "{v}");
            assert!(i == 0 || upper(i - 1) < v, "{v}");
            assert!((upper(i) - v) as f64 <= v as f64 / 64.0, "{v}");
        }
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(10);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert_eq!(a.percentile(50.0), 10);
        assert_eq!(a.percentile(100.0), 1_000_000);
        assert_eq!(Histogram::new().percentile(50.0), 0);
    }

    #[test]
    fn atomic_histogram_matches_the_plain_one() {
        let a = AtomicHistogram::new();
        let mut h = Histogram::new();
        for v in [5u64, 1000, 77_777, 3, 1 << 33] {
            a.record(v);
            h.record(v);
        }
        let s = a.snapshot();
        assert_eq!(s.summary(), h.summary());
        assert_eq!(s.count(), 5);
        a.reset();
        assert_eq!(a.snapshot().count(), 0);
        assert_eq!(a.snapshot().summary(), Histogram::new().summary());
    }
}
