//! Test support for raidkit.
//!
//! * [`pattern`]: the mdref splitmix64 pattern (byte k = byte k%8 of word k/8) and the
//!   compressible position-tagged pattern used for committed kernel fixtures.
//! * [`mdref`]: locate and run the mdref harness (the real Linux md + mdadm in a VM).
//! * [`fixtures`]: the committed kernel-made fixtures under `tests/fixtures/kernel`.
//! * [`tempdir`]: a self-deleting temporary directory.
//! * [`proc`]: system tools, commands with deadlines, waiting, children stopped on drop.
//! * `hooked` (feature `engine`): a member device that forwards to another through a
//!   test's hooks (count, delay, fail or watch its IO).
//! * `arrays` (feature `engine`): member files in a test's directory and the options to
//!   create an array over them.
//! * `superblock` (feature `superblock`): a member file's 1.x superblock read and
//!   rewritten in place.

#[cfg(feature = "engine")]
pub mod arrays;
pub mod fixtures;
#[cfg(feature = "engine")]
pub mod hooked;
pub mod mdref;
pub mod pattern;
pub mod proc;
#[cfg(feature = "superblock")]
pub mod superblock;
pub mod tempdir;

use std::path::PathBuf;

/// The root of the raidkit repository (the workspace directory).
pub fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or(here)
}

/// Simple non-cryptographic 64-bit FNV-1a hash, for "bytes unchanged" checks.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Hash the whole contents of a file with [`fnv1a64`].
pub fn hash_file(path: &std::path::Path) -> std::io::Result<u64> {
    Ok(fnv1a64(&std::fs::read(path)?))
}
