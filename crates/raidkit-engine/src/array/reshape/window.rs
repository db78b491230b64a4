//! The reshape window: where the data has been moved to (`progress`), what the members
//! record (`recorded`), what is being moved right now (`moving`), a retained backup, and
//! the client IO in flight. Client IO enters the window before it touches a member and
//! leaves it after; the mover waits until no IO in flight overlaps what it is about to
//! move, and IO that md would make wait (the window being moved, data copied but not yet
//! recorded, an old stripe the position cuts) waits here until the mover has gone past
//! or recorded it.

use crate::locks::{lock, wait};
use raidkit_layout::reshape::{Direction, Reshape, Side, WriteAccess};
use std::sync::{Condvar, Mutex};

/// The positions and the IO in flight.
#[derive(Debug)]
pub(crate) struct WindowState {
    /// Everything before it (in the direction of travel) is written in the new geometry.
    pub(crate) progress: u64,
    /// The `reshape_position` the members record.
    pub(crate) recorded: u64,
    /// Array sectors the mover is moving now (read through the old geometry, written
    /// through the new one): IO there waits.
    pub(crate) moving: Option<(u64, u64)>,
    /// Array range whose old data is in a backup area not yet retired: writes wait.
    pub(crate) backup: Option<(u64, u64)>,
    /// Client IO in flight: (id, first sector, end sector).
    inflight: Vec<(u64, u64, u64)>,
    next_id: u64,
    /// Client IO waiting for the mover (it checkpoints sooner when someone waits).
    pub(crate) waiting: usize,
    /// Is a mover running? A write that would wait for one fails instead when none is.
    pub(crate) mover: bool,
}

/// A registered client IO; give it back with [`Window::leave`].
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    /// The progress when the IO entered: the IO's sectors are on the side this gives
    /// (the mover cannot move them while the ticket is held).
    pub(crate) progress: u64,
}

/// The window of one reshape.
#[derive(Debug)]
pub(crate) struct Window {
    st: Mutex<WindowState>,
    cv: Condvar,
}

fn overlaps(r: Option<(u64, u64)>, s: u64, e: u64) -> bool {
    r.is_some_and(|(a, b)| a < e && s < b)
}

impl Window {
    /// A window at `position` (recorded and reached).
    pub(crate) fn new(position: u64) -> Window {
        Window {
            st: Mutex::new(WindowState {
                progress: position,
                recorded: position,
                moving: None,
                backup: None,
                inflight: Vec::new(),
                next_id: 0,
                waiting: 0,
                mover: false,
            }),
            cv: Condvar::new(),
        }
    }

    /// Run `f` on the state (briefly; nothing waits inside).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut WindowState) -> T) -> T {
        let mut st = lock(&self.st);
        let r = f(&mut st);
        drop(st);
        self.cv.notify_all();
        r
    }

    /// The progress and the recorded position.
    pub(crate) fn positions(&self) -> (u64, u64) {
        let st = lock(&self.st);
        (st.progress, st.recorded)
    }

    /// Client IO waiting for the mover.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.st).waiting
    }

    /// Enter the window for IO on array sectors `[s, e)`: a read may go once nothing of
    /// it is being moved; a write also waits where md makes writes wait
    /// ([`Reshape::write_access`]). Registered until [`Window::leave`]. None: the write
    /// would wait for a mover and none is running (the caller moves the window on itself,
    /// [`crate::jobs::reshape::mover::settle`], and enters again).
    pub(crate) fn enter(&self, plan: &Reshape, s: u64, e: u64, write: bool) -> Option<Ticket> {
        let mut st = lock(&self.st);
        loop {
            let ok = !overlaps(st.moving, s, e) && (!write || writable(plan, &st, s, e));
            if ok {
                let id = st.next_id;
                st.next_id += 1;
                st.inflight.push((id, s, e));
                return Some(Ticket {
                    id,
                    progress: st.progress,
                });
            }
            if !st.mover {
                return None;
            }
            st.waiting += 1;
            st = wait(&self.cv, st);
            st.waiting -= 1;
        }
    }

    /// A mover starts: waits while another one moves (a client write settling the window
    /// finishes within a few steps), then claims the window.
    pub(crate) fn claim_mover(&self) {
        let mut st = lock(&self.st);
        while st.mover {
            st = wait(&self.cv, st);
        }
        st.mover = true;
    }

    /// Claim the window for a mover if none runs now (false: one does; wait for it).
    pub(crate) fn try_claim_mover(&self) -> bool {
        let mut st = lock(&self.st);
        !std::mem::replace(&mut st.mover, true)
    }

    /// The mover stops.
    pub(crate) fn release_mover(&self) {
        self.with(|st| st.mover = false);
    }

    /// Leave the window.
    pub(crate) fn leave(&self, t: Ticket) {
        let mut st = lock(&self.st);
        st.inflight.retain(|&(id, _, _)| id != t.id);
        drop(st);
        self.cv.notify_all();
    }

    /// The mover is about to move `[a, b)`: hold new IO there and wait until no IO in
    /// flight overlaps it.
    pub(crate) fn begin_move(&self, a: u64, b: u64) {
        let mut st = lock(&self.st);
        debug_assert!(st.moving.is_none(), "two moves at once");
        st.moving = Some((a, b));
        while st.inflight.iter().any(|&(_, s, e)| s < b && a < e) {
            st = wait(&self.cv, st);
        }
    }

    /// The move is done (or abandoned, with the progress unchanged): the new progress.
    pub(crate) fn end_move(&self, progress: u64) {
        self.with(|st| {
            st.moving = None;
            st.progress = progress;
        });
    }

    /// The members now record `position`.
    pub(crate) fn set_recorded(&self, position: u64) {
        self.with(|st| st.recorded = position);
    }
}

/// May every sector of `[s, e)` be written now? `write_access` is constant between the
/// positions, the backup's ends and the old-stripe boundaries around the progress, so it
/// is asked at `s` and at each of those inside the range.
fn writable(plan: &Reshape, st: &WindowState, s: u64, e: u64) -> bool {
    let (p, r) = (st.progress, st.recorded);
    let mut points = vec![s, r, p];
    if let Some((a, b)) = st.backup {
        points.extend([a, b]);
    }
    let old = plan.old();
    if old.level.has_parity() {
        let w = (old.chunk_sectors * old.data_disks() as u64).max(1);
        points.extend([p / w * w, p.div_ceil(w).saturating_mul(w)]);
    }
    points
        .into_iter()
        .filter(|&x| s <= x && x < e)
        .all(|x| plan.write_access(x, p, r, st.backup) != WriteAccess::Wait)
}

/// The side array sector `s` is on at `progress`, and how many sectors from `s` (up to
/// `e`) stay on that side.
pub(crate) fn side_run(plan: &Reshape, s: u64, e: u64, progress: u64) -> (Side, u64) {
    let side = plan.side_of(s, progress);
    let end = match (plan.direction(), side) {
        (Direction::Forwards, Side::New) | (Direction::Backwards, Side::Old) => progress.min(e),
        _ => e,
    };
    (side, end.max(s + 1).min(e) - s)
}
