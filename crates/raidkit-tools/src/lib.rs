//! raidkit's tools, the library behind `raidkit advise`, `raidkit trace analyze`,
//! `raidkit bench io` and `raidkit probe`, the charts they draw, and the disk checks of
//! `create`, `detail` and `status`.
//!
//! * [`advise`]: filesystem alignment for an array (ext4 stride / stripe width / block-group
//!   size / journal size, xfs su / sw), computed from the array's real layout.
//! * [`trace`]: parse `blkparse` text and raidkit's own JSON-lines trace, and summarise it.
//! * [`bench`]: a small fio: sequential / random / mixed workloads over a file, a device or
//!   an array assembled through the engine, with latency percentiles and per-member shares.
//! * [`probe`]: what kind of device is this (rotational, direct-IO granularity, erase block,
//!   link speed), and members against their peers.
//! * [`disks`]: members that share a failure domain, SMART health, link speeds.
//! * [`plot`]: PNG and SVG figures; [`charts`]: the figures of bench, probe and trace, titled
//!   with what was measured; [`csvplot`]: line panels from a benchmark script's CSV.
//! * [`human`]: human units and ISO-8601 timestamps; [`machine`]: what a benchmark ran on.
//! * [`stats`]: latency histograms and percentiles; [`watch`]: member lines of `stats`.

#![deny(missing_docs)]

pub mod advise;
pub mod bench;
pub mod charts;
pub mod csvplot;
pub mod disks;
pub mod error;
pub mod human;
pub mod machine;
pub mod plot;
pub mod probe;
pub mod stats;
pub mod trace;
pub mod watch;

pub use error::{Result, ToolsError};
