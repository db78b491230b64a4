//! The control protocol: one JSON request line from the client, one JSON reply line from
//! the server (`{"ok": true, ...}` or `{"ok": false, "error": "..."}`); after the reply to
//! `monitor`, one JSON line per event until the client goes away.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// Every array's status.
    Status,
    /// Change an array's members or metadata.
    Manage {
        /// Array name.
        array: String,
        /// What to do.
        #[serde(flatten)]
        op: ManageOp,
        /// Overwrite a device that holds data; remove bad-block logs even if data is lost.
        #[serde(default)]
        force: bool,
    },
    /// Add or remove the write-intent bitmap.
    Grow {
        /// Array name.
        array: String,
        /// `internal` or `none`.
        bitmap: String,
        /// Bytes per bitmap bit.
        bitmap_chunk: Option<u64>,
    },
    /// Reshape a running array, or steer its reshape (`grow NAME ...`).
    Reshape {
        /// Array name.
        array: String,
        /// `start`, `dry-run`, `continue`, `revert`, `pause`, `resume`, or `set` (only the
        /// speed limit).
        op: String,
        /// The new shape (`start`, `dry-run`).
        #[serde(default)]
        spec: ReshapeSpec,
        /// Bytes per second (0 = unlimited), for every background job of the array.
        speed_limit: Option<u64>,
    },
    /// Start or stop background work; change the speed limit.
    SyncAction {
        /// Array name.
        array: String,
        /// check, repair, resync, recover or idle.
        action: Option<String>,
        /// Bytes per second (0 = unlimited).
        speed_limit: Option<u64>,
        /// Window start, array bytes.
        from: Option<u64>,
        /// Window end, array bytes (exclusive).
        to: Option<u64>,
        /// Continue the last stopped check/repair.
        #[serde(default)]
        resume: bool,
    },
    /// Live IO statistics (one array, or all with an empty name).
    Stats {
        /// Array name, or empty for all.
        #[serde(default)]
        array: String,
    },
    /// Record client requests into a file.
    TraceStart {
        /// Array name.
        array: String,
        /// The trace file (absolute).
        file: PathBuf,
        /// Stop after this long.
        seconds: Option<u64>,
    },
    /// Stop recording.
    TraceStop {
        /// Array name.
        array: String,
    },
    /// Send a test event through every monitor.
    TestEvent,
    /// Stream every event after the reply.
    Monitor,
}

/// The shape a reshape asks for (`grow`'s options), as given: the server resolves names
/// against the array.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReshapeSpec {
    /// `--raid-devices`.
    pub raid_devices: Option<usize>,
    /// `--add`: devices added first.
    #[serde(default)]
    pub add: Vec<PathBuf>,
    /// `--level`.
    pub level: Option<String>,
    /// `--layout`.
    pub layout: Option<String>,
    /// `--chunk`, bytes.
    pub chunk_bytes: Option<u64>,
    /// `--array-size`, bytes.
    pub array_bytes: Option<u64>,
    /// `--backup-file`.
    pub backup_file: Option<PathBuf>,
    /// `--force`.
    #[serde(default)]
    pub force: bool,
}

/// What `manage` does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum ManageOp {
    /// Mark a member failed.
    Fail {
        /// The member.
        member: PathBuf,
    },
    /// Remove a failed member or a spare.
    Remove {
        /// The member.
        member: PathBuf,
    },
    /// Add a device as a spare.
    Add {
        /// The device.
        member: PathBuf,
        /// Mark it write-mostly (md's `--add --write-mostly`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        write_mostly: bool,
    },
    /// Mark a member write-mostly (`on`) or not (md's `writemostly` / `-writemostly`).
    WriteMostly {
        /// The member.
        member: PathBuf,
        /// Set or clear.
        on: bool,
    },
    /// Set md's write-behind limit (0: synchronous).
    WriteBehind {
        /// Most writes outstanding to write-mostly members.
        n: u32,
    },
    /// Re-add a member that left.
    ReAdd {
        /// The member.
        member: PathBuf,
        /// Take it back even if it changed while it was away (split brain, or newer than
        /// the array): it is rebuilt in full and its own changes are lost.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        discard_its_changes: bool,
    },
    /// Hot-replace an active member.
    Replace {
        /// The member.
        member: PathBuf,
        /// The device to copy onto.
        with: Option<PathBuf>,
    },
    /// Change metadata (`no-bbl`).
    Update {
        /// What.
        value: String,
    },
}

impl Request {
    /// True for requests that only read (allowed to the socket group's members).
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Request::Status | Request::Stats { .. } | Request::Monitor
        )
    }

    /// The paths the server would open or create for this request, each with whether it
    /// is created (a trace file) rather than opened read-write (a member).
    pub fn paths(&self) -> Vec<(&PathBuf, bool)> {
        match self {
            Request::Manage { op, .. } => match op {
                ManageOp::Add { member, .. } | ManageOp::ReAdd { member, .. } => {
                    vec![(member, false)]
                }
                ManageOp::Replace {
                    with: Some(with), ..
                } => vec![(with, false)],
                _ => Vec::new(),
            },
            Request::TraceStart { file, .. } => vec![(file, true)],
            Request::Reshape { spec, .. } => spec
                .add
                .iter()
                .map(|p| (p, false))
                .chain(spec.backup_file.iter().map(|p| (p, true)))
                .collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form() {
        let r = Request::Manage {
            array: "a".into(),
            op: ManageOp::ReAdd {
                member: "/d/b".into(),
                discard_its_changes: false,
            },
            force: false,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cmd": "manage", "array": "a", "op": "re-add", "member": "/d/b", "force": false})
        );
        assert_eq!(serde_json::from_value::<Request>(v).unwrap(), r);
        let s: Request = serde_json::from_str(r#"{"cmd":"status"}"#).unwrap();
        assert_eq!(s, Request::Status);
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"nope"}"#).is_err());
    }
}
