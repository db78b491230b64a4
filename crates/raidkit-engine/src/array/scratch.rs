//! Reused buffers for parity and stripe write-outs: no allocation, zeroing or fresh pages
//! per stripe on the hot paths.

use crate::array::stripe::parity_into;
use crate::locks::lock;
use raidkit_layout::StripeLayout;
use std::sync::Mutex;

/// Buffers reused by full-stripe writes (P/Q) and stripe-cache write-outs (data and
/// P/Q), last-in first-out (the most recently used are the ones still in cache).
/// Buffers larger than [`SMALL_BYTES`] (or past a thread's share), and the bytes they hold.
static SCRATCH: Mutex<(Vec<Vec<u8>>, usize)> = Mutex::new((Vec::new(), 0));

/// Scratch buffers handed back to [`SCRATCH`] when dropped (on every return path).
pub(crate) struct ScratchBufs(pub(crate) Vec<Vec<u8>>);

impl std::ops::Deref for ScratchBufs {
    type Target = Vec<Vec<u8>>;
    fn deref(&self) -> &Vec<Vec<u8>> {
        &self.0
    }
}

impl std::ops::DerefMut for ScratchBufs {
    fn deref_mut(&mut self) -> &mut Vec<Vec<u8>> {
        &mut self.0
    }
}

impl Drop for ScratchBufs {
    fn drop(&mut self) {
        for v in self.0.drain(..) {
            scratch_put(v);
        }
    }
}

/// [`compute_parity`] into reused scratch buffers (hand them back with [`scratch_put`]).
pub(crate) fn compute_parity_scratch(
    lay: &StripeLayout,
    data: &[Vec<u8>],
    len: usize,
) -> (Vec<u8>, Vec<u8>) {
    let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut p = scratch_take();
    let mut q = scratch_take();
    // The generators overwrite every byte: only growth needs filling.
    p.resize(len, 0);
    q.resize(if lay.q.is_some() { len } else { 0 }, 0);
    parity_into(lay, &refs, &mut p, &mut q);
    (p, q)
}

/// Buffers up to this capacity are kept per thread (small parity writes take and give
/// back several per write: through the shared pool's mutex that was contended between
/// writers, and its size was summed on every return).
const SMALL_BYTES: usize = 64 << 10;
/// Small buffers kept per thread.
const SMALL_KEPT: usize = 16;
/// Bytes the shared pool keeps: a write-out's data and P/Q buffers (one chunk each) for
/// several concurrent writers.
const SHARED_BYTES: usize = 32 << 20;

thread_local! {
    static SMALL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A reused buffer (any length, stale contents: callers size it and use only the bytes a
/// successful read or a computation has written since), or an empty one.
pub(crate) fn scratch_take() -> Vec<u8> {
    if let Some(v) = SMALL.with(|s| s.borrow_mut().pop()) {
        return v;
    }
    let mut shared = lock(&SCRATCH);
    match shared.0.pop() {
        Some(v) => {
            shared.1 = shared.1.saturating_sub(v.capacity());
            v
        }
        None => Vec::new(),
    }
}

/// `n` reused buffers of `len` bytes each (stale contents, as [`scratch_take`]), handed
/// back when dropped.
pub(crate) fn scratch_blocks(n: usize, len: usize) -> ScratchBufs {
    ScratchBufs((0..n).map(|_| scratch_sized(len)).collect())
}

/// A reused buffer of `len` bytes (stale contents, as [`scratch_take`]).
pub(crate) fn scratch_sized(len: usize) -> Vec<u8> {
    let mut v = scratch_take();
    v.resize(len, 0);
    v
}

/// Give a buffer back for reuse.
pub(crate) fn scratch_put(v: Vec<u8>) {
    if v.capacity() == 0 {
        return;
    }
    let v = if v.capacity() <= SMALL_BYTES {
        // During thread teardown the thread's pool may be gone: the buffer is freed then.
        match SMALL.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SMALL_KEPT {
                s.push(v);
                None
            } else {
                Some(v)
            }
        }) {
            Ok(None) => return,
            Ok(Some(v)) => v,
            Err(_) => return,
        }
    } else {
        v
    };
    let mut shared = lock(&SCRATCH);
    if shared.1 + v.capacity() <= SHARED_BYTES {
        shared.1 += v.capacity();
        shared.0.push(v);
    }
}
