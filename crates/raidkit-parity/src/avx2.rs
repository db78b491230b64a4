//! AVX2 path (x86_64). Needs CPU feature `avx2`; [`get`] returns `None` without it.
//!
//! 32-byte vectors, 4 per iteration. Multiply-by-2 is `cmpgt`/`add`/`and`/`xor`;
//! multiplication by a constant uses two `vpshufb` nibble lookups.

use core::arch::x86_64::*;

use crate::src::Src;
use crate::Parity;

type V = __m256i;
const W: usize = 32;
const U: usize = 4;
type T = (V, V);

/// # Safety
/// CPU has AVX2; `off + W <= s.len()`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn ld(s: &[u8], off: usize) -> V {
    debug_assert!(off + W <= s.len());
    _mm256_loadu_si256(s.as_ptr().add(off).cast())
}

/// # Safety
/// CPU has AVX2; `off + W <= d.len()`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn st(d: &mut [u8], off: usize, v: V) {
    debug_assert!(off + W <= d.len());
    _mm256_storeu_si256(d.as_mut_ptr().add(off).cast(), v)
}

/// # Safety
/// CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn vzero() -> V {
    _mm256_setzero_si256()
}

/// # Safety
/// CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn vxor(a: V, b: V) -> V {
    _mm256_xor_si256(a, b)
}

/// # Safety
/// CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn mul2(v: V) -> V {
    let m = _mm256_cmpgt_epi8(_mm256_setzero_si256(), v);
    let d = _mm256_add_epi8(v, v);
    _mm256_xor_si256(d, _mm256_and_si256(m, _mm256_set1_epi8(0x1d)))
}

/// # Safety
/// CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn tab(c: u8) -> T {
    let [lo, hi] = crate::gf::nibble_tables(c);
    (
        _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast())),
        _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast())),
    )
}

/// # Safety
/// CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn mulc(t: &T, v: V) -> V {
    let m = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(v, m);
    let hi = _mm256_and_si256(_mm256_srli_epi64(v, 4), m);
    _mm256_xor_si256(_mm256_shuffle_epi8(t.0, lo), _mm256_shuffle_epi8(t.1, hi))
}

/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn vor(a: V, b: V) -> V {
    _mm256_or_si256(a, b)
}

/// Is any bit of `v` set?
///
/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn vany(v: V) -> bool {
    _mm256_testz_si256(v, v) == 0
}

kernels!(#[target_feature(enable = "avx2")]; unsafe);
xor_kernels!(#[target_feature(enable = "avx2")]; unsafe);
verify_kernels!(#[target_feature(enable = "avx2")]; unsafe);
ops!("avx2", simd_call);

/// The AVX2 path, or `None` if this CPU lacks AVX2.
pub fn get() -> Option<&'static Parity> {
    if is_x86_feature_detected!("avx2") {
        Some(&OPS)
    } else {
        None
    }
}
