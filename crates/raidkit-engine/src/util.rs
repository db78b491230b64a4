//! Small helpers.

use std::time::{SystemTime, UNIX_EPOCH};

/// Current Unix time in seconds.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// 16 random bytes from the OS.
pub(crate) fn random_uuid() -> std::io::Result<[u8; 16]> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// True if every byte is zero.
pub(crate) fn is_zero(b: &[u8]) -> bool {
    let mut it = b.chunks_exact(64);
    for c in &mut it {
        if c.iter().fold(0u8, |a, &x| a | x) != 0 {
            return false;
        }
    }
    it.remainder().iter().all(|&x| x == 0)
}
