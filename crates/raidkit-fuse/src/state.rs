//! State shared by the request threads and the stop handle.

use raidkit_engine::supervisor::WriteActivity;
use raidkit_engine::{Array, EngineError};
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
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
    pub(crate) size: u64,
    pub(crate) read_only: bool,
    pub(crate) direct_io: bool,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) started: SystemTime,
    /// Nanoseconds since the Unix epoch of the last completed write (0: none yet).
    mtime_ns: AtomicU64,
    /// Write activity, for the idle-clean timer (the caller's or the mount's own).
    pub(crate) activity: Arc<WriteActivity>,
    /// Writes since the members were last flushed.
    unflushed: AtomicBool,
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
            size: array.size_bytes(),
            array,
            file_name,
            read_only,
            direct_io,
            uid,
            gid,
            started: SystemTime::now(),
            mtime_ns: AtomicU64::new(0),
            activity,
            unflushed: AtomicBool::new(false),
            bytes_written: AtomicU64::new(0),
            writes: AtomicU64::new(0),
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
        self.activity.wrote();
        self.unflushed.store(true, Ordering::Release);
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
