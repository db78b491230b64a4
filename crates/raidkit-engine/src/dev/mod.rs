//! Member devices: plain files and block devices, accessed with positioned IO; network
//! members ([`nbd`]: NBD exports); [`io`]: the member IO layer (batches, io_uring or IO
//! threads, deadlines). [`open_member`] is the one place a member named by the user is
//! opened.

pub mod fault;
pub mod io;
pub mod nbd;

use std::fs::{File, OpenOptions};
use std::io as stdio;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A member device: a random-access store of bytes. Implementations must be usable from
/// several threads at once (positioned IO, no shared cursor).
pub trait BlockDev: Send + Sync {
    /// Read exactly `buf.len()` bytes at byte `offset`. Reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> stdio::Result<()>;
    /// Write all of `buf` at byte `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> stdio::Result<()>;
    /// Make every completed write durable.
    fn flush(&self) -> stdio::Result<()>;
    /// Size in bytes.
    fn size_bytes(&self) -> u64;
    /// Logical block size in bytes (512 or 4096).
    fn logical_block_size(&self) -> u32 {
        512
    }
    /// Human-readable name (the path).
    fn name(&self) -> &str;
    /// What this device was opened from, without any wrapper: the path of the file or
    /// block device, or the NBD URI (the wrapped device's for a wrapper). Default: the
    /// name. [`names_device`] matches what a user typed against it.
    fn opened_from(&self) -> &str {
        self.name()
    }
    /// The identity of what this device has open ([`crate::Identity`]): for a file the
    /// `(st_dev, st_ino)` of its open descriptor, for a block device its `st_rdev` (a
    /// loop device over a whole file: that file's), the wrapped device's for a wrapper.
    /// Taken from the descriptor, so a path renamed or replaced since the open does not
    /// change it. None for a device without one (network, memory): [`same_device`] tells
    /// those apart by what they were opened from.
    fn identity(&self) -> Option<crate::Identity> {
        None
    }
    /// True if `[offset, offset+len)` is known to read as zeros without storing data
    /// (a hole in a sparse file). Conservative: false when unknown.
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        let _ = (offset, len);
        false
    }
    /// Where the hole at byte `offset` ends: the offset of the first data at or after it
    /// (`offset` itself when data is there; the size when none follows). None when the
    /// device cannot tell (then only [`BlockDev::is_hole`] answers). One query tells
    /// about a whole hole, however long, where `is_hole` answers for one range.
    fn hole_end(&self, offset: u64) -> Option<u64> {
        let _ = offset;
        None
    }
    /// Give back storage for `[offset, offset+len)` so it reads as zeros, if possible.
    /// Returns Ok(false) if the device cannot do it (caller then writes zeros).
    fn punch_hole(&self, offset: u64, len: u64) -> stdio::Result<bool> {
        let _ = (offset, len);
        Ok(false)
    }
    /// How the member IO layer carries out this device's IOs ([`io::Submission`]).
    /// Default: blocking calls in the calling thread.
    fn submission(&self) -> io::Submission<'_> {
        io::Submission::Blocking
    }
    /// This device's own deadline for one IO (None: the layer's default for local
    /// devices, [`io::DEFAULT_MEMBER_TIMEOUT`]); `--member-timeout` overrides it.
    fn default_timeout(&self) -> Option<std::time::Duration> {
        None
    }
    /// The network member behind this device, if it is one (its link: state, reconnect).
    fn network(&self) -> Option<&nbd::NbdDev> {
        None
    }
    /// Called by the member IO layer ([`io::run`]) when a read or write of this device
    /// finished, however it was carried out: `write` (else a read), its bytes, the time
    /// from its submission to its completion, and whether it succeeded. For wrappers that
    /// count IO (benchmarks) without taking the IO itself over. Default: nothing.
    fn io_done(&self, write: bool, bytes: usize, took: std::time::Duration, ok: bool) {
        let _ = (write, bytes, took, ok);
    }
}

/// Open a member as the user named it — the one place this is done: an NBD URI (a
/// network member, [`nbd::NbdDev`]), a fault-injection spec (`fault:RULES:MEMBER`, see
/// [`fault`]; MEMBER is any of these), or the path of a file or block device. With
/// `write` the member is opened for writing (and claimed, see [`FileDev::open`]).
pub fn open_member(spec: &Path, write: bool) -> stdio::Result<std::sync::Arc<dyn BlockDev>> {
    open_boxed(spec, write).map(std::sync::Arc::from)
}

fn open_boxed(spec: &Path, write: bool) -> stdio::Result<Box<dyn BlockDev>> {
    let text = spec.to_str();
    if let Some(parsed) = text.and_then(fault::parse_spec) {
        let (rules, inner) =
            parsed.map_err(|e| stdio::Error::new(stdio::ErrorKind::InvalidInput, e))?;
        let inner = open_boxed(&inner, write)?;
        return Ok(Box::new(fault::FaultDev::new(inner, rules)));
    }
    if let Some(uri) = text.filter(|t| nbd::is_nbd_uri(t)) {
        return Ok(Box::new(nbd::NbdDev::open(uri, write)?));
    }
    Ok(Box::new(FileDev::open(spec, write)?))
}

/// True if `given`, a member as a user named it, denotes `dev`: its name as reports show
/// it, or what it was opened from ([`BlockDev::opened_from`]) given as any spelling of
/// the same file or device (`./b`, `/srv/raid/b`, a symlink: [`crate::same_member`]), with or without a fault-injection
/// wrapper around it (`fault:RULES:PATH`, whatever the rules).
pub fn names_device(dev: &dyn BlockDev, given: &str) -> bool {
    if given == dev.name() {
        return true;
    }
    let mut base = given;
    while let Some((_, inner)) = fault::split_spec(base) {
        base = inner;
    }
    // By identity (the same file or device through any path, a link, a whole-file loop
    // device), as a member list's paths are told apart.
    use crate::setup::identity::{member_identity, same_member};
    let id = |p: &Path| member_identity(p, false).ok().flatten();
    let (a, b) = (Path::new(base), Path::new(dev.opened_from()));
    same_member((a, id(a)), (b, id(b)))
}

/// Are two open devices one member? By the identity of what they have open
/// ([`BlockDev::identity`]) where both have one, so no path renamed, replaced or linked
/// since they were opened can fool it; where neither has, by what they were opened from
/// ([`crate::same_member`]: NBD URIs by their text).
pub fn same_device(a: &dyn BlockDev, b: &dyn BlockDev) -> bool {
    fn side(d: &dyn BlockDev) -> (&Path, Option<crate::Identity>) {
        (Path::new(d.opened_from()), d.identity())
    }
    crate::same_member(side(a), side(b))
}

/// Check that `[offset, offset + len)` lies within a device of `size` bytes.
pub(crate) fn check_bounds(what: &str, offset: u64, len: usize, size: u64) -> stdio::Result<()> {
    let end = offset
        .checked_add(len as u64)
        .ok_or_else(|| stdio::Error::new(stdio::ErrorKind::InvalidInput, "offset overflow"))?;
    if end > size {
        let kind = if what == "read" {
            stdio::ErrorKind::UnexpectedEof
        } else {
            stdio::ErrorKind::InvalidInput
        };
        return Err(stdio::Error::new(
            kind,
            format!("{what} of {offset}..{end} past the end ({size} bytes)"),
        ));
    }
    Ok(())
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
    /// A file in memory (tmpfs, ramfs): its IOs never wait for a device.
    in_memory: bool,
    /// `(st_dev, st_ino)` of the exclusive claim this handle holds, if any.
    claim: Option<(u64, u64)>,
    /// What the descriptor has open ([`BlockDev::identity`]).
    identity: Option<crate::Identity>,
}

/// A claim: the file's `(st_dev, st_ino)`, the number of writable handles sharing it, and
/// a duplicate of the descriptor that holds the `flock` (the lock belongs to that open
/// file description, so it lives as long as the claim, whichever handle closes first).
type Claim = ((u64, u64), usize, File);

/// Files and devices this process holds an exclusive claim on. A second writable handle
/// in the same process (a member reopened by the supervisor, say) shares the claim
/// instead of conflicting with it.
static CLAIMS: std::sync::Mutex<Vec<Claim>> = std::sync::Mutex::new(Vec::new());

fn claims() -> std::sync::MutexGuard<'static, Vec<Claim>> {
    crate::locks::lock(&CLAIMS)
}

/// The processes holding a `flock` on the file with this device and inode, from
/// /proc/locks, described as "pid N (command line)".
fn lock_holders(dev: u64, ino: u64) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    // Device numbers in /proc/locks are "MAJOR:MINOR:INODE" with hex major and minor.
    let major = libc::major(dev as libc::dev_t);
    let minor = libc::minor(dev as libc::dev_t);
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (blocked waiters have "->").
        let Some(i) = f.iter().position(|w| *w == "FLOCK") else {
            continue;
        };
        let (Some(pid), Some(id)) = (f.get(i + 3), f.get(i + 4)) else {
            continue;
        };
        if *id != want || f.contains(&"->") {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .split('\0')
                    .filter(|a| !a.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        out.push(if cmd.is_empty() {
            format!("pid {pid}")
        } else {
            format!("pid {pid} ({cmd})")
        });
    }
    out
}

// ioctl numbers (linux/fs.h): BLKGETSIZE64 = _IOR(0x12, 114, size_t), BLKSSZGET = _IO(0x12, 104).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;

impl FileDev {
    /// Open `path` for reading (and writing if `write`).
    pub fn open(path: &Path, write: bool) -> stdio::Result<FileDev> {
        let mut oo = OpenOptions::new();
        oo.read(true).write(write);
        oo.custom_flags(libc::O_CLOEXEC);
        if write {
            // A block device opened for writing is claimed exclusively (O_EXCL): the open
            // fails with EBUSY while the device is mounted, part of a kernel md array or
            // claimed by another program, so raidkit never writes under them.
            let is_blk = std::fs::metadata(path)
                .map(|m| m.file_type().is_block_device())
                .unwrap_or(false);
            if is_blk {
                oo.custom_flags(libc::O_CLOEXEC | libc::O_EXCL);
            }
        }
        let file = oo.open(path).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                stdio::Error::new(
                    stdio::ErrorKind::ResourceBusy,
                    format!(
                        "{} is busy: it is mounted, part of a kernel md array or held by \
                         another program; stop that user first (umount, mdadm --stop)",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })?;
        let meta = file.metadata()?;
        let is_block = meta.file_type().is_block_device();
        let claim = if write {
            Some(claim(&file, path, meta.dev(), meta.ino())?)
        } else {
            None
        };
        let (size, lbs) = if is_block {
            let mut sz: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a
            // live, properly aligned u64; the fd is valid for the lifetime of `file`.
            let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut sz as *mut u64) };
            if r != 0 {
                return Err(stdio::Error::last_os_error());
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
            return Err(stdio::Error::new(
                stdio::ErrorKind::InvalidInput,
                "not a regular file or block device",
            ));
        };
        let in_memory = !is_block && in_memory_fs(&file);
        let identity = crate::setup::identity::identity_of(&meta);
        Ok(FileDev {
            file,
            name: path.display().to_string(),
            path: path.to_path_buf(),
            size,
            lbs,
            is_block,
            in_memory,
            claim,
            identity,
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

/// Is `file` on a file system that lives in memory (tmpfs, ramfs)?
fn in_memory_fs(file: &File) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    // SAFETY: fstatfs fills the zeroed struct it is given; the fd is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC)
}

/// Take (or share, within this process) an exclusive `flock` on a member opened for
/// writing, so two raidkit processes never write the same member: a second `serve`, or an
/// offline `import`/`repair`/`grow` while the array is served, is refused and told who
/// holds it. Readers (`examine`, `detail`, `export`) take no lock.
fn claim(file: &File, path: &Path, dev: u64, ino: u64) -> stdio::Result<(u64, u64)> {
    let key = (dev, ino);
    let mut held = claims();
    if let Some(e) = held.iter_mut().find(|(k, _, _)| *k == key) {
        e.1 += 1;
        return Ok(key);
    }
    // SAFETY: flock on a valid, open fd; it has no memory effects.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = stdio::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let who = lock_holders(dev, ino);
            let who = if who.is_empty() {
                "another process".to_string()
            } else {
                who.join(", ")
            };
            return Err(stdio::Error::new(
                stdio::ErrorKind::ResourceBusy,
                format!(
                    "{} is in use by {who}; stop it first, or change the running array \
                     through the process that runs it",
                    path.display()
                ),
            ));
        }
        return Err(e);
    }
    held.push((key, 1, file.try_clone()?));
    Ok(key)
}

impl Drop for FileDev {
    fn drop(&mut self) {
        if let Some(key) = self.claim {
            let mut held = claims();
            if let Some(i) = held.iter().position(|(k, _, _)| *k == key) {
                held[i].1 -= 1;
                if held[i].1 == 0 {
                    // Dropping the last duplicate of the locking descriptor releases the
                    // lock (this handle's own descriptor may be that one or not).
                    let (_, _, lock_fd) = held.remove(i);
                    // SAFETY: flock on a valid fd we own; no memory effects.
                    unsafe { libc::flock(lock_fd.as_raw_fd(), libc::LOCK_UN) };
                }
            }
        }
    }
}

impl BlockDev for FileDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> stdio::Result<()> {
        check_bounds("read", offset, buf.len(), self.size)?;
        io::run_one(self, offset, io::IoOp::Read(buf))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> stdio::Result<()> {
        check_bounds("write", offset, buf.len(), self.size)?;
        io::run_one(self, offset, io::IoOp::Write(buf))
    }
    fn flush(&self) -> stdio::Result<()> {
        io::run_one(self, 0, io::IoOp::Flush)
    }
    fn submission(&self) -> io::Submission<'_> {
        io::Submission::Fd {
            fd: self.file.as_raw_fd(),
            in_memory: self.in_memory,
        }
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
    fn identity(&self) -> Option<crate::Identity> {
        self.identity
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        len > 0
            && self
                .hole_end(offset)
                .is_some_and(|end| end >= offset.saturating_add(len))
    }
    fn hole_end(&self, offset: u64) -> Option<u64> {
        if self.is_block {
            return None;
        }
        let off = libc::off_t::try_from(offset).ok()?;
        // SAFETY: lseek on a valid fd has no memory effects; SEEK_DATA only moves the
        // file position, which this type never relies on (all IO is positioned).
        let next = unsafe { libc::lseek(self.file.as_raw_fd(), off, libc::SEEK_DATA) };
        if next < 0 {
            // ENXIO: no data at or after offset → the rest is a hole.
            let enxio = stdio::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
            return enxio.then_some(self.size.max(offset));
        }
        Some(next as u64)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> stdio::Result<bool> {
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
        crate::locks::read(&self.data).clone()
    }
}

impl BlockDev for MemDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> stdio::Result<()> {
        let g = self
            .data
            .read()
            .map_err(|_| stdio::Error::other("poisoned"))?;
        let o = offset as usize;
        let src = g
            .get(o..o.saturating_add(buf.len()))
            .ok_or_else(|| stdio::Error::new(stdio::ErrorKind::UnexpectedEof, "read past end"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> stdio::Result<()> {
        let mut g = self
            .data
            .write()
            .map_err(|_| stdio::Error::other("poisoned"))?;
        let o = offset as usize;
        let dst = g
            .get_mut(o..o.saturating_add(buf.len()))
            .ok_or_else(|| stdio::Error::new(stdio::ErrorKind::InvalidInput, "write past end"))?;
        dst.copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> stdio::Result<()> {
        Ok(())
    }
    fn size_bytes(&self) -> u64 {
        crate::locks::read(&self.data).len() as u64
    }
    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_claim_members_exclusively_across_processes_not_within_one() {
        let dir = std::env::temp_dir().join(format!("rk-claim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let p = dir.join("m");
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(1 << 20))
            .expect("member file");
        // Two writable handles in one process share the claim; readers need none.
        let a = FileDev::open(&p, true).expect("first writer");
        let b = FileDev::open(&p, true).expect("second writer, same process");
        drop(a);
        // The claim outlives the handle that took it: another process cannot lock.
        let probe = |p: &Path| {
            std::process::Command::new("flock")
                .args(["-n", "-x"])
                .arg(p)
                .arg("true")
                .status()
                .map(|s| s.success())
        };
        let Ok(locked_out) = probe(&p).map(|ok| !ok) else {
            eprintln!("SKIP: flock(1) is not installed");
            return;
        };
        assert!(locked_out, "another process could lock a claimed member");
        let _r = FileDev::open(&p, false).expect("reader");
        drop(b);
        assert_eq!(probe(&p).ok(), Some(true), "claim not released");
        // Another process holding the lock: the writer is refused and told who.
        let mut holder = std::process::Command::new("flock")
            .args(["-x"])
            .arg(&p)
            .args(["sleep", "30"])
            .spawn()
            .expect("spawn flock");
        let mut err = None;
        for _ in 0..100 {
            match FileDev::open(&p, true) {
                Err(e) => {
                    err = Some(e);
                    break;
                }
                Ok(d) => drop(d),
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = holder.kill();
        let _ = holder.wait();
        let e = err.expect("the writer was never refused");
        assert_eq!(e.kind(), stdio::ErrorKind::ResourceBusy);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("is in use by pid {} (flock", holder.id())),
            "{msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
