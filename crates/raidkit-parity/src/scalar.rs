//! Scalar reference implementations. Simple, obviously correct, byte at a time.
//! Same contracts as the top-level functions of the crate.
//!
//! These compute Q directly as `⊕ g^j · D_j` (not by Horner) and recover with the
//! textbook formulas, so they are an independent oracle for the fast paths.

use crate::check;
use crate::gf;

/// See [`crate::xor_into`].
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    check::len("src", src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

/// See [`crate::xor_gen`].
pub fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) {
    check::blocks("srcs", srcs, dst.len());
    dst.fill(0);
    for s in srcs {
        for (d, x) in dst.iter_mut().zip(s.iter()) {
            *d ^= *x;
        }
    }
}

/// See [`crate::pq_gen`].
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    check::pq(data, p.len(), q.len());
    p.fill(0);
    q.fill(0);
    for (j, d) in data.iter().enumerate() {
        let c = gf::exp(j);
        for i in 0..d.len() {
            p[i] ^= d[i];
            q[i] ^= gf::mul(c, d[i]);
        }
    }
}

/// See [`crate::mul_acc`].
pub fn mul_acc(dst: &mut [u8], src: &[u8], coef: u8) {
    check::len("src", src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= gf::mul(coef, *s);
    }
}

/// See [`crate::recover_one_p`].
pub fn recover_one_p(data: &mut [&mut [u8]], a: usize, p: &[u8]) {
    check::recover_one(data, a, p.len());
    for i in 0..p.len() {
        let mut x = p[i];
        for (j, d) in data.iter().enumerate() {
            if j != a {
                x ^= d[i];
            }
        }
        data[a][i] = x;
    }
}

/// See [`crate::recover_one_q`].
pub fn recover_one_q(data: &mut [&mut [u8]], a: usize, q: &[u8]) {
    check::recover_one(data, a, q.len());
    let ginv_a = gf::inv(gf::exp(a));
    for i in 0..q.len() {
        let mut x = q[i];
        for (j, d) in data.iter().enumerate() {
            if j != a {
                x ^= gf::mul(gf::exp(j), d[i]);
            }
        }
        data[a][i] = gf::mul(ginv_a, x);
    }
}

/// See [`crate::recover_two`].
pub fn recover_two(data: &mut [&mut [u8]], a: usize, b: usize, p: &[u8], q: &[u8]) {
    check::recover_two(data, a, b, p.len(), q.len());
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    // D_b = gfexi[b-a]·Pxy ⊕ (g^a ⊕ g^b)^-1·Qxy ; D_a = D_b ⊕ Pxy
    let cp = gf::exi(b - a);
    let cq = gf::inv(gf::exp(a) ^ gf::exp(b));
    for i in 0..p.len() {
        let mut pxy = p[i];
        let mut qxy = q[i];
        for (j, d) in data.iter().enumerate() {
            if j != a && j != b {
                pxy ^= d[i];
                qxy ^= gf::mul(gf::exp(j), d[i]);
            }
        }
        let db = gf::mul(cp, pxy) ^ gf::mul(cq, qxy);
        data[b][i] = db;
        data[a][i] = db ^ pxy;
    }
}

/// See [`crate::xor_zero`].
pub fn xor_zero(blocks: &[&[u8]]) -> bool {
    let len = blocks.first().map_or(0, |b| b.len());
    check::blocks("blocks", blocks, len);
    (0..len).all(|i| blocks.iter().fold(0u8, |x, b| x ^ b[i]) == 0)
}

/// See [`crate::pq_check`].
pub fn pq_check(data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
    check::pq(data, p.len(), q.len());
    let (mut p2, mut q2) = (vec![0u8; p.len()], vec![0u8; q.len()]);
    pq_gen(data, &mut p2, &mut q2);
    p == p2 && q == q2
}
