//! Large requests cut into pieces (whole stripes) served by several threads at once.

use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use raidkit_layout::SECTOR;

impl Array {
    /// Size of the pieces a large request is split into for parallel processing, in
    /// sectors (whole stripes for striped levels), or None if it should not be split.
    pub(crate) fn split_unit(&self, total: u64) -> Option<u64> {
        let threads = self.threads();
        if threads < 2 || total < 1024 {
            return None;
        }
        // Whole stripes for striped levels (the chunks of one row on every data-bearing
        // member); 128 KiB pieces for RAID1 and linear.
        let stripe = self.geo.full_stripe_sectors().unwrap_or(256);
        let per = total.div_ceil(threads as u64).div_ceil(stripe) * stripe;
        if per >= total {
            None
        } else {
            Some(per.max(stripe))
        }
    }

    pub(crate) fn threads(&self) -> usize {
        // `available_parallelism` reads cgroup files (about 20 syscalls): once per process,
        // not once per request.
        static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *THREADS.get_or_init(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(8)
        })
    }

    /// Run `f` on every (array sector, piece) job, the first on the calling thread and
    /// each other one in its own scoped thread; the first error (in job order) wins.
    pub(crate) fn run_parallel<P: Send>(
        &self,
        jobs: Vec<(u64, P)>,
        f: impl Fn(u64, P) -> Result<()> + Sync,
    ) -> Result<()> {
        std::thread::scope(|sc| {
            let f = &f;
            let mut jobs = jobs.into_iter();
            let first = jobs.next();
            let handles: Vec<_> = jobs.map(|(at, p)| sc.spawn(move || f(at, p))).collect();
            let mut res = first.map_or(Ok(()), |(at, p)| f(at, p));
            for h in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(EngineError::Invalid("an IO worker thread panicked".into()))
                });
                if res.is_ok() {
                    res = r;
                }
            }
            res
        })
    }

    pub(crate) fn write_split(&self, s: u64, buf: &[u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        if let Some(unit) = self.split_unit(total) {
            let first = (unit - s % unit).min(total);
            let (head, rest) = buf.split_at((first * SECTOR) as usize);
            let mut jobs = vec![(s, head)];
            let mut off = s + first;
            for piece in rest.chunks((unit * SECTOR) as usize) {
                let n = piece.len() as u64 / SECTOR;
                jobs.push((off, piece));
                off += n;
            }
            return self.run_parallel(jobs, |at, p| self.write_serial(at, p));
        }
        self.write_serial(s, buf)
    }
}
