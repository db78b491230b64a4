//! Redundancy passes over an array: resync (make parity/mirrors consistent, as after
//! creation or an unclean stop), check (count and locate mismatches) and repair.

use crate::array::{compute_parity, lock, Array};
use crate::error::{EngineError, Result};
use raidkit_layout::Level;

/// What a pass does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Make redundancy consistent, writing only where it differs.
    Resync,
    /// Report mismatches, write nothing.
    Check,
    /// Report mismatches and fix them.
    Repair,
}

/// Outcome of a pass.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SyncReport {
    /// Sectors of the sync address space processed.
    pub sectors_done: u64,
    /// Sectors skipped because every member had a hole there (all zeros, consistent).
    pub sectors_skipped_holes: u64,
    /// Mismatched ranges as (array byte offset, length). For parity levels a mismatch in a
    /// stripe row is reported as the array range of that row's data.
    pub mismatches: Vec<(u64, u64)>,
    /// Sectors rewritten.
    pub sectors_written: u64,
}

impl SyncReport {
    fn add_mismatch(&mut self, off: u64, len: u64) {
        if let Some(last) = self.mismatches.last_mut() {
            if last.0 + last.1 == off {
                last.1 += len;
                return;
            }
        }
        self.mismatches.push((off, len));
    }
}

/// Sectors of the resync address space (device sectors for RAID1/4/5/6, array sectors
/// for RAID10, 0 for levels without redundancy).
pub fn sync_space(arr: &Array) -> u64 {
    let g = arr.geometry();
    match g.level {
        Level::Raid1 => g.array_sectors(),
        Level::Raid4 | Level::Raid5 | Level::Raid6 => g.stripes() * g.chunk_sectors,
        Level::Raid10 => g.array_sectors(),
        Level::Linear | Level::Raid0 => 0,
    }
}

/// Run a pass. With a bitmap and `Resync`, only regions whose bits are set are visited
/// unless `full`. `progress(done, total)` is called as work proceeds.
pub fn run(
    arr: &Array,
    mode: SyncMode,
    full: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SyncReport> {
    let total = sync_space(arr);
    let mut rep = SyncReport::default();
    if total == 0 {
        if mode == SyncMode::Resync {
            arr.set_resync_done();
        }
        return Ok(rep);
    }
    if mode != SyncMode::Check {
        if !arr.is_writable() {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; a resync or repair needs it writable".into(),
            ));
        }
        arr.ensure_dirty()?;
    }
    // Regions to visit, in the sync address space.
    let regions: Vec<(u64, u64)> = match (&arr.bitmap, mode, full) {
        (Some(bm), SyncMode::Resync, false) => {
            let b = lock(bm);
            let cs = b.chunk_sectors;
            b.dirty()
                .into_iter()
                .map(|i| (i * cs, ((i + 1) * cs).min(total)))
                .filter(|(a, e)| a < e)
                .collect()
        }
        _ => vec![(0, total)],
    };
    let todo: u64 = regions.iter().map(|(a, e)| e - a).sum();
    let mut done = 0u64;
    progress(0, todo);
    let g = arr.geometry().clone();
    for (a, e) in regions {
        match g.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let c = g.chunk_sectors;
                let mut stripe = a / c;
                while stripe * c < e {
                    let n = parity_stripe(arr, stripe, mode, &mut rep)?;
                    done += n;
                    stripe += 1;
                    progress(done, todo);
                }
            }
            Level::Raid1 | Level::Raid10 => {
                let step = 1024u64;
                let mut s = a;
                while s < e {
                    let n = mirror_region(arr, s, (e - s).min(step), mode, &mut rep)?;
                    s += n;
                    done += n;
                    progress(done, todo);
                }
            }
            _ => {}
        }
    }
    rep.sectors_done = done;
    if mode != SyncMode::Check {
        arr.set_resync_done();
    }
    Ok(rep)
}

fn parity_stripe(arr: &Array, stripe: u64, mode: SyncMode, rep: &mut SyncReport) -> Result<u64> {
    let g = arr.geometry();
    let c = g.chunk_sectors;
    let lay = arr.stripe_layout(stripe)?;
    let dsec = stripe * c;
    let mut roles = lay.data.clone();
    roles.push(lay.p);
    roles.extend(lay.q);
    if roles
        .iter()
        .all(|&r| !arr.present(r) || arr.member_hole(r, dsec, c))
    {
        rep.sectors_skipped_holes += c;
        return Ok(c);
    }
    let _g = arr.lock_stripe(stripe);
    let len = (c * 512) as usize;
    let sd = arr.read_stripe(stripe, &lay, 0, c, true)?;
    let (p, q) = compute_parity(&lay, &sd.data, len);
    let mut bad_p = sd.p != p;
    let mut bad_q = lay.q.is_some() && sd.q.as_deref() != Some(q.as_slice());
    // Missing parity members cannot mismatch.
    if !arr.present(lay.p) {
        bad_p = false;
    }
    if let Some(qr) = lay.q {
        if !arr.present(qr) {
            bad_q = false;
        }
    }
    if bad_p || bad_q {
        if mode != SyncMode::Resync {
            let k = lay.data.len() as u64;
            rep.add_mismatch(stripe * c * k * 512, c * k * 512);
        }
        if mode != SyncMode::Check {
            if bad_p {
                arr.write_block(lay.p, dsec, &p)?;
                rep.sectors_written += c;
            }
            if bad_q {
                if let Some(qr) = lay.q {
                    arr.write_block(qr, dsec, &q)?;
                    rep.sectors_written += c;
                }
            }
        }
    }
    Ok(c)
}

fn mirror_region(
    arr: &Array,
    s: u64,
    max: u64,
    mode: SyncMode,
    rep: &mut SyncReport,
) -> Result<u64> {
    let g = arr.geometry();
    let p = g
        .locate(s)
        .ok_or_else(|| EngineError::Invalid(format!("sector {s} out of range")))?;
    let n = p.run.min(max);
    let live: Vec<(usize, u64)> = p
        .copies
        .iter()
        .copied()
        .filter(|&(r, _)| arr.present(r))
        .collect();
    if live.len() < 2 {
        return Ok(n);
    }
    if live.iter().all(|&(r, d)| arr.member_hole(r, d, n)) {
        rep.sectors_skipped_holes += n;
        return Ok(n);
    }
    let len = (n * 512) as usize;
    let src = live
        .iter()
        .copied()
        .find(|&(r, d)| arr.readable(r, d, n))
        .ok_or_else(|| EngineError::Unreadable {
            offset: s * 512,
            end: (s + n) * 512,
            why: "no copy is readable".into(),
        })?;
    let mut good = vec![0u8; len];
    arr.read_block(src.0, src.1, &mut good)?;
    let mut other = vec![0u8; len];
    let mut mismatch = false;
    for &(r, d) in &live {
        if (r, d) == src {
            continue;
        }
        let same =
            arr.readable(r, d, n) && arr.read_block(r, d, &mut other).is_ok() && other == good;
        if !same {
            mismatch = true;
            if mode != SyncMode::Check {
                arr.write_block(r, d, &good)?;
                rep.sectors_written += n;
            }
        }
    }
    if mismatch && mode != SyncMode::Resync {
        rep.add_mismatch(s * 512, n * 512);
    }
    Ok(n)
}
