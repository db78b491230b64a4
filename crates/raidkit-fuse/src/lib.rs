//! Serve a running raidkit [`Array`] as one regular file over FUSE.
//!
//! The mount point becomes a directory holding a single file whose size is exactly the
//! array's, so `losetup`, `mkfs` and `mount` work on machines without an NBD driver:
//!
//! ```text
//! mnt/
//! └── raidkit        (array size, rw-------)
//! ```
//!
//! * **FUSE implementation:** the `fuser` crate without its `libfuse` feature: no C
//!   library is needed at build or run time. As root it mounts with `mount(2)` itself
//!   (type `fuse.raidkit`), on the mount point held open, and unmounts it through that
//!   descriptor too, never by a path another user could swap; otherwise it uses
//!   `fusermount3`. Requests are served by several threads, each with
//!   its own `/dev/fuse` descriptor (`FUSE_DEV_IOC_CLONE`), with 1 MiB requests.
//! * **Caching:** by default the kernel's page cache is used for the file, write-through
//!   (every `write` reaches the array before it returns; no writeback cache), and kept
//!   across opens (`FOPEN_KEEP_CACHE`): the array changes only through this mount, so
//!   cached pages never go stale. With [`MountConfig::direct_io`] the page cache is
//!   bypassed (`FOPEN_DIRECT_IO`): no double caching under a loop device, and parallel
//!   direct writes, at the cost of no read cache and no shared `mmap`.
//! * **Durability:** `fsync` and `close` flush every member ([`Array::flush`]).
//! * **Clean/dirty like md:** the array is marked dirty by the engine at the first write
//!   and marked clean ([`Array::mark_clean`]) after [`MountConfig::idle_clean`] without
//!   writes and when the mount ends.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn demo(array: raidkit_engine::Array) -> Result<(), raidkit_fuse::FuseError> {
//! let signals = raidkit_fuse::signals::block_stop_signals()?; // before any thread starts
//! let cfg = raidkit_fuse::MountConfig::new("raidkit");
//! let mounted = raidkit_fuse::mount(Arc::new(array), "mnt".as_ref(), &cfg)?;
//! raidkit_fuse::signals::stop_on_signals(signals, mounted.stop_handle(), |_ev| {})?;
//! let _stats = mounted.run()?; // returns after SIGINT/SIGTERM or `umount mnt`
//! # Ok(()) }
//! ```

mod error;
mod fs;
mod mounts;
pub mod signals;
mod state;

pub use error::FuseError;
pub use state::Stats;

use fs::ArrayFs;
use fuser::{Config, MountOption, Session};
use raidkit_engine::supervisor::{IdleClean, WriteActivity};
use raidkit_engine::Array;
use state::Shared;
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Name of the array file inside the mount point.
    pub file_name: String,
    /// Refuse every write (`EROFS`) and mount read-only. Must be set when the array was
    /// assembled read-only.
    pub read_only: bool,
    /// Bypass the page cache (`FOPEN_DIRECT_IO`).
    pub direct_io: bool,
    /// Request threads (at least 1).
    pub threads: usize,
    /// Write idleness after which the array is marked clean (md's `safe_mode_delay`),
    /// by the mount's own timer (without [`MountConfig::activity`]).
    pub idle_clean: Duration,
    /// The write activity of an idle-clean timer the caller runs for this array
    /// ([`raidkit_engine::supervisor::IdleClean`]); the mount then runs none of its own.
    pub activity: Option<Arc<WriteActivity>>,
}

impl MountConfig {
    /// Defaults: read-write, page cache, 4 threads, clean after 1 s without writes (own
    /// timer).
    pub fn new(file_name: &str) -> MountConfig {
        MountConfig {
            file_name: file_name.to_string(),
            read_only: false,
            direct_io: false,
            threads: 4,
            idle_clean: Duration::from_secs(1),
            activity: None,
        }
    }
}

/// The default file name for an array: its name without the `HOMEHOST:` prefix, made
/// safe as one directory entry; `array` if it has none.
pub fn default_file_name(array_name: &str) -> String {
    let base = array_name.rsplit(':').next().unwrap_or("");
    let cleaned: String = base
        .chars()
        .map(|c| if c == '/' || c.is_control() { '_' } else { c })
        .collect();
    if cleaned.is_empty() || cleaned == "." || cleaned == ".." {
        "array".to_string()
    } else {
        cleaned
    }
}

/// Check that `name` can be the one entry of the mount's directory.
pub fn check_file_name(name: &str) -> Result<(), FuseError> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name == "." || name == ".." {
        Some("it is a directory reference")
    } else if name.contains('/') {
        Some("it contains '/'")
    } else if name.contains('\0') {
        Some("it contains a NUL byte")
    } else if name.len() > 255 {
        Some("it is longer than 255 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(FuseError::BadName {
            name: name.to_string(),
            why,
        }),
        None => Ok(()),
    }
}

/// Check that `mountpoint` is an existing directory that can be mounted on, and return
/// its canonical path. Explains a dead FUSE mount left by a killed server.
pub fn check_mountpoint(mountpoint: &Path) -> Result<PathBuf, FuseError> {
    checked_mountpoint(mountpoint).map(|(dir, _)| dir)
}

/// [`check_mountpoint`], with the `(st_dev, st_ino)` of the directory it checked.
fn checked_mountpoint(mountpoint: &Path) -> Result<(PathBuf, (u64, u64)), FuseError> {
    use std::os::unix::fs::MetadataExt;
    let bad = |why: String| FuseError::BadMountpoint {
        path: mountpoint.to_path_buf(),
        why,
    };
    let md = std::fs::metadata(mountpoint).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTCONN) => bad(format!(
            "{e}: a FUSE mount whose server died is still there; run `umount {}` first",
            mountpoint.display()
        )),
        _ if e.kind() == std::io::ErrorKind::NotFound => {
            bad(format!("{e} (create the directory first)"))
        }
        _ => bad(e.to_string()),
    })?;
    if !md.is_dir() {
        return Err(bad("not a directory".into()));
    }
    let dir = mountpoint.canonicalize().map_err(|e| bad(e.to_string()))?;
    // Unreadable mountinfo (no /proc) leaves this check to the kernel's own.
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(source) = mounts::raidkit_mount_on(&info, &dir) {
        return Err(bad(format!(
            "another raidkit mount ({source}) is already on it, and a second one would hide \
             it; stop that one first (`umount {}`) or choose another directory",
            dir.display()
        )));
    }
    Ok((dir, (md.dev(), md.ino())))
}

/// A mounted array, not yet serving: call [`Mounted::run`].
pub struct Mounted {
    session: Session<ArrayFs>,
    shared: Arc<Shared>,
    mountpoint: PathBuf,
    /// The idle-clean delay of the mount's own timer; None when the caller runs one.
    own_idle_clean: Option<Duration>,
    stop: StopHandle,
    /// Detaches a pinned mount if the session ends other than by an unmount.
    unmount_guard: DetachOnDrop,
}

/// Ends a mount from another thread (a signal handler thread, a test).
#[derive(Clone, Debug)]
pub struct StopHandle {
    mountpoint: PathBuf,
    /// What `umount2` is given: the pinned directory's `/proc/self/fd` path as root,
    /// else the canonical path.
    c_target: Arc<CString>,
    /// Keeps the pinned mount point open while any handle exists.
    pin: Option<Arc<OwnedFd>>,
    /// The mount's source as mountinfo shows it (`raidkit:UUID`).
    source: Arc<str>,
}

impl StopHandle {
    /// Unmount, which ends [`Mounted::run`] (that then flushes and marks the array
    /// clean). Fails with [`FuseError::Busy`] while the file is open or attached to a
    /// loop device: nothing is changed then, and the mount keeps serving. Succeeds if the
    /// mount is already gone.
    pub fn request_stop(&self) -> Result<(), FuseError> {
        if !self.still_mounted() {
            // Gone already: `umount2` would take whatever is mounted there now.
            return Ok(());
        }
        // SAFETY: c_target is a valid NUL-terminated path that outlives the call.
        let rc = unsafe { libc::umount2(self.c_target.as_ptr(), 0) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EPERM) {
            // Not root: the mount was made by the setuid fusermount3, which unmounts it.
            return self.fusermount_unmount();
        }
        match err.raw_os_error() {
            Some(libc::EBUSY) => Err(FuseError::Busy {
                path: self.mountpoint.clone(),
            }),
            // Not a mount point (any more): someone unmounted it already.
            Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
            _ => Err(FuseError::Unmount {
                path: self.mountpoint.clone(),
                source: err,
            }),
        }
    }

    /// [`StopHandle::request_stop`], retried while the mount is busy for at most `grace`.
    ///
    /// A reference that outlives a `close` by moments — a child process forked while the
    /// file was open and not yet at its `exec`, a release the kernel still has in flight —
    /// makes an unmount right after the close fail with busy although nobody uses the
    /// file. A stop asked for then takes effect once the reference is gone; a file that
    /// stays open (or attached to a loop device) for the whole `grace` is still refused
    /// with [`FuseError::Busy`].
    pub fn request_stop_within(&self, grace: Duration) -> Result<(), FuseError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match self.request_stop() {
                Err(FuseError::Busy { .. }) if started.elapsed() + pause <= grace => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                result => return result,
            }
        }
    }

    /// The mount point (canonical path).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Is this mount still the one on top of its directory? Only known for a pinned
    /// mount point (root): the pinned directory's current path, looked up in mountinfo,
    /// must show this mount's source on top. Without a pin, `fusermount3` checks for
    /// itself (true).
    fn still_mounted(&self) -> bool {
        let Some(pin) = &self.pin else {
            return true;
        };
        let Ok(dir) = std::fs::read_link(format!("/proc/self/fd/{}", pin.as_raw_fd())) else {
            return false;
        };
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        mounts::raidkit_mount_on(&info, &dir).as_deref() == Some(&*self.source)
    }

    /// Detach this mount if it is still there, busy or not (`MNT_DETACH`): for a pinned
    /// mount whose server is ending without having been unmounted, which would leave a
    /// dead mount ("Transport endpoint is not connected") behind.
    fn detach(&self) {
        if self.pin.is_some() && self.still_mounted() {
            // SAFETY: c_target is a valid NUL-terminated path; MNT_DETACH never blocks.
            unsafe { libc::umount2(self.c_target.as_ptr(), libc::MNT_DETACH) };
        }
    }

    /// Unmount with `fusermount3 -u` (for a mount made without root).
    fn fusermount_unmount(&self) -> Result<(), FuseError> {
        let out = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg("--")
            .arg(&self.mountpoint)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| FuseError::Unmount {
                path: self.mountpoint.clone(),
                source: e,
            })?;
        if out.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&out.stderr);
        if text.contains("busy") {
            return Err(FuseError::Busy {
                path: self.mountpoint.clone(),
            });
        }
        if text.contains("not found in") || text.contains("not mounted") {
            return Ok(());
        }
        Err(FuseError::Unmount {
            path: self.mountpoint.clone(),
            source: std::io::Error::other(format!("fusermount3 -u: {}", text.trim())),
        })
    }
}

/// Mount `array` at `mountpoint` (an existing directory). The kernel handshake is done
/// when this returns, so the file is visible, but requests are only answered once
/// [`Mounted::run`] is called.
pub fn mount(
    array: Arc<Array>,
    mountpoint: &Path,
    cfg: &MountConfig,
) -> Result<Mounted, FuseError> {
    check_file_name(&cfg.file_name)?;
    let read_only = cfg.read_only || !array.is_writable();
    let (canonical, checked) = checked_mountpoint(mountpoint)?;
    let pin = pin_mountpoint(&canonical, checked)?.map(Arc::new);
    let target = match &pin {
        Some(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        None => canonical.clone(),
    };
    // The directory actually pinned (the path may have changed since it was checked).
    let canonical = match &pin {
        Some(_) => std::fs::read_link(&target).unwrap_or(canonical),
        None => canonical,
    };
    let c_target =
        CString::new(target.as_os_str().as_bytes()).map_err(|_| FuseError::BadMountpoint {
            path: mountpoint.to_path_buf(),
            why: "the path contains a NUL byte".into(),
        })?;

    let shared = Arc::new(Shared::new(
        array.clone(),
        OsString::from(&cfg.file_name),
        read_only,
        cfg.direct_io,
        cfg.activity.clone().unwrap_or_default(),
    ));
    // "raidkit:<uuid>" in /proc/mounts; the UUID text has no commas.
    let source = format!("raidkit:{}", array.uuid_text());
    let mut options = vec![
        MountOption::FSName(source.clone()),
        MountOption::Subtype("raidkit".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
        MountOption::NoAtime,
    ];
    options.push(if read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let mut config = Config::default();
    config.mount_options = options;
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    let fs = ArrayFs {
        shared: shared.clone(),
    };
    let stop = StopHandle {
        mountpoint: canonical.clone(),
        c_target: Arc::new(c_target),
        pin: pin.clone(),
        source: Arc::from(source.as_str()),
    };
    let session = match &pin {
        // fuser's own mount would mount, and unmount again when the session ends, by the
        // canonical path, which a swapped directory can point elsewhere by then.
        Some(dir) => {
            let dev =
                mount_pinned(dir, &source, read_only).map_err(|e| mount_error(&canonical, e))?;
            // From here on the mount exists: any way out without a session undoes it.
            let guard = DetachOnDrop(Some(stop.clone()));
            let session = Session::from_fd(fs, dev, config.acl, config);
            guard.disarm_if(session.is_ok());
            session
        }
        None => Session::new(fs, &target, &config),
    }
    .map_err(|e| mount_error(&canonical, e))?;
    Ok(Mounted {
        session,
        shared,
        unmount_guard: DetachOnDrop(pin.is_some().then(|| stop.clone())),
        stop,
        mountpoint: canonical,
        own_idle_clean: cfg.activity.is_none().then_some(cfg.idle_clean),
    })
}

/// Detaches a pinned mount when dropped, unless disarmed: a server that ends in any way
/// other than an unmount (an error, a panic, a caller that never runs it) leaves no dead
/// mount behind.
struct DetachOnDrop(Option<StopHandle>);

impl DetachOnDrop {
    /// Drop without detaching when `done` (the mount is in good hands, or gone).
    fn disarm_if(mut self, done: bool) {
        if done {
            self.0 = None;
        }
    }
}

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            stop.detach();
        }
    }
}

/// As root, open the mount point (`O_PATH`) so that `mount(2)` and `umount2(2)` are given
/// its `/proc/self/fd` path: they then act on this very directory even if a directory of
/// the path is renamed and replaced by a symlink meanwhile (by another user who can write
/// it), which would otherwise make root mount over, or unmount, whatever the symlink
/// names. Without root, `fusermount3` mounts and unmounts, with its own checks, so
/// nothing is pinned (None); nor when /proc is not mounted.
fn pin_mountpoint(canonical: &Path, checked: (u64, u64)) -> Result<Option<OwnedFd>, FuseError> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/proc/self/fd").is_dir() {
        return Ok(None);
    }
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(canonical)
        .map_err(|e| FuseError::BadMountpoint {
            path: canonical.to_path_buf(),
            why: e.to_string(),
        })?;
    // The directory pinned must be the one checked: the path is looked up again here,
    // and a directory on it may have been swapped for a symlink meanwhile.
    let pinned = dir.metadata().map_err(|e| FuseError::BadMountpoint {
        path: canonical.to_path_buf(),
        why: e.to_string(),
    })?;
    if (pinned.dev(), pinned.ino()) != checked {
        return Err(FuseError::BadMountpoint {
            path: canonical.to_path_buf(),
            why: "it changed while it was being checked (a directory on its path was \
                  replaced); check who can write the directories above it, and try again"
                .into(),
        });
    }
    Ok(Some(OwnedFd::from(dir)))
}

/// As root, mount FUSE on the pinned directory `dir` (through its `/proc/self/fd` path)
/// and return the `/dev/fuse` descriptor serving it: the mount is then neither made nor,
/// at the end, unmounted by a path.
fn mount_pinned(dir: &OwnedFd, source: &str, read_only: bool) -> std::io::Result<OwnedFd> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    // SAFETY: geteuid/getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let cstr = |t: String| CString::new(t).map_err(std::io::Error::other);
    let source = cstr(source.to_string())?;
    let target = cstr(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    let root_mode = if read_only { 0o40500 } else { 0o40700 };
    let data = cstr(format!(
        "fd={},rootmode={root_mode:o},user_id={uid},group_id={gid}",
        dev.as_raw_fd()
    ))?;
    let mut flags = libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_NOATIME;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            mounts::FS_TYPE.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(dev))
}

/// Explain a refused mount: /dev/fuse closed to other users is the usual cause of a
/// permission error without root.
fn mount_error(path: &Path, source: std::io::Error) -> FuseError {
    use std::os::unix::fs::PermissionsExt;
    let path = path.to_path_buf();
    if source.kind() == std::io::ErrorKind::PermissionDenied {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if let Ok(md) = std::fs::metadata("/dev/fuse") {
            let mode = md.permissions().mode() & 0o7777;
            if !root && mode & 0o006 != 0o006 {
                return FuseError::DevFuseRootOnly { path, mode };
            }
        }
    }
    FuseError::Mount { path, source }
}

impl Mounted {
    /// Path of the array file.
    pub fn file_path(&self) -> PathBuf {
        self.mountpoint.join(&self.shared.file_name)
    }

    /// Canonical path of the mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// True if writes are refused.
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// A handle that ends the mount from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Serve requests until the file system is unmounted ([`StopHandle::request_stop`],
    /// a signal via [`signals::stop_on_signals`], or `umount`) or the kernel aborts the
    /// connection (reported on stderr, not as an error). Then flush the members
    /// and mark the array clean (read-write mounts), and return the counters.
    pub fn run(self) -> Result<Stats, FuseError> {
        let Mounted {
            session,
            shared,
            own_idle_clean,
            unmount_guard,
            ..
        } = self;
        let mut cleaner = match own_idle_clean.filter(|_| !shared.read_only) {
            None => None,
            Some(idle) => Some(
                IdleClean::spawn(
                    vec![(shared.array.clone(), shared.activity.clone())],
                    idle,
                    |_, e| state::note(format_args!("marking the array clean failed: {e}")),
                )
                .map_err(|e| FuseError::Os {
                    what: "starting the idle-clean thread",
                    source: e,
                })?,
            ),
        };
        let served = session_outcome(session.run());
        let detaches = unmount_guard.0.is_some();
        // Unmounted: nothing to undo. Aborted or failed: the guard detaches what is left.
        unmount_guard.disarm_if(matches!(served, Ok(SessionEnd::Unmounted)));
        if let Some(c) = cleaner.as_mut() {
            c.stop();
        }
        // No request can arrive any more: every write has completed.
        if !shared.read_only {
            shared.array.flush()?;
            shared.array.mark_clean()?;
        }
        match served.map_err(FuseError::Session)? {
            SessionEnd::Unmounted => {}
            SessionEnd::Aborted if detaches => state::note(format_args!(
                "the kernel aborted the FUSE connection; the mount was detached, and the \
                 array flushed and marked clean"
            )),
            SessionEnd::Aborted => state::note(format_args!(
                "the kernel aborted the FUSE connection; the array was flushed and marked \
                 clean. If the mount point now says 'Transport endpoint is not connected', \
                 unmount it with umount"
            )),
        }
        Ok(shared.stats())
    }
}

/// How a FUSE session ended without an error of ours.
#[derive(Debug, PartialEq, Eq)]
enum SessionEnd {
    /// The kernel reported the device gone: an unmount.
    Unmounted,
    /// A read of the device failed with `ECONNABORTED`: the kernel ended the
    /// connection (an abort, or the end of an unmount racing a reader). No request can
    /// arrive any more, exactly as after an unmount.
    Aborted,
}

/// Sort the session loop's result: an aborted connection is an end, not a failure.
fn session_outcome(result: std::io::Result<()>) -> std::io::Result<SessionEnd> {
    match result {
        Ok(()) => Ok(SessionEnd::Unmounted),
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(SessionEnd::Aborted),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{pin_mountpoint, session_outcome, FuseError, SessionEnd};

    /// As root, a mount point is pinned only if the directory opened is the one checked.
    #[test]
    fn the_pinned_directory_must_be_the_one_checked() {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = std::env::temp_dir();
        let md = std::fs::metadata(&dir).unwrap();
        assert!(pin_mountpoint(&dir, (md.dev(), md.ino()))
            .unwrap()
            .is_some());
        let other = (md.dev(), md.ino() + 1);
        let e = pin_mountpoint(&dir, other).unwrap_err();
        assert!(matches!(e, FuseError::BadMountpoint { .. }), "{e}");
        assert!(
            e.to_string().contains("changed while it was being checked"),
            "{e}"
        );
    }
    use std::io::{Error, ErrorKind};

    #[test]
    fn an_aborted_connection_ends_the_session_and_other_errors_stay_errors() {
        assert_eq!(session_outcome(Ok(())).unwrap(), SessionEnd::Unmounted);
        let aborted = Error::from_raw_os_error(libc::ECONNABORTED);
        assert_eq!(session_outcome(Err(aborted)).unwrap(), SessionEnd::Aborted);
        let eio = session_outcome(Err(Error::from_raw_os_error(libc::EIO))).unwrap_err();
        assert_eq!(eio.raw_os_error(), Some(libc::EIO));
        let bad = session_outcome(Err(Error::new(ErrorKind::InvalidData, "x"))).unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::InvalidData);
    }
}
