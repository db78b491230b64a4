//! Safe wrappers around the parts of Intel ISA-L (`libisal`) that compute what raidkit's
//! parity kernels compute, so both can be measured in the same run:
//!
//! * [`xor_gen`] — ISA-L `xor_gen` (RAID5 parity),
//! * [`pq_gen`] — ISA-L `pq_gen` (RAID6 P+Q, polynomial 0x11d, generator 2: the same
//!   field and code as md and raidkit),
//! * [`Rec2`] — two-data RAID6 recovery with ISA-L's erasure-code engine: the decode
//!   matrix comes from `gf_gen_rs_matrix` (whose first two parity rows are exactly P and
//!   Q) and `gf_invert_matrix`, and `ec_encode_data` applies it.
//!
//! The crate links libisal only if `build.rs` found it (`cfg(have_isal)`); otherwise
//! [`available`] is `false` and every wrapper returns [`Error::Unavailable`]. It is a
//! benchmark anchor only: nothing in raidkit depends on it.

#![warn(missing_docs)]

use std::fmt;

/// Pointer alignment and length multiple required by the wrappers (the strictest of
/// ISA-L's SIMD versions).
pub const ALIGN: usize = 64;

/// Why an ISA-L call was not made or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// This build has no libisal (see `install-deps.sh`).
    Unavailable,
    /// The arguments break a precondition (length, alignment, count); the text says which.
    BadArgs(&'static str),
    /// ISA-L returned a non-zero status.
    Isal(i32),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable => write!(
                f,
                "built without libisal: run crates/raidkit-bench-isal/install-deps.sh \
                 (Debian: apt-get install libisal-dev), then `cargo clean -p raidkit-bench-isal` and rebuild"
            ),
            Error::BadArgs(why) => write!(f, "bad arguments for ISA-L: {why}"),
            Error::Isal(rc) => write!(f, "ISA-L returned {rc}"),
        }
    }
}

impl std::error::Error for Error {}

/// Whether this build links libisal.
pub fn available() -> bool {
    cfg!(have_isal)
}

#[cfg(have_isal)]
mod ffi {
    use std::os::raw::{c_int, c_uchar, c_void};

    extern "C" {
        pub fn xor_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
        pub fn pq_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
        pub fn gf_gen_rs_matrix(a: *mut c_uchar, m: c_int, k: c_int);
        pub fn gf_invert_matrix(inp: *mut c_uchar, out: *mut c_uchar, n: c_int) -> c_int;
        pub fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        pub fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
    }
}

/// Checks the shared preconditions: every block `len` bytes, `len` a positive multiple
/// of [`ALIGN`] that fits in a C `int`, every block [`ALIGN`]-aligned.
fn check_blocks<'a>(len: usize, blocks: impl IntoIterator<Item = &'a [u8]>) -> Result<(), Error> {
    if len == 0 || !len.is_multiple_of(ALIGN) || len > i32::MAX as usize {
        return Err(Error::BadArgs(
            "length must be a positive multiple of 64 below 2 GiB",
        ));
    }
    for b in blocks {
        if b.len() != len {
            return Err(Error::BadArgs("blocks differ in length"));
        }
        if !(b.as_ptr() as usize).is_multiple_of(ALIGN) {
            return Err(Error::BadArgs("blocks must be 64-byte aligned"));
        }
    }
    Ok(())
}

/// `dst = ⊕ srcs` with ISA-L `xor_gen`. Needs at least 2 sources; all blocks the same
/// length, a multiple of 64, and 64-byte aligned.
pub fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) -> Result<(), Error> {
    if srcs.len() < 2 || srcs.len() + 1 > i32::MAX as usize {
        return Err(Error::BadArgs("xor_gen needs at least 2 sources"));
    }
    check_blocks(dst.len(), srcs.iter().copied().chain([&*dst]))?;
    imp::xor_gen(srcs, dst)
}

/// `p = ⊕ data[j]`, `q = ⊕ 2^j·data[j]` with ISA-L `pq_gen`. Needs at least 2 data
/// blocks; all blocks the same length, a multiple of 64, and 64-byte aligned.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), Error> {
    if data.len() < 2 || data.len() + 2 > i32::MAX as usize {
        return Err(Error::BadArgs("pq_gen needs at least 2 data blocks"));
    }
    check_blocks(p.len(), data.iter().copied().chain([&*p, &*q]))?;
    imp::pq_gen(data, p, q)
}

/// Prepared ISA-L decode tables that rebuild data slots `a` and `b` of a stripe with
/// `k` data blocks from the other `k - 2` data blocks, P and Q (RAID6 double-data
/// recovery, what raidkit's `recover_two` does).
pub struct Rec2 {
    k: usize,
    a: usize,
    b: usize,
    /// The 2×k decode matrix (rows: slot `a`, slot `b`; columns: surviving data slots
    /// in order, then P, then Q).
    matrix: Vec<u8>,
    /// `ec_init_tables` output for `matrix` (only read by the ISA-L build; the fallback
    /// keeps it empty).
    #[cfg_attr(not(have_isal), allow(dead_code))]
    tables: Vec<u8>,
}

impl Rec2 {
    /// Decode tables for losing slots `a != b` of `k` (`2..=255`) data blocks.
    pub fn new(k: usize, a: usize, b: usize) -> Result<Rec2, Error> {
        if !(2..=255).contains(&k) || a >= k || b >= k || a == b {
            return Err(Error::BadArgs(
                "rec2 needs 2..=255 data blocks and a != b < k",
            ));
        }
        let (a, b) = (a.min(b), a.max(b));
        let (matrix, tables) = imp::rec2_tables(k, a, b)?;
        Ok(Rec2 {
            k,
            a,
            b,
            matrix,
            tables,
        })
    }

    /// The lost slots (`a < b`).
    pub fn lost(&self) -> (usize, usize) {
        (self.a, self.b)
    }

    /// The 2×k decode matrix, row-major (rows: slot `a`, slot `b`; columns: the
    /// surviving data slots in order, then P, then Q).
    pub fn matrix(&self) -> &[u8] {
        &self.matrix
    }

    /// Rebuilds `data[a]` and `data[b]` from the other data blocks, `p` and `q` with
    /// ISA-L `ec_encode_data`. `data` must have exactly `k` blocks; all blocks the same
    /// length, a multiple of 64, and 64-byte aligned.
    pub fn recover(&self, data: &mut [&mut [u8]], p: &[u8], q: &[u8]) -> Result<(), Error> {
        if data.len() != self.k {
            return Err(Error::BadArgs("rec2: wrong number of data blocks"));
        }
        check_blocks(p.len(), data.iter().map(|d| &**d).chain([p, q]))?;
        imp::rec2(self, data, p, q)
    }
}

#[cfg(have_isal)]
mod imp {
    use super::{ffi, Error, Rec2};
    use std::os::raw::{c_int, c_void};

    pub(super) fn xor_gen(srcs: &[&[u8]], dst: &mut [u8]) -> Result<(), Error> {
        let mut ptrs: Vec<*mut c_void> = srcs.iter().map(|s| s.as_ptr() as *mut c_void).collect();
        ptrs.push(dst.as_mut_ptr().cast());
        // SAFETY: `ptrs` holds `srcs.len() + 1` pointers to blocks of `dst.len()` bytes,
        // 64-byte aligned with a length multiple of 64 that fits in `c_int` (checked by
        // the caller), which is ISA-L's contract. ISA-L only reads the sources (the
        // `*mut` is its C signature) and writes only the last block, which is the
        // exclusively borrowed `dst`. Nothing is retained after the call.
        let rc =
            unsafe { ffi::xor_gen(ptrs.len() as c_int, dst.len() as c_int, ptrs.as_mut_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::Isal(rc))
        }
    }

    pub(super) fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), Error> {
        let mut ptrs: Vec<*mut c_void> = data.iter().map(|s| s.as_ptr() as *mut c_void).collect();
        ptrs.push(p.as_mut_ptr().cast());
        ptrs.push(q.as_mut_ptr().cast());
        // SAFETY: as in `xor_gen`: `data.len() + 2` valid, aligned pointers to blocks of
        // `p.len()` bytes (checked by the caller); ISA-L reads the data blocks and writes
        // only the last two, the exclusively borrowed `p` and `q`.
        let rc = unsafe { ffi::pq_gen(ptrs.len() as c_int, p.len() as c_int, ptrs.as_mut_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::Isal(rc))
        }
    }

    pub(super) fn rec2_tables(k: usize, a: usize, b: usize) -> Result<(Vec<u8>, Vec<u8>), Error> {
        let m = k + 2;
        let mut enc = vec![0u8; m * k];
        // SAFETY: `enc` has room for the m×k matrix ISA-L writes; `k <= 255` so both
        // fit in `c_int`.
        unsafe { ffi::gf_gen_rs_matrix(enc.as_mut_ptr(), m as c_int, k as c_int) };
        // Rows of the surviving blocks: data rows except a and b, then P (row k) and
        // Q (row k + 1) — gf_gen_rs_matrix's first two parity rows are all-ones and
        // 2^j, i.e. exactly RAID6's P and Q.
        let rows: Vec<usize> = (0..m).filter(|&r| r != a && r != b).collect();
        let mut surv: Vec<u8> = rows
            .iter()
            .flat_map(|&r| enc[r * k..(r + 1) * k].iter().copied())
            .collect();
        let mut inv = vec![0u8; k * k];
        // SAFETY: both buffers hold k×k bytes; ISA-L overwrites `surv` as scratch.
        let rc = unsafe { ffi::gf_invert_matrix(surv.as_mut_ptr(), inv.as_mut_ptr(), k as c_int) };
        if rc != 0 {
            return Err(Error::Isal(rc));
        }
        let mut matrix: Vec<u8> = inv[a * k..(a + 1) * k].to_vec();
        matrix.extend_from_slice(&inv[b * k..(b + 1) * k]);
        let mut tables = vec![0u8; 32 * k * 2];
        // SAFETY: `matrix` is 2×k, `tables` has the 32·k·rows bytes ISA-L fills.
        unsafe { ffi::ec_init_tables(k as c_int, 2, matrix.as_mut_ptr(), tables.as_mut_ptr()) };
        Ok((matrix, tables))
    }

    pub(super) fn rec2(r: &Rec2, data: &mut [&mut [u8]], p: &[u8], q: &[u8]) -> Result<(), Error> {
        let len = p.len();
        let (a, b) = (r.a, r.b);
        let mut srcs: Vec<*mut u8> = Vec::with_capacity(r.k);
        let mut outs: Vec<*mut u8> = Vec::with_capacity(2);
        for (j, d) in data.iter_mut().enumerate() {
            if j == a || j == b {
                outs.push(d.as_mut_ptr());
            } else {
                srcs.push(d.as_ptr() as *mut u8);
            }
        }
        srcs.push(p.as_ptr() as *mut u8);
        srcs.push(q.as_ptr() as *mut u8);
        // SAFETY: `srcs` has k pointers and `outs` 2, each to a distinct block of `len`
        // bytes (the caller checked lengths and alignment; the blocks come from
        // distinct borrows). `tables` was made by `ec_init_tables(k, 2, ..)`. ISA-L
        // reads the sources and writes only the two outputs, `data[a]` and `data[b]`,
        // which are exclusively borrowed through `data`. The tables are not modified
        // (the `*mut` is ISA-L's C signature).
        unsafe {
            ffi::ec_encode_data(
                len as c_int,
                r.k as c_int,
                2,
                r.tables.as_ptr() as *mut u8,
                srcs.as_mut_ptr(),
                outs.as_mut_ptr(),
            )
        };
        Ok(())
    }
}

#[cfg(not(have_isal))]
mod imp {
    use super::{Error, Rec2};

    pub(super) fn xor_gen(_: &[&[u8]], _: &mut [u8]) -> Result<(), Error> {
        Err(Error::Unavailable)
    }
    pub(super) fn pq_gen(_: &[&[u8]], _: &mut [u8], _: &mut [u8]) -> Result<(), Error> {
        Err(Error::Unavailable)
    }
    pub(super) fn rec2_tables(_: usize, _: usize, _: usize) -> Result<(Vec<u8>, Vec<u8>), Error> {
        Err(Error::Unavailable)
    }
    pub(super) fn rec2(_: &Rec2, _: &mut [&mut [u8]], _: &[u8], _: &[u8]) -> Result<(), Error> {
        Err(Error::Unavailable)
    }
}
