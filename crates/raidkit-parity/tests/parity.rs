//! Every path against the scalar reference, the §5 numeric example and the GF tables.

use raidkit_parity::{self as rp, gf, scalar, Parity};

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
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = (self.next() >> 32) as u8;
        }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn paths() -> Vec<&'static Parity> {
    let v = rp::implementations();
    assert!(v.len() >= 2);
    assert_eq!(v[v.len() - 2].name(), "portable");
    assert_eq!(v[v.len() - 1].name(), "scalar");
    v
}

fn lengths() -> Vec<usize> {
    let mut l: Vec<usize> = (0..=300).collect();
    l.extend([4096, 65536]);
    l
}

/// `k` blocks of `len` bytes each, starting `skew` bytes into their allocations
/// (unaligned sub-slices).
fn blocks(rng: &mut Rng, k: usize, len: usize) -> Vec<Vec<u8>> {
    (0..k).map(|_| rng.bytes(len + 7)).collect()
}

fn views(bufs: &[Vec<u8>], skew: usize, len: usize) -> Vec<&[u8]> {
    bufs.iter().map(|b| &b[skew..skew + len]).collect()
}

// ---------------------------------------------------------------- GF tables

fn slow_mul(a: u8, b: u8) -> u8 {
    // carry-less multiply then reduce by 0x11d
    let mut r: u16 = 0;
    for i in 0..8 {
        if b & (1 << i) != 0 {
            r ^= (a as u16) << i;
        }
    }
    for i in (8..16).rev() {
        if r & (1 << i) != 0 {
            r ^= 0x11d << (i - 8);
        }
    }
    r as u8
}

#[test]
fn gf_powers() {
    let want = [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1d];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(gf::exp(i), *w, "g^{i}");
    }
    assert_eq!(gf::exp(255), 1);
    assert_eq!(gf::exp(256), 2);
    assert_eq!(gf::exp(510), 1);
    // generator: g^0..g^254 are all distinct nonzero
    let mut seen = [false; 256];
    for i in 0..255 {
        let x = gf::exp(i);
        assert!(x != 0 && !seen[x as usize]);
        seen[x as usize] = true;
        assert_eq!(gf::log(x), Some(i as u8));
        assert_eq!(gf::mul2(gf::exp(i)), gf::exp(i + 1));
    }
    assert_eq!(gf::log(0), None);
}

#[test]
fn gf_mul_inv() {
    assert_eq!(gf::inv(0), 0);
    for x in 1..=255u8 {
        assert_eq!(gf::mul(x, gf::inv(x)), 1, "x={x:#x}");
        assert_eq!(gf::mul2(x), gf::mul(2, x));
    }
    assert_eq!(gf::inv(0x03), 0xf4);
    assert_eq!(gf::inv(0x06), 0x7a);
    assert_eq!(gf::inv(0x05), 0xa7);
    assert_eq!(gf::inv(0x02), 0x8e);
    assert_eq!(gf::exi(1), 0xf4);
    assert_eq!(gf::exi(2), 0xa7);
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(gf::mul(a, b), slow_mul(a, b), "{a:#x}·{b:#x}");
        }
    }
    let mut rng = Rng::new(1);
    for _ in 0..10_000 {
        let (a, b, c) = (rng.next() as u8, rng.next() as u8, rng.next() as u8);
        assert_eq!(gf::mul(gf::mul(a, b), c), gf::mul(a, gf::mul(b, c)));
        assert_eq!(gf::mul(a, b ^ c), gf::mul(a, b) ^ gf::mul(a, c));
        assert_eq!(gf::mul(a, b), gf::mul(b, a));
    }
}

#[test]
fn gf_vector_tables() {
    assert_eq!(gf::affine_matrix(2), 0x8001_8284_8810_2040);
    assert_eq!(gf::affine_matrix(4), 0x4080_41c2_c488_1020);
    for c in 0..=255u8 {
        let [lo, hi] = gf::nibble_tables(c);
        let m = gf::affine_matrix(c);
        for x in 0..=255u8 {
            let want = gf::mul(c, x);
            assert_eq!(lo[(x & 15) as usize] ^ hi[(x >> 4) as usize], want);
            assert_eq!(gf::mul_row(c)[x as usize], want);
            // GF2P8AFFINEQB semantics: bit i = parity(byte[7-i] of m & x)
            let mut r = 0u8;
            for i in 0..8 {
                let row = (m >> (8 * (7 - i))) as u8;
                r |= (((row & x).count_ones() & 1) as u8) << i;
            }
            assert_eq!(r, want, "c={c:#x} x={x:#x}");
        }
    }
}

// ---------------------------------------------------------------- §5 example

#[test]
fn md_format_section5_example() {
    for path in paths() {
        let name = path.name();
        let d: [&[u8]; 3] = [&[0x12], &[0x34], &[0x56]];
        let (mut p, mut q) = ([0u8], [0u8]);
        path.pq_gen(&d, &mut p, &mut q);
        assert_eq!((p[0], q[0]), (0x70, 0x3f), "{name}");

        // lose D1, D2
        let (mut d0, mut d1, mut d2) = ([0x12u8], [0xeeu8], [0x99u8]);
        path.recover_two(&mut [&mut d0[..], &mut d1[..], &mut d2[..]], 1, 2, &p, &q);
        assert_eq!((d0[0], d1[0], d2[0]), (0x12, 0x34, 0x56), "{name}");
        // lose D0, D2
        let (mut d0, mut d1, mut d2) = ([0u8], [0x34u8], [0xffu8]);
        path.recover_two(&mut [&mut d0[..], &mut d1[..], &mut d2[..]], 0, 2, &p, &q);
        assert_eq!((d0[0], d1[0], d2[0]), (0x12, 0x34, 0x56), "{name}");
        // lose D1 and P
        let (mut d0, mut d1, mut d2) = ([0x12u8], [0x00u8], [0x56u8]);
        path.recover_one_q(&mut [&mut d0[..], &mut d1[..], &mut d2[..]], 1, &q);
        assert_eq!(d1[0], 0x34, "{name}");
        // lose D1 (P intact)
        let (mut d0, mut d1, mut d2) = ([0x12u8], [0x77u8], [0x56u8]);
        path.recover_one_p(&mut [&mut d0[..], &mut d1[..], &mut d2[..]], 1, &p);
        assert_eq!(d1[0], 0x34, "{name}");
        // RMW of D1: 0x34 -> 0x35
        let mut q2 = q;
        path.mul_acc(&mut q2, &[0x34 ^ 0x35], gf::exp(1));
        let d: [&[u8]; 3] = [&[0x12], &[0x35], &[0x56]];
        let (mut p3, mut q3) = ([0u8], [0u8]);
        scalar::pq_gen(&d, &mut p3, &mut q3);
        assert_eq!(q2, q3, "{name}");
    }
    // the top-level dispatching functions
    let d: [&[u8]; 3] = [&[0x12], &[0x34], &[0x56]];
    let (mut p, mut q) = ([0u8], [0u8]);
    rp::pq_gen(&d, &mut p, &mut q);
    assert_eq!((p[0], q[0]), (0x70, 0x3f));
    let mut x = [0u8];
    rp::xor_gen(&d, &mut x);
    assert_eq!(x[0], 0x70);
}

// ---------------------------------------------------------------- paths vs scalar

#[test]
fn xor_and_pq_all_paths_vs_scalar() {
    let paths = paths();
    let mut rng = Rng::new(2);
    for len in lengths() {
        let k_max = if len > 4096 { 5 } else { 16 };
        for k in 0..=k_max {
            let bufs = blocks(&mut rng, k, len);
            let skew = rng.below(8);
            let data = views(&bufs, skew, len);
            // references
            let mut xr = vec![0; len];
            scalar::xor_gen(&data, &mut xr);
            let (mut pr, mut qr) = (vec![0; len], vec![0; len]);
            if k > 0 {
                scalar::pq_gen(&data, &mut pr, &mut qr);
                assert_eq!(pr, xr);
            }
            for path in &paths {
                let mut out = rng.bytes(len + 8);
                let o = rng.below(8);
                path.xor_gen(&data, &mut out[o..o + len]);
                assert_eq!(
                    &out[o..o + len],
                    &xr[..],
                    "{} xor_gen k={k} len={len}",
                    path.name()
                );
                if k > 0 {
                    let mut p = rng.bytes(len + 3);
                    let mut q = rng.bytes(len + 5);
                    path.pq_gen(&data, &mut p[3..], &mut q[..len]);
                    assert_eq!(&p[3..], &pr[..], "{} P k={k} len={len}", path.name());
                    assert_eq!(&q[..len], &qr[..], "{} Q k={k} len={len}", path.name());
                }
                if k == 1 {
                    let mut d = rng.bytes(len + 1);
                    let mut want = d[1..].to_vec();
                    scalar::xor_into(&mut want, data[0]);
                    path.xor_into(&mut d[1..], data[0]);
                    assert_eq!(&d[1..], &want[..], "{} xor_into len={len}", path.name());
                }
            }
        }
    }
}

#[test]
fn pq_many_blocks() {
    // md allows up to 254 data blocks (256 members); also beyond (exponents wrap mod 255)
    let paths = paths();
    let mut rng = Rng::new(3);
    for (k, len) in [(2, 77), (127, 200), (254, 64), (254, 301), (256, 130)] {
        let bufs = blocks(&mut rng, k, len);
        let data = views(&bufs, 1, len);
        let (mut pr, mut qr) = (vec![0; len], vec![0; len]);
        scalar::pq_gen(&data, &mut pr, &mut qr);
        for path in &paths {
            let (mut p, mut q) = (vec![0; len], vec![0; len]);
            path.pq_gen(&data, &mut p, &mut q);
            assert_eq!((&p, &q), (&pr, &qr), "{} k={k}", path.name());
        }
    }
}

#[test]
fn mul_acc_all_paths_vs_scalar() {
    let paths = paths();
    let mut rng = Rng::new(4);
    // every coefficient at a length with a main loop, vector loop and tail
    for c in 0..=255u8 {
        let len = 64 * 4 * 2 + 64 + 32 + 16 + 8 + 5;
        let src = rng.bytes(len);
        let dst0 = rng.bytes(len);
        let mut want = dst0.clone();
        scalar::mul_acc(&mut want, &src, c);
        for path in &paths {
            let mut d = dst0.clone();
            path.mul_acc(&mut d, &src, c);
            assert_eq!(d, want, "{} c={c:#x}", path.name());
        }
    }
    for len in lengths() {
        let c = rng.next() as u8;
        let src = rng.bytes(len + 8);
        let dst0 = rng.bytes(len + 8);
        let (so, dof) = (rng.below(8), rng.below(8));
        let mut want = dst0[dof..dof + len].to_vec();
        scalar::mul_acc(&mut want, &src[so..so + len], c);
        for path in &paths {
            let mut d = dst0.clone();
            path.mul_acc(&mut d[dof..dof + len], &src[so..so + len], c);
            assert_eq!(
                &d[dof..dof + len],
                &want[..],
                "{} c={c:#x} len={len}",
                path.name()
            );
        }
    }
}

/// Run one recovery on fresh copies of `data` with the lost slots overwritten by garbage.
fn with_lost(
    rng: &mut Rng,
    data: &[Vec<u8>],
    lost: &[usize],
    f: impl FnOnce(&mut [&mut [u8]]),
) -> Vec<Vec<u8>> {
    let mut work: Vec<Vec<u8>> = data.to_vec();
    for &l in lost {
        rng.fill(&mut work[l]);
    }
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(|v| &mut v[..]).collect();
    f(&mut refs);
    work
}

#[test]
fn recovery_every_case_all_paths() {
    let paths = paths();
    let mut rng = Rng::new(5);
    for k in 1..=12 {
        for len in [0, 1, 15, 33, 64 * 4 + 64 + 32 + 16 + 8 + 3, 1000, 4096 + 7] {
            let data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len)).collect();
            let views: Vec<&[u8]> = data.iter().map(|v| &v[..]).collect();
            let (mut p, mut q) = (vec![0; len], vec![0; len]);
            scalar::pq_gen(&views, &mut p, &mut q);
            for path in &paths {
                let n = path.name();
                for a in 0..k {
                    let got = with_lost(&mut rng, &data, &[a], |d| path.recover_one_p(d, a, &p));
                    assert_eq!(got, data, "{n} one_p k={k} a={a} len={len}");
                    let got = with_lost(&mut rng, &data, &[a], |d| path.recover_one_q(d, a, &q));
                    assert_eq!(got, data, "{n} one_q k={k} a={a} len={len}");
                    for b in a + 1..k {
                        let got = with_lost(&mut rng, &data, &[a, b], |d| {
                            path.recover_two(d, a, b, &p, &q)
                        });
                        assert_eq!(got, data, "{n} two k={k} a={a} b={b} len={len}");
                        // argument order does not matter
                        let got = with_lost(&mut rng, &data, &[a, b], |d| {
                            path.recover_two(d, b, a, &p, &q)
                        });
                        assert_eq!(got, data, "{n} two k={k} b={b} a={a} len={len}");
                    }
                }
            }
        }
    }
}

#[test]
fn recovery_many_blocks() {
    let paths = paths();
    let mut rng = Rng::new(6);
    let (k, len) = (254, 200);
    let data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len)).collect();
    let views: Vec<&[u8]> = data.iter().map(|v| &v[..]).collect();
    let (mut p, mut q) = (vec![0; len], vec![0; len]);
    scalar::pq_gen(&views, &mut p, &mut q);
    for path in &paths {
        for (a, b) in [(0, 1), (0, 253), (100, 200), (252, 253)] {
            let got = with_lost(&mut rng, &data, &[a, b], |d| {
                path.recover_two(d, a, b, &p, &q)
            });
            assert!(got == data, "{} two a={a} b={b}", path.name());
            let got = with_lost(&mut rng, &data, &[b], |d| path.recover_one_q(d, b, &q));
            assert!(got == data, "{} one_q b={b}", path.name());
        }
    }
}

#[test]
fn rmw_identity() {
    let paths = paths();
    let mut rng = Rng::new(7);
    for k in 1..=16 {
        let len = 1000 + rng.below(64);
        let mut data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len)).collect();
        let (mut p, mut q) = (vec![0; len], vec![0; len]);
        {
            let views: Vec<&[u8]> = data.iter().map(|v| &v[..]).collect();
            scalar::pq_gen(&views, &mut p, &mut q);
        }
        let j = rng.below(k);
        let new = rng.bytes(len);
        let mut delta = data[j].clone();
        scalar::xor_into(&mut delta, &new);
        data[j] = new;
        let (mut pw, mut qw) = (vec![0; len], vec![0; len]);
        {
            let views: Vec<&[u8]> = data.iter().map(|v| &v[..]).collect();
            scalar::pq_gen(&views, &mut pw, &mut qw);
        }
        for path in &paths {
            let (mut p2, mut q2) = (p.clone(), q.clone());
            path.xor_into(&mut p2, &delta);
            path.mul_acc(&mut q2, &delta, gf::exp(j));
            assert_eq!((&p2, &q2), (&pw, &qw), "{} k={k} j={j}", path.name());
        }
    }
}

// ---------------------------------------------------------------- selection, contracts

#[test]
fn selection() {
    let names: Vec<&str> = paths().iter().map(|p| p.name()).collect();
    assert!(names.contains(&rp::implementation()));
    assert_ne!(rp::implementation(), "scalar");
    assert!(rp::with_impl("no-such-path").is_none());
    for n in &names {
        assert_eq!(rp::with_impl(n).unwrap().name(), *n);
    }
    assert!(rp::portable::get().is_some());
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(rp::avx2::get().is_some(), is_x86_feature_detected!("avx2"));
        assert_eq!(
            rp::ssse3::get().is_some(),
            is_x86_feature_detected!("ssse3")
        );
        let gfni = is_x86_feature_detected!("gfni");
        let a512 = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw");
        assert_eq!(rp::avx512::get().is_some(), a512);
        assert_eq!(rp::avx512_gfni::get().is_some(), a512 && gfni);
        assert_eq!(
            rp::avx2_gfni::get().is_some(),
            gfni && is_x86_feature_detected!("avx2")
        );
    }
}

#[test]
fn empty_xor_gen_zeroes() {
    for path in paths() {
        let mut d = [0xffu8; 37];
        path.xor_gen(&[], &mut d);
        assert_eq!(d, [0; 37], "{}", path.name());
    }
}

#[test]
#[should_panic(expected = "length")]
fn xor_into_length_mismatch_panics() {
    rp::xor_into(&mut [0u8; 4], &[0u8; 5]);
}

#[test]
#[should_panic(expected = "length")]
fn pq_length_mismatch_panics() {
    let d: [&[u8]; 2] = [&[0; 8], &[0; 9]];
    rp::pq_gen(&d, &mut [0; 8], &mut [0; 8]);
}

#[test]
#[should_panic(expected = "at least one")]
fn pq_empty_panics() {
    rp::pq_gen(&[], &mut [0; 8], &mut [0; 8]);
}

#[test]
#[should_panic(expected = "distinct")]
fn recover_two_same_slot_panics() {
    let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
    rp::recover_two(&mut [&mut a[..], &mut b[..]], 1, 1, &[0; 4], &[0; 4]);
}

#[test]
#[should_panic(expected = "out of range")]
fn recover_one_out_of_range_panics() {
    let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
    scalar::recover_one_p(&mut [&mut a[..], &mut b[..]], 2, &[0; 4]);
}
