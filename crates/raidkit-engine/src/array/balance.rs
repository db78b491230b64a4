//! Read balancing over the copies of mirrored data (RAID1, RAID10 near/far/offset).
//!
//! Every member keeps a [`ReadLoad`]: the reads it has in flight and an exponentially
//! weighted service time per KiB, measured on completed reads (queueing in the device
//! included). The cost of sending one more read to a member is `(in flight + 1) × service
//! time`: a member is chosen while it is the fastest, and as its queue grows the next
//! fastest takes over, so members that are both needed get reads in proportion to their
//! speed. Everything is atomics: choosing a copy takes no lock. A measurement ages: an
//! unread member's service time halves every [`STALE_HALF_LIFE`], so a member that was
//! slow once (or unlucky once) is tried again and re-measured instead of being left out
//! for ever.
//!
//! A large read ([`SPLIT_MIN_SECTORS`] or more) is also *spread*: each mapping run is cut
//! into contiguous pieces, one per idle copy, sized in proportion to the copies' speed, and
//! the pieces are read in parallel (one thread per member), so one sequential stream reads
//! faster than one device. Busy members are not given pieces: under a deep queue every
//! member is already working, and splitting would only add per-IO latency.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// An unread member's measured service time halves every this long.
pub const STALE_HALF_LIFE: Duration = Duration::from_millis(100);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since a process-wide epoch (the clock of [`ReadLoad`] samples).
pub fn now_ns() -> u64 {
    ns_at(Instant::now())
}

/// `t` on the clock of [`now_ns`] (0 before the epoch).
pub fn ns_at(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// Reads of at least this many sectors (128 KiB) are spread over idle copies.
pub const SPLIT_MIN_SECTORS: u64 = 256;
/// No piece of a spread read is smaller than this (32 KiB): below it the per-IO latency
/// of a member costs more than the transfer it takes over.
pub const PIECE_MIN_SECTORS: u64 = 64;
/// A read is spread only if the fastest idle copy would take at least this long for all of
/// it (measured speed × size): below it, handing pieces to other threads costs about what
/// it saves (page-cache or tmpfs members). Members not measured yet count as worth it.
pub const SPREAD_MIN_TIME: Duration = Duration::from_micros(200);
/// Pieces are cut on 4 KiB boundaries (array sectors), so no member IO is smaller than a
/// 4 KiB logical block or straddles one.
pub const PIECE_ALIGN_SECTORS: u64 = 8;

/// Read load of one member: reads in flight and measured service time.
#[derive(Debug, Default)]
pub struct ReadLoad {
    inflight: AtomicU32,
    ewma_ns_per_kib: AtomicU64,
    /// [`now_ns`] of the last measurement.
    sampled_at: AtomicU64,
}

impl ReadLoad {
    /// A member with `inflight` reads queued and `ns_per_kib` measured service time,
    /// measured at [`now_ns`] 0 (for tests and simulations).
    pub fn with(inflight: u32, ns_per_kib: u64) -> ReadLoad {
        ReadLoad {
            inflight: AtomicU32::new(inflight),
            ewma_ns_per_kib: AtomicU64::new(ns_per_kib),
            sampled_at: AtomicU64::new(0),
        }
    }

    /// Expected cost of one more read now: queue depth times measured service time per
    /// KiB (aged, see [`STALE_HALF_LIFE`]). An unmeasured member costs its queue depth
    /// alone, so it is tried early.
    pub fn cost(&self) -> u64 {
        self.cost_at(now_ns())
    }

    /// [`ReadLoad::cost`] at time `now` ([`now_ns`]).
    pub fn cost_at(&self, now: u64) -> u64 {
        let q = u64::from(self.inflight.load(Ordering::Relaxed)) + 1;
        let age = now.saturating_sub(self.sampled_at.load(Ordering::Relaxed));
        let halvings = (age / STALE_HALF_LIFE.as_nanos() as u64).min(63);
        let per_kib = self.ewma_ns_per_kib.load(Ordering::Relaxed) >> halvings;
        q.saturating_mul(per_kib.max(1))
    }

    /// True if no read is in flight.
    pub fn idle(&self) -> bool {
        self.inflight.load(Ordering::Relaxed) == 0
    }

    /// Reads in flight.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Measured service time, ns per KiB (0 before the first read; not aged).
    pub fn ns_per_kib(&self) -> u64 {
        self.ewma_ns_per_kib.load(Ordering::Relaxed)
    }

    /// Overwrite the load (tests): `inflight` reads queued, `ns_per_kib` measured now.
    #[cfg(test)]
    pub(crate) fn set(&self, inflight: u32, ns_per_kib: u64) {
        self.inflight.store(inflight, Ordering::Relaxed);
        self.ewma_ns_per_kib.store(ns_per_kib, Ordering::Relaxed);
        self.sampled_at.store(now_ns(), Ordering::Relaxed);
    }

    /// A read starts.
    pub fn begin(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
    }

    /// A read started with [`ReadLoad::begin`] ended; `elapsed` is recorded if it succeeded.
    pub fn end(&self, bytes: usize, elapsed: Option<Duration>) {
        self.end_at(bytes, elapsed.map(|e| (e, Instant::now())));
    }

    /// [`ReadLoad::end`] given the read's service time and the instant it completed (the
    /// member IO layer stamps completions: no second clock read).
    pub fn end_at(&self, bytes: usize, sample: Option<(Duration, Instant)>) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        let Some((elapsed, at)) = sample else {
            return;
        };
        let kib = (bytes as u64).div_ceil(1024).max(1);
        let sample = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX) / kib;
        let old = self.ewma_ns_per_kib.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            (old.saturating_mul(7).saturating_add(sample)) / 8
        };
        self.ewma_ns_per_kib.store(new.max(1), Ordering::Relaxed);
        self.sampled_at.store(ns_at(at), Ordering::Relaxed);
    }
}

/// One copy that could serve a read: the role (member slot) holding it and its load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Role slot of the member holding the copy.
    pub role: usize,
    /// [`ReadLoad::cost`] of its member.
    pub cost: u64,
    /// [`ReadLoad::idle`] of its member.
    pub idle: bool,
}

/// Roles cheapest first (ties keep the given order, so the primary copy wins).
pub fn order(cands: &[Candidate]) -> Vec<usize> {
    let mut v: Vec<&Candidate> = cands.iter().collect();
    v.sort_by_key(|c| c.cost);
    v.into_iter().map(|c| c.role).collect()
}

/// How to read `n` sectors starting at array sector `start` from `cands` (members holding
/// readable copies of all of it): `(role, sectors)` pieces in array order, covering
/// exactly `n`. Small reads, reads the fastest idle copy serves in less than
/// [`SPREAD_MIN_TIME`], or when fewer than two copies are idle, go whole to the cheapest
/// copy. Otherwise the idle copies share the range in proportion to their speed
/// (1 / cost), cut on [`PIECE_ALIGN_SECTORS`] boundaries, no piece below
/// [`PIECE_MIN_SECTORS`] (the slowest copies are dropped until that holds).
/// Empty `cands`: no pieces.
pub fn split(start: u64, n: u64, cands: &[Candidate]) -> Vec<(usize, u64)> {
    let Some(&best) = order(cands).first() else {
        return Vec::new();
    };
    let mut idle: Vec<Candidate> = cands.iter().filter(|c| c.idle).copied().collect();
    if n < SPLIT_MIN_SECTORS || idle.len() < 2 {
        return vec![(best, n)];
    }
    idle.sort_by_key(|c| c.cost);
    // An idle copy's cost is its measured ns per KiB (1: not measured yet).
    let fastest = idle[0].cost;
    if fastest > 1 && fastest.saturating_mul(n / 2) < SPREAD_MIN_TIME.as_nanos() as u64 {
        return vec![(best, n)];
    }
    loop {
        if idle.len() < 2 {
            return vec![(idle.first().map_or(best, |c| c.role), n)];
        }
        // Weights 1/cost, scaled to integers: w_i = max_cost / cost_i.
        let top = idle.iter().map(|c| c.cost.max(1)).max().unwrap_or(1);
        let weights: Vec<u128> = idle
            .iter()
            .map(|c| u128::from(top) * 1024 / u128::from(c.cost.max(1)))
            .collect();
        let sum: u128 = weights.iter().sum();
        // Cut points at cumulative shares, rounded to aligned array sectors.
        let mut pieces = Vec::with_capacity(idle.len());
        let mut acc: u128 = 0;
        let mut prev = start;
        for (i, (c, w)) in idle.iter().zip(&weights).enumerate() {
            acc += w;
            let end = if i + 1 == idle.len() {
                start + n
            } else {
                let exact = start + u64::try_from(u128::from(n) * acc / sum).unwrap_or(n);
                (exact + PIECE_ALIGN_SECTORS / 2) / PIECE_ALIGN_SECTORS * PIECE_ALIGN_SECTORS
            }
            .clamp(prev, start + n);
            pieces.push((c.role, end - prev));
            prev = end;
        }
        if pieces.iter().all(|&(_, len)| len >= PIECE_MIN_SECTORS) {
            // In array order, the fastest copy's piece first.
            return pieces;
        }
        idle.pop(); // drop the slowest and share again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(role: usize, cost: u64, idle: bool) -> Candidate {
        Candidate { role, cost, idle }
    }

    #[test]
    fn cost_is_queue_times_speed() {
        assert_eq!(ReadLoad::with(0, 0).cost_at(0), 1);
        assert_eq!(ReadLoad::with(3, 0).cost_at(0), 4);
        assert_eq!(ReadLoad::with(0, 250).cost_at(0), 250);
        assert_eq!(ReadLoad::with(5, 250).cost_at(0), 1500);
        // Unread for 0.1 s the measurement counts half, for 0.35 s an eighth.
        let half = STALE_HALF_LIFE.as_nanos() as u64;
        assert_eq!(ReadLoad::with(0, 800).cost_at(half - 1), 800);
        assert_eq!(ReadLoad::with(0, 800).cost_at(half), 400);
        assert_eq!(ReadLoad::with(1, 800).cost_at(3 * half + half / 2), 200);
        assert_eq!(ReadLoad::with(0, 800).cost_at(u64::MAX), 1);
        let l = ReadLoad::default();
        l.begin();
        assert!(!l.idle());
        // 4 KiB in 400 µs: 100 µs per KiB; then 7/8 old + 1/8 new.
        l.end(4096, Some(Duration::from_micros(400)));
        assert!(l.idle());
        assert_eq!(l.ns_per_kib(), 100_000);
        l.begin();
        l.end(4096, Some(Duration::from_micros(1200)));
        assert_eq!(l.ns_per_kib(), (7 * 100_000 + 300_000) / 8);
        // A failed read counts for the queue but not for the speed.
        l.begin();
        l.end(4096, None);
        assert_eq!((l.inflight(), l.ns_per_kib()), (0, 125_000));
        // A sample is dated by its completion instant (as the member IO layer stamped
        // it), not by when it is recorded.
        let done = Instant::now();
        let l = ReadLoad::default();
        l.begin();
        l.end_at(4096, Some((Duration::from_micros(400), done)));
        let at = ns_at(done);
        assert_eq!(l.cost_at(at + half - 1), 100_000);
        assert_eq!(l.cost_at(at + half), 50_000);
    }

    #[test]
    fn queue_on_the_fast_member_shifts_reads_to_the_slow_one() {
        // Fast member 100 µs/KiB, slow one 600 µs/KiB (6×).
        let fast = |q| ReadLoad::with(q, 100_000).cost_at(0);
        let slow = |q| ReadLoad::with(q, 600_000).cost_at(0);
        let pick = |qf, qs| order(&[c(0, fast(qf), qf == 0), c(1, slow(qs), qs == 0)])[0];
        // Both idle, or a short queue on the fast one: the fast one.
        assert_eq!(pick(0, 0), 0);
        assert_eq!(pick(4, 0), 0);
        // 6 queued on the fast one cost 7 × 100 > 600: the idle slow one is next.
        assert_eq!(pick(5, 0), 0);
        assert_eq!(pick(6, 0), 1);
        // Both busy: in proportion to speed, the fast one takes 6 for each on the slow one.
        assert_eq!(pick(11, 1), 0);
        assert_eq!(pick(12, 1), 1);
        // Equal cost keeps placement order (the primary copy).
        assert_eq!(order(&[c(0, 5, true), c(1, 5, true)]), vec![0, 1]);
        assert_eq!(order(&[c(0, 6, true), c(1, 5, true)]), vec![1, 0]);
    }

    #[test]
    fn small_or_busy_reads_go_whole_to_the_cheapest_copy() {
        let two = [c(0, 900, true), c(1, 300, true)];
        assert_eq!(split(0, SPLIT_MIN_SECTORS - 1, &two), vec![(1, 255)]);
        // Only one idle copy: no split, even if the busy one is cheaper.
        let busy = [c(0, 900, true), c(1, 300, false)];
        assert_eq!(split(0, 2048, &busy), vec![(1, 2048)]);
        assert_eq!(split(0, 2048, &[]), vec![]);
        // A fast device (1 MiB in 199 µs at 194 ns/KiB): not worth a hand-off; at
        // 196 ns/KiB (200.7 µs) it is. Unmeasured copies (cost 1) are spread.
        let fast = |cost| [c(0, cost, true), c(1, cost, true)];
        assert_eq!(split(0, 2048, &fast(194)), vec![(0, 2048)]);
        assert_eq!(split(0, 2048, &fast(196)), vec![(0, 1024), (1, 1024)]);
        assert_eq!(split(0, 2048, &fast(1)), vec![(0, 1024), (1, 1024)]);
    }

    #[test]
    fn large_reads_are_shared_in_proportion_to_speed() {
        // Equal copies: halves.
        assert_eq!(
            split(0, 2048, &[c(0, 100_000, true), c(1, 100_000, true)]),
            vec![(0, 1024), (1, 1024)]
        );
        assert_eq!(
            split(0, 256, &[c(0, 7_000, true), c(1, 7_000, true)]),
            vec![(0, 128), (1, 128)]
        );
        // 3× faster copy 1 gets 3/4, first in the plan; cuts on 8-sector boundaries.
        assert_eq!(
            split(0, 2048, &[c(0, 300_000, true), c(1, 100_000, true)]),
            vec![(1, 1536), (0, 512)]
        );
        // An unaligned start: the cut is still on an absolute 8-sector boundary.
        assert_eq!(
            split(3, 1000, &[c(0, 100_000, true), c(1, 100_000, true)]),
            vec![(0, 501), (1, 499)]
        );
        // Four copies (RAID10 n4): quarters.
        assert_eq!(
            split(
                0,
                4096,
                &[c(0, 1, true), c(1, 1, true), c(2, 1, true), c(3, 1, true)]
            ),
            vec![(0, 1024), (1, 1024), (2, 1024), (3, 1024)]
        );
        // A 10× slower copy would get 24 sectors, under the minimum: dropped.
        assert_eq!(
            split(0, 256, &[c(0, 20_000, true), c(1, 2_000, true)]),
            vec![(1, 256)]
        );
    }
}
