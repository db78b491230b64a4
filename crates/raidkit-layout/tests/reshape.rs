//! Reshape arithmetic (`raidkit_layout::reshape`): numbers md recorded, and property tests
//! that simulate whole reshapes on member contents for random geometries:
//!
//! * every array sector maps to exactly one member location on either side of the
//!   position, and no two array sectors share a location, at every position the planner
//!   reaches;
//! * the checkpoint rule never lets a write land on old data a restart from the recorded
//!   position still needs (or on the old data of a sector not read yet): after every step
//!   a restart from the recorded position finds every sector, and at the end the whole
//!   array is in the new geometry;
//! * `write_access` sends writes only where the data is, and waits in md's window.

use proptest::prelude::*;
use raidkit_layout::reshape::{
    takeover, Direction, MemberSector, PlanError, Reshape, Side, Step, WriteAccess,
};
use raidkit_layout::{Geometry, Level};
use std::collections::HashMap;

fn geo(level: Level, layout: u32, chunk: u64, n: usize, dev: u64) -> Geometry {
    Geometry::new(level, layout, chunk, n, dev, Vec::new()).unwrap()
}

/// md-format §7.1: a RAID5 3→4 grow (64 KiB chunk) stopped with reshape_position 4608,
/// data_offset 2048, new_offset −384: below 4608 the new 4-member layout at 1664, above
/// it the old 3-member layout at 2048.
#[test]
fn reference_grow_3_to_4() {
    let old = geo(Level::Raid5, 2, 128, 3, 30_720);
    let new = geo(Level::Raid5, 2, 128, 4, 30_720);
    let r = Reshape::new(
        old.clone(),
        new.clone(),
        vec![2048; 3],
        vec![1664; 4],
        Direction::from_md(1, false),
    )
    .unwrap();
    assert_eq!(r.step_sectors(), 384);
    assert!(r.position_valid(4608));
    assert!(!r.position_valid(4600));
    assert_eq!(r.array_sectors(), old.array_sectors());
    for s in [0, 1, 127, 128, 383, 4607] {
        let l = r.locate(s, 4608).unwrap();
        let p = new.locate(s).unwrap();
        assert_eq!(l.side, Side::New);
        assert_eq!(
            l.copies,
            vec![MemberSector {
                role: p.copies[0].0,
                sector: 1664 + p.copies[0].1
            }]
        );
        assert!(s + l.run <= 4608);
    }
    for s in [4608, 4609, 40_000, old.array_sectors() - 1] {
        let l = r.locate(s, 4608).unwrap();
        let p = old.locate(s).unwrap();
        assert_eq!(l.side, Side::Old);
        assert_eq!(l.copies[0].sector, 2048 + p.copies[0].1);
    }
    assert_eq!(r.locate(old.array_sectors(), 4608), None);
    // md resumed this array without a backup: the next move is safe from the record.
    assert_eq!(r.resume_needs_backup(4608), Ok(None));
    assert_eq!(
        r.next_step(4608, 4608, None),
        Ok(Step::Move {
            from: 4608,
            to: 4992
        })
    );
}

/// Without a data offset change a grow starts with md's critical section: the first
/// moves overwrite the old places of the sectors they move, so they need a backup (mdadm
/// backs up the first stripes); later ones are safe.
#[test]
fn grow_in_place_starts_with_a_critical_section() {
    let old = geo(Level::Raid5, 2, 8, 3, 800);
    let new = geo(Level::Raid5, 2, 8, 4, 800);
    let r = Reshape::new(old, new, vec![100; 3], vec![100; 4], Direction::Forwards).unwrap();
    assert_eq!(r.resume_needs_backup(0), Ok(Some((0, 24))));
    assert_eq!(
        r.next_step(0, 0, None),
        Ok(Step::Backup { from: 0, to: 24 })
    );
    assert_eq!(
        r.next_step(0, 0, Some((0, 24))),
        Ok(Step::Move { from: 0, to: 24 })
    );
    // Past the backup: record the position, then the backup can be retired.
    assert_eq!(
        r.next_step(24, 0, Some((0, 24))),
        Ok(Step::Checkpoint { position: 24 })
    );
    assert_eq!(r.resume_needs_backup(408), Ok(None));
    // Client writes: moved and recorded → new; copied but not recorded → wait; ahead and
    // in an old stripe the move has not reached → old; in the old stripe it cuts → wait.
    assert_eq!(r.write_access(10, 48, 24, None), WriteAccess::New);
    assert_eq!(r.write_access(30, 48, 24, None), WriteAccess::Wait);
    assert_eq!(r.write_access(64, 48, 24, None), WriteAccess::Old);
    // Old stripes are 16 sectors (two data members): progress 72 cuts stripe 64..80.
    assert_eq!(r.write_access(75, 72, 72, None), WriteAccess::Wait);
    assert_eq!(r.write_access(80, 72, 72, None), WriteAccess::Old);
    assert_eq!(r.write_access(5, 0, 0, Some((0, 24))), WriteAccess::Wait);
}

#[test]
fn refusals() {
    let g5 = geo(Level::Raid5, 2, 8, 4, 800);
    let g5b = geo(Level::Raid5, 2, 8, 5, 800);
    let r0 = Geometry::new(Level::Raid0, 0, 8, 4, 0, vec![800; 4]).unwrap();
    let f2 = geo(Level::Raid10, 0x201, 8, 4, 800);
    for (o, n, dir) in [
        (r0.clone(), g5.clone(), Direction::Forwards),
        (f2.clone(), f2.clone(), Direction::Forwards),
        (g5.clone(), g5b.clone(), Direction::Backwards), // a grow must run forwards
        (g5b.clone(), g5.clone(), Direction::Forwards),  // a shrink backwards
    ] {
        let (a, b) = (vec![64; o.raid_disks], vec![64; n.raid_disks]);
        assert!(Reshape::new(o, n, a, b, dir).is_err());
    }
    // The data start must move down forwards, up backwards.
    assert!(Reshape::new(
        g5.clone(),
        g5b.clone(),
        vec![64; 4],
        vec![72; 5],
        Direction::Forwards
    )
    .is_err());
    assert!(Reshape::new(g5b, g5, vec![64; 5], vec![56; 4], Direction::Backwards).is_err());
    let r = Reshape::new(
        geo(Level::Raid5, 2, 8, 3, 800),
        geo(Level::Raid5, 2, 8, 4, 800),
        vec![100; 3],
        vec![100; 4],
        Direction::Forwards,
    )
    .unwrap();
    assert!(matches!(
        r.next_step(8, 16, None),
        Err(PlanError::BadPosition(_))
    ));
    assert!(matches!(
        r.next_step(1_000_000, 0, None),
        Err(PlanError::BadPosition(_))
    ));
}

// ------------------------------------------------------------------ simulation

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Data(u64),
    OldParity(u64),
    NewParity,
}

/// Member contents as the reshape leaves them, and the checks of every write.
struct Sim<'a> {
    r: &'a Reshape,
    cells: HashMap<MemberSector, Cell>,
    progress: u64,
    recorded: u64,
    backup: Option<(u64, u64)>,
}

impl<'a> Sim<'a> {
    fn new(r: &'a Reshape) -> Sim<'a> {
        let mut cells = HashMap::new();
        let old = r.old();
        for s in 0..old.array_sectors() {
            for c in r.place(Side::Old, s).unwrap().copies {
                assert!(
                    cells.insert(c, Cell::Data(s)).is_none(),
                    "old layout collides"
                );
            }
        }
        if old.level.has_parity() {
            let c = old.chunk_sectors;
            for k in 0..old.stripes() {
                let st = old.stripe(k).unwrap();
                for role in std::iter::once(st.p).chain(st.q) {
                    for i in 0..c {
                        let at = MemberSector {
                            role,
                            sector: r.old_offsets()[role] + k * c + i,
                        };
                        assert!(cells.insert(at, Cell::OldParity(k)).is_none());
                    }
                }
            }
        }
        let p = r.start_position();
        Sim {
            r,
            cells,
            progress: p,
            recorded: p,
            backup: None,
        }
    }

    /// Still needed by a restart from the recorded position (and not in the backup)?
    fn needed(&self, s: u64) -> bool {
        self.r.side_of(s, self.recorded) == Side::Old
            && !self.backup.is_some_and(|(a, b)| a <= s && s < b)
    }

    fn write(&mut self, at: MemberSector, v: Cell) {
        match self.cells.get(&at).copied() {
            Some(Cell::Data(t)) if Cell::Data(t) != v => {
                assert!(
                    !self.needed(t),
                    "{at:?}: overwrote old data of {t} (recorded {}, backup {:?})",
                    self.recorded,
                    self.backup
                );
            }
            Some(Cell::OldParity(k)) => {
                let old = self.r.old();
                let w = old.chunk_sectors * old.data_disks() as u64;
                let live = (k * w..(k + 1) * w).any(|t| t < old.array_sectors() && self.needed(t));
                assert!(!live, "{at:?}: overwrote the old parity of live stripe {k}");
            }
            _ => {}
        }
        self.cells.insert(at, v);
    }

    fn step(&mut self, st: Step) {
        let r = self.r;
        match st {
            Step::Move { from, to } => {
                assert!(from < to);
                match r.direction() {
                    Direction::Forwards => assert_eq!(from, self.progress),
                    Direction::Backwards => assert_eq!(to, self.progress),
                }
                let old_size = r.old().array_sectors();
                // Read everything first (from its old places, which must be intact).
                for s in from..to.min(old_size) {
                    for c in r.place(Side::Old, s).unwrap().copies {
                        assert_eq!(
                            self.cells.get(&c),
                            Some(&Cell::Data(s)),
                            "old copy of {s} lost before it was read"
                        );
                    }
                }
                let new = r.new_geometry();
                for s in from..to.min(new.array_sectors()) {
                    let v = if s < old_size {
                        Cell::Data(s)
                    } else {
                        Cell::Data(u64::MAX)
                    };
                    for c in r.place(Side::New, s).unwrap().copies {
                        self.write(c, v);
                    }
                }
                if new.level.has_parity() {
                    let c = new.chunk_sectors;
                    let w = c * new.data_disks() as u64;
                    for k in from / w..to.div_ceil(w) {
                        let st = new.stripe(k).unwrap();
                        for role in std::iter::once(st.p).chain(st.q) {
                            for i in 0..c {
                                let at = MemberSector {
                                    role,
                                    sector: r.new_offsets()[role] + k * c + i,
                                };
                                self.write(at, Cell::NewParity);
                            }
                        }
                    }
                }
                self.progress = match r.direction() {
                    Direction::Forwards => to,
                    Direction::Backwards => from,
                };
            }
            Step::Checkpoint { position } => {
                assert_eq!(position, self.progress);
                self.recorded = position;
                if let Some((a, b)) = self.backup {
                    let retired = match r.direction() {
                        Direction::Forwards => position >= b,
                        Direction::Backwards => position <= a,
                    };
                    if retired {
                        self.backup = None;
                    }
                }
            }
            Step::Backup { from, to } => {
                assert_eq!(
                    self.recorded, self.progress,
                    "a backup starts at a recorded position"
                );
                assert!(self.backup.is_none());
                self.backup = Some((from, to));
            }
            Step::Done => unreachable!(),
        }
    }

    /// Every sector where `locate` says, for a restart from the record (backed-up sectors
    /// excepted) and for the progress; no location shared.
    fn check(&self) {
        let r = self.r;
        let mut seen: HashMap<MemberSector, u64> = HashMap::new();
        for s in 0..r.array_sectors() {
            if !self.backup.is_some_and(|(a, b)| a <= s && s < b) {
                for c in r.locate(s, self.recorded).unwrap().copies {
                    assert_eq!(
                        self.cells.get(&c),
                        Some(&Cell::Data(s)),
                        "restart from {} loses {s}",
                        self.recorded
                    );
                }
            }
            let l = r.locate(s, self.progress).unwrap();
            assert!(l.run >= 1);
            for c in l.copies {
                assert_eq!(
                    self.cells.get(&c),
                    Some(&Cell::Data(s)),
                    "at progress {}: {s}",
                    self.progress
                );
                if let Some(t) = seen.insert(c, s) {
                    panic!("{c:?} holds both {t} and {s}");
                }
            }
            match r.write_access(s, self.progress, self.recorded, self.backup) {
                WriteAccess::New => assert_eq!(r.side_of(s, self.recorded), Side::New),
                WriteAccess::Old => {
                    // Not moved, and (raid456) its whole old stripe is ahead of the move:
                    // the write's parity update touches nothing being moved.
                    let old = r.old();
                    let w = if old.level.has_parity() {
                        old.chunk_sectors * old.data_disks() as u64
                    } else {
                        1
                    };
                    let lo = s / w * w;
                    for t in lo..(lo + w).min(old.array_sectors()) {
                        assert_eq!(
                            r.side_of(t, self.progress),
                            Side::Old,
                            "write {s}: {t} moved"
                        );
                        for c in r.place(Side::Old, t).unwrap().copies {
                            assert_eq!(self.cells.get(&c), Some(&Cell::Data(t)));
                        }
                    }
                }
                WriteAccess::Wait => {
                    // md waits only in its window: moved but not recorded, a backup, or a
                    // stripe the progress cuts.
                    let in_backup = self.backup.is_some_and(|(a, b)| a <= s && s < b);
                    let window = r.side_of(s, self.recorded) == Side::Old
                        && r.side_of(s, self.progress) == Side::New;
                    assert!(
                        in_backup || window || r.old().level.has_parity(),
                        "needless wait for {s}"
                    );
                }
            }
        }
    }
}

/// Run a whole reshape; returns (moves, checkpoints, backups).
fn simulate(r: &Reshape) -> (u32, u32, u32) {
    let mut sim = Sim::new(r);
    sim.check();
    let mut counts = (0, 0, 0);
    for _ in 0..100_000 {
        let st = r.next_step(sim.progress, sim.recorded, sim.backup).unwrap();
        match st {
            Step::Done => {
                assert_eq!(sim.progress, r.end_position());
                let old = r.old().array_sectors();
                for s in 0..r.new_geometry().array_sectors() {
                    let want = if s < old {
                        Cell::Data(s)
                    } else {
                        Cell::Data(u64::MAX)
                    };
                    for c in r.place(Side::New, s).unwrap().copies {
                        assert_eq!(sim.cells.get(&c), Some(&want), "final {s}");
                    }
                }
                return counts;
            }
            Step::Move { .. } => counts.0 += 1,
            Step::Checkpoint { .. } => counts.1 += 1,
            Step::Backup { .. } => counts.2 += 1,
        }
        sim.step(st);
        sim.check();
    }
    panic!("reshape did not finish");
}

const R5_LAYOUTS: [u32; 6] = [0, 1, 2, 3, 4, 5];
const R6_LAYOUTS: [u32; 14] = [0, 1, 2, 3, 4, 5, 8, 9, 10, 16, 17, 18, 19, 20];

/// A random md restripe: level, device counts, layouts, chunks, direction and data
/// starts as mdadm would pick them (offset change of 0, the minimum, or more).
fn arb_reshape() -> impl Strategy<Value = Reshape> {
    arb_reshape_shift().prop_map(|(r, _)| r)
}

/// [`arb_reshape`] and whether the data start moved by at least mdadm's minimum.
fn arb_reshape_shift() -> impl Strategy<Value = (Reshape, bool)> {
    (
        0u8..4,
        (2usize..7, 2usize..7),
        (0usize..14, 0usize..14),
        (0u32..4, 0u32..4),
        4u64..12,
        0u8..4,
        any::<bool>(),
        prop::collection::vec(0u64..4, 8),
    )
        .prop_filter_map(
            "not a valid md reshape",
            |(kind, (n0, n1), (l0, l1), (c0, c1), rows, shift, back, jitter)| {
                let (c0, c1) = (8u64 << c0, 8u64 << c1);
                let u = c0.max(c1);
                let dev = rows * u;
                let (old, new) = match kind {
                    0 | 1 => {
                        let lv = if kind == 0 {
                            Level::Raid5
                        } else {
                            Level::Raid4
                        };
                        (
                            Geometry::new(lv, R5_LAYOUTS[l0 % 6], c0, n0, dev, vec![]).ok()?,
                            Geometry::new(Level::Raid5, R5_LAYOUTS[l1 % 6], c1, n1, dev, vec![])
                                .ok()?,
                        )
                    }
                    2 => (
                        Geometry::new(Level::Raid6, R6_LAYOUTS[l0], c0, n0 + 2, dev, vec![])
                            .ok()?,
                        Geometry::new(Level::Raid6, R6_LAYOUTS[l1], c1, n1 + 2, dev, vec![])
                            .ok()?,
                    ),
                    _ => {
                        let nc = 2 + (l0 as u32 % 2);
                        (
                            Geometry::new(Level::Raid10, nc | 0x100, c0, n0 + 1, dev, vec![])
                                .ok()?,
                            Geometry::new(Level::Raid10, nc | 0x100, c1, n1 + 1, dev, vec![])
                                .ok()?,
                        )
                    }
                };
                let (w0, w1) = if old.level.has_parity() {
                    (old.data_disks() as u64, new.data_disks() as u64)
                } else {
                    (old.raid_disks as u64, new.raid_disks as u64)
                };
                let dir = if w1 > w0 {
                    Direction::Forwards
                } else if w1 < w0 || back {
                    Direction::Backwards
                } else {
                    Direction::Forwards
                };
                // mdadm's minimum offset change: one critical section per old data disk.
                let min_change = {
                    let (a, b) = (c0 * w0, c1 * w1);
                    let g = gcd(a, b);
                    a / g * b / w0
                };
                let delta = match shift {
                    0 => 0,
                    1 => min_change,
                    2 => min_change + u,
                    _ => 2 * min_change + 8,
                };
                let base = 4096u64;
                let n_max = old.raid_disks.max(new.raid_disks);
                let old_off: Vec<u64> = (0..old.raid_disks)
                    .map(|r| base + 8 * jitter[r % 8])
                    .collect();
                let new_off: Vec<u64> = (0..new.raid_disks)
                    .map(|r| {
                        let o = old_off.get(r).copied().unwrap_or(base);
                        match dir {
                            Direction::Forwards => o - delta,
                            Direction::Backwards => o + delta,
                        }
                    })
                    .collect();
                let _ = n_max;
                Some((
                    Reshape::new(old, new, old_off, new_off, dir).ok()?,
                    shift > 0,
                ))
            },
        )
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200)
    ))]

    /// The whole reshape, step by step, for random geometries and data starts.
    #[test]
    fn whole_reshapes_never_lose_data(r in arb_reshape()) {
        let (moves, _, backups) = simulate(&r);
        prop_assert!(moves >= 1);
        // With md's offset change no backup is ever needed.
        let moved = r.old_offsets().iter().zip(r.new_offsets()).all(|(a, b)| a != b);
        if moved && r.old().raid_disks == r.new_geometry().raid_disks {
            prop_assert_eq!(backups, 0);
        }
    }

    /// With md's offset change (at least mdadm's minimum) every aligned position is one
    /// md could have stopped at: there `locate` gives each sector one home, all distinct,
    /// and the reshape can go on without a backup.
    #[test]
    fn stopped_anywhere_every_sector_has_one_home((r, moved) in arb_reshape_shift(), k in 0u64..1000) {
        prop_assume!(moved);
        let steps = r.new_geometry().array_sectors() / r.step_sectors();
        let pos = match r.direction() {
            Direction::Forwards => (k % (steps + 1)) * r.step_sectors(),
            Direction::Backwards => r.start_position().saturating_sub((k % (steps + 1)) * r.step_sectors()),
        };
        prop_assert_eq!(r.resume_needs_backup(pos), Ok(None));
        let mut seen = HashMap::new();
        for s in 0..r.array_sectors() {
            let l = r.locate(s, pos).unwrap();
            prop_assert_eq!(l.side, r.side_of(s, pos));
            for c in l.copies {
                if let Some(t) = seen.insert(c, s) {
                    prop_assert!(false, "{:?} holds {} and {} at position {}", c, t, s, pos);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ takeovers

/// What a member of `g` in `role` holds at data sector `d`: an array sector (RAID5 with
/// two members: its parity is a copy), parity of a stripe, or nothing.
fn content(g: &Geometry, role: usize, d: u64) -> Option<(bool, u64)> {
    if let Some(s) = g.reverse(role, d) {
        return Some((true, s));
    }
    if g.level.has_parity() && d / g.chunk_sectors < g.stripes() {
        let k = d / g.chunk_sectors;
        let st = g.stripe(k)?;
        if g.level == Level::Raid5 && g.raid_disks == 2 {
            return Some((true, g.reverse(st.data[0], d)?));
        }
        return Some((false, k * 2 + u64::from(st.q == Some(role))));
    }
    None
}

#[test]
fn takeovers_keep_every_sector_in_place() {
    let r0 = |n: usize| Geometry::new(Level::Raid0, 0, 16, n, 0, vec![640; n]).unwrap();
    let cases: Vec<(Geometry, Geometry, Vec<usize>)> = vec![
        (
            geo(Level::Raid1, 0, 0, 2, 640),
            geo(Level::Raid5, 2, 16, 2, 640),
            vec![],
        ),
        (
            geo(Level::Raid5, 0, 16, 2, 640),
            geo(Level::Raid1, 0, 0, 2, 640),
            vec![],
        ),
        (
            geo(Level::Raid1, 0, 0, 2, 640),
            geo(Level::Raid1, 0, 0, 4, 640),
            vec![2, 3],
        ),
        (
            geo(Level::Raid1, 0, 0, 3, 640),
            geo(Level::Raid1, 0, 0, 2, 640),
            vec![],
        ),
        (
            geo(Level::Raid4, 0, 16, 4, 640),
            geo(Level::Raid5, 5, 16, 4, 640),
            vec![],
        ),
        (
            geo(Level::Raid5, 5, 16, 4, 640),
            geo(Level::Raid4, 0, 16, 4, 640),
            vec![],
        ),
        (r0(3), geo(Level::Raid4, 0, 16, 4, 640), vec![3]),
        (r0(3), geo(Level::Raid5, 5, 16, 4, 640), vec![3]),
        (geo(Level::Raid5, 5, 16, 4, 640), r0(3), vec![]),
        (r0(3), geo(Level::Raid10, 0x102, 16, 6, 640), vec![1, 3, 5]),
        (geo(Level::Raid10, 0x102, 16, 6, 640), r0(3), vec![]),
    ]
    .into_iter()
    .chain((0..=5).map(|l| {
        let l6 = if l == 5 { 5 } else { l + 16 };
        (
            geo(Level::Raid5, l, 16, 4, 640),
            geo(Level::Raid6, l6, 16, 5, 640),
            vec![4],
        )
    }))
    .chain((0..=5).map(|l| {
        let l6 = if l == 5 { 5 } else { l + 16 };
        (
            geo(Level::Raid6, l6, 16, 5, 640),
            geo(Level::Raid5, l, 16, 4, 640),
            vec![],
        )
    }))
    .collect();
    for (old, new, build) in cases {
        let t = takeover(&old, &new).unwrap_or_else(|e| panic!("{old:?} -> {new:?}: {e}"));
        assert_eq!(t.to_build(), build, "{old:?} -> {new:?}");
        for (role, srcs) in t.sources.iter().enumerate() {
            for &src in srcs {
                for d in 0..old.used_dev_sectors(src).max(new.used_dev_sectors(role)) {
                    assert_eq!(
                        content(&new, role, d),
                        content(&old, src, d),
                        "{:?}->{:?} role {role} from {src} at {d}",
                        old.level,
                        new.level
                    );
                }
            }
        }
    }
    // Not takeovers: a layout that moves data, a multi-zone RAID0, a far layout.
    let bad = [
        (
            geo(Level::Raid5, 2, 16, 4, 640),
            geo(Level::Raid6, 2, 16, 5, 640),
        ),
        (
            Geometry::new(Level::Raid0, 1, 16, 2, 0, vec![320, 640]).unwrap(),
            geo(Level::Raid4, 0, 16, 3, 320),
        ),
        (r0(2), geo(Level::Raid10, 0x201, 16, 4, 640)),
        (
            geo(Level::Raid5, 2, 16, 4, 640),
            geo(Level::Raid4, 0, 16, 4, 640),
        ),
    ];
    for (old, new) in bad {
        assert!(takeover(&old, &new).is_err(), "{old:?} -> {new:?}");
    }
}

/// A RAID0 over members of different sizes (several zones) cannot become RAID4/RAID10 in
/// place; the refusal says so instead of calling the pair "not a level change md makes".
#[test]
fn multi_zone_raid0_takeover_says_why() {
    let old = Geometry::new(Level::Raid0, 1, 16, 3, 0, vec![320, 640, 640]).unwrap();
    for new in [
        geo(Level::Raid4, 0, 16, 4, 320),
        geo(Level::Raid5, 5, 16, 4, 320),
        geo(Level::Raid10, 0x102, 16, 6, 320),
    ] {
        let e = takeover(&old, &new).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "the raid0's members are used to different sizes (2 zones); md takes over only a raid0 whose members are all used to the same size"
            ),
            "{e}"
        );
    }
}

/// The refusal of a restripe that would drop the array's tail says what to do for its
/// case (a new chunk: one dividing the used size; the same chunk: no chunk advice), and
/// says sizes near 2^64 sectors exactly (the byte counts overflowed u64).
#[test]
fn lost_to_rounding_says_what_to_do_for_its_case() {
    use raidkit_layout::reshape::lost_to_rounding;
    let dev = (1u64 << 62) + 8;
    let old = geo(Level::Raid5, 2, 8, 3, dev);
    let new = geo(Level::Raid5, 2, 1024, 3, dev);
    let e = lost_to_rounding(&old, &new).unwrap_err().to_string();
    let (after, before) = (
        u128::from(2 * (dev / 1024 * 1024)) * 512,
        u128::from(2 * dev) * 512,
    );
    assert!(
        e.ends_with(&format!(
            "the used member size ({} KiB) is not a multiple of the new chunk (512 KiB), so the array would hold {after} bytes instead of {before}; this is not a shrink (--array-size cannot confirm it): choose a chunk that divides the used member size",
            dev / 2
        )),
        "{e}"
    );
    let smaller = geo(Level::Raid5, 2, 8, 3, 1000);
    let e = lost_to_rounding(&geo(Level::Raid5, 2, 8, 3, 1024), &smaller)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(
            "the new layout fits fewer whole chunks on the members, so the array would hold 1024000 bytes instead of 1048576; this is not a shrink (--array-size cannot confirm it): choose a geometry that keeps the array's size"
        ),
        "{e}"
    );
}
