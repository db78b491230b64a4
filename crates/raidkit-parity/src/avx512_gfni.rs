//! AVX-512 + GFNI path (x86_64). Needs CPU features `avx512f`, `avx512bw` and `gfni`;
//! [`get`] returns `None` without them.
//!
//! 64-byte vectors, 4 per iteration. Both multiply-by-2 and multiplication by any
//! constant are a single `vgf2p8affineqb` with the constant's 8×8 bit matrix
//! ([`crate::gf::affine_matrix`]; valid for polynomial 0x11d because multiplication by
//! a constant is GF(2)-linear). P/Q Horner folds two slots per step with
//! `vgf2p8affineqb` (×4, ×2) and `vpternlogq` (3-way XOR): `kernels!(paired ...)`.

use core::arch::x86_64::*;

use crate::src::Src;
use crate::Parity;

type V = __m512i;
const W: usize = 64;
const U: usize = 4;
type T = V;

/// `gf::affine_matrix(2)` (checked by a test).
pub(crate) const MUL2_MATRIX: u64 = 0x8001_8284_8810_2040;

/// # Safety
/// CPU has AVX-512F/BW and GFNI; `off + W <= s.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn ld(s: &[u8], off: usize) -> V {
    debug_assert!(off + W <= s.len());
    _mm512_loadu_si512(s.as_ptr().add(off).cast())
}

/// # Safety
/// CPU has AVX-512F/BW and GFNI; `off + W <= d.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn st(d: &mut [u8], off: usize, v: V) {
    debug_assert!(off + W <= d.len());
    _mm512_storeu_si512(d.as_mut_ptr().add(off).cast(), v)
}

/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn vzero() -> V {
    _mm512_setzero_si512()
}

/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn vxor(a: V, b: V) -> V {
    _mm512_xor_si512(a, b)
}

/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn mul2(v: V) -> V {
    _mm512_gf2p8affine_epi64_epi8::<0>(v, _mm512_set1_epi64(MUL2_MATRIX as i64))
}

/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn tab(c: u8) -> T {
    _mm512_set1_epi64(crate::gf::affine_matrix(c) as i64)
}

/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn mulc(t: &T, v: V) -> V {
    _mm512_gf2p8affine_epi64_epi8::<0>(v, *t)
}

/// `gf::affine_matrix(4)` (checked by a test).
pub(crate) const MUL4_MATRIX: u64 = 0x4080_41c2_c488_1020;

/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn mul4(v: V) -> V {
    _mm512_gf2p8affine_epi64_epi8::<0>(v, _mm512_set1_epi64(MUL4_MATRIX as i64))
}

/// `a ^ b ^ c` in one `vpternlogq`.
///
/// # Safety
/// CPU has AVX-512F/BW and GFNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn xor3(a: V, b: V, c: V) -> V {
    _mm512_ternarylogic_epi64::<0x96>(a, b, c)
}

/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn vor(a: V, b: V) -> V {
    _mm512_or_si512(a, b)
}

/// Is any bit of `v` set?
///
/// # Safety
/// CPU has the path's features.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn vany(v: V) -> bool {
    _mm512_test_epi64_mask(v, v) != 0
}

kernels!(paired #[target_feature(enable = "avx512f,avx512bw,gfni")]; unsafe);
xor_kernels!(#[target_feature(enable = "avx512f,avx512bw,gfni")]; unsafe);
verify_kernels!(#[target_feature(enable = "avx512f,avx512bw,gfni")]; unsafe);
ops!("avx512-gfni", simd_call);

/// The AVX-512 + GFNI path, or `None` if this CPU lacks any of AVX-512F, AVX-512BW,
/// GFNI.
pub fn get() -> Option<&'static Parity> {
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("gfni")
    {
        Some(&OPS)
    } else {
        None
    }
}
