//! Kernel templates shared by every vector path.
//!
//! A path module defines its vector primitives — `V` (vector type), `W` (bytes per
//! vector), `U` (vectors per main-loop iteration), `ld`/`st` (unaligned load/store of
//! `W` bytes at an offset of a slice), `vzero`, `vxor`, `mul2` (multiply every byte by
//! `g = 2`), `T`/`tab`/`mulc` (prepared constant and multiply-by-constant) — and then
//! invokes [`kernels!`] (the GF algorithms), [`xor_kernels!`] (XOR) and [`ops!`]
//! (the `Parity` table). A path where `4·v` and `a ^ b ^ c` are one instruction each
//! (AVX-512 + GFNI: `vgf2p8affineqb`, `vpternlogq`) defines `mul4`/`xor3` and invokes
//! `kernels!(paired ...)`: Horner then folds two slots per step
//! (`q = 4·q ^ 2·d[j] ^ d[j-1]`), 4 instead of 6 vector operations per slot pair.
//!
//! Every algorithm is one pass over memory: a main loop of `U` vectors, a loop of
//! single vectors, then the byte-wise tail from `crate::tail`. P/Q use Horner with
//! the vectorised multiply-by-2; recovery fuses syndrome, XOR with P/Q and the
//! constant multiplications in registers.
//!
//! Safety contract of the generated kernels (`unsafe fn` in the intrinsic paths): the
//! CPU has the features named in the path's `#[target_feature]`, and every present
//! block, `first`, `p`, `q`, `src`, `da`, `db` has exactly the length of the output
//! (`dst`/`p`/`da`). Vector loads/stores happen only at offsets with `off + W <= len`;
//! the remaining `< W` bytes go through the safe byte-wise `crate::tail`. Both
//! conditions are established by `Parity` (length asserts) and the path's `get()`
//! (runtime feature detection) before any kernel can be reached.

/// Expands the generic kernels with the given attributes (`#[target_feature]`) and
/// qualifiers (`unsafe` for intrinsic paths, nothing for the portable one).
macro_rules! kernels {
    (@body $(#[$attr:meta])* ; $($q:tt)*) => {
        /// P and Q of `N` vectors at `off` over slots `0..top` (Horner). With `PAIRED`
        /// (paths with a one-instruction multiply and 3-way XOR) two slots per step:
        /// `q = 4·q ^ 2·d[j] ^ d[j-1]`, `p = p ^ d[j] ^ d[j-1]`.
        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn syn_chunk<S: Src + ?Sized, const N: usize>(
            s: &S,
            top: usize,
            off: usize,
        ) -> ([V; N], [V; N]) {
            let mut p = [vzero(); N];
            let mut q = [vzero(); N];
            if top == 0 {
                return (p, q);
            }
            if let Some(b) = s.block(top - 1) {
                for u in 0..N {
                    let d = ld(b, off + u * W);
                    p[u] = d;
                    q[u] = d;
                }
            }
            // slots still to fold in: 0..rest
            let mut rest = top - 1;
            if PAIRED {
                while rest >= 2 {
                    let (hi, lo) = (s.block(rest - 1), s.block(rest - 2));
                    match (hi, lo) {
                        (Some(h), Some(l)) => {
                            for u in 0..N {
                                let dh = ld(h, off + u * W);
                                let dl = ld(l, off + u * W);
                                p[u] = xor3(p[u], dh, dl);
                                q[u] = xor3(mul4(q[u]), mul2(dh), dl);
                            }
                        }
                        (Some(h), None) => {
                            for u in 0..N {
                                let dh = ld(h, off + u * W);
                                p[u] = vxor(p[u], dh);
                                q[u] = vxor(mul4(q[u]), mul2(dh));
                            }
                        }
                        (None, Some(l)) => {
                            for u in 0..N {
                                let dl = ld(l, off + u * W);
                                p[u] = vxor(p[u], dl);
                                q[u] = vxor(mul4(q[u]), dl);
                            }
                        }
                        (None, None) => {
                            for u in 0..N {
                                q[u] = mul4(q[u]);
                            }
                        }
                    }
                    rest -= 2;
                }
            }
            for j in (0..rest).rev() {
                for u in 0..N {
                    q[u] = mul2(q[u]);
                }
                if let Some(b) = s.block(j) {
                    for u in 0..N {
                        let d = ld(b, off + u * W);
                        p[u] = vxor(p[u], d);
                        q[u] = vxor(q[u], d);
                    }
                }
            }
            (p, q)
        }

        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn pq_chunk<S: Src + ?Sized, const N: usize>(
            s: &S,
            top: usize,
            p: &mut [u8],
            q: &mut [u8],
            off: usize,
        ) {
            let (pv, qv) = syn_chunk::<S, N>(s, top, off);
            for u in 0..N {
                st(p, off + u * W, pv[u]);
                st(q, off + u * W, qv[u]);
            }
        }

        /// P/Q generation (all lengths equal, checked by caller).
        $(#[$attr])*
        pub(crate) $($q)* fn pq_k<S: Src + ?Sized>(s: &S, p: &mut [u8], q: &mut [u8]) {
            let top = s.top();
            let len = p.len();
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut off = 0;
            while off < big {
                pq_chunk::<S, U>(s, top, p, q, off);
                off += W * U;
            }
            while off < small {
                pq_chunk::<S, 1>(s, top, p, q, off);
                off += W;
            }
            crate::tail::pq(s, p, q, off);
        }

        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn mul_acc_chunk<const N: usize>(dst: &mut [u8], src: &[u8], t: &T, off: usize) {
            for u in 0..N {
                let r = vxor(ld(dst, off + u * W), mulc(t, ld(src, off + u * W)));
                st(dst, off + u * W, r);
            }
        }

        /// `dst ^= c · src` (lengths equal, checked by caller).
        $(#[$attr])*
        pub(crate) $($q)* fn mul_acc_k(dst: &mut [u8], src: &[u8], c: u8) {
            let t = tab(c);
            let len = dst.len();
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut off = 0;
            while off < big {
                mul_acc_chunk::<U>(dst, src, &t, off);
                off += W * U;
            }
            while off < small {
                mul_acc_chunk::<1>(dst, src, &t, off);
                off += W;
            }
            crate::tail::mul_acc(dst, src, c, off);
        }

        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn recov_q_chunk<S: Src + ?Sized, const N: usize>(
            s: &S,
            top: usize,
            q: &[u8],
            dst: &mut [u8],
            t: &T,
            off: usize,
        ) {
            let (_, qv) = syn_chunk::<S, N>(s, top, off);
            for u in 0..N {
                let x = vxor(qv[u], ld(q, off + u * W));
                st(dst, off + u * W, mulc(t, x));
            }
        }

        /// `dst = c · (q ^ Q'(s))` (lengths equal, checked by caller).
        $(#[$attr])*
        pub(crate) $($q)* fn recov_q_k<S: Src + ?Sized>(s: &S, q: &[u8], dst: &mut [u8], c: u8) {
            let t = tab(c);
            let top = s.top();
            let len = dst.len();
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut off = 0;
            while off < big {
                recov_q_chunk::<S, U>(s, top, q, dst, &t, off);
                off += W * U;
            }
            while off < small {
                recov_q_chunk::<S, 1>(s, top, q, dst, &t, off);
                off += W;
            }
            crate::tail::recov_q(s, q, dst, c, off);
        }

        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
        $($q)* fn recov_two_chunk<S: Src + ?Sized, const N: usize>(
            s: &S,
            top: usize,
            p: &[u8],
            q: &[u8],
            da: &mut [u8],
            db: &mut [u8],
            t: &(T, T),
            off: usize,
        ) {
            let (pv, qv) = syn_chunk::<S, N>(s, top, off);
            for u in 0..N {
                let pxy = vxor(pv[u], ld(p, off + u * W));
                let qxy = vxor(qv[u], ld(q, off + u * W));
                let d = vxor(mulc(&t.0, pxy), mulc(&t.1, qxy));
                st(db, off + u * W, d);
                st(da, off + u * W, vxor(d, pxy));
            }
        }

        /// Two-data recovery: `db = cp·Pxy ^ cq·Qxy`, `da = db ^ Pxy` (lengths equal,
        /// checked by caller).
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        pub(crate) $($q)* fn recov_two_k<S: Src + ?Sized>(
            s: &S,
            p: &[u8],
            q: &[u8],
            da: &mut [u8],
            db: &mut [u8],
            cp: u8,
            cq: u8,
        ) {
            let t = (tab(cp), tab(cq));
            let top = s.top();
            let len = da.len();
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut off = 0;
            while off < big {
                recov_two_chunk::<S, U>(s, top, p, q, da, db, &t, off);
                off += W * U;
            }
            while off < small {
                recov_two_chunk::<S, 1>(s, top, p, q, da, db, &t, off);
                off += W;
            }
            crate::tail::recov_two(s, p, q, da, db, cp, cq, off);
        }
    };
    // Paths whose module defines `mul4` (one instruction) and `xor3` (one instruction):
    // Horner two slots per step.
    (paired $(#[$attr:meta])* ; $($q:tt)*) => {
        const PAIRED: bool = true;
        kernels!(@body $(#[$attr])* ; $($q)*);
    };
    ($(#[$attr:meta])* ; $($q:tt)*) => {
        const PAIRED: bool = false;
        /// `4·v` (unused: this path folds one slot per step).
        $(#[$attr])*
        #[inline]
        $($q)* fn mul4(v: V) -> V {
            mul2(mul2(v))
        }
        /// `a ^ b ^ c` (unused: this path folds one slot per step).
        $(#[$attr])*
        #[inline]
        $($q)* fn xor3(a: V, b: V, c: V) -> V {
            vxor(vxor(a, b), c)
        }
        kernels!(@body $(#[$attr])* ; $($q)*);
    };
}

/// Expands the vector XOR kernel (`xor_k`) like [`kernels!`]; paths may instead provide
/// their own `xor_k` with the same signature.
macro_rules! xor_kernels {
    ($(#[$attr:meta])* ; $($q:tt)*) => {
        /// XOR of `N` vectors at `off`.
        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn xor_chunk<S: Src + ?Sized, const N: usize>(
            s: &S,
            first: Option<&[u8]>,
            dst: &mut [u8],
            acc: bool,
            off: usize,
        ) {
            let mut x = [vzero(); N];
            if acc {
                for u in 0..N {
                    x[u] = ld(dst, off + u * W);
                }
            }
            if let Some(f) = first {
                for u in 0..N {
                    x[u] = vxor(x[u], ld(f, off + u * W));
                }
            }
            for j in 0..s.slots() {
                if let Some(b) = s.block(j) {
                    for u in 0..N {
                        x[u] = vxor(x[u], ld(b, off + u * W));
                    }
                }
            }
            for u in 0..N {
                st(dst, off + u * W, x[u]);
            }
        }

        /// `dst = (acc ? dst : 0) ^ first ^ ⊕ s` (all lengths equal, checked by caller).
        $(#[$attr])*
        pub(crate) $($q)* fn xor_k<S: Src + ?Sized>(
            s: &S,
            first: Option<&[u8]>,
            dst: &mut [u8],
            acc: bool,
        ) {
            let len = dst.len();
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut off = 0;
            while off < big {
                xor_chunk::<S, U>(s, first, dst, acc, off);
                off += W * U;
            }
            while off < small {
                xor_chunk::<S, 1>(s, first, dst, acc, off);
                off += W;
            }
            crate::tail::xor(s, first, dst, acc, off);
        }

    };
}

/// Identity call wrapper for the portable (safe) kernels.
macro_rules! plain_call {
    ($e:expr) => {
        $e
    };
}

/// Call wrapper for intrinsic kernels.
macro_rules! simd_call {
    ($e:expr) => {
        // SAFETY: the functions generated by `ops!` are private to their module and
        // reachable only through its `OPS` table, which the module's `get()` hands out
        // only after `is_x86_feature_detected!` confirmed every CPU feature the kernels
        // are compiled with. `Parity`'s methods asserted that every block has the same
        // length before calling, and every raw load/store in the kernels stays within
        // `off + W <= len` of that length (the byte tail is done by safe code).
        unsafe { $e }
    };
}

/// Expands the nine entry points of a path and its `OPS` table named `$name`.
/// Lengths and slot indices are validated by `Parity` before these run.
macro_rules! ops {
    ($name:literal, $call:ident) => {
        fn op_xor_zero(srcs: &[&[u8]], len: usize) -> bool {
            $call!(xor_zero_k(srcs, len))
        }
        fn op_pq_check(data: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
            $call!(pq_check_k(data, p, q))
        }
        fn op_xor_into(dst: &mut [u8], src: &[u8]) {
            let s: [&[u8]; 1] = [src];
            $call!(xor_k(&s[..], None, dst, true))
        }
        fn op_xor_gen(srcs: &[&[u8]], dst: &mut [u8]) {
            $call!(xor_k(srcs, None, dst, false))
        }
        fn op_pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
            $call!(pq_k(data, p, q))
        }
        fn op_mul_acc(dst: &mut [u8], src: &[u8], coef: u8) {
            $call!(mul_acc_k(dst, src, coef))
        }
        fn op_recover_one_p(data: &mut [&mut [u8]], a: usize, p: &[u8]) {
            let (da, h) = crate::src::Holes::one(data, a);
            $call!(xor_k(&h, Some(p), da, false))
        }
        fn op_recover_one_q(data: &mut [&mut [u8]], a: usize, q: &[u8]) {
            let c = crate::gf::inv(crate::gf::exp(a));
            let (da, h) = crate::src::Holes::one(data, a);
            $call!(recov_q_k(&h, q, da, c))
        }
        fn op_recover_two(data: &mut [&mut [u8]], a: usize, b: usize, p: &[u8], q: &[u8]) {
            let (a, b) = if a < b { (a, b) } else { (b, a) };
            let cp = crate::gf::exi(b - a);
            let cq = crate::gf::inv(crate::gf::exp(a) ^ crate::gf::exp(b));
            let (da, db, h) = crate::src::Holes::two(data, a, b);
            $call!(recov_two_k(&h, p, q, da, db, cp, cq))
        }

        pub(crate) static OPS: crate::Parity = crate::Parity::new(
            $name,
            crate::Ops {
                xor_into: op_xor_into,
                xor_gen: op_xor_gen,
                pq_gen: op_pq_gen,
                mul_acc: op_mul_acc,
                recover_one_p: op_recover_one_p,
                recover_one_q: op_recover_one_q,
                recover_two: op_recover_two,
                xor_zero: op_xor_zero,
                pq_check: op_pq_check,
            },
        );
    };
}

/// Expands the verification kernels (`xor_zero_k`, `pq_check_k`) like [`kernels!`]: one
/// read pass over the blocks, nothing stored. A path module defines `vor` (bitwise or)
/// and `vany` (is any bit set) besides the primitives `kernels!` uses; the differences
/// are or-ed into accumulators and tested once at the end.
macro_rules! verify_kernels {
    ($(#[$attr:meta])* ; $($q:tt)*) => {
        /// Or into `acc` the XOR of every block's `N` vectors at `off`.
        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn xor_zero_chunk<const N: usize>(s: &[&[u8]], acc: &mut [V; N], off: usize) {
            let mut x = [vzero(); N];
            for b in s {
                for u in 0..N {
                    x[u] = vxor(x[u], ld(b, off + u * W));
                }
            }
            for u in 0..N {
                acc[u] = vor(acc[u], x[u]);
            }
        }

        /// Is `⊕ s` all zero (all lengths equal `len`, checked by caller)?
        $(#[$attr])*
        pub(crate) $($q)* fn xor_zero_k(s: &[&[u8]], len: usize) -> bool {
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut acc = [vzero(); U];
            let mut off = 0;
            while off < big {
                xor_zero_chunk::<U>(s, &mut acc, off);
                off += W * U;
            }
            let mut one = [vzero(); 1];
            while off < small {
                xor_zero_chunk::<1>(s, &mut one, off);
                off += W;
            }
            let mut any = vany(one[0]);
            for a in acc {
                any |= vany(a);
            }
            !any && crate::tail::xor_zero(s, len, off)
        }

        /// Or into `acc` the differences of `N` vectors at `off` between the syndromes
        /// of `s` and `p`, `q`.
        $(#[$attr])*
        #[inline]
        #[allow(clippy::needless_range_loop)]
        $($q)* fn pq_check_chunk<const N: usize>(
            s: &[&[u8]],
            p: &[u8],
            q: &[u8],
            acc: &mut [V; N],
            off: usize,
        ) {
            let (pv, qv) = syn_chunk::<[&[u8]], N>(s, s.len(), off);
            for u in 0..N {
                let dp = vxor(pv[u], ld(p, off + u * W));
                let dq = vxor(qv[u], ld(q, off + u * W));
                acc[u] = vor(acc[u], vor(dp, dq));
            }
        }

        /// Are `p`, `q` the syndromes of `s` (all lengths equal, checked by caller)?
        $(#[$attr])*
        pub(crate) $($q)* fn pq_check_k(s: &[&[u8]], p: &[u8], q: &[u8]) -> bool {
            let len = p.len();
            let big = len - len % (W * U);
            let small = len - len % W;
            let mut acc = [vzero(); U];
            let mut off = 0;
            while off < big {
                pq_check_chunk::<U>(s, p, q, &mut acc, off);
                off += W * U;
            }
            let mut one = [vzero(); 1];
            while off < small {
                pq_check_chunk::<1>(s, p, q, &mut one, off);
                off += W;
            }
            let mut any = vany(one[0]);
            for a in acc {
                any |= vany(a);
            }
            !any && crate::tail::pq_check(s, p, q, off)
        }
    };
}
