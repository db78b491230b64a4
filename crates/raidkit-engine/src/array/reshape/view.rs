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
            behind: Default::default(),
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
/// new one must read as zeros there (what a reshape writes). `dev_of(side, role)` gives
/// the device holding `side`'s copies in `role`: none for the old side of a member the
/// reshape builds ([`Reshape::holds_copies`]), so a step that reads one differs.
pub(crate) fn evidence(
    plan: &Reshape,
    from: u64,
    to: u64,
    dev_of: &dyn Fn(Side, usize) -> Option<Arc<dyn BlockDev>>,
) -> Result<StepEvidence> {
    let old_dev_of = |r: usize| dev_of(Side::Old, r);
    let new_dev_of = |r: usize| dev_of(Side::New, r);
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
                &old_dev_of,
            )
            .is_some();
        if !old_ok || raw_read(plan, Side::New, s, &mut b, &new_dev_of).is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDev;
    use raidkit_layout::reshape::Direction;
    use raidkit_layout::Level;

    const CHUNK: u64 = 128;

    /// A degraded RAID5 of 3 (role 1 missing) grown to 4: a blank spare took role 1 (the
    /// reshape builds it), a blank one role 3. Nothing is moved yet: the new places read
    /// zeros. Old stripe 0 keeps its data block of role 1 only as parity (on its P
    /// member), so the old copy is not blank.
    fn degraded_grow() -> (Reshape, Vec<Arc<dyn BlockDev>>) {
        let g = |n| Geometry::new(Level::Raid5, 2, CHUNK, n, 1 << 14, Vec::new()).unwrap();
        let (old, new) = (g(3), g(4));
        let st = old.stripe(0).unwrap();
        assert!(st.data.contains(&1) && st.p != 1, "{st:?}");
        let plan =
            Reshape::new(old, new, vec![4096; 3], vec![2048; 4], Direction::Forwards).unwrap();
        let devs: Vec<Arc<dyn BlockDev>> = (0..4)
            .map(|r| Arc::new(MemDev::new(&format!("m{r}"), 24 << 20)) as Arc<dyn BlockDev>)
            .collect();
        let parity = vec![0x5au8; (CHUNK * SECTOR) as usize];
        devs[st.p].write_at(&parity, 4096 * SECTOR).unwrap();
        (plan, devs)
    }

    /// Assembly asks whether the first step past the record was moved. Read from the
    /// blank member the reshape builds, the old copy would read as zeros like the
    /// unwritten new places, and the step would be taken for moved (blank), though its
    /// old data (role 1's block, kept as parity) is not zeros: the member holds no old
    /// copy, so the step differs.
    #[test]
    fn a_member_the_reshape_builds_gives_no_old_copy() {
        let (plan, devs) = degraded_grow();
        let step = plan.step_sectors();
        let dev_of = |rebuilding: usize| {
            let (plan, devs) = (&plan, &devs);
            move |side: Side, r: usize| -> Option<Arc<dyn BlockDev>> {
                plan.holds_copies(side, r, r == rebuilding)
                    .then(|| devs[r].clone())
            }
        };
        let ev = evidence(&plan, 0, step, &dev_of(1)).unwrap();
        assert_eq!(ev, StepEvidence::Differ);
        // Role 1 not recorded as rebuilding (not built): its old places are its old
        // copy, and they read as zeros, like the new places.
        let ev = evidence(&plan, 0, step, &dev_of(usize::MAX)).unwrap();
        assert_eq!(ev, StepEvidence::Blank);
    }
}
