//! Deterministic test patterns.

/// splitmix64 output `i` for state `seed` (the mdref pattern word).
pub fn pattern_word(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add((i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fill `buf` with the mdref pattern bytes `[offset, offset+len)` of `seed`.
pub fn fill_mdref(seed: u64, offset: u64, buf: &mut [u8]) {
    for (j, b) in buf.iter_mut().enumerate() {
        let k = offset + j as u64;
        *b = pattern_word(seed, k / 8).to_le_bytes()[(k % 8) as usize];
    }
}

/// Fill `buf` with the position-tagged pattern at byte `offset` of `seed`: every 512-byte
/// sector starts with 16 bytes (`b"RKTAG"`-free: u64 sector number, u64 splitmix of it)
/// and is zero after; compresses well and detects any sector-level misplacement.
pub fn fill_tagged(seed: u64, offset: u64, buf: &mut [u8]) {
    for (j, b) in buf.iter_mut().enumerate() {
        let k = offset + j as u64;
        let sector = k / 512;
        let within = k % 512;
        *b = if within < 8 {
            sector.to_le_bytes()[within as usize]
        } else if within < 16 {
            pattern_word(seed, sector).to_le_bytes()[(within - 8) as usize]
        } else {
            0
        };
    }
}
