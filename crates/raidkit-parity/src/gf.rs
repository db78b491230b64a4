//! GF(2^8) arithmetic with MD's polynomial x^8+x^4+x^3+x^2+1 (0x11d), generator 2.

/// `a · b` in GF(2^8).
pub fn mul(a: u8, b: u8) -> u8 {
    todo!("{a} {b}")
}

/// `g^i` (i taken mod 255).
pub fn exp(i: usize) -> u8 {
    todo!("{i}")
}

/// Multiplicative inverse (`inv(0)` returns 0).
pub fn inv(x: u8) -> u8 {
    todo!("{x}")
}
