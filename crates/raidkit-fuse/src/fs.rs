//! The FUSE filesystem: a root directory holding one regular file, the array.
//!
//! Inode 1 is the directory, inode 2 the array file. The file's size is the array's size
//! (which only a reshape of the running array changes): truncating to another size fails
//! with `EINVAL` (as `ftruncate` on a block device does), opening with `O_TRUNC`
//! truncates nothing (as on a block device, so `cp`, `dd` and `>` write an image over the
//! array), writing at or past the end fails with `ENOSPC`, a write that crosses the end
//! is cut short there (a direct-IO one fails with `ENOSPC`: the kernel would report its
//! short count as `EIO`). Nothing can be created, removed or renamed (`EPERM`; `EROFS` on
//! a read-only mount).

use crate::state::{FallocError, Shared};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::cell::RefCell;
use std::ffi::OsStr;
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Inode of the directory.
pub(crate) const DIR_INO: INodeNo = INodeNo::ROOT;
/// Inode of the array file.
pub(crate) const FILE_INO: INodeNo = INodeNo(2);
/// Largest request the kernel may send (`max_write`, and reads are capped to `max_pages`).
pub(crate) const MAX_IO: u32 = 1 << 20;
/// How long the kernel may cache attributes and names. The size changes only with a
/// reshape of the running array; mtime follows writes, which invalidate the kernel's
/// attributes anyway.
const TTL: Duration = Duration::from_secs(1);
/// Block size reported by stat and statfs.
const BLKSIZE: u32 = 4096;

thread_local! {
    /// Per-thread read buffer, reused so a 1 MiB read does not fault in fresh pages.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The filesystem handed to fuser. All state is shared with the idle cleaner and the
/// stop handle.
pub(crate) struct ArrayFs {
    pub(crate) shared: Arc<Shared>,
}

impl ArrayFs {
    fn file_attr(&self) -> FileAttr {
        let s = &self.shared;
        let perm = if s.read_only { 0o400 } else { 0o600 };
        let size = s.size();
        FileAttr {
            ino: FILE_INO,
            size,
            blocks: size.div_ceil(512),
            atime: s.started,
            mtime: s.mtime(),
            ctime: s.mtime(),
            crtime: s.started,
            kind: FileType::RegularFile,
            perm,
            nlink: 1,
            uid: s.uid,
            gid: s.gid,
            rdev: 0,
            blksize: BLKSIZE,
            flags: 0,
        }
    }

    fn dir_attr(&self) -> FileAttr {
        let s = &self.shared;
        FileAttr {
            ino: DIR_INO,
            size: 0,
            blocks: 0,
            atime: s.started,
            mtime: s.started,
            ctime: s.started,
            crtime: s.started,
            kind: FileType::Directory,
            perm: if s.read_only { 0o500 } else { 0o700 },
            nlink: 2,
            uid: s.uid,
            gid: s.gid,
            rdev: 0,
            blksize: BLKSIZE,
            flags: 0,
        }
    }

    fn attr_of(&self, ino: INodeNo) -> Option<FileAttr> {
        match ino {
            DIR_INO => Some(self.dir_attr()),
            FILE_INO => Some(self.file_attr()),
            _ => None,
        }
    }

    /// The errno for anything that would change the directory.
    fn no_change(&self) -> Errno {
        if self.shared.read_only {
            Errno::EROFS
        } else {
            Errno::EPERM
        }
    }

    fn flush_reply(&self, reply: ReplyEmpty) {
        match self.shared.flush_if_written() {
            Ok(()) => reply.ok(),
            Err(e) => {
                self.shared.report("flush", 0, 0, &e);
                reply.error(Errno::EIO)
            }
        }
    }
}

impl Filesystem for ArrayFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // 1 MiB requests (max_pages = 256, the kernel's default limit). Best effort: the
        // kernel may allow less, then we take what it offers.
        if let Err(nearest) = config.set_max_write(MAX_IO) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(MAX_IO) {
            let _ = config.set_max_readahead(nearest);
        }
        let _ = config.set_max_background(64);
        // Several direct-IO requests of one read()/write() in flight at once (loop devices
        // with --direct-io, O_DIRECT users).
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        // `open(O_TRUNC)` (cp, dd, a shell's `>`) comes to `open` instead of as a truncate
        // to 0 that fails: it truncates nothing, as on a block device.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != DIR_INO {
            return reply.error(Errno::ENOTDIR);
        }
        if name == self.shared.file_name.as_os_str() {
            reply.entry(&TTL, &self.file_attr(), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(attr) = self.attr_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(new) = size {
            if ino == DIR_INO {
                return reply.error(Errno::EISDIR);
            }
            if self.shared.read_only {
                return reply.error(Errno::EROFS);
            }
            // Same size: a no-op (e.g. `truncate -s <size>`); any other size: the array
            // cannot grow or shrink, like a block device.
            if new != attr.size {
                return reply.error(Errno::EINVAL);
            }
        }
        // Owner and mode are fixed: only "changes" to the current values are accepted.
        let mode_change = mode.is_some_and(|m| (m & 0o7777) as u16 != attr.perm);
        if mode_change || uid.is_some_and(|u| u != attr.uid) || gid.is_some_and(|g| g != attr.gid) {
            return reply.error(self.no_change());
        }
        // Timestamps: accepted and ignored (they are the mount's and the last write's).
        reply.attr(&TTL, &attr)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino == DIR_INO {
            return reply.error(Errno::EISDIR);
        }
        if ino != FILE_INO {
            return reply.error(Errno::ENOENT);
        }
        if self.shared.read_only && flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        // O_TRUNC is ignored: the size is fixed (see `init`).
        let fl = if self.shared.direct_io {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else {
            // The array changes only through this mount, so cached pages stay valid
            // across opens.
            FopenFlags::FOPEN_KEEP_CACHE
        };
        reply.opened(FileHandle(0), fl)
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        let total = self.shared.size();
        if offset >= total || size == 0 {
            return reply.data(&[]);
        }
        let n = (u64::from(size.min(MAX_IO))).min(total - offset) as usize;
        READ_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < n {
                buf.resize(n, 0);
            }
            let b = &mut buf[..n];
            match self.shared.array.read(offset, b) {
                Ok(()) => reply.data(b),
                Err(e) => {
                    self.shared.report("read", offset, n as u64, &e);
                    reply.error(Errno::EIO)
                }
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        if self.shared.read_only {
            return reply.error(Errno::EROFS);
        }
        let total = self.shared.size();
        if data.is_empty() {
            return reply.written(0);
        }
        if offset >= total {
            return reply.error(Errno::ENOSPC);
        }
        let crosses_end = data.len() as u64 > total - offset;
        // The kernel turns a short direct-IO write (a file opened O_DIRECT, or every file
        // of a --direct-io mount) into EIO, as if the array had failed: say ENOSPC, and
        // write nothing of this request.
        if crosses_end && (self.shared.direct_io || flags.0 & libc::O_DIRECT != 0) {
            return reply.error(Errno::ENOSPC);
        }
        // Cut at the end of the array: the caller sees a short write, then ENOSPC.
        let n = (data.len() as u64).min(total - offset) as usize;
        match self.shared.write(offset, &data[..n]) {
            Ok(()) => reply.written(n as u32),
            Err(e) => {
                self.shared.report("write", offset, n as u64, &e);
                reply.error(Errno::EIO)
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(): make what was written durable, as closing a block device does.
        self.flush_reply(reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.flush_reply(reply)
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != FILE_INO {
            return reply.error(Errno::EISDIR);
        }
        match self.shared.fallocate(offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(FallocError::Errno(e)) => reply.error(e),
            Err(FallocError::Engine(e)) => {
                self.shared.report("zeroing", offset, length, &e);
                reply.error(Errno::EIO)
            }
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino != DIR_INO {
            return reply.error(Errno::ENOTDIR);
        }
        reply.opened(FileHandle(0), FopenFlags::empty())
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != DIR_INO {
            return reply.error(Errno::ENOTDIR);
        }
        let entries: [(INodeNo, FileType, &OsStr); 3] = [
            (DIR_INO, FileType::Directory, OsStr::new(".")),
            (DIR_INO, FileType::Directory, OsStr::new("..")),
            (
                FILE_INO,
                FileType::RegularFile,
                self.shared.file_name.as_os_str(),
            ),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            // The offset given with an entry is where the next readdir continues.
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.shared.size() / u64::from(BLKSIZE);
        reply.statfs(blocks, 0, 0, 2, 0, BLKSIZE, 255, BLKSIZE)
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if self.attr_of(ino).is_none() {
            return reply.error(Errno::ENOENT);
        }
        if self.shared.read_only && mask.contains(AccessFlags::W_OK) {
            return reply.error(Errno::EROFS);
        }
        reply.ok()
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_change())
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_change())
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.no_change())
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.no_change())
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(self.no_change())
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(self.no_change())
    }
}
