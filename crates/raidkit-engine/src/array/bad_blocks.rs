//! Bad blocks at run time, the way md keeps them: sectors of a member that hold no valid
//! data are recorded in that member's on-disk bad-block log (v1.x, §1.10) so the knowledge
//! survives a restart; a write over bad blocks makes them good again.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::Array;
/// Old path of [`crate::jobs::bbl_removal::BblRemoval`].
pub use crate::jobs::bbl_removal::BblRemoval;
use crate::locks::lock;
use crate::meta::sb::Super;
use crate::ranges::intersect;
use raidkit_format::badblocks::{self};
use raidkit_format::placement::{choose_bm_space, v1_bblog_placement, BBLOG_SECTORS};
use raidkit_format::v1::{feature, Minor, SuperblockV1};
use raidkit_layout::StripeLayout;
use raidkit_layout::SECTOR;

/// Where a new 8-sector log fits on this 1.x member, relative to the superblock, or None.
/// 1.1/1.2: mdadm's rule (after the bitmap space, else just below the data); 1.0: the
/// 4 KiB just below the superblock. Never over the superblock, the bitmap or the data.
pub(crate) fn new_log_offset(
    s: &SuperblockV1,
    dev_sectors: u64,
    bitmap_sectors: Option<u64>,
) -> Option<i32> {
    let so = s.super_offset as i64;
    let bitmap = (s.feature_map & feature::BITMAP_OFFSET != 0).then(|| {
        let a = so + i64::from(s.bitmap_offset);
        (a, a + bitmap_sectors.unwrap_or(8) as i64)
    });
    let off: i32 = match s.minor() {
        Minor::V0 => -i32::from(BBLOG_SECTORS),
        _ => {
            let bm_space = match bitmap {
                Some((a, b)) if s.bitmap_offset == 8 => ((b - a) as u64).div_ceil(8) * 8,
                _ => choose_bm_space(dev_sectors),
            };
            v1_bblog_placement(s.super_offset, s.data_offset, bm_space)?.0
        }
    };
    let a = so + i64::from(off);
    let b = a + i64::from(BBLOG_SECTORS);
    let data = (s.data_offset as i64, (s.data_offset + s.data_size) as i64);
    let overlaps = |x: (i64, i64)| a < x.1 && x.0 < b;
    // The superblock's own 4 KiB, the bitmap, the data area, the device end.
    if a < 0
        || b > dev_sectors as i64
        || overlaps((so, so + 8))
        || overlaps(data)
        || bitmap.is_some_and(overlaps)
    {
        return None;
    }
    Some(off)
}

/// Bad ranges of one member, for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemberBadBlocks {
    /// Role slot.
    pub role: usize,
    /// Device.
    pub device: String,
    /// `(first device sector, sectors)`, as the on-disk log and `mdadm
    /// --examine-badblocks` count them.
    pub ranges: Vec<(u64, u64)>,
    /// True if the member's superblock has a bad-block log (the ranges survive a restart).
    pub logged: bool,
}

impl Array {
    /// Bad ranges of every member that has some.
    pub fn bad_blocks(&self) -> Vec<MemberBadBlocks> {
        let meta = lock(&self.meta.sb);
        self.slots()
            .iter()
            .enumerate()
            .filter_map(|(role, m)| {
                let m = m.as_ref()?;
                let ranges: Vec<(u64, u64)> =
                    m.bad_ranges().iter().map(|r| (r.start, r.len)).collect();
                (!ranges.is_empty()).then(|| MemberBadBlocks {
                    role,
                    device: m.dev.name().to_string(),
                    ranges,
                    logged: meta.sbs.get(m.index).and_then(|s| s.bblog()).is_some(),
                })
            })
            .collect()
    }

    /// Record data sectors `[dsec, dsec + n)` of `role` as bad (md's
    /// `rdev_set_badblocks`): never read again, raise [`ArrayEvent::BadBlockRecorded`],
    /// and write them to the member's on-disk log, creating a log if the member has none
    /// and there is room (loudly). What cannot be written to disk is reported by
    /// [`ArrayEvent::BadBlockNotPersisted`] and kept in memory.
    pub(crate) fn record_bad(&self, role: usize, dsec: u64, n: u64) {
        if let Err(reason) = self.record_bad_inner(role, dsec, n, true) {
            if let Some(m) = self.slots().get(role).cloned().flatten() {
                self.emit(ArrayEvent::BadBlockNotPersisted {
                    role,
                    device: m.dev.name().to_string(),
                    reason,
                });
            }
        }
    }

    /// A write to a member failed: if the member has a bad-block log, record the range
    /// there and keep the member (md's behaviour); false means "fail the member instead".
    pub(crate) fn bad_block_instead_of_fail(
        &self,
        role: usize,
        m: &Member,
        dsec: u64,
        n: u64,
    ) -> bool {
        if !self.has_log(m) || !self.writable {
            return false;
        }
        let recorded = self.record_bad_inner(role, dsec, n, false);
        // Ranges that have no valid copy now are listed as lost at once (reads there fail
        // either way; status and detail show them).
        self.add_lost(&self.derive_lost());
        let Err(reason) = recorded else {
            return true;
        };
        // The log cannot take the entry (full, or writing it failed). md fails the member
        // then; we do too when the array keeps running without it. Otherwise the member
        // stays (its bad blocks are known in memory, never read) rather than stopping
        // the array. Either way, loudly.
        let device = m.dev.name().to_string();
        let fail = self.survives_without(role);
        let reason = if fail {
            format!("{reason}; the member is failed instead (md's rule when its bad-block log cannot take an entry); replace it")
        } else {
            format!("{reason}; the member is KEPT because the array cannot run without it: these bad blocks are known only until this process ends (reads there are reconstructed or fail, never wrong); add a spare and replace this member as soon as possible")
        };
        // An event, not a print: the frontend logs it (the supervisor does, loudly).
        let reason = format!(
            "bad blocks at device sectors {}+{n} could not be written to its bad-block log: {reason}",
            m.data_offset + dsec
        );
        self.emit(ArrayEvent::BadBlockNotPersisted {
            role,
            device,
            reason,
        });
        !fail
    }

    /// True if the member's superblock has a bad-block log.
    pub(crate) fn has_log(&self, m: &Member) -> bool {
        lock(&self.meta.sb)
            .sbs
            .get(m.index)
            .and_then(|s| s.bblog())
            .is_some()
    }

    /// Would the array still serve every byte with `role` failed too? Recovering members
    /// count as missing.
    pub(crate) fn survives_without(&self, role: usize) -> bool {
        let missing: Vec<usize> = self
            .slots()
            .iter()
            .enumerate()
            .filter(|(r, m)| {
                *r == role
                    || m.as_ref()
                        .is_none_or(|m| m.is_failed() || m.recovery().is_some())
            })
            .map(|(r, _)| r)
            .collect();
        self.geo.survives_without(&missing)
    }

    /// Sectors per unit of the member's bad-block log (1 without a log).
    pub(crate) fn log_unit(&self, m: &Member) -> u64 {
        match lock(&self.meta.sb).sbs.get(m.index) {
            Some(Super::V1(s)) if s.bblog_size != 0 && s.bblog_offset != 0 => {
                1u64 << s.bblog_shift.min(16)
            }
            _ => 1,
        }
    }

    /// md's "made good": data sectors `[dsec, dsec + n)` of `role` were written
    /// successfully, so bad entries there hold valid data again. The write is flushed
    /// first, then the entries are dropped from memory and from the on-disk log (a crash
    /// in between leaves them listed: reads fail, never return stale data), each raising
    /// [`ArrayEvent::BadBlockCleared`]; lost array ranges shrink accordingly. Only whole
    /// log units inside the write are cleared.
    pub(crate) fn made_good(&self, role: usize, m: &Member, dsec: u64, n: u64) {
        let unit = self.log_unit(m);
        let s = m.data_offset + dsec;
        let (a, b) = (s.div_ceil(unit) * unit, (s + n) / unit * unit);
        if a >= b {
            return;
        }
        let cleared = intersect(&m.bad_ranges(), a, b - a);
        if cleared.is_empty() {
            return;
        }
        let device = m.dev.name().to_string();
        if let Err(e) = m.dev.flush() {
            self.emit(ArrayEvent::BadBlockNotPersisted {
                role,
                device,
                reason: format!(
                    "flushing a write over bad blocks failed ({e}); they stay listed as bad"
                ),
            });
            return;
        }
        m.clear_bad_dev(a, b - a);
        for r in &cleared {
            self.emit(ArrayEvent::BadBlockCleared {
                role,
                device: device.clone(),
                sector: r.start,
                sectors: r.len,
            });
        }
        if self.writable && self.has_log(m) {
            if let Err(reason) = self.persist_bbl(role, m, false) {
                self.emit(ArrayEvent::BadBlockNotPersisted {
                    role,
                    device,
                    reason: format!("{reason}: the on-disk log still lists the rewritten sectors, so after a restart they count as bad again (reads there are reconstructed or fail, never wrong) until they are written again or the bad-block log is removed"),
                });
            }
        }
        if !self.lost_ranges().is_empty() {
            self.shrink_lost(&self.derive_lost());
        }
    }

    /// Does any member of the stripe have bad entries over data sectors `[dsec, dsec + n)`?
    pub(crate) fn stripe_has_bad(&self, lay: &StripeLayout, dsec: u64, n: u64) -> bool {
        let slots = self.slots();
        lay.data
            .iter()
            .chain(std::iter::once(&lay.p))
            .chain(lay.q.iter())
            .filter_map(|&r| slots.get(r).cloned().flatten())
            .any(|m| !intersect(&m.bad_ranges(), m.data_offset + dsec, n).is_empty())
    }

    pub(crate) fn record_bad_inner(
        &self,
        role: usize,
        dsec: u64,
        n: u64,
        create: bool,
    ) -> std::result::Result<(), String> {
        let Some(m) = self.slots().get(role).cloned().flatten() else {
            return Ok(());
        };
        // Whole log units, rounded outwards (more sectors are distrusted, never fewer).
        let unit = self.log_unit(&m);
        let start = (m.data_offset + dsec) / unit * unit;
        let end = (m.data_offset + dsec + n).div_ceil(unit) * unit;
        if !m.add_bad_dev(start, end - start) {
            return Ok(());
        }
        self.emit(ArrayEvent::BadBlockRecorded {
            role,
            device: m.dev.name().to_string(),
            sector: start,
            sectors: end - start,
        });
        if !self.writable {
            return Err("the array is assembled read-only, so the bad-block log cannot be written; the bad blocks are known only until this process ends".into());
        }
        self.persist_bbl(role, &m, create)
    }

    /// Write `m`'s bad ranges into its on-disk log (creating the log if `create` and the
    /// member has none), set or clear BAD_BLOCKS and write the superblocks.
    pub(crate) fn persist_bbl(
        &self,
        role: usize,
        m: &Member,
        create: bool,
    ) -> std::result::Result<(), String> {
        let bitmap_sectors = self
            .bm()
            .as_ref()
            .map(|b| (256u64 + lock(b).chunks().div_ceil(8)).div_ceil(4096) * 8);
        let dev_sectors = m.dev.size_bytes() / SECTOR;
        let mut meta = lock(&self.meta.sb);
        let dev = m.dev.name().to_string();
        let Some(Super::V1(s)) = meta.sbs.get_mut(m.index) else {
            return Err(format!(
                "{dev} has 0.90 metadata, which has no bad-block log: the bad blocks are known only until this process ends (status shows them and the lost ranges); replace the member, or move the array to 1.2 metadata"
            ));
        };
        let mut created = None;
        if s.bblog_size == 0 || s.bblog_offset == 0 {
            if !create {
                return Err(format!("{dev} has no bad-block log"));
            }
            let Some(off) = new_log_offset(s, dev_sectors, bitmap_sectors) else {
                return Err(format!(
                    "{dev} has no bad-block log and no free 4 KiB between its superblock, bitmap and data to create one: the bad blocks are known only until this process ends (status shows them and the lost ranges); replace the member"
                ));
            };
            created = Some(off);
        }
        let (off, size, shift) = match created {
            Some(off) => (off, BBLOG_SECTORS, 0),
            None => (s.bblog_offset, s.bblog_size, s.bblog_shift),
        };
        let ranges = m.bad_ranges();
        let area = badblocks::encode(&ranges, shift, usize::from(size) * SECTOR as usize)
            .map_err(|e| {
                format!(
                    "{dev}'s bad-block log cannot hold them ({e}): the newest bad blocks are known only until this process ends; replace the member"
                )
            })?;
        let at = (s.super_offset as i64 + i64::from(off)) as u64;
        m.dev
            .write_at(&area, at * SECTOR)
            .and_then(|()| m.dev.flush())
            .map_err(|e| format!("writing {dev}'s bad-block log failed: {e}"))?;
        s.bblog_offset = off;
        s.bblog_size = size;
        s.bblog_shift = shift;
        if ranges.is_empty() {
            s.feature_map &= !feature::BAD_BLOCKS;
        } else {
            s.feature_map |= feature::BAD_BLOCKS;
        }
        self.write_superblocks(&mut meta, |_| {})
            .map_err(|e| format!("writing superblocks after recording bad blocks: {e}"))?;
        drop(meta);
        if let Some(off) = created {
            self.emit(ArrayEvent::BadBlockLogCreated {
                role,
                device: dev,
                offset: off,
                reason: "the member had no bad-block log and got bad blocks; the array now has a bad-block log on this member (mdadm --examine shows it; it can be removed once the entries are repaired)".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_log_goes_where_mdadm_puts_it() {
        let mut s = SuperblockV1::new_default([0; 16], "t", 0, 3);
        s.super_offset = 8;
        s.data_offset = 2048;
        s.data_size = 30720;
        // 1.2, no bitmap, small device: mdadm's offset 16.
        assert_eq!(new_log_offset(&s, 32768, None), Some(16));
        // With a 1-page bitmap at +8: right after it.
        s.feature_map = feature::BITMAP_OFFSET;
        s.bitmap_offset = 8;
        assert_eq!(new_log_offset(&s, 32768, Some(8)), Some(16));
        // Data right after the superblock: no room.
        s.feature_map = 0;
        s.data_offset = 16;
        assert_eq!(new_log_offset(&s, 32768, None), None);
        // 1.0: just below the superblock, if the data ends before it.
        let mut s = SuperblockV1::new_default([0; 16], "t", 0, 3);
        s.super_offset = (32768 - 16) & !7;
        s.data_offset = 0;
        s.data_size = s.super_offset - 16;
        assert_eq!(new_log_offset(&s, 32768, None), Some(-8));
        s.data_size = s.super_offset - 4;
        assert_eq!(new_log_offset(&s, 32768, None), None);
    }
}
