//! Linux MD on-disk formats, byte-exact: superblock 1.0/1.1/1.2 ([`v1`]), superblock 0.90
//! ([`v090`]), the internal write-intent bitmap superblock ([`bitmap`]), the bad-block log
//! ([`badblocks`]), and mdadm's rules for placing data, bitmap and log ([`placement`]).
//!
//! Pure: parsing and encoding of byte buffers only, no IO. Reference:
//! `shared/reference/md-format.md` §1–§3, §6.
//!
//! CONTRACT (used by raidkit-engine; keep the public names stable).

#![forbid(unsafe_code)]

pub mod badblocks;
pub mod bitmap;
pub mod placement;
pub mod uuid;
pub mod v090;
pub mod v1;

mod le;

use thiserror::Error;

/// MD superblock magic (both 0.90 and 1.x).
pub const MD_MAGIC: u32 = 0xa92b_4efc;
/// "Complete"/"not set" marker for sector fields (`resync_offset` clean).
pub const MAX_SECTOR: u64 = u64::MAX;

/// Why a buffer is not a valid structure. Every variant says what is wrong.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// Buffer shorter than the structure needs.
    #[error("buffer too short: need {need} bytes, have {have}")]
    TooShort {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// No MD magic at this location.
    #[error("no MD superblock magic (found {found:#010x})")]
    BadMagic {
        /// Value found.
        found: u32,
    },
    /// Magic of a foreign-endian 0.90 superblock.
    #[error("0.90 superblock written by a big-endian host (not supported)")]
    ForeignEndian,
    /// Wrong major/minor version for this parser.
    #[error("unsupported superblock version {0}")]
    BadVersion(String),
    /// Checksum mismatch.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadChecksum {
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// A field holds a value the kernel would refuse.
    #[error("invalid field {field}: {why}")]
    BadField {
        /// Field name as in the reference.
        field: &'static str,
        /// Explanation.
        why: String,
    },
    /// Feature bits raidkit (and the kernel) does not know.
    #[error("unknown feature bits {0:#x}")]
    UnknownFeatures(u32),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, FormatError>;
