//! AVX-512BW path (x86_64). Needs CPU features `avx512f` and `avx512bw`; [`get`]
//! returns `None` without them.
//!
//! 64-byte vectors, 4 per iteration. Multiply-by-2 uses a byte sign mask
//! (`vpmovb2m`) and a masked constant; multiplication by a constant uses two
//! `vpshufb` nibble lookups.

use core::arch::x86_64::*;

use crate::src::Src;
use crate::Parity;

type V = __m512i;
const W: usize = 64;
const U: usize = 4;
type T = (V, V);

/// # Safety
/// CPU has AVX-512F/BW; `off + W <= s.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn ld(s: &[u8], off: usize) -> V {
    debug_assert!(off + W <= s.len());
    _mm512_loadu_si512(s.as_ptr().add(off).cast())
}

/// # Safety
/// CPU has AVX-512F/BW; `off + W <= d.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn st(d: &mut [u8], off: usize, v: V) {
    debug_assert!(off + W <= d.len());
    _mm512_storeu_si512(d.as_mut_ptr().add(off).cast(), v)
}

/// # Safety
/// CPU has AVX-512F/BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn vzero() -> V {
    _mm512_setzero_si512()
}

/// # Safety
/// CPU has AVX-512F/BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn vxor(a: V, b: V) -> V {
    _mm512_xor_si512(a, b)
}

/// # Safety
/// CPU has AVX-512F/BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn mul2(v: V) -> V {
    let k = _mm512_movepi8_mask(v);
    let d = _mm512_add_epi8(v, v);
    _mm512_xor_si512(d, _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x1d)))
}

/// # Safety
/// CPU has AVX-512F/BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn tab(c: u8) -> T {
    let [lo, hi] = crate::gf::nibble_tables(c);
    (
        _mm512_broadcast_i32x4(_mm_loadu_si128(lo.as_ptr().cast())),
        _mm512_broadcast_i32x4(_mm_loadu_si128(hi.as_ptr().cast())),
    )
}

/// # Safety
/// CPU has AVX-512F/BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn mulc(t: &T, v: V) -> V {
    let m = _mm512_set1_epi8(0x0f);
    let lo = _mm512_and_si512(v, m);
    let hi = _mm512_and_si512(_mm512_srli_epi64(v, 4), m);
    _mm512_xor_si512(_mm512_shuffle_epi8(t.0, lo), _mm512_shuffle_epi8(t.1, hi))
}

/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn vor(a: V, b: V) -> V {
    _mm512_or_si512(a, b)
}

/// Is any bit of `v` set?
///
/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn vany(v: V) -> bool {
    _mm512_test_epi64_mask(v, v) != 0
}

kernels!(#[target_feature(enable = "avx512f,avx512bw")]; unsafe);
xor_kernels!(#[target_feature(enable = "avx512f,avx512bw")]; unsafe);
verify_kernels!(#[target_feature(enable = "avx512f,avx512bw")]; unsafe);
ops!("avx512", simd_call);

/// The AVX-512BW path, or `None` if this CPU lacks AVX-512F or AVX-512BW.
pub fn get() -> Option<&'static Parity> {
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
        Some(&OPS)
    } else {
        None
    }
}
