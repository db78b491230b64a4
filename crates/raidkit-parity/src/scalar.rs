//! Scalar reference implementations. Simple, obviously correct, byte at a time.
//! Same contracts as the top-level functions of the crate.

/// See [`crate::xor_into`].
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    todo!("{} {}", dst.len(), src.len())
}
