//! The slow-member detector: a member much slower than its peers over a window of reads.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::Array;
use crate::locks::lock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
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

impl Array {
    /// After a successful read on `role`: compare its service time with the median of its
    /// peers and raise [`ArrayEvent::SlowMember`] when it stays ≥ [`SLOW_FACTOR`]× slower
    /// for [`SLOW_WINDOW`] reads (again after [`SLOW_REPEAT`], or at once after recovering).
    pub(crate) fn check_slow(&self, role: usize, m: &Member) {
        let mine = m.ewma_ns_per_kib();
        let mut peers: Vec<u64> = self
            .slots()
            .iter()
            .enumerate()
            .filter(|(r, _)| *r != role)
            .filter_map(|(_, x)| x.as_ref())
            .filter(|x| !x.is_failed())
            .map(|x| x.ewma_ns_per_kib())
            .filter(|&e| e > 0)
            .collect();
        if peers.is_empty() || mine == 0 {
            return;
        }
        peers.sort_unstable();
        let median = if peers.len() % 2 == 1 {
            peers[peers.len() / 2]
        } else {
            (peers[peers.len() / 2 - 1] + peers[peers.len() / 2]) / 2
        };
        let st = &m.slow;
        if mine < SLOW_FACTOR.saturating_mul(median.max(1)) {
            st.streak.store(0, Ordering::Relaxed);
            st.reported.store(false, Ordering::Relaxed);
            return;
        }
        if st.streak.fetch_add(1, Ordering::Relaxed) + 1 < SLOW_WINDOW {
            return;
        }
        let mut last = lock(&st.last);
        if st.reported.load(Ordering::Relaxed) && last.is_some_and(|t| t.elapsed() < SLOW_REPEAT) {
            return;
        }
        st.reported.store(true, Ordering::Relaxed);
        *last = Some(Instant::now());
        drop(last);
        self.emit(ArrayEvent::SlowMember {
            role,
            device: m.dev.name().to_string(),
            member_us: mine.saturating_mul(1024) / 1000,
            peers_us: median.saturating_mul(1024) / 1000,
        });
    }
}
