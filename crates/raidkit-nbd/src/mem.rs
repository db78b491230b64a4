//! An in-memory backend (tests, demos, fuzzing).

use crate::{Backend, DEFAULT_MAX_PAYLOAD};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// An in-memory backend (tests, demos). Counts flushes and writes.
#[derive(Debug)]
pub struct MemBackend {
    data: RwLock<Vec<u8>>,
    read_only: bool,
    block_sizes: (u32, u32, u32),
    fast_zero: bool,
    /// Number of `flush` calls (including FUA writes).
    pub flushes: AtomicU64,
    /// Number of `write` calls.
    pub writes: AtomicU64,
}

impl MemBackend {
    /// A zero-filled backend of `size` bytes (block sizes 512 / 4096 / 32 MiB).
    pub fn new(size: usize, read_only: bool) -> MemBackend {
        MemBackend {
            data: RwLock::new(vec![0u8; size]),
            read_only,
            block_sizes: (512, 4096, DEFAULT_MAX_PAYLOAD),
            fast_zero: true,
            flushes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }
    /// Set the block sizes reported.
    pub fn with_block_sizes(mut self, min: u32, pref: u32, max: u32) -> MemBackend {
        self.block_sizes = (min, pref, max);
        self
    }
    /// Set whether write zeroes counts as fast.
    pub fn with_fast_zero(mut self, fast: bool) -> MemBackend {
        self.fast_zero = fast;
        self
    }
    /// A copy of the contents.
    pub fn contents(&self) -> Vec<u8> {
        self.data.read().map(|d| d.clone()).unwrap_or_default()
    }
    fn range(&self, offset: u64, len: u64) -> io::Result<std::ops::Range<usize>> {
        let start = usize::try_from(offset).map_err(|_| einval())?;
        let len = usize::try_from(len).map_err(|_| einval())?;
        let end = start.checked_add(len).ok_or_else(einval)?;
        Ok(start..end)
    }
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl Backend for MemBackend {
    fn size(&self) -> u64 {
        self.data.read().map(|d| d.len() as u64).unwrap_or(0)
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let r = self.range(offset, buf.len() as u64)?;
        let d = self.data.read().map_err(|_| io::Error::other("poisoned"))?;
        buf.copy_from_slice(d.get(r).ok_or_else(einval)?);
        Ok(())
    }
    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> io::Result<()> {
        let r = self.range(offset, buf.len() as u64)?;
        let mut d = self
            .data
            .write()
            .map_err(|_| io::Error::other("poisoned"))?;
        d.get_mut(r).ok_or_else(einval)?.copy_from_slice(buf);
        self.writes.fetch_add(1, Ordering::Relaxed);
        if fua {
            self.flushes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn trim(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, _no_hole: bool) -> io::Result<()> {
        let r = self.range(offset, len)?;
        let mut d = self
            .data
            .write()
            .map_err(|_| io::Error::other("poisoned"))?;
        d.get_mut(r).ok_or_else(einval)?.fill(0);
        Ok(())
    }
    fn block_sizes(&self) -> (u32, u32, u32) {
        self.block_sizes
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn can_fast_zero(&self) -> bool {
        self.fast_zero
    }
    fn description(&self) -> String {
        "in-memory disk".into()
    }
}
