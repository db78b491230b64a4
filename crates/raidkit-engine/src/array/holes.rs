//! A member's hole test, bounded: the hole found by one query is remembered, so a pass
//! that asks about every step of a long hole asks the device once, not once per step.
//!
//! A file's hole test (`SEEK_DATA`) walks from the offset asked to the next data: on a
//! blank preallocated tmpfs member that is every page to its end, and a check or resync
//! asking at each step paid it again and again (quadratic in the member's size). The
//! hole `[start, end)` found is kept with the member's write generation read *before*
//! the query; it answers later questions inside it only while no write to the member has
//! finished since ([`HoleHint::wrote`] is called after every member write, whatever its
//! outcome), so a write that lands after the query — however it raced it — makes the
//! device be asked again. Passes start with the hint forgotten ([`HoleHint::forget`]), so
//! what changed a file outside the array between passes is seen.

use crate::array::iostats::PerCpu;
use crate::dev::BlockDev;
use crate::locks::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The last hole found on one member, and the member's write generation.
#[derive(Default)]
pub(crate) struct HoleHint {
    /// Member writes finished (any outcome), counted on the writer's CPU's copy (one
    /// shared count was a cache line both cores took from each other at every member
    /// write); the generation is the sum. A hole known under an older sum may have been
    /// written since. Each copy only grows, so the sum is unchanged only if no copy
    /// changed after it was read: a write counted after the query began is seen.
    writes: PerCpu<AtomicU64>,
    /// A hole `[start, end)` (device bytes) and the write count read before it was found.
    known: Mutex<Option<(u64, u64, u64)>>,
}

impl HoleHint {
    /// A write to the member finished (successfully or not): what was known is stale.
    pub(crate) fn wrote(&self) {
        self.writes.local().fetch_add(1, Ordering::AcqRel);
    }

    /// The write generation: the sum of the copies.
    fn generation(&self) -> u64 {
        self.writes
            .all()
            .map(|w| w.load(Ordering::Acquire))
            .fold(0, u64::wrapping_add)
    }

    /// Forget the hole known (a pass starts: the files may have changed outside the array).
    pub(crate) fn forget(&self) {
        *lock(&self.known) = None;
    }

    /// Does `dev` read as a hole over device bytes `[offset, offset + len)`? Answered from
    /// the hole last found when it covers the range and nothing was written since; else the
    /// device is asked ([`BlockDev::hole_end`], falling back to [`BlockDev::is_hole`]).
    pub(crate) fn is_hole(&self, dev: &dyn BlockDev, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let gen = self.generation();
        if let Some((a, b, g)) = *lock(&self.known) {
            if g == gen && a <= offset && end <= b {
                return true;
            }
        }
        let Some(hole_end) = dev.hole_end(offset) else {
            return dev.is_hole(offset, len);
        };
        if hole_end > offset {
            *lock(&self.known) = Some((offset, hole_end, gen));
        }
        hole_end >= end && len > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::atomic::AtomicUsize;

    /// A device that is one hole from byte 0 to its end, counting the hole queries.
    struct Blank {
        queries: AtomicUsize,
    }

    impl BlockDev for Blank {
        fn read_at(&self, buf: &mut [u8], _offset: u64) -> io::Result<()> {
            buf.fill(0);
            Ok(())
        }
        fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn size_bytes(&self) -> u64 {
            1 << 20
        }
        fn name(&self) -> &str {
            "blank"
        }
        fn hole_end(&self, _offset: u64) -> Option<u64> {
            self.queries.fetch_add(1, Ordering::Relaxed);
            Some(1 << 20)
        }
    }

    /// Run `f` on a thread bound to CPU `cpu` (false if the binding failed).
    fn on_cpu(cpu: usize, f: impl FnOnce() + Send) -> bool {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: the set is a local the calls only read and write; binding
                // affects this thread alone.
                let bound = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
                };
                if bound {
                    f();
                }
                bound
            })
            .join()
            .unwrap_or(false)
        })
    }

    /// A write counted on any CPU's copy of the write count makes the remembered hole
    /// stale: the device is asked again (the count is kept per CPU).
    #[test]
    fn a_write_on_any_cpu_makes_the_known_hole_stale() {
        let dev = Blank {
            queries: AtomicUsize::new(0),
        };
        let hint = HoleHint::default();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut asked = 0;
        assert!(hint.is_hole(&dev, 4096, 4096));
        asked += 1;
        assert_eq!(dev.queries.load(Ordering::Relaxed), asked);
        assert!(hint.is_hole(&dev, 8192, 4096), "answered from the hint");
        assert_eq!(dev.queries.load(Ordering::Relaxed), asked);
        for cpu in 0..cpus {
            if !on_cpu(cpu, || hint.wrote()) {
                continue; // not allowed on that CPU here
            }
            assert!(hint.is_hole(&dev, 4096, 4096));
            asked += 1;
            assert_eq!(
                dev.queries.load(Ordering::Relaxed),
                asked,
                "a write on CPU {cpu} left the hint in use"
            );
            assert!(hint.is_hole(&dev, 4096, 4096));
            assert_eq!(dev.queries.load(Ordering::Relaxed), asked);
        }
    }
}
