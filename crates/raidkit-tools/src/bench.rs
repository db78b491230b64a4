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

use crate::error::{Result, ToolsError};
use crate::stats::{Histogram, LatencySummary};
use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::dev::{BlockDev, FileDev};
use raidkit_engine::Array;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
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

/// Something to do IO on.
pub trait Target: Send + Sync {
    /// Read `buf.len()` bytes at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Usable size in bytes.
    fn size(&self) -> u64;
    /// Required buffer and offset alignment (1 when none).
    fn align(&self) -> u64 {
        1
    }
    /// Name for reports.
    fn name(&self) -> String;
    /// Make completed writes durable (run at the end of a write workload, inside the
    /// measured time: data held in a write-back cache counts only once written out).
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A file or block device, optionally with O_DIRECT.
#[derive(Debug)]
pub struct FileTarget {
    file: File,
    path: PathBuf,
    size: u64,
    direct: bool,
    lbs: u64,
}

impl FileTarget {
    /// Open `path` (creating a file of `create_size` bytes if it does not exist).
    pub fn open(
        path: &Path,
        write: bool,
        direct: bool,
        create_size: Option<u64>,
    ) -> Result<FileTarget> {
        let name = path.display().to_string();
        if !path.exists() {
            let Some(sz) = create_size else {
                return Err(ToolsError::Invalid(format!(
                    "{name} does not exist; give --size to create it"
                )));
            };
            let f =
                File::create(path).map_err(|e| ToolsError::io(&name, "creating the file", e))?;
            fill_file(&f, sz).map_err(|e| ToolsError::io(&name, "filling the file", e))?;
        }
        let mut oo = OpenOptions::new();
        oo.read(true).write(write);
        if direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let file = oo.open(path).map_err(|e| {
            if direct && e.raw_os_error() == Some(libc::EINVAL) {
                ToolsError::Invalid(format!(
                    "{name}: this filesystem does not support O_DIRECT (tmpfs?); run without --direct"
                ))
            } else {
                ToolsError::io(&name, "opening", e)
            }
        })?;
        let meta = file
            .metadata()
            .map_err(|e| ToolsError::io(&name, "stat", e))?;
        let (size, lbs) = if meta.file_type().is_block_device() {
            let d = FileDev::open(path, false).map_err(|e| ToolsError::io(&name, "opening", e))?;
            (d.size_bytes(), u64::from(d.logical_block_size()))
        } else {
            (meta.len(), 512)
        };
        Ok(FileTarget {
            file,
            path: path.to_path_buf(),
            size,
            direct,
            lbs,
        })
    }
}

/// Write `size` bytes of non-zero pseudo-random data (so reads hit real blocks, not holes).
fn fill_file(f: &File, size: u64) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    fill_random(&mut buf, 1);
    let mut off = 0;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        f.write_all_at(&buf[..n], off)?;
        off += n as u64;
    }
    f.sync_all()
}

impl Target for FileTarget {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn align(&self) -> u64 {
        if self.direct {
            self.lbs.max(512)
        } else {
            1
        }
    }
    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// IO counters of one member.
#[derive(Debug, Default)]
pub struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

impl Counters {
    /// `(reads, writes, read bytes, written bytes)`.
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
            self.read_bytes.load(Ordering::Relaxed),
            self.write_bytes.load(Ordering::Relaxed),
        )
    }
    /// Zero all counters.
    pub fn reset(&self) {
        for c in [
            &self.reads,
            &self.writes,
            &self.read_bytes,
            &self.write_bytes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// A member device that counts the IOs going through it.
pub struct CountingDev {
    inner: Arc<dyn BlockDev>,
    /// The counters (shared with the bench).
    pub counters: Arc<Counters>,
}

impl CountingDev {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn BlockDev>) -> CountingDev {
        CountingDev {
            inner,
            counters: Arc::new(Counters::default()),
        }
    }
}

impl BlockDev for CountingDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .write_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        self.inner.logical_block_size()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        self.inner.is_hole(offset, len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        self.inner.punch_hole(offset, len)
    }
}

/// An array assembled over counting members.
pub struct ArrayTarget {
    array: Arc<Array>,
    members: Vec<(usize, String, Arc<Counters>)>,
}

impl ArrayTarget {
    /// Assemble the array formed by `devs` (writable if `write`), counting member IO.
    pub fn assemble(devs: Vec<Arc<dyn BlockDev>>, write: bool, force: bool) -> Result<ArrayTarget> {
        let mut counted: Vec<Arc<dyn BlockDev>> = Vec::new();
        let mut counters = Vec::new();
        for d in devs {
            let c = CountingDev::new(d);
            counters.push((c.name().to_string(), c.counters.clone()));
            counted.push(Arc::new(c));
        }
        let array = assemble(
            counted,
            &AssembleOptions {
                writable: write,
                force,
                metadata: None,
                report_only: false,
                backup_file: None,
            },
        )?;
        let array = Arc::new(array);
        // Partial stripes wait briefly for their neighbours, as when serving.
        array.start_writeback();
        let mut members = Vec::new();
        for m in array.members() {
            if let Some((_, c)) = counters.iter().find(|(n, _)| *n == m.device) {
                members.push((m.role.unwrap_or(usize::MAX), m.device.clone(), c.clone()));
            }
        }
        members.sort_by_key(|m| m.0);
        Ok(ArrayTarget { array, members })
    }
    /// Open member paths and assemble.
    pub fn open(paths: &[PathBuf], write: bool, force: bool) -> Result<ArrayTarget> {
        let mut devs: Vec<Arc<dyn BlockDev>> = Vec::new();
        for p in paths {
            let d = FileDev::open(p, write)
                .map_err(|e| ToolsError::io(p.display().to_string(), "opening the member", e))?;
            devs.push(Arc::new(d));
        }
        ArrayTarget::assemble(devs, write, force)
    }
    /// The array.
    pub fn array(&self) -> &Array {
        &self.array
    }
    /// Zero the member counters (assembly reads superblocks).
    pub fn reset_counters(&self) {
        for (_, _, c) in &self.members {
            c.reset();
        }
    }
    /// Per-member shares of the IO counted since the last reset.
    pub fn shares(&self) -> Vec<MemberShare> {
        let vals: Vec<(u64, u64, u64, u64)> = self.members.iter().map(|m| m.2.get()).collect();
        let ios: u64 = vals.iter().map(|v| v.0 + v.1).sum();
        let bytes: u64 = vals.iter().map(|v| v.2 + v.3).sum();
        self.members
            .iter()
            .zip(vals)
            .map(|((role, name, _), (r, w, rb, wb))| MemberShare {
                role: *role,
                device: name.clone(),
                reads: r,
                writes: w,
                bytes: rb + wb,
                io_share: if ios > 0 {
                    (r + w) as f64 / ios as f64
                } else {
                    0.0
                },
                byte_share: if bytes > 0 {
                    (rb + wb) as f64 / bytes as f64
                } else {
                    0.0
                },
            })
            .collect()
    }
    /// Stop the array cleanly (marks it clean after writes).
    pub fn stop(self) -> Result<()> {
        self.array.mark_clean()?;
        Ok(())
    }
}

impl Target for ArrayTarget {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.array.read(off, buf).map_err(io::Error::other)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.array.write(off, buf).map_err(io::Error::other)
    }
    fn size(&self) -> u64 {
        self.array.size_bytes()
    }
    fn name(&self) -> String {
        format!("{} ({})", self.array.name(), self.array.level())
    }
    fn flush(&self) -> io::Result<()> {
        self.array.flush().map_err(io::Error::other)
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
    /// Bytes read + written.
    pub bytes: u64,
    /// Fraction of all member IOs.
    pub io_share: f64,
    /// Fraction of all member bytes.
    pub byte_share: f64,
}

/// Result of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchResult {
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
fn fill_random(buf: &mut [u8], seed: u64) {
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
    let jobs: Vec<Job> = (0..spec.jobs as u64)
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
        .collect();
    if let Some(a) = array {
        a.reset_counters();
    }
    let stop = AtomicBool::new(false);
    let deadline = spec.runtime.map(|d| Instant::now() + d);
    let t0 = Instant::now();
    let outs: Vec<Result<ThreadOut>> = std::thread::scope(|sc| {
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
    });
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
        let o = o?;
        tot.all.merge(&o.all);
        tot.reads.merge(&o.reads);
        tot.writes.merge(&o.writes);
        tot.read_bytes += o.read_bytes;
        tot.write_bytes += o.write_bytes;
    }
    let ios = tot.all.count();
    Ok(BenchResult {
        target: target.name(),
        pattern: spec.pattern.to_string(),
        block_size: bs,
        iodepth: spec.iodepth,
        jobs: spec.jobs,
        direct: align > 1,
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

fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
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

/// A parameter swept by `--sweep`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepParam {
    /// Block size (`bs`).
    BlockSize(Vec<u64>),
    /// Queue depth (`iodepth`, `qd`).
    IoDepth(Vec<usize>),
    /// Jobs (`jobs`, `numjobs`).
    Jobs(Vec<usize>),
    /// Chunk size of an array created on the fly (`chunk`).
    Chunk(Vec<u64>),
    /// Layout of an array created on the fly (`layout`).
    Layout(Vec<String>),
    /// Stripe cache entries (`stripe_cache`; None = automatic, written `auto`).
    StripeCache(Vec<Option<usize>>),
}

impl SweepParam {
    /// Parse `bs=4K,64K`, `iodepth=1,4,16`, `jobs=1,2`, `chunk=16K,64K`, `layout=n2,f2`.
    /// `size` parses sizes.
    pub fn parse(s: &str, size: &dyn Fn(&str) -> Option<u64>) -> Result<SweepParam> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| ToolsError::Invalid(format!("--sweep {s:?}: write PARAM=V1,V2,...")))?;
        let vals: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .collect();
        if vals.is_empty() {
            return Err(ToolsError::Invalid(format!("--sweep {s:?}: no values")));
        }
        let sizes = || -> Result<Vec<u64>> {
            vals.iter()
                .map(|x| {
                    size(x)
                        .ok_or_else(|| ToolsError::Invalid(format!("--sweep: {x:?} is not a size")))
                })
                .collect()
        };
        let nums = || -> Result<Vec<usize>> {
            vals.iter()
                .map(|x| {
                    x.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                        ToolsError::Invalid(format!("--sweep: {x:?} is not a positive number"))
                    })
                })
                .collect()
        };
        Ok(match k.trim().to_ascii_lowercase().as_str() {
            "bs" | "blocksize" | "block-size" => SweepParam::BlockSize(sizes()?),
            "iodepth" | "qd" | "queue-depth" => SweepParam::IoDepth(nums()?),
            "jobs" | "numjobs" => SweepParam::Jobs(nums()?),
            "chunk" => SweepParam::Chunk(sizes()?),
            "layout" => SweepParam::Layout(vals.iter().map(|x| x.to_string()).collect()),
            "stripe_cache" | "stripe-cache" => SweepParam::StripeCache(
                vals.iter()
                    .map(|x| {
                        if x.eq_ignore_ascii_case("auto") {
                            Ok(None)
                        } else {
                            x.parse::<usize>().ok().filter(|&n| n > 0).map(Some).ok_or_else(
                                || {
                                    ToolsError::Invalid(format!(
                                        "--sweep: {x:?} is neither a number of entries nor auto"
                                    ))
                                },
                            )
                        }
                    })
                    .collect::<Result<_>>()?,
            ),
            other => {
                return Err(ToolsError::Invalid(format!(
                    "--sweep: unknown parameter {other:?}: use bs, iodepth, jobs, chunk, layout or stripe_cache"
                )))
            }
        })
    }
    /// Parameter name for reports and charts.
    pub fn name(&self) -> &'static str {
        match self {
            SweepParam::BlockSize(_) => "bs",
            SweepParam::IoDepth(_) => "iodepth",
            SweepParam::Jobs(_) => "jobs",
            SweepParam::Chunk(_) => "chunk",
            SweepParam::Layout(_) => "layout",
            SweepParam::StripeCache(_) => "stripe_cache",
        }
    }
    /// The values as labels.
    pub fn labels(&self) -> Vec<String> {
        match self {
            SweepParam::BlockSize(v) | SweepParam::Chunk(v) => {
                v.iter().map(|&b| crate::trace::size_label(b)).collect()
            }
            SweepParam::IoDepth(v) | SweepParam::Jobs(v) => {
                v.iter().map(|n| n.to_string()).collect()
            }
            SweepParam::Layout(v) => v.clone(),
            SweepParam::StripeCache(v) => v
                .iter()
                .map(|e| e.map_or_else(|| "auto".to_string(), |n| n.to_string()))
                .collect(),
        }
    }
    /// True if each point needs a new array.
    pub fn needs_new_array(&self) -> bool {
        matches!(
            self,
            SweepParam::Chunk(_) | SweepParam::Layout(_) | SweepParam::StripeCache(_)
        )
    }
}

/// One point of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The parameter's value as a label (`64K`, `16`, `f2`).
    pub value: String,
    /// The run.
    pub result: BenchResult,
}

/// A finished sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepResult {
    /// Parameter name.
    pub param: String,
    /// Points in the order given.
    pub points: Vec<SweepPoint>,
}

impl SweepResult {
    /// Table.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            self.param, "MiB/s", "IOPS", "p50", "p99", "p99.9"
        );
        for p in &self.points {
            let r = &p.result;
            s += &format!(
                "{:>8} {:>10.1} {:>10.0} {:>10} {:>10} {:>10}\n",
                p.value,
                r.mib_s,
                r.iops,
                us(r.lat_ns.p50),
                us(r.lat_ns.p99),
                us(r.lat_ns.p999)
            );
        }
        s
    }
}

/// What an array created on the fly looks like.
#[derive(Clone, Debug)]
pub struct ArraySpec {
    /// Level.
    pub level: raidkit_layout::Level,
    /// Members.
    pub raid_devices: usize,
    /// Member file size in bytes.
    pub member_size: u64,
    /// Chunk in bytes (None: default).
    pub chunk: Option<u64>,
    /// Layout name (None: default).
    pub layout: Option<String>,
}

/// Create an array of sparse member files in `dir` (which must exist) and assemble it
/// writable with counting members. The files are named `bench-<tag>-<role>.img`.
pub fn create_array(
    dir: &Path,
    tag: &str,
    spec: &ArraySpec,
) -> Result<(ArrayTarget, Vec<PathBuf>)> {
    use raidkit_engine::create::{create, CreateOptions, MemberSpec};
    let paths: Vec<PathBuf> = (0..spec.raid_devices)
        .map(|i| dir.join(format!("bench-{tag}-{i}.img")))
        .collect();
    for p in &paths {
        if p.exists() {
            std::fs::remove_file(p).map_err(|e| {
                ToolsError::io(p.display().to_string(), "removing an old bench member", e)
            })?;
        }
    }
    let mut o = CreateOptions::new(
        spec.level,
        paths.iter().cloned().map(MemberSpec::Path).collect(),
    );
    o.chunk_bytes = spec.chunk;
    o.layout = spec
        .layout
        .as_deref()
        .map(|l| raidkit_layout::names::parse_layout(spec.level, l))
        .transpose()
        .map_err(|e| ToolsError::Invalid(e.to_string()))?;
    o.assume_clean = true;
    o.create_size = Some(spec.member_size);
    o.homehost = None;
    o.name = "bench".into();
    let a = create(&o, &mut |_, _| {})?;
    a.stop()?;
    Ok((ArrayTarget::open(&paths, true, false)?, paths))
}

/// Remove member files made by [`create_array`].
pub fn remove_array(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
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
    fn sweep_parse() {
        let sz = |s: &str| {
            s.trim_end_matches('K')
                .parse::<u64>()
                .ok()
                .map(|v| v * 1024)
        };
        assert_eq!(
            SweepParam::parse("bs=4K,64K", &sz).unwrap(),
            SweepParam::BlockSize(vec![4096, 65536])
        );
        assert_eq!(
            SweepParam::parse("qd=1,8", &sz).unwrap(),
            SweepParam::IoDepth(vec![1, 8])
        );
        assert!(SweepParam::parse("qd=0", &sz).is_err());
        assert!(SweepParam::parse("colour=red", &sz).is_err());
        let sc = SweepParam::parse("stripe_cache=512,32768,auto", &sz).unwrap();
        assert_eq!(
            sc,
            SweepParam::StripeCache(vec![Some(512), Some(32768), None])
        );
        assert_eq!(sc.labels(), vec!["512", "32768", "auto"]);
        assert!(sc.needs_new_array());
        assert_eq!(
            SweepParam::parse("stripe_cache=0", &sz)
                .unwrap_err()
                .to_string(),
            "--sweep: \"0\" is neither a number of entries nor auto"
        );
        assert!(SweepParam::parse("bs", &sz).is_err());
    }

    #[test]
    fn aligned_buffer() {
        let mut b = AlignedBuf::new(8192, 4096);
        assert_eq!(b.get().as_ptr() as usize % 4096, 0);
        assert_eq!(b.get().len(), 8192);
    }
}
