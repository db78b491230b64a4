//! Typed events of a supervised array. On the wire (JSON) an event is
//! `{"time": .., "array": .., "kind": "member_failed", "detail": {..}}`; the frontends word
//! and print them.

use super::reshape::ReshapeReport;
use super::status::JobResult;
use crate::array::reshape::ShapeInfo;
use crate::array::ArrayEvent;
use crate::grow::BitmapChange;
use crate::sync::Verdict;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// What happened. Serialized (untagged) as the event's `detail`; [`Event::kind`] names it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Event {
    /// Something the array reported (member failed, spare added, rebuild started...).
    Array(ArrayEvent),
    /// The array was not stopped cleanly: redundancy may be inconsistent; a resync starts
    /// (only of the dirty bitmap regions if there is a bitmap).
    UncleanStopDetected {
        /// One sentence for logs.
        note: String,
    },
    /// Roles are missing.
    Degraded {
        /// The missing roles.
        missing_roles: Vec<usize>,
    },
    /// A failed member or a spare was removed.
    MemberRemoved {
        /// The device as named in the request.
        device: String,
    },
    /// A spare took over a missing role.
    SpareActivated {
        /// The roles now held by former spares.
        roles: Vec<usize>,
    },
    /// A background job passed another 10%.
    RebuildProgress {
        /// The job (`resync`, `check`, `recovery`...).
        action: Option<String>,
        /// Percent done, a multiple of 10.
        percent: u64,
    },
    /// A resync, check or repair started.
    SyncStarted {
        /// `resync`, `check` or `repair`.
        action: String,
        /// Array bytes `[from, to)` of a windowed check/repair.
        window: Option<(u64, u64)>,
    },
    /// A check or repair found inconsistent redundancy.
    MismatchesFound {
        /// `check` or `repair`.
        action: String,
        /// Array byte ranges `(offset, length)`.
        ranges: Vec<(u64, u64)>,
        /// What could be told about each inconsistent page.
        verdicts: Vec<Verdict>,
        /// Array bytes `[start, end)` the pass covered.
        covered: (u64, u64),
    },
    /// A resync, check or repair ended (finished, stopped or failed).
    SyncFinished(JobResult),
    /// A recovery failed, or a re-add ended.
    RebuildFinished(JobResult),
    /// A hot replacement failed.
    ReplaceFinished(JobResult),
    /// A reshape job started (`grow NAME ...`, a reshape found on the members continued,
    /// or one turned back): its action and the shapes before and after.
    ReshapeStarted {
        /// `reshape`, `reshape-continue` or `reshape-revert`.
        action: String,
        /// The shape it starts from.
        from: ShapeInfo,
        /// The shape it goes to.
        to: ShapeInfo,
    },
    /// A reshape job ended: finished (the array has the new shape and size), stopped at a
    /// safe position, or failed; with the bytes it moved.
    ReshapeFinished(ReshapeReport),
    /// A reverted reshape's job ended (`end` `finished`: the array has its old shape back).
    ReshapeReverted(ReshapeReport),
    /// The write-intent bitmap was added or removed.
    Bitmap(BitmapChange),
    /// The scrub position could not be recorded (a later resume will not find it).
    StateFileError {
        /// The state file.
        path: String,
        /// Why.
        error: String,
    },
    /// A network member's connection was lost or it missed a deadline: it is failed and
    /// will be reconnected (with back-off) and re-added when it is back.
    MemberDisconnected {
        /// Its role.
        role: usize,
        /// The member (its URI).
        device: String,
        /// Why it was failed.
        reason: String,
    },
    /// A network member answers again (the same export): a failed one's (or one not
    /// reached at assembly) re-add follows; a kept one (the array cannot run without it)
    /// serves IO again at once.
    MemberReconnected {
        /// Its role.
        role: usize,
        /// The member (its URI).
        device: String,
        /// Connection attempts it took.
        attempts: u64,
    },
    /// A member that came back was not re-added: it changed while it was away (split
    /// brain, or newer than this array). `why` says what happened and which side to keep.
    MemberRefused {
        /// Its role (None: not known, it is not a member of this array as it is).
        role: Option<usize>,
        /// The member.
        device: String,
        /// What happened and what to do.
        why: String,
    },
    /// A returning member's catch-up started.
    ResyncStarted {
        /// Its role.
        role: usize,
        /// The member.
        device: String,
        /// Only the write-intent bitmap's dirty regions are copied (else: everything).
        bitmap_guided: bool,
    },
    /// A returning member's catch-up ended.
    ResyncFinished {
        /// Its role.
        role: usize,
        /// The member.
        device: String,
        /// Bytes copied onto it.
        bytes_copied: u64,
        /// How long it took, milliseconds.
        millis: u64,
        /// Why it failed, if it did.
        error: Option<String>,
    },
    /// A test event, from a frontend (`note` is its text).
    Test {
        /// One sentence.
        note: String,
    },
}

impl Event {
    /// The event's kind as monitors see it: `member_failed`, `degraded`, `sync_finished`...
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Array(e) => array_event_kind(e),
            Event::UncleanStopDetected { .. } => "unclean_stop_detected",
            Event::Degraded { .. } => "degraded",
            Event::MemberRemoved { .. } => "member_removed",
            Event::SpareActivated { .. } => "spare_activated",
            Event::RebuildProgress { .. } => "rebuild_progress",
            Event::SyncStarted { .. } => "sync_started",
            Event::MismatchesFound { .. } => "mismatches_found",
            Event::SyncFinished(_) => "sync_finished",
            Event::RebuildFinished(_) => "rebuild_finished",
            Event::ReplaceFinished(_) => "replace_finished",
            Event::ReshapeStarted { .. } => "reshape_started",
            Event::ReshapeFinished(_) => "reshape_finished",
            Event::ReshapeReverted(_) => "reshape_reverted",
            Event::Bitmap(c) if c.bitmap => "bitmap_added",
            Event::Bitmap(_) => "bitmap_removed",
            Event::StateFileError { .. } => "state_file_error",
            Event::MemberDisconnected { .. } => "member_disconnected",
            Event::MemberReconnected { .. } => "member_reconnected",
            Event::MemberRefused { .. } => "member_refused",
            Event::ResyncStarted { .. } => "resync_started",
            Event::ResyncFinished { .. } => "resync_finished",
            Event::Test { .. } => "test",
        }
    }
}

fn array_event_kind(e: &ArrayEvent) -> &'static str {
    match e {
        ArrayEvent::MemberFailed { .. } => "member_failed",
        ArrayEvent::ReadErrorCorrected { .. } => "read_error_corrected",
        ArrayEvent::SpareAdded { .. } => "spare_added",
        ArrayEvent::RebuildStarted { .. } => "rebuild_started",
        ArrayEvent::RebuildFinished { .. } => "rebuild_finished",
        ArrayEvent::ReplaceStarted { .. } => "replace_started",
        ArrayEvent::ReplaceFinished { .. } => "replace_finished",
        ArrayEvent::BadBlockRecorded { .. } => "bad_block_recorded",
        ArrayEvent::BadBlockCleared { .. } => "bad_block_cleared",
        ArrayEvent::BadBlockLogCreated { .. } => "bad_block_log_created",
        ArrayEvent::BadBlockNotPersisted { .. } => "bad_block_not_persisted",
        ArrayEvent::BadBlockLogRemoved { .. } => "bad_block_log_removed",
        ArrayEvent::SlowMember { .. } => "slow_member",
    }
}

/// One event of one array, for logs and monitors.
#[derive(Clone, Debug, PartialEq)]
pub struct MonitorEvent {
    /// Unix time, seconds.
    pub time: u64,
    /// Array name.
    pub array: String,
    /// What happened.
    pub event: Event,
}

impl MonitorEvent {
    /// The kind (see [`Event::kind`]).
    pub fn kind(&self) -> &'static str {
        self.event.kind()
    }
}

impl Serialize for MonitorEvent {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("MonitorEvent", 4)?;
        m.serialize_field("time", &self.time)?;
        m.serialize_field("array", &self.array)?;
        m.serialize_field("kind", self.kind())?;
        m.serialize_field("detail", &self.event)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_is_kind_and_detail() {
        let e = MonitorEvent {
            time: 7,
            array: "a".into(),
            event: Event::Array(ArrayEvent::MemberFailed {
                role: 1,
                device: "d".into(),
                reason: "r".into(),
            }),
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"time": 7, "array": "a", "kind": "member_failed",
                "detail": {"event": "member_failed", "role": 1, "device": "d", "reason": "r"}})
        );
        let e = MonitorEvent {
            time: 1,
            array: "a".into(),
            event: Event::Degraded {
                missing_roles: vec![2],
            },
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"time": 1, "array": "a", "kind": "degraded", "detail": {"missing_roles": [2]}})
        );
    }
}
