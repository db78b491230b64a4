//! Why a supervisor request was refused. The texts say what is wrong; the frontends add
//! what to do in their own words (command names belong to them, not to the engine).

use crate::error::EngineError;
use thiserror::Error;

/// A refused or failed supervisor request.
#[derive(Debug, Error)]
pub enum SupervisorError {
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Another background job is running; it must finish or be stopped first.
    #[error("a {running} is already running on {array}")]
    Busy {
        /// The array.
        array: String,
        /// What runs (`check`, `recovery`, `replace`...).
        running: String,
    },
    /// The action is not one of check, repair, resync, recover, idle.
    #[error("unknown sync action {0:?}: use check, repair, resync, recover or idle")]
    UnknownAction(String),
    /// A window or resume was given with an action other than check or repair.
    #[error("a window or resume applies to check and repair, not {0}")]
    WindowNeedsScrub(String),
    /// Both a window and resume were given.
    #[error("give either a window or resume, not both")]
    WindowAndResume,
    /// The scrub window is empty or outside the array.
    #[error("empty scrub window {from}..{to} (the array has {size} bytes)")]
    EmptyWindow {
        /// Start, array bytes.
        from: u64,
        /// End, array bytes (exclusive).
        to: u64,
        /// Array size, bytes.
        size: u64,
    },
    /// Resume was asked but no stopped check or repair was recorded.
    #[error("no stopped check or repair of {array} to resume")]
    NothingToResume {
        /// The array.
        array: String,
    },
    /// The recorded scrub position is another array's.
    #[error("the recorded scrub position belongs to array {recorded}, not {array}")]
    ResumeOtherArray {
        /// UUID in the state file.
        recorded: String,
        /// This array's UUID.
        array: String,
    },
    /// The action writes but the array is served read-only.
    #[error("{0} needs the array writable; it is served read-only")]
    ReadOnly(String),
    /// The device named is not an active member.
    #[error("{device} is not an active member of {array}")]
    NotAMember {
        /// The device as given.
        device: String,
        /// The array.
        array: String,
    },
}

/// Result of supervisor requests.
pub type Result<T> = std::result::Result<T, SupervisorError>;
