//! Byte-at-a-time versions of the generic kernels over `[from, len)`: the tails the
//! vector loops leave behind (fewer bytes than one vector).

use crate::gf;
use crate::src::Src;

/// `dst[i] = (acc ? dst[i] : 0) ^ first[i] ^ ⊕ s[j][i]` for `i >= from`.
pub(crate) fn xor<S: Src + ?Sized>(
    s: &S,
    first: Option<&[u8]>,
    dst: &mut [u8],
    acc: bool,
    from: usize,
) {
    for i in from..dst.len() {
        let mut x = if acc { dst[i] } else { 0 };
        if let Some(f) = first {
            x ^= f[i];
        }
        for j in 0..s.slots() {
            if let Some(b) = s.block(j) {
                x ^= b[i];
            }
        }
        dst[i] = x;
    }
}

/// P and Q of byte `i` over slots `0..top` (Horner, absent slots are zero).
#[inline]
pub(crate) fn syn<S: Src + ?Sized>(s: &S, top: usize, i: usize) -> (u8, u8) {
    let (mut p, mut q) = (0u8, 0u8);
    for j in (0..top).rev() {
        q = gf::mul2(q);
        if let Some(b) = s.block(j) {
            p ^= b[i];
            q ^= b[i];
        }
    }
    (p, q)
}

/// P/Q generation for bytes `from..`.
pub(crate) fn pq<S: Src + ?Sized>(s: &S, p: &mut [u8], q: &mut [u8], from: usize) {
    let top = s.top();
    for i in from..p.len() {
        (p[i], q[i]) = syn(s, top, i);
    }
}

/// `dst ^= c · src` for bytes `from..`.
pub(crate) fn mul_acc(dst: &mut [u8], src: &[u8], c: u8, from: usize) {
    for i in from..dst.len() {
        dst[i] ^= gf::mul(c, src[i]);
    }
}

/// `dst = c · (q ^ Q')` for bytes `from..`.
pub(crate) fn recov_q<S: Src + ?Sized>(s: &S, q: &[u8], dst: &mut [u8], c: u8, from: usize) {
    let top = s.top();
    for i in from..dst.len() {
        let (_, qs) = syn(s, top, i);
        dst[i] = gf::mul(c, q[i] ^ qs);
    }
}

/// Two-data recovery for bytes `from..`: `db = cp·Pxy ^ cq·Qxy`, `da = db ^ Pxy`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn recov_two<S: Src + ?Sized>(
    s: &S,
    p: &[u8],
    q: &[u8],
    da: &mut [u8],
    db: &mut [u8],
    cp: u8,
    cq: u8,
    from: usize,
) {
    let top = s.top();
    for i in from..da.len() {
        let (ps, qs) = syn(s, top, i);
        let pxy = p[i] ^ ps;
        let qxy = q[i] ^ qs;
        let d = gf::mul(cp, pxy) ^ gf::mul(cq, qxy);
        db[i] = d;
        da[i] = d ^ pxy;
    }
}

/// Is `⊕ s[j][i]` zero for every `i` in `from..len`?
pub(crate) fn xor_zero(s: &[&[u8]], len: usize, from: usize) -> bool {
    (from..len).all(|i| s.iter().fold(0u8, |x, b| x ^ b[i]) == 0)
}

/// Are `p[i]`, `q[i]` the syndromes of `s` for every `i >= from`?
pub(crate) fn pq_check(s: &[&[u8]], p: &[u8], q: &[u8], from: usize) -> bool {
    let top = s.top();
    (from..p.len()).all(|i| syn(s, top, i) == (p[i], q[i]))
}
