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

/// `a · b` in GF(2^8) (one lookup in a 64 KiB table).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL[a as usize][b as usize]
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

/// Full multiplication table: `MUL[a][b] = a · b` (64 KiB).
static MUL: [[u8; 256]; 256] = build_mul();
/// PSHUFB nibble tables of every constant (8 KiB), see [`nibble_tables`].
static NIBBLE: [[[u8; 16]; 2]; 256] = build_nibble();
/// GFNI affine matrices of every constant (2 KiB), see [`affine_matrix`].
static AFFINE: [u64; 256] = build_affine();

const fn const_mul(exp: &[u8; 510], log: &[u8; 256], a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        exp[log[a as usize] as usize + log[b as usize] as usize]
    }
}

const fn build_mul() -> [[u8; 256]; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = const_mul(&exp, &log, a as u8, b as u8);
            b += 1;
        }
        a += 1;
    }
    t
}

const fn build_nibble() -> [[[u8; 16]; 2]; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [[[0u8; 16]; 2]; 256];
    let mut c = 0;
    while c < 256 {
        let mut i = 0;
        while i < 16 {
            t[c][0][i] = const_mul(&exp, &log, c as u8, i as u8);
            t[c][1][i] = const_mul(&exp, &log, c as u8, (i as u8) << 4);
            i += 1;
        }
        c += 1;
    }
    t
}

const fn build_affine() -> [u64; 256] {
    let exp = build_exp();
    let log = build_log();
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut m = 0u64;
        let mut i = 0;
        while i < 8 {
            let mut row = 0u8;
            let mut k = 0;
            while k < 8 {
                if const_mul(&exp, &log, c as u8, 1 << k) & (1 << i) != 0 {
                    row |= 1 << k;
                }
                k += 1;
            }
            m |= (row as u64) << (8 * (7 - i));
            i += 1;
        }
        t[c] = m;
        c += 1;
    }
    t
}

/// Row `c` of the multiplication table: `mul_row(c)[x] = c · x`.
#[inline]
pub fn mul_row(c: u8) -> &'static [u8; 256] {
    &MUL[c as usize]
}

/// PSHUFB nibble tables for multiplication by `c`: `[lo, hi]` with
/// `lo[i] = c · i` and `hi[i] = c · (i << 4)`, so `c · x = lo[x & 15] ^ hi[x >> 4]`.
#[inline]
pub fn nibble_tables(c: u8) -> &'static [[u8; 16]; 2] {
    &NIBBLE[c as usize]
}

/// 8×8 bit matrix of "multiply by `c`" in the layout of x86 GFNI
/// `GF2P8AFFINEQB`: byte `7 - i` holds the row for output bit `i` (bit `k` of that
/// row is bit `i` of `c · 2^k`). Multiplication by a constant is GF(2)-linear, so this
/// works for polynomial 0x11d although GFNI's own multiply instruction uses 0x11b.
#[inline]
pub fn affine_matrix(c: u8) -> u64 {
    AFFINE[c as usize]
}
