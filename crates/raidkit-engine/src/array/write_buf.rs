//! A write's data on its way to the members: [`SharedBuf`], the write path's one owned
//! buffer type, and [`WriteData`], the view the write path passes down.
//!
//! A caller that owns its write's buffer (the NBD server's request buffer, lent to the
//! array: [`raidkit_nbd::PoolBuf`]) hands it to [`Array::write_shared`] as a
//! [`SharedBuf`]; a write queued behind for a write-mostly member then keeps a reference
//! to it instead of a copy, and the buffer goes back to its owner (the server's pool)
//! when the last reference is dropped. A caller with only a slice ([`Array::write`]:
//! FUSE, tools, tests) gets a copy where the queue needs one. The queue is charged each
//! buffer's whole [`SharedBuf::footprint`] once, however many writes hold it, so its byte
//! limit bounds the memory it keeps exactly.
//!
//! [`Array::write_shared`]: crate::Array::write_shared
//! [`Array::write`]: crate::Array::write

use std::sync::Arc;

/// Memory a [`SharedBuf`] can be made of.
pub trait BufOwner: Send + Sync + 'static {
    /// The data.
    fn bytes(&self) -> &[u8];
    /// Bytes of memory held (a reused buffer can hold more than its data): what keeping
    /// it costs.
    fn footprint(&self) -> usize;
}

impl BufOwner for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn footprint(&self) -> usize {
        self.capacity()
    }
}

impl BufOwner for raidkit_nbd::PoolBuf {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn footprint(&self) -> usize {
        self.capacity()
    }
}

/// Owned write data, shared by reference count: a range of one owner's bytes. Cloning or
/// slicing it copies no data.
#[derive(Clone)]
pub struct SharedBuf {
    owner: Arc<dyn BufOwner>,
    start: usize,
    len: usize,
}

impl SharedBuf {
    /// All of `owner`'s bytes.
    pub fn new(owner: impl BufOwner) -> SharedBuf {
        let len = owner.bytes().len();
        SharedBuf {
            owner: Arc::new(owner),
            start: 0,
            len,
        }
    }

    /// A copy of `data`.
    pub fn copy_of(data: &[u8]) -> SharedBuf {
        SharedBuf::new(data.to_vec())
    }

    /// `len` zeros (a fresh zeroed allocation, not touched until read).
    pub fn zeroed(len: usize) -> SharedBuf {
        SharedBuf::new(vec![0u8; len])
    }

    /// Bytes `[from, to)` of this buffer (clamped to it), sharing its memory.
    pub fn slice(&self, from: usize, to: usize) -> SharedBuf {
        let to = to.min(self.len);
        let from = from.min(to);
        SharedBuf {
            owner: Arc::clone(&self.owner),
            start: self.start + from,
            len: to - from,
        }
    }

    /// Bytes of memory held by the owner, whatever range of it this is.
    pub fn footprint(&self) -> usize {
        self.owner.footprint().max(self.owner.bytes().len())
    }

    /// The owner's identity: slices of one buffer share it.
    pub(crate) fn owner_id(&self) -> usize {
        Arc::as_ptr(&self.owner).cast::<u8>() as usize
    }
}

impl std::ops::Deref for SharedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.owner
            .bytes()
            .get(self.start..self.start + self.len)
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuf")
            .field("len", &self.len)
            .field("footprint", &self.footprint())
            .finish()
    }
}

/// The bytes of a write, borrowed for the write path, with the [`SharedBuf`] they are in
/// when the caller owns one.
#[derive(Clone, Copy)]
pub(crate) struct WriteData<'a> {
    bytes: &'a [u8],
    /// The owned buffer `bytes` is in, and where in it.
    shared: Option<(&'a SharedBuf, usize)>,
}

impl<'a> WriteData<'a> {
    /// Bytes the caller only lends for the call.
    pub(crate) fn borrowed(bytes: &'a [u8]) -> WriteData<'a> {
        WriteData {
            bytes,
            shared: None,
        }
    }

    /// All of an owned buffer.
    pub(crate) fn shared(buf: &'a SharedBuf) -> WriteData<'a> {
        WriteData {
            bytes: buf,
            shared: Some((buf, 0)),
        }
    }

    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Bytes `[from, to)` (in range: the write path cuts whole runs of the write).
    pub(crate) fn range(&self, from: usize, to: usize) -> WriteData<'a> {
        WriteData {
            bytes: &self.bytes[from..to],
            shared: self.shared.map(|(b, at)| (b, at + from)),
        }
    }

    /// The bytes in the caller's own buffer, for a write queued behind to keep without a
    /// copy. None if the caller only lends them, or if its buffer holds much more than
    /// these bytes (the queue is charged the whole buffer: a small write in a large
    /// pooled buffer is better copied).
    pub(crate) fn keep(&self) -> Option<SharedBuf> {
        let (b, at) = self.shared?;
        (b.footprint() <= 2 * self.bytes.len().max(4096))
            .then(|| b.slice(at, at + self.bytes.len()))
    }

    /// The bytes, owned: [`WriteData::keep`], else a copy.
    #[cfg(test)]
    fn owned(self) -> SharedBuf {
        self.keep()
            .unwrap_or_else(|| SharedBuf::copy_of(self.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_the_owner_and_small_pieces_of_big_buffers_are_copied() {
        let mut v = Vec::with_capacity(1 << 20);
        v.extend((0..1 << 20).map(|i| (i % 251) as u8));
        let b = SharedBuf::new(v);
        let s = b.slice(100, 200);
        assert_eq!(&s[..], &b[100..200]);
        assert_eq!(s.owner_id(), b.owner_id());
        assert_eq!(s.footprint(), 1 << 20);
        let d = WriteData::shared(&b).range(4096, 1 << 20);
        let kept = d.owned();
        assert_eq!(kept.owner_id(), b.owner_id(), "most of the buffer: shared");
        assert_eq!(&kept[..], d.bytes());
        let small = WriteData::shared(&b).range(0, 8192).owned();
        assert_ne!(small.owner_id(), b.owner_id(), "8 KiB of 1 MiB: copied");
        assert_eq!(&small[..], &b[..8192]);
        assert_eq!(small.footprint(), 8192);
        let borrowed = WriteData::borrowed(&b[..10]).owned();
        assert_eq!(&borrowed[..], &b[..10]);
        assert_eq!(b.slice(5, 3).len(), 0);
    }
}
