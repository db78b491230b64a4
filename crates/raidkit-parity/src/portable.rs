//! Portable path: SWAR on `u64` words (8 bytes at a time), no `unsafe`, any CPU.
//!
//! XOR works on whole words; multiply-by-2 works on 8 bytes at once with masks
//! (`((x & 0x7f..) << 1) ^ (((x & 0x80..) >> 7) · 0x1d)`); multiplication by a
//! constant `c` is bit-sliced: `c·x = ⊕_k [bit k of x] · (c·2^k)`.

use crate::src::Src;
use crate::Parity;

type V = u64;
const W: usize = 8;
const U: usize = 4;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;
const ONES: u64 = 0x0101_0101_0101_0101;

#[inline(always)]
fn ld(s: &[u8], off: usize) -> V {
    let mut b = [0u8; W];
    b.copy_from_slice(&s[off..off + W]);
    u64::from_ne_bytes(b)
}

#[inline(always)]
fn st(d: &mut [u8], off: usize, v: V) {
    d[off..off + W].copy_from_slice(&v.to_ne_bytes());
}

#[inline(always)]
fn vzero() -> V {
    0
}

#[inline(always)]
fn vxor(a: V, b: V) -> V {
    a ^ b
}

#[inline(always)]
fn mul2(x: V) -> V {
    ((x & LOW7) << 1) ^ (((x & HIGH) >> 7) * 0x1d)
}

/// `T[k]` = `c · 2^k` splatted to every byte.
type T = [u64; 8];

fn tab(c: u8) -> T {
    let mut t = [0u64; 8];
    for (k, e) in t.iter_mut().enumerate() {
        *e = crate::gf::mul(c, 1 << k) as u64 * ONES;
    }
    t
}

#[inline(always)]
fn mulc(t: &T, x: V) -> V {
    let mut r = 0;
    for (k, e) in t.iter().enumerate() {
        r ^= (((x >> k) & ONES) * 0xff) & e;
    }
    r
}

kernels!(;);
ops!("portable", plain_call);

/// The portable path (always available).
pub fn get() -> Option<&'static Parity> {
    Some(&OPS)
}

/// The portable path's table, for callers that want it without the `Option`.
pub fn parity() -> &'static Parity {
    &OPS
}
