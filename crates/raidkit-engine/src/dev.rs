//! Member devices: plain files and block devices, accessed with positioned IO.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A member device: a random-access store of bytes. Implementations must be usable from
/// several threads at once (positioned IO, no shared cursor).
pub trait BlockDev: Send + Sync {
    /// Read exactly `buf.len()` bytes at byte `offset`. Reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `buf` at byte `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Size in bytes.
    fn size_bytes(&self) -> u64;
    /// Logical block size in bytes (512 or 4096).
    fn logical_block_size(&self) -> u32 {
        512
    }
    /// Human-readable name (the path).
    fn name(&self) -> &str;
    /// True if `[offset, offset+len)` is known to read as zeros without storing data
    /// (a hole in a sparse file). Conservative: false when unknown.
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        let _ = (offset, len);
        false
    }
    /// Give back storage for `[offset, offset+len)` so it reads as zeros, if possible.
    /// Returns Ok(false) if the device cannot do it (caller then writes zeros).
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        let _ = (offset, len);
        Ok(false)
    }
}

/// A file or block device opened by path.
#[derive(Debug)]
pub struct FileDev {
    file: File,
    name: String,
    path: PathBuf,
    size: u64,
    lbs: u32,
    is_block: bool,
}

// ioctl numbers (linux/fs.h): BLKGETSIZE64 = _IOR(0x12, 114, size_t), BLKSSZGET = _IO(0x12, 104).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;

impl FileDev {
    /// Open `path` for reading (and writing if `write`).
    pub fn open(path: &Path, write: bool) -> io::Result<FileDev> {
        let mut oo = OpenOptions::new();
        oo.read(true).write(write);
        oo.custom_flags(libc::O_CLOEXEC);
        let file = oo.open(path)?;
        let meta = file.metadata()?;
        let is_block = meta.file_type().is_block_device();
        let (size, lbs) = if is_block {
            let mut sz: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a
            // live, properly aligned u64; the fd is valid for the lifetime of `file`.
            let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut sz as *mut u64) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut ss: libc::c_int = 512;
            // SAFETY: BLKSSZGET writes one int through the pointer, which points to a live int.
            let r =
                unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut ss as *mut libc::c_int) };
            let lbs = if r == 0 && ss > 0 { ss as u32 } else { 512 };
            (sz, lbs)
        } else if meta.file_type().is_file() {
            (meta.len(), 512)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or block device",
            ));
        };
        Ok(FileDev {
            file,
            name: path.display().to_string(),
            path: path.to_path_buf(),
            size,
            lbs,
            is_block,
        })
    }

    /// The path this device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True for a block device, false for a regular file.
    pub fn is_block_device(&self) -> bool {
        self.is_block
    }
}

impl BlockDev for FileDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "offset overflow"))?;
        if end > self.size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {}..{} past the end ({} bytes)",
                    offset, end, self.size
                ),
            ));
        }
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "offset overflow"))?;
        if end > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "write of {}..{} past the end ({} bytes)",
                    offset, end, self.size
                ),
            ));
        }
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn size_bytes(&self) -> u64 {
        self.size
    }
    fn logical_block_size(&self) -> u32 {
        self.lbs
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        if self.is_block || len == 0 {
            return false;
        }
        let Ok(off) = libc::off_t::try_from(offset) else {
            return false;
        };
        // SAFETY: lseek on a valid fd has no memory effects; SEEK_DATA only moves the
        // file position, which this type never relies on (all IO is positioned).
        let next = unsafe { libc::lseek(self.file.as_raw_fd(), off, libc::SEEK_DATA) };
        if next < 0 {
            // ENXIO: no data at or after offset → the rest is a hole.
            return io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
        }
        (next as u64) >= offset.saturating_add(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        if self.is_block {
            return Ok(false);
        }
        let (Ok(off), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Ok(false);
        };
        // SAFETY: fallocate on a valid fd with in-range offsets; no memory is touched.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                l,
            )
        };
        Ok(r == 0)
    }
}

/// An in-memory device, for tests and benchmarks.
#[derive(Debug)]
pub struct MemDev {
    data: std::sync::RwLock<Vec<u8>>,
    name: String,
}

impl MemDev {
    /// A zero-filled device of `size` bytes.
    pub fn new(name: &str, size: u64) -> MemDev {
        MemDev {
            data: std::sync::RwLock::new(vec![0u8; size as usize]),
            name: name.to_string(),
        }
    }
    /// A copy of the contents.
    pub fn contents(&self) -> Vec<u8> {
        match self.data.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

impl BlockDev for MemDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let g = self.data.read().map_err(|_| io::Error::other("poisoned"))?;
        let o = offset as usize;
        let src = g
            .get(o..o.saturating_add(buf.len()))
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past end"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut g = self
            .data
            .write()
            .map_err(|_| io::Error::other("poisoned"))?;
        let o = offset as usize;
        let dst = g
            .get_mut(o..o.saturating_add(buf.len()))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past end"))?;
        dst.copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn size_bytes(&self) -> u64 {
        match self.data.read() {
            Ok(g) => g.len() as u64,
            Err(p) => p.into_inner().len() as u64,
        }
    }
    fn name(&self) -> &str {
        &self.name
    }
}
