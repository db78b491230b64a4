//! Is the array fit for a reshape now: what would make one unsafe (degraded, lost data,
//! a resync or replacement pending), and the members' measured sequential speed, for
//! the time estimate and the slow-member check.

use crate::array::Array;
use raidkit_layout::SECTOR;

/// Problems that make a reshape unsafe now (refused unless forced).
pub(crate) fn problems(arr: &Array) -> Vec<String> {
    let mut v = Vec::new();
    let missing = arr.missing_roles();
    if !missing.is_empty() {
        v.push(format!(
            "the array is degraded (roles {missing:?} missing): a reshape reads every stripe, and one more failure during it loses data; add the missing members and let them rebuild first"
        ));
    } else if arr.is_degraded() {
        v.push("a member is still being rebuilt: let the rebuild finish first".into());
    }
    let lost = arr.lost_ranges();
    if !lost.is_empty() {
        v.push(format!(
            "{} array byte ranges have no valid copy (bad blocks beyond redundancy), first {:?}: the reshape would move their garbage; restore them from a backup first",
            lost.len(),
            lost[0]
        ));
    }
    if arr.needs_resync() {
        v.push("the array was not stopped cleanly and its redundancy may be inconsistent: let the resync finish first".into());
    }
    if !arr.replacement_roles().is_empty() {
        v.push("a member is being replaced: let the replacement finish first".into());
    }
    v
}

/// Measure each member's sequential read speed (bytes per second): 8 MiB from the middle
/// of its data area, one member at a time (members read together would share CPU and
/// bus, and the last one started would look slow), best of three rounds (one slow round
/// is the machine's, not the member's). 0 for a member that fails to read.
pub(crate) fn measure(arr: &Array) -> Vec<(String, u64)> {
    measure_rounds(arr, 3)
}

/// [`measure`] with `rounds` rounds.
pub(crate) fn measure_rounds(arr: &Array, rounds: usize) -> Vec<(String, u64)> {
    let members: Vec<_> = arr
        .slots()
        .iter()
        .flatten()
        .filter(|m| !m.is_failed())
        .cloned()
        .collect();
    let mut best = vec![0u64; members.len()];
    let mut failed = vec![false; members.len()];
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..rounds {
        for (i, m) in members.iter().enumerate() {
            if failed[i] {
                continue;
            }
            let dev_bytes = m.dev.size_bytes();
            let len: u64 = (8 << 20).min(dev_bytes / 4).max(4096) / 4096 * 4096;
            let at = (m.data_offset * SECTOR + dev_bytes) / 2 / 4096 * 4096;
            let at = at.min(dev_bytes.saturating_sub(len));
            let t0 = std::time::Instant::now();
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(buf.len() as u64) as usize;
                if m.dev.read_at(&mut buf[..n], at + done).is_err() {
                    failed[i] = true;
                    break;
                }
                done += n as u64;
            }
            let secs = t0.elapsed().as_secs_f64().max(1e-6);
            best[i] = best[i].max((done as f64 / secs) as u64);
        }
    }
    members
        .iter()
        .zip(best.iter().zip(&failed))
        .map(|(m, (&b, &f))| (m.dev.name().to_string(), if f { 0 } else { b }))
        .collect()
}

/// Members that read [`crate::array::slow::SLOW_FACTOR`] times slower than the median.
pub(crate) fn slow_members(v: &[(String, u64)]) -> Vec<(String, u64)> {
    let Some(median) = median(v) else {
        return Vec::new();
    };
    v.iter()
        .filter(|(_, s)| *s > 0 && s.saturating_mul(crate::array::slow::SLOW_FACTOR) < median)
        .cloned()
        .collect()
}

/// The median of the non-zero speeds.
pub(crate) fn median(v: &[(String, u64)]) -> Option<u64> {
    let mut s: Vec<u64> = v.iter().map(|x| x.1).filter(|&x| x > 0).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_unstable();
    Some(s[s.len() / 2])
}
