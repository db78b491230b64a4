//! The arithmetic of a reshape in progress (md-format §7): two geometries in one array.
//!
//! md restripes an array by moving its data, unit by unit, from the old geometry to the
//! new one while recording how far it got (`reshape_position`, array sectors). At any
//! moment every array sector has exactly one valid home: forwards, sectors below the
//! position are in the new geometry and the rest in the old; backwards, sectors at or
//! above it are in the new geometry. Each geometry has its own data start per member
//! (`data_offset`, and `data_offset + new_offset` for the new geometry when md moves the
//! data area instead of using a backup).
//!
//! This module is pure. [`Reshape`] maps sectors ([`Reshape::locate`]), says what a write
//! must do while data moves ([`Reshape::write_access`]: old place, new place, or wait as
//! md does for the window being moved), and plans the moving with md's checkpoint rule
//! ([`Reshape::next_step`]: never overwrite old-layout data that is not recorded as moved;
//! record the position first when that makes the next unit safe; back the unit up when
//! nothing else does). [`takeover`] covers the level changes md makes without moving data
//! (RAID1(2)↔RAID5(2), RAID4↔RAID5 parity-last, RAID0↔RAID4/RAID5 parity-last, RAID5 L ↔
//! RAID6 L-6, RAID0↔RAID10 n2, RAID1 device count).
//!
//! Units: "array sector" as in md, "data sector" relative to a member's data start,
//! "device sector" absolute on the member ([`MemberSector`]).

mod members;
mod plan;
mod takeover;

pub use members::builds_member;
pub use plan::{PlanError, Step, StepEvidence, MAX_STEP_SECTORS};
pub use takeover::{takeover, Takeover};

use crate::{Geometry, LayoutError, Level, SECTOR};

/// Which way the reshape position moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From 0 up: sectors below the position are in the new geometry.
    Forwards,
    /// From the end down: sectors at or above the position are in the new geometry.
    Backwards,
}

impl Direction {
    /// md's rule (md-format §7.1): forwards if `delta_disks > 0`, backwards if
    /// `delta_disks < 0`; with no change of the device count, backwards iff the
    /// superblock says so (1.x `RESHAPE_BACKWARDS`; 0.90 has no such flag).
    pub fn from_md(delta_disks: i32, backwards_flag: bool) -> Direction {
        match delta_disks {
            d if d > 0 => Direction::Forwards,
            d if d < 0 => Direction::Backwards,
            _ if backwards_flag => Direction::Backwards,
            _ => Direction::Forwards,
        }
    }
}

/// Which geometry holds an array sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The geometry before the reshape.
    Old,
    /// The geometry after it.
    New,
}

/// One place on one member: its role and an absolute device sector (data start included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberSector {
    /// Role (slot) of the member in the geometry that placed the sector.
    pub role: usize,
    /// Device sector, counted from the start of the member.
    pub sector: u64,
}

/// Where an array sector lives right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The geometry that holds it.
    pub side: Side,
    /// Every copy (one for RAID0/4/5/6; the mirrors for RAID1/10), copy 0 the primary.
    pub copies: Vec<MemberSector>,
    /// Sectors from the requested one that map contiguously to the same members on the
    /// same side (≥ 1; stops at chunk, zone and reshape-position boundaries).
    pub run: u64,
}

/// What a write to an array sector must do while the reshape moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteAccess {
    /// Write it through the old geometry.
    Old,
    /// Write it through the new geometry.
    New,
    /// Its data is being moved (copied but not yet recorded, inside a backed-up section,
    /// or in an old stripe that the position cuts): wait for the next checkpoint, as md
    /// does, so that a restart from the recorded position cannot lose the write.
    Wait,
}

/// An array in the middle of a reshape: both geometries, where each one's data starts on
/// every member, and the direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reshape {
    old: Geometry,
    new: Geometry,
    old_offsets: Vec<u64>,
    new_offsets: Vec<u64>,
    direction: Direction,
}

fn invalid(why: impl Into<String>) -> LayoutError {
    LayoutError::Invalid(why.into())
}

/// True for the levels md restripes in place (raid456 and RAID10).
fn restripable(g: &Geometry) -> bool {
    match g.level {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => true,
        // md reshapes RAID10 near layouts only (no far copies, no offset layout).
        Level::Raid10 => g.layout >> 8 == 1,
        _ => false,
    }
}

impl Reshape {
    /// Describe a reshape. `old_offsets[r]` is where role `r`'s data starts in the old
    /// geometry (`data_offset`), `new_offsets[r]` in the new one (`data_offset +
    /// new_offset`, or `data_offset` when the offset does not move), one per role of
    /// each geometry (roles keep their number across a reshape; added members exist only
    /// in the new geometry, removed ones only in the old).
    ///
    /// Refused, as md refuses them: a level pair md does not restripe (raid456 with
    /// raid456, RAID10 near with RAID10 near; level changes without data movement are
    /// [`takeover`]s), a reshape that adds capacity per row running backwards or one that
    /// removes it running forwards, a new geometry smaller than the old one unless the
    /// reshape is a shrink, and a data start that moves against the direction (forwards
    /// needs `new ≤ old`, backwards `new ≥ old`, for every member in both).
    pub fn new(
        old: Geometry,
        new: Geometry,
        old_offsets: Vec<u64>,
        new_offsets: Vec<u64>,
        direction: Direction,
    ) -> Result<Reshape, LayoutError> {
        let parity = old.level.has_parity() && new.level.has_parity();
        let raid10 = old.level == Level::Raid10 && new.level == Level::Raid10;
        if !(restripable(&old) && restripable(&new) && (parity || raid10)) {
            return Err(invalid(format!(
                "md does not restripe {} ({} devices, layout {}) into {} ({} devices, layout {}); level changes without data movement are takeovers",
                old.level, old.raid_disks, old.layout, new.level, new.raid_disks, new.layout
            )));
        }
        if old_offsets.len() != old.raid_disks || new_offsets.len() != new.raid_disks {
            return Err(invalid(format!(
                "need one data start per role: {} old and {} new, got {} and {}",
                old.raid_disks,
                new.raid_disks,
                old_offsets.len(),
                new_offsets.len()
            )));
        }
        let (old_w, new_w) = (row_width(&old), row_width(&new));
        // Capacity per device row: grows run forwards, shrinks backwards (md's rule).
        let grows = new_w.0 * old_w.1 > old_w.0 * new_w.1;
        let shrinks = new_w.0 * old_w.1 < old_w.0 * new_w.1;
        if (grows && direction == Direction::Backwards)
            || (shrinks && direction == Direction::Forwards)
        {
            return Err(invalid(format!(
                "a reshape that {} the array must run {}",
                if grows { "grows" } else { "shrinks" },
                if grows { "forwards" } else { "backwards" }
            )));
        }
        lost_to_rounding(&old, &new)?;
        for (r, (&o, &n)) in old_offsets.iter().zip(&new_offsets).enumerate() {
            let ok = match direction {
                Direction::Forwards => n <= o,
                Direction::Backwards => n >= o,
            };
            if !ok {
                return Err(invalid(format!(
                    "role {r}: the data start moves from {o} to {n}, against a {direction:?} reshape (md moves it down forwards, up backwards)"
                )));
            }
        }
        Ok(Reshape {
            old,
            new,
            old_offsets,
            new_offsets,
            direction,
        })
    }

    /// The geometry before the reshape.
    pub fn old(&self) -> &Geometry {
        &self.old
    }
    /// The geometry after it.
    pub fn new_geometry(&self) -> &Geometry {
        &self.new
    }
    /// The direction.
    pub fn direction(&self) -> Direction {
        self.direction
    }
    /// Data start per role of the old geometry (device sectors).
    pub fn old_offsets(&self) -> &[u64] {
        &self.old_offsets
    }
    /// Data start per role of the new geometry (device sectors).
    pub fn new_offsets(&self) -> &[u64] {
        &self.new_offsets
    }

    /// Array sectors addressable while the reshape runs: the smaller of the two sizes
    /// (md shows the old size until a grow ends, and a shrink starts after the array size
    /// was reduced).
    pub fn array_sectors(&self) -> u64 {
        self.old.array_sectors().min(self.new.array_sectors())
    }

    /// The position a reshape starts from: 0 forwards, the new array size backwards.
    pub fn start_position(&self) -> u64 {
        match self.direction {
            Direction::Forwards => 0,
            Direction::Backwards => self.new.array_sectors(),
        }
    }

    /// The position where nothing is left to move: the new array size forwards (new
    /// stripes past the old data are written too, with zeros, so their parity is
    /// right), 0 backwards.
    pub fn end_position(&self) -> u64 {
        match self.direction {
            Direction::Forwards => self.new.array_sectors(),
            Direction::Backwards => 0,
        }
    }

    /// Device sectors per member moved in one step, md's `reshape_sectors`: the larger
    /// chunk.
    pub fn unit_sectors(&self) -> u64 {
        self.old.chunk_sectors.max(self.new.chunk_sectors)
    }

    /// Array sectors one step moves: for raid456 the unit times the new data disks
    /// (whole new stripes; md's reshape_position is always a multiple of it), for RAID10
    /// the smaller chunk (md moves RAID10 a chunk piece at a time).
    pub fn step_sectors(&self) -> u64 {
        if self.new.level.has_parity() {
            self.unit_sectors() * self.new.data_disks() as u64
        } else {
            self.old.chunk_sectors.min(self.new.chunk_sectors)
        }
    }

    /// Is `position` one md could have recorded: within `0..=new size` and, for raid456,
    /// a multiple of [`Reshape::step_sectors`] (the kernel refuses to assemble otherwise)?
    pub fn position_valid(&self, position: u64) -> bool {
        let aligned =
            !self.new.level.has_parity() || position.is_multiple_of(self.step_sectors().max(1));
        aligned && position <= self.new.array_sectors()
    }

    /// The side that holds array sector `s` when everything before `position` (in the
    /// direction of travel) has been moved.
    pub fn side_of(&self, s: u64, position: u64) -> Side {
        let moved = match self.direction {
            Direction::Forwards => s < position,
            Direction::Backwards => s >= position,
        };
        if moved {
            Side::New
        } else {
            Side::Old
        }
    }

    /// Where array sector `s` (< [`Reshape::array_sectors`]) lives when the data has been
    /// moved up to `position`: md's recorded `reshape_position` for a stopped array, the
    /// in-memory progress while moving. None past the addressable size.
    pub fn locate(&self, s: u64, position: u64) -> Option<Located> {
        if s >= self.array_sectors() {
            return None;
        }
        let side = self.side_of(s, position);
        let mut l = self.place(side, s)?;
        let to_boundary = match (self.direction, side) {
            (Direction::Forwards, Side::New) => position - s,
            (Direction::Backwards, Side::Old) => position - s,
            _ => u64::MAX,
        };
        l.run = l.run.min(to_boundary).min(self.array_sectors() - s);
        Some(l)
    }

    /// Where array sector `s` is placed by one geometry, with that geometry's data starts
    /// (any sector of that geometry's size; the new geometry's may be larger than the
    /// addressable size during a grow).
    pub fn place(&self, side: Side, s: u64) -> Option<Located> {
        let (g, offsets) = self.side(side);
        let p = g.locate(s)?;
        let copies = p
            .copies
            .iter()
            .map(|&(role, ds)| {
                Some(MemberSector {
                    role,
                    sector: offsets.get(role)?.checked_add(ds)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Located {
            side,
            copies,
            run: p.run,
        })
    }

    fn side(&self, side: Side) -> (&Geometry, &[u64]) {
        match side {
            Side::Old => (&self.old, &self.old_offsets),
            Side::New => (&self.new, &self.new_offsets),
        }
    }

    /// What a write to array sector `s` must do while data moves. `progress`: everything
    /// before it (in the direction of travel) has been written in the new geometry;
    /// `recorded`: the `reshape_position` persisted on the members; `backup`: an array
    /// range `[from, to)` whose old data is in a backup area not yet retired (writes there
    /// wait: a restore would replay the backup over them, as mdadm suspends IO there).
    ///
    /// New if `s` was moved before the recorded position; Old if it is not yet moved and
    /// its whole old stripe (raid456) is not yet reached by the move; Wait otherwise (the
    /// window md is moving: copied but not recorded, or an old stripe the position cuts).
    pub fn write_access(
        &self,
        s: u64,
        progress: u64,
        recorded: u64,
        backup: Option<(u64, u64)>,
    ) -> WriteAccess {
        if backup.is_some_and(|(a, b)| a <= s && s < b) {
            return WriteAccess::Wait;
        }
        if self.side_of(s, recorded) == Side::New {
            return WriteAccess::New;
        }
        if self.side_of(s, progress) == Side::New {
            return WriteAccess::Wait;
        }
        let (lo, hi) = self.old_stripe_span(s);
        let untouched = match self.direction {
            Direction::Forwards => lo >= progress,
            Direction::Backwards => hi <= progress,
        };
        if untouched {
            WriteAccess::Old
        } else {
            WriteAccess::Wait
        }
    }

    /// The array sectors `[lo, hi)` a write of `s` through the old geometry touches: its
    /// whole stripe for raid456 (the write updates the stripe's parity), `s` alone
    /// otherwise.
    fn old_stripe_span(&self, s: u64) -> (u64, u64) {
        let g = &self.old;
        if g.level.has_parity() {
            let w = g.chunk_sectors * g.data_disks() as u64;
            let lo = s / w * w;
            (lo, lo.saturating_add(w))
        } else {
            (s, s + 1)
        }
    }
}

/// Refuses a restripe that keeps (or adds) capacity per row but ends with a smaller
/// array: data past the new end would be dropped. Only a shrink (fewer data members per
/// row, the array size reduced first, as mdadm requires) may end smaller; md refuses the
/// rest, e.g. a chunk change when the used member size is not a multiple of the new
/// chunk. `--array-size` cannot confirm such a loss, so the error says what can be done.
pub fn lost_to_rounding(old: &Geometry, new: &Geometry) -> Result<(), LayoutError> {
    let (old_w, new_w) = (row_width(old), row_width(new));
    let shrinks = new_w.0 * old_w.1 < old_w.0 * new_w.1;
    let (before, after) = (old.array_sectors(), new.array_sectors());
    if shrinks || after >= before {
        return Ok(());
    }
    let (why, what_to_do) = if new.chunk_sectors != old.chunk_sectors {
        let why = format!(
            "the used member size ({} KiB) is not a multiple of the new chunk ({} KiB)",
            old.dev_sectors / 2,
            new.chunk_sectors / 2
        );
        (why, "choose a chunk that divides the used member size")
    } else {
        let why = "the new layout fits fewer whole chunks on the members".to_string();
        (why, "choose a geometry that keeps the array's size")
    };
    // In u128: sector counts near 2^64 (crafted metadata) are said exactly.
    let bytes = |sectors: u64| u128::from(sectors) * u128::from(SECTOR);
    Err(invalid(format!(
        "md cannot reshape to {} ({} devices, layout {}, {} KiB chunk) without losing data: {why}, so the array would hold {} bytes instead of {}; this is not a shrink (--array-size cannot confirm it): {what_to_do}",
        new.level,
        new.raid_disks,
        new.layout,
        new.chunk_sectors / 2,
        bytes(after),
        bytes(before)
    )))
}

/// Data capacity of one device row of a geometry, as a fraction (numerator, denominator):
/// data disks for raid456, devices over near copies for RAID10.
fn row_width(g: &Geometry) -> (u64, u64) {
    if g.level.has_parity() {
        (g.data_disks() as u64, 1)
    } else {
        let nc = u64::from(g.layout & 0xff).max(1);
        (g.raid_disks as u64, nc)
    }
}
