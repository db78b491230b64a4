//! AVX2 + GFNI path (x86_64). Needs CPU features `avx2` and `gfni`;
//! [`get`] returns `None` without them.
//!
//! 32-byte vectors, 4 per iteration. Both multiply-by-2 and multiplication by any
//! constant are a single `vgf2p8affineqb` with the constant's 8×8 bit matrix
//! ([`crate::gf::affine_matrix`]; valid for polynomial 0x11d because multiplication by
//! a constant is GF(2)-linear).

use core::arch::x86_64::*;

use crate::src::Src;
use crate::Parity;

type V = __m256i;
const W: usize = 32;
const U: usize = 4;
type T = V;

use crate::avx512_gfni::MUL2_MATRIX;

/// # Safety
/// CPU has AVX2 and GFNI; `off + W <= s.len()`.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn ld(s: &[u8], off: usize) -> V {
    debug_assert!(off + W <= s.len());
    _mm256_loadu_si256(s.as_ptr().add(off).cast())
}

/// # Safety
/// CPU has AVX2 and GFNI; `off + W <= d.len()`.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn st(d: &mut [u8], off: usize, v: V) {
    debug_assert!(off + W <= d.len());
    _mm256_storeu_si256(d.as_mut_ptr().add(off).cast(), v)
}

/// # Safety
/// CPU has AVX2 and GFNI.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn vzero() -> V {
    _mm256_setzero_si256()
}

/// # Safety
/// CPU has AVX2 and GFNI.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn vxor(a: V, b: V) -> V {
    _mm256_xor_si256(a, b)
}

/// # Safety
/// CPU has AVX2 and GFNI.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn mul2(v: V) -> V {
    _mm256_gf2p8affine_epi64_epi8::<0>(v, _mm256_set1_epi64x(MUL2_MATRIX as i64))
}

/// # Safety
/// CPU has AVX2 and GFNI.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn tab(c: u8) -> T {
    _mm256_set1_epi64x(crate::gf::affine_matrix(c) as i64)
}

/// # Safety
/// CPU has AVX2 and GFNI.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn mulc(t: &T, v: V) -> V {
    _mm256_gf2p8affine_epi64_epi8::<0>(v, *t)
}

/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn vor(a: V, b: V) -> V {
    _mm256_or_si256(a, b)
}

/// Is any bit of `v` set?
///
/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx2,gfni")]
unsafe fn vany(v: V) -> bool {
    _mm256_testz_si256(v, v) == 0
}

kernels!(#[target_feature(enable = "avx2,gfni")]; unsafe);
xor_kernels!(#[target_feature(enable = "avx2,gfni")]; unsafe);
verify_kernels!(#[target_feature(enable = "avx2,gfni")]; unsafe);
ops!("avx2-gfni", simd_call);

/// The AVX2 + GFNI path, or `None` if this CPU lacks any of AVX-512F, AVX-512BW,
pub fn get() -> Option<&'static Parity> {
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("gfni") {
        Some(&OPS)
    } else {
        None
    }
}
