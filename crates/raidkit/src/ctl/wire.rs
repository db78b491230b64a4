//! What the commands read from control replies: typed views of the supervisors' status,
//! statistics and events (the fields the text output uses; `--json` prints the reply as
//! it came).

use serde::Deserialize;

/// One array's status (`raidkit status`).
#[derive(Clone, Debug, Deserialize)]
pub struct Status {
    pub name: String,
    pub uuid: String,
    /// The superblock's name (`host:name` on 1.x; empty on 0.90).
    #[serde(default)]
    pub md_name: String,
    pub level: String,
    pub layout: String,
    pub chunk_bytes: u64,
    pub raid_disks: usize,
    pub array_bytes: u64,
    pub state: String,
    pub read_only: bool,
    pub members: Vec<Member>,
    pub missing_roles: Vec<usize>,
    pub sync: Job,
    #[serde(default)]
    pub lost_ranges: Vec<(u64, u64)>,
    #[serde(default)]
    pub lost_zeroed_ranges: Vec<(u64, u64)>,
    #[serde(default)]
    pub bad_blocks: Vec<BadBlocks>,
    pub stripe_cache: Option<StripeCache>,
    /// The reshape in progress (the engine's status, see `grow`).
    #[serde(default)]
    pub reshape: Option<Reshape>,
    /// Members sharing a failure domain (added by `status` itself, not the server).
    #[serde(default)]
    pub disk_warnings: Vec<DiskWarning>,
}

/// A reshape in progress, as `status` prints it.
#[derive(Clone, Debug, Deserialize)]
pub struct Reshape {
    pub old: Shape,
    pub new: Shape,
    pub direction: String,
    pub done_sectors: u64,
    pub total_sectors: u64,
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub running: bool,
}

/// One side of a reshape.
#[derive(Clone, Debug, Deserialize)]
pub struct Shape {
    pub level: String,
    pub layout: String,
    pub chunk_sectors: u64,
    pub raid_disks: usize,
}

/// A failure-domain finding about some members.
#[derive(Clone, Debug, Deserialize)]
pub struct DiskWarning {
    pub severity: String,
    pub message: String,
}

/// A member or spare.
#[derive(Clone, Debug, Deserialize)]
pub struct Member {
    pub device: String,
    pub role: Option<usize>,
    pub state: String,
    /// A network member's link.
    #[serde(default)]
    pub link: Option<Link>,
    /// md's write-mostly.
    #[serde(default)]
    pub write_mostly: bool,
    /// Writes acknowledged and not yet on this member (write-behind).
    #[serde(default)]
    pub write_behind_backlog: u64,
}

/// A network member's link.
#[derive(Clone, Debug, Deserialize)]
pub struct Link {
    pub state: String,
    pub since: u64,
    pub error: Option<String>,
    pub failed_attempts: u64,
    pub latency_us: u64,
    pub tls: bool,
    /// The server offers FLUSH (absent from older servers: taken as yes).
    #[serde(default)]
    pub flush: Option<bool>,
}

/// The current background job.
#[derive(Clone, Debug, Deserialize)]
pub struct Job {
    pub action: String,
    pub done_sectors: u64,
    pub total_sectors: u64,
    pub speed_bytes_per_sec: u64,
    pub eta_seconds: Option<u64>,
}

/// Bad blocks of one member.
#[derive(Clone, Debug, Deserialize)]
pub struct BadBlocks {
    pub role: usize,
    pub device: String,
    pub ranges: Vec<(u64, u64)>,
    pub logged: bool,
}

/// The stripe cache.
#[derive(Clone, Debug, Deserialize)]
pub struct StripeCache {
    pub mode: String,
    pub size_entries: u64,
    pub used_entries: u64,
    pub max_entries: u64,
    pub memory_bytes: u64,
    /// The most page memory in use at once (absent from an older server's answer).
    #[serde(default)]
    pub peak_memory_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub dirty_stripes: u64,
    pub full_stripe_merges: u64,
}

/// One array's IO statistics (`raidkit stats`).
#[derive(Clone, Debug, Deserialize)]
pub struct Stats {
    pub name: String,
    pub uuid: String,
    pub io: Io,
    pub members: Vec<MemberIo>,
    pub stripe_cache: Option<StripeCache>,
}

/// Client IO counters.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Io {
    #[serde(default)]
    pub uptime_ms: u64,
    pub read: Dir,
    pub write: Dir,
    pub flush: Dir,
}

/// Counters of one direction.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Dir {
    pub count: u64,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub size_hist: Vec<u64>,
    #[serde(default)]
    pub lat_hist_us: Vec<u64>,
}

/// IO counters of one member.
#[derive(Clone, Debug, Deserialize)]
pub struct MemberIo {
    pub role: usize,
    pub reads: u64,
    pub writes: u64,
}

/// One event as monitors receive it.
#[derive(Clone, Debug, Deserialize)]
pub struct Event {
    pub time: u64,
    pub array: String,
    pub kind: String,
    pub detail: serde_json::Value,
}
