//! Errors of the FUSE front end. Every message says what is wrong and what to do.

use std::io;
use std::path::PathBuf;
use thiserror::Error;

/// Everything that can go wrong while mounting, serving or stopping.
#[derive(Debug, Error)]
pub enum FuseError {
    /// The file name given for the array file cannot be a single directory entry.
    #[error("file name {name:?} cannot be used: {why}")]
    BadName {
        /// The rejected name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// The mount point is missing, not a directory, or already holds a raidkit mount.
    #[error("mount point {}: {why}", path.display())]
    BadMountpoint {
        /// The mount point.
        path: PathBuf,
        /// Why, and what to do.
        why: String,
    },
    /// The kernel refused the FUSE mount.
    #[error("mounting FUSE at {}: {source} (needs /dev/fuse, and root or fusermount3)", path.display())]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A mount without root was refused because only root may open /dev/fuse.
    #[error("mounting FUSE at {}: /dev/fuse is mode {mode:04o}, so only root can mount: run as root, or give /dev/fuse its usual mode 0666 (the fuse3 package's udev rule sets it)", path.display())]
    DevFuseRootOnly {
        /// The mount point.
        path: PathBuf,
        /// The permission bits of /dev/fuse.
        mode: u32,
    },
    /// The mount point is in use, so it cannot be unmounted yet.
    #[error("{} is busy: the array file is still open or attached to a loop device (losetup -d it, close it, then stop again)", path.display())]
    Busy {
        /// The mount point.
        path: PathBuf,
    },
    /// Unmounting failed for another reason.
    #[error("unmounting {}: {source}", path.display())]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The request loop ended with an error.
    #[error("serving FUSE requests: {0}")]
    Session(#[source] io::Error),
    /// Signal handling or thread setup failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The array could not be flushed or marked clean at the end.
    #[error("stopping the array: {0}")]
    Engine(#[from] raidkit_engine::EngineError),
}
