//! A member's count of corrected read errors, which fades with time as md's does (halved
//! for every hour since it was last looked at): a member is failed for many errors close
//! together, not for the few a long life of scrubs and reads adds up to.

use std::sync::Mutex;
use std::time::Instant;

/// Seconds after which the count is halved.
const HALF_LIFE_SECS: u64 = 3600;

/// Read errors of one member, fading (see the module doc).
#[derive(Debug)]
pub(crate) struct ReadErrorCount(Mutex<(u32, Instant)>);

impl Default for ReadErrorCount {
    fn default() -> Self {
        ReadErrorCount(Mutex::new((0, Instant::now())))
    }
}

impl ReadErrorCount {
    /// Count one more error; the count now (after fading).
    pub(crate) fn add(&self) -> u32 {
        let mut g = crate::locks::lock(&self.0);
        let (count, since) = *g;
        let halvings = since.elapsed().as_secs() / HALF_LIFE_SECS;
        let now = faded(count, halvings).saturating_add(1);
        let since = since + std::time::Duration::from_secs(halvings * HALF_LIFE_SECS);
        *g = (now, since);
        now
    }
}

/// `count` halved `halvings` times.
fn faded(count: u32, halvings: u64) -> u32 {
    count
        .checked_shr(u32::try_from(halvings).unwrap_or(u32::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_halves_per_hour_and_is_gone_after_enough_of_them() {
        assert_eq!(faded(20, 0), 20);
        assert_eq!(faded(20, 1), 10);
        assert_eq!(faded(20, 2), 5);
        assert_eq!(faded(20, 5), 0);
        assert_eq!(faded(u32::MAX, 32), 0);
        assert_eq!(faded(u32::MAX, u64::MAX), 0);
    }

    #[test]
    fn errors_close_together_add_up() {
        let c = ReadErrorCount::default();
        assert_eq!((c.add(), c.add(), c.add()), (1, 2, 3));
    }
}
