//! `raidkit bench parity`: throughput of the parity kernels (GB/s of data bytes, 10^9)
//! over a sweep of operations, geometries, chunk sizes, working sets and thread counts.
//!
//! `raidkit bench` is a subcommand group ([`BenchCmd`]); other workloads add variants.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use raidkit_parity::bench::{measure, run, Op, Sample, Stripes, MAX_DATA};
use serde_json::{json, Value};

use crate::units::{human, parse_size};

/// `raidkit bench <workload>`.
#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Parity kernel throughput (xor, pq, rec2, rec1q, rec1p) in and out of cache.
    Parity(BenchParityArgs),
    /// fio-style workloads on a file, a device or an array, with per-member IO shares.
    Io(Box<super::bench_io::BenchIoArgs>),
    /// Draw a benchmark script's CSV (panel,x,series,value) as line charts (.svg/.png).
    Plot(super::bench_plot::BenchPlotArgs),
}

/// `raidkit bench parity`. Every option takes a comma-separated list (or may be
/// repeated); the run is the product of all lists.
#[derive(Args, Debug)]
pub struct BenchParityArgs {
    /// Print a JSON list of results instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Operations: xor, pq, rec2, rec1q, rec1p [default: all].
    #[arg(long, value_delimiter = ',', value_parser = parse_op)]
    pub op: Vec<Op>,
    /// Data disks per stripe, 2..=32 (xor: K+1 members, the others K+2) [default: 4,8,12].
    #[arg(long = "data-disks", value_delimiter = ',')]
    pub data_disks: Vec<usize>,
    /// Chunk (block) size; bare number = KiB, like mdadm [default: 4K,64K,1M].
    #[arg(long, value_delimiter = ',')]
    pub chunk: Vec<String>,
    /// Bytes of stripes (data, P and Q) each thread cycles over; 0 = one stripe (in
    /// cache); bare number = KiB [default: 0,256M].
    #[arg(long = "working-set", value_delimiter = ',')]
    pub working_set: Vec<String>,
    /// Threads, each with its own stripes [default: 1 and all CPUs].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Kernel path (avx512-gfni, avx512, avx2-gfni, avx2, ssse3, portable, scalar)
    /// [default: the automatic choice].
    #[arg(long = "impl")]
    pub implementation: Option<String>,
    /// Milliseconds per measurement (best of 3 equal parts is reported).
    #[arg(long = "time-ms", default_value_t = 60)]
    pub time_ms: u64,
}

fn parse_op(s: &str) -> Result<Op, String> {
    Op::parse(s).ok_or_else(|| format!("unknown op {s:?} (xor, pq, rec2, rec1q, rec1p)"))
}

/// Dispatch `raidkit bench ...`.
pub fn cmd_bench(c: BenchCmd) -> Result<()> {
    match c {
        BenchCmd::Parity(a) => cmd_bench_parity(a),
        BenchCmd::Io(a) => super::bench_io::run(*a),
        BenchCmd::Plot(a) => super::bench_plot::run(a),
    }
}

fn sizes(list: &[String], default: &[u64], what: &str) -> Result<Vec<usize>> {
    if list.is_empty() {
        return Ok(default.iter().map(|&v| v as usize).collect());
    }
    list.iter()
        .map(|s| {
            parse_size(s, 1024)
                .map_err(|e| anyhow::anyhow!("--{what}: {e}"))
                .and_then(|v| {
                    usize::try_from(v).map_err(|_| anyhow::anyhow!("--{what}: too large"))
                })
        })
        .collect()
}

/// One result row.
struct Row {
    op: Op,
    k: usize,
    chunk: usize,
    ws: usize,
    threads: usize,
    s: Sample,
}

/// The kernel path asked for (`--impl`), or the automatic choice.
fn kernel_path(a: &BenchParityArgs) -> Result<&'static raidkit_parity::Parity> {
    let Some(n) = &a.implementation else {
        return Ok(raidkit_parity::active());
    };
    match raidkit_parity::with_impl(n) {
        Some(p) => Ok(p),
        None => {
            let have: Vec<&str> = raidkit_parity::implementations()
                .iter()
                .map(|p| p.name())
                .collect();
            bail!(
                "--impl {n}: unknown or not supported here (have: {})",
                have.join(", ")
            )
        }
    }
}

/// What to measure: the product of these lists.
struct Plan {
    ops: Vec<Op>,
    ks: Vec<usize>,
    chunks: Vec<usize>,
    wss: Vec<usize>,
    threads: Vec<usize>,
}

/// The lists from the options (defaults where empty), checked, and checked against
/// memory before anything is allocated.
fn plan(a: &BenchParityArgs, ncpu: usize) -> Result<Plan> {
    let or = |v: &Vec<usize>, d: Vec<usize>| if v.is_empty() { d } else { v.clone() };
    let ops = if a.op.is_empty() {
        Op::ALL.to_vec()
    } else {
        a.op.clone()
    };
    let ks = or(&a.data_disks, vec![4, 8, 12]);
    if let Some(k) = ks.iter().find(|&&k| !(2..=MAX_DATA).contains(&k)) {
        bail!("--data-disks {k}: must be 2..={MAX_DATA}");
    }
    let chunks = sizes(&a.chunk, &[4 << 10, 64 << 10, 1 << 20], "chunk")?;
    if let Some(c) = chunks
        .iter()
        .find(|&&c| c == 0 || !c.is_multiple_of(64) || c > 1 << 30)
    {
        bail!("--chunk {c}: must be a multiple of 64 bytes, at most 1G");
    }
    let wss = sizes(&a.working_set, &[0, 256 << 20], "working-set")?;
    let threads = or(&a.threads, if ncpu > 1 { vec![1, ncpu] } else { vec![1] });
    if let Some(t) = threads.iter().find(|&&t| t == 0 || t > 1024) {
        bail!("--threads {t}: must be 1..=1024");
    }
    let tmax = threads.iter().copied().max().unwrap_or(1);
    check_memory(&wss, &ks, &chunks, tmax)?;
    Ok(Plan {
        ops,
        ks,
        chunks,
        wss,
        threads,
    })
}

fn print_header(path: &raidkit_parity::Parity, ncpu: usize) {
    outln!(
        "raidkit bench parity: path {}, {ncpu} CPUs; GB/s = 10^9 data bytes (K x chunk per stripe) per second",
        path.name()
    );
    outln!("  wall: all threads together, wall clock; cpu: per CPU-second of each thread, summed (best of 3)");
    outln!(
        "{:<6} {:>5} {:>10} {:>11} {:>7} {:>9} {:>9}",
        "op",
        "disks",
        "chunk",
        "working-set",
        "threads",
        "wall GB/s",
        "cpu GB/s"
    );
}

/// Each thread's stripes of one geometry, built in parallel.
fn stripes(k: usize, chunk: usize, ws: usize, n: usize) -> Result<Vec<Mutex<Stripes>>> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|t| sc.spawn(move || Stripes::new(k, chunk, ws, 1 + t as u64)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().map(Mutex::new))
            .collect::<std::result::Result<Vec<_>, _>>()
    })
    .map_err(|_| anyhow::anyhow!("stripe setup thread failed"))
}

/// Run `raidkit bench parity`.
pub fn cmd_bench_parity(a: BenchParityArgs) -> Result<()> {
    let path = kernel_path(&a)?;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let p = plan(&a, ncpu)?;
    let tmax = p.threads.iter().copied().max().unwrap_or(1);
    let time = Duration::from_millis(a.time_ms.max(3));
    if !a.json {
        print_header(path, ncpu);
    }
    let mut rows = Vec::new();
    for &ws in &p.wss {
        for &k in &p.ks {
            for &chunk in &p.chunks {
                // Shared by all ops and thread counts of this geometry.
                let pool = stripes(k, chunk, ws, tmax)?;
                for &op in &p.ops {
                    for &t in &p.threads {
                        let s = measure(
                            t,
                            time / 3,
                            3,
                            |i| pool[i].lock().unwrap_or_else(|e| e.into_inner()),
                            |st| {
                                let bytes = st.data_bytes();
                                st.with_next(|b| run(path, op, k, b));
                                bytes
                            },
                        );
                        let r = Row {
                            op,
                            k,
                            chunk,
                            ws,
                            threads: t,
                            s,
                        };
                        if !a.json {
                            print_row(&r);
                        }
                        rows.push(r);
                    }
                }
            }
        }
    }
    if a.json {
        let v: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "op": r.op.name(),
                    "impl": path.name(),
                    "data_disks": r.k,
                    "chunk_bytes": r.chunk,
                    "working_set_bytes": r.ws,
                    "threads": r.threads,
                    "gbps": round2(r.s.gbps),
                    "cpu_gbps": round2(r.s.cpu_gbps),
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

/// Bytes of memory the kernel says can be used without swapping (`MemAvailable`).
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuse a run whose stripes (each thread has its own) would take more than half the
/// available memory, before allocating any.
fn check_memory(wss: &[usize], ks: &[usize], chunks: &[usize], threads: usize) -> Result<()> {
    let Some(avail) = available_memory() else {
        return Ok(());
    };
    let widest = ks.iter().max().copied().unwrap_or(0) + 2;
    let stripe = chunks
        .iter()
        .max()
        .copied()
        .unwrap_or(0)
        .saturating_mul(widest);
    for &ws in wss {
        let need = (ws.max(stripe) as u64).saturating_mul(threads as u64);
        if need > avail / 2 {
            bail!(
                "--working-set {} x {threads} thread(s) needs {}, more than half the available memory ({}); give a smaller --working-set (a bare number is KiB: 262144 = 256 MiB) or fewer --threads",
                human(ws as u64),
                human(need),
                human(avail)
            );
        }
    }
    Ok(())
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `4 KiB`, `1 MiB`, `1.50 MiB`, `100 B`: exact where the size is a round unit.
fn size(b: usize) -> String {
    match b {
        b if b >= 1 << 30 && b.is_multiple_of(1 << 30) => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{} KiB", b >> 10),
        b => human(b as u64),
    }
}

fn print_row(r: &Row) {
    let ws = if r.ws == 0 {
        "1 stripe".to_string()
    } else {
        size(r.ws)
    };
    outln!(
        "{:<6} {:>5} {:>10} {:>11} {:>7} {:>9.2} {:>9.2}",
        r.op.name(),
        format!("{}+{}", r.k, if r.op == Op::Xor { 1 } else { 2 }),
        size(r.chunk),
        ws,
        r.threads,
        r.s.gbps,
        r.s.cpu_gbps
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        c: BenchCmd,
    }

    #[test]
    fn sizes_print_exactly() {
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(256 << 20), "256 MiB");
        assert_eq!(size(100), "100 B");
        assert_eq!(size(1536 << 10), "1536 KiB");
    }

    #[test]
    fn lists_parse() {
        let t = T::try_parse_from([
            "b",
            "parity",
            "--op",
            "pq,rec2",
            "--data-disks",
            "4,12",
            "--chunk",
            "4K",
            "--chunk",
            "64",
            "--threads",
            "1,2",
            "--json",
        ])
        .unwrap();
        let BenchCmd::Parity(a) = t.c else {
            panic!("not parity")
        };
        assert_eq!(a.op, vec![Op::Pq, Op::Rec2]);
        assert_eq!(a.data_disks, vec![4, 12]);
        assert_eq!(sizes(&a.chunk, &[], "chunk").unwrap(), vec![4096, 65536]);
        assert_eq!(a.threads, vec![1, 2]);
        assert!(a.json);
        assert!(T::try_parse_from(["b", "parity", "--op", "rec3"]).is_err());
    }

    #[test]
    fn bad_geometry_is_an_error() {
        for bad in [
            &["b", "parity", "--data-disks", "1"][..],
            &["b", "parity", "--data-disks", "33"],
            &["b", "parity", "--chunk", "100b"],
            &["b", "parity", "--threads", "0"],
            &["b", "parity", "--impl", "nope"],
        ] {
            let BenchCmd::Parity(a) = T::try_parse_from(bad).unwrap().c else {
                panic!("not parity")
            };
            assert!(cmd_bench_parity(a).is_err(), "{bad:?}");
        }
    }
}
