//! Benchmark support shared by `raidkit bench parity` and the ISA-L comparison
//! (`raidkit-bench-isal`): 64-byte aligned stripe sets that cycle over a working set,
//! the five kernel operations, and a multi-threaded timing harness.
//!
//! Throughput is always counted as **data bytes of the stripe** (`k × chunk` per call,
//! 10^9 bytes per GB) for every operation, so that the numbers of different operations
//! and of different libraries are directly comparable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::Parity;

/// Largest number of data blocks a [`Stripes`] set supports.
pub const MAX_DATA: usize = 32;

/// Alignment of every block in a [`Stripes`] set (bytes).
pub const ALIGN: usize = 64;

/// One kernel operation of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// RAID5 parity: `P = ⊕ data` ([`crate::xor_gen`]).
    Xor,
    /// RAID6 syndromes P and Q ([`crate::pq_gen`]).
    Pq,
    /// Two data blocks from P and Q ([`crate::recover_two`]).
    Rec2,
    /// One data block from Q ([`crate::recover_one_q`]).
    Rec1q,
    /// One data block from P ([`crate::recover_one_p`]).
    Rec1p,
}

impl Op {
    /// Every operation, in table order.
    pub const ALL: [Op; 5] = [Op::Xor, Op::Pq, Op::Rec2, Op::Rec1q, Op::Rec1p];

    /// Name used on the command line and in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Op::Xor => "xor",
            Op::Pq => "pq",
            Op::Rec2 => "rec2",
            Op::Rec1q => "rec1q",
            Op::Rec1p => "rec1p",
        }
    }

    /// The operation called `name` (see [`Op::name`]).
    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == name)
    }

    /// Slots lost by the recovery operations for `k` data blocks (`a`, `b`); the
    /// benchmark reconstructs the second (first if `k == 2`) and the middle data block.
    pub fn lost_slots(k: usize) -> (usize, usize) {
        let a = usize::from(k > 2);
        let b = (k / 2).max(a + 1).min(k.saturating_sub(1));
        (a, b)
    }
}

/// A 64-byte aligned buffer of zero-initialised bytes.
pub struct AlignedBuf {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes starting at a multiple of [`ALIGN`].
    pub fn new(len: usize) -> AlignedBuf {
        let buf = vec![0u8; len + ALIGN];
        let off = buf.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf { buf, off, len }
    }

    /// The aligned bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }

    /// The aligned bytes, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// Stripes of `k` data blocks plus P and Q, each block `chunk` bytes and 64-byte
/// aligned, filled with pseudo-random data with consistent P/Q; enough stripes to
/// cover a working set (one stripe for a working set of 0).
///
/// Aligned to 128 bytes so that the states of different threads kept side by side (a
/// `Vec<Mutex<Stripes>>`) never share a cache line: the round-robin cursor is written on
/// every call, and false sharing would halve small-chunk multi-thread throughput.
#[repr(align(128))]
pub struct Stripes {
    buf: AlignedBuf,
    k: usize,
    chunk: usize,
    n: usize,
    next: usize,
}

impl Stripes {
    /// A set of stripes of `k` (`1..=MAX_DATA`) data blocks of `chunk` bytes whose total
    /// size (data, P and Q) is about `working_set` bytes (at least one stripe). `chunk`
    /// is rounded up to a multiple of [`ALIGN`]. Different `seed`s give different data.
    pub fn new(k: usize, chunk: usize, working_set: usize, seed: u64) -> Stripes {
        let k = k.clamp(1, MAX_DATA);
        let chunk = chunk.max(1).div_ceil(ALIGN) * ALIGN;
        let stripe = (k + 2) * chunk;
        let n = (working_set / stripe).max(1);
        let mut buf = AlignedBuf::new(n * stripe);
        // Pseudo-random first MiB (at most), repeated: the kernels' speed does not
        // depend on the data, and big working sets are set up quickly.
        let bytes = buf.as_mut_slice();
        let pat = bytes.len().min(1 << 20);
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for w in bytes[..pat].chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        let mut done = pat;
        while done < bytes.len() {
            let n = done.min(bytes.len() - done);
            bytes.copy_within(..n, done);
            done += n;
        }
        let mut s = Stripes {
            buf,
            k,
            chunk,
            n,
            next: 0,
        };
        for i in 0..n {
            s.with_stripe(i, |b| run(crate::active(), Op::Pq, k, b));
        }
        s
    }

    /// Data blocks per stripe.
    pub fn data_disks(&self) -> usize {
        self.k
    }

    /// Bytes per block.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Number of stripes.
    pub fn stripes(&self) -> usize {
        self.n
    }

    /// Data bytes per stripe (`k × chunk`): the unit of throughput.
    pub fn data_bytes(&self) -> usize {
        self.k * self.chunk
    }

    /// Calls `f` with the `k + 2` blocks of stripe `i % stripes()`: data slots
    /// `0..k`, then P, then Q.
    pub fn with_stripe<R>(&mut self, i: usize, f: impl FnOnce(&mut [&mut [u8]]) -> R) -> R {
        let stripe = (self.k + 2) * self.chunk;
        let i = i % self.n;
        let bytes = &mut self.buf.as_mut_slice()[i * stripe..(i + 1) * stripe];
        let mut blocks: [&mut [u8]; MAX_DATA + 2] = std::array::from_fn(|_| &mut [][..]);
        for (slot, b) in blocks.iter_mut().zip(bytes.chunks_exact_mut(self.chunk)) {
            *slot = b;
        }
        f(&mut blocks[..self.k + 2])
    }

    /// Like [`Stripes::with_stripe`] for the next stripe in round-robin order.
    pub fn with_next<R>(&mut self, f: impl FnOnce(&mut [&mut [u8]]) -> R) -> R {
        let i = self.next;
        self.next = (i + 1) % self.n;
        self.with_stripe(i, f)
    }
}

/// Runs `op` with path `path` on one stripe's blocks (`k` data blocks, then P, then Q;
/// see [`Stripes::with_stripe`]). Recovery operations rebuild the slots of
/// [`Op::lost_slots`] in place (so a consistent stripe stays consistent). Does nothing
/// if `blocks` has fewer than `k + 2` entries or `k` is outside `1..=MAX_DATA`
/// (`2..` for `rec2`).
pub fn run(path: &Parity, op: Op, k: usize, blocks: &mut [&mut [u8]]) {
    if k == 0 || k > MAX_DATA || blocks.len() < k + 2 || (op == Op::Rec2 && k < 2) {
        return;
    }
    let (data, pq) = blocks.split_at_mut(k);
    let (p, q) = pq.split_at_mut(1);
    let (p, q) = (&mut *p[0], &mut *q[0]);
    let (a, b) = Op::lost_slots(k);
    match op {
        Op::Xor | Op::Pq => {
            let mut views: [&[u8]; MAX_DATA] = [&[]; MAX_DATA];
            for (v, d) in views.iter_mut().zip(data.iter()) {
                *v = d;
            }
            if op == Op::Xor {
                path.xor_gen(&views[..k], p);
            } else {
                path.pq_gen(&views[..k], p, q);
            }
        }
        Op::Rec2 => path.recover_two(data, a, b, p, q),
        Op::Rec1q => path.recover_one_q(data, a, q),
        Op::Rec1p => path.recover_one_p(data, a, p),
    }
}

/// CPU time consumed by the calling thread, in nanoseconds (Linux
/// `/proc/thread-self/schedstat`), or `None` where that is not available.
pub fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Result of [`measure`]: throughput of all threads together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Sum over threads of bytes / wall-clock seconds, in GB/s (10^9), best repeat.
    pub gbps: f64,
    /// Sum over threads of bytes / own CPU seconds, in GB/s (10^9), best repeat: not
    /// distorted by other processes taking the CPU, but blind to threads that did not
    /// actually run at the same time. Equals `gbps` where CPU time is unavailable.
    pub cpu_gbps: f64,
}

/// Times a workload on `threads` threads, each with its own state from `init(t)`
/// (built on that thread, so its memory is local to it). `step(&mut state)` does one
/// unit of work and returns the bytes it processed. All threads start together behind
/// a barrier and run for `time` per repeat; of `repeats` repeats the best is reported
/// (wall and CPU figures maximised separately).
pub fn measure<S, I, F>(threads: usize, time: Duration, repeats: usize, init: I, step: F) -> Sample
where
    I: Fn(usize) -> S + Sync,
    F: Fn(&mut S) -> usize + Sync,
{
    let threads = threads.max(1);
    let repeats = repeats.max(1);
    let start = Barrier::new(threads + 1);
    let done = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let mut best = Sample::default();
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (init, step, start, done, stop) = (&init, &step, &start, &done, &stop);
                sc.spawn(move || {
                    let mut st = init(t);
                    step(&mut st); // warm-up: page faults, caches, branch predictors
                    let mut out = Vec::with_capacity(repeats);
                    for _ in 0..repeats {
                        start.wait();
                        let wall = Instant::now();
                        let cpu0 = thread_cpu_ns();
                        let mut bytes = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            bytes += step(&mut st) as u64;
                        }
                        let w = wall.elapsed().as_nanos().max(1) as f64;
                        let c = match (cpu0, thread_cpu_ns()) {
                            (Some(a), Some(b)) if b > a => (b - a) as f64,
                            _ => w,
                        };
                        out.push((bytes as f64 / w, bytes as f64 / c));
                        done.wait();
                    }
                    out
                })
            })
            .collect();
        for _ in 0..repeats {
            stop.store(false, Ordering::Relaxed);
            start.wait();
            std::thread::sleep(time);
            stop.store(true, Ordering::Relaxed);
            done.wait();
        }
        let per: Vec<Vec<(f64, f64)>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        for r in 0..repeats {
            let w: f64 = per.iter().filter_map(|v| v.get(r)).map(|x| x.0).sum();
            let c: f64 = per.iter().filter_map(|v| v.get(r)).map(|x| x.1).sum();
            best.gbps = best.gbps.max(w);
            best.cpu_gbps = best.cpu_gbps.max(c);
        }
    });
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_are_aligned_consistent_and_survive_every_op() {
        let mut s = Stripes::new(5, 1000, 3 * 7 * 1024, 7);
        assert_eq!(s.chunk(), 1024);
        assert_eq!(s.stripes(), 3);
        let before: Vec<u8> = s.buf.as_slice().to_vec();
        for op in Op::ALL {
            for i in 0..3 {
                s.with_stripe(i, |b| {
                    for blk in b.iter() {
                        assert_eq!(blk.as_ptr() as usize % ALIGN, 0);
                    }
                    for path in crate::implementations() {
                        run(path, op, 5, b);
                    }
                });
            }
            assert_eq!(s.buf.as_slice(), &before[..], "{op:?}");
        }
    }

    #[test]
    fn thread_states_do_not_share_cache_lines() {
        assert_eq!(std::mem::align_of::<Stripes>(), 128);
        assert_eq!(std::mem::size_of::<Stripes>() % 128, 0);
    }

    #[test]
    fn lost_slots_distinct_in_range() {
        for k in 2..=MAX_DATA {
            let (a, b) = Op::lost_slots(k);
            assert!(a < b && b < k, "{k}: {a} {b}");
        }
        assert_eq!(Op::lost_slots(8), (1, 4));
    }

    #[test]
    fn op_names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.name()), Some(op));
        }
        assert_eq!(Op::parse("nope"), None);
    }

    #[test]
    fn measure_counts_bytes() {
        let s = measure(
            2,
            Duration::from_millis(5),
            2,
            |_| 0u64,
            |n| {
                *n += 1;
                4096
            },
        );
        assert!(s.gbps > 0.0 && s.cpu_gbps > 0.0);
    }
}
