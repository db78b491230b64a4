//! Parity kernels for RAID4/5 (XOR) and RAID6 (P+Q over GF(2^8), polynomial 0x11d,
//! generator 2), with recovery of any one or two missing blocks.
//!
//! Every function has a scalar reference in [`scalar`]; the top-level functions dispatch at
//! runtime to the fastest SIMD path the CPU has, and every SIMD path is tested against the
//! scalar reference. Blocks are byte slices of equal length (any length; SIMD paths handle
//! tails).
//!
//! Data blocks are always passed in **syndrome-slot order** (slot `j` gets coefficient
//! `g^j` in Q). Callers map members to slots with `raidkit-layout`.
//!
//! CONTRACT (used by raidkit-engine; keep signatures stable): [`xor_into`], [`xor_gen`],
//! [`pq_gen`], [`mul_acc`], [`recover_one_p`], [`recover_one_q`], [`recover_two`],
//! [`gf`] module functions, [`scalar`] module with the same functions.

pub mod gf;
pub mod scalar;

/// `dst ^= src` for every byte. Panics if lengths differ (programming error).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    todo!("{} {}", dst.len(), src.len())
}

/// `dst = src[0] ^ src[1] ^ ...` (RAID5 parity). `srcs` may be empty (dst zeroed).
pub fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) {
    todo!("{} {}", srcs.len(), dst.len())
}

/// RAID6 syndromes: `p = ⊕ data[j]`, `q = ⊕ g^j · data[j]` (j = slot index).
/// `data` must have at least 1 block.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    todo!("{} {} {}", data.len(), p.len(), q.len())
}

/// `dst ^= coef · src` in GF(2^8) (used for RAID6 read-modify-write of Q:
/// `Q ^= g^slot · (old ^ new)`).
pub fn mul_acc(dst: &mut [u8], src: &[u8], coef: u8) {
    todo!("{} {} {coef}", dst.len(), src.len())
}

/// Recover data slot `a` from P: `data[a] = p ^ ⊕_{j≠a} data[j]`.
/// The content of `data[a]` on entry is ignored.
pub fn recover_one_p(data: &mut [&mut [u8]], a: usize, p: &[u8]) {
    todo!("{} {a} {}", data.len(), p.len())
}

/// Recover data slot `a` from Q (P is missing or not trusted):
/// `data[a] = g^-a · (q ^ ⊕_{j≠a} g^j·data[j])`. The content of `data[a]` is ignored.
pub fn recover_one_q(data: &mut [&mut [u8]], a: usize, q: &[u8]) {
    todo!("{} {a} {}", data.len(), q.len())
}

/// Recover two data slots `a != b` from P and Q (md's raid6_2data_recov).
/// Contents of `data[a]` and `data[b]` on entry are ignored.
pub fn recover_two(data: &mut [&mut [u8]], a: usize, b: usize, p: &[u8], q: &[u8]) {
    todo!("{} {a} {b} {} {}", data.len(), p.len(), q.len())
}

/// Name of the implementation the dispatcher picked (`avx512`, `avx2`, `ssse3`,
/// `portable`...).
pub fn implementation() -> &'static str {
    todo!()
}
