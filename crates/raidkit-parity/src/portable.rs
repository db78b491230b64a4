//! Portable path: SWAR on `u64` words (8 bytes at a time), no `unsafe`, any CPU.
//!
//! XOR is done one source at a time over 4 KiB windows with plain loops (which the
//! compiler vectorises for the target); multiply-by-2 works on 8 bytes at once with masks
//! (`((x & 0x7f..) << 1) ^ (((x & 0x80..) >> 7) · 0x1d)`); multiplication by a
//! constant `c` looks each byte up in a 256-byte row of the multiplication table.

use crate::src::Src;
use crate::Parity;

type V = u64;
const W: usize = 8;
const U: usize = 4;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HIGH: u64 = 0x8080_8080_8080_8080;

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

/// Row of the multiplication table: `T[x] = c · x`.
type T = &'static [u8; 256];

fn tab(c: u8) -> T {
    crate::gf::mul_row(c)
}

#[inline(always)]
fn mulc(t: &T, x: V) -> V {
    let b = x.to_ne_bytes();
    u64::from_ne_bytes([
        t[b[0] as usize],
        t[b[1] as usize],
        t[b[2] as usize],
        t[b[3] as usize],
        t[b[4] as usize],
        t[b[5] as usize],
        t[b[6] as usize],
        t[b[7] as usize],
    ])
}

#[inline(always)]
fn vor(a: V, b: V) -> V {
    a | b
}

#[inline(always)]
fn vany(v: V) -> bool {
    v != 0
}

kernels!(;);

/// XOR pass `dst ^= src`: a plain loop the compiler vectorises for the target.
#[inline]
fn xor_pass(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

/// `dst = (acc ? dst : 0) ^ first ^ ⊕ s`, one source at a time over 4 KiB windows
/// of `dst` (which stay in L1 cache between passes).
fn xor_k<S: Src + ?Sized>(s: &S, first: Option<&[u8]>, dst: &mut [u8], acc: bool) {
    const WINDOW: usize = 4096;
    for (w, d) in dst.chunks_mut(WINDOW).enumerate() {
        let range = w * WINDOW..w * WINDOW + d.len();
        match (first, acc) {
            (Some(f), true) => xor_pass(d, &f[range.clone()]),
            (Some(f), false) => d.copy_from_slice(&f[range.clone()]),
            (None, false) => d.fill(0),
            (None, true) => {}
        }
        for j in 0..s.slots() {
            if let Some(b) = s.block(j) {
                xor_pass(d, &b[range.clone()]);
            }
        }
    }
}
verify_kernels!(;);
ops!("portable", plain_call);

/// The portable path (always available).
pub fn get() -> Option<&'static Parity> {
    Some(&OPS)
}

/// The portable path's table, for callers that want it without the `Option`.
pub fn parity() -> &'static Parity {
    &OPS
}
