//! md's safe mode: mark arrays clean once their writes have gone idle.

use crate::array::{lock, Array};
use crate::error::{EngineError, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// When an array was last written, for [`IdleClean`]. Frontends call
/// [`WriteActivity::wrote`] after every completed client write.
#[derive(Debug)]
pub struct WriteActivity {
    /// When the last write completed, [`coarse_ms`].
    last_write_ms: AtomicU64,
    /// Written since the array was last marked clean.
    dirty: AtomicBool,
    /// Times the array was marked clean after writes went idle.
    clean_marks: AtomicU64,
}

impl Default for WriteActivity {
    fn default() -> Self {
        WriteActivity {
            last_write_ms: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            clean_marks: AtomicU64::new(0),
        }
    }
}

impl WriteActivity {
    /// Record a completed write. Called after the write returned: a cleaner that saw the
    /// flags clear either ran before this write (and runs again) or waited for it inside
    /// [`Array::mark_clean`] (which pauses writes).
    pub fn wrote(&self) {
        let now_ms = coarse_ms();
        // Skip stores that change nothing, so concurrent writers do not bounce the line.
        if self.last_write_ms.load(Ordering::Relaxed) != now_ms {
            self.last_write_ms.store(now_ms, Ordering::Release);
        }
        if !self.dirty.load(Ordering::Relaxed) {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Times the array was marked clean after writes went idle.
    pub fn clean_marks(&self) -> u64 {
        self.clean_marks.load(Ordering::Relaxed)
    }

    /// Mark `array` clean if it was written since the last mark and has been idle for
    /// `idle`. Returns true if it marked.
    fn clean_if_idle(&self, array: &Array, idle: std::time::Duration) -> Result<bool> {
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(false);
        }
        let now_ms = coarse_ms();
        let last = self.last_write_ms.load(Ordering::Acquire);
        if now_ms.saturating_sub(last) < idle.as_millis() as u64 {
            return Ok(false);
        }
        self.dirty.store(false, Ordering::Release);
        if let Err(e) = array.mark_clean() {
            self.dirty.store(true, Ordering::Release);
            return Err(e);
        }
        self.clean_marks.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

/// Milliseconds of the monotonic clock at its coarse resolution (the kernel's tick, 1–10
/// ms): idle delays are tens of milliseconds and more, and this read is taken after every
/// client write, where the fine clock (`Instant::now`) cost ~0.7 % of the NBD server's
/// CPU on 4 KiB writes and the coarse one does not read the time-stamp counter. 0 if
/// the clock cannot be read (never on Linux; then nothing is ever idle, and the array
/// stays dirty, which is safe).
pub(crate) fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec as u64 / 1_000_000)
}

/// md's safe mode: one thread that marks arrays clean once their writes have been idle
/// for a delay (`safe_mode_delay`), so an array that stops being written is clean on disk
/// even if the process is then killed. Stops (and joins) on [`IdleClean::stop`] or drop.
pub struct IdleClean {
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What [`IdleClean`] watches: an array and its write activity.
pub type Watched = (Arc<Array>, Arc<WriteActivity>);

impl IdleClean {
    /// Start watching `arrays`; `on_error` hears of a failed mark (the array stays dirty
    /// and the mark is tried again on the next tick).
    pub fn spawn(
        arrays: Vec<Watched>,
        idle: std::time::Duration,
        on_error: impl Fn(&Array, &EngineError) + Send + 'static,
    ) -> std::io::Result<IdleClean> {
        let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let st = stop.clone();
        let tick = (idle / 4).clamp(
            std::time::Duration::from_millis(10),
            std::time::Duration::from_millis(250),
        );
        let thread = std::thread::Builder::new()
            .name("raidkit-idle-clean".into())
            .spawn(move || {
                let (flag, cv) = &*st;
                let mut stopped = lock(flag);
                while !*stopped {
                    stopped = match cv.wait_timeout(stopped, tick) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                    if *stopped {
                        break;
                    }
                    for (array, activity) in &arrays {
                        if let Err(e) = activity.clean_if_idle(array, idle) {
                            on_error(array, &e);
                        }
                    }
                }
            })?;
        Ok(IdleClean {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop the thread and wait for it.
    pub fn stop(&mut self) {
        let (flag, cv) = &*self.stop;
        *lock(flag) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for IdleClean {
    fn drop(&mut self) {
        self.stop();
    }
}
