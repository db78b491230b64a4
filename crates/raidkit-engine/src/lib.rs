//! The raidkit engine: the one place that does IO.
//!
//! * [`array`]: a running array — read and write any byte range at every level, degraded
//!   too; members, superblocks, stripes, the stripe cache, bad blocks.
//! * [`jobs`]: work over a whole array — [`sync`] (resync, check, repair), [`rebuild`]
//!   (recovery onto spares, re-add), [`replace`] (md's hot replace), [`grow`] (bitmap),
//!   member management, bad-block log removal.
//! * [`setup`]: [`create`] a new array as mdadm lays it out, [`assemble`] one from its
//!   members (refusing what is unsafe).
//! * [`dev`]: member devices (files, block devices, memory, fault injection).
//! * [`meta`]: on-member metadata at run time — [`sb`] (0.90 and 1.x superblocks),
//!   [`bitmap`] (the write-intent bitmap), [`checksums`] (the optional checksum sidecar).
//! * [`supervisor`]: the background jobs of a served array, with progress and events.
//!
//! The modules of the first layout (`raidkit_engine::sync`, `::create`, `::sb`...) are
//! re-exported under their old paths.

pub mod array;
pub mod dev;
pub mod error;
pub mod jobs;
pub mod meta;
pub mod setup;
pub mod supervisor;

mod locks;
mod ranges;
mod util;

pub use array::{bad_blocks as bbl, balance, cache as stripe_cache, iostats};
pub use dev::fault;
pub use jobs::{grow, rebuild, replace, sync};
pub use meta::{bitmap, checksums, sb};
pub use setup::{assemble, create};

pub use array::Array;
pub use dev::{BlockDev, FileDev, MemDev};
pub use error::{EngineError, Remedy, Result};
pub use setup::assemble::{assemble, assemble_paths, AssembleOptions};
pub use setup::create::{create, CreateOptions};
pub use setup::identity::{member_identity, not_member_kind, same_member, Identity};
