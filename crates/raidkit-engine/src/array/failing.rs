//! md's error handlers: which IO errors fail a member, and which members are kept because
//! the array cannot serve all of its data without them.
//!
//! * A write error fails the member (md's `md_error`), except where the member holds the
//!   last working copy of some data on a level without parity: md's `raid1_error` and
//!   `raid10_error` keep the last working device of a mirror set (RAID0 and linear have
//!   no other copy at all). Only the write that failed fails; the range it covered reads
//!   as lost (an error, never what the failed write left behind) until a write there
//!   succeeds. RAID4/5/6 fail the member even beyond their redundancy (md's
//!   `raid5_error`): a stripe with a member that returns errors cannot be trusted.
//! * A flush error, or an error writing the write-intent bitmap, fails the member when
//!   the array serves all of its data without it; otherwise the member is kept and the
//!   flush (or the write the bitmap was for) fails.
//! * A member that does not answer within its deadline is failed whatever it holds
//!   ([`crate::dev::io`]): waiting for it would hang the array.
//! * An administrator's request to fail a member the array cannot do without is refused
//!   (md answers EBUSY for the last device of a mirror).

use crate::array::Array;
use crate::error::{EngineError, Result};
use crate::locks::lock;

impl Array {
    /// Fail the member in `role` if the array serves all of its data without it; keep it
    /// (false) if it holds the last working copy of some of it. Serialized, so two errors
    /// at once on the last two copies cannot fail both.
    pub(crate) fn fail_unless_last(&self, role: usize, why: &str) -> Result<bool> {
        let _one = lock(&self.members.fail_gate);
        if !self.survives_without(role) {
            return Ok(false);
        }
        self.fail_member(role, why)?;
        Ok(true)
    }

    /// A member's write failed (and no bad block could take the error): fail it as md's
    /// personality would (see the module documentation).
    pub(crate) fn fail_after_write_error(&self, role: usize, why: &str) -> Result<()> {
        if self.geo.level.has_parity() {
            return self.fail_member(role, why);
        }
        self.fail_unless_last(role, why).map(drop)
    }

    /// A member's flush failed with `e`: fail it if the array can do without it (the data
    /// is durable on the others). Returns the error for the flush if the member is kept.
    pub(crate) fn flush_failed(&self, role: usize, device: &str, e: std::io::Error) -> Result<()> {
        if self.fail_unless_last(role, &format!("flush failed: {e}"))? {
            return Ok(());
        }
        Err(EngineError::io(device, "flushing", e))
    }

    /// Writing metadata (the write-intent bitmap) failed on these devices (indices into
    /// the device list): fail each member the array can do without. The first error of a
    /// device kept (the last copy of some data, or a device that is not a member) is
    /// returned.
    pub(crate) fn metadata_write_failed(&self, failed: Vec<(usize, EngineError)>) -> Result<()> {
        let mut kept = None;
        for (i, e) in failed {
            let role = self
                .slots()
                .iter()
                .position(|m| m.as_ref().is_some_and(|m| m.index == i));
            let failed = match role {
                Some(r) => {
                    self.fail_unless_last(r, &format!("writing its metadata failed: {e}"))?
                }
                None => false,
            };
            if !failed && kept.is_none() {
                kept = Some(e);
            }
        }
        kept.map_or(Ok(()), Err)
    }

    /// Fail a member at an administrator's request: refused if the array cannot serve all
    /// of its data without it (a failed member is left as it is).
    pub fn fail_member_checked(&self, role: usize, why: &str) -> Result<()> {
        let _one = lock(&self.members.fail_gate);
        if let Some(m) = self.member(role) {
            if !self.survives_without(role) {
                return Err(EngineError::LastCopy {
                    role,
                    device: m.dev.name().to_string(),
                });
            }
        }
        self.fail_member(role, why)
    }
}
