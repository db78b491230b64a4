//! The slow-member detector: a member much slower than its peers over a window of reads.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::locks::lock;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A member is slow when its measured read service time is at least this many times the
/// median of its peers...
pub const SLOW_FACTOR: u64 = 5;

/// ...for this many reads in a row.
pub const SLOW_WINDOW: u32 = 16;

/// A member that stays slow is reported again after this long (at once if it recovered
/// in between and became slow again).
pub const SLOW_REPEAT: Duration = Duration::from_secs(60);

/// Per-member state of the slow-member detector.
#[derive(Debug, Default)]
pub(crate) struct SlowState {
    streak: AtomicU32,
    reported: AtomicBool,
    last: Mutex<Option<Instant>>,
}

/// The median of `v` (sorted in place; `v` not empty).
fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// After a successful read on `role` (member `m`; `slots`: the array's role slots): compare
/// its service time with the median of its live peers' and count the read into `m`'s
/// streak; the [`ArrayEvent::SlowMember`] to raise when the streak reaches
/// [`SLOW_WINDOW`] reads ≥ [`SLOW_FACTOR`]× slower (again after [`SLOW_REPEAT`], or at
/// once after recovering).
pub(crate) fn slow_read(
    slots: &[Option<Arc<Member>>],
    role: usize,
    m: &Member,
) -> Option<ArrayEvent> {
    let mine = m.ewma_ns_per_kib();
    if mine == 0 {
        return None;
    }
    // No allocation per read: up to 32 peers' times on the stack.
    let mut peers: SmallVec<[u64; 32]> = slots
        .iter()
        .enumerate()
        .filter(|(r, _)| *r != role)
        .filter_map(|(_, x)| x.as_ref())
        .filter(|x| !x.is_failed())
        .map(|x| x.ewma_ns_per_kib())
        .filter(|&e| e > 0)
        .collect();
    if peers.is_empty() {
        return None;
    }
    let median = median(&mut peers);
    let st = &m.slow;
    if mine < SLOW_FACTOR.saturating_mul(median.max(1)) {
        st.streak.store(0, Ordering::Relaxed);
        st.reported.store(false, Ordering::Relaxed);
        return None;
    }
    if st.streak.fetch_add(1, Ordering::Relaxed) + 1 < SLOW_WINDOW {
        return None;
    }
    let mut last = lock(&st.last);
    if st.reported.load(Ordering::Relaxed) && last.is_some_and(|t| t.elapsed() < SLOW_REPEAT) {
        return None;
    }
    st.reported.store(true, Ordering::Relaxed);
    *last = Some(Instant::now());
    Some(ArrayEvent::SlowMember {
        role,
        device: m.dev.name().to_string(),
        member_us: mine.saturating_mul(1024) / 1000,
        peers_us: median.saturating_mul(1024) / 1000,
    })
}
