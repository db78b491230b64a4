//! The raidkit engine: the one place that does IO.
//!
//! * [`dev`]: member devices (files, block devices, memory).
//! * [`sb`]: one view over 0.90 and 1.x superblocks, probing and writing them.
//! * [`assemble`]: find the members of an array by UUID and role, refuse what is unsafe.
//! * [`array`]: read and write any byte range of a running array, every level, degraded too.
//! * [`create`]: make a new array exactly as mdadm would lay it out.
//! * [`sync`]: make redundancy consistent (initial sync, resync after an unclean stop).
//! * [`bitmap`]: the write-intent bitmap at run time.
//! * [`checksums`]: the optional per-block checksum sidecar (scrub verdicts).
//! * [`grow`]: add or remove the bitmap of an existing array.
//! * [`replace`]: md's hot replace of an active member.

pub mod array;
pub mod assemble;
pub mod balance;
pub mod bbl;
pub mod bitmap;
pub mod checksums;
pub mod create;
pub mod dev;
pub mod error;
pub mod fault;
pub mod grow;
pub mod iostats;
pub mod rebuild;
pub mod replace;
pub mod sb;
pub mod stripe_cache;
pub mod supervisor;
pub mod sync;
mod util;

pub use array::Array;
pub use assemble::{assemble, assemble_paths, AssembleOptions};
pub use create::{create, CreateOptions};
pub use dev::{BlockDev, FileDev, MemDev};
pub use error::{EngineError, Result};
