//! Whether a member coming back (md's `--re-add`, or a network member that reconnected)
//! can be taken back with a catch-up of the bitmap's dirty regions, or has a history of
//! its own that a catch-up would silently mix with ours.
//!
//! md trusts the returning member's event count against the bitmap and nothing else, so
//! when both halves of a mirror ran degraded (split brain) and both were written, a
//! re-add quietly keeps a blend of the two. Two things give such a member away:
//! - its event count is newer than ours: it was assembled and changed without us;
//! - its role table marks one of our working members as not active: it ran without that
//!   member (raidkit and md both record a member missing at assembly that way), so it was
//!   running degraded on its own while we ran without it.
//!
//! A member that merely stopped answering (killed, SIGSTOPped, network gone) never wrote
//! its own superblock after it left, so it passes both checks.

use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::locks::lock;
use crate::sb::{Role, Super};
use raidkit_layout::Level;

/// The roles a returning member's data may be taken as it is against (its own, where no
/// other copy is valid): the roles its superblock `sb` records as active when it last
/// wrote (those members may have taken writes after it left). None when its data is not
/// to be trusted anywhere: its changes are discarded, or it was itself only partly
/// rebuilt when it left.
pub(crate) fn kept_roles(sb: &Super, discard_its_changes: bool) -> Option<Vec<usize>> {
    if discard_its_changes || sb.recovery_offset().is_some() {
        return None;
    }
    let own = sb.dev_number();
    let n = match sb {
        Super::V090(s) => s.disks.len(),
        Super::V1(s) => s.dev_roles.len(),
    };
    Some(
        (0..n)
            .filter(|&d| d != own)
            .filter_map(|d| match sb.role_of(d) {
                Role::Active(r) => Some(r),
                _ => None,
            })
            .collect(),
    )
}

impl Array {
    /// The superblock and role of `dev`, a member coming back, checked as a re-add checks
    /// it (ours, an active member, its role free, and — unless `discard_its_changes` —
    /// not changed while it was away); nothing is written.
    pub fn returning_member(
        &self,
        dev: &dyn BlockDev,
        discard_its_changes: bool,
    ) -> Result<(Super, usize)> {
        let name = dev.name();
        let found = crate::sb::probe(dev)?;
        let Some((sb, true)) = found.found.into_iter().find(|(s, _)| s.uuid() == self.uuid) else {
            return Err(EngineError::Invalid(format!(
                "{name} carries no valid superblock of this array; add it as a new member instead"
            )));
        };
        let Role::Active(role) = sb.own_role() else {
            return Err(EngineError::Invalid(format!(
                "{name} was not an active member; add it as a new member instead"
            )));
        };
        if self.member(role).is_some() {
            return Err(EngineError::Invalid(format!(
                "role {role} of {name} is occupied by a working member; nothing to re-add"
            )));
        }
        if !discard_its_changes {
            self.check_returning(name, &sb)?;
        }
        Ok((sb, role))
    }

    /// Is the returning member in `role` the only copy of everything it holds — no other
    /// member working and in sync holds, or can rebuild, any of it? (It was the last leg of
    /// a mirror, or a parity array is missing more members than it has parity without it.)
    /// Then a catch-up has nothing to copy from, and nothing could be written there while
    /// it was away (every such write had no member to land on): its data is the array's.
    /// `kept`: see [`kept_roles`] (None: its data is never taken as it is). On a mirror,
    /// a partner that was still active when it left may have taken writes after it did
    /// (then failed): its data is not the array's there.
    pub(crate) fn only_copy_of_its_data(&self, role: usize, kept: Option<&[usize]>) -> bool {
        let Some(active_when_left) = kept else {
            return false;
        };
        let g = &self.geo;
        let in_sync =
            |r: usize| r != role && self.member(r).is_some_and(|m| m.recovery().is_none());
        match g.level {
            Level::Raid1 | Level::Raid10 => !g
                .copy_partners(role)
                .into_iter()
                .any(|r| in_sync(r) || active_when_left.contains(&r)),
            Level::Raid4 | Level::Raid5 | Level::Raid6 => !self.survives_without(role),
            // No redundancy: a member of linear/RAID0 is never re-added.
            _ => false,
        }
    }

    /// Does the write-intent bitmap cover every write the returning member (superblock
    /// `sb`) missed, so that copying its dirty regions catches it up? (Its events are at
    /// least the bitmap's `events_cleared`; never when its own changes are discarded.)
    pub fn guided_catch_up(&self, sb: &Super, discard_its_changes: bool) -> bool {
        if discard_its_changes {
            return false;
        }
        self.bm()
            .as_ref()
            .is_some_and(|bm| sb.events() >= lock(bm).sb.events_cleared)
    }

    /// Refuse (with [`EngineError::Diverged`], saying what happened and which side to
    /// keep) a returning member whose superblock `sb` shows it changed without us.
    fn check_returning(&self, name: &str, sb: &Super) -> Result<()> {
        let live = self.live_devices();
        let meta = lock(&self.meta.sb);
        let ours = meta.events;
        let theirs = sb.events();
        // Our working members that its table says were not active when it last wrote.
        let mut without: Vec<usize> = live
            .iter()
            .filter_map(|&i| {
                let ours = meta.sbs.get(i)?;
                let Role::Active(role) = ours.own_role() else {
                    return None;
                };
                let devnum = ours.dev_number();
                (!matches!(sb.role_of(devnum), Role::Active(_))).then_some(role)
            })
            .collect();
        without.sort_unstable();
        drop(meta);
        let what = if !without.is_empty() {
            format!(
                "it ran without role(s) {without:?} of this array (its superblock, events {theirs}, marks them missing) while this array ran without it (events {ours}): both sides ran degraded and both may have been written (split brain)"
            )
        } else if theirs > ours {
            format!(
                "its event count ({theirs}) is newer than this array's ({ours}): it was assembled and changed while this array ran without it"
            )
        } else {
            return Ok(());
        };
        Err(EngineError::Diverged {
            device: name.to_string(),
            why: format!(
                "{what}. Nothing was written. To keep this array's data, re-add it discarding its changes (it is then rebuilt in full from this array); to keep its data instead, stop this array, assemble that member on its own, and add these members to it discarding their changes"
            ),
        })
    }
}
