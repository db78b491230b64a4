//! A connection's request buffers, reused; and a write's buffer lent to the backend.
//!
//! A worker takes a buffer from its connection's [`BufPool`] for each request and puts it
//! back after the reply. A write's payload goes to the backend as a [`PoolBuf`]
//! ([`crate::Backend::write_buf`]): the backend may keep it past the request (a RAID
//! mirror queueing the write behind for a slow member, without a copy), and the buffer
//! goes back to its pool when the last holder drops it — or is freed, if the pool is full
//! or its connection is gone. The pool itself keeps at most [`KEEP_BUFS`] buffers of at
//! most [`KEEP_BUF`] bytes; buffers lent out are bounded by whoever keeps them (the
//! backend's own queue limit).

use crate::util::lock;
use std::sync::{Arc, Mutex, Weak};

/// Largest request buffer kept for reuse.
pub(crate) const KEEP_BUF: usize = 4 << 20;
/// Request buffers kept for reuse per connection.
pub(crate) const KEEP_BUFS: usize = 16;

/// Request buffers kept for reuse, last-in first-out so the ones in use stay in cache.
#[derive(Default)]
pub(crate) struct BufPool {
    bufs: Mutex<Vec<Vec<u8>>>,
}

impl BufPool {
    /// A kept buffer, or a new empty one.
    pub(crate) fn take(&self) -> Vec<u8> {
        lock(&self.bufs).pop().unwrap_or_default()
    }

    /// Keep `buf` for reuse if the pool has room and it is not too large; else free it.
    pub(crate) fn put(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > KEEP_BUF {
            return;
        }
        let mut bufs = lock(&self.bufs);
        if bufs.len() < KEEP_BUFS {
            bufs.push(buf);
        }
    }

    /// Free one kept buffer (a worker stops: keep the pool as small as the crew).
    pub(crate) fn shrink(&self) {
        lock(&self.bufs).pop();
    }

    /// Lend the first `len` bytes of `buf` (a write's payload) to the backend.
    /// (The buffer keeps its length, so reusing it for a larger request later fills no
    /// zeros.)
    pub(crate) fn lend(self: &Arc<Self>, buf: Vec<u8>, len: usize) -> PoolBuf {
        PoolBuf {
            len: len.min(buf.len()),
            buf,
            home: Arc::downgrade(self),
        }
    }

    /// Buffers kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        lock(&self.bufs).len()
    }
}

/// A write's payload, owned: the connection's request buffer, lent to the backend. It
/// goes back to the connection's pool when dropped (see the module docs).
pub struct PoolBuf {
    buf: Vec<u8>,
    /// The payload: `buf[..len]`.
    len: usize,
    home: Weak<BufPool>,
}

impl PoolBuf {
    /// `data` as a payload of no pool (freed when dropped): for callers outside a
    /// connection, such as tests.
    pub fn from_vec(data: Vec<u8>) -> PoolBuf {
        PoolBuf {
            len: data.len(),
            buf: data,
            home: Weak::new(),
        }
    }

    /// Bytes of memory the buffer holds (at least its length: a reused buffer keeps the
    /// size of the largest request it held). What keeping it costs.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

impl std::ops::Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf")
            .field("len", &self.len)
            .field("capacity", &self.buf.capacity())
            .finish()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.home.upgrade() {
            pool.put(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_comes_back_when_its_last_holder_drops_it() {
        let pool = Arc::new(BufPool::default());
        let mut b = pool.take();
        b.resize(1 << 20, 7);
        let lent = pool.lend(b, 4096);
        assert_eq!((lent.len(), lent.capacity()), (4096, 1 << 20));
        assert_eq!(pool.kept(), 0);
        // Kept by a queue on another thread, dropped there.
        std::thread::spawn(move || drop(lent)).join().unwrap();
        assert_eq!(pool.kept(), 1);
        let again = pool.take();
        assert_eq!(again.capacity(), 1 << 20, "the same buffer is reused");
    }

    #[test]
    fn the_pool_stays_bounded_and_a_buffer_outliving_it_is_freed() {
        let pool = Arc::new(BufPool::default());
        let lent: Vec<PoolBuf> = (0..KEEP_BUFS + 4)
            .map(|_| pool.lend(vec![1u8; 4096], 4096))
            .collect();
        let too_big = pool.lend(vec![0u8; KEEP_BUF + 1], 1);
        drop(too_big);
        assert_eq!(pool.kept(), 0, "a buffer over KEEP_BUF is not kept");
        drop(lent);
        assert_eq!(pool.kept(), KEEP_BUFS);
        let late = pool.lend(pool.take(), 10);
        drop(pool);
        drop(late); // its connection is gone: freed, no panic
        let orphan = PoolBuf::from_vec(vec![5u8; 3]);
        assert_eq!(&orphan[..], &[5, 5, 5]);
    }
}
