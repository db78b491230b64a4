//! Which bytes of a read the server's chunks have covered: disjoint ranges, merged when
//! adjacent, so overlapping chunks (forbidden) are caught and a reply that claims to be
//! done can be checked for missing data.

use std::collections::BTreeMap;

/// Distinct ranges kept at most (chunks in order merge into one; a server scattering
/// tiny chunks in random order is refused rather than allowed to grow this).
const MAX_RANGES: usize = 1 << 16;

/// Covered ranges of one read, relative to its offset.
#[derive(Default, Debug)]
pub(crate) struct Coverage {
    /// start → end, disjoint and not adjacent.
    ranges: BTreeMap<u64, u64>,
    total: u64,
}

impl Coverage {
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
    /// Bytes covered.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
    /// Add `[start, start + len)`; an overlap with what is covered is an error.
    pub(crate) fn add(&mut self, start: u64, len: u64) -> Result<(), &'static str> {
        let end = start.checked_add(len).ok_or("range overflows")?;
        if len == 0 {
            return Err("empty chunk");
        }
        let before = self
            .ranges
            .range(..=start)
            .next_back()
            .map(|(s, e)| (*s, *e));
        let after = self.ranges.range(start..).next().map(|(s, e)| (*s, *e));
        if before.is_some_and(|(_, e)| e > start) || after.is_some_and(|(s, _)| s < end) {
            return Err("overlaps an earlier chunk");
        }
        let (mut s, mut e) = (start, end);
        if let Some((bs, be)) = before.filter(|(_, be)| *be == start) {
            self.ranges.remove(&bs);
            s = bs;
            debug_assert_eq!(be, start);
        }
        if let Some((as_, ae)) = after.filter(|(as_, _)| *as_ == end) {
            self.ranges.remove(&as_);
            e = ae;
        }
        if self.ranges.len() >= MAX_RANGES {
            return Err("too fragmented (more than 65536 separate ranges)");
        }
        self.ranges.insert(s, e);
        self.total += len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_refuses_overlap() {
        let mut c = Coverage::default();
        c.add(100, 50).unwrap();
        c.add(0, 50).unwrap();
        c.add(50, 50).unwrap();
        assert_eq!(c.ranges.len(), 1);
        assert_eq!(c.total(), 150);
        assert!(c.add(149, 2).is_err());
        assert!(c.add(0, 1).is_err());
        assert!(c.add(10, 0).is_err());
        c.add(200, 10).unwrap();
        assert!(c.add(190, 11).is_err());
        c.add(150, 50).unwrap();
        assert_eq!(c.ranges.len(), 1);
        assert_eq!(c.total(), 210);
        assert!(c.add(u64::MAX, 2).is_err());
    }
}
