//! Passes over an array in the middle of a reshape. Each side of the reshape position
//! is in its own geometry: the part already moved in the new one (the array's), the rest
//! in the old one (the route's view). A check visits each side in its geometry; the rows
//! the position cuts are left out (they belong to neither geometry whole). Nothing is
//! rewritten across geometries: a repair is refused. A resync (after an unclean stop) covers the part
//! already in the new geometry, from where one stopped; the rest is rewritten whole by
//! the reshape as it moves it, and the resync stays owed until the one after the reshape
//! (see the note at the end of this file).

use super::{sync_space, visit, SyncMode, SyncOptions, SyncReport};
use crate::array::reshape::Route;
use crate::array::Array;
use crate::error::{EngineError, Remedy, Result};

/// Run a pass over `arr`, which is mid-reshape along `route`.
pub(super) fn run(
    arr: &Array,
    route: &Route,
    mode: SyncMode,
    opts: &SyncOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SyncReport> {
    let Some(st) = arr.reshape_status() else {
        return Ok(SyncReport::default());
    };
    let refuse = |why: String| {
        Err(EngineError::Request {
            why,
            remedy: Remedy::FinishReshape,
        })
    };
    if st.moving {
        return refuse("a reshape is moving data now; a redundancy pass would read stripes as they change geometry".into());
    }
    if mode == SyncMode::Repair {
        return refuse("the array is in the middle of a reshape: a repair would rewrite parity or copies across two geometries".into());
    }
    if opts.window.is_some() {
        return refuse("the array is in the middle of a reshape: a pass over a window of it is not possible (each geometry has its own sync addresses)".into());
    }
    let moved = (
        st.start_sectors.min(st.progress_sectors) * 512,
        st.start_sectors.max(st.progress_sectors) * 512,
    );
    let limit = arr.routed_sectors().unwrap_or(0) * 512;
    let mut sides = vec![(arr, moved.0, moved.1)];
    if mode == SyncMode::Resync {
        // Only the part in the new geometry: the reshape writes every stripe it moves
        // whole, with parity from the data.
        if !arr.is_writable() {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; a resync needs it writable".into(),
            ));
        }
        arr.ensure_dirty()?;
    } else {
        sides.push((&route.old, 0, moved.0));
        sides.push((&route.old, moved.1, limit));
    }
    let mut rep = SyncReport {
        covered: (0, limit),
        ..Default::default()
    };
    for (side, from, to) in sides {
        let (mut w0, w1) = rows_inside(side, from, to);
        if mode == SyncMode::Resync {
            w0 = w0.max(arr.resync_resume());
        }
        if w0 >= w1 {
            continue;
        }
        let mut part = SyncReport::default();
        if !visit(side, mode, opts, &[(w0, w1)], progress, &mut part)? {
            // A resync resumes where it stopped (safe: see the note at the end of this
            // file); a check over both geometries starts again.
            let at = part.stopped_at.filter(|_| mode == SyncMode::Resync);
            if let Some(at) = at {
                arr.resync_stopped_at(at);
            }
            rep.stopped_at = Some(at.unwrap_or(0));
            rep.covered.1 = 0;
            return Ok(rep);
        }
        rep.sectors_done += part.sectors_done;
        rep.absorb(part);
        if mode == SyncMode::Resync {
            arr.resync_stopped_at(w1);
        }
    }
    // A resync here leaves the owed resync recorded (it resumes at the end of the rows it
    // covered; see the note at the end of this file): the part still in the old geometry
    // may hold stale parity too (writes in flight at the unclean stop), and until the
    // reshape has moved it, a member lost there would be rebuilt from that parity. So the
    // array stays dirty (a degraded start still needs forcing) until the resync after the
    // reshape, over the whole array, clears it, as md keeps resync_offset through a
    // reshape.
    Ok(rep)
}

/// The sync-space sectors of `arr` whose rows lie wholly inside the array byte range
/// `[from, to)`: whole stripe rows for parity levels, whole 4 KiB pages for mirrors.
fn rows_inside(arr: &Array, from: u64, to: u64) -> (u64, u64) {
    let total = sync_space(arr);
    let to = to.min(arr.size_bytes());
    let page = super::PAGE as u64;
    let (row_sectors, row_bytes) = super::row(arr).unwrap_or((page / 512, page));
    if row_bytes == 0 || from >= to {
        return (0, 0);
    }
    (
        (from.div_ceil(row_bytes) * row_sectors).min(total),
        (to / row_bytes * row_sectors).min(total),
    )
}

/// Make the redundancy of the new geometry consistent over a stretch of array sectors
/// `[from, to)` that assembly found moved past the recorded position (the old and new
/// copies of its data agree, or both read as zeros), before the array serves it: a step
/// whose data writes landed but whose parity (or Q) write did not, or a blank stretch
/// whose new parity blocks still hold the old layout's bytes, would otherwise be served as
/// redundant (a degraded read there would rebuild garbage). The stretch's rows are all in
/// the new geometry: for a forwards reshape everything before `to` is, so a row cut by
/// `from` is taken whole; for a backwards one everything from `from` on. Returns the
/// sectors rewritten. `arr` must be writable, with no mover running.
pub(crate) fn resync_moved_stretch(
    arr: &Array,
    from: u64,
    to: u64,
    backwards: bool,
) -> Result<SyncReport> {
    let mut rep = SyncReport::default();
    let Some((_, row_bytes)) = super::row(arr).filter(|&(_, b)| b > 0) else {
        return Ok(rep); // mirrors are copied whole by the mover: nothing to recompute
    };
    let (mut lo, mut hi) = (from * 512, to * 512);
    if backwards {
        hi = hi.div_ceil(row_bytes).saturating_mul(row_bytes);
    } else {
        lo = lo / row_bytes * row_bytes;
    }
    let (w0, w1) = rows_inside(arr, lo, hi);
    if w0 >= w1 {
        return Ok(rep);
    }
    visit(
        arr,
        SyncMode::Resync,
        &SyncOptions::default(),
        &[(w0, w1)],
        &mut |_, _| {},
        &mut rep,
    )?;
    Ok(rep)
}

// Note: why a resync owed may resume mid-reshape from where one stopped (md's
// resync_offset). The offset R is a sector of the new geometry's sync space,
// recorded only at a clean mark (dirty, the superblocks say 0, so a crash after it
// resyncs everything), and means "every row below R is consistent, or will be rewritten
// whole before the reshape ends". That holds for the rows below R in the new geometry:
// resynced before R was recorded, or moved by the reshape since (the mover writes each
// stripe whole with parity from its data), and client writes keep parity right while no
// crash intervenes. Rows not yet moved are in the old geometry and will be moved (and so
// rewritten) before the reshape ends; the resync after it, over the new geometry from R,
// covers the rest. The same offset is the kernel's after its reshape: it resyncs from R.
// Reverting the reshape breaks it: back in the old geometry, rows below R were never
// moved (a backwards reshape turned around), so a revert records the resync from 0.
