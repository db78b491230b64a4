//! Copies from one member to another inside the kernel: `splice` from the source file
//! into a pipe (the pipe takes references to the source's page-cache pages, no copy),
//! then from the pipe into the target (one copy, into the target's pages). A copy through
//! a buffer of ours costs two (into the buffer, out of it): on tmpfs members a RAID1
//! rebuild spent about two fifths of its CPU time in the first one
//! (`_copy_to_iter`, see docs/BENCHMARKS.md, session 10).
//!
//! Only where the layer would run both IOs inline anyway ([`copy_in_kernel`]): the
//! source's file lives in memory (its reads never wait for a device, so they need no
//! deadline), the target is a descriptor (writes into the page cache run inline). Any
//! other pair, or a kernel that refuses the splice, is left to the caller's buffered
//! path.

use super::Submission;
use crate::dev::{check_bounds, BlockDev};
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes the pipe is asked to hold (`F_SETPIPE_SZ`): a mirrored step's 1 MiB in one
/// round. Refused (a user over its pipe quota): the pipe's own size, more rounds.
const PIPE_BYTES: usize = 1 << 20;

/// Bytes copied by [`copy_in_kernel`] in this process.
static COPIED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes [`copy_in_kernel`] has copied in this process (for tests and diagnostics).
pub fn kernel_copied_bytes() -> u64 {
    COPIED_BYTES.load(Ordering::Relaxed)
}

/// A thread's pipe: read end, write end, and its capacity in bytes.
struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
    cap: usize,
}

thread_local! {
    /// Made on first use; dropped (closed) after a copy that failed half-way, which may
    /// have left bytes in it.
    static PIPE: RefCell<Option<Pipe>> = const { RefCell::new(None) };
}

fn new_pipe() -> io::Result<Pipe> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given (of two ints).
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made by pipe2 and are owned by nobody else.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own; F_SETPIPE_SZ / F_GETPIPE_SZ take and return
    // plain integers.
    let cap = unsafe {
        libc::fcntl(
            wr.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            PIPE_BYTES as libc::c_int,
        );
        libc::fcntl(wr.as_raw_fd(), libc::F_GETPIPE_SZ)
    };
    if cap <= 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Pipe {
        rd,
        wr,
        cap: cap as usize,
    })
}

/// How long a kernel copy's two sides took (for the members' counters).
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyTimes {
    /// Moving the source's pages into the pipe.
    pub read: Duration,
    /// Copying them into the target.
    pub write: Duration,
}

/// Can [`copy_in_kernel`] copy from `src` to `dst`? The source a file in memory, the
/// target a descriptor (`RAIDKIT_SPLICE=0` in the environment: never, for measurements).
pub fn can_copy_in_kernel(src: &dyn BlockDev, dst: &dyn BlockDev) -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var("RAIDKIT_SPLICE").is_ok_and(|v| v == "0")) {
        return false;
    }
    src.submission().in_memory() && matches!(dst.submission(), Submission::Fd { .. })
}

/// Copy `len` bytes of `src` at byte `src_off` to `dst` at byte `dst_off` in the kernel,
/// in this thread. None: not done, nothing written (the pair cannot be copied this way,
/// see [`can_copy_in_kernel`], or the kernel refused the first splice): copy through a
/// buffer. `Some(Err)`: an IO failed, and part of the range may have been written.
pub fn copy_in_kernel(
    src: &dyn BlockDev,
    src_off: u64,
    dst: &dyn BlockDev,
    dst_off: u64,
    len: usize,
) -> Option<io::Result<CopyTimes>> {
    if !can_copy_in_kernel(src, dst) {
        return None;
    }
    let (Submission::Fd { fd: sfd, .. }, Submission::Fd { fd: dfd, .. }) =
        (src.submission(), dst.submission())
    else {
        return None;
    };
    if let Err(e) = check_bounds("read", src_off, len, src.size_bytes())
        .and_then(|()| check_bounds("write", dst_off, len, dst.size_bytes()))
    {
        return Some(Err(e));
    }
    PIPE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match new_pipe() {
                Ok(p) => *slot = Some(p),
                Err(_) => return None,
            }
        }
        let pipe = slot.as_ref()?;
        let r = copy_through(pipe, sfd, src_off, dfd, dst_off, len);
        if matches!(r, Some(Ok(_))) {
            COPIED_BYTES.fetch_add(len as u64, Ordering::Relaxed);
        } else {
            // Bytes may be left in it: the next copy gets a new, empty one.
            *slot = None;
        }
        r
    })
}

/// The copy, a pipe's capacity at a time.
fn copy_through(
    pipe: &Pipe,
    sfd: libc::c_int,
    src_off: u64,
    dfd: libc::c_int,
    dst_off: u64,
    len: usize,
) -> Option<io::Result<CopyTimes>> {
    let mut times = CopyTimes::default();
    let mut done = 0usize;
    while done < len {
        let t0 = Instant::now();
        let want = (len - done).min(pipe.cap);
        let into_pipe = Splice {
            from: sfd,
            from_off: Some(src_off + done as u64),
            to: pipe.wr.as_raw_fd(),
            to_off: None,
            at_eof: (
                io::ErrorKind::UnexpectedEof,
                "read past the end of the device",
            ),
        };
        // One splice into the pipe per round, however short: the pipe holds a number of
        // page pieces, not of bytes, so from an offset inside a page `cap` bytes do not
        // fit, and a second splice into the full pipe would wait for a reader (this
        // thread) for ever. What went in is then taken out whole.
        let inside = match into_pipe.some(want, done == 0) {
            Ok(n) => n,
            Err(stop) => return stop,
        };
        let t1 = Instant::now();
        let out_of_pipe = Splice {
            from: pipe.rd.as_raw_fd(),
            from_off: None,
            to: dfd,
            to_off: Some(dst_off + done as u64),
            at_eof: (io::ErrorKind::Other, "the target took no bytes"),
        };
        if let Err(stop) = out_of_pipe.exactly(inside, done == 0) {
            return stop;
        }
        let t2 = Instant::now();
        times.read += t1 - t0;
        times.write += t2 - t1;
        done += inside;
    }
    Some(Ok(times))
}

/// One side of a copy: `from` into `to`, a file side at its byte offset, the pipe side
/// with none.
struct Splice {
    from: libc::c_int,
    from_off: Option<u64>,
    to: libc::c_int,
    to_off: Option<u64>,
    /// The error when a splice moves nothing.
    at_eof: (io::ErrorKind, &'static str),
}

impl Splice {
    /// Move exactly `len` bytes (see [`Splice::some`] for the errors).
    fn exactly(&self, len: usize, first: bool) -> Result<(), Option<io::Result<CopyTimes>>> {
        let mut moved = 0usize;
        while moved < len {
            moved += self.at(moved, len - moved, first && moved == 0)?;
        }
        Ok(())
    }

    /// Move at least one and at most `len` bytes, in one splice (retried when
    /// interrupted). `Err(None)`: the file system cannot splice and nothing was moved
    /// (`first`: nor by an earlier call), so the caller may copy through a buffer;
    /// `Err(Some(Err))`: an IO failed.
    fn some(&self, len: usize, first: bool) -> Result<usize, Option<io::Result<CopyTimes>>> {
        self.at(0, len, first)
    }

    /// [`Splice::some`], `skip` bytes past the sides' offsets.
    fn at(
        &self,
        skip: usize,
        len: usize,
        first: bool,
    ) -> Result<usize, Option<io::Result<CopyTimes>>> {
        loop {
            let mut from_off = self.from_off.map(|o| (o + skip as u64) as libc::loff_t);
            let mut to_off = self.to_off.map(|o| (o + skip as u64) as libc::loff_t);
            let ptr = |o: &mut Option<libc::loff_t>| {
                o.as_mut()
                    .map_or(std::ptr::null_mut(), |v| v as *mut libc::loff_t)
            };
            // SAFETY: splice between two descriptors we hold open; each offset pointer is
            // null (the pipe side) or points at a live local; no memory of ours is passed.
            let n = unsafe {
                libc::splice(
                    self.from,
                    ptr(&mut from_off),
                    self.to,
                    ptr(&mut to_off),
                    len,
                    libc::SPLICE_F_MOVE,
                )
            };
            if n > 0 {
                return Ok(n as usize);
            }
            if n == 0 {
                return Err(Some(Err(io::Error::new(self.at_eof.0, self.at_eof.1))));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) if first => return Err(None),
                _ => return Err(Some(Err(e))),
            }
        }
    }
}
