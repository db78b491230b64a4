//! SSSE3 path (x86_64). Needs CPU feature `ssse3`; [`get`] returns `None` without it.
//!
//! 16-byte vectors, 4 per iteration. Multiply-by-2 is `cmpgt`/`add`/`and`/`xor`;
//! multiplication by a constant uses two `pshufb` nibble lookups.

use core::arch::x86_64::*;

use crate::src::Src;
use crate::Parity;

type V = __m128i;
const W: usize = 16;
const U: usize = 4;
type T = (V, V);

/// # Safety
/// CPU has SSSE3; `off + W <= s.len()`.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn ld(s: &[u8], off: usize) -> V {
    debug_assert!(off + W <= s.len());
    _mm_loadu_si128(s.as_ptr().add(off).cast())
}

/// # Safety
/// CPU has SSSE3; `off + W <= d.len()`.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn st(d: &mut [u8], off: usize, v: V) {
    debug_assert!(off + W <= d.len());
    _mm_storeu_si128(d.as_mut_ptr().add(off).cast(), v)
}

/// # Safety
/// CPU has SSSE3.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn vzero() -> V {
    _mm_setzero_si128()
}

/// # Safety
/// CPU has SSSE3.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn vxor(a: V, b: V) -> V {
    _mm_xor_si128(a, b)
}

/// # Safety
/// CPU has SSSE3.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn mul2(v: V) -> V {
    let m = _mm_cmpgt_epi8(_mm_setzero_si128(), v);
    let d = _mm_add_epi8(v, v);
    _mm_xor_si128(d, _mm_and_si128(m, _mm_set1_epi8(0x1d)))
}

/// # Safety
/// CPU has SSSE3.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn tab(c: u8) -> T {
    let [lo, hi] = crate::gf::nibble_tables(c);
    (
        _mm_loadu_si128(lo.as_ptr().cast()),
        _mm_loadu_si128(hi.as_ptr().cast()),
    )
}

/// # Safety
/// CPU has SSSE3.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn mulc(t: &T, v: V) -> V {
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi64(v, 4), m);
    _mm_xor_si128(_mm_shuffle_epi8(t.0, lo), _mm_shuffle_epi8(t.1, hi))
}

/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn vor(a: V, b: V) -> V {
    _mm_or_si128(a, b)
}

/// Is any bit of `v` set?
///
/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn vany(v: V) -> bool {
    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_setzero_si128())) != 0xffff
}

kernels!(#[target_feature(enable = "ssse3")]; unsafe);
xor_kernels!(#[target_feature(enable = "ssse3")]; unsafe);
verify_kernels!(#[target_feature(enable = "ssse3")]; unsafe);
ops!("ssse3", simd_call);

/// The SSSE3 path, or `None` if this CPU lacks SSSE3.
pub fn get() -> Option<&'static Parity> {
    if is_x86_feature_detected!("ssse3") {
        Some(&OPS)
    } else {
        None
    }
}
