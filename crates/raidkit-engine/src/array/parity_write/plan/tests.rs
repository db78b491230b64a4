//! The planner against a model stripe, exhaustively for small geometries: every
//! combination of written / cached / readable / bad / gone blocks and parity members of
//! RAID4/5 with 3 to 6 members and RAID6 with 4 to 6 (as multisets: the plan depends on
//! counts, the model's Q on positions). Each plan is carried out on the model as the
//! engine's executors do (reads checked against what may be read, re-planning after a
//! failed reconstruction) and the stripe checked afterwards: every member that is there
//! holds the new data, and every parity block that is there and not recorded stale is the
//! parity of the data the array now holds.

use super::{plan, Plan, StripeState};
use raidkit_parity::gf;

/// A member over the model's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum M {
    /// Present and readable everywhere.
    Ok,
    /// Present, with bad blocks on the rows of the mask (written, never read there).
    Bad(u8),
    /// Failed or missing: neither read nor written.
    Gone,
}

impl M {
    fn readable(self, row: usize) -> bool {
        match self {
            M::Ok => true,
            M::Bad(mask) => mask & (1 << row) == 0,
            M::Gone => false,
        }
    }
    fn present(self) -> bool {
        self != M::Gone
    }
}

/// A data block: rows written now, whether the stripe cache knows the rest, its member.
#[derive(Clone, Copy, Debug)]
struct Block {
    written: u8,
    cached: bool,
    member: M,
}

#[derive(Debug)]
struct Case {
    rows: usize,
    blocks: Vec<Block>,
    parity: Vec<M>,
    /// A replacement is being built for a gone parity member (it takes the writes).
    replacing: bool,
    prefer_fill: bool,
}

fn old(k: usize, r: usize) -> u8 {
    (k * 7 + r * 13 + 1) as u8
}
fn new(k: usize, r: usize) -> u8 {
    (k * 31 + r * 17 + 101) as u8
}

/// P or Q (`which` 0 or 1) of one row of data.
fn par(which: usize, data: &[u8]) -> u8 {
    data.iter().enumerate().fold(0u8, |acc, (k, &d)| {
        acc ^ if which == 0 {
            d
        } else {
            gf::mul(gf::exp(k), d)
        }
    })
}

/// What the engine would find: the rows `[lo, hi)` a write covers and its state.
fn analyse(c: &Case) -> Option<(usize, usize, StripeState)> {
    let any: u8 = c.blocks.iter().fold(0, |a, b| a | b.written);
    if any == 0 {
        return None;
    }
    let lo = any.trailing_zeros() as usize;
    let hi = 8 - any.leading_zeros() as usize;
    let in_rows = |r: usize| (lo..hi).contains(&r);
    let mut st = StripeState {
        data_blocks: c.blocks.len(),
        parity_blocks: c.parity.len(),
        row_sectors: (hi - lo) as u64,
        prefer_fill: c.prefer_fill,
        ..StripeState::default()
    };
    st.whole_stripe = c.blocks.iter().all(|b| b.written == (1 << c.rows) - 1);
    for b in &c.blocks {
        if b.written != 0 {
            let first = b.written.trailing_zeros() as u64;
            let last = 8 - b.written.leading_zeros() as u64;
            st.span_sectors += last - first;
        }
        st.known_sectors += (lo..hi)
            .filter(|&r| b.written & (1 << r) != 0 || b.cached)
            .count() as u64;
    }
    let members = c
        .blocks
        .iter()
        .map(|b| b.member)
        .chain(c.parity.iter().copied());
    st.all_readable = members
        .clone()
        .all(|m| (0..c.rows).filter(|&r| in_rows(r)).all(|r| m.readable(r)));
    st.parity_gone = c.parity.iter().all(|&m| m == M::Gone) && !c.replacing;
    Some((lo, hi, st))
}

/// The model stripe while a plan is carried out.
struct Run<'a> {
    c: &'a Case,
    /// Member contents: data blocks then parity, per row.
    disk: Vec<Vec<u8>>,
    /// Parity rows recorded stale (bad) by the plan.
    stale: Vec<Vec<bool>>,
    /// Rows whose write was refused.
    refused: Vec<bool>,
    writes: usize,
    reads: u64,
}

impl Run<'_> {
    fn member(&self, i: usize) -> M {
        let k = self.c.blocks.len();
        if i < k {
            self.c.blocks[i].member
        } else {
            self.c.parity[i - k]
        }
    }
    fn read(&mut self, i: usize, r: usize, why: &str) -> u8 {
        assert!(
            self.member(i).readable(r),
            "{why} reads member {i} row {r}, which cannot be read: {:?}",
            self.c
        );
        self.reads += 1;
        self.disk[i][r]
    }
    fn write(&mut self, i: usize, r: usize, v: u8) {
        let k = self.c.blocks.len();
        let to_replacement = i >= k && self.c.replacing;
        if self.member(i).present() || to_replacement {
            self.disk[i][r] = v;
            self.writes += 1;
        }
    }
    /// The data the array holds at row `r` once the write is done.
    fn logical(&self, r: usize) -> Vec<u8> {
        (0..self.c.blocks.len())
            .map(|k| {
                if self.c.blocks[k].written & (1 << r) != 0 {
                    new(k, r)
                } else {
                    old(k, r)
                }
            })
            .collect()
    }
    /// Write the written data of row `r` and, with `parity`, P/Q of the new data.
    fn write_row(&mut self, r: usize, parity: bool) {
        let data = self.logical(r);
        for (k, b) in self.c.blocks.iter().enumerate() {
            if b.written & (1 << r) != 0 {
                self.write(k, r, data[k]);
            }
        }
        if parity {
            let k = self.c.blocks.len();
            for j in 0..self.c.parity.len() {
                self.write(k + j, r, par(j, &data));
            }
        }
    }
    /// Can the data blocks be reconstructed over rows `rows` (a block is missing when its
    /// member cannot read every row, like `read_stripe`)? Reads what it can.
    fn reconstruct(&mut self, rows: std::ops::Range<usize>) -> bool {
        let k = self.c.blocks.len();
        let whole = |m: M| rows.clone().all(|r| m.readable(r));
        let missing = (0..k).filter(|&i| !whole(self.member(i))).count();
        let p = whole(self.member(k));
        let q = self.c.parity.len() == 2 && whole(self.member(k + 1));
        for i in 0..k + self.c.parity.len() {
            if whole(self.member(i)) {
                for r in rows.clone() {
                    self.read(i, r, "a reconstruction");
                }
            }
        }
        match (missing, self.c.parity.len()) {
            (0, _) => true,
            (1, 1) => p,
            (1, _) => p || q,
            (2, 2) => p && q,
            _ => false,
        }
    }
}

/// Carry out the plans for a case the way the executors do; check the stripe after.
fn check(c: &Case) {
    let Some((lo, hi, mut st)) = analyse(c) else {
        return;
    };
    let k = c.blocks.len();
    let mut run = Run {
        c,
        disk: (0..k + c.parity.len())
            .map(|i| {
                (0..c.rows)
                    .map(|r| {
                        let olds: Vec<u8> = (0..k).map(|j| old(j, r)).collect();
                        if i < k {
                            old(i, r)
                        } else {
                            par(i - k, &olds)
                        }
                    })
                    .collect()
            })
            .collect(),
        stale: vec![vec![false; c.rows]; c.parity.len()],
        refused: vec![false; c.rows],
        writes: 0,
        reads: 0,
    };
    let mut failed = false;
    for round in 0.. {
        assert!(round < 4, "no end to re-planning: {st:?} {c:?}");
        let p = plan(&st);
        match p {
            Plan::FullStripe => {
                assert!(st.whole_stripe, "{c:?}");
                (lo..hi).for_each(|r| run.write_row(r, true));
            }
            Plan::DataOnly => {
                assert!(st.parity_gone && !st.whole_stripe, "{c:?}");
                (lo..hi).for_each(|r| run.write_row(r, false));
                assert_eq!(run.reads, 0);
            }
            Plan::Compute => {
                assert_eq!(st.unknown_sectors(), 0, "{c:?}");
                (lo..hi).for_each(|r| run.write_row(r, true));
                assert_eq!(run.reads, 0);
            }
            Plan::ReadModifyWrite => {
                assert!(st.all_readable && !st.read_failed, "{c:?}");
                assert!(st.rmw_reads() < st.rcw_reads(), "{c:?}");
                for (i, b) in c.blocks.iter().enumerate() {
                    if b.written != 0 {
                        let first = b.written.trailing_zeros() as usize;
                        let last = 8 - b.written.leading_zeros() as usize;
                        (first..last).for_each(|r| {
                            run.read(i, r, "read-modify-write");
                        });
                    }
                }
                for j in 0..c.parity.len() {
                    (lo..hi).for_each(|r| {
                        run.read(k + j, r, "read-modify-write");
                    });
                }
                assert_eq!(run.reads, st.rmw_reads(), "{c:?}");
                (lo..hi).for_each(|r| run.write_row(r, true));
            }
            Plan::ReconstructWrite => {
                assert!(st.all_readable && !st.read_failed, "{c:?}");
                for (i, b) in c.blocks.iter().enumerate() {
                    for r in lo..hi {
                        if b.written & (1 << r) == 0 && !b.cached {
                            run.read(i, r, "reconstruct-write");
                        }
                    }
                }
                assert_eq!(run.reads, st.rcw_reads(), "{c:?}");
                (lo..hi).for_each(|r| run.write_row(r, true));
            }
            Plan::Reconstruct => {
                assert!(!st.all_readable || st.read_failed, "{c:?}");
                if !run.reconstruct(lo..hi) {
                    st.reconstruct_failed = true;
                    st.bad_blocks = (0..k + c.parity.len()).any(|i| {
                        matches!(run.member(i), M::Bad(m) if (lo..hi).any(|r| m & (1 << r) != 0))
                    });
                    continue;
                }
                (lo..hi).for_each(|r| run.write_row(r, true));
            }
            Plan::OverLost => {
                assert!(st.reconstruct_failed && st.bad_blocks, "{c:?}");
                assert_eq!(run.writes, 0, "writes before the plan over lost data");
                for r in lo..hi {
                    over_lost_row(&mut run, r);
                }
            }
            Plan::Fail => {
                assert!(st.reconstruct_failed && !st.bad_blocks, "{c:?}");
                // Only an array that cannot run any more fails a write.
                // (A replacement being built is not a source of data.)
                let gone = (0..k + c.parity.len())
                    .filter(|&i| run.member(i) == M::Gone)
                    .count();
                assert!(
                    gone > c.parity.len(),
                    "a write failed on a running array: {c:?}"
                );
                assert_eq!(run.writes, 0, "a failed write wrote something: {c:?}");
                failed = true;
            }
            Plan::ReadUnwritten | Plan::StaleParity | Plan::Refuse => {
                panic!("{p:?} planned outside lost data: {c:?}")
            }
        }
        break;
    }
    if failed {
        return;
    }
    verify(&run, lo, hi);
}

/// One row over lost data, planned on its own like `write_stripe_over_lost` does.
fn over_lost_row(run: &mut Run<'_>, r: usize) {
    let c = run.c;
    let k = c.blocks.len();
    let written = |b: &Block| b.written & (1 << r) != 0;
    let mut st = StripeState {
        data_blocks: k,
        parity_blocks: c.parity.len(),
        row_sectors: 1,
        over_lost: true,
        ..StripeState::default()
    };
    for b in &c.blocks {
        if written(b) {
            st.known_sectors += 1;
            st.span_sectors += 1;
            st.written_member_missing |= !b.member.present();
        } else if !b.member.readable(r) {
            st.unwritten_unreadable += 1;
        }
    }
    for round in 0.. {
        assert!(round < 4, "no end to re-planning over lost data: {st:?}");
        match plan(&st) {
            Plan::Compute => {
                assert_eq!(st.unknown_sectors(), 0);
                run.write_row(r, true);
            }
            Plan::Reconstruct => {
                if !run.reconstruct(r..r + 1) {
                    st.reconstruct_failed = true;
                    continue;
                }
                run.write_row(r, true);
            }
            Plan::ReadUnwritten => {
                for (i, b) in c.blocks.iter().enumerate() {
                    if !written(b) {
                        run.read(i, r, "reading the unwritten blocks over lost data");
                    }
                }
                run.write_row(r, true);
            }
            Plan::StaleParity => {
                assert!(!st.written_member_missing);
                for j in 0..c.parity.len() {
                    run.stale[j][r] = true;
                }
                run.write_row(r, false);
            }
            Plan::Refuse => {
                assert!(st.written_member_missing);
                run.refused[r] = true;
            }
            p => panic!("{p:?} planned for a row over lost data: {c:?}"),
        }
        break;
    }
}

/// After the write: present data members hold the new data; parity that is there and not
/// stale is the parity of the data the array holds.
fn verify(run: &Run<'_>, lo: usize, hi: usize) {
    let c = run.c;
    let k = c.blocks.len();
    for r in lo..hi {
        if run.refused[r] {
            continue;
        }
        let data = run.logical(r);
        for (i, b) in c.blocks.iter().enumerate() {
            if b.member.present() && b.written & (1 << r) != 0 {
                assert_eq!(run.disk[i][r], data[i], "data {i} row {r}: {c:?}");
            }
        }
        for j in 0..c.parity.len() {
            let there = c.parity[j].present() || c.replacing;
            if there && !run.stale[j][r] {
                assert_eq!(
                    run.disk[k + j][r],
                    par(j, &data),
                    "parity {j} row {r}: {c:?}"
                );
            }
        }
    }
}

/// Multisets of `n` items of `alphabet` (in non-decreasing index order).
fn multisets<T: Copy>(alphabet: &[T], n: usize, f: &mut impl FnMut(&[T])) {
    fn go<T: Copy>(a: &[T], from: usize, left: usize, cur: &mut Vec<T>, f: &mut impl FnMut(&[T])) {
        if left == 0 {
            f(cur);
            return;
        }
        for i in from..a.len() {
            cur.push(a[i]);
            go(a, i, left - 1, cur, f);
            cur.pop();
        }
    }
    go(alphabet, 0, n, &mut Vec::with_capacity(n), f);
}

fn alphabet(rows: usize, written: &[u8], members: &[M]) -> Vec<Block> {
    let mut v = Vec::new();
    for &w in written {
        assert!(u32::from(w) < 1 << rows);
        for cached in [false, true] {
            for &member in members {
                v.push(Block {
                    written: w,
                    cached,
                    member,
                });
            }
        }
    }
    v
}

fn sweep(
    data_blocks: usize,
    parity_blocks: usize,
    rows: usize,
    blocks: &[Block],
    members: &[M],
) -> usize {
    let mut cases = 0;
    multisets(blocks, data_blocks, &mut |bs| {
        multisets(members, parity_blocks, &mut |ps| {
            let gone = ps.iter().all(|&m| m == M::Gone);
            for replacing in [false, true] {
                if replacing && !gone {
                    continue;
                }
                for prefer_fill in [false, true] {
                    check(&Case {
                        rows,
                        blocks: bs.to_vec(),
                        parity: ps.to_vec(),
                        replacing,
                        prefer_fill,
                    });
                    cases += 1;
                }
            }
        });
    });
    cases
}

#[test]
fn every_small_stripe_state_gets_a_plan_that_leaves_it_consistent() {
    // Three rows: spans with a gap, bad blocks at either end, at most 3 data blocks.
    let rich = [M::Ok, M::Bad(0b001), M::Bad(0b100), M::Gone];
    let all_written: Vec<u8> = (0..8).collect();
    let small = alphabet(3, &all_written, &rich);
    // Up to 5 data blocks: fewer shapes per block.
    let lean = [M::Ok, M::Bad(0b01), M::Gone];
    let big = alphabet(2, &[0b00, 0b01, 0b10, 0b11], &lean);
    let mut cases = 0;
    for (data_blocks, parity_blocks) in [(2, 1), (3, 1), (2, 2)] {
        cases += sweep(data_blocks, parity_blocks, 3, &small, &rich);
    }
    for (data_blocks, parity_blocks) in [(4, 1), (5, 1), (3, 2), (4, 2)] {
        cases += sweep(data_blocks, parity_blocks, 2, &big, &lean);
    }
    assert!(cases > 100_000, "{cases}");
}

#[test]
fn read_modify_write_only_when_it_reads_less() {
    let base = StripeState {
        data_blocks: 4,
        parity_blocks: 1,
        row_sectors: 8,
        all_readable: true,
        ..StripeState::default()
    };
    // One small write into a wide stripe: old data + P (16) beat the rest (24).
    let small = StripeState {
        span_sectors: 8,
        known_sectors: 8,
        ..base
    };
    assert_eq!(plan(&small), Plan::ReadModifyWrite);
    // With rows reused, filling them (24 ≤ 2 × 16) wins.
    assert_eq!(
        plan(&StripeState {
            prefer_fill: true,
            ..small
        }),
        Plan::ReconstructWrite
    );
    // Three of four blocks written: the fourth (8) beats old data + P (32).
    let most = StripeState {
        span_sectors: 24,
        known_sectors: 24,
        ..base
    };
    assert_eq!(plan(&most), Plan::ReconstructWrite);
    // RAID6 reads Q too: one block of two, 8 + 16 vs 8.
    let r6 = StripeState {
        data_blocks: 2,
        parity_blocks: 2,
        ..small
    };
    assert_eq!(plan(&r6), Plan::ReconstructWrite);
    // A failed read: reconstruct; a failed reconstruction: over lost data or fail.
    let failed = StripeState {
        read_failed: true,
        ..small
    };
    assert_eq!(plan(&failed), Plan::Reconstruct);
    let lost = StripeState {
        reconstruct_failed: true,
        ..failed
    };
    assert_eq!(plan(&lost), Plan::Fail);
    assert_eq!(
        plan(&StripeState {
            bad_blocks: true,
            ..lost
        }),
        Plan::OverLost
    );
}
