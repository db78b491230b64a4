//! raidkit performance tools, the library behind `raidkit advise`, `raidkit trace analyze`,
//! `raidkit bench io` and `raidkit probe`.
//!
//! * [`advise`]: filesystem alignment for an array (ext4 stride / stripe width / block-group
//!   size / journal size, xfs su / sw), computed from the array's real layout.
//! * [`trace`]: parse `blkparse` text and raidkit's own JSON-lines trace, and summarise it.
//! * [`bench`]: a small fio: sequential / random / mixed workloads over a file, a device or
//!   an array assembled through the engine, with latency percentiles and per-member shares.
//! * [`probe`]: what kind of device is this (rotational, direct-IO granularity, erase block).
//! * [`plot`]: PNG and SVG charts for all of the above.
//! * [`stats`]: latency histograms and percentiles.

#![deny(missing_docs)]

pub mod advise;
pub mod bench;
pub mod error;
pub mod plot;
pub mod probe;
pub mod stats;
pub mod trace;

pub use error::{Result, ToolsError};
