//! Quick one-core throughput of every available path:
//! `cargo run --release -p raidkit-parity --example speed [block_kib] [data_blocks] [path-prefix]`.
//! GB/s counts data-block bytes read per second of this thread's CPU time (10^9 bytes).

use std::hint::black_box;
use std::time::{Duration, Instant};

use raidkit_parity::{gf, implementations, Parity};

/// CPU time of this thread in ns (Linux `schedstat`), so that other load on the
/// machine does not distort the numbers; falls back to wall time.
fn cpu_ns(wall: Instant) -> u128 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| wall.elapsed().as_nanos())
}

fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    // enough calls between clock reads (a /proc read) to make their cost negligible
    let batch = (16 << 20) / bytes.max(1) + 1;
    let mut iters = 0u64;
    let wall = Instant::now();
    let start = cpu_ns(wall);
    while cpu_ns(wall) - start < Duration::from_millis(300).as_nanos() {
        for _ in 0..batch {
            f();
        }
        iters += batch as u64;
    }
    (bytes as f64 * iters as f64) / (cpu_ns(wall) - start) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only = args.get(2).cloned();
    let args: Vec<usize> = args.iter().take(2).map(|a| a.parse().unwrap()).collect();
    let len = args.first().copied().unwrap_or(64) * 1024;
    let k = args.get(1).copied().unwrap_or(8);
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut data: Vec<Vec<u8>> = (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect()
        })
        .collect();
    let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
    println!(
        "{k} data blocks x {} KiB; GB/s of data read, one core; active: {}",
        len / 1024,
        raidkit_parity::implementation()
    );
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "path", "xor_gen", "pq_gen", "mul_acc", "rec_1q", "rec_2"
    );
    for path in implementations() {
        let path: &Parity = path;
        if only.as_deref().is_some_and(|o| !path.name().starts_with(o)) {
            continue;
        }
        let views: Vec<&[u8]> = data.iter().map(|v| &v[..]).collect();
        let x = rate(k * len, || path.xor_gen(black_box(&views), &mut p));
        let pq = rate(k * len, || path.pq_gen(black_box(&views), &mut p, &mut q));
        path.pq_gen(&views, &mut p, &mut q);
        let ma = rate(len, || {
            path.mul_acc(&mut q, black_box(&data[0]), gf::exp(5))
        });
        path.pq_gen(&views, &mut p, &mut q);
        let mut refs: Vec<&mut [u8]> = data.iter_mut().map(|v| &mut v[..]).collect();
        let r1 = rate(k * len, || path.recover_one_q(&mut refs, 1, black_box(&q)));
        let r2 = rate(k * len, || {
            path.recover_two(&mut refs, 1, 3, &p, black_box(&q))
        });
        println!(
            "{:<12} {x:>8.2} {pq:>8.2} {ma:>8.2} {r1:>8.2} {r2:>8.2}",
            path.name()
        );
    }
}
