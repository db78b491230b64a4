//! md's `--update no-bbl`, online: rewrite every bad-block entry from redundancy, then
//! remove the bad-block log from every member.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::stripe::compute_parity;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use crate::meta::sb::Super;
use crate::ranges::coalesce_pairs;
use raidkit_format::v1::feature;
use raidkit_layout::SECTOR;
use std::sync::Arc;

/// Outcome of removing the bad-block logs.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BblRemoval {
    /// `(role, first device sector, sectors)` rewritten from redundancy.
    pub repaired: Vec<(usize, u64, u64)>,
    /// Array byte ranges nobody could supply; with force they now read as zeros.
    pub lost: Vec<(u64, u64)>,
}

impl Array {
    /// Rewrite one bad piece of `role` (data sectors `[d, d + n)`, within one chunk) from
    /// redundancy. True if it is good now (or holds no array data).
    pub(crate) fn repair_piece(&self, role: usize, m: &Member, d: u64, n: u64) -> bool {
        let g = &self.geo;
        if g.level.has_parity() {
            let c = g.chunk_sectors;
            let stripe = d / c;
            let Some(lay) = g.stripe(stripe) else {
                return true; // beyond the array's data: nothing to keep
            };
            let _l = self.lock_stripe(stripe);
            let Ok(sd) = self.read_stripe(stripe, &lay, d % c, n, true) else {
                return false;
            };
            let block: &[u8] = if role == lay.p {
                &sd.p
            } else if Some(role) == lay.q {
                sd.q.as_deref().unwrap_or(&[])
            } else if let Some(k) = lay.data.iter().position(|&r| r == role) {
                &sd.data[k]
            } else {
                return true;
            };
            let ok = m.dev.write_at(block, (m.data_offset + d) * SECTOR).is_ok();
            m.holes.wrote();
            return ok;
        }
        let mut failed = Vec::new();
        self.mirror_runs(role, d, n, |x, _, p, run| {
            let mut buf = vec![0u8; (run * SECTOR) as usize];
            let ok = self.read_other_copy(role, p, run, &mut buf, &mut failed)
                && m.dev.write_at(&buf, (m.data_offset + x) * SECTOR).is_ok();
            m.holes.wrote();
            Ok(ok)
        })
        .unwrap_or(false)
    }

    /// Replace the data of lost array byte ranges by zeros, with consistent redundancy.
    pub(crate) fn zero_lost(&self, lost: &[(u64, u64)]) -> Result<()> {
        let g = &self.geo;
        for &(off, len) in lost {
            let mut s = off / SECTOR;
            let end = (off + len).div_ceil(SECTOR);
            while s < end {
                if g.level.has_parity() {
                    let c = g.chunk_sectors;
                    let kc = g.data_disks() as u64;
                    let chunk = s / c;
                    let (stripe, k) = (chunk / kc, (chunk % kc) as usize);
                    let a = s % c;
                    let n = (c - a).min(end - s);
                    let lay = self.stripe_layout(stripe)?;
                    let _l = self.lock_stripe(stripe);
                    let blen = (n * SECTOR) as usize;
                    let mut data = Vec::with_capacity(lay.data.len());
                    for &r in &lay.data {
                        let mut b = vec![0u8; blen];
                        if self.read_block(r, stripe * c + a, &mut b).is_err() {
                            b.fill(0);
                        }
                        data.push(b);
                    }
                    data[k].fill(0);
                    let (p, q) = compute_parity(&lay, &data, blen);
                    for (j, &r) in lay.data.iter().enumerate() {
                        self.write_block(r, stripe * c + a, &data[j])?;
                    }
                    self.write_block(lay.p, stripe * c + a, &p)?;
                    if let Some(qr) = lay.q {
                        self.write_block(qr, stripe * c + a, &q)?;
                    }
                    s += n;
                } else {
                    let Some(p) = g.locate(s) else { break };
                    let n = p.run.min(end - s);
                    let zero = vec![0u8; (n * SECTOR) as usize];
                    for &(r, d) in &p.copies {
                        self.write_block(r, d, &zero)?;
                    }
                    s += n;
                }
            }
        }
        Ok(())
    }

    /// md's `--update no-bbl`, online: rewrite every bad-block entry from redundancy, then
    /// remove the bad-block log from every member (superblock fields zeroed, BAD_BLOCKS
    /// cleared, log area zeroed). If some entries hold data nobody can supply, refuse
    /// (listing the lost array ranges) unless `force`: then those ranges are replaced by
    /// zeros (reported in [`Array::lost_zeroed_ranges`]) and the logs are removed anyway.
    pub fn remove_bbl(&self, force: bool) -> Result<BblRemoval> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing to remove the bad-block log".into(),
            ));
        }
        // No client writes while entries are rewritten and logs removed.
        let _gate = self.pause_writes();
        let slots: Vec<Option<Arc<Member>>> = self.slots().clone();
        let mut rep = BblRemoval {
            repaired: self.repair_bad_entries(&slots),
            ..BblRemoval::default()
        };
        let mut lost = self.derive_lost();
        lost.extend(self.lost_ranges());
        coalesce_pairs(&mut lost);
        rep.lost = lost.clone();
        let left: Vec<(usize, Arc<Member>)> = slots
            .iter()
            .enumerate()
            .filter_map(|(r, m)| m.clone().map(|m| (r, m)))
            .filter(|(_, m)| !m.is_failed() && !m.bad_ranges().is_empty())
            .collect();
        if !left.is_empty() || !lost.is_empty() {
            if !force {
                return Err(self.refuse_removal(&slots, &left, rep.repaired.len(), lost));
            }
            // Counted as zeroed before the writes (which make good, and so shrink, the
            // lost ranges as they go); put back if zeroing fails.
            let taken = self.take_lost();
            if let Err(e) = self.zero_lost(&lost) {
                self.add_lost(&taken);
                return Err(e);
            }
            for (_, m) in &left {
                for b in m.bad_ranges() {
                    m.clear_bad_dev(b.start, b.len);
                }
            }
        }
        self.remove_logs()?;
        self.emit(ArrayEvent::BadBlockLogRemoved {
            repaired: rep.repaired.clone(),
            lost: rep.lost.clone(),
        });
        Ok(rep)
    }

    /// Rewrite every bad entry of the working members from redundancy where it can be
    /// (narrowed down to single sectors where a piece cannot): `(role, first device
    /// sector, sectors)` repaired, coalesced per role.
    fn repair_bad_entries(&self, slots: &[Option<Arc<Member>>]) -> Vec<(usize, u64, u64)> {
        let mut repaired = Vec::new();
        for (role, m) in slots.iter().enumerate() {
            let Some(m) = m.as_ref().filter(|m| !m.is_failed()) else {
                continue;
            };
            for r in m.bad_ranges() {
                let a = r.start.max(m.data_offset) - m.data_offset;
                let b = (r.start + r.len).max(m.data_offset) - m.data_offset;
                if r.start < m.data_offset {
                    // Outside the data area: nothing to rewrite.
                    let n = r.len.min(m.data_offset - r.start);
                    m.clear_bad_dev(r.start, n);
                    repaired.push((role, r.start, n));
                }
                let mut d = a;
                while d < b {
                    let c = if self.geo.level.has_parity() {
                        self.geo.chunk_sectors
                    } else {
                        8
                    };
                    let n = (c - d % c).min(b - d).min(8);
                    let pieces: Vec<(u64, u64)> = if self.repair_piece(role, m, d, n) {
                        vec![(d, n)]
                    } else if n > 1 {
                        // Narrow down to the sectors that can be repaired.
                        (d..d + n)
                            .filter(|&x| self.repair_piece(role, m, x, 1))
                            .map(|x| (x, 1))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    for (x, k) in pieces {
                        m.clear_bad_dev(m.data_offset + x, k);
                        repaired.push((role, m.data_offset + x, k));
                    }
                    d += n;
                }
            }
        }
        let mut pairs: Vec<(u64, u64)> = repaired
            .iter()
            .map(|&(r, s, n)| ((r as u64) << 56 | s, n))
            .collect();
        coalesce_pairs(&mut pairs);
        pairs
            .into_iter()
            .map(|(k, n)| ((k >> 56) as usize, k & ((1 << 56) - 1), n))
            .collect()
    }

    /// Not forced and entries remain: keep what was repaired off the logs (members whose
    /// entries are all repaired keep an empty log), and say what remains.
    fn refuse_removal(
        &self,
        slots: &[Option<Arc<Member>>],
        left: &[(usize, Arc<Member>)],
        repaired: usize,
        lost: Vec<(u64, u64)>,
    ) -> EngineError {
        let mut unsaved = Vec::new();
        for (role, m) in left {
            if let Err(e) = self.persist_bbl(*role, m, false) {
                unsaved.push(format!("role {role}: {e}"));
            }
        }
        for (role, m) in slots.iter().enumerate() {
            let Some(m) = m
                .as_ref()
                .filter(|m| !m.is_failed() && m.bad_ranges().is_empty())
            else {
                continue;
            };
            let logged = lock(&self.meta.sb)
                .sbs
                .get(m.index)
                .is_some_and(|s| s.feature_map() & feature::BAD_BLOCKS != 0);
            if logged {
                if let Err(e) = self.persist_bbl(role, m, false) {
                    unsaved.push(format!("role {role}: {e}"));
                }
            }
        }
        let remaining = left
            .iter()
            .map(|(r, m)| {
                let rs: Vec<String> = m
                    .bad_ranges()
                    .iter()
                    .map(|b| format!("{}+{}", b.start, b.len))
                    .collect();
                format!("role {r} ({}): {}", m.dev.name(), rs.join(" "))
            })
            .collect();
        EngineError::BadBlocksRemain {
            repaired,
            remaining,
            lost,
            unsaved,
        }
    }

    /// Remove the logs: superblocks first (so no superblock points at a zeroed log), then
    /// the log areas.
    fn remove_logs(&self) -> Result<()> {
        let mut meta = lock(&self.meta.sb);
        let live = self.live_devices();
        let mut areas = Vec::new();
        for &i in &live {
            if let Some(Super::V1(s)) = meta.sbs.get_mut(i) {
                if s.bblog_size != 0 && s.bblog_offset != 0 {
                    let at = (s.super_offset as i64 + i64::from(s.bblog_offset)) as u64;
                    areas.push((i, at, u64::from(s.bblog_size)));
                }
                s.bblog_offset = 0;
                s.bblog_size = 0;
                s.bblog_shift = 0;
                s.feature_map &= !feature::BAD_BLOCKS;
            }
        }
        self.write_superblocks(&mut meta, |_| {})?;
        let devs = self.devs();
        for (i, at, n) in areas {
            let d = &devs[i];
            d.write_at(&vec![0u8; (n * SECTOR) as usize], at * SECTOR)
                .and_then(|()| d.flush())
                .map_err(|e| EngineError::io(d.name(), "zeroing the old bad-block log", e))?;
        }
        Ok(())
    }
}
