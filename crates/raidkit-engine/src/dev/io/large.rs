//! Large writes: where the large writes of a batch that has several go — the writer
//! lanes, this thread's io_uring, or inline — and the count of such batches in progress
//! that decides it by default.

use super::{uses_io_uring, IoOp, IoReq, Submission};
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Writes of at least this many bytes are large: copying them into a file takes long
/// enough (tens of microseconds and more) that handing them to a writer lane pays.
pub const LARGE_WRITE_BYTES: usize = 64 << 10;

/// Where the large writes of a batch with several of them go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LargeWrites {
    /// The default: the writer lanes while a core is free for them, else inline (see
    /// [`LargeBatch`]).
    Auto,
    /// Always the writer lanes: one thread per lane, a file always on the same lane.
    Lanes,
    /// This thread's io_uring (the kernel's own worker threads for buffered writes).
    Ring,
    /// Written inline, one after another, by the calling thread.
    Inline,
}

/// How large writes are carried out: `RAIDKIT_LARGE_WRITES=auto|lanes|ring|inline` (for
/// measurements; default auto).
pub(super) fn large_write_path() -> LargeWrites {
    static PATH: std::sync::OnceLock<LargeWrites> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| match std::env::var("RAIDKIT_LARGE_WRITES").as_deref() {
        Ok("ring") if uses_io_uring() => LargeWrites::Ring,
        Ok("inline") => LargeWrites::Inline,
        Ok("lanes") => LargeWrites::Lanes,
        _ => LargeWrites::Auto,
    })
}

/// Can the large writes of a batch that has several go to the writer lanes (each file's
/// copy on its lane's thread, all files at once)? Else this thread writes them (or its
/// io_uring does). Under the default a given batch may still write inline, when every
/// core is already busy with one ([`LargeBatch`]).
pub fn large_writes_in_lanes() -> bool {
    matches!(large_write_path(), LargeWrites::Lanes | LargeWrites::Auto)
}

/// Batches with several large writes in progress in this process (laned or inline).
static LARGE_BATCHES: AtomicUsize = AtomicUsize::new(0);

/// One batch with several large writes, counted while it runs.
///
/// The lanes pay when they put idle cores to work: one writer (a QD1 stream, a single
/// full-stripe writer) gets its members' copies done at once on several cores. When
/// other batches already keep the cores busy (fewer than two cores per batch in
/// progress, this one counted), a hand-off to a lane only adds context switches, and the
/// batch writes inline (measured on 2 cores, RAID6 full-stripe writes against the
/// members' raw bandwidth: two writers 1.00× this way, 0.86× always laned, 0.95× always
/// inline; one writer 0.74×, 0.72×, 0.52×; see docs/BENCHMARKS.md).
pub(super) struct LargeBatch;

impl LargeBatch {
    /// Count a batch in; whether its large writes go to the lanes, and the cores it can
    /// count on (its share of them, with the batches already in progress).
    fn enter() -> (LargeBatch, bool, usize) {
        let before = LARGE_BATCHES.fetch_add(1, Ordering::AcqRel);
        let cores = cores();
        let lanes = lanes_for(large_write_path(), before, cores);
        (LargeBatch, lanes, cores / before.saturating_add(1))
    }
}

/// Whether a batch's large writes go to the lanes, given the path chosen and how many
/// other such batches are in progress on how many cores: under `Auto`, while every
/// batch in progress (this one counted) can have two cores.
pub(super) fn lanes_for(path: LargeWrites, others_in_progress: usize, cores: usize) -> bool {
    match path {
        LargeWrites::Lanes => true,
        LargeWrites::Auto => others_in_progress.saturating_add(1).saturating_mul(2) <= cores,
        LargeWrites::Ring | LargeWrites::Inline => false,
    }
}

impl Drop for LargeBatch {
    fn drop(&mut self) {
        LARGE_BATCHES.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The CPUs this process may run on (at least 1), read once.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

pub(super) fn is_large_write(op: &IoOp<'_>) -> bool {
    matches!(op, IoOp::Write(b) if b.len() >= LARGE_WRITE_BYTES)
}

/// How many large descriptor writes the batch has: the ones the lanes or the ring can
/// take. An asynchronous device's write (a network member's) is not counted: it is sent
/// before them and its server does its work meanwhile, so a mirror of one file and one
/// remote writes its file inline rather than handing it to a lane (two wake-ups and two
/// context switches a write, for no core gained on a busy machine).
pub(super) fn large_writes(reqs: &[IoReq<'_>]) -> usize {
    reqs.iter()
        .filter(|r| is_large_write(&r.op) && matches!(r.dev.submission(), Submission::Fd { .. }))
        .count()
}

/// The batch's large descriptor writes (index, descriptor), in order, if it has several
/// and they go to the writer lanes; each within its device's bounds. The batch is
/// counted (see [`LargeBatch`]) until the returned guard drops.
pub(super) fn large_writes_to_lanes(
    reqs: &[IoReq<'_>],
) -> (Option<LargeBatch>, Vec<(usize, RawFd)>) {
    if !large_writes_in_lanes() || large_writes(reqs) < 2 {
        return (None, Vec::new());
    }
    let (batch, lanes, batch_cores) = LargeBatch::enter();
    if !lanes {
        return (Some(batch), Vec::new());
    }
    let mut laned: Vec<(usize, RawFd)> = reqs
        .iter()
        .enumerate()
        .filter(|(_, r)| is_large_write(&r.op))
        .filter_map(|(i, r)| match r.dev.submission() {
            Submission::Fd { fd, .. } => {
                let size = r.dev.size_bytes();
                crate::dev::check_bounds("write", r.offset, r.op.len(), size)
                    .is_ok()
                    .then_some((i, fd))
            }
            _ => None,
        })
        .collect();
    if large_write_path() == LargeWrites::Auto {
        // Only writes to files in memory: the caller's own write is a blocking call that
        // no deadline interrupts (a laned one is waited for until the member's deadline,
        // then the member is failed), and a write to memory does not wait on a device.
        keep_callers_share(&mut laned, batch_cores, |i| {
            reqs[i].dev.submission().in_memory()
        });
    }
    (Some(batch), laned)
}

/// Take the calling thread's share off the laned writes (it writes them inline while the
/// lanes write the rest, instead of sleeping until they are done): the batch's writes
/// spread over its `batch_cores` threads, the caller one of them (on 2 cores, two of a
/// mirrored 1 MiB write's four 512 KiB copies). Each lane hand-off costs a wake-up and
/// two context switches; the caller's share costs none. Only writes to a file no other
/// laned write of the batch goes to are kept, so one file's writes still go in order
/// through its lane, and only those `keepable` says (by request index) may be. At least
/// one write stays laned (the batch was given lanes to overlap its copies).
pub(super) fn keep_callers_share(
    laned: &mut Vec<(usize, RawFd)>,
    batch_cores: usize,
    keepable: impl Fn(usize) -> bool,
) {
    let n = laned.len();
    if n < 2 {
        return;
    }
    let share = n.div_ceil(batch_cores.max(1)).min(n - 1);
    let mut kept = 0;
    let mut k = n;
    while k > 0 && kept < share {
        k -= 1;
        let (i, fd) = laned[k];
        if keepable(i) && laned.iter().filter(|l| l.1 == fd).count() == 1 {
            laned.remove(k);
            kept += 1;
        }
    }
}
