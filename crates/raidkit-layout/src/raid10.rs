//! RAID10 near/far/offset mapping with far sets (§4.6).

use crate::{bad_disks, bad_layout, Geometry, LayoutError, Level, Placement, MAX_RAID_DISKS};

/// Derived RAID10 parameters.
#[derive(Clone, Debug)]
pub(crate) struct R10 {
    /// Members.
    n: usize,
    /// Near copies.
    pub(crate) nc: usize,
    /// Far copies.
    pub(crate) fc: usize,
    /// Offset flag (bit 16).
    offset: bool,
    /// Far-set size.
    fss: usize,
    /// Chunk in sectors.
    c: u64,
    /// Array size in chunks (`A`).
    chunks: u64,
    /// Chunks used per member.
    used: u64,
    /// Distance between far copies, in sectors.
    stride: u64,
}

impl R10 {
    /// Parameters from a geometry; None if it cannot be mapped (no soundness check of the
    /// far-copy permutation, see [`validate`]).
    pub(crate) fn of(g: &Geometry) -> Option<R10> {
        if g.level != Level::Raid10 {
            return None;
        }
        let layout = g.layout;
        if layout >> 19 != 0 {
            return None;
        }
        let nc = usize::try_from(layout & 0xff).ok()?;
        let fc = usize::try_from((layout >> 8) & 0xff).ok()?;
        let offset = layout & (1 << 16) != 0;
        let n = g.raid_disks;
        let copies = nc.checked_mul(fc)?;
        if nc == 0 || fc == 0 || copies < 2 || copies > n || n > MAX_RAID_DISKS {
            return None;
        }
        let fss = match layout >> 17 {
            0 => n,
            1 => n / fc,
            2 => copies,
            _ => return None,
        };
        if fss == 0 || fss > n {
            return None;
        }
        let c = g.chunk_sectors;
        if c == 0 {
            return None;
        }
        let (n64, nc64, fc64) = (
            u64::try_from(n).ok()?,
            u64::try_from(nc).ok()?,
            u64::try_from(fc).ok()?,
        );
        let chunks = (g.dev_sectors / c / fc64).checked_mul(n64)? / nc64;
        let used = chunks
            .checked_mul(u64::try_from(copies).ok()?)?
            .div_ceil(n64);
        let stride = if offset {
            c
        } else {
            (used / fc64).checked_mul(c)?
        };
        // Everything below is addressed in sectors: make sure it fits.
        chunks.checked_mul(c)?;
        used.checked_mul(c)?;
        Some(R10 {
            n,
            nc,
            fc,
            offset,
            fss,
            c,
            chunks,
            used,
            stride,
        })
    }

    pub(crate) fn array_sectors(&self) -> Option<u64> {
        self.chunks.checked_mul(self.c)
    }

    pub(crate) fn used_sectors(&self) -> Option<u64> {
        self.used.checked_mul(self.c)
    }

    fn last_start(&self) -> usize {
        (self.n / self.fss)
            .saturating_sub(1)
            .saturating_mul(self.fss)
    }

    /// One far step: the member of the next far copy (the kernel's rule, including its
    /// handling of a last far set that absorbs the remainder).
    fn far_step(&self, d: usize) -> usize {
        let set = d / self.fss;
        let d2 = d.saturating_add(self.nc);
        let last_start = self.last_start();
        if !self.n.is_multiple_of(self.fss) && d2 > last_start {
            let last_size = self.fss + self.n % self.fss;
            last_start + (d2 - last_start) % last_size
        } else {
            d2 % self.fss + self.fss * set
        }
    }

    /// The far set `(start, size)` holding member `m`.
    fn set_of(&self, m: usize) -> (usize, usize) {
        let last_start = self.last_start();
        if !self.n.is_multiple_of(self.fss) && m >= last_start {
            (last_start, self.fss + self.n % self.fss)
        } else {
            ((m / self.fss) * self.fss, self.fss)
        }
    }

    /// Undo `f` far steps from member `m` (exact when the far step permutes the members,
    /// which [`validate`] guarantees: it is then a rotation by `nc` inside each set).
    fn far_back(&self, m: usize, f: usize) -> usize {
        let (start, size) = self.set_of(m);
        let back = (f % size) * (self.nc % size) % size;
        start + (m - start + size - back) % size
    }

    pub(crate) fn locate(&self, s: u64) -> Option<Placement> {
        let c = self.c;
        let n64 = u64::try_from(self.n).ok()?;
        let chunk = s / c;
        let in_chunk = s % c;
        let v = chunk.checked_mul(u64::try_from(self.nc).ok()?)?;
        let mut row = v / n64;
        let mut dev = usize::try_from(v % n64).ok()?;
        if self.offset {
            row = row.checked_mul(u64::try_from(self.fc).ok()?)?;
        }
        let mut sec = row.checked_mul(c)?.checked_add(in_chunk)?;
        let mut copies = Vec::with_capacity(self.nc * self.fc);
        for _ in 0..self.nc {
            let mut d = dev;
            let mut x = sec;
            copies.push((d, x));
            for _ in 1..self.fc {
                d = self.far_step(d);
                x = x.checked_add(self.stride)?;
                copies.push((d, x));
            }
            dev += 1;
            if dev >= self.n {
                dev = 0;
                sec = sec.checked_add(c)?;
            }
        }
        Some(Placement {
            copies,
            run: c - in_chunk,
        })
    }

    pub(crate) fn reverse(&self, m: usize, x: u64) -> Option<u64> {
        let c = self.c;
        if m >= self.n || x >= self.used_sectors()? {
            return None;
        }
        let n64 = u64::try_from(self.n).ok()?;
        let fc64 = u64::try_from(self.fc).ok()?;
        let in_chunk = x % c;
        let (row, f) = if self.offset {
            let raw = x / c;
            (raw / fc64, raw % fc64)
        } else {
            let f = x.checked_div(self.stride)?;
            if f >= fc64 {
                return None;
            }
            ((x - f * self.stride) / c, f)
        };
        let dev0 = self.far_back(m, usize::try_from(f).ok()?);
        let vslot = row
            .checked_mul(n64)?
            .checked_add(u64::try_from(dev0).ok()?)?;
        let chunk = vslot / u64::try_from(self.nc).ok()?;
        if chunk >= self.chunks {
            return None;
        }
        let s = chunk.checked_mul(c)?.checked_add(in_chunk)?;
        // Only answer what the forward map confirms.
        self.locate(s)?.copies.contains(&(m, x)).then_some(s)
    }
}

/// RAID10-specific checks of [`Geometry::new`] (chunk and basic layout checks are done by
/// the caller).
pub(crate) fn validate(g: &Geometry) -> Result<(), LayoutError> {
    let layout = g.layout;
    let nc = (layout & 0xff) as usize;
    let fc = ((layout >> 8) & 0xff) as usize;
    let copies = nc * fc;
    if copies > g.raid_disks {
        return Err(bad_disks(
            Level::Raid10,
            g.raid_disks,
            format!("the layout keeps {copies} copies, which needs at least {copies} devices"),
        ));
    }
    let r = R10::of(g).ok_or_else(|| {
        LayoutError::Invalid("RAID10 size overflows 64 bits or layout is unusable".to_string())
    })?;
    // The far step is only used with more than one far copy.
    let mut seen = vec![false; if r.fc > 1 { r.n } else { 0 }];
    for d in 0..seen.len() {
        match seen.get_mut(r.far_step(d)) {
            Some(slot) if !*slot => *slot = true,
            _ => {
                return Err(bad_layout(
                    Level::Raid10,
                    layout,
                    format!(
                        "with {} devices the kernel's far-set mapping puts two chunks on the \
                         same member sector (no tool creates this layout)",
                        r.n
                    ),
                ))
            }
        }
    }
    if r.offset && r.fc > 1 && r.n % r.nc != 0 {
        return Err(bad_layout(
            Level::Raid10,
            layout,
            format!(
                "offset copies combined with {} near copies on {} devices make the kernel put \
                 two chunks on the same member sector (no tool creates this layout)",
                r.nc, r.n
            ),
        ));
    }
    Ok(())
}
