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
//! [`xor_zero`], [`pq_check`],
//! [`gf`] module functions, [`scalar`] module with the same functions.
//!
//! # Paths and explicit selection
//!
//! Each path is a [`Parity`] table with the same nine methods. Path modules hand out
//! their table only if the CPU has the features it needs, so no path can run on a CPU
//! that lacks them:
//!
//! | name          | module            | CPU features                        |
//! |---------------|-------------------|-------------------------------------|
//! | `avx512-gfni` | [`avx512_gfni`]   | `avx512f`, `avx512bw`, `gfni`       |
//! | `avx512`      | [`avx512`]        | `avx512f`, `avx512bw`               |
//! | `avx2-gfni`   | [`avx2_gfni`]     | `avx2`, `gfni`                      |
//! | `avx2`        | [`avx2`]          | `avx2`                              |
//! | `ssse3`       | [`ssse3`]         | `ssse3`                             |
//! | `portable`    | [`portable`]      | none (u64 SWAR, safe code)          |
//! | `scalar`      | [`scalar`]        | none (byte-at-a-time reference)     |
//!
//! [`implementations`] lists the available ones (fastest first), [`with_impl`] picks one
//! by name, [`active`] is the one the top-level functions use. The environment variable
//! `RAIDKIT_PARITY_IMPL=<name>` (read once) overrides the automatic choice if that path
//! is available.
//!
//! # Panics
//!
//! All functions (every path) panic on programming errors only: blocks of different
//! lengths, `pq_gen` without data blocks, a lost slot out of range, or
//! `recover_two` with `a == b`. They never panic on data contents.

#![warn(missing_docs)]

use std::sync::OnceLock;

mod check;
#[macro_use]
mod kernels;
mod src;
mod tail;

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx2_gfni;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
#[cfg(target_arch = "x86_64")]
pub mod avx512_gfni;
pub mod bench;
pub mod gf;
pub mod portable;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub mod ssse3;

/// Signature of the two-data recovery entry point.
type RecoverTwoFn = fn(&mut [&mut [u8]], usize, usize, &[u8], &[u8]);

/// Signature of the P+Q verification entry point.
type PqCheckFn = fn(&[&[u8]], &[u8], &[u8]) -> bool;

/// Function table of one path (crate-private: only path modules build these).
#[derive(Clone, Copy)]
pub(crate) struct Ops {
    pub(crate) xor_into: fn(&mut [u8], &[u8]),
    pub(crate) xor_gen: fn(&[&[u8]], &mut [u8]),
    pub(crate) pq_gen: fn(&[&[u8]], &mut [u8], &mut [u8]),
    pub(crate) mul_acc: fn(&mut [u8], &[u8], u8),
    pub(crate) recover_one_p: fn(&mut [&mut [u8]], usize, &[u8]),
    pub(crate) recover_one_q: fn(&mut [&mut [u8]], usize, &[u8]),
    pub(crate) recover_two: RecoverTwoFn,
    pub(crate) xor_zero: fn(&[&[u8]], usize) -> bool,
    pub(crate) pq_check: PqCheckFn,
}

/// One implementation path of all parity functions (see the crate docs for the list).
///
/// Obtained from [`active`], [`implementations`], [`with_impl`] or a path module's
/// `get()`; a `Parity` for a SIMD path only exists if the CPU supports it. The methods
/// have exactly the contracts of the top-level functions of the same names.
pub struct Parity {
    name: &'static str,
    ops: Ops,
}

impl std::fmt::Debug for Parity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parity").field("name", &self.name).finish()
    }
}

impl Parity {
    pub(crate) const fn new(name: &'static str, ops: Ops) -> Parity {
        Parity { name, ops }
    }

    /// Name of this path (`avx2`, `portable`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// See [`crate::xor_into`].
    pub fn xor_into(&self, dst: &mut [u8], src: &[u8]) {
        check::len("src", src.len(), dst.len());
        (self.ops.xor_into)(dst, src)
    }

    /// See [`crate::xor_gen`].
    pub fn xor_gen(&self, srcs: &[&[u8]], dst: &mut [u8]) {
        check::blocks("srcs", srcs, dst.len());
        (self.ops.xor_gen)(srcs, dst)
    }

    /// See [`crate::pq_gen`].
    pub fn pq_gen(&self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        check::pq(data, p.len(), q.len());
        (self.ops.pq_gen)(data, p, q)
    }

    /// See [`crate::mul_acc`].
    pub fn mul_acc(&self, dst: &mut [u8], src: &[u8], coef: u8) {
        check::len("src", src.len(), dst.len());
        match coef {
            0 => {}
            1 => (self.ops.xor_into)(dst, src),
            _ => (self.ops.mul_acc)(dst, src, coef),
        }
    }

    /// See [`crate::recover_one_p`].
    pub fn recover_one_p(&self, data: &mut [&mut [u8]], a: usize, p: &[u8]) {
        check::recover_one(data, a, p.len());
        (self.ops.recover_one_p)(data, a, p)
    }

    /// See [`crate::recover_one_q`].
    pub fn recover_one_q(&self, data: &mut [&mut [u8]], a: usize, q: &[u8]) {
        check::recover_one(data, a, q.len());
        (self.ops.recover_one_q)(data, a, q)
    }

    /// See [`crate::recover_two`].
    pub fn recover_two(&self, data: &mut [&mut [u8]], a: usize, b: usize, p: &[u8], q: &[u8]) {
        check::recover_two(data, a, b, p.len(), q.len());
        (self.ops.recover_two)(data, a, b, p, q)
    }

    /// See [`crate::xor_zero`].
    pub fn xor_zero(&self, blocks: &[&[u8]]) -> bool {
        let len = blocks.first().map_or(0, |b| b.len());
        check::blocks("blocks", blocks, len);
        (self.ops.xor_zero)(blocks, len)
    }

    /// See [`crate::pq_check`].
    pub fn pq_check(&self, data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
        check::pq(data, p.len(), q.len());
        (self.ops.pq_check)(data, p, q)
    }
}

/// The scalar reference as a [`Parity`] table.
static SCALAR: Parity = Parity::new(
    "scalar",
    Ops {
        xor_into: scalar::xor_into,
        xor_gen: scalar::xor_gen,
        pq_gen: scalar::pq_gen,
        mul_acc: scalar::mul_acc,
        recover_one_p: scalar::recover_one_p,
        recover_one_q: scalar::recover_one_q,
        recover_two: scalar::recover_two,
        xor_zero: scalar_xor_zero,
        pq_check: scalar::pq_check,
    },
);

/// [`scalar::xor_zero`] with the length the table's signature passes (checked already).
fn scalar_xor_zero(blocks: &[&[u8]], _len: usize) -> bool {
    scalar::xor_zero(blocks)
}

/// Every path this CPU can run, fastest first; always ends with `portable`, `scalar`.
pub fn implementations() -> Vec<&'static Parity> {
    let mut v: Vec<Option<&'static Parity>> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        v.push(avx512_gfni::get());
        v.push(avx512::get());
        v.push(avx2_gfni::get());
        v.push(avx2::get());
        v.push(ssse3::get());
    }
    v.push(portable::get());
    v.push(Some(&SCALAR));
    v.into_iter().flatten().collect()
}

/// The path named `name` (see the crate docs), or `None` if unknown or not supported
/// by this CPU.
pub fn with_impl(name: &str) -> Option<&'static Parity> {
    implementations().into_iter().find(|p| p.name() == name)
}

/// The path the top-level functions use (chosen once, then cached).
pub fn active() -> &'static Parity {
    static ACTIVE: OnceLock<&'static Parity> = OnceLock::new();
    ACTIVE.get_or_init(|| {
        std::env::var("RAIDKIT_PARITY_IMPL")
            .ok()
            .and_then(|n| with_impl(&n))
            .unwrap_or_else(|| implementations()[0])
    })
}

/// `dst ^= src` for every byte. Panics if lengths differ (programming error).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    active().xor_into(dst, src)
}

/// `dst = src[0] ^ src[1] ^ ...` (RAID5 parity). `srcs` may be empty (dst zeroed).
/// Panics if any length differs from `dst.len()`.
pub fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) {
    active().xor_gen(srcs, dst)
}

/// RAID6 syndromes: `p = ⊕ data[j]`, `q = ⊕ g^j · data[j]` (j = slot index).
/// `data` must have at least 1 block (md uses 2..=254). Panics on an empty `data` or
/// differing lengths.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    active().pq_gen(data, p, q)
}

/// `dst ^= coef · src` in GF(2^8) (used for RAID6 read-modify-write of Q:
/// `Q ^= g^slot · (old ^ new)`). Panics if lengths differ.
pub fn mul_acc(dst: &mut [u8], src: &[u8], coef: u8) {
    active().mul_acc(dst, src, coef)
}

/// Recover data slot `a` from P: `data[a] = p ^ ⊕_{j≠a} data[j]`.
/// The content of `data[a]` on entry is ignored. Panics if `a >= data.len()` or any
/// length differs from `p.len()`.
pub fn recover_one_p(data: &mut [&mut [u8]], a: usize, p: &[u8]) {
    active().recover_one_p(data, a, p)
}

/// Recover data slot `a` from Q (P is missing or not trusted):
/// `data[a] = g^-a · (q ^ ⊕_{j≠a} g^j·data[j])`. The content of `data[a]` is ignored.
/// Panics if `a >= data.len()` or any length differs from `q.len()`.
pub fn recover_one_q(data: &mut [&mut [u8]], a: usize, q: &[u8]) {
    active().recover_one_q(data, a, q)
}

/// Recover two data slots `a != b` from P and Q (md's raid6_2data_recov).
/// Contents of `data[a]` and `data[b]` on entry are ignored. The order of `a` and `b`
/// does not matter. Panics if `a == b`, either is out of range, or lengths differ.
pub fn recover_two(data: &mut [&mut [u8]], a: usize, b: usize, p: &[u8], q: &[u8]) {
    active().recover_two(data, a, b, p, q)
}

/// Is `blocks[0] ^ blocks[1] ^ ...` zero at every byte? A RAID4/5 check passes the data
/// blocks and P: one read pass, nothing written (no parity computed into a buffer and
/// compared). `true` for no blocks. Panics if lengths differ.
pub fn xor_zero(blocks: &[&[u8]]) -> bool {
    active().xor_zero(blocks)
}

/// Are `p` and `q` the RAID6 syndromes of `data` (slot order, as [`pq_gen`] computes
/// them)? One read pass, nothing written. Panics on an empty `data` or differing lengths.
pub fn pq_check(data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
    active().pq_check(data, p, q)
}

/// Name of the implementation the dispatcher picked (`avx512-gfni`, `avx512`,
/// `avx2-gfni`, `avx2`, `ssse3`, `portable`).
pub fn implementation() -> &'static str {
    active().name()
}
