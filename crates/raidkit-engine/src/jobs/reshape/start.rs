//! What a reshape request means and the plan `--dry-run` prints: the stages md goes
//! through (takeovers, which change the level without moving data, and restripes, which
//! move it), where the moved data goes (a data-offset change where every member has room
//! before or after its data, mdadm's rule; else mdadm's backup file), how much is moved,
//! the buffer the mover uses, a time estimate from the members' measured speed, and what
//! is wrong with the array first (degraded, lost data, a slow member).

pub(crate) use super::health::problems;
use super::health::{measure, measure_rounds, median, slow_members};
use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::locks::lock;
use crate::sb::Super;
use raidkit_layout::reshape::{lost_to_rounding, takeover, Direction, Reshape, Step};
use raidkit_layout::{Geometry, Level, SECTOR};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// What the admin asks for (mdadm's `--grow` options). Unset fields keep the array's
/// value, or md's default for a level change.
#[derive(Clone, Default)]
pub struct ReshapeRequest {
    /// `--raid-devices`.
    pub raid_disks: Option<usize>,
    /// `--level`.
    pub level: Option<Level>,
    /// `--layout` (md's value).
    pub layout: Option<u32>,
    /// `--chunk`, sectors.
    pub chunk_sectors: Option<u64>,
    /// `--array-size`, sectors: required before members are removed (the data past it is
    /// given up, as mdadm requires).
    pub array_sectors: Option<u64>,
    /// Devices to add first (as spares, then used by the reshape).
    pub add: Vec<Arc<dyn BlockDev>>,
    /// `--backup-file`: where the critical section goes when the data cannot move to
    /// another offset.
    pub backup_file: Option<PathBuf>,
    /// Go on with a degraded or unhealthy array.
    pub force: bool,
}

impl std::fmt::Debug for ReshapeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReshapeRequest")
            .field("raid_disks", &self.raid_disks)
            .field("level", &self.level)
            .field("layout", &self.layout)
            .field("chunk_sectors", &self.chunk_sectors)
            .field("array_sectors", &self.array_sectors)
            .field(
                "add",
                &self
                    .add
                    .iter()
                    .map(|d| d.name().to_string())
                    .collect::<Vec<_>>(),
            )
            .field("backup_file", &self.backup_file)
            .field("force", &self.force)
            .finish()
    }
}

/// One stage of a reshape.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// A level change md makes without moving data; `sources[r]` are the old roles whose
    /// member already holds new role `r`'s contents (empty: to be built).
    Takeover {
        /// The geometry after it.
        to: Geometry,
        /// Per new role, the old roles that hold its contents.
        sources: Vec<Vec<usize>>,
    },
    /// Data moved into a new geometry.
    Restripe {
        /// The geometry after it.
        to: Geometry,
    },
}

impl Stage {
    /// The geometry after the stage.
    pub fn to(&self) -> &Geometry {
        match self {
            Stage::Takeover { to, .. } | Stage::Restripe { to } => to,
        }
    }
}

/// Where the data of a restripe goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Room {
    /// The data start moves by `change` sectors on every member (negative: down, into
    /// the room before the data).
    OffsetChange {
        /// New data start minus old, sectors.
        change: i64,
        /// The component size is reduced to this first (a shrink whose array size was
        /// reduced: the room after the data grows by the difference).
        #[serde(skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    },
    /// The data stays where it is; critical sections go to the backup file.
    Backup {
        /// The file.
        file: String,
    },
}

/// One stage, for reports.
#[derive(Clone, Debug, Serialize)]
pub struct StageInfo {
    /// `takeover` or `restripe`.
    pub kind: &'static str,
    /// The shape after it.
    pub to: crate::array::reshape::ShapeInfo,
    /// Roles to build after a takeover (from spares).
    pub build_roles: Vec<usize>,
}

/// The plan of a reshape (`--dry-run`).
#[derive(Clone, Debug, Serialize)]
pub struct ReshapePlan {
    /// The shape now.
    pub from: crate::array::reshape::ShapeInfo,
    /// The shape at the end.
    pub to: crate::array::reshape::ShapeInfo,
    /// Every stage, in order.
    pub stages: Vec<StageInfo>,
    /// Array bytes before and after.
    pub array_bytes_before: u64,
    /// After.
    pub array_bytes_after: u64,
    /// Array bytes the restripes move.
    pub bytes_to_move: u64,
    /// Where the data of the first restripe goes.
    pub room: Option<Room>,
    /// Bytes the mover reads and writes per batch (the reshape's stripe cache).
    pub buffer_bytes: u64,
    /// Slowest member's measured sequential read speed, bytes per second.
    pub member_bytes_per_sec: Option<u64>,
    /// Estimated duration, seconds (at the measured speed; no speed limit).
    pub estimate_seconds: Option<u64>,
    /// What is wrong with the array (the reshape is refused unless forced).
    pub problems: Vec<String>,
}

/// The reshape's stripe cache: array sectors the mover reads and writes per batch —
/// 32 MiB rounded to whole steps (whole new stripes), at least one step (and more when
/// the data starts force larger steps). md's reshape speed depends on the
/// `stripe_cache_size` the admin sets; this one sizes itself from the geometry.
pub fn buffer_sectors(plan: &Reshape) -> u64 {
    const TARGET: u64 = 32 << 11;
    let step = plan.step_sectors().max(1);
    (TARGET / step).max(1) * step
}

fn invalid(s: impl Into<String>) -> EngineError {
    EngineError::Invalid(s.into())
}

/// The RAID6 layout with RAID5 layout `l`'s data and P placement and Q on the last member.
fn raid6_of(l: u32) -> Option<u32> {
    match l {
        0..=4 => Some(l + 16),
        5 => Some(5),
        _ => None,
    }
}

/// The RAID5 layout a RAID6 layout keeps when Q is dropped (the `*-6` layouts), or the
/// RAID5 equivalent of a RAID6 layout for a default.
fn raid5_of(l: u32) -> u32 {
    match l {
        16..=20 => l - 16,
        0..=5 => l,
        _ => 2,
    }
}

/// The shape asked for: level, layout, chunk, members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Want {
    level: Level,
    layout: u32,
    chunk: u64,
    n: usize,
}

fn geo(w: Want, dev_sectors: u64) -> Result<Geometry> {
    Ok(Geometry::new(
        w.level,
        w.layout,
        w.chunk,
        w.n,
        dev_sectors,
        Vec::new(),
    )?)
}

/// md's defaults for what the request leaves unset.
fn want(cur: &Geometry, req: &ReshapeRequest) -> Want {
    use Level::*;
    let level = req.level.unwrap_or(cur.level);
    let n = cur.raid_disks;
    let (dn, dl) = match (cur.level, level) {
        (Raid5, Raid6) => (n + 1, cur.layout),
        (Raid6, Raid5) => (n - 1, raid5_of(cur.layout)),
        (Raid0, Raid4 | Raid5) => (n + 1, 5),
        (Raid4 | Raid5, Raid0) => (n - 1, 0),
        (Raid0, Raid10) => (2 * n, 0x102),
        (Raid10, Raid0) => (n / 2, 0),
        (Raid1, Raid5) | (Raid5, Raid1) => (2, if level == Raid5 { 2 } else { 0 }),
        (Raid4, Raid5) => (n, 5),
        (Raid5, Raid4) => (n, 0),
        _ => (n, cur.layout),
    };
    let chunk = req.chunk_sectors.unwrap_or(if cur.chunk_sectors > 0 {
        cur.chunk_sectors
    } else {
        128
    });
    Want {
        level,
        layout: req.layout.unwrap_or(dl),
        chunk,
        n: req.raid_disks.unwrap_or(dn),
    }
}

fn restripe_to(cur: &Geometry, w: Want) -> Result<Option<Stage>> {
    let same = cur.level == w.level
        && (cur.layout == w.layout || cur.level == Level::Raid4)
        && cur.chunk_sectors == w.chunk
        && cur.raid_disks == w.n;
    if same {
        return Ok(None);
    }
    Ok(Some(Stage::Restripe {
        to: geo(w, cur.dev_sectors)?,
    }))
}

fn takeover_to(cur: &Geometry, w: Want) -> Result<Stage> {
    // Per-member data: RAID0 keeps it per member (single zone: all the same).
    let dev = if cur.level == Level::Raid0 {
        cur.used_dev_sectors(0)
    } else {
        cur.used_dev_sectors(0)
            .max(cur.dev_sectors.min(cur.used_dev_sectors(0).max(1)))
    };
    let to = Geometry::new(
        w.level,
        w.layout,
        w.chunk,
        w.n,
        dev,
        if w.level == Level::Raid0 {
            vec![dev; w.n]
        } else {
            Vec::new()
        },
    )?;
    let t = takeover(cur, &to)?;
    Ok(Stage::Takeover {
        to,
        sources: t.sources,
    })
}

/// The stages from `cur` to what `req` asks for.
pub fn stages(cur: &Geometry, req: &ReshapeRequest) -> Result<Vec<Stage>> {
    use Level::*;
    let w = want(cur, req);
    let n = cur.raid_disks;
    let c = cur.chunk_sectors;
    let mut out = Vec::new();
    let mut at = cur.clone();
    let mut push = |s: Stage, at: &mut Geometry| {
        *at = s.to().clone();
        out.push(s);
    };
    match (cur.level, w.level) {
        (Raid4 | Raid5 | Raid6, l) if l == cur.level => {
            if let Some(s) = restripe_to(&at, w)? {
                push(s, &mut at);
            }
        }
        (Raid10, Raid10) => {
            if let Some(s) = restripe_to(&at, w)? {
                push(s, &mut at);
            }
        }
        (Raid1, Raid1) => {
            if w.n != n {
                push(takeover_to(&at, w)?, &mut at);
            }
        }
        (Raid5, Raid6) => {
            let l6 = raid6_of(cur.layout).ok_or_else(|| invalid("this RAID5 layout has no RAID6 counterpart"))?;
            let mid = Want { level: Raid6, layout: l6, chunk: c, n: n + 1 };
            push(takeover_to(&at, mid)?, &mut at);
            let last = w;
            if let Some(s) = restripe_to(&at, last)? {
                push(s, &mut at);
            }
        }
        (Raid6, Raid5) => {
            let base = raid5_of(if req.layout.is_some() { w.layout } else { cur.layout });
            let l6 = raid6_of(base).ok_or_else(|| invalid("no RAID6 layout keeps this RAID5 layout"))?;
            let mid = Want { level: Raid6, layout: l6, chunk: c, n };
            if let Some(s) = restripe_to(&at, mid)? {
                push(s, &mut at);
            }
            push(takeover_to(&at, Want { level: Raid5, layout: base, chunk: c, n: n - 1 })?, &mut at);
            if let Some(s) = restripe_to(&at, Want { layout: base, ..w })? {
                push(s, &mut at);
            }
        }
        (Raid0, Raid4 | Raid5) => {
            let mid = Want { level: w.level, layout: if w.level == Raid4 { 0 } else { 5 }, chunk: c, n: n + 1 };
            push(takeover_to(&at, mid)?, &mut at);
            if let Some(s) = restripe_to(&at, w)? {
                push(s, &mut at);
            }
        }
        (Raid4 | Raid5, Raid0) => {
            let mid = Want { level: cur.level, layout: if cur.level == Raid4 { cur.layout } else { 5 }, chunk: w.chunk, n: w.n + 1 };
            if let Some(s) = restripe_to(&at, mid)? {
                push(s, &mut at);
            }
            push(takeover_to(&at, Want { level: Raid0, layout: 0, chunk: w.chunk, n: w.n })?, &mut at);
        }
        (Raid0, Raid0) => {
            // md grows RAID0 through RAID4: take over, restripe, take back.
            let r4 = Want { level: Raid4, layout: 0, chunk: c, n: n + 1 };
            push(takeover_to(&at, r4)?, &mut at);
            if let Some(s) = restripe_to(&at, Want { level: Raid4, layout: 0, chunk: w.chunk, n: w.n + 1 })? {
                push(s, &mut at);
            }
            push(takeover_to(&at, Want { level: Raid0, layout: 0, chunk: w.chunk, n: w.n })?, &mut at);
        }
        (Raid0, Raid10) | (Raid10, Raid0) | (Raid4, Raid5) | (Raid5, Raid4) => {
            if (cur.level, w.level) == (Raid5, Raid4) && cur.layout != 5 {
                push(restripe_to(&at, Want { level: Raid5, layout: 5, chunk: c, n })?.ok_or_else(|| invalid("nothing to change"))?, &mut at);
            }
            let direct = Want { layout: if w.level == Raid5 { 5 } else { w.layout }, chunk: c, ..w };
            push(takeover_to(&at, direct)?, &mut at);
            if let Some(s) = restripe_to(&at, w)? {
                push(s, &mut at);
            }
        }
        (Raid1, Raid5) => {
            push(takeover_to(&at, Want { level: Raid5, layout: 2, chunk: w.chunk, n: 2 })?, &mut at);
            if let Some(s) = restripe_to(&at, w)? {
                push(s, &mut at);
            }
        }
        (Raid5, Raid1) => {
            if n != 2 || cur.layout != 2 {
                push(restripe_to(&at, Want { level: Raid5, layout: 2, chunk: c, n: 2 })?.ok_or_else(|| invalid("nothing to change"))?, &mut at);
            }
            push(takeover_to(&at, Want { level: Raid1, layout: 0, chunk: 0, n: 2 })?, &mut at);
        }
        (a, b) => {
            return Err(invalid(format!(
                "md cannot change {a} into {b}; it reshapes RAID4/5/6 and RAID10 near layouts, changes RAID1's member count, and changes level RAID1(2)→5, 5→6, 6→5, 0→4/5, 4/5→0, 0↔10 (near=2), 4↔5"
            )))
        }
    }
    if out.is_empty() {
        return Err(invalid(
            "nothing to change: the array already has that level, layout, chunk and number of members",
        ));
    }
    Ok(out)
}

/// Free sectors before and after a member's data area, as mdadm counts them (1.x only;
/// 0.90 has no data offset to move).
pub(crate) fn room(sb: &Super, dev_sectors: u64) -> Option<(u64, u64)> {
    let Super::V1(s) = sb else { return None };
    let so = s.super_offset;
    let size = s.size;
    let doff = s.data_offset;
    let bblog = (s.bblog_offset != 0 && s.bblog_size != 0)
        .then(|| {
            so.checked_add_signed(i64::from(s.bblog_offset))
                .map(|b| (b, b + u64::from(s.bblog_size)))
        })
        .flatten();
    if doff < so {
        // 1.0: metadata after the data.
        let mut end = so;
        if let Some((b, _)) = bblog {
            end = end.min(b);
        }
        if let Some(b) = sb.bitmap_sector(dev_sectors) {
            end = end.min(b);
        }
        Some((doff, end.saturating_sub(size).saturating_sub(doff)))
    } else {
        // 1.1 / 1.2: the superblock (and 36 KiB for it, as the kernel counts), the bad-block
        // log and the bitmap come before the data.
        let mut earliest = so + 72;
        if let Some((_, e)) = bblog {
            earliest = earliest.max(e);
        }
        Some((
            doff.saturating_sub(earliest),
            dev_sectors.saturating_sub(size).saturating_sub(doff),
        ))
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The data-start change a restripe from `old` to `new` needs at least (mdadm's
/// `min_offset_change`; for the same number of data members the kernel also wants at
/// least both chunks), and the direction the data must move (-1 down, 1 up, 0 either).
pub(crate) fn min_change(old: &Geometry, new: &Geometry) -> (u64, i32) {
    if old.level == Level::Raid10 {
        let c = old.chunk_sectors.max(new.chunk_sectors);
        let w = |g: &Geometry| g.raid_disks as u64 * 256 / u64::from(g.layout & 0xff).max(1);
        let dir = match w(new).cmp(&w(old)) {
            std::cmp::Ordering::Greater => -1,
            std::cmp::Ordering::Less => 1,
            std::cmp::Ordering::Equal => 0,
        };
        return (c, dir);
    }
    let (d0, d1) = (old.data_disks() as u64, new.data_disks() as u64);
    let (a, b) = (old.chunk_sectors * d0, new.chunk_sectors * d1);
    let lcm = a / gcd(a, b).max(1) * b;
    let m = lcm / d0.max(1);
    match d1.cmp(&d0) {
        std::cmp::Ordering::Greater => (m, -1),
        std::cmp::Ordering::Less => (m, 1),
        std::cmp::Ordering::Equal => (m.max(old.chunk_sectors).max(new.chunk_sectors), 0),
    }
}

/// Where a restripe's data goes on these members (`rooms`: each one's free sectors
/// before and after its data; None for 0.90): the offset change mdadm would make if every
/// member has room for it, else a backup file (required then).
pub(crate) fn choose_room(
    old: &Geometry,
    new: &Geometry,
    rooms: &[Option<(u64, u64)>],
    backup_file: Option<&PathBuf>,
    fit_sectors: Option<u64>,
) -> Result<Room> {
    let (need, dir) = min_change(old, new);
    let before = rooms
        .iter()
        .map(|r| r.map_or(0, |r| r.0))
        .min()
        .unwrap_or(0);
    let after = rooms
        .iter()
        .map(|r| r.map_or(0, |r| r.1))
        .min()
        .unwrap_or(0);
    let align = old.chunk_sectors.max(new.chunk_sectors).max(8);
    let pick = |avail: u64| -> u64 {
        // mdadm takes the minimum for a change of member count; for the same count it
        // takes about half the room, in whole chunks (fewer checkpoints).
        if dir != 0 {
            return need;
        }
        (avail / 2 / align * align).max(need)
    };
    let change = match dir {
        -1 if before >= need => Some(-(pick(before) as i64)),
        1 if after >= need => Some(pick(after) as i64),
        0 if before >= need && before >= after => Some(-(pick(before) as i64)),
        0 if after >= need => Some(pick(after) as i64),
        _ => None,
    };
    if let Some(change) = change {
        return Ok(Room::OffsetChange { change, size: None });
    }
    // A shrink whose array size was reduced needs less of each member: reduce the
    // component size and the room after the data grows (mdadm does this for RAID10).
    if let (1, Some(fit)) = (dir, fit_sectors) {
        let spare = old.dev_sectors.saturating_sub(fit);
        if after + spare >= need {
            return Ok(Room::OffsetChange {
                change: need as i64,
                size: Some(fit),
            });
        }
    }
    if old.level == Level::Raid10 {
        return Err(invalid(format!(
            "a RAID10 reshape moves the data start by at least {need} sectors, and the members have {before} free sectors before their data and {after} after: md reshapes RAID10 only that way; make room (larger members) first"
        )));
    }
    match backup_file {
        Some(f) => Ok(Room::Backup {
            file: f.display().to_string(),
        }),
        None => Err(invalid(format!(
            "the data cannot move to another offset (it needs {need} free sectors {} the data on every member; they have {before} before and {after} after{}): give a backup file for the critical section (--backup-file), on a device that is not part of the array",
            match dir { -1 => "before", 1 => "after", _ => "before or after" },
            if rooms.iter().any(Option::is_none) { ", and 0.90 metadata cannot record a new offset" } else { "" }
        ))),
    }
}

/// The restripe plan with these data starts, checked: md can record it and its first
/// step needs no backup when the data start moves.
pub(crate) fn plan_restripe(
    old: &Geometry,
    new: &Geometry,
    old_offsets: Vec<u64>,
    room: &Room,
) -> Result<Reshape> {
    let change = match room {
        Room::OffsetChange { change, .. } => *change,
        Room::Backup { .. } => 0,
    };
    let new_offsets: Vec<u64> = (0..new.raid_disks)
        .map(|r| {
            let o = old_offsets
                .get(r)
                .or(old_offsets.first())
                .copied()
                .unwrap_or(0);
            o.saturating_add_signed(change)
        })
        .collect();
    let dir = direction(old, new, change);
    let plan = Reshape::new(old.clone(), new.clone(), old_offsets, new_offsets, dir)?;
    let s = plan.start_position();
    match plan.next_step(s, s, None) {
        Ok(Step::Backup { .. }) if change != 0 => Err(invalid(
            "the data-offset change leaves the first step without room; give a backup file",
        )),
        Ok(_) => Ok(plan),
        Err(e) => Err(invalid(format!("the reshape cannot be done in place: {e}"))),
    }
}

/// md's direction: forwards when data members are added, backwards when removed; with
/// the same number, forwards when the data start moves down (or stays), else backwards.
pub(crate) fn direction(old: &Geometry, new: &Geometry, change: i64) -> Direction {
    let (_, dir) = min_change(old, new);
    match dir {
        -1 => Direction::Forwards,
        1 => Direction::Backwards,
        _ if change > 0 => Direction::Backwards,
        _ => Direction::Forwards,
    }
}

impl Array {
    /// The plan of a reshape (what `--dry-run` prints): stages, sizes, where the data
    /// goes, the mover's buffer, the time it would take at the members' measured speed,
    /// and what is wrong with the array first.
    pub fn plan_reshape(&self, req: &ReshapeRequest) -> Result<ReshapePlan> {
        if let Some(s) = self.successor() {
            return s.plan_reshape(req);
        }
        if self.route().is_some() {
            return Err(invalid(
                "a reshape is already in progress on this array; continue it (or revert it) first",
            ));
        }
        super::drive::never_reshaped(self)?;
        let cur = self.geo.clone();
        let st = stages(&cur, req)?;
        // A shrink is confirmed with the array size before anything else is worked out.
        self.check_shrink(&cur, &st, req)?;
        let last = st.last().map(|s| s.to().clone()).unwrap_or(cur.clone());
        let mut moved = 0u64;
        let mut room = None;
        let mut buffer = 0u64;
        let mut at = cur.clone();
        for s in &st {
            if let Stage::Restripe { to } = s {
                let r = self.restripe_room(&at, to, req)?;
                let (mut from, mut to) = (at.clone(), to.clone());
                if let Room::OffsetChange { size: Some(z), .. } = r {
                    from = super::drive::resized(&from, z)?;
                    to = super::drive::resized(&to, z)?;
                }
                let offs = self.old_offsets(&from);
                let plan = plan_restripe(&from, &to, offs, &r)?;
                moved += plan.end_position().abs_diff(plan.start_position()) * SECTOR;
                buffer = buffer.max(buffer_sectors(&plan) * SECTOR);
                if room.is_none() {
                    room = Some(r);
                }
            }
            at = s.to().clone();
        }
        let mut speeds = measure(self);
        if !slow_members(&speeds).is_empty() {
            // Confirm before refusing: a busy machine makes any member look slow once.
            let again = measure_rounds(self, 8);
            for (s, a) in speeds.iter_mut().zip(again) {
                s.1 = s.1.max(a.1);
            }
        }
        let slowest = speeds.iter().map(|s| s.1).filter(|&s| s > 0).min();
        let mut problems = problems(self);
        if let Some(median) = median(&speeds) {
            for (name, s) in slow_members(&speeds) {
                problems.push(format!(
                    "{name} reads at {} MB/s, its peers at {} MB/s: a slow member drags the whole reshape; replace it first",
                    s / 1_000_000,
                    median / 1_000_000
                ));
            }
        }
        let per_member = |g: &Geometry| g.data_disks().max(1) as u64;
        let estimate = slowest.map(|sp| {
            let bytes = moved / per_member(&cur) + moved / per_member(&last);
            bytes / sp.max(1)
        });
        Ok(ReshapePlan {
            from: crate::array::reshape::ShapeInfo::of(&cur),
            to: crate::array::reshape::ShapeInfo::of(&last),
            stages: st
                .iter()
                .map(|s| StageInfo {
                    kind: match s {
                        Stage::Takeover { .. } => "takeover",
                        Stage::Restripe { .. } => "restripe",
                    },
                    to: crate::array::reshape::ShapeInfo::of(s.to()),
                    build_roles: match s {
                        Stage::Takeover { sources, .. } => (0..sources.len())
                            .filter(|&r| sources[r].is_empty())
                            .collect(),
                        Stage::Restripe { .. } => Vec::new(),
                    },
                })
                .collect(),
            array_bytes_before: self.size_bytes(),
            array_bytes_after: last.array_sectors() * SECTOR,
            bytes_to_move: moved,
            room,
            buffer_bytes: buffer,
            member_bytes_per_sec: slowest,
            estimate_seconds: estimate,
            problems,
        })
    }

    /// Each role's data start (the array's members; a missing role gets the first one's).
    pub(crate) fn old_offsets(&self, g: &Geometry) -> Vec<u64> {
        let slots = self.slots();
        let first = slots
            .iter()
            .flatten()
            .map(|m| m.data_offset)
            .next()
            .unwrap_or(0);
        (0..g.raid_disks)
            .map(|r| {
                slots
                    .get(r)
                    .cloned()
                    .flatten()
                    .map_or(first, |m| m.data_offset)
            })
            .collect()
    }

    /// Where a restripe from `from` to `to` puts its data on this array's members (and
    /// the spares it will take for new roles).
    pub(crate) fn restripe_room(
        &self,
        from: &Geometry,
        to: &Geometry,
        req: &ReshapeRequest,
    ) -> Result<Room> {
        let meta = lock(&self.meta.sb);
        let devs = self.devs();
        let live = self.live_devices();
        let rooms: Vec<Option<(u64, u64)>> = live
            .iter()
            .map(|&i| room(&meta.sbs[i], devs[i].size_bytes() / SECTOR))
            .chain(req.add.iter().map(|d| {
                // A device to be added gets the array's data start.
                meta.sbs.get(live[0]).and_then(|sb| {
                    let mut s = sb.clone();
                    if let Super::V1(v) = &mut s {
                        let ds = d.size_bytes() / SECTOR;
                        v.super_offset = v.minor().super_offset(ds);
                        v.bblog_offset = 0;
                        v.bblog_size = 0;
                        return room(&s, ds);
                    }
                    None
                })
            }))
            .collect();
        // What each member must keep when the array size was reduced for a shrink: the
        // confirmed size over the new data members, in whole chunks of both shapes.
        let fit = req.array_sectors.and_then(|a| {
            let dd = to.data_width().max(1) as u64;
            let c = from.chunk_sectors.max(to.chunk_sectors).max(1);
            let f = a.div_ceil(dd).div_ceil(c) * c;
            (f < from.dev_sectors && from.level.has_parity()).then_some(f)
        });
        choose_room(from, to, &rooms, req.backup_file.as_ref(), fit)
    }

    /// A restripe that ends with less room than the data needs must be confirmed with
    /// the array size (mdadm's rule: `--array-size` first).
    pub(crate) fn check_shrink(
        &self,
        cur: &Geometry,
        st: &[Stage],
        req: &ReshapeRequest,
    ) -> Result<()> {
        // A stage that loses data to rounding is refused here: no array size confirms it.
        let mut at = cur;
        for s in st {
            if let Stage::Restripe { to } = s {
                lost_to_rounding(at, to).map_err(|e| invalid(e.to_string()))?;
            }
            at = s.to();
        }
        let min_after = st
            .iter()
            .map(|s| s.to().array_sectors())
            .min()
            .unwrap_or(u64::MAX);
        let now = cur.array_sectors();
        if min_after >= now {
            return Ok(());
        }
        match req.array_sectors {
            Some(a) if a <= min_after => Ok(()),
            Some(a) => Err(invalid(format!(
                "the array size given ({a} sectors) is larger than the reshaped array can hold ({min_after} sectors)"
            ))),
            None => Err(invalid(format!(
                "the reshaped array holds {} bytes, less than the {} it holds now: shrink what is on it (the filesystem) to fit first, then confirm the new size with --array-size ({} bytes or less); the data past it is given up",
                min_after * SECTOR,
                now * SECTOR,
                min_after * SECTOR
            ))),
        }
    }
}
