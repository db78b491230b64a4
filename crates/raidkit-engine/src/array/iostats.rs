//! IO statistics of an array as its clients see it (reads, writes, flushes, sizes,
//! latencies), cumulative since start, plus an optional per-IO trace in raidkit's JSON-lines
//! trace format (`docs/TOOLS.md`). Windows are computed by readers from two snapshots.

use serde::Serialize;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One copy of `T` per CPU, each on cache lines of its own: counters that every thread
/// adds to on every IO and that are read rarely (statistics). A thread adds to the copy
/// of the CPU it runs on, so two cores never write the same cache line (one shared
/// counter bounced between the cores on every member IO: 7.4 % of a 4 KiB random-write
/// run's CPU, `perf`); a reader sums the copies. The copies are atomics, so a thread
/// moved to another CPU mid-update, or CPUs sharing a copy (more CPUs than copies), lose
/// no count.
pub(crate) struct PerCpu<T> {
    shards: Box<[Padded<T>]>,
}

/// Two cache lines (the adjacent-line prefetcher pairs them).
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

/// Copies per [`PerCpu`]: the CPUs the system has (a power of two, at most 64).
fn shard_count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        // SAFETY: sysconf reads a system constant; no memory is passed.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        usize::try_from(n)
            .unwrap_or(1)
            .clamp(1, 64)
            .next_power_of_two()
    })
}

impl<T: Default> Default for PerCpu<T> {
    fn default() -> Self {
        PerCpu {
            shards: (0..shard_count()).map(|_| Padded::default()).collect(),
        }
    }
}

impl<T> PerCpu<T> {
    /// The copy of the CPU this thread runs on.
    pub(crate) fn local(&self) -> &T {
        &self.shards[self.local_index()].0
    }

    /// Which copy [`PerCpu::local`] gives now (for [`PerCpu::at`] later, from any CPU).
    pub(crate) fn local_index(&self) -> usize {
        // SAFETY: sched_getcpu takes no arguments (glibc reads it from rseq or the vDSO).
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).unwrap_or(0) & (self.shards.len() - 1)
    }

    /// Copy `i` (from [`PerCpu::local_index`]).
    pub(crate) fn at(&self, i: usize) -> &T {
        &self.shards[i].0
    }

    /// Every copy (to sum them).
    pub(crate) fn all(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|p| &p.0)
    }

    /// The sum over the copies of one counter.
    pub(crate) fn sum(&self, f: impl Fn(&T) -> &AtomicU64) -> u64 {
        self.all().map(|t| f(t).load(Ordering::Relaxed)).sum()
    }

    /// The sums over the copies of an array of counters.
    pub(crate) fn sums<const N: usize>(&self, f: impl Fn(&T) -> &[AtomicU64; N]) -> Vec<u64> {
        let mut v = vec![0u64; N];
        for t in self.all() {
            for (x, a) in v.iter_mut().zip(f(t)) {
                *x += a.load(Ordering::Relaxed);
            }
        }
        v
    }
}

/// Size buckets: bucket `i` counts IOs with `2^(i+9) <= len < 2^(i+10)` bytes (the first
/// also takes anything smaller than 1 KiB, the last anything from 32 MiB up).
pub const SIZE_BUCKETS: usize = 17;
/// Latency buckets: bucket `i` counts IOs with `2^i <= µs < 2^(i+1)` (first: < 2 µs; last:
/// ≥ 2^23 µs ≈ 8.4 s).
pub const LAT_BUCKETS: usize = 24;

fn size_bucket(len: u64) -> usize {
    let lg = 63 - len.max(1).leading_zeros() as usize;
    lg.saturating_sub(9).min(SIZE_BUCKETS - 1)
}

/// The latency bucket of `d` (see [`LAT_BUCKETS`]).
pub(crate) fn lat_bucket(d: Duration) -> usize {
    let us = d.as_micros().max(1) as u64;
    (63 - us.leading_zeros() as usize).min(LAT_BUCKETS - 1)
}

#[derive(Default)]
struct DirCounters {
    count: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    sizes: [AtomicU64; SIZE_BUCKETS],
    lat: [AtomicU64; LAT_BUCKETS],
    lat_sum_ns: AtomicU64,
}

/// The counters of one direction, per CPU.
#[derive(Default)]
struct Dir(PerCpu<DirCounters>);

/// Counters of one direction in a snapshot.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct DirSnapshot {
    /// Requests.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
    /// Failed requests.
    pub errors: u64,
    /// Size histogram (see [`SIZE_BUCKETS`]).
    pub size_hist: Vec<u64>,
    /// Latency histogram (see [`LAT_BUCKETS`]).
    pub lat_hist_us: Vec<u64>,
    /// Sum of latencies, ns.
    pub lat_sum_ns: u64,
}

impl Dir {
    fn snap(&self) -> DirSnapshot {
        let c = &self.0;
        DirSnapshot {
            count: c.sum(|d| &d.count),
            bytes: c.sum(|d| &d.bytes),
            errors: c.sum(|d| &d.errors),
            size_hist: c.sums(|d| &d.sizes),
            lat_hist_us: c.sums(|d| &d.lat),
            lat_sum_ns: c.sum(|d| &d.lat_sum_ns),
        }
    }
    fn add(&self, len: u64, d: Duration, ok: bool) {
        let c = self.0.local();
        c.count.fetch_add(1, Ordering::Relaxed);
        if ok {
            c.bytes.fetch_add(len, Ordering::Relaxed);
        } else {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
        c.sizes[size_bucket(len)].fetch_add(1, Ordering::Relaxed);
        c.lat[lat_bucket(d)].fetch_add(1, Ordering::Relaxed);
        c.lat_sum_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// A point-in-time copy of the counters.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct IoSnapshot {
    /// Seconds since the array was assembled.
    pub uptime_ms: u64,
    /// Reads.
    pub read: DirSnapshot,
    /// Writes.
    pub write: DirSnapshot,
    /// Flushes (count and latency only).
    pub flush: DirSnapshot,
}

struct Trace {
    out: std::io::BufWriter<std::fs::File>,
    t0: Instant,
    until: Option<Instant>,
    export: String,
}

/// The live counters of an array.
pub struct IoStats {
    started: Instant,
    read: Dir,
    write: Dir,
    flush: Dir,
    trace: Mutex<Option<Trace>>,
    tracing: std::sync::atomic::AtomicBool,
}

impl Default for IoStats {
    fn default() -> Self {
        IoStats {
            started: Instant::now(),
            read: Dir::default(),
            write: Dir::default(),
            flush: Dir::default(),
            trace: Mutex::new(None),
            tracing: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Kind of client request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read.
    Read,
    /// Write.
    Write,
    /// Flush.
    Flush,
}

impl IoStats {
    /// Record one request.
    pub fn record(&self, op: Op, off: u64, len: u64, d: Duration, ok: bool) {
        match op {
            Op::Read => self.read.add(len, d, ok),
            Op::Write => self.write.add(len, d, ok),
            Op::Flush => self.flush.add(0, d, ok),
        }
        if !self.tracing.load(Ordering::Relaxed) {
            return;
        }
        let mut t = crate::array::lock(&self.trace);
        if let Some(tr) = t.as_mut() {
            if tr.until.is_some_and(|u| Instant::now() > u) {
                let _ = tr.out.flush();
                *t = None;
                return;
            }
            let code = match op {
                Op::Read => "R",
                Op::Write => "W",
                Op::Flush => "F",
            };
            let line = serde_json::json!({
                "t": tr.t0.elapsed().as_secs_f64(),
                "op": code,
                "off": off,
                "len": len,
                "export": tr.export,
                "lat_ns": d.as_nanos() as u64,
            });
            if writeln!(tr.out, "{line}").is_err() {
                *t = None;
            }
        }
    }

    /// Copy the counters.
    pub fn snapshot(&self) -> IoSnapshot {
        IoSnapshot {
            uptime_ms: self.started.elapsed().as_millis() as u64,
            read: self.read.snap(),
            write: self.write.snap(),
            flush: self.flush.snap(),
        }
    }

    /// Start writing a trace of every client request to `path` (for `seconds`, or until
    /// [`IoStats::stop_trace`]). The file is made mode 0600 whatever the umask, an
    /// existing regular file too (it shows where and when clients read and write); a
    /// device or FIFO (`/dev/null`, a pipe) keeps its mode.
    pub fn start_trace(
        &self,
        path: &std::path::Path,
        export: &str,
        seconds: Option<u64>,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        if f.metadata()?.is_file() {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        *crate::array::lock(&self.trace) = Some(Trace {
            out: std::io::BufWriter::new(f),
            t0: Instant::now(),
            until: seconds.map(|s| Instant::now() + Duration::from_secs(s)),
            export: export.to_string(),
        });
        self.tracing.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Stop tracing and flush the file. Returns whether a trace was running.
    pub fn stop_trace(&self) -> bool {
        self.tracing.store(false, Ordering::Relaxed);
        let mut t = crate::array::lock(&self.trace);
        match t.take() {
            Some(mut tr) => {
                let _ = tr.out.flush();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pin this thread to `cpu`; false if the system does not let it.
    fn pin(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it, and
        // sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// Threads on two CPUs add to copies on different cache lines (none of the 128
    /// bytes one writes is another's), and the sums lose no count.
    #[test]
    fn per_cpu_copies_are_apart_and_sum_exactly() {
        let c: PerCpu<AtomicU64> = PerCpu::default();
        let cpus: Vec<usize> = (0..64)
            .filter(|&i| std::thread::scope(|s| s.spawn(move || pin(i)).join().unwrap_or(false)))
            .take(2)
            .collect();
        let addrs: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = cpus
                .iter()
                .map(|&cpu| {
                    let c = &c;
                    s.spawn(move || {
                        assert!(pin(cpu));
                        for _ in 0..100_000 {
                            c.local().fetch_add(1, Ordering::Relaxed);
                        }
                        c.local() as *const AtomicU64 as usize
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(c.sum(|x| x), 100_000 * cpus.len() as u64);
        if let [a, b] = addrs[..] {
            assert!(a.abs_diff(b) >= 128, "copies at {a:#x} and {b:#x}");
        } else {
            eprintln!("one CPU only: copies not compared");
        }
    }
    #[test]
    fn buckets() {
        assert_eq!(size_bucket(1), 0);
        assert_eq!(size_bucket(512), 0);
        assert_eq!(size_bucket(1023), 0);
        assert_eq!(size_bucket(1024), 1);
        assert_eq!(size_bucket(4096), 3);
        assert_eq!(size_bucket(1 << 20), 11);
        assert_eq!(size_bucket(1 << 40), SIZE_BUCKETS - 1);
        assert_eq!(lat_bucket(Duration::from_nanos(10)), 0);
        assert_eq!(lat_bucket(Duration::from_micros(3)), 1);
        assert_eq!(lat_bucket(Duration::from_millis(1)), 9);
        assert_eq!(lat_bucket(Duration::from_secs(100)), LAT_BUCKETS - 1);
        let s = IoStats::default();
        s.record(Op::Read, 0, 4096, Duration::from_micros(100), true);
        s.record(Op::Write, 0, 65536, Duration::from_micros(300), false);
        let snap = s.snapshot();
        assert_eq!((snap.read.count, snap.read.bytes), (1, 4096));
        assert_eq!(snap.read.size_hist[3], 1);
        assert_eq!(snap.read.lat_hist_us[6], 1);
        assert_eq!(
            (snap.write.count, snap.write.bytes, snap.write.errors),
            (1, 0, 1)
        );
    }

    /// A trace file was created 0666 less the umask (0644: readable by every user).
    #[test]
    fn trace_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("rk-trace-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("t.jsonl");
        let s = IoStats::default();
        s.start_trace(&p, "x", None).unwrap();
        assert!(s.stop_trace());
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&p) & 0o777, 0o600);
        // An existing file readable by everyone is made private too.
        let old = d.join("old.jsonl");
        std::fs::write(&old, "").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        s.start_trace(&old, "x", None).unwrap();
        assert!(s.stop_trace());
        assert_eq!(mode(&old) & 0o777, 0o600);
        // A device keeps its mode.
        let null = std::path::Path::new("/dev/null");
        let before = mode(null);
        s.start_trace(null, "x", None).unwrap();
        assert!(s.stop_trace());
        assert_eq!(mode(null), before);
        let _ = std::fs::remove_dir_all(&d);
    }
}
