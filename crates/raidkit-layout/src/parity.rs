//! RAID4/5/6 stripe placement (§4.4, §4.5): P/Q positions, data positions, Q slots.

use crate::{Geometry, Level};

/// How logical data block `k` is placed on the members of one stripe.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// `member = (start + k) mod modulus`.
    Rotate { start: usize, modulus: usize },
    /// `d = base + k`; `member = d` if `d < at`, else `d + width` (skips P, or P and Q).
    Skip {
        base: usize,
        at: usize,
        width: usize,
    },
}

/// One stripe of a parity array.
#[derive(Clone, Debug)]
pub(crate) struct PStripe {
    /// Members.
    pub(crate) n: usize,
    /// Data blocks per stripe.
    pub(crate) k: usize,
    /// P member.
    pub(crate) p: usize,
    /// Q member (RAID6).
    pub(crate) q: Option<usize>,
    /// DDF syndrome order (slot = physical member index).
    pub(crate) ddf: bool,
    rule: Rule,
}

impl PStripe {
    /// Placement of stripe `stripe`; None if the geometry is not a mappable parity array.
    pub(crate) fn of(g: &Geometry, stripe: u64) -> Option<PStripe> {
        let n = g.raid_disks;
        if n > crate::MAX_RAID_DISKS {
            return None;
        }
        let n64 = u64::try_from(n).ok()?;
        let r = usize::try_from(stripe.checked_rem(n64)?).ok()?;
        let (p, q, rule, ddf) = match g.level {
            Level::Raid4 => {
                let (p, rule) = raid4(n)?;
                (p, None, rule, false)
            }
            Level::Raid5 => {
                let (p, rule) = raid5(g.layout, n, r)?;
                (p, None, rule, false)
            }
            Level::Raid6 => {
                let (p, q, rule) = raid6(g.layout, n, r, stripe)?;
                (p, Some(q), rule, matches!(g.layout, 8..=10))
            }
            _ => return None,
        };
        let k = n.checked_sub(if q.is_some() { 2 } else { 1 })?;
        debug_assert!(p < n && q.is_none_or(|q| q < n && q != p));
        Some(PStripe {
            n,
            k,
            p,
            q,
            ddf,
            rule,
        })
    }

    /// Member holding logical data block `k` (`k < self.k`).
    pub(crate) fn member(&self, k: usize) -> usize {
        match self.rule {
            Rule::Rotate { start, modulus } => {
                start.saturating_add(k).checked_rem(modulus).unwrap_or(0)
            }
            Rule::Skip { base, at, width } => {
                let d = base.saturating_add(k);
                if d >= at {
                    d.saturating_add(width)
                } else {
                    d
                }
            }
        }
    }

    /// Logical data index of member `m`, None for P, Q or an invalid member.
    pub(crate) fn index_of(&self, m: usize) -> Option<usize> {
        if m >= self.n || m == self.p || Some(m) == self.q {
            return None;
        }
        let k = match self.rule {
            Rule::Rotate { start, modulus } => {
                if m >= modulus {
                    return None;
                }
                (m + modulus - start % modulus) % modulus
            }
            Rule::Skip { base, at, width } => {
                let d = if m >= at.saturating_add(width) {
                    m - width
                } else if m >= at {
                    return None;
                } else {
                    m
                };
                d.checked_sub(base)?
            }
        };
        (k < self.k && self.member(k) == m).then_some(k)
    }

    /// Q syndrome slot of the data block on member `m` (§4.5): the physical index for the
    /// DDF layouts; otherwise the rank of `m` in the walk that starts just after Q.
    pub(crate) fn slot(&self, m: usize) -> usize {
        if self.ddf {
            return m;
        }
        let n = self.n;
        let d0 = self.q.map_or(0, |q| (q + 1) % n);
        let dist = (m + n - d0) % n;
        let ppos = (self.p + n - d0) % n;
        if ppos < dist {
            dist - 1
        } else {
            dist
        }
    }
}

/// RAID4 over `n` members: parity on the last member, data in order before it.
fn raid4(n: usize) -> Option<(usize, Rule)> {
    let p = n.checked_sub(1).filter(|&k| k > 0)?;
    Some((
        p,
        Rule::Rotate {
            start: 0,
            modulus: n,
        },
    ))
}

/// RAID5 layout `layout` over `n` members, stripe `r` (the stripe number mod `n`):
/// the P member and the data rule (§4.4).
fn raid5(layout: u32, n: usize, r: usize) -> Option<(usize, Rule)> {
    let last = n.checked_sub(1).filter(|&l| l > 0)?;
    let rotate = |start| Rule::Rotate { start, modulus: n };
    Some(match layout {
        // left/right asymmetric: data in member order, skipping P.
        0 | 1 => {
            let p = if layout == 0 { last - r } else { r };
            (
                p,
                Rule::Skip {
                    base: 0,
                    at: p,
                    width: 1,
                },
            )
        }
        // left/right symmetric: data starts right after P and wraps.
        2 | 3 => {
            let p = if layout == 2 { last - r } else { r };
            (p, rotate(p + 1))
        }
        // parity first / parity last (RAID4-like).
        4 => (0, rotate(1)),
        5 => (last, rotate(0)),
        _ => return None,
    })
}

/// RAID6 layout `layout` over `n` members, stripe `r` (mod `n`) of array stripe `stripe`:
/// the P and Q members and the data rule (§4.5).
fn raid6(layout: u32, n: usize, r: usize, stripe: u64) -> Option<(usize, usize, Rule)> {
    if n < 4 {
        return None;
    }
    let last = n - 1;
    let rotate = |start, modulus| Rule::Rotate { start, modulus };
    Some(match layout {
        // asymmetric (and the DDF N-restart/N-continue forms): P, then Q right after it.
        0 | 1 | 8 | 9 => {
            let p = match layout {
                0 => last - r,
                9 => last - (r + 1) % n,
                _ => r,
            };
            if p == last {
                let data_after_q = Rule::Skip {
                    base: 1,
                    at: n,
                    width: 0,
                };
                (p, 0, data_after_q)
            } else {
                let skip_p_and_q = Rule::Skip {
                    base: 0,
                    at: p,
                    width: 2,
                };
                (p, p + 1, skip_p_and_q)
            }
        }
        // symmetric: Q right after P, data after Q, wrapping.
        2 | 3 => {
            let p = if layout == 2 { last - r } else { r };
            (p, (p + 1) % n, rotate(p + 2, n))
        }
        4 => (0, 1, rotate(2, n)),
        5 => (n - 2, last, rotate(0, n)),
        // DDF zero-restart: Q before P.
        10 => {
            let p = last - r;
            (p, (p + last) % n, rotate(p + 1, n))
        }
        // the RAID5 layouts with Q on the last member (the `*-6` layouts of a 5->6 takeover).
        16..=19 => {
            let r6 = usize::try_from(stripe % u64::try_from(last).ok()?).ok()?;
            let p = if matches!(layout, 16 | 18) {
                (n - 2) - r6
            } else {
                r6
            };
            let rule = if layout <= 17 {
                Rule::Skip {
                    base: 0,
                    at: p,
                    width: 1,
                }
            } else {
                rotate(p + 1, last)
            };
            (p, last, rule)
        }
        20 => (0, last, rotate(1, n)),
        _ => return None,
    })
}
