//! raidkit parity kernels against Intel ISA-L in the same run:
//! `cargo run --release -p raidkit-bench-isal --bin parity-vs-isal -- [--ws-mib N]
//! [--ms N] [--rounds N] [--k N] [--chunk-kib N]`.
//!
//! Per core (one thread, GB/s of data bytes per second of the thread's own CPU time, so
//! other load on the machine does not distort it) in cache (one 8+2 × 64 KiB stripe)
//! and out of cache (stripes cycling over `--ws-mib`, default 256 MiB), for xor, pq and
//! rec2; then 1 → 2 thread scaling (wall clock, each thread its own stripes). raidkit
//! and ISA-L are measured alternately, `--rounds` times, each time as 5 slices of `--ms`
//! (default 60) milliseconds; the best slice is kept (short slices make it likely that one
//! of them had both cores to itself on a shared machine).

use std::sync::Mutex;
use std::time::Duration;

use raidkit_bench_isal as isal;
use raidkit_parity::bench::{measure, run, Op, Sample, Stripes, MAX_DATA};

struct Cfg {
    k: usize,
    chunk: usize,
    ws: usize,
    time: Duration,
    rounds: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Lib {
    Raidkit,
    Isal,
}

/// One step of `op` with `lib` on the next stripe; returns data bytes processed.
fn step(lib: Lib, op: Op, rec: Option<&isal::Rec2>, s: &mut Stripes) -> usize {
    let k = s.data_disks();
    let bytes = s.data_bytes();
    s.with_next(|b| match lib {
        Lib::Raidkit => run(raidkit_parity::active(), op, k, b),
        Lib::Isal => {
            let (data, pq) = b.split_at_mut(k);
            let (p, q) = pq.split_at_mut(1);
            let r = match op {
                Op::Xor | Op::Pq => {
                    let mut views: [&[u8]; MAX_DATA] = [&[]; MAX_DATA];
                    for (v, d) in views.iter_mut().zip(data.iter()) {
                        *v = d;
                    }
                    if op == Op::Xor {
                        isal::xor_gen(&views[..k], p[0])
                    } else {
                        isal::pq_gen(&views[..k], p[0], q[0])
                    }
                }
                _ => match rec {
                    Some(r) => r.recover(data, p[0], q[0]),
                    None => Ok(()),
                },
            };
            if let Err(e) = r {
                eprintln!("ISA-L: {e}");
                std::process::exit(1);
            }
        }
    });
    bytes
}

fn bench(
    cfg: &Cfg,
    pool: &[Mutex<Stripes>],
    lib: Lib,
    op: Op,
    threads: usize,
    rec: Option<&isal::Rec2>,
) -> Sample {
    measure(
        threads,
        cfg.time,
        5,
        |t| pool[t].lock().unwrap_or_else(|e| e.into_inner()),
        |s| step(lib, op, rec, s),
    )
}

fn max(a: Sample, b: Sample) -> Sample {
    Sample {
        gbps: a.gbps.max(b.gbps),
        cpu_gbps: a.cpu_gbps.max(b.cpu_gbps),
    }
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("{name}: not a number: {v}");
                std::process::exit(2)
            })
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("parity-vs-isal [--ws-mib 256] [--ms 60] [--rounds 3] [--k 8] [--chunk-kib 64]");
        return;
    }
    if !isal::available() {
        eprintln!("parity-vs-isal: {}", isal::Error::Unavailable);
        std::process::exit(2);
    }
    let cfg = Cfg {
        k: arg(&args, "--k", 8).clamp(2, MAX_DATA),
        chunk: arg(&args, "--chunk-kib", 64).max(1) * 1024,
        ws: arg(&args, "--ws-mib", 256) << 20,
        time: Duration::from_millis(arg(&args, "--ms", 60) as u64),
        rounds: arg(&args, "--rounds", 3).max(1),
    };
    let (a, b) = Op::lost_slots(cfg.k);
    let rec = isal::Rec2::new(cfg.k, a, b).unwrap_or_else(|e| {
        eprintln!("ISA-L decode tables: {e}");
        std::process::exit(1)
    });
    println!(
        "raidkit path: {}; ISA-L xor_gen / pq_gen / ec_encode_data; {}+2 x {} KiB; rec2 rebuilds slots {a},{b}",
        raidkit_parity::implementation(),
        cfg.k,
        cfg.chunk / 1024
    );
    println!("GB/s = 10^9 data bytes/s; 1 thread: per CPU-second of the thread; 2 threads: wall clock, sum; best of {} x 5 slices of {} ms", cfg.rounds, cfg.time.as_millis());
    println!(
        "{:<5} {:<9} {:>4} {:>9} {:>9} {:>7}",
        "op", "set", "thr", "raidkit", "ISA-L", "ratio"
    );
    let ops = [Op::Xor, Op::Pq, Op::Rec2];
    let mut scaling: Vec<String> = Vec::new();
    for (set, ws) in [("in-cache", 0usize), ("out-cache", cfg.ws)] {
        let pool: Vec<Mutex<Stripes>> = (0..2)
            .map(|t| Mutex::new(Stripes::new(cfg.k, cfg.chunk, ws, 17 + t as u64)))
            .collect();
        for op in ops {
            let mut one = [Sample::default(); 2];
            let mut two = [Sample::default(); 2];
            for _ in 0..cfg.rounds {
                for (i, lib) in [Lib::Raidkit, Lib::Isal].into_iter().enumerate() {
                    one[i] = max(one[i], bench(&cfg, &pool, lib, op, 1, Some(&rec)));
                    two[i] = max(two[i], bench(&cfg, &pool, lib, op, 2, Some(&rec)));
                }
            }
            println!(
                "{:<5} {:<9} {:>4} {:>9.2} {:>9.2} {:>6.2}x",
                op.name(),
                set,
                1,
                one[0].cpu_gbps,
                one[1].cpu_gbps,
                one[0].cpu_gbps / one[1].cpu_gbps
            );
            println!(
                "{:<5} {:<9} {:>4} {:>9.2} {:>9.2} {:>6.2}x",
                op.name(),
                set,
                2,
                two[0].gbps,
                two[1].gbps,
                two[0].gbps / two[1].gbps
            );
            scaling.push(format!(
                "{:<5} {:<9} raidkit {:>5.2}x {:>5.2}x   ISA-L {:>5.2}x {:>5.2}x",
                op.name(),
                set,
                two[0].gbps / one[0].gbps,
                two[0].cpu_gbps / one[0].cpu_gbps,
                two[1].gbps / one[1].gbps,
                two[1].cpu_gbps / one[1].cpu_gbps
            ));
        }
    }
    println!("\n1 -> 2 threads, GB/s ratio (wall clock, then per-CPU-second sum):");
    for s in scaling {
        println!("{s}");
    }
}
