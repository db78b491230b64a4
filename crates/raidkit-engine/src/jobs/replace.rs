//! md's hot replace: copy an active member's role onto a spare while the member stays
//! active, so redundancy is never reduced. Writes go to both for the whole range; the copy
//! reads the old member first and redundancy where it cannot be read, checkpointing the
//! replacement's `recovery_offset` (feature REPLACEMENT + RECOVERY_OFFSET, same role in
//! the role table as the original). When done the old member is marked faulty and
//! removed, and the replacement takes the role. A stop part-way resumes from the
//! checkpoint (the kernel continues it too). No bad-block log is copied.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use crate::jobs::rebuild::RebuildOptions;
use crate::jobs::rebuild::RebuildReport;
use crate::locks::lock;
use crate::meta::sb::Super;
use raidkit_format::v1::{self, feature};
use raidkit_layout::Level;
use raidkit_layout::SECTOR;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Array {
    /// Start replacing the active member `device` (md's `--replace`): a spare (`with`,
    /// or any spare) joins the member's role as its replacement. The copy itself is
    /// [`replace`]. Returns the role.
    pub fn start_replace(&self, device: &str, with: Option<&str>) -> Result<usize> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing to replace members"
                    .into(),
            ));
        }
        if matches!(self.geo.level, Level::Linear | Level::Raid0) {
            return Err(EngineError::Invalid(format!(
                "{} has no redundancy to keep while replacing; copy the device instead",
                self.geo.level
            )));
        }
        if self.metadata == crate::sb::Metadata::V090 {
            return Err(EngineError::Invalid(
                "0.90 metadata cannot record a replacement (two devices in one role); use --fail, then --add of the new device".into(),
            ));
        }
        let (role, m) = self
            .slots()
            .iter()
            .enumerate()
            .find_map(|(r, m)| {
                m.as_ref()
                    .filter(|m| m.dev.name() == device && !m.is_failed())
                    .map(|m| (r, m.clone()))
            })
            .ok_or_else(|| {
                EngineError::Invalid(format!(
                    "{device} is not an active member of this array (see `raidkit status`)"
                ))
            })?;
        if m.recovery().is_some() {
            return Err(EngineError::Invalid(format!(
                "{device} is still being rebuilt; let the recovery finish first"
            )));
        }
        if self.replacement(role).is_some() {
            return Err(EngineError::Invalid(format!(
                "role {role} ({device}) is already being replaced"
            )));
        }
        // Quiesce writes while the replacement joins.
        let _gate = self.pause_writes();
        let mut meta = lock(&self.meta);
        let devs = self.devs().clone();
        let idx = {
            let mut spares = lock(&self.spares);
            let pos = match with {
                Some(w) => spares.iter().position(|&i| devs[i].name() == w).ok_or_else(|| {
                    EngineError::Invalid(format!(
                        "{w} is not a spare of this array; add it with --add first (or give --with a spare)"
                    ))
                })?,
                None => spares.len().checked_sub(1).ok_or_else(|| {
                    EngineError::Invalid(
                        "there is no spare to replace it with; add one (--add) or give --with DEVICE"
                            .into(),
                    )
                })?,
            };
            spares.remove(pos)
        };
        let devnum = meta.sbs[idx].dev_number();
        if devnum >= meta.roles.len() {
            meta.roles.resize(devnum + 1, v1::role::SPARE);
        }
        meta.roles[devnum] = role as u16;
        if let Super::V1(s) = &mut meta.sbs[idx] {
            s.feature_map |= feature::REPLACEMENT | feature::RECOVERY_OFFSET;
            s.feature_map &= !feature::RECOVERY_BITMAP;
            s.recovery_offset = 0;
        }
        let data_offset = meta.sbs[idx].data_offset();
        let r = Arc::new(Member::new(
            devs[idx].clone(),
            idx,
            data_offset,
            Some(0),
            Vec::new(),
        ));
        self.set_replacement(role, Some(r));
        self.write_superblocks(&mut meta, |_| {})?;
        Ok(role)
    }
}

pub(crate) fn checkpoint(arr: &Array, r: &Member, at: u64) -> Result<()> {
    r.dev
        .flush()
        .map_err(|e| EngineError::io(r.dev.name(), "flushing the replacement", e))?;
    let mut meta = lock(&arr.meta);
    if let Super::V1(s) = &mut meta.sbs[r.index] {
        s.feature_map |= feature::REPLACEMENT | feature::RECOVERY_OFFSET;
        s.recovery_offset = at;
    }
    arr.write_superblocks(&mut meta, |_| {})
}

/// Copy every replacement in progress to the end (resuming from its checkpoint), then
/// let it take over its role. `progress(done, total)` in data sectors.
pub fn replace(
    arr: &Array,
    opts: &RebuildOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RebuildReport> {
    let mut rep = RebuildReport::default();
    for role in arr.replacement_roles() {
        let Some(r) = arr.replacement(role) else {
            continue;
        };
        if replace_role(arr, role, &r, opts, progress, &mut rep)? {
            rep.roles.push(role);
        }
    }
    Ok(rep)
}

/// The block of `role` in a reconstructed stripe.
pub(crate) fn role_block<'a>(
    sd: &'a crate::array::stripe::StripeData,
    lay: &raidkit_layout::StripeLayout,
    role: usize,
) -> &'a [u8] {
    if role == lay.p {
        &sd.p
    } else if Some(role) == lay.q {
        sd.q.as_deref().unwrap_or(&[])
    } else if let Some(k) = lay.data.iter().position(|&r| r == role) {
        &sd.data[k]
    } else {
        &[]
    }
}

/// Copy one role; true when finished (false: stopped at a checkpoint).
pub(crate) fn replace_role(
    arr: &Array,
    role: usize,
    r: &Arc<Member>,
    opts: &RebuildOptions,
    progress: &mut dyn FnMut(u64, u64),
    rep: &mut RebuildReport,
) -> Result<bool> {
    let g = arr.geometry().clone();
    let parity = matches!(g.level, Level::Raid4 | Level::Raid5 | Level::Raid6);
    let full = if parity {
        g.stripes() * g.chunk_sectors
    } else {
        g.used_dev_sectors(role)
    };
    let old_name = arr
        .slots()
        .get(role)
        .cloned()
        .flatten()
        .map(|m| m.dev.name().to_string())
        .unwrap_or_default();
    let start = r.recovery().unwrap_or(0);
    arr.emit(ArrayEvent::ReplaceStarted {
        role,
        device: old_name.clone(),
        replacement: r.dev.name().to_string(),
        from: start,
    });
    let every = opts.checkpoint_every.unwrap_or(Duration::from_secs(1));
    let mut last_cp = Instant::now();
    let t0 = Instant::now();
    let total = full - start.min(full);
    let mut lost: Vec<(u64, u64)> = Vec::new();
    let mut x = start;
    let write_r = |dsec: u64, buf: &[u8]| -> Result<()> {
        r.dev
            .write_at(buf, (r.data_offset + dsec) * SECTOR)
            .map_err(|e| EngineError::io(r.dev.name(), "writing the replacement", e))
    };
    while x < full {
        if opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            checkpoint(arr, r, x)?;
            arr.add_lost(&lost);
            rep.lost.extend(lost);
            return Ok(false);
        }
        if r.is_failed() {
            return Err(EngineError::WriteFailed {
                offset: 0,
                end: 0,
                why: format!("the replacement {} failed", r.dev.name()),
            });
        }
        let step = if parity {
            let c = g.chunk_sectors;
            let stripe = x / c;
            let base = stripe * c;
            let _sl = arr.lock_stripe(stripe);
            let mut buf = vec![0u8; (c * SECTOR) as usize];
            let direct =
                arr.readable(role, base, c) && arr.read_block(role, base, &mut buf).is_ok();
            if !direct {
                // Page by page: the old member where it reads, redundancy elsewhere.
                let lay = arr.stripe_layout(stripe)?;
                let kc = lay.data.len() as u64;
                let page = 8u64.min(c);
                let mut a = 0;
                while a < c {
                    let n = page.min(c - a);
                    let pb = &mut buf[(a * SECTOR) as usize..((a + n) * SECTOR) as usize];
                    let ok = arr.readable(role, base + a, n)
                        && arr.read_block(role, base + a, pb).is_ok();
                    if !ok {
                        match arr.read_stripe(stripe, &lay, a, n, true) {
                            Ok(sd) => {
                                let b = role_block(&sd, &lay, role);
                                if b.len() == pb.len() {
                                    pb.copy_from_slice(b);
                                }
                            }
                            Err(EngineError::Unreadable { .. }) => {
                                r.add_bad(base + a, n);
                                if let Some(k) = lay.data.iter().position(|&d| d == role) {
                                    let off = ((stripe * kc + k as u64) * c + a) * SECTOR;
                                    lost.push((off, n * SECTOR));
                                }
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    a += n;
                }
            }
            write_r(base, &buf)?;
            c
        } else {
            let n = (full - x).min(2048);
            let _gate = arr.pause_writes();
            let mut buf = vec![0u8; (n * SECTOR) as usize];
            let direct = arr.readable(role, x, n) && arr.read_block(role, x, &mut buf).is_ok();
            if !direct {
                let mut a = 0;
                while a < n {
                    let pn = 8u64.min(n - a);
                    let pb = &mut buf[(a * SECTOR) as usize..((a + pn) * SECTOR) as usize];
                    let dsec = x + a;
                    let ok = arr.readable(role, dsec, pn) && arr.read_block(role, dsec, pb).is_ok();
                    if !ok {
                        // Another copy of the same array sectors.
                        let mut failed = Vec::new();
                        arr.mirror_runs(role, dsec, pn, |at, s, p, run| {
                            let o = ((at - dsec) * SECTOR) as usize;
                            let sub = &mut pb[o..o + (run * SECTOR) as usize];
                            if !arr.read_other_copy(role, p, run, sub, &mut failed) {
                                r.add_bad(at, run);
                                lost.push((s * SECTOR, run * SECTOR));
                            }
                            Ok(true)
                        })?;
                    }
                    a += pn;
                }
            }
            write_r(x, &buf)?;
            n
        };
        x += step;
        r.set_recovery(Some(x.min(full)));
        let done = x.min(full) - start.min(full);
        progress(done, total);
        let limit = opts
            .max_bytes_per_sec
            .as_ref()
            .map_or(0, |l| l.load(Ordering::Relaxed));
        if limit > 0 {
            let should = Duration::from_secs_f64((done * SECTOR) as f64 / limit as f64);
            let el = t0.elapsed();
            if should > el {
                std::thread::sleep(should - el);
            }
        }
        if last_cp.elapsed() >= every {
            checkpoint(arr, r, x.min(full))?;
            last_cp = Instant::now();
        }
    }
    // Take over: quiesce, the replacement gets the role, the old member is marked faulty
    // (not written any more), then removed.
    r.dev
        .flush()
        .map_err(|e| EngineError::io(r.dev.name(), "flushing the replacement", e))?;
    {
        let _gate = arr.pause_writes();
        let mut meta = lock(&arr.meta);
        let old = arr.slots().get(role).cloned().flatten();
        let old_devnum = old.as_ref().map(|m| meta.sbs[m.index].dev_number());
        if let Some(d) = old_devnum {
            if let Some(x) = meta.roles.get_mut(d) {
                *x = v1::role::FAULTY;
            }
        }
        if let Super::V1(s) = &mut meta.sbs[r.index] {
            s.feature_map &=
                !(feature::REPLACEMENT | feature::RECOVERY_OFFSET | feature::RECOVERY_BITMAP);
            s.recovery_offset = 0;
        }
        r.set_recovery(None);
        {
            let mut slots = match arr.slots.write() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            slots[role] = Some(r.clone());
        }
        arr.set_replacement(role, None);
        if let Some(m) = &old {
            Array::set_failed(m);
        }
        arr.write_superblocks(&mut meta, |_| {})?;
        if let Some(d) = old_devnum {
            if let Some(x) = meta.roles.get_mut(d) {
                *x = v1::role::SPARE;
            }
            arr.write_superblocks(&mut meta, |_| {})?;
        }
    }
    arr.add_lost(&lost);
    rep.sectors += total;
    rep.lost.extend(lost.iter().copied());
    arr.emit(ArrayEvent::ReplaceFinished {
        role,
        device: old_name,
        replacement: r.dev.name().to_string(),
        lost,
    });
    Ok(true)
}
