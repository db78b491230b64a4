//! The anchor computes the same thing as raidkit: ISA-L's P/Q/XOR equal raidkit's
//! (scalar reference and every SIMD path) byte for byte, and ISA-L's two-data recovery
//! rebuilds exactly the lost blocks.

use raidkit_bench_isal as isal;
use raidkit_parity::bench::{AlignedBuf, Stripes};
use raidkit_parity::{self as rp, scalar};

fn skip() -> bool {
    if !isal::available() {
        eprintln!("libisal not linked: skipping (see install-deps.sh)");
        return true;
    }
    false
}

#[test]
fn known_answer_pq() {
    if skip() {
        return;
    }
    let mut d0 = AlignedBuf::new(64);
    let mut d1 = AlignedBuf::new(64);
    d0.as_mut_slice().fill(0x01);
    d1.as_mut_slice().fill(0x80);
    let (mut p, mut q) = (AlignedBuf::new(64), AlignedBuf::new(64));
    isal::pq_gen(
        &[d0.as_slice(), d1.as_slice()],
        p.as_mut_slice(),
        q.as_mut_slice(),
    )
    .unwrap();
    // P = 0x01 ^ 0x80; Q = 0x01 ^ 2·0x80 = 0x01 ^ 0x1d (0x11d reduction)
    assert_eq!(p.as_slice(), &[0x81u8; 64][..]);
    assert_eq!(q.as_slice(), &[0x1cu8; 64][..]);
    let mut x = AlignedBuf::new(64);
    isal::xor_gen(&[d0.as_slice(), d1.as_slice()], x.as_mut_slice()).unwrap();
    assert_eq!(x.as_slice(), &[0x81u8; 64][..]);
}

#[test]
fn xor_and_pq_equal_raidkit() {
    if skip() {
        return;
    }
    for k in [2usize, 3, 4, 8, 12, 16] {
        for chunk in [64usize, 4096, 65536 + 64] {
            let mut s = Stripes::new(k, chunk, 0, (k * 1000 + chunk) as u64);
            s.with_stripe(0, |b| {
                let (data, pq) = b.split_at_mut(k);
                let views: Vec<&[u8]> = data.iter().map(|d| &**d).collect();
                let (mut rp_p, mut rp_q) = (vec![0u8; chunk], vec![0u8; chunk]);
                scalar::pq_gen(&views, &mut rp_p, &mut rp_q);
                let (p, q) = pq.split_at_mut(1);
                p[0].fill(0);
                q[0].fill(0);
                isal::pq_gen(&views, p[0], q[0]).unwrap();
                assert_eq!(&*p[0], &rp_p[..], "P k={k} chunk={chunk}");
                assert_eq!(&*q[0], &rp_q[..], "Q k={k} chunk={chunk}");
                for path in rp::implementations() {
                    let (mut pp, mut pq2) = (vec![0u8; chunk], vec![0u8; chunk]);
                    path.pq_gen(&views, &mut pp, &mut pq2);
                    assert_eq!(&*q[0], &pq2[..], "{} Q", path.name());
                    path.xor_gen(&views, &mut pp);
                    assert_eq!(&*p[0], &pp[..], "{} xor", path.name());
                }
                p[0].fill(0);
                isal::xor_gen(&views, p[0]).unwrap();
                assert_eq!(&*p[0], &rp_p[..], "xor k={k} chunk={chunk}");
            });
        }
    }
}

#[test]
fn rec2_rebuilds_lost_blocks_like_raidkit() {
    if skip() {
        return;
    }
    for k in [2usize, 3, 4, 8, 12] {
        let chunk = 4096;
        let mut s = Stripes::new(k, chunk, 0, k as u64);
        for a in 0..k {
            for b in 0..k {
                if a == b {
                    continue;
                }
                let r = isal::Rec2::new(k, a, b).unwrap();
                assert_eq!(r.matrix().len(), 2 * k);
                s.with_stripe(0, |blk| {
                    let orig: Vec<Vec<u8>> = blk.iter().map(|x| x.to_vec()).collect();
                    let (data, pq) = blk.split_at_mut(k);
                    data[a].fill(0xa5);
                    data[b].fill(0x5a);
                    r.recover(data, pq[0], pq[1]).unwrap();
                    assert_eq!(&*data[a], &orig[a][..], "k={k} a={a} b={b}");
                    assert_eq!(&*data[b], &orig[b][..], "k={k} a={a} b={b}");
                    // raidkit's recovery writes the very same bytes
                    data[a].fill(0);
                    data[b].fill(0);
                    rp::recover_two(data, a, b, pq[0], pq[1]);
                    assert_eq!(&*data[a], &orig[a][..]);
                    assert_eq!(&*data[b], &orig[b][..]);
                });
            }
        }
    }
}

#[test]
fn rec2_matrix_for_k4_lost_0_1() {
    if skip() {
        return;
    }
    // Survivors d2, d3, P, Q (columns). d0 ^ d1 = Pxy and d0 ^ 2·d1 = Qxy with
    // Pxy = P ^ d2 ^ d3, Qxy = Q ^ 4·d2 ^ 8·d3, so d1 = (Pxy ^ Qxy)/3, d0 = Pxy ^ d1.
    let r = isal::Rec2::new(4, 0, 1).unwrap();
    let c = rp::gf::inv(3);
    let mul = rp::gf::mul;
    let d1 = [mul(c, 1 ^ 4), mul(c, 1 ^ 8), c, c];
    let d0 = [1 ^ d1[0], 1 ^ d1[1], 1 ^ d1[2], d1[3]];
    assert_eq!(d0, [2, 6, 245, 244]);
    assert_eq!(&r.matrix()[..4], &d0[..]);
    assert_eq!(&r.matrix()[4..], &d1[..]);
}

#[test]
fn preconditions_are_errors_not_panics() {
    let a = AlignedBuf::new(128);
    let mut d = AlignedBuf::new(128);
    let short = AlignedBuf::new(64);
    assert!(isal::xor_gen(&[a.as_slice()], d.as_mut_slice()).is_err());
    assert!(isal::xor_gen(&[a.as_slice(), short.as_slice()], d.as_mut_slice()).is_err());
    assert!(isal::xor_gen(
        &[&a.as_slice()[1..65], &a.as_slice()[1..65]],
        &mut d.as_mut_slice()[..64]
    )
    .is_err());
    assert!(isal::Rec2::new(4, 1, 1).is_err());
    assert!(isal::Rec2::new(4, 0, 4).is_err());
    if !isal::available() {
        assert_eq!(
            isal::xor_gen(&[a.as_slice(), a.as_slice()], d.as_mut_slice()),
            Err(isal::Error::Unavailable)
        );
    }
}
