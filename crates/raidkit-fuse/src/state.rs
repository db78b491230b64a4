//! State shared by the request threads and the stop handle.

use raidkit_engine::supervisor::WriteActivity;
use raidkit_engine::{Array, EngineError};
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    pub(crate) read_only: bool,
    pub(crate) direct_io: bool,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) started: SystemTime,
    /// Nanoseconds since the Unix epoch of the last completed write (0: none yet).
    mtime_ns: AtomicU64,
    /// Write activity, for the idle-clean timer (the caller's or the mount's own).
    pub(crate) activity: Arc<WriteActivity>,
    /// Which completed writes a finished flush has made durable.
    flushes: FlushGate,
    bytes_written: AtomicU64,
    writes: AtomicU64,
    io_errors: AtomicU64,
}

impl Shared {
    pub(crate) fn new(
        array: Arc<Array>,
        file_name: OsString,
        read_only: bool,
        direct_io: bool,
        activity: Arc<WriteActivity>,
    ) -> Shared {
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Shared {
            array,
            file_name,
            read_only,
            direct_io,
            uid,
            gid,
            started: SystemTime::now(),
            mtime_ns: AtomicU64::new(0),
            activity,
            flushes: FlushGate::default(),
            bytes_written: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
        }
    }

    /// The array's size now: a reshape of the running array (`raidkit grow NAME`) changes
    /// it, and the file follows (the kernel asks again within the attribute TTL).
    pub(crate) fn size(&self) -> u64 {
        self.array.size_bytes()
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
        self.activity.wrote();
        self.flushes.wrote();
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
        let size = self.size();
        let end = offset.saturating_add(length);
        if end > size && !keep_size {
            return Err(FallocError::Errno(Errno::ENOSPC));
        }
        let end = end.min(size);
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

    /// Flush the members unless every write completed so far is already durable.
    pub(crate) fn flush_if_written(&self) -> Result<(), EngineError> {
        self.flushes.flush_if_written(|| self.array.flush())
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
            idle_clean_marks: self.activity.clean_marks(),
            io_errors: self.io_errors.load(Ordering::Relaxed),
        }
    }
}

/// Decides when an `fsync` (or `close`) may skip flushing the members: only when a flush
/// that started after the last completed write has finished. Concurrent fsyncs wait for
/// the flush in progress instead of returning while the data is still on its way.
#[derive(Debug, Default)]
pub(crate) struct FlushGate {
    /// Writes completed so far.
    written: AtomicU64,
    /// The `written` count the last successful flush covered; the lock serializes flushes.
    durable: Mutex<u64>,
}

impl FlushGate {
    /// Record a completed write (before it is acknowledged).
    pub(crate) fn wrote(&self) {
        self.written.fetch_add(1, Ordering::AcqRel);
    }

    /// Run `flush` unless the writes completed before this call are durable already; on
    /// success they are. A failed flush leaves them owed, so the next call flushes again.
    pub(crate) fn flush_if_written<E>(
        &self,
        flush: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let target = self.written.load(Ordering::Acquire);
        let mut durable = self.durable.lock().unwrap_or_else(PoisonError::into_inner);
        if *durable >= target {
            return Ok(());
        }
        // Writes that completed while waiting for the lock are covered as well.
        let covered = self.written.load(Ordering::Acquire);
        flush()?;
        *durable = covered;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FlushGate;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    #[test]
    fn flushes_only_what_is_owed_and_retries_after_a_failure() {
        let gate = FlushGate::default();
        let runs = AtomicUsize::new(0);
        let flush = || -> Result<(), ()> {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        gate.flush_if_written(flush).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing written: no flush");
        gate.wrote();
        gate.flush_if_written(flush).unwrap();
        gate.flush_if_written(flush).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        gate.wrote();
        assert_eq!(gate.flush_if_written(|| Err("EIO")), Err("EIO"));
        gate.flush_if_written(flush).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 2, "a failed flush is retried");
    }

    /// Two fsyncs after one write: the second must not return while the first one's
    /// flush is still running (it did: the "unflushed" flag was already cleared).
    #[test]
    fn a_concurrent_fsync_waits_for_the_flush_in_progress() {
        let gate = Arc::new(FlushGate::default());
        gate.wrote();
        let flushed = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let first = {
            let (gate, flushed) = (gate.clone(), flushed.clone());
            std::thread::spawn(move || {
                gate.flush_if_written(|| -> Result<(), ()> {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    flushed.store(true, Ordering::SeqCst);
                    Ok(())
                })
            })
        };
        started_rx.recv().unwrap();
        let second = {
            let (gate, flushed) = (gate.clone(), flushed.clone());
            std::thread::spawn(move || {
                let own = AtomicBool::new(false);
                gate.flush_if_written(|| -> Result<(), ()> {
                    own.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
                // Returned: the write must be durable, by the first flush or its own.
                flushed.load(Ordering::SeqCst) || own.load(Ordering::SeqCst)
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        release_tx.send(()).unwrap();
        first.join().unwrap().unwrap();
        assert!(
            second.join().unwrap(),
            "fsync returned before the data was flushed"
        );
    }
}
