//! The member IO layer: every member IO of a request (and of many requests) is submitted
//! together and waited for together, each with a deadline.
//!
//! A caller builds a batch of [`IoReq`]s (device, offset, read/write/flush, deadline) and
//! calls [`run`]. How each IO is carried out depends on what its device says it is
//! ([`BlockDev::submission`]):
//!
//! * [`Submission::Fd`] (files, block devices): positioned IO on the descriptor through
//!   this thread's io_uring — one `io_uring_enter` submits the whole batch and waits for
//!   it, with the earliest deadline as its timeout — or, where io_uring is not available
//!   (`io_uring_setup` refused with EPERM/ENOSYS, as in seccomp-filtered containers, or
//!   [`set_mode`] / `RAIDKIT_IO=threads`), through a small fixed pool of IO threads.
//!   Small writes and reads the page cache holds run inline (see `inline_fd`). Large
//!   writes (≥ [`LARGE_WRITE_BYTES`]) of a batch that has several go to the *writer
//!   lanes*: one thread per lane, a file always on the same lane, so the members' copies
//!   run at once and no two writers of one file queue on its inode lock (a full-stripe
//!   write used to write its members one after another, inline, and several writers
//!   waited on each other's member files) — while cores are free for them: when other
//!   such batches already keep the cores busy, the batch writes inline (`LargeBatch`).
//!   The batch's own thread writes its share of them meanwhile (`keep_callers_share`),
//!   only to files in memory: its own write is a blocking call no deadline interrupts.
//!   `RAIDKIT_LARGE_WRITES=lanes|ring|inline` always uses the lanes, this thread's
//!   io_uring, or inline writes instead (for measurements).
//! * [`Submission::Async`] (devices that complete IOs themselves: the fault wrapper's
//!   device model, a network member): [`AsyncDev::start`] either finishes the IO at once,
//!   possibly not to be seen complete before an instant (a modelled device: no thread
//!   sleeps per IO, the batch waits once for its latest completion), or keeps it and
//!   completes it later from any thread.
//! * [`Submission::Blocking`]: plain calls (in-memory devices), in the calling thread.
//!
//! A copy from one member to another (a mirrored rebuild's) can skip the buffer:
//! [`copy_in_kernel`] splices it, where both IOs would run inline anyway.
//!
//! Deadlines. An IO not complete by its deadline gets `ErrorKind::TimedOut`. An
//! asynchronous device's memory is reached only through its [`AsyncIo`] handle, which the
//! batch revokes when it gives up, so a late completion never touches the caller's
//! buffer: the batch returns at the deadline. An IO the kernel is doing on the caller's
//! memory (io_uring or a pool thread) cannot be abandoned that way: at its deadline the
//! batch reports it through `on_late` at once (the engine fails the member, so nothing
//! else waits for it), asks the kernel to cancel it, and returns when the kernel gives
//! the memory back — for local devices the kernel's own timeouts bound that (SCSI and
//! NVMe: 30 s).

pub mod alloc;
mod fdio;
mod large;
mod pool;
mod splice;
mod uring;

pub use splice::{can_copy_in_kernel, copy_in_kernel, kernel_copied_bytes, CopyTimes};

use fdio::{finish_short, inline_fd, sync_fd};
use large::{is_large_write, large_write_path, large_writes, large_writes_to_lanes, LargeWrites};
pub use large::{large_writes_in_lanes, LARGE_WRITE_BYTES};

use crate::dev::BlockDev;
use smallvec::SmallVec;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The default deadline of a member IO on a local device when nothing else is set: the
/// SCSI layer's command timeout (md itself has none).
pub const DEFAULT_MEMBER_TIMEOUT: Duration = Duration::from_secs(30);

/// What one IO does, on the caller's memory.
pub enum IoOp<'a> {
    /// Read `buf.len()` bytes.
    Read(&'a mut [u8]),
    /// Write the bytes.
    Write(&'a [u8]),
    /// Make completed writes durable.
    Flush,
}

impl IoOp<'_> {
    fn len(&self) -> usize {
        match self {
            IoOp::Read(b) => b.len(),
            IoOp::Write(b) => b.len(),
            IoOp::Flush => 0,
        }
    }
}

/// One IO of a batch.
pub struct IoReq<'a> {
    /// The device.
    pub dev: &'a dyn BlockDev,
    /// Byte offset on the device.
    pub offset: u64,
    /// What to do.
    pub op: IoOp<'a>,
    /// When the IO must be complete.
    pub deadline: Instant,
    /// The time it was given (for messages).
    pub timeout: Duration,
    /// Filled by [`run`]: the outcome.
    pub result: Option<io::Result<()>>,
    /// Filled by [`run`]: when the IO completed (for a modelled device, when the model
    /// says it did), or the deadline if it missed it.
    pub done_at: Option<Instant>,
}

impl<'a> IoReq<'a> {
    /// An IO of `dev` at byte `offset` due within `timeout` from now.
    pub fn new(dev: &'a dyn BlockDev, offset: u64, op: IoOp<'a>, timeout: Duration) -> Self {
        IoReq {
            dev,
            offset,
            op,
            deadline: Instant::now() + timeout,
            timeout,
            result: None,
            done_at: None,
        }
    }

    /// [`IoReq::new`] given the time now (a batch of many IOs reads the clock once).
    pub fn new_at(
        dev: &'a dyn BlockDev,
        offset: u64,
        op: IoOp<'a>,
        timeout: Duration,
        now: Instant,
    ) -> Self {
        IoReq {
            dev,
            offset,
            op,
            deadline: now + timeout,
            timeout,
            result: None,
            done_at: None,
        }
    }

    /// The outcome (an error if [`run`] has not filled it).
    pub fn take_result(&mut self) -> io::Result<()> {
        self.result
            .take()
            .unwrap_or_else(|| Err(io::Error::other("IO not run")))
    }

    fn finish(&mut self, r: io::Result<()>, at: Instant) {
        self.result = Some(r);
        self.done_at = Some(at);
    }
}

/// How a device takes IOs submitted in batches.
pub enum Submission<'a> {
    /// Positioned IO on this descriptor (regular files and block devices), which stays
    /// open as long as the device. `in_memory`: the file lives in memory (tmpfs, ramfs),
    /// so its IOs never wait for a device.
    Fd {
        /// The descriptor.
        fd: RawFd,
        /// The file is in memory.
        in_memory: bool,
    },
    /// The device completes IOs itself.
    Async(&'a dyn AsyncDev),
    /// Only synchronous calls (run in the calling thread).
    Blocking,
}

impl Submission<'_> {
    /// A descriptor of a file in memory (tmpfs, ramfs): its IOs never wait for a device.
    pub fn in_memory(&self) -> bool {
        matches!(
            self,
            Submission::Fd {
                in_memory: true,
                ..
            }
        )
    }
}

/// A device that completes IOs itself: a modelled device, a network member.
pub trait AsyncDev: Send + Sync {
    /// Start `io`. Return [`Started::Done`] if it is finished already (its memory will
    /// not be touched again), else [`Started::Pending`] and call [`AsyncIo::complete`]
    /// later, from any thread; until then, reach its memory only through
    /// [`AsyncIo::with_read_buf`] / [`AsyncIo::with_write_data`].
    fn start(&self, io: AsyncIo) -> Started;
}

/// What [`AsyncDev::start`] did.
pub enum Started {
    /// Finished: the result, and when the device completes it (None: now).
    Done(io::Result<()>, Option<Instant>),
    /// The device keeps the IO and completes it later.
    Pending,
}

/// The kind of an asynchronous IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncKind {
    /// A read of this many bytes.
    Read(usize),
    /// A write of this many bytes.
    Write(usize),
    /// A flush.
    Flush,
}

/// An IO handed to an [`AsyncDev`]: its offset and kind, and revocable access to the
/// caller's memory.
pub struct AsyncIo {
    /// Byte offset on the device.
    pub offset: u64,
    /// What to do.
    pub kind: AsyncKind,
    slot: Arc<Slot>,
}

/// The state an asynchronous IO shares with the batch waiting for it.
struct Slot {
    st: Mutex<SlotState>,
    waiter: std::thread::Thread,
}

struct SlotState {
    /// The caller's memory (null once revoked).
    ptr: *mut u8,
    len: usize,
    result: Option<(io::Result<()>, Instant)>,
}

// SAFETY: the raw pointer is only dereferenced under the slot's mutex while it is not
// revoked, and the batch that owns the memory revokes it (under the same mutex) before
// it returns; so the memory is never reached after the borrow it came from ends.
unsafe impl Send for SlotState {}

impl AsyncIo {
    /// Fill the read buffer with `f`, unless the batch gave up on this IO (then false and
    /// `f` is not called). The batch cannot give up while `f` runs.
    pub fn with_read_buf(&self, f: impl FnOnce(&mut [u8])) -> bool {
        let st = crate::locks::lock(&self.slot.st);
        if st.ptr.is_null() || !matches!(self.kind, AsyncKind::Read(_)) {
            return false;
        }
        // SAFETY: not revoked, so the batch is still waiting and the `&mut [u8]` it was
        // built from is alive and not used by anyone else; the mutex keeps it so for `f`.
        f(unsafe { std::slice::from_raw_parts_mut(st.ptr, st.len) });
        true
    }

    /// Read the data to write with `f`, unless the batch gave up on this IO.
    pub fn with_write_data(&self, f: impl FnOnce(&[u8])) -> bool {
        let st = crate::locks::lock(&self.slot.st);
        if st.ptr.is_null() || !matches!(self.kind, AsyncKind::Write(_)) {
            return false;
        }
        // SAFETY: as in `with_read_buf`; the memory is only read.
        f(unsafe { std::slice::from_raw_parts(st.ptr as *const u8, st.len) });
        true
    }

    /// Give `f` the data to write and the IO itself, holding no lock (so `f` may send the
    /// data and complete the IO, without the copy [`AsyncIo::with_write_data`] needs for
    /// that): for a device that is done with the data when `f` returns. Only on the thread
    /// running the batch, as [`AsyncDev::start`] is; elsewhere, for a read, or once the
    /// batch gave up: `Err` with the IO.
    pub fn send_write_data<R>(self, f: impl FnOnce(&[u8], AsyncIo) -> R) -> Result<R, AsyncIo> {
        let lent = {
            let st = crate::locks::lock(&self.slot.st);
            let batch_thread = std::thread::current().id() == self.slot.waiter.id();
            let write = matches!(self.kind, AsyncKind::Write(_));
            (!st.ptr.is_null() && write && batch_thread).then_some((st.ptr as *const u8, st.len))
        };
        let Some((ptr, len)) = lent else {
            return Err(self);
        };
        // SAFETY: not revoked, so the batch that lent the memory is still in `run`, and
        // only its own thread revokes it and ends the borrow. That thread is this one,
        // busy with `f` until `f` returns; the slice cannot outlive `f` (its lifetime is
        // the call's), and the memory is only read.
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        Ok(f(data, self))
    }

    /// The IO is finished (a late completion, after the batch gave up, is dropped).
    pub fn complete(self, r: io::Result<()>) {
        let mut st = crate::locks::lock(&self.slot.st);
        if st.result.is_none() {
            st.result = Some((r, Instant::now()));
        }
        drop(st);
        self.slot.waiter.unpark();
    }
}

/// How file and block-device IOs are carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoMode {
    /// io_uring if the kernel allows it, else the IO threads (the default).
    Auto,
    /// The IO threads only.
    Threads,
}

/// 0 = not decided yet, 1 = io_uring, 2 = threads.
static MODE: AtomicU8 = AtomicU8::new(0);
/// Member timeout override, milliseconds (0 = none).
static TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

/// Choose how file and block-device IOs are carried out (process-wide). `RAIDKIT_IO=threads`
/// in the environment does the same as `IoMode::Threads` at start.
pub fn set_mode(mode: IoMode) {
    MODE.store(
        match mode {
            IoMode::Auto => 0,
            IoMode::Threads => 2,
        },
        Ordering::Release,
    );
}

/// Does this process use io_uring for file and block-device IO (false: the IO threads)?
pub fn uses_io_uring() -> bool {
    match MODE.load(Ordering::Acquire) {
        1 => true,
        2 => false,
        _ => {
            let threads = std::env::var("RAIDKIT_IO").is_ok_and(|v| v == "threads");
            let ok = !threads && uring::available();
            MODE.store(if ok { 1 } else { 2 }, Ordering::Release);
            ok
        }
    }
}

/// Fall back to the IO threads for good (io_uring failed in a way that will not pass).
fn give_up_io_uring() {
    MODE.store(2, Ordering::Release);
}

/// Set the deadline of every member IO (process-wide; None: each device's own default,
/// [`DEFAULT_MEMBER_TIMEOUT`] for local ones). `RAIDKIT_MEMBER_TIMEOUT` (a duration such
/// as `5s` or `500ms`) in the environment sets it at start.
pub fn set_member_timeout(t: Option<Duration>) {
    let ms = t.map_or(0, |d| d.as_millis().clamp(1, u128::from(u64::MAX)) as u64);
    TIMEOUT_MS.store(ms, Ordering::Release);
}

/// The deadline of member IOs on `dev` from now.
pub fn member_timeout(dev: &dyn BlockDev) -> Duration {
    static ENV: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    let ms = TIMEOUT_MS.load(Ordering::Acquire);
    if ms > 0 {
        return Duration::from_millis(ms);
    }
    let env = ENV.get_or_init(|| {
        let v = std::env::var("RAIDKIT_MEMBER_TIMEOUT").ok()?;
        crate::dev::fault::duration(&v).ok()
    });
    env.or_else(|| dev.default_timeout())
        .unwrap_or(DEFAULT_MEMBER_TIMEOUT)
}

/// The error of an IO that missed its deadline.
pub fn timed_out(dev: &dyn BlockDev, what: &str, allowed: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "{} did not complete a {what} within {} ms (member timeout)",
            dev.name(),
            allowed.as_millis()
        ),
    )
}

/// Is this the error of an IO that missed its deadline?
pub fn is_timeout(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::TimedOut
}

/// Does this error mean the whole member is gone (no answer in time, or a network
/// member's connection lost), not a bad sector?
pub fn is_gone(e: &io::Error) -> bool {
    is_timeout(e) || e.kind() == io::ErrorKind::NotConnected
}

thread_local! {
    /// Set while this thread zeroes a range of the array ([`punch_zeroes`]).
    static PUNCH_ZEROES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While the returned guard lives, a write of an all-zero buffer in this thread's batches
/// gives the storage back instead ([`BlockDev::punch_hole`]: a hole in a file, an NBD
/// member's WRITE_ZEROES) where the device can, and is written as zeros where it cannot.
pub fn punch_zeroes() -> PunchZeroes {
    PunchZeroes(PUNCH_ZEROES.with(|p| p.replace(true)))
}

/// Does this thread zero a range now ([`punch_zeroes`])?
pub fn punching_zeroes() -> bool {
    PUNCH_ZEROES.with(std::cell::Cell::get)
}

/// The guard of [`punch_zeroes`]; dropping it restores what was before.
pub struct PunchZeroes(bool);

impl Drop for PunchZeroes {
    fn drop(&mut self) {
        PUNCH_ZEROES.with(|p| p.set(self.0));
    }
}

/// Is every byte of `b` zero?
pub fn is_zero(b: &[u8]) -> bool {
    b.chunks(64).all(|c| c.iter().fold(0u8, |a, &x| a | x) == 0)
}

/// Under [`punch_zeroes`]: carry out a write of zeros as a punched hole if the device can
/// (true: done, with its result).
fn try_punch(r: &mut IoReq<'_>) -> bool {
    let IoOp::Write(b) = &r.op else {
        return false;
    };
    if b.is_empty() || !is_zero(b) {
        return false;
    }
    let len = b.len();
    if let Err(e) = super::check_bounds("write", r.offset, len, r.dev.size_bytes()) {
        r.finish(Err(e), Instant::now());
        return true;
    }
    match r.dev.punch_hole(r.offset, len as u64) {
        Ok(false) => false,
        res => {
            r.finish(res.map(drop), Instant::now());
            true
        }
    }
}

/// Run every IO of the batch at once and wait for all of them (each until its deadline).
/// `on_late(i)` is called at the deadline of an IO `i` that the batch must still wait
/// for (the kernel holds its memory); its result is then a timeout whatever the kernel
/// says later. Each finished IO is reported to its device ([`BlockDev::io_done`]).
pub fn run(reqs: &mut [IoReq<'_>], on_late: &mut dyn FnMut(usize)) {
    alloc::tune();
    if reqs.is_empty() {
        return;
    }
    // Large writes of a batch that has several go to the writer lanes first, so the
    // members' copies run at once while this thread does the rest (not while zeroing:
    // its writes of zeros are holes punched here).
    let punch = punching_zeroes();
    let (_large_batch, laned) = if punch {
        (None, Vec::new())
    } else {
        large_writes_to_lanes(reqs)
    };
    let lanes = (!laned.is_empty()).then(|| pool::submit(reqs, &laned, pool::lane));
    let to_ring = large_write_path() == LargeWrites::Ring && large_writes(reqs) >= 2;
    let mut fds = Vec::new();
    // Asynchronous devices' IOs first (a network member's): their servers work on them
    // while this thread does the inline ones, so a mirror's remote copy overlaps its local
    // one instead of starting after it.
    let mut asyncs = Vec::new();
    let mut any_async = false;
    for (i, r) in reqs.iter_mut().enumerate() {
        if let Submission::Async(dev) = r.dev.submission() {
            if !(punch && try_punch(r)) {
                any_async = true;
                if let Some(pending) = start_async(dev, r) {
                    asyncs.push((i, pending));
                }
            }
        }
    }
    let mut next_laned = laned.iter().map(|l| l.0).peekable();
    // Small inline writes (page-cache copies of microseconds) are stamped complete with
    // one clock read after the loop, not one each: the stamps of a batch's copies of a
    // 4 KiB write differ by a copy's few microseconds, well inside what a latency
    // sample resolves (reads keep their own stamps: the read balancer compares them).
    let mut unstamped: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, r) in reqs.iter_mut().enumerate() {
        if next_laned.next_if_eq(&i).is_some()
            || matches!(r.dev.submission(), Submission::Async(_))
            || (punch && try_punch(r))
        {
            continue;
        }
        match r.dev.submission() {
            Submission::Fd { fd, in_memory } => {
                let size = r.dev.size_bytes();
                if let Err(e) = super::check_bounds(op_name(&r.op), r.offset, r.op.len(), size) {
                    r.finish(Err(e), Instant::now());
                } else if to_ring && is_large_write(&r.op) {
                    fds.push((i, fd));
                } else if let Some(res) = inline_fd(fd, in_memory, &mut r.op, r.offset) {
                    if is_small_write(&r.op) {
                        r.result = Some(res);
                        unstamped.push(i);
                    } else {
                        r.finish(res, Instant::now());
                    }
                } else {
                    fds.push((i, fd));
                }
            }
            Submission::Async(_) => {} // started above
            Submission::Blocking => {
                let res = blocking(r);
                r.finish(res, Instant::now());
            }
        }
    }
    if !unstamped.is_empty() {
        let now = Instant::now();
        for &i in &unstamped {
            reqs[i].done_at = Some(now);
        }
    }
    if let [(i, fd)] = fds[..] {
        if matches!(reqs[i].op, IoOp::Flush) {
            // One flush: nothing to do at the same time.
            let r = &mut reqs[i];
            let res = sync_fd(fd, &mut r.op, r.offset);
            r.finish(res, Instant::now());
            fds.clear();
        }
    }
    if !fds.is_empty() {
        if uses_io_uring() && uring::run(reqs, &fds, on_late).is_ok() {
            // done
        } else {
            pool::run(reqs, &fds, on_late);
        }
    }
    if let Some(lanes) = lanes {
        lanes.wait(reqs, on_late);
    }
    if !asyncs.is_empty() {
        wait_async(reqs, asyncs);
    }
    // Only an asynchronous device completes an IO at an instant still to come (a
    // modelled one): the other paths stamp completions as they see them, so without one
    // the clock need not be read again.
    let now = any_async.then(Instant::now);
    // Modelled completions: wait once for the latest one due before its deadline.
    let mut until = None::<Instant>;
    for r in reqs.iter_mut() {
        let Some(at) = r.done_at else { continue };
        if at > r.deadline {
            r.result = Some(Err(timed_out(r.dev, op_name(&r.op), r.timeout)));
            r.done_at = Some(r.deadline);
        }
        let at = r.done_at.unwrap_or(at);
        if now.is_some_and(|now| at > now) {
            until = Some(until.map_or(at, |u: Instant| u.max(at)));
        }
    }
    if let Some(t) = until {
        sleep_until(t);
    }
    for r in reqs.iter() {
        report_done(r);
    }
}

/// A write shorter than [`LARGE_WRITE_BYTES`].
fn is_small_write(op: &IoOp<'_>) -> bool {
    matches!(op, IoOp::Write(b) if b.len() < LARGE_WRITE_BYTES)
}

/// Tell a device that one of its IOs finished (reads and writes; see [`BlockDev::io_done`]).
fn report_done(r: &IoReq<'_>) {
    let write = match r.op {
        IoOp::Read(_) => false,
        IoOp::Write(_) => true,
        IoOp::Flush => return,
    };
    let Some(at) = r.done_at else { return };
    let started = r.deadline.checked_sub(r.timeout).unwrap_or(r.deadline);
    let ok = matches!(r.result, Some(Ok(())));
    r.dev
        .io_done(write, r.op.len(), at.saturating_duration_since(started), ok);
}

/// Run one IO (see [`run`]); a late IO of the kernel's is simply waited for.
pub fn run_one(dev: &dyn BlockDev, offset: u64, op: IoOp<'_>) -> io::Result<()> {
    let mut r = [IoReq::new(dev, offset, op, member_timeout(dev))];
    run(&mut r, &mut |_| {});
    let [mut r] = r;
    r.take_result()
}

/// Flush every device of `devs` in one batch, each within its member timeout: one result
/// per device, in order. A flush that misses its deadline is told to `on_late` (its index)
/// while the others go on, and its result says it timed out.
pub fn flush_each(devs: &[&dyn BlockDev], on_late: &mut dyn FnMut(usize)) -> Vec<io::Result<()>> {
    let mut reqs: Vec<IoReq<'_>> = devs
        .iter()
        .map(|&d| IoReq::new(d, 0, IoOp::Flush, member_timeout(d)))
        .collect();
    run(&mut reqs, on_late);
    reqs.iter_mut().map(IoReq::take_result).collect()
}

fn op_name(op: &IoOp<'_>) -> &'static str {
    match op {
        IoOp::Read(_) => "read",
        IoOp::Write(_) => "write",
        IoOp::Flush => "flush",
    }
}

/// A blocking device's IO in the calling thread.
fn blocking(r: &mut IoReq<'_>) -> io::Result<()> {
    match &mut r.op {
        IoOp::Read(b) => r.dev.read_at(b, r.offset),
        IoOp::Write(b) => r.dev.write_at(b, r.offset),
        IoOp::Flush => r.dev.flush(),
    }
}

/// Start an asynchronous IO; Some(slot) if it is still pending.
fn start_async(dev: &dyn AsyncDev, r: &mut IoReq<'_>) -> Option<Arc<Slot>> {
    let (ptr, len, kind) = match &mut r.op {
        IoOp::Read(b) => (b.as_mut_ptr(), b.len(), AsyncKind::Read(b.len())),
        IoOp::Write(b) => (b.as_ptr() as *mut u8, b.len(), AsyncKind::Write(b.len())),
        IoOp::Flush => (std::ptr::NonNull::dangling().as_ptr(), 0, AsyncKind::Flush),
    };
    let slot = Arc::new(Slot {
        st: Mutex::new(SlotState {
            ptr,
            len,
            result: None,
        }),
        waiter: std::thread::current(),
    });
    let io = AsyncIo {
        offset: r.offset,
        kind,
        slot: Arc::clone(&slot),
    };
    match dev.start(io) {
        Started::Done(res, at) => {
            revoke(&slot);
            r.finish(res, at.unwrap_or_else(Instant::now));
            None
        }
        Started::Pending => Some(slot),
    }
}

/// Revoke the device's access to the caller's memory.
fn revoke(slot: &Slot) {
    crate::locks::lock(&slot.st).ptr = std::ptr::null_mut();
}

/// Wait for pending asynchronous IOs, each until its deadline; revoke every one.
fn wait_async(reqs: &mut [IoReq<'_>], mut pending: Vec<(usize, Arc<Slot>)>) {
    while !pending.is_empty() {
        let now = Instant::now();
        pending.retain(|(i, slot)| {
            let mut st = crate::locks::lock(&slot.st);
            let r = &mut reqs[*i];
            if let Some((res, at)) = st.result.take() {
                st.ptr = std::ptr::null_mut();
                r.finish(res, at);
                return false;
            }
            if now >= r.deadline {
                st.ptr = std::ptr::null_mut();
                st.result = Some((Err(io::Error::other("abandoned")), now));
                let e = timed_out(r.dev, op_name(&r.op), r.timeout);
                r.finish(Err(e), r.deadline);
                return false;
            }
            true
        });
        if let Some(next) = pending.iter().map(|(i, _)| reqs[*i].deadline).min() {
            let now = Instant::now();
            if next > now {
                std::thread::park_timeout(next - now);
            }
        }
    }
}

/// Sleep until `deadline` with a fine timer slack (the default 50 µs slack would add a
/// third to a 100 µs modelled latency).
pub(crate) fn sleep_until(deadline: Instant) {
    thread_local! {
        static FINE_SLACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    FINE_SLACK.with(|f| {
        if !f.get() {
            // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only changes this
            // thread's timer slack; no memory is passed.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
            f.set(true);
        }
    });
    loop {
        let now = Instant::now();
        if deadline <= now {
            return;
        }
        std::thread::sleep(deadline - now);
    }
}

#[cfg(test)]
mod lane_tests;
#[cfg(test)]
mod tests;
