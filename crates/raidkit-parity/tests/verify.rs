//! The verification kernels (`xor_zero`, `pq_check`) of every path: a consistent stripe
//! passes, and a single flipped bit anywhere (every byte of short blocks, every lane and
//! edge of long ones, in any block) fails it, as the scalar reference says.

use raidkit_parity::{self as rp, scalar, Parity};

/// xorshift64* — deterministic test data without dependencies.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 32) as u8).collect()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn paths() -> Vec<&'static Parity> {
    let v = rp::implementations();
    assert_eq!(v[v.len() - 1].name(), "scalar");
    v
}

/// Byte positions to flip in a block of `len`: all of a short block; in a long one both
/// ends and both sides of every 64-byte boundary (every vector lane and chunk edge of
/// every path), and a few more.
fn positions(len: usize, rng: &mut Rng) -> Vec<usize> {
    if len <= 300 {
        return (0..len).collect();
    }
    let mut v: Vec<usize> = (0..len)
        .step_by(64)
        .flat_map(|b| [b, b + 1, b + 31, b + 32, b + 63])
        .chain((0..64).map(|_| rng.below(len)))
        .chain([len - 1, len - 2])
        .filter(|&i| i < len)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `k` data blocks of `len` (at an odd offset into their buffers) and their P, Q.
fn stripe(rng: &mut Rng, k: usize, len: usize) -> (Vec<Vec<u8>>, Vec<u8>, Vec<u8>) {
    let data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len + 3)).collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| &d[3..]).collect();
    let (mut p, mut q) = (vec![0; len], vec![0; len]);
    if k > 0 {
        scalar::pq_gen(&refs, &mut p, &mut q);
    } else {
        scalar::xor_gen(&refs, &mut p);
    }
    (data, p, q)
}

fn lengths() -> Vec<usize> {
    let mut l: Vec<usize> = (0..=300).collect();
    l.extend([1023, 4096, 4099, 65536 + 13]);
    l
}

#[test]
fn xor_zero_every_path_passes_a_consistent_stripe_and_finds_any_flipped_bit() {
    let paths = paths();
    let mut rng = Rng::new(7);
    for len in lengths() {
        for k in [1, 2, 3, 5] {
            let (mut data, mut p, _) = stripe(&mut rng, k, len);
            let all = |data: &[Vec<u8>], p: &[u8]| -> Vec<Vec<u8>> {
                data.iter()
                    .map(|d| d[3..].to_vec())
                    .chain([p.to_vec()])
                    .collect()
            };
            let blocks = all(&data, &p);
            let refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
            assert!(scalar::xor_zero(&refs));
            for path in &paths {
                assert!(path.xor_zero(&refs), "{} k={k} len={len}", path.name());
            }
            for (n, i) in positions(len, &mut rng).into_iter().enumerate() {
                // The flipped block goes round the data blocks and P; the bit round the byte.
                let (b, bit) = (n % (k + 1), 1u8 << (n % 8));
                let flip = |data: &mut [Vec<u8>], p: &mut [u8]| match data.get_mut(b) {
                    Some(d) => d[3 + i] ^= bit,
                    None => p[i] ^= bit,
                };
                flip(&mut data, &mut p);
                let blocks = all(&data, &p);
                let refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
                assert!(!scalar::xor_zero(&refs));
                for path in &paths {
                    assert!(
                        !path.xor_zero(&refs),
                        "{} missed bit {bit:#x} at {i} of block {b}, k={k} len={len}",
                        path.name()
                    );
                }
                flip(&mut data, &mut p);
            }
        }
    }
}

#[test]
fn pq_check_every_path_passes_a_consistent_stripe_and_finds_any_flipped_bit() {
    let paths = paths();
    let mut rng = Rng::new(8);
    for len in lengths() {
        for k in [1, 2, 3, 4, 7] {
            let (mut data, mut p, mut q) = stripe(&mut rng, k, len);
            let check = |path: &Parity, data: &[Vec<u8>], p: &[u8], q: &[u8]| {
                let refs: Vec<&[u8]> = data.iter().map(|d| &d[3..]).collect();
                path.pq_check(&refs, p, q)
            };
            for path in &paths {
                assert!(
                    check(path, &data, &p, &q),
                    "{} k={k} len={len}",
                    path.name()
                );
            }
            for (n, i) in positions(len, &mut rng).into_iter().enumerate() {
                // The flipped block goes round the data blocks, P and Q.
                let (b, bit) = (n % (k + 2), 1u8 << (n % 8));
                let flip = |data: &mut [Vec<u8>], p: &mut [u8], q: &mut [u8]| match b {
                    b if b < k => data[b][3 + i] ^= bit,
                    b if b == k => p[i] ^= bit,
                    _ => q[i] ^= bit,
                };
                flip(&mut data, &mut p, &mut q);
                for path in &paths {
                    assert!(
                        !check(path, &data, &p, &q),
                        "{} missed bit {bit:#x} at {i} of block {b}, k={k} len={len}",
                        path.name()
                    );
                }
                flip(&mut data, &mut p, &mut q);
            }
        }
    }
}

#[test]
fn differences_in_one_lane_of_several_chunks_do_not_cancel() {
    // The same bit flipped at positions a vector, a chunk of vectors and more apart: a
    // kernel that XOR-ed its accumulators instead of or-ing them would see them cancel.
    let paths = paths();
    let mut rng = Rng::new(9);
    let len = 4096 + 77;
    for gap in [16, 32, 64, 128, 256, 512, 1024, 2048] {
        for at in [0, 5, 63, 200] {
            let (mut data, mut p, mut q) = stripe(&mut rng, 4, len);
            data[1][3 + at] ^= 0x10;
            data[2][3 + at + gap] ^= 0x10;
            let refs: Vec<&[u8]> = data.iter().map(|d| &d[3..]).collect();
            let mut x: Vec<&[u8]> = refs.clone();
            x.push(&p);
            for path in &paths {
                assert!(!path.xor_zero(&x), "{} xor gap={gap} at={at}", path.name());
                assert!(
                    !path.pq_check(&refs, &p, &q),
                    "{} pq gap={gap}",
                    path.name()
                );
            }
            // P and Q changed alike in two places: still a mismatch.
            data[1][3 + at] ^= 0x10;
            data[2][3 + at + gap] ^= 0x10;
            p[at] ^= 1;
            q[at + gap] ^= 1;
            let refs: Vec<&[u8]> = data.iter().map(|d| &d[3..]).collect();
            for path in &paths {
                assert!(
                    !path.pq_check(&refs, &p, &q),
                    "{} P/Q gap={gap}",
                    path.name()
                );
            }
        }
    }
}

#[test]
fn pq_check_many_blocks() {
    let paths = paths();
    let mut rng = Rng::new(10);
    for (k, len) in [(127, 200), (254, 301), (256, 130)] {
        let (mut data, p, q) = stripe(&mut rng, k, len);
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[3..]).collect();
        for path in &paths {
            assert!(path.pq_check(&refs, &p, &q), "{} k={k}", path.name());
        }
        data[k - 1][3 + len / 2] ^= 0x80;
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[3..]).collect();
        for path in &paths {
            assert!(!path.pq_check(&refs, &p, &q), "{} k={k}", path.name());
        }
    }
}

#[test]
fn no_blocks_xor_to_zero() {
    for path in paths() {
        assert!(path.xor_zero(&[]), "{}", path.name());
    }
}

#[test]
#[should_panic(expected = "length")]
fn xor_zero_length_mismatch_panics() {
    rp::xor_zero(&[&[0u8; 4], &[0u8; 5]]);
}

#[test]
#[should_panic(expected = "at least one")]
fn pq_check_empty_panics() {
    rp::pq_check(&[], &[0; 8], &[0; 8]);
}
