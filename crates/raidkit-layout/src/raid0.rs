//! RAID0 strip zones and mapping (§4.2).

use crate::{Geometry, Placement, Raid0Zone, RAID0_ALTERNATE, RAID0_DANGEROUS};

/// Build the zones for chunk `c` and member data sizes `members` (role order). Members are
/// rounded down to the chunk; zero-length members take part in no zone. None on chunk 0
/// or overflow.
pub(crate) fn zones(c: u64, members: &[u64]) -> Option<Vec<Raid0Zone>> {
    if c == 0 {
        return None;
    }
    let lens: Vec<u64> = members.iter().map(|&m| m / c * c).collect();
    let mut distinct = lens.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let mut out = Vec::new();
    let mut prev = 0u64;
    let mut end = 0u64;
    for l in distinct {
        if l == prev {
            continue; // only possible for l == 0
        }
        let devs: Vec<usize> = lens
            .iter()
            .enumerate()
            .filter(|&(_, &len)| len > prev)
            .map(|(i, _)| i)
            .collect();
        let nb = u64::try_from(devs.len()).ok()?;
        let zone_end = end.checked_add((l - prev).checked_mul(nb)?)?;
        out.push(Raid0Zone {
            dev_start: prev,
            dev_end: l,
            devs,
            zone_start: end,
            zone_end,
        });
        end = zone_end;
        prev = l;
    }
    Some(out)
}

/// True when the original and alternate layouts differ (zone 1 exists with > 1 member).
pub(crate) fn ambiguous(zones: &[Raid0Zone]) -> bool {
    zones.get(1).is_some_and(|z| z.devs.len() > 1)
}

/// Zones of a geometry plus whether the alternate layout is in effect. None if the
/// geometry cannot be mapped (e.g. layout 0 where the layout matters).
fn plan(g: &Geometry) -> Option<(Vec<Raid0Zone>, bool)> {
    if g.member_sectors.len() != g.raid_disks {
        return None;
    }
    let z = zones(g.chunk_sectors, &g.member_sectors)?;
    let amb = ambiguous(&z);
    if amb && g.layout == RAID0_DANGEROUS {
        return None;
    }
    Some((z, amb && g.layout == RAID0_ALTERNATE))
}

pub(crate) fn locate(g: &Geometry, s: u64) -> Option<Placement> {
    let (zones, alt) = plan(g)?;
    let c = g.chunk_sectors;
    let zone = zones.iter().find(|z| s < z.zone_end)?;
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
    let (zones, alt) = plan(g)?;
    let c = g.chunk_sectors;
    let zone = zones.iter().find(|z| x >= z.dev_start && x < z.dev_end)?;
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
