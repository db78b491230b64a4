//! Engine errors: typed, with the facts. Messages say what is wrong in the engine's terms
//! (md's words: fail, add, force, the bad-block log); what a frontend's user types to do
//! something about it is the frontend's to say ([`EngineError::remedy`] tells it which
//! remedy applies).

use std::io;
use thiserror::Error;

/// Result alias.
pub type Result<T> = std::result::Result<T, EngineError>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Error)]
pub enum EngineError {
    /// An IO error on a member or another file.
    #[error("{device}: IO error while {what}: {source}")]
    Io {
        /// Device or file name.
        device: String,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A member carries no (usable) MD superblock.
    #[error("{device}: {detail}")]
    NoSuperblock {
        /// Device name.
        device: String,
        /// What was found instead and what to do.
        detail: String,
    },
    /// The given members cannot be assembled as given (wrong array, stale, duplicate...).
    #[error("{device}: {why}")]
    BadMember {
        /// Device name.
        device: String,
        /// Explanation and advice.
        why: String,
    },
    /// Not enough members to run the array.
    #[error("cannot start {level} array {uuid}: {why}")]
    NotEnoughMembers {
        /// Level name.
        level: String,
        /// Array UUID text.
        uuid: String,
        /// Which roles are missing and what to do.
        why: String,
    },
    /// Network members could not be reached at assembly, and the array cannot run
    /// without them (or none of its members could be reached).
    #[error("could not reach {unreached}: {why}")]
    Unreachable {
        /// Each member not reached, with its connection error.
        unreached: String,
        /// Why the array cannot run without them, and what to do.
        why: String,
    },
    /// Array was not shut down cleanly and is degraded (the RAID write hole).
    #[error("array {uuid} is degraded and was not stopped cleanly (resync_offset {resync}): parity may be wrong for stripes written at the crash, so data reconstructed from it could be silently wrong. Add the missing member(s) if you have them; otherwise start it anyway by force (the array is then marked clean as md does)")]
    DirtyDegraded {
        /// Array UUID text.
        uuid: String,
        /// The recorded resync offset.
        resync: u64,
    },
    /// A feature raidkit refuses to touch (journal, PPL, cluster, reshape in progress...).
    #[error("array {uuid}: {what} — {advice}")]
    Unsupported {
        /// Array UUID text.
        uuid: String,
        /// The feature.
        what: String,
        /// What to do.
        advice: String,
    },
    /// Geometry rejected by the layout library.
    #[error("invalid array geometry: {0}")]
    Geometry(#[from] raidkit_layout::LayoutError),
    /// A member coming back changed while it was away (it ran without this array: its
    /// events are newer, or both sides ran degraded — split brain): taking it back with a
    /// catch-up would mix two histories. Nothing was written.
    #[error("not re-adding {device}: {why}")]
    Diverged {
        /// Device name.
        device: String,
        /// What happened, and which side to keep.
        why: String,
    },
    /// Refused to write to something that does not look like ours.
    #[error("refusing to use {device}: {why}")]
    Refused {
        /// Device name.
        device: String,
        /// What was found and how to override.
        why: String,
    },
    /// Refused to write to a device that is not blank: it may hold someone's data.
    #[error("refusing to use {device}: {found}")]
    NotBlank {
        /// Device name.
        device: String,
        /// What is on it.
        found: Found,
    },
    /// An argument is invalid.
    #[error("{0}")]
    Invalid(String),
    /// A request cannot be done as given; `remedy` says which change of the request
    /// would make it possible (frontends name their own input for it).
    #[error("{why}")]
    Request {
        /// What is wrong, in the engine's terms.
        why: String,
        /// What to change.
        remedy: Remedy,
    },
    /// Array range out of bounds.
    #[error("request {offset}+{len} is outside the array ({size} bytes)")]
    OutOfRange {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Array size.
        size: u64,
    },
    /// Data could not be read from any copy and could not be reconstructed.
    #[error("array bytes {offset}..{end} cannot be read: {why}")]
    Unreadable {
        /// First byte.
        offset: u64,
        /// End byte (exclusive).
        end: u64,
        /// Which members failed and why.
        why: String,
    },
    /// Array bytes whose data is lost (no valid copy on any member) were read.
    #[error("array bytes {offset}..{end} cannot be read: data lost: array bytes {lost_offset}..{lost_end} have no valid copy on any member (bad blocks beyond what redundancy covers); writing new data over them (e.g. restoring from a backup) makes them valid again, and removing the bad-block log by force replaces them all with zeros")]
    DataLost {
        /// First byte asked for that is lost.
        offset: u64,
        /// End (exclusive) of the lost bytes asked for.
        end: u64,
        /// First byte of the lost range.
        lost_offset: u64,
        /// End (exclusive) of the lost range.
        lost_end: u64,
    },
    /// The bad-block log was not removed: entries remain that no member holds valid data
    /// for.
    #[error("the bad-block log was not removed: {repaired} entr{} repaired from redundancy, but these remain ({}) and no member holds valid data for array bytes [{}]. Restore those ranges from a backup after forcing the removal, which removes the log anyway and replaces the lost ranges by zeros{}", if *.repaired == 1 { "y was" } else { "ies were" }, .remaining.join("; "), byte_ranges(.lost), unsaved_logs(.unsaved))]
    BadBlocksRemain {
        /// Entries repaired (rewritten from redundancy) before giving up.
        repaired: usize,
        /// The entries left, per member: `role N (device): start+len ...`.
        remaining: Vec<String>,
        /// Array byte ranges `(offset, length)` no member holds valid data for.
        lost: Vec<(u64, u64)>,
        /// Members whose shrunk log could not be written, and why.
        unsaved: Vec<String>,
    },
    /// A checksum sidecar cannot be used (not a sidecar, another array, stale...).
    #[error("checksum sidecar {path}: {why}")]
    Sidecar {
        /// Sidecar path.
        path: String,
        /// What is wrong and what to do.
        why: String,
        /// True if it is a valid sidecar of this array that no longer matches its data
        /// (callers ignore it loudly rather than trust it).
        stale: bool,
    },
    /// An administrator asked to fail a member the array cannot do without.
    #[error("refusing to fail role {role} ({device}): the array cannot serve all of its data without it; add a spare and replace the member instead")]
    LastCopy {
        /// Role slot.
        role: usize,
        /// Device name.
        device: String,
    },
    /// The device a rebuild or a replacement copies onto failed, so the copy stopped.
    #[error("the {what} {device} failed, so the copy onto it stopped (its member_failed event says why); remove it and add another device to copy onto")]
    CopyTargetFailed {
        /// What the device was to the copy ("rebuild target", "replacement").
        what: &'static str,
        /// The device's name.
        device: String,
    },
    /// A write could not be completed on enough members.
    #[error("write to array bytes {offset}..{end} failed: {why}")]
    WriteFailed {
        /// First byte.
        offset: u64,
        /// End byte.
        end: u64,
        /// Explanation.
        why: String,
    },
}

/// What is on a device that is not blank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// An MD superblock.
    Superblock {
        /// Its metadata version (`1.2`...).
        metadata: String,
        /// The array's UUID, mdadm's text form.
        uuid: String,
        /// The array's name.
        name: String,
    },
    /// Data that is not zero.
    Data {
        /// Byte offset of the first non-zero byte seen.
        at: u64,
    },
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Superblock {
                metadata,
                uuid,
                name,
            } => write!(
                f,
                "it carries a {metadata} MD superblock of array {uuid} ({name}); it may hold someone's data"
            ),
            Found::Data { at } => write!(
                f,
                "it is not blank (non-zero data at byte {at}): it may hold a filesystem or another array"
            ),
        }
    }
}

/// What an administrator can do about an error, in the engine's terms. Frontends word it
/// for their users (the CLI names its commands and flags); the engine's messages do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// Do it anyway, by force: overwrite a device that is not blank, or start a dirty
    /// degraded array (which is then marked clean, as md does).
    Force,
    /// Write the lost ranges again (restore them from a backup), or remove the
    /// bad-block log by force, which replaces them by zeros.
    RestoreLostData,
    /// Recompute the checksum sidecar from the array's data.
    RecomputeChecksums,
    /// Give as many members as the array has slots (an empty slot is a missing member).
    MatchMemberCount,
    /// Leave the chunk size out: the level has none.
    NoChunk,
    /// Use 1.x metadata for a bad-block log, or create the array without one.
    BadBlockLogNeeds1x,
    /// Give a size, so that member files that do not exist are created.
    GiveMemberSize,
    /// Let the reshape in progress finish (or revert it) first.
    FinishReshape,
    /// Write-behind needs a write-intent bitmap: add one.
    WriteBehindNeedsBitmap,
    /// Write-behind applies to write-mostly members: mark the slow member(s) so.
    WriteBehindNeedsWriteMostly,
}

/// `a..b, c..d` of `(offset, length)` ranges.
fn byte_ranges(ranges: &[(u64, u64)]) -> String {
    ranges
        .iter()
        .map(|(o, l)| format!("{o}..{}", o + l))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tail of [`EngineError::BadBlocksRemain`] for logs that could not be written.
fn unsaved_logs(unsaved: &[String]) -> String {
    if unsaved.is_empty() {
        return String::new();
    }
    format!(
        ". Also, writing the shrunk bad-block logs failed ({}): on disk they still list the repaired entries, which are harmless (rewritten again next time) but mean the logs are out of date; check those members",
        unsaved.join("; ")
    )
}

impl EngineError {
    /// Is this the IO error of a member that is gone (no answer in time, or its
    /// connection lost; see [`crate::dev::io::is_gone`]), not of a bad sector?
    pub fn is_member_gone(&self) -> bool {
        matches!(self, EngineError::Io { source, .. } if crate::dev::io::is_gone(source))
    }

    /// The remedy that applies, if the error has one an administrator can apply.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            EngineError::NotBlank { .. } | EngineError::DirtyDegraded { .. } => Some(Remedy::Force),
            EngineError::DataLost { .. } | EngineError::BadBlocksRemain { .. } => {
                Some(Remedy::RestoreLostData)
            }
            EngineError::Sidecar { stale: true, .. } => Some(Remedy::RecomputeChecksums),
            EngineError::Request { remedy, .. } => Some(*remedy),
            _ => None,
        }
    }

    /// Build an IO error with context.
    pub fn io(device: &str, what: &'static str, source: io::Error) -> EngineError {
        EngineError::Io {
            device: device.to_string(),
            what,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_errors_say_what_is_wrong_and_which_remedy_applies() {
        let e = EngineError::DataLost {
            offset: 4096,
            end: 8192,
            lost_offset: 0,
            lost_end: 8192,
        };
        assert_eq!(e.remedy(), Some(Remedy::RestoreLostData));
        let text = e.to_string();
        assert!(
            text.starts_with("array bytes 4096..8192 cannot be read: data lost: array bytes 0..8192 have no valid copy"),
            "{text}"
        );
        assert!(!text.contains("raidkit ") && !text.contains("--"), "{text}");
        let e = EngineError::NotBlank {
            device: "d".into(),
            found: Found::Data { at: 7 },
        };
        assert_eq!(e.remedy(), Some(Remedy::Force));
        assert_eq!(
            e.to_string(),
            "refusing to use d: it is not blank (non-zero data at byte 7): it may hold a filesystem or another array"
        );
        let e = EngineError::BadBlocksRemain {
            repaired: 1,
            remaining: vec!["role 0 (a): 8+8".into()],
            lost: vec![(0, 4096), (8192, 512)],
            unsaved: Vec::new(),
        };
        assert!(e
            .to_string()
            .starts_with("the bad-block log was not removed: 1 entry was repaired from redundancy, but these remain (role 0 (a): 8+8) and no member holds valid data for array bytes [0..4096, 8192..8704]"));
        assert!(!e.to_string().contains("raidkit ") && !e.to_string().contains("--"));
        assert_eq!(EngineError::Invalid("x".into()).remedy(), None);
    }
}
