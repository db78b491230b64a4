//! Engine errors. Every message says what is wrong and what to do about it.

use std::io;
use thiserror::Error;

/// Result alias.
pub type Result<T> = std::result::Result<T, EngineError>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Error)]
pub enum EngineError {
    /// An IO error on a member or another file.
    #[error("{device}: IO error while {what}: {source}")]
    Io {
        /// Device or file name.
        device: String,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A member carries no (usable) MD superblock.
    #[error("{device}: {detail}")]
    NoSuperblock {
        /// Device name.
        device: String,
        /// What was found instead and what to do.
        detail: String,
    },
    /// The given members cannot be assembled as given (wrong array, stale, duplicate...).
    #[error("{device}: {why}")]
    BadMember {
        /// Device name.
        device: String,
        /// Explanation and advice.
        why: String,
    },
    /// Not enough members to run the array.
    #[error("cannot start {level} array {uuid}: {why}")]
    NotEnoughMembers {
        /// Level name.
        level: String,
        /// Array UUID text.
        uuid: String,
        /// Which roles are missing and what to do.
        why: String,
    },
    /// Array was not shut down cleanly and is degraded (the RAID write hole).
    #[error("array {uuid} is degraded and was not stopped cleanly (resync_offset {resync}): parity may be wrong for stripes written at the crash, so data reconstructed from it could be silently wrong. Add the missing member(s) if you have them; otherwise start it anyway with --force (the array is then marked clean as md does)")]
    DirtyDegraded {
        /// Array UUID text.
        uuid: String,
        /// The recorded resync offset.
        resync: u64,
    },
    /// A feature raidkit refuses to touch (journal, PPL, cluster, reshape in progress...).
    #[error("array {uuid}: {what} — {advice}")]
    Unsupported {
        /// Array UUID text.
        uuid: String,
        /// The feature.
        what: String,
        /// What to do.
        advice: String,
    },
    /// Geometry rejected by the layout library.
    #[error("invalid array geometry: {0}")]
    Geometry(#[from] raidkit_layout::LayoutError),
    /// Refused to write to something that does not look like ours.
    #[error("refusing to use {device}: {why}")]
    Refused {
        /// Device name.
        device: String,
        /// What was found and how to override.
        why: String,
    },
    /// An argument is invalid.
    #[error("{0}")]
    Invalid(String),
    /// Array range out of bounds.
    #[error("request {offset}+{len} is outside the array ({size} bytes)")]
    OutOfRange {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Array size.
        size: u64,
    },
    /// Data could not be read from any copy and could not be reconstructed.
    #[error("array bytes {offset}..{end} cannot be read: {why}")]
    Unreadable {
        /// First byte.
        offset: u64,
        /// End byte (exclusive).
        end: u64,
        /// Which members failed and why.
        why: String,
    },
    /// A checksum sidecar cannot be used (not a sidecar, another array, stale...).
    #[error("checksum sidecar {path}: {why}")]
    Sidecar {
        /// Sidecar path.
        path: String,
        /// What is wrong and what to do.
        why: String,
        /// True if it is a valid sidecar of this array that no longer matches its data
        /// (callers ignore it loudly rather than trust it).
        stale: bool,
    },
    /// A write could not be completed on enough members.
    #[error("write to array bytes {offset}..{end} failed: {why}")]
    WriteFailed {
        /// First byte.
        offset: u64,
        /// End byte.
        end: u64,
        /// Explanation.
        why: String,
    },
}

impl EngineError {
    /// Build an IO error with context.
    pub fn io(device: &str, what: &'static str, source: io::Error) -> EngineError {
        EngineError::Io {
            device: device.to_string(),
            what,
            source,
        }
    }
}
