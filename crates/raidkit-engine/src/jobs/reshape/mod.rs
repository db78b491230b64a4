//! Reshape: grow, shrink and restripe an array the way md does, crash-safe and
//! compatible with the kernel at every moment (md-format §7).
//!
//! * [`start`]: what a request means (the stages md goes through: takeovers and
//!   restripes), where the data moves (a data-offset change where the members have room,
//!   else mdadm's backup file), the plan `--dry-run` prints, and the superblocks that start
//!   a restripe or make a takeover.
//! * [`mover`]: moving the data, step by step with md's checkpoint rule
//!   ([`raidkit_layout::reshape::Reshape::next_step`]): never overwrite old-layout data
//!   that is not recorded as moved; record the position on every member before relying
//!   on it; back a critical section up when nothing else makes it safe.
//! * [`finish`]: checkpoints, the final superblocks, and reverting a reshape.
//! * [`drive`]: a whole reshape, stage after stage; continuing one; reverting one.
//! * [`backup`]: mdadm's backup file (`md_backup_data-1`), written and restored.
//!
//! While a reshape runs the array routes client IO by position ([`crate::array::reshape`]).

pub mod backup;
pub mod drive;
pub mod finish;
pub(crate) mod health;
pub mod mover;
pub(crate) mod stage;
pub mod start;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

pub use crate::array::reshape::{ReshapeStatus, ShapeInfo};
pub use drive::{can_revert, continue_reshape, reshape, revert, Progress};
pub use start::{ReshapePlan, ReshapeRequest, Room, Stage};

/// md writes a checkpoint at least this often while reshaping (besides when the
/// checkpoint rule needs one).
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

/// How to run the mover.
#[derive(Clone, Debug)]
pub struct ReshapeOptions {
    /// Set to stop at the next safe position (recorded on the members).
    pub stop: Option<Arc<AtomicBool>>,
    /// Set to pause at the next safe position (recorded); cleared to go on.
    pub pause: Option<Arc<AtomicBool>>,
    /// Limit in bytes of array data moved per second (0 = none); read on every step.
    pub max_bytes_per_sec: Option<Arc<AtomicU64>>,
    /// Time-based checkpoints (md: 10 s).
    pub checkpoint_every: Duration,
    /// Array sectors moved per batch (the reshape's stripe cache); None = sized from the
    /// geometry ([`start::buffer_sectors`]).
    pub buffer_sectors: Option<u64>,
    /// Backup file for a reshape that moves data in place.
    pub backup_file: Option<PathBuf>,
    /// Stop once the position reaches this one (array sectors; at the first position at
    /// or past it where the reshape can rest).
    pub stop_at: Option<u64>,
}

impl Default for ReshapeOptions {
    fn default() -> Self {
        ReshapeOptions {
            stop: None,
            pause: None,
            max_bytes_per_sec: None,
            checkpoint_every: CHECKPOINT_EVERY,
            buffer_sectors: None,
            backup_file: None,
            stop_at: None,
        }
    }
}

/// How a run of the mover ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ReshapeEnd {
    /// Everything is moved and the final superblocks are written.
    Finished,
    /// Stopped on request at this position (recorded on the members).
    Stopped {
        /// The recorded position, array sectors.
        position: u64,
    },
}
