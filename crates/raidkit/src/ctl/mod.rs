//! Commands that talk to a running array over its control socket: `status`, `manage`,
//! `grow NAME`, `sync-action`, `monitor`, `stats` (and its Prometheus endpoint),
//! `trace record`.

pub mod deliver;
pub mod health;
pub mod manage;
pub mod monitor;
pub mod prometheus;
pub mod stats;
pub mod status;
pub mod trace;
pub mod wire;
