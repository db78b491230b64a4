//! GF(2^8) arithmetic with MD's polynomial x^8+x^4+x^3+x^2+1 (0x11d), generator 2.
//!
//! All tables are built at compile time (`const fn`), so nothing here allocates or
//! initialises lazily.

/// The reducing polynomial, including the x^8 term.
pub const POLY: u16 = 0x11d;

/// Exponent table: `EXP[i] = g^i` for `i` in `0..510` (doubled so that
/// `EXP[log a + log b]` needs no reduction mod 255).
static EXP: [u8; 510] = build_exp();
/// Logarithm table: `LOG[x] = i` with `g^i = x` for `x != 0`; `LOG[0]` is unused (0).
static LOG: [u8; 256] = build_log();
/// Inverse table: `INV[x] = x^-1`, `INV[0] = 0`.
static INV: [u8; 256] = build_inv();

const fn build_exp() -> [u8; 510] {
    let mut t = [0u8; 510];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 510 {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

const fn build_inv() -> [u8; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [0u8; 256];
    let mut x = 1;
    while x < 256 {
        t[x] = exp[255 - log[x] as usize];
        x += 1;
    }
    t
}

/// `a · b` in GF(2^8).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// `g^i` (i taken mod 255).
#[inline]
pub fn exp(i: usize) -> u8 {
    EXP[i % 255]
}

/// Multiplicative inverse (`inv(0)` returns 0).
#[inline]
pub fn inv(x: u8) -> u8 {
    INV[x as usize]
}

/// Discrete logarithm base `g`: `Some(i)` with `g^i = x` (`i < 255`), `None` for 0.
#[inline]
pub fn log(x: u8) -> Option<u8> {
    if x == 0 {
        None
    } else {
        Some(LOG[x as usize])
    }
}

/// `2 · x` (multiplication by the generator): shift left, XOR 0x1d on overflow.
#[inline]
pub fn mul2(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { 0x1d } else { 0 }
}

/// The kernel's `gfexi[x] = (g^x ⊕ 1)^-1`, the coefficient of `Pxy` in two-data
/// recovery. `exi(0)` is `inv(0) = 0` (meaningless: slots must differ).
#[inline]
pub fn exi(x: usize) -> u8 {
    inv(exp(x) ^ 1)
}

/// PSHUFB nibble tables for multiplication by `c`: `(lo, hi)` with
/// `lo[i] = c · i` and `hi[i] = c · (i << 4)`, so `c · x = lo[x & 15] ^ hi[x >> 4]`.
pub fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for i in 0..16u8 {
        lo[i as usize] = mul(c, i);
        hi[i as usize] = mul(c, i << 4);
    }
    (lo, hi)
}

/// 8×8 bit matrix of "multiply by `c`" in the layout of x86 GFNI
/// `GF2P8AFFINEQB`: byte `7 - i` of the result holds the row for output bit `i`
/// (bit `k` of that row is bit `i` of `c · 2^k`). Multiplication by a constant is
/// GF(2)-linear, so this works for polynomial 0x11d although GFNI's own multiply
/// instruction uses 0x11b.
pub fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for k in 0..8 {
            if mul(c, 1 << k) & (1 << i) != 0 {
                row |= 1 << k;
            }
        }
        m |= (row as u64) << (8 * (7 - i));
    }
    m
}
