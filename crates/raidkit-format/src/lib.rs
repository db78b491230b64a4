//! Linux MD on-disk formats, byte-exact: superblock 1.0/1.1/1.2 ([`v1`]), superblock 0.90
//! ([`v090`]), the internal write-intent bitmap superblock ([`bitmap`]), the bad-block log
//! ([`badblocks`]), mdadm's rules for placing data, bitmap and log ([`placement`]), the
//! the reshape fields as one typed view ([`reshape`]), mdadm's reshape backup record
//! ([`backup`]), and the checks that make a superblock's fields safe to trust
//! ([`validate`]).
//!
//! Pure: parsing and encoding of byte buffers only, no IO. Reference:
//! `shared/reference/md-format.md` §1–§3, §6.
//!
//! CONTRACT (used by raidkit-engine; keep the public names stable).

#![forbid(unsafe_code)]

pub mod backup;
pub mod badblocks;
pub mod bitmap;
pub mod placement;
pub mod reshape;
pub mod uuid;
pub mod v090;
pub mod v1;
pub mod validate;

mod le;

use thiserror::Error;
pub use validate::{Area, Extent};

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
    /// A count or size field is outside the limits of the format (or of the kernel). Counts
    /// are checked when parsing, before anything loops over or allocates by them.
    #[error("{field} is {value}, outside the allowed {min}..={max}: {ADVICE}")]
    OutOfRange {
        /// Field name as in the reference.
        field: &'static str,
        /// The value found.
        value: i128,
        /// Smallest allowed value.
        min: i128,
        /// Largest allowed value.
        max: i128,
    },
    /// Level, layout, chunk or device count that do not describe an array md can run.
    #[error("{field} is {value}: {why}; {ADVICE}")]
    BadShape {
        /// Field name as in the reference.
        field: &'static str,
        /// The value found.
        value: i128,
        /// What rule it breaks.
        why: String,
    },
    /// An area the superblock describes does not lie inside the device.
    #[error("{area} ({field}) covers device sectors {extent}, but the device has only {dev_sectors} sectors: the device was truncated, is not the one the array was made on, or the superblock is damaged; {ADVICE}")]
    OutsideDevice {
        /// The field that places the area.
        field: &'static str,
        /// The area.
        area: Area,
        /// Where the superblock puts it.
        extent: Extent,
        /// Device size in sectors.
        dev_sectors: u64,
    },
    /// Two areas overlap: writes to one would overwrite the other (for the data area: client
    /// writes would overwrite metadata).
    #[error("{area} ({field}) at device sectors {extent} overlaps {other} at {other_extent}: writes to one would destroy the other; {ADVICE}")]
    Overlap {
        /// The field that places the area found to be wrong.
        field: &'static str,
        /// That area.
        area: Area,
        /// Where the superblock puts it.
        extent: Extent,
        /// The area it runs into.
        other: Area,
        /// Where that one lies.
        other_extent: Extent,
    },
    /// The bitmap's bits do not cover the whole array (`sync_size` too small).
    #[error("bitmap sync_size is {sync_size} sectors but the array needs {needed}: writes beyond it would not be tracked; ignore this bitmap (a full resync replaces it if the array is dirty)")]
    BitmapTooShort {
        /// `sync_size` found.
        sync_size: u64,
        /// Sectors the bitmap must cover.
        needed: u64,
    },
    /// The bitmap (superblock + bits) does not fit between its start and the next area.
    #[error("bitmap sync_size {sync_size} sectors at chunksize {chunksize} bytes needs {bytes} bytes on disk, but only {room_bytes} bytes are free at the bitmap's place: the bitmap superblock is damaged; ignore this bitmap (a full resync replaces it if the array is dirty)")]
    BitmapNoRoom {
        /// `sync_size` found.
        sync_size: u64,
        /// `chunksize` found (bytes).
        chunksize: u32,
        /// Bytes the bitmap would occupy (all copies for a clustered bitmap).
        bytes: u128,
        /// Bytes available.
        room_bytes: u64,
    },
}

/// What to do about a member whose metadata fails validation (appended to the messages).
pub const ADVICE: &str = "the metadata is damaged or was not written by md; leave this device out (the array runs degraded if it can) and add it back so it is rebuilt, and do not force it in";

/// Result alias.
pub type Result<T> = std::result::Result<T, FormatError>;
