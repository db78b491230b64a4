//! Block accessors used by the generic kernels: a list of syndrome slots, some of
//! which may be absent (treated as all-zero blocks).

/// A sequence of syndrome slots `0..slots()`; `block(j)` is `None` for a slot that
/// counts as zero (a block being reconstructed).
///
/// Every present block must have the length the kernel is called with (checked at
/// the API boundary before any kernel runs).
pub(crate) trait Src {
    /// Number of slots.
    fn slots(&self) -> usize;
    /// Block in slot `j < slots()`, or `None` if that slot is absent.
    fn block(&self, j: usize) -> Option<&[u8]>;
    /// One past the highest present slot (0 if none): Horner starts there.
    #[inline]
    fn top(&self) -> usize {
        (0..self.slots())
            .rev()
            .find(|&j| self.block(j).is_some())
            .map_or(0, |j| j + 1)
    }
}

impl Src for [&[u8]] {
    #[inline]
    fn slots(&self) -> usize {
        self.len()
    }
    #[inline]
    fn block(&self, j: usize) -> Option<&[u8]> {
        Some(self[j])
    }
}

/// The data blocks of a stripe with one or two slots (`a < b`) taken out for
/// reconstruction: those read as absent.
pub(crate) struct Holes<'s, 'd> {
    lo: &'s [&'d mut [u8]],
    mid: &'s [&'d mut [u8]],
    hi: &'s [&'d mut [u8]],
    a: usize,
    b: usize,
    n: usize,
}

impl<'s, 'd> Holes<'s, 'd> {
    /// Take slot `a` out of `data` (`a < data.len()`, checked by the caller).
    pub(crate) fn one(data: &'s mut [&'d mut [u8]], a: usize) -> (&'s mut [u8], Self) {
        let n = data.len();
        let (lo, rest) = data.split_at_mut(a);
        let (da, mid) = rest.split_first_mut().expect("slot checked in range");
        let holes = Holes {
            lo,
            mid,
            hi: &[],
            a,
            b: n,
            n,
        };
        (&mut **da, holes)
    }

    /// Take slots `a < b` out of `data` (`b < data.len()`, checked by the caller).
    #[allow(clippy::type_complexity)]
    pub(crate) fn two(
        data: &'s mut [&'d mut [u8]],
        a: usize,
        b: usize,
    ) -> (&'s mut [u8], &'s mut [u8], Self) {
        let n = data.len();
        let (lo, rest) = data.split_at_mut(a);
        let (da, rest) = rest.split_first_mut().expect("slot checked in range");
        let (mid, rest) = rest.split_at_mut(b - a - 1);
        let (db, hi) = rest.split_first_mut().expect("slot checked in range");
        let holes = Holes {
            lo,
            mid,
            hi,
            a,
            b,
            n,
        };
        (&mut **da, &mut **db, holes)
    }
}

impl Src for Holes<'_, '_> {
    #[inline]
    fn slots(&self) -> usize {
        self.n
    }
    #[inline]
    fn block(&self, j: usize) -> Option<&[u8]> {
        if j < self.a {
            Some(&*self.lo[j])
        } else if j == self.a {
            None
        } else if j < self.b {
            Some(&*self.mid[j - self.a - 1])
        } else if j == self.b {
            None
        } else {
            Some(&*self.hi[j - self.b - 1])
        }
    }
}
