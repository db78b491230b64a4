//! A small fio: sequential, random and mixed workloads over a file, a block device or an
//! array assembled through the engine, with throughput, IOPS, latency percentiles and, for
//! arrays, the share of IOs and bytes each member served.
//!
//! Model (also in `docs/TOOLS.md`):
//!
//! * `jobs` independent jobs, each with `iodepth` threads doing synchronous IO, so a job
//!   keeps `iodepth` IOs outstanding (fio's `ioengine=psync` with `numjobs × iodepth`
//!   threads; there is no async engine).
//! * Sequential patterns: job `j` works through slice `j` of the region; its threads take
//!   the next block from one shared cursor, so the job's IO stream is sequential.
//!   Random patterns: block-aligned offsets drawn uniformly over the whole region
//!   (xorshift, seeded per thread).
//! * Mixed patterns (`randrw:P`, `rw:P`): IO number `k` of a job is a read when
//!   `⌊(k+1)·P/100⌋ > ⌊k·P/100⌋`, i.e. exactly P reads in every 100 IOs.
//! * Amount: `size` bytes per job, or `runtime` (wrapping around the slice), or by default
//!   one pass over the job's slice.

mod sweep;
mod target;

pub use sweep::{SweepParam, SweepPoint, SweepResult};
pub use target::{
    create_array, remove_array, ArraySpec, ArrayTarget, Counters, CountingDev, FileTarget, Target,
};

use crate::error::{Result, ToolsError};
use crate::human;
use crate::machine::Machine;
use crate::stats::{Histogram, LatencySummary};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Sequential reads (`read`).
    SeqRead,
    /// Sequential writes (`write`).
    SeqWrite,
    /// Random reads (`randread`).
    RandRead,
    /// Random writes (`randwrite`).
    RandWrite,
    /// Sequential mix with this percentage of reads (`rw:P`).
    SeqMix(u8),
    /// Random mix with this percentage of reads (`randrw:P`).
    RandMix(u8),
}

impl Pattern {
    /// Parse fio's words: `read`, `write`, `randread`, `randwrite`, `rw[:P]`, `randrw[:P]`
    /// (P = read percentage, default 50); `seqread`/`seq-read` etc. also accepted.
    pub fn parse(s: &str) -> Result<Pattern> {
        let w = s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        let (name, pct) = match w.split_once(':') {
            Some((n, p)) => {
                let p: u8 = p.parse().ok().filter(|&p| p <= 100).ok_or_else(|| {
                    ToolsError::Invalid(format!("{s:?}: the read percentage must be 0..=100"))
                })?;
                (n.to_string(), Some(p))
            }
            None => (w, None),
        };
        let p = match (name.as_str(), pct) {
            ("read" | "seqread", None) => Pattern::SeqRead,
            ("write" | "seqwrite", None) => Pattern::SeqWrite,
            ("randread", None) => Pattern::RandRead,
            ("randwrite", None) => Pattern::RandWrite,
            ("rw" | "readwrite" | "seqrw", p) => Pattern::SeqMix(p.unwrap_or(50)),
            ("randrw", p) => Pattern::RandMix(p.unwrap_or(50)),
            _ => {
                return Err(ToolsError::Invalid(format!(
                    "unknown workload {s:?}: use read, write, randread, randwrite, rw:P or randrw:P"
                )))
            }
        };
        Ok(p)
    }
    /// Percentage of reads.
    pub fn read_pct(self) -> u8 {
        match self {
            Pattern::SeqRead | Pattern::RandRead => 100,
            Pattern::SeqWrite | Pattern::RandWrite => 0,
            Pattern::SeqMix(p) | Pattern::RandMix(p) => p,
        }
    }
    /// True for random offsets.
    pub fn is_random(self) -> bool {
        matches!(
            self,
            Pattern::RandRead | Pattern::RandWrite | Pattern::RandMix(_)
        )
    }
    /// True if the workload writes.
    pub fn writes(self) -> bool {
        self.read_pct() < 100
    }
    /// In words: `sequential read`, `random write`, `random 40% read / 60% write`.
    pub fn describe(self) -> String {
        match self {
            Pattern::SeqRead => "sequential read".into(),
            Pattern::SeqWrite => "sequential write".into(),
            Pattern::RandRead => "random read".into(),
            Pattern::RandWrite => "random write".into(),
            Pattern::SeqMix(p) => format!("sequential {p}% read / {}% write", 100 - p),
            Pattern::RandMix(p) => format!("random {p}% read / {}% write", 100 - p),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::SeqRead => f.write_str("read"),
            Pattern::SeqWrite => f.write_str("write"),
            Pattern::RandRead => f.write_str("randread"),
            Pattern::RandWrite => f.write_str("randwrite"),
            Pattern::SeqMix(p) => write!(f, "rw:{p}"),
            Pattern::RandMix(p) => write!(f, "randrw:{p}"),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// Pattern.
    pub pattern: Pattern,
    /// Block size in bytes.
    pub block_size: u64,
    /// Outstanding IOs per job (threads per job).
    pub iodepth: usize,
    /// Jobs.
    pub jobs: usize,
    /// Run for this long (time based) ...
    pub runtime: Option<Duration>,
    /// ... or transfer this many bytes per job; neither: one pass over the job's slice.
    pub size: Option<u64>,
    /// Start of the region used, bytes.
    pub offset: u64,
    /// Length of the region used (None: to the end of the target).
    pub region: Option<u64>,
    /// Seed for random offsets.
    pub seed: u64,
}

impl Default for BenchSpec {
    fn default() -> Self {
        BenchSpec {
            pattern: Pattern::SeqRead,
            block_size: 4096,
            iodepth: 1,
            jobs: 1,
            runtime: None,
            size: None,
            offset: 0,
            region: None,
            seed: 0x5eed,
        }
    }
}

/// Share of the array's member IO served by one member.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberShare {
    /// Role in the array.
    pub role: usize,
    /// Device path.
    pub device: String,
    /// Reads it served.
    pub reads: u64,
    /// Writes it served.
    pub writes: u64,
    /// Bytes read from it.
    pub read_bytes: u64,
    /// Bytes written to it.
    pub write_bytes: u64,
    /// Bytes read + written.
    pub bytes: u64,
    /// Latency of its reads and writes as the engine saw them, ns (None without IO).
    pub lat_ns: Option<LatencySummary>,
    /// Fraction of all member IOs.
    pub io_share: f64,
    /// Fraction of all member bytes.
    pub byte_share: f64,
}

/// What an array under test is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArrayInfo {
    /// `raid6`, ...
    pub level: String,
    /// Layout name (`left-symmetric`, `n2`, ...).
    pub layout: String,
    /// Whether the layout is the level's default (then titles leave it out).
    pub default_layout: bool,
    /// Member slots.
    pub raid_disks: usize,
    /// Size of each present member device, bytes.
    pub member_bytes: Vec<u64>,
    /// Chunk, bytes (0 for levels without one).
    pub chunk_bytes: u64,
    /// Array size, bytes.
    pub array_bytes: u64,
}

impl ArrayInfo {
    /// `raid6 4×64 MiB, 64 KiB chunk` (`raid10 n2 ...` when the layout is not the
    /// default); the part named `omit` (`chunk`, `layout`) is left out (it is what a sweep
    /// varies).
    pub fn describe(&self, omit: Option<&str>) -> String {
        let mut s = self.level.clone();
        if (!self.default_layout || self.level == "raid10") && omit != Some("layout") {
            s += &format!(" {}", self.layout);
        }
        let lo = self.member_bytes.iter().copied().min().unwrap_or(0);
        let hi = self.member_bytes.iter().copied().max().unwrap_or(0);
        let size = if lo == hi {
            human::bytes(lo as f64)
        } else {
            format!("{}–{}", human::bytes(lo as f64), human::bytes(hi as f64))
        };
        s += &format!(" {}×{size}", self.raid_disks);
        if self.member_bytes.len() < self.raid_disks {
            s += &format!(" ({} missing)", self.raid_disks - self.member_bytes.len());
        }
        if self.chunk_bytes > 0 && omit != Some("chunk") {
            s += &format!(", {} chunk", human::bytes(self.chunk_bytes as f64));
        }
        s
    }
}

/// Result of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchResult {
    /// When the run started, Unix seconds.
    pub started_unix: u64,
    /// Where it ran.
    pub machine: Machine,
    /// The array under test (array targets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayInfo>,
    /// What the target is when it is not an array (`file on ext4`, `block device`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_kind: Option<String>,
    /// Stripe cache of an array target (RAID4/5/6), at the end of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stripe_cache: Option<raidkit_engine::array::StripeCacheStats>,
    /// Target name.
    pub target: String,
    /// Pattern (`randrw:40`).
    pub pattern: String,
    /// Block size, bytes.
    pub block_size: u64,
    /// Outstanding IOs per job.
    pub iodepth: usize,
    /// Jobs.
    pub jobs: usize,
    /// O_DIRECT.
    pub direct: bool,
    /// Wall time, seconds.
    pub seconds: f64,
    /// IOs completed.
    pub ios: u64,
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// IOs per second.
    pub iops: f64,
    /// MiB/s read + written.
    pub mib_s: f64,
    /// Latency of all IOs, ns.
    pub lat_ns: LatencySummary,
    /// Latency of reads, ns (None without reads).
    pub read_lat_ns: Option<LatencySummary>,
    /// Latency of writes, ns (None without writes).
    pub write_lat_ns: Option<LatencySummary>,
    /// Per-member shares (arrays only).
    pub members: Option<Vec<MemberShare>>,
}

/// Fill with xorshift bytes (never all zeros).
pub(crate) fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

/// A buffer of `len` bytes aligned to `align`, carved out of a larger Vec (no unsafe).
struct AlignedBuf {
    v: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize, align: usize) -> AlignedBuf {
        let align = align.max(1);
        let v = vec![0u8; len + align];
        let start = v.as_ptr().align_offset(align).min(align);
        AlignedBuf { v, start, len }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.v[self.start..self.start + self.len]
    }
}

struct Job {
    start: u64,
    len: u64,
    budget: u64,
    cursor: AtomicU64,
    ios: AtomicU64,
}

#[derive(Default)]
struct ThreadOut {
    all: Histogram,
    reads: Histogram,
    writes: Histogram,
    read_bytes: u64,
    write_bytes: u64,
}

/// Run `spec` on `target`. `members` gives per-member shares for arrays (counters are
/// reset before the run).
pub fn run(
    target: &dyn Target,
    spec: &BenchSpec,
    array: Option<&ArrayTarget>,
) -> Result<BenchResult> {
    let jobs = plan_jobs(target, spec)?;
    if let Some(a) = array {
        a.reset_counters();
    }
    let t0 = Instant::now();
    let started_unix = human::now_unix();
    let outs = run_workers(target, spec, &jobs);
    let wrote = outs
        .iter()
        .any(|o| o.as_ref().is_ok_and(|o| o.write_bytes > 0));
    if wrote {
        target
            .flush()
            .map_err(|e| ToolsError::io(target.name(), "flushing after the workload", e))?;
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    let mut tot = ThreadOut::default();
    for o in outs {
        tot.merge(&o?);
    }
    let ios = tot.all.count();
    Ok(BenchResult {
        started_unix,
        machine: Machine::this(),
        array: array.map(|a| a.info()),
        target_kind: target.kind(),
        target: target.name(),
        pattern: spec.pattern.to_string(),
        block_size: spec.block_size,
        iodepth: spec.iodepth,
        jobs: spec.jobs,
        direct: target.align() > 1,
        seconds: secs,
        ios,
        reads: tot.reads.count(),
        writes: tot.writes.count(),
        read_bytes: tot.read_bytes,
        write_bytes: tot.write_bytes,
        iops: ios as f64 / secs,
        mib_s: (tot.read_bytes + tot.write_bytes) as f64 / secs / (1u64 << 20) as f64,
        lat_ns: tot.all.summary(),
        read_lat_ns: (tot.reads.count() > 0).then(|| tot.reads.summary()),
        write_lat_ns: (tot.writes.count() > 0).then(|| tot.writes.summary()),
        members: array.map(|a| a.shares()),
        stripe_cache: array.and_then(|a| a.array().stripe_cache_stats()),
    })
}

impl ThreadOut {
    /// Add another thread's counts and latencies to these.
    fn merge(&mut self, o: &ThreadOut) {
        self.all.merge(&o.all);
        self.reads.merge(&o.reads);
        self.writes.merge(&o.writes);
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
    }
}

/// The jobs of `spec` on `target`, once the block size, offset, region, depth and job
/// count are checked: each job's first byte, its blocks, and how many IOs it may do.
fn plan_jobs(target: &dyn Target, spec: &BenchSpec) -> Result<Vec<Job>> {
    let bs = spec.block_size;
    let align = target.align();
    if bs == 0 || !bs.is_multiple_of(align) || !spec.offset.is_multiple_of(align) {
        return Err(ToolsError::Invalid(format!(
            "block size {bs} and offset {} must be non-zero multiples of {align} for this target",
            spec.offset
        )));
    }
    if spec.iodepth == 0 || spec.jobs == 0 || spec.iodepth * spec.jobs > 1024 {
        return Err(ToolsError::Invalid(
            "iodepth and jobs must be ≥ 1, with at most 1024 threads in all".into(),
        ));
    }
    let end = target.size();
    let region = spec.region.unwrap_or(end.saturating_sub(spec.offset));
    if spec.offset.checked_add(region).is_none_or(|e| e > end) {
        return Err(ToolsError::Invalid(format!(
            "region {}+{region} is beyond the end of {} ({end} bytes)",
            spec.offset,
            target.name()
        )));
    }
    let blocks = region / bs;
    let per_job = if spec.pattern.is_random() {
        blocks
    } else {
        blocks / spec.jobs as u64
    };
    if per_job == 0 {
        return Err(ToolsError::Invalid(format!(
            "the region ({region} bytes) holds fewer than one {bs}-byte block per job"
        )));
    }
    Ok((0..spec.jobs as u64)
        .map(|j| {
            let start = if spec.pattern.is_random() {
                spec.offset
            } else {
                spec.offset + j * per_job * bs
            };
            let budget = match (spec.size, spec.runtime) {
                (Some(s), _) => (s / bs).max(1),
                (None, Some(_)) => u64::MAX,
                (None, None) => per_job,
            };
            Job {
                start,
                len: per_job,
                budget,
                cursor: AtomicU64::new(0),
                ios: AtomicU64::new(0),
            }
        })
        .collect())
}

/// Run `iodepth` worker threads per job until each job's budget or the runtime is spent;
/// what each thread did.
fn run_workers(target: &dyn Target, spec: &BenchSpec, jobs: &[Job]) -> Vec<Result<ThreadOut>> {
    let stop = AtomicBool::new(false);
    let deadline = spec.runtime.map(|d| Instant::now() + d);
    std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            for t in 0..spec.iodepth {
                let stop = &stop;
                let seed =
                    spec.seed ^ ((j as u64) << 32 | t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                hs.push(sc.spawn(move || worker(target, spec, job, seed, deadline, stop)));
            }
        }
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ToolsError::Invalid("a bench thread panicked".into())))
            })
            .collect()
    })
}

fn worker(
    target: &dyn Target,
    spec: &BenchSpec,
    job: &Job,
    seed: u64,
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Result<ThreadOut> {
    let bs = spec.block_size;
    let mut buf = AlignedBuf::new(bs as usize, target.align() as usize);
    fill_random(buf.get(), seed);
    let mut out = ThreadOut::default();
    let mut rng = seed | 1;
    let pct = u64::from(spec.pattern.read_pct());
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(d) = deadline {
            if Instant::now() >= d {
                stop.store(true, Ordering::Relaxed);
                break;
            }
        }
        let k = job.cursor.fetch_add(1, Ordering::Relaxed);
        if k >= job.budget {
            break;
        }
        let block = if spec.pattern.is_random() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % job.len
        } else {
            k % job.len
        };
        let off = job.start + block * bs;
        let is_read = (k + 1) * pct / 100 > k * pct / 100;
        let t = Instant::now();
        let r = if is_read {
            target.read_at(buf.get(), off)
        } else {
            target.write_at(buf.get(), off)
        };
        let ns = t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        if let Err(e) = r {
            stop.store(true, Ordering::Relaxed);
            return Err(ToolsError::io(
                target.name(),
                if is_read { "bench read" } else { "bench write" },
                e,
            ));
        }
        out.all.record(ns);
        if is_read {
            out.reads.record(ns);
            out.read_bytes += bs;
        } else {
            out.writes.record(ns);
            out.write_bytes += bs;
        }
        job.ios.fetch_add(1, Ordering::Relaxed);
    }
    Ok(out)
}

pub(crate) fn us(ns: u64) -> String {
    human::duration_ns(ns as f64)
}

impl BenchResult {
    /// Human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{}: {} bs={} iodepth={} jobs={}{}\n",
            self.target,
            self.pattern,
            crate::trace::size_label(self.block_size),
            self.iodepth,
            self.jobs,
            if self.direct { " direct" } else { "" }
        );
        s += &format!(
            "  {:.1} MiB/s, {:.0} IOPS, {} IOs ({} reads, {} writes) in {:.2} s\n",
            self.mib_s, self.iops, self.ios, self.reads, self.writes, self.seconds
        );
        let lat = |name: &str, l: &LatencySummary| {
            format!(
                "  {name:<6} lat p50 {} p90 {} p99 {} p99.9 {} max {} (mean {})\n",
                us(l.p50),
                us(l.p90),
                us(l.p99),
                us(l.p999),
                us(l.max),
                us(l.mean as u64)
            )
        };
        if let Some(l) = &self.read_lat_ns {
            s += &lat("read", l);
        }
        if let Some(l) = &self.write_lat_ns {
            s += &lat("write", l);
        }
        if let Some(ms) = &self.members {
            s += "  member share (IOs / bytes):\n";
            for m in ms {
                s += &format!(
                    "    role {:<3} {:<32} {:>5.1}% {:>5.1}%  ({} reads, {} writes)\n",
                    m.role,
                    m.device,
                    m.io_share * 100.0,
                    m.byte_share * 100.0,
                    m.reads,
                    m.writes
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert_eq!(Pattern::parse("randrw:40").unwrap(), Pattern::RandMix(40));
        assert_eq!(Pattern::parse("seq-read").unwrap(), Pattern::SeqRead);
        assert_eq!(Pattern::parse("rw").unwrap(), Pattern::SeqMix(50));
        assert!(Pattern::parse("randrw:101").is_err());
        assert!(Pattern::parse("trim").is_err());
        assert_eq!(Pattern::RandMix(75).to_string(), "randrw:75");
    }

    #[test]
    fn mix_is_exact() {
        for pct in [0u64, 40, 75, 100] {
            let reads = (0..1000u64)
                .filter(|k| (k + 1) * pct / 100 > k * pct / 100)
                .count();
            assert_eq!(reads as u64, pct * 10);
        }
    }

    #[test]
    fn aligned_buffer() {
        let mut b = AlignedBuf::new(8192, 4096);
        assert_eq!(b.get().as_ptr() as usize % 4096, 0);
        assert_eq!(b.get().len(), 8192);
    }
}
