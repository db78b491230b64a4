//! The old geometry's view of a reshaping array, and raw reads of either geometry's
//! places (for finding how far md really got).

use crate::array::meta::Meta;
use crate::array::{Array, Member};
use crate::dev::BlockDev;
use crate::error::Result;
use raidkit_format::MAX_SECTOR;
use raidkit_layout::reshape::{Reshape, Side, StepEvidence};
use raidkit_layout::{Geometry, SECTOR};
use std::sync::Arc;

impl Array {
    /// A view of `devs` through `geo`: `members` in their roles (with this geometry's
    /// data starts), no spares, no stripe cache, no superblocks, no bitmap. It never
    /// writes metadata (it is not writable as an array: the array it belongs to writes
    /// through [`Array::write_serial`]); a member it fails is only marked failed, and the
    /// array it belongs to records that ([`Array::sync_failures`]).
    pub(crate) fn view(
        geo: Geometry,
        uuid: [u8; 16],
        name: String,
        metadata: crate::sb::Metadata,
        devs: Vec<Arc<dyn BlockDev>>,
        members: Vec<Option<Member>>,
    ) -> Array {
        let meta = Meta {
            sbs: Vec::new(),
            events: 0,
            dirty: false,
            resync_from: MAX_SECTOR,
            disk_active: false,
            roles: Vec::new(),
        };
        let mut a = Array::from_parts(
            geo,
            uuid,
            name,
            metadata,
            devs,
            members,
            Vec::new(),
            false,
            meta,
            None,
            false,
        );
        a.cache = None;
        a
    }
}

/// Read array sectors `[s, s + buf.len()/512)` straight from one geometry's places (copy
/// 0, no reconstruction): the device of each role from `dev_of`. None if a role has no
/// device or a read fails.
pub(crate) fn raw_read(
    plan: &Reshape,
    side: Side,
    s: u64,
    buf: &mut [u8],
    dev_of: &dyn Fn(usize) -> Option<Arc<dyn BlockDev>>,
) -> Option<()> {
    let n = buf.len() as u64 / SECTOR;
    let mut done = 0u64;
    while done < n {
        let l = plan.place(side, s + done)?;
        let run = l.run.min(n - done).max(1);
        let c = l.copies.first()?;
        let dev = dev_of(c.role)?;
        let piece = &mut buf[(done * SECTOR) as usize..((done + run) * SECTOR) as usize];
        dev.read_at(piece, c.sector * SECTOR).ok()?;
        done += run;
    }
    Some(())
}

/// What the members hold for array sectors `[from, to)`: old copies against new copies
/// (for [`Reshape::infer_progress`]). Past the old array's end there is no old copy: the
/// new one must read as zeros there (what a reshape writes). `old_dev_of` and
/// `new_dev_of` give each geometry's devices: a member the reshape is building has no
/// old copy (it held nothing in the old geometry), so a step that reads one differs.
pub(crate) fn evidence(
    plan: &Reshape,
    from: u64,
    to: u64,
    old_dev_of: &dyn Fn(usize) -> Option<Arc<dyn BlockDev>>,
    new_dev_of: &dyn Fn(usize) -> Option<Arc<dyn BlockDev>>,
) -> Result<StepEvidence> {
    let old_end = plan.old().array_sectors();
    let mut blank = true;
    let mut a = Vec::new();
    let mut b = Vec::new();
    let mut s = from;
    while s < to {
        let n = (to - s).min(2048);
        a.resize((n * SECTOR) as usize, 0);
        b.resize((n * SECTOR) as usize, 0);
        let old_n = old_end.saturating_sub(s).min(n);
        a.fill(0);
        let old_ok = old_n == 0
            || raw_read(
                plan,
                Side::Old,
                s,
                &mut a[..(old_n * SECTOR) as usize],
                old_dev_of,
            )
            .is_some();
        if !old_ok || raw_read(plan, Side::New, s, &mut b, new_dev_of).is_none() {
            return Ok(StepEvidence::Differ);
        }
        if a != b {
            return Ok(StepEvidence::Differ);
        }
        blank &= a.iter().all(|&x| x == 0);
        s += n;
    }
    Ok(if blank {
        StepEvidence::Blank
    } else {
        StepEvidence::Copied
    })
}
