//! Reused buffers for parity and stripe write-outs: no allocation, zeroing or fresh pages
//! per stripe on the hot paths.

use crate::array::stripe::parity_into;
use crate::locks::lock;
use raidkit_layout::StripeLayout;
use std::sync::Mutex;

/// Buffers reused by full-stripe writes (P/Q) and stripe-cache write-outs (data and
/// P/Q), last-in first-out (the most recently used are the ones still in cache).
pub(crate) static SCRATCH: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

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

pub(crate) fn scratch_take() -> Vec<u8> {
    lock(&SCRATCH).pop().unwrap_or_default()
}

pub(crate) fn scratch_put(v: Vec<u8>) {
    // Up to 32 MiB kept: a write-out's data and P/Q buffers (one chunk each) for several
    // concurrent writers.
    let mut s = lock(&SCRATCH);
    let kept: usize = s.iter().map(Vec::capacity).sum();
    if v.capacity() > 0 && kept + v.capacity() <= (32 << 20) {
        s.push(v);
    }
}
