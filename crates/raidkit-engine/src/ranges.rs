//! Sorted range arithmetic over `(start, len)` pairs and bad-block ranges.

use raidkit_format::badblocks::BadRange;

/// Sort and merge overlapping or adjacent ranges.
pub(crate) fn coalesce(v: &mut Vec<BadRange>) {
    let mut pairs: Vec<(u64, u64)> = v.iter().map(|r| (r.start, r.len)).collect();
    coalesce_pairs(&mut pairs);
    *v = pairs
        .into_iter()
        .map(|(start, len)| BadRange { start, len })
        .collect();
}

/// Sort and merge overlapping or adjacent `(start, len)` ranges; empty ones are dropped.
pub(crate) fn coalesce_pairs(v: &mut Vec<(u64, u64)>) {
    v.retain(|&(_, l)| l > 0);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for &(s, l) in v.iter() {
        if let Some(last) = out.last_mut() {
            if s <= last.0 + last.1 {
                let end = (last.0 + last.1).max(s + l);
                last.1 = end - last.0;
                continue;
            }
        }
        out.push((s, l));
    }
    *v = out;
}

/// Total sectors covered by coalesced ranges.
pub(crate) fn covered(v: &[BadRange]) -> u64 {
    v.iter().map(|r| r.len).sum()
}

/// `v` without `[start, start + n)`.
pub(crate) fn subtract(v: &[BadRange], start: u64, n: u64) -> Vec<BadRange> {
    let end = start + n;
    let mut out = Vec::with_capacity(v.len() + 1);
    for r in v {
        let (a, b) = (r.start, r.start + r.len);
        if b <= start || end <= a {
            out.push(*r);
            continue;
        }
        if a < start {
            out.push(BadRange {
                start: a,
                len: start - a,
            });
        }
        if end < b {
            out.push(BadRange {
                start: end,
                len: b - end,
            });
        }
    }
    out
}

/// The parts of `v` inside `[start, start + n)`.
pub(crate) fn intersect(v: &[BadRange], start: u64, n: u64) -> Vec<BadRange> {
    let end = start + n;
    v.iter()
        .filter_map(|r| {
            let (a, b) = (r.start.max(start), (r.start + r.len).min(end));
            (a < b).then(|| BadRange {
                start: a,
                len: b - a,
            })
        })
        .collect()
}

/// The parts of `(start, len)` ranges `a` that are also covered by `b`, coalesced.
pub(crate) fn intersect_pairs(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(s, l) in a {
        for &(t, m) in b {
            let (x, y) = (s.max(t), (s + l).min(t + m));
            if x < y {
                out.push((x, y - x));
            }
        }
    }
    coalesce_pairs(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use raidkit_format::badblocks::BadRange;

    fn br(start: u64, len: u64) -> BadRange {
        BadRange { start, len }
    }

    #[test]
    fn coalesce_merges_overlapping_and_adjacent() {
        let mut v = vec![br(10, 5), br(0, 4), br(15, 2), br(3, 2), br(30, 1)];
        coalesce(&mut v);
        assert_eq!(v, vec![br(0, 5), br(10, 7), br(30, 1)]);
        assert_eq!(covered(&v), 13);
    }

    #[test]
    fn subtract_cuts_exactly() {
        let v = vec![br(0, 10), br(20, 5)];
        assert_eq!(subtract(&v, 3, 4), vec![br(0, 3), br(7, 3), br(20, 5)]);
        assert_eq!(subtract(&v, 0, 25), vec![]);
        assert_eq!(subtract(&v, 22, 1), vec![br(0, 10), br(20, 2), br(23, 2)]);
    }

    #[test]
    fn intersect_keeps_exactly_the_overlap() {
        let v = vec![br(0, 10), br(20, 5)];
        assert_eq!(intersect(&v, 8, 14), vec![br(8, 2), br(20, 2)]);
        assert_eq!(intersect(&v, 10, 10), vec![]);
        assert_eq!(
            intersect_pairs(&[(0, 100), (200, 50)], &[(50, 160), (240, 1)]),
            vec![(50, 50), (200, 10), (240, 1)]
        );
        assert_eq!(intersect_pairs(&[(0, 100)], &[]), vec![]);
    }
}
