//! RAID0 strip zones and mapping (§4.2).

use crate::{Geometry, Placement, Raid0Zone, RAID0_ALTERNATE, RAID0_DANGEROUS};

/// Zone bounds without the member list (see [`Raid0Zone`] for the fields); `nb` members.
/// Built in O(N log N) by [`bounds`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    dev_start: u64,
    dev_end: u64,
    nb: usize,
    zone_start: u64,
    pub(crate) zone_end: u64,
}

fn lens(c: u64, members: &[u64]) -> Option<Vec<u64>> {
    if c == 0 {
        return None;
    }
    Some(members.iter().map(|&m| m / c * c).collect())
}

pub(crate) fn bounds(c: u64, members: &[u64]) -> Option<Vec<Bounds>> {
    let mut sorted = lens(c, members)?;
    sorted.sort_unstable();
    let mut out: Vec<Bounds> = Vec::new();
    let mut prev = 0u64;
    let mut end = 0u64;
    for (i, &l) in sorted.iter().enumerate() {
        if l == prev {
            continue;
        }
        // Members longer than `prev` are exactly the ones from index i on.
        let nb = sorted.len() - i;
        let zone_end = end.checked_add((l - prev).checked_mul(u64::try_from(nb).ok()?)?)?;
        out.push(Bounds {
            dev_start: prev,
            dev_end: l,
            nb,
            zone_start: end,
            zone_end,
        });
        end = zone_end;
        prev = l;
    }
    Some(out)
}

/// Materialise one zone: its members in role order.
fn zone_of(b: &Bounds, lens: &[u64]) -> Raid0Zone {
    Raid0Zone {
        dev_start: b.dev_start,
        dev_end: b.dev_end,
        devs: lens
            .iter()
            .enumerate()
            .filter(|&(_, &len)| len > b.dev_start)
            .map(|(i, _)| i)
            .collect(),
        zone_start: b.zone_start,
        zone_end: b.zone_end,
    }
}

/// Build all zones for chunk `c` and member data sizes `members` (role order). Members
/// are rounded down to the chunk; zero-length members take part in no zone. None on
/// chunk 0 or overflow.
pub(crate) fn zones(c: u64, members: &[u64]) -> Option<Vec<Raid0Zone>> {
    let l = lens(c, members)?;
    Some(bounds(c, members)?.iter().map(|b| zone_of(b, &l)).collect())
}

/// True when the original and alternate layouts differ (zone 1 exists with > 1 member).
pub(crate) fn ambiguous(b: &[Bounds]) -> bool {
    b.get(1).is_some_and(|z| z.nb > 1)
}

/// Zones of a geometry plus whether the alternate layout is in effect. None if the
/// geometry cannot be mapped (e.g. layout 0 where the layout matters).
fn plan(g: &Geometry) -> Option<(Vec<Bounds>, Vec<u64>, bool)> {
    if g.member_sectors.len() != g.raid_disks {
        return None;
    }
    let b = bounds(g.chunk_sectors, &g.member_sectors)?;
    let amb = ambiguous(&b);
    if amb && g.layout == RAID0_DANGEROUS {
        return None;
    }
    let l = lens(g.chunk_sectors, &g.member_sectors)?;
    Some((b, l, amb && g.layout == RAID0_ALTERNATE))
}

pub(crate) fn locate(g: &Geometry, s: u64) -> Option<Placement> {
    let (bounds, lens, alt) = plan(g)?;
    let c = g.chunk_sectors;
    let zone = zone_of(bounds.iter().find(|z| s < z.zone_end)?, &lens);
    let zoff = s.checked_sub(zone.zone_start)?;
    let nb = u64::try_from(zone.devs.len()).ok()?;
    let sel = if alt { zoff } else { s };
    let in_chunk = sel % c;
    let idx = usize::try_from((sel / c).checked_rem(nb)?).ok()?;
    let member = *zone.devs.get(idx)?;
    let dev_chunk = zoff / c.checked_mul(nb)?;
    let data = zone
        .dev_start
        .checked_add(dev_chunk.checked_mul(c)?)?
        .checked_add(in_chunk)?;
    let run = (c - in_chunk).min(zone.zone_end - s);
    Some(Placement {
        copies: vec![(member, data)],
        run,
    })
}

pub(crate) fn reverse(g: &Geometry, role: usize, x: u64) -> Option<u64> {
    let (bounds, lens, alt) = plan(g)?;
    let c = g.chunk_sectors;
    let zone = zone_of(
        bounds.iter().find(|z| x >= z.dev_start && x < z.dev_end)?,
        &lens,
    );
    let idx = u64::try_from(zone.devs.iter().position(|&d| d == role)?).ok()?;
    let nb = u64::try_from(zone.devs.len()).ok()?;
    let rel = x - zone.dev_start;
    let dev_chunk = rel / c;
    let in_chunk = rel % c;
    let j = if alt {
        idx
    } else {
        // Member index of array chunk (zone_start/c + dev_chunk*nb + j) must be idx.
        let zs = (zone.zone_start / c) % nb;
        (idx + nb - zs) % nb
    };
    let zchunk = dev_chunk.checked_mul(nb)?.checked_add(j)?;
    zone.zone_start
        .checked_add(zchunk.checked_mul(c)?)?
        .checked_add(in_chunk)
}
