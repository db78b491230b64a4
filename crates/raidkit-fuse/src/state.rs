//! State shared by the request threads, the idle cleaner and the stop handle.

use raidkit_engine::{Array, EngineError};
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Errors printed in full before further ones are only counted.
const MAX_REPORTED_ERRORS: u64 = 20;

/// Print a line on stderr, ignoring errors (the terminal may be gone after SIGHUP).
pub(crate) fn note(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "raidkit mount: {args}");
}

/// `FALLOC_FL_WRITE_ZEROES` (Linux 6.17): zero the range with real writes.
const FALLOC_FL_WRITE_ZEROES: i32 = 0x80;

/// Why a fallocate request failed.
pub(crate) enum FallocError {
    /// Refused with this errno.
    Errno(fuser::Errno),
    /// Writing zeros failed.
    Engine(EngineError),
}

/// Counters of one mount, returned when it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes written to the array through the file.
    pub bytes_written: u64,
    /// Write requests served.
    pub writes: u64,
    /// Times the array was marked clean after writes went idle.
    pub idle_clean_marks: u64,
    /// Read, write or flush requests that failed with EIO.
    pub io_errors: u64,
}

pub(crate) struct Shared {
    pub(crate) array: Arc<Array>,
    pub(crate) file_name: OsString,
    pub(crate) size: u64,
    pub(crate) read_only: bool,
    pub(crate) direct_io: bool,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) started: SystemTime,
    epoch: Instant,
    /// Nanoseconds since the Unix epoch of the last completed write (0: none yet).
    mtime_ns: AtomicU64,
    /// Milliseconds since `epoch` of the last completed write.
    last_write_ms: AtomicU64,
    /// Writes since the array was last marked clean.
    dirty: AtomicBool,
    /// Writes since the members were last flushed.
    unflushed: AtomicBool,
    bytes_written: AtomicU64,
    writes: AtomicU64,
    idle_clean_marks: AtomicU64,
    io_errors: AtomicU64,
}

impl Shared {
    pub(crate) fn new(
        array: Arc<Array>,
        file_name: OsString,
        read_only: bool,
        direct_io: bool,
    ) -> Shared {
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Shared {
            size: array.size_bytes(),
            array,
            file_name,
            read_only,
            direct_io,
            uid,
            gid,
            started: SystemTime::now(),
            epoch: Instant::now(),
            mtime_ns: AtomicU64::new(0),
            last_write_ms: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            unflushed: AtomicBool::new(false),
            bytes_written: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            idle_clean_marks: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
        }
    }

    /// Modification time: the last write, or the mount time.
    pub(crate) fn mtime(&self) -> SystemTime {
        match self.mtime_ns.load(Ordering::Relaxed) {
            0 => self.started,
            ns => UNIX_EPOCH + Duration::from_nanos(ns),
        }
    }

    /// Write through to the array and record the activity for the idle cleaner.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        self.array.write(offset, data)?;
        // Flags are set after the write completed: a cleaner that saw them clear either
        // ran before this write (and will run again) or waited for it in mark_clean.
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        self.last_write_ms.store(now_ms, Ordering::Release);
        self.unflushed.store(true, Ordering::Release);
        self.dirty.store(true, Ordering::Release);
        if let Ok(d) = SystemTime::now().duration_since(UNIX_EPOCH) {
            self.mtime_ns.store(d.as_nanos() as u64, Ordering::Relaxed);
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// `fallocate(2)` on the array file:
    ///
    /// * mode 0 / `KEEP_SIZE` (allocate): nothing to do inside the file, which is always
    ///   fully allocated; `ENOSPC` if it would grow.
    /// * `ZERO_RANGE` and `WRITE_ZEROES`: write zeros (what `BLKZEROOUT` on a loop device over the file turns
    ///   into; the caller would write them itself otherwise).
    /// * `PUNCH_HOLE` (a discard through a loop device) and anything else: `EOPNOTSUPP`.
    ///   Discards are advisory; emulating them would mean writing zeros over the whole
    ///   range, e.g. the whole array when `mkfs` discards it first.
    pub(crate) fn fallocate(&self, offset: u64, length: u64, mode: i32) -> Result<(), FallocError> {
        use fuser::Errno;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let end = offset.saturating_add(length);
        if end > self.size && !keep_size {
            return Err(FallocError::Errno(Errno::ENOSPC));
        }
        let end = end.min(self.size);
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => Ok(()),
            libc::FALLOC_FL_ZERO_RANGE | FALLOC_FL_WRITE_ZEROES => {
                if self.read_only {
                    return Err(FallocError::Errno(Errno::EROFS));
                }
                static ZEROS: [u8; 1 << 20] = [0; 1 << 20];
                let mut pos = offset;
                while pos < end {
                    let n = (end - pos).min(ZEROS.len() as u64) as usize;
                    self.write(pos, &ZEROS[..n]).map_err(FallocError::Engine)?;
                    pos += n as u64;
                }
                Ok(())
            }
            _ => Err(FallocError::Errno(Errno::EOPNOTSUPP)),
        }
    }

    /// Flush the members if anything was written since the last flush.
    pub(crate) fn flush_if_written(&self) -> Result<(), EngineError> {
        if self.unflushed.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.array.flush() {
                self.unflushed.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Mark the array clean if it was written since the last time and has been idle for
    /// `idle`. Returns true if it marked.
    fn clean_if_idle(&self, idle: Duration) -> Result<bool, EngineError> {
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(false);
        }
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_write_ms.load(Ordering::Acquire);
        if now_ms.saturating_sub(last) < idle.as_millis() as u64 {
            return Ok(false);
        }
        self.dirty.store(false, Ordering::Release);
        // mark_clean flushes every member first.
        self.unflushed.store(false, Ordering::Release);
        if let Err(e) = self.array.mark_clean() {
            self.dirty.store(true, Ordering::Release);
            self.unflushed.store(true, Ordering::Release);
            return Err(e);
        }
        self.idle_clean_marks.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Print an IO error on stderr (the first few in full, then only counted).
    pub(crate) fn report(&self, what: &str, offset: u64, len: u64, e: &EngineError) {
        let n = self.io_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= MAX_REPORTED_ERRORS {
            note(format_args!(
                "{what} of {len} bytes at offset {offset} failed (EIO): {e}"
            ));
        } else if n == MAX_REPORTED_ERRORS + 1 {
            note(format_args!(
                "more IO errors; only counting them from now on"
            ));
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            idle_clean_marks: self.idle_clean_marks.load(Ordering::Relaxed),
            io_errors: self.io_errors.load(Ordering::Relaxed),
        }
    }
}

/// The thread that marks the array clean after writes go idle, like md's
/// `safe_mode_delay`.
pub(crate) struct Cleaner {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Cleaner {
    pub(crate) fn spawn(shared: Arc<Shared>, idle: Duration) -> std::io::Result<Cleaner> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let st = stop.clone();
        let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let thread = std::thread::Builder::new()
            .name("raidkit-idle-clean".into())
            .spawn(move || {
                let (lock, cv) = &*st;
                let mut stopped = match lock.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                while !*stopped {
                    stopped = match cv.wait_timeout(stopped, tick) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                    if *stopped {
                        break;
                    }
                    if let Err(e) = shared.clean_if_idle(idle) {
                        note(format_args!("marking the array clean failed: {e}"));
                    }
                }
            })?;
        Ok(Cleaner {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop the thread and wait for it.
    pub(crate) fn stop(&mut self) {
        let (lock, cv) = &*self.stop;
        match lock.lock() {
            Ok(mut g) => *g = true,
            Err(p) => *p.into_inner() = true,
        }
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Cleaner {
    fn drop(&mut self) {
        self.stop();
    }
}
