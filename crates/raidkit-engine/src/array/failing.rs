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
//! * A local member that does not answer within its deadline is failed whatever it holds
//!   ([`crate::dev::io`]): waiting for it would hang the array. A network member that
//!   does not answer, or whose connection is lost, is failed when the array serves all
//!   of its data without it. Otherwise it is kept (md
//!   never fails the last leg of a mirror, nor the member a RAID5/6 cannot lose): the IO
//!   fails with an error, a network member's link is brought back by the reconnector,
//!   and IO resumes. Nothing it holds is marked lost: a write it missed left its old data
//!   there (or the new, had it landed), and the client was told the write failed. Where
//!   another member took that write (a mirror partner, parity), the kept member's range
//!   is distrusted in memory ([`Array::kept_write_failed`]) and served from the others.
//! * An administrator's request to fail a member the array cannot do without is refused
//!   (md answers EBUSY for the last device of a mirror).

use crate::array::member::Member;
use crate::array::Array;
use crate::dev::nbd::LinkState;
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

    /// The member `m` in `role` is gone (no answer in time, or its connection lost): fail
    /// it, unless it is a network member the array cannot run without — then it is kept
    /// (false) and its link is brought back by the reconnector. A local member is failed
    /// whatever it holds: nothing makes its later IO fail at once, so each would wait for
    /// the whole deadline.
    pub(crate) fn fail_gone(&self, role: usize, m: &Member, why: &str) -> Result<bool> {
        if m.dev.network().is_none() {
            self.fail_member(role, why)?;
            return Ok(true);
        }
        self.fail_unless_last(role, why)
    }

    /// A member's write failed (and no bad block could take the error): fail it as md's
    /// personality would (see the module documentation).
    pub(crate) fn fail_after_write_error(&self, role: usize, why: &str) -> Result<()> {
        if self.geo.level.has_parity() {
            return self.fail_member(role, why);
        }
        self.fail_unless_last(role, why).map(drop)
    }

    /// A write to the member in `role`, kept though it is gone (the array cannot run
    /// without it), failed over data sectors `[dsec, dsec + n)`. On a parity level the
    /// other members of the stripe took their part, so its blocks there no longer agree
    /// with them: they are distrusted in memory (bad blocks, never read; a later write
    /// that reaches it makes them good), and what can then no longer be reconstructed
    /// reads as lost. A mirror decides per copy once every copy's outcome is known
    /// ([`Array::distrust_kept`]).
    pub(crate) fn kept_write_failed(&self, role: usize, dsec: u64, n: u64) {
        if self.geo.level.has_parity() {
            self.distrust_kept(role, dsec, n);
        }
    }

    /// Parity levels: while a member the array cannot run without is kept with its link
    /// down, writes fail before anything is written (a stripe written on the others but
    /// not on it would no longer reconstruct what the missing members held).
    pub(crate) fn refuse_while_kept_member_down(&self) -> Result<()> {
        if !self.geo.level.has_parity() {
            return Ok(());
        }
        for (role, m) in self.slots().iter().enumerate() {
            let Some(m) = m.as_ref().filter(|m| !m.is_failed()) else {
                continue;
            };
            let Some(net) = m.dev.network() else { continue };
            if net.link_state() == LinkState::Connected || self.survives_without(role) {
                continue;
            }
            let why = net.link_status().error.unwrap_or_default();
            return Err(EngineError::io(
                m.dev.name(),
                "writing member data",
                std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    format!("not connected ({why}); the array cannot run without it, so writes fail until it reconnects"),
                ),
            ));
        }
        Ok(())
    }

    /// Data sectors `[dsec, dsec + n)` of the kept member in `role` missed a write that
    /// other members took: bad blocks in memory only (its link is down, its log cannot be
    /// written), and the array ranges with no valid copy left are listed as lost.
    pub(crate) fn distrust_kept(&self, role: usize, dsec: u64, n: u64) {
        let Some(m) = self.slots().get(role).cloned().flatten() else {
            return;
        };
        let unit = self.log_unit(&m);
        let start = (m.data_offset + dsec) / unit * unit;
        let end = (m.data_offset + dsec + n).div_ceil(unit) * unit;
        if m.add_bad_dev(start, end - start) {
            self.emit(crate::array::events::ArrayEvent::BadBlockRecorded {
                role,
                device: m.dev.name().to_string(),
                sector: start,
                sectors: end - start,
            });
            self.add_lost(&self.derive_lost());
        }
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
