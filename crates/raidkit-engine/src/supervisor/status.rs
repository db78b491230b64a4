//! Typed status of a supervised array: what `raidkit status` shows, and the outcome of
//! background jobs. All serializable; the frontends print them.

use crate::array::{MemberInfo, MemberIo};
use crate::bbl::MemberBadBlocks;
use crate::iostats::IoSnapshot;
use crate::stripe_cache::StripeCacheStats;
use crate::sync::Verdict;
use serde::Serialize;

/// State of the current background job.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct JobStatus {
    /// `resync`, `recovery`, `check`, `repair`, `replace`, or `idle`.
    pub action: String,
    /// Sectors done / total in the job's address space.
    pub done_sectors: u64,
    /// Total sectors of the job.
    pub total_sectors: u64,
    /// Current speed, bytes per second.
    pub speed_bytes_per_sec: u64,
    /// Estimated seconds left.
    pub eta_seconds: Option<u64>,
    /// Speed limit in bytes per second (0 = none).
    pub speed_limit: u64,
}

/// The outcome of a resync, check or repair.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SyncResult {
    /// `resync`, `check` or `repair`.
    pub action: String,
    /// Inconsistent array byte ranges `(offset, length)`.
    pub mismatch_ranges: Vec<(u64, u64)>,
    /// What could be told about each inconsistent page.
    pub verdicts: Vec<Verdict>,
    /// Where the pass stopped early (sync-space sector), if it did.
    pub stopped_at: Option<u64>,
    /// Sectors of the sync address space processed.
    pub sectors_done: u64,
    /// Array bytes `[start, end)` the pass covered.
    pub covered: (u64, u64),
    /// Array byte offset a stopped check/repair resumes from.
    pub resume_from: Option<u64>,
}

/// The outcome of a recovery, re-add or hot replacement.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RebuildResult {
    /// `recovery`, `re-add` or `replace`.
    pub action: String,
    /// Roles rebuilt.
    pub roles: Vec<usize>,
    /// Data sectors written (re-add only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sectors: Option<u64>,
    /// Array byte ranges that could not be reconstructed.
    pub lost: Vec<(u64, u64)>,
}

/// A background job that failed.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct JobFailure {
    /// The job.
    pub action: String,
    /// Why.
    pub error: String,
}

/// The outcome of the last background job.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum JobResult {
    /// A resync, check or repair that ran (to the end or stopped).
    Sync(SyncResult),
    /// A recovery, re-add or replacement that ran.
    Rebuild(RebuildResult),
    /// A reshape that ran (to the end or stopped).
    Reshape(super::ReshapeResult),
    /// A job that failed.
    Failed(JobFailure),
}

impl JobResult {
    /// A failure of `action`.
    pub fn failed(action: &str, error: impl std::fmt::Display) -> JobResult {
        JobResult::Failed(JobFailure {
            action: action.to_string(),
            error: error.to_string(),
        })
    }
}

/// Everything `raidkit status` shows about one array.
#[derive(Clone, Debug, Serialize)]
pub struct ArrayStatus {
    /// The stable name.
    pub name: String,
    /// UUID (mdadm text form).
    pub uuid: String,
    /// Level name.
    pub level: String,
    /// Layout name.
    pub layout: String,
    /// Chunk, bytes.
    pub chunk_bytes: u64,
    /// Role slots.
    pub raid_disks: usize,
    /// Array size, bytes.
    pub array_bytes: u64,
    /// `clean` or `dirty`, then `, degraded` if roles are missing.
    pub state: String,
    /// Roles are missing.
    pub degraded: bool,
    /// Served read-only.
    pub read_only: bool,
    /// Members and spares.
    pub members: Vec<MemberInfo>,
    /// Roles with no member.
    pub missing_roles: Vec<usize>,
    /// IO counters per member.
    pub io: Vec<MemberIo>,
    /// The current background job.
    pub sync: JobStatus,
    /// The outcome of the last background job.
    pub last_result: Option<JobResult>,
    /// Array byte ranges whose data is lost (reads fail).
    pub lost_ranges: Vec<(u64, u64)>,
    /// Lost ranges that were replaced by zeros (`--update no-bbl` with force).
    pub lost_zeroed_ranges: Vec<(u64, u64)>,
    /// Bad blocks per member.
    pub bad_blocks: Vec<MemberBadBlocks>,
    /// The stripe cache, if the array has one.
    pub stripe_cache: Option<StripeCacheStats>,
    /// The reshape in progress, if any.
    pub reshape: Option<super::ReshapeProgress>,
}

/// Live IO statistics of one array.
#[derive(Clone, Debug, Serialize)]
pub struct ArrayStats {
    /// The stable name.
    pub name: String,
    /// UUID (mdadm text form).
    pub uuid: String,
    /// Client IO counters.
    pub io: IoSnapshot,
    /// IO counters per member.
    pub members: Vec<MemberIo>,
    /// The stripe cache, if the array has one.
    pub stripe_cache: Option<StripeCacheStats>,
}
