//! A reshape in progress at run time: md's two geometries in one array.
//!
//! While md restripes, every array sector has one valid home, in the old geometry or in the
//! new one, depending on which side of the reshape position it lies
//! ([`raidkit_layout::reshape`]). Here the array's own geometry and data starts are the
//! NEW ones, so everything the reshape has moved is read and written by the array's usual
//! paths (stripe cache included); the OLD geometry is a view — a second [`Array`] over the
//! same devices with the old data starts, no stripe cache and no superblocks of its own
//! (it never writes metadata; a member it fails is failed in the array).
//!
//! Client IO is routed by position exactly as md routes it: reads and writes enter the
//! [`window`] (which makes them wait where md makes them wait: the range being moved, data
//! copied but not yet recorded, an old stripe the position cuts), are cut at the position,
//! and each piece goes to the side that holds it. The mover (`jobs/reshape`) moves data
//! through the same two sides.
//!
//! Switching an array to another geometry while it is served (starting a reshape, a
//! takeover, a revert) builds a successor [`Array`] over the same devices; the old one
//! forwards every client call to it from then on ([`Array::successor`]). The switch
//! holds the `quiesce` lock exclusively, so no client IO is in flight on the old array
//! when it happens.

pub(crate) mod view;
pub(crate) mod window;

use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::locks::{lock, read, write};
use raidkit_format::reshape::ReshapeInfo;
use raidkit_layout::reshape::{Reshape, Side};
use raidkit_layout::SECTOR;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard};
use window::{side_run, Window};

/// The reshape state of a running array.
#[derive(Default)]
pub(crate) struct ReshapeSlot {
    /// Fast check: is a route installed?
    routing: AtomicBool,
    /// The route while the array is mid-reshape.
    route: RwLock<Option<Arc<Route>>>,
    /// Client calls hold it shared for their whole duration; switching to a successor
    /// holds it exclusively.
    quiesce: RwLock<()>,
    /// The array that took over from this one (set once).
    successor: OnceLock<Arc<Array>>,
}

/// Data that mdadm's backup file holds for a range the members may no longer have (a
/// read-only array stopped inside a critical section): reads of the range are served
/// from it.
pub(crate) struct Overlay {
    /// First array sector.
    pub(crate) start: u64,
    /// The data, whole sectors.
    pub(crate) data: Vec<u8>,
}

/// How the array is routed while it reshapes.
pub(crate) struct Route {
    /// Both geometries, their data starts, the direction.
    pub(crate) plan: Reshape,
    /// The old geometry's view of the members.
    pub(crate) old: Array,
    /// Positions and IO in flight.
    pub(crate) window: Window,
    /// The reshape fields every member records (position aside; `new_offset` is per
    /// member).
    pub(crate) info: ReshapeInfo,
    /// Backup file of a reshape that moves data in place (mdadm's format).
    pub(crate) backup_file: Mutex<Option<PathBuf>>,
    /// Read-only: backed-up data served instead of the members.
    pub(crate) overlay: Vec<Overlay>,
    /// Things the admin should know (a stale recorded position, a restored backup).
    pub(crate) notes: Mutex<Vec<String>>,
    /// Where a reverted reshape was turned around: it moves the data back from there, not
    /// from the far end of the array (set once by the revert; a reshape found on the
    /// members counts from its plan's start, as md does).
    pub(crate) origin: OnceLock<u64>,
}

impl Route {
    /// Where this reshape's work starts and ends (array sectors): progress and ETA count
    /// between them, in its direction of travel.
    pub(crate) fn span(&self) -> (u64, u64) {
        let start = self
            .origin
            .get()
            .copied()
            .unwrap_or_else(|| self.plan.start_position());
        (start, self.plan.end_position())
    }
}

/// Where a reshape stands, for status, detail and examine.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReshapeStatus {
    /// Level, layout, chunk (sectors) and members before.
    pub old: ShapeInfo,
    /// After.
    pub new: ShapeInfo,
    /// `forwards` or `backwards`.
    pub direction: &'static str,
    /// The position the members record (array sectors).
    pub recorded_sectors: u64,
    /// How far the data has been moved (array sectors).
    pub progress_sectors: u64,
    /// Where the reshape started and where it ends (array sectors).
    pub start_sectors: u64,
    /// Where it ends.
    pub end_sectors: u64,
    /// Sectors done out of the total.
    pub done_sectors: u64,
    /// Sectors in all.
    pub total_sectors: u64,
    /// `delta_disks`.
    pub delta_disks: i32,
    /// Data start change per role (new − old, sectors), when the data moves.
    pub offset_change: Option<i64>,
    /// The backup file, when the reshape moves data in place.
    pub backup_file: Option<String>,
    /// Is a mover running?
    pub moving: bool,
    /// Notes (a stale position found and corrected, a restored backup).
    pub notes: Vec<String>,
}

/// One geometry, for reports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShapeInfo {
    /// Level name (`raid5`).
    pub level: String,
    /// Layout name.
    pub layout: String,
    /// Layout value.
    pub layout_value: u32,
    /// Chunk, sectors.
    pub chunk_sectors: u64,
    /// Members.
    pub raid_disks: usize,
    /// Array size, sectors.
    pub array_sectors: u64,
}

impl ShapeInfo {
    pub(crate) fn of(g: &raidkit_layout::Geometry) -> ShapeInfo {
        ShapeInfo {
            level: g.level.to_string(),
            layout: raidkit_layout::names::layout_name(g.level, g.layout),
            layout_value: g.layout,
            chunk_sectors: g.chunk_sectors,
            raid_disks: g.raid_disks,
            array_sectors: g.array_sectors(),
        }
    }
}

/// A client call's hold on the array (see [`Array::enter`]).
pub(crate) struct Entered<'a> {
    _quiesce: RwLockReadGuard<'a, ()>,
}

impl Array {
    /// Begin a client call: from here to the end of the call the array is not switched
    /// to a successor. Returns the successor instead if there is one.
    pub(crate) fn enter(&self) -> std::result::Result<Entered<'_>, &Arc<Array>> {
        let g = read(&self.reshape.quiesce);
        match self.reshape.successor.get() {
            Some(s) => Err(s),
            None => Ok(Entered { _quiesce: g }),
        }
    }

    /// The array that took over from this one (after a switch of geometry while served),
    /// if any.
    pub fn successor(&self) -> Option<&Arc<Array>> {
        self.reshape.successor.get()
    }

    /// The array that serves now: this one, or the last of its successors.
    pub fn current(self: &Arc<Self>) -> Arc<Array> {
        let mut a = self.clone();
        while let Some(s) = a.successor().cloned() {
            a = s;
        }
        a
    }

    /// Hold every client call off (waiting for those in flight), run `build`, and if it
    /// gives a successor, make it serve from now on. Used to switch a served array to
    /// another geometry; `build` writes the superblocks of the new state and assembles it.
    pub(crate) fn switch_to(&self, build: impl FnOnce() -> Result<Array>) -> Result<Arc<Array>> {
        let _q = write(&self.reshape.quiesce);
        if self.reshape.successor.get().is_some() {
            return Err(EngineError::Invalid(
                "the array was already switched to another geometry".into(),
            ));
        }
        let next = Arc::new(build()?);
        // Set once, under the exclusive hold, so nobody raced us.
        let _ = self.reshape.successor.set(next.clone());
        Ok(next)
    }

    /// The route, if the array is mid-reshape.
    pub(crate) fn route(&self) -> Option<Arc<Route>> {
        if !self.reshape.routing.load(Ordering::Acquire) {
            return None;
        }
        read(&self.reshape.route).clone()
    }

    /// Install the route of a reshape in progress.
    pub(crate) fn install_route(&self, r: Arc<Route>) {
        *write(&self.reshape.route) = Some(r);
        self.reshape.routing.store(true, Ordering::Release);
    }

    /// Take the route out (the reshape finished): the array is plain again.
    pub(crate) fn take_route(&self) -> Option<Arc<Route>> {
        let r = write(&self.reshape.route).take();
        self.reshape.routing.store(false, Ordering::Release);
        r
    }

    /// Array sectors addressable while reshaping (the smaller geometry), if reshaping.
    pub(crate) fn routed_sectors(&self) -> Option<u64> {
        self.route().map(|r| r.plan.array_sectors())
    }

    /// Where the reshape stands, if one is in progress.
    pub fn reshape_status(&self) -> Option<ReshapeStatus> {
        if let Some(s) = self.successor() {
            return s.reshape_status();
        }
        let r = self.route()?;
        let (progress, recorded) = r.window.positions();
        let (start, end) = r.span();
        let off = r
            .plan
            .new_offsets()
            .iter()
            .zip(r.plan.old_offsets())
            .map(|(&n, &o)| n as i64 - o as i64)
            .find(|&d| d != 0);
        let status = ReshapeStatus {
            old: ShapeInfo::of(r.plan.old()),
            new: ShapeInfo::of(r.plan.new_geometry()),
            direction: match r.plan.direction() {
                raidkit_layout::reshape::Direction::Forwards => "forwards",
                raidkit_layout::reshape::Direction::Backwards => "backwards",
            },
            recorded_sectors: recorded,
            progress_sectors: progress,
            start_sectors: start,
            end_sectors: end,
            done_sectors: progress.abs_diff(start),
            total_sectors: end.abs_diff(start),
            delta_disks: r.info.delta_disks,
            offset_change: off,
            backup_file: lock(&r.backup_file)
                .as_ref()
                .map(|p| p.display().to_string()),
            moving: r.window.with(|st| st.mover),
            notes: lock(&r.notes).clone(),
        };
        Some(status)
    }

    /// Read whole sectors of a reshaping array: each piece from the side that holds it.
    pub(crate) fn read_routed(&self, r: &Route, s: u64, buf: &mut [u8]) -> Result<()> {
        let e = s + buf.len() as u64 / SECTOR;
        let Some(t) = r.window.enter(&r.plan, s, e, false) else {
            return Err(EngineError::Invalid("a read waited for the reshape".into()));
        };
        let res = self.read_sides(r, s, buf, t.progress);
        r.window.leave(t);
        self.sync_failures(r);
        res
    }

    fn read_sides(&self, r: &Route, s: u64, buf: &mut [u8], progress: u64) -> Result<()> {
        let e = s + buf.len() as u64 / SECTOR;
        let mut at = s;
        while at < e {
            let (side, mut n) = side_run(&r.plan, at, e, progress);
            let piece = &mut buf[((at - s) * SECTOR) as usize..];
            if let Some(o) = r
                .overlay
                .iter()
                .find(|o| o.start <= at && at < o.start + o.data.len() as u64 / SECTOR)
            {
                let o_end = o.start + o.data.len() as u64 / SECTOR;
                n = n.min(o_end - at);
                let from = ((at - o.start) * SECTOR) as usize;
                let len = (n * SECTOR) as usize;
                piece[..len].copy_from_slice(&o.data[from..from + len]);
                at += n;
                continue;
            }
            if let Some(next) = r
                .overlay
                .iter()
                .map(|o| o.start)
                .filter(|&st| st > at)
                .min()
            {
                n = n.min(next - at);
            }
            let piece = &mut piece[..(n * SECTOR) as usize];
            match side {
                Side::New => self.read_sectors_plain(at, piece)?,
                Side::Old => r.old.read_sectors(at, piece)?,
            }
            at += n;
        }
        Ok(())
    }

    /// Write whole sectors of a reshaping array (the client write path: dirty marking,
    /// then each piece through the side that holds it).
    pub(crate) fn write_routed(&self, r: &Route, s: u64, buf: &[u8]) -> Result<()> {
        let e = s + buf.len() as u64 / SECTOR;
        let mut settled = 0;
        let t = loop {
            if let Some(t) = r.window.enter(&r.plan, s, e, true) {
                break t;
            }
            // Nothing moves the window this write waits for: move it on (as md's reshape
            // thread would) to where no write waits, then enter again.
            if settled == 3 {
                return Err(EngineError::Invalid(format!(
                    "array sectors {s}..{e} are in the part of the array the reshape is moving, and the reshape could not be moved past them: continue the reshape to write there"
                )));
            }
            settled += 1;
            crate::jobs::reshape::mover::settle(self, r)?;
        };
        let res = (|| {
            let _gate = self.write_gate();
            self.ensure_dirty()?;
            self.write_sides(r, s, buf, t.progress)
        })();
        r.window.leave(t);
        self.sync_failures(r);
        res
    }

    fn write_sides(&self, r: &Route, s: u64, buf: &[u8], progress: u64) -> Result<()> {
        let e = s + buf.len() as u64 / SECTOR;
        let mut at = s;
        while at < e {
            let (side, n) = side_run(&r.plan, at, e, progress);
            let piece = &buf[((at - s) * SECTOR) as usize..((at - s + n) * SECTOR) as usize];
            match side {
                Side::New => self.write_serial(at, piece)?,
                Side::Old => r.old.write_serial(at, piece)?,
            }
            at += n;
        }
        Ok(())
    }

    /// Fail in the array a member the old view failed, and in the view a member the array
    /// failed (they are the same device).
    pub(crate) fn sync_failures(&self, r: &Route) {
        let view: Vec<(usize, bool)> = r
            .old
            .slots()
            .iter()
            .enumerate()
            .filter_map(|(role, m)| m.as_ref().map(|m| (role, m.is_failed())))
            .collect();
        for (role, view_failed) in view {
            let ours = self.slots().get(role).cloned().flatten();
            let ours_failed = ours.as_ref().is_none_or(|m| m.is_failed());
            if view_failed && !ours_failed {
                let _ = self.fail_member(
                    role,
                    "an IO error on old-layout data while the array is being reshaped",
                );
            } else if ours_failed && !view_failed {
                if let Some(m) = r.old.slots().get(role).cloned().flatten() {
                    Array::set_failed(&m);
                }
            }
        }
    }
}
