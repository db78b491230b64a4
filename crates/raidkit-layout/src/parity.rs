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
                let k = n.checked_sub(1)?;
                if k == 0 {
                    return None;
                }
                (
                    k,
                    None,
                    Rule::Rotate {
                        start: 0,
                        modulus: n,
                    },
                    false,
                )
            }
            Level::Raid5 => {
                let last = n.checked_sub(1)?;
                if last == 0 {
                    return None;
                }
                let (p, rule) = match g.layout {
                    0 | 1 => {
                        let p = if g.layout == 0 { last - r } else { r };
                        (
                            p,
                            Rule::Skip {
                                base: 0,
                                at: p,
                                width: 1,
                            },
                        )
                    }
                    2 | 3 => {
                        let p = if g.layout == 2 { last - r } else { r };
                        (
                            p,
                            Rule::Rotate {
                                start: p + 1,
                                modulus: n,
                            },
                        )
                    }
                    4 => (
                        0,
                        Rule::Rotate {
                            start: 1,
                            modulus: n,
                        },
                    ),
                    5 => (
                        last,
                        Rule::Rotate {
                            start: 0,
                            modulus: n,
                        },
                    ),
                    _ => return None,
                };
                (p, None, rule, false)
            }
            Level::Raid6 => {
                if n < 4 {
                    return None;
                }
                let last = n - 1;
                match g.layout {
                    0 | 1 | 8 | 9 => {
                        let p = match g.layout {
                            0 => last - r,
                            9 => last - (r + 1) % n,
                            _ => r,
                        };
                        let (q, rule) = if p == last {
                            (
                                0,
                                Rule::Skip {
                                    base: 1,
                                    at: n,
                                    width: 0,
                                },
                            )
                        } else {
                            (
                                p + 1,
                                Rule::Skip {
                                    base: 0,
                                    at: p,
                                    width: 2,
                                },
                            )
                        };
                        (p, Some(q), rule, g.layout >= 8)
                    }
                    2 | 3 => {
                        let p = if g.layout == 2 { last - r } else { r };
                        (
                            p,
                            Some((p + 1) % n),
                            Rule::Rotate {
                                start: p + 2,
                                modulus: n,
                            },
                            false,
                        )
                    }
                    4 => (
                        0,
                        Some(1),
                        Rule::Rotate {
                            start: 2,
                            modulus: n,
                        },
                        false,
                    ),
                    5 => (
                        n - 2,
                        Some(last),
                        Rule::Rotate {
                            start: 0,
                            modulus: n,
                        },
                        false,
                    ),
                    10 => {
                        let p = last - r;
                        (
                            p,
                            Some((p + last) % n),
                            Rule::Rotate {
                                start: p + 1,
                                modulus: n,
                            },
                            true,
                        )
                    }
                    16..=19 => {
                        let r6 = usize::try_from(stripe % u64::try_from(last).ok()?).ok()?;
                        let p = if matches!(g.layout, 16 | 18) {
                            (n - 2) - r6
                        } else {
                            r6
                        };
                        let rule = if g.layout <= 17 {
                            Rule::Skip {
                                base: 0,
                                at: p,
                                width: 1,
                            }
                        } else {
                            Rule::Rotate {
                                start: p + 1,
                                modulus: last,
                            }
                        };
                        (p, Some(last), rule, false)
                    }
                    20 => (
                        0,
                        Some(last),
                        Rule::Rotate {
                            start: 1,
                            modulus: n,
                        },
                        false,
                    ),
                    _ => return None,
                }
            }
            _ => return None,
        };
        let k = n.checked_sub(if q.is_some() { 2 } else { 1 })?;
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
