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
//!
//! A member that holds the only copy of (some of) its data — no member in sync holds it
//! — is taken back as it is there, with nothing to copy from, but only if it was the last
//! of them to leave: the array's last superblock for it marks every other holder of that
//! data not active (it saw them go), and the device still holds that superblock (not an
//! older one: a snapshot, a disk that missed writes). Else the one that left last holds
//! acknowledged writes it never got: that one must come back first.

use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::locks::lock;
use crate::sb::{Role, Super};
use raidkit_layout::Level;

/// How a member coming back is caught up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// Rebuilt in full (no bitmap covers what it missed, or its changes are discarded).
    Full,
    /// Only the regions the write-intent bitmap marks dirty.
    Guided,
    /// Nothing copied: it holds the only copy of all its data, taken back as it is (a
    /// parity array then owes a resync).
    AsItIs,
}

/// A member coming back, checked: its superblock, its role and how it is caught up.
#[derive(Clone, Debug)]
pub struct Returning {
    /// Its superblock, as read from it.
    pub sb: Super,
    /// Its role.
    pub role: usize,
    /// What its catch-up copies.
    pub catch_up: CatchUp,
    /// Roles that left before it: where every other copy of a region is on one of
    /// them (RAID10 chunks no member in sync holds), its own copy is kept as it is.
    pub keep: Vec<usize>,
}

impl Array {
    /// A member kept in `role` (the array cannot run without it) whose connection is back
    /// after its link was lost: is `dev` still what the array last wrote to it — the same
    /// device (device UUID; 0.90 device number), and the superblock this array last wrote
    /// there, or the one before if that write failed? A disk restored from a snapshot, or
    /// changed without this array, would serve data that is not the array's.
    pub(crate) fn check_kept_member(&self, dev: &dyn BlockDev, role: usize) -> Result<()> {
        let Some(m) = self.slots().get(role).cloned().flatten() else {
            return Ok(());
        };
        let found = crate::sb::probe(dev)?;
        let meta = lock(&self.meta.sb);
        let Some(wrote) = meta.sbs.get(m.index) else {
            return Ok(());
        };
        let known = meta.behind.get(&m.index).copied().unwrap_or(wrote.events());
        let theirs = found
            .found
            .iter()
            .find(|(s, ok)| *ok && s.uuid() == self.uuid && s.same_device_as(wrote))
            .map(|(s, _)| s.events());
        match theirs {
            Some(e) if (known..=wrote.events()).contains(&e) => Ok(()),
            seen => Err(EngineError::Invalid(format!(
                "{} came back, but its superblock ({}) is not the last one this array wrote to it (events {}): restored from a snapshot or changed without this array, it would serve data that is not the array's. It is left disconnected, and IO that needs it keeps failing; stop the array and decide which copy to keep",
                dev.name(),
                seen.map_or_else(|| "none of this device".to_string(), |e| format!("events {e}")),
                wrote.events()
            ))),
        }
    }

    /// `dev`, a member coming back, checked as a re-add checks it (ours, an active
    /// member, its role free, — unless `discard_its_changes` — not changed while it was
    /// away, and, where it holds the only copy of its data, the last of its holders to
    /// leave), with how it is caught up; nothing is written.
    pub fn returning_member(
        &self,
        dev: &dyn BlockDev,
        discard_its_changes: bool,
    ) -> Result<Returning> {
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
        let (all, keep) = self.held_alone(role);
        if all || !keep.is_empty() {
            if discard_its_changes {
                return Err(EngineError::Invalid(format!(
                    "{name} holds the only copy of {} its data in this array: rebuilding it would destroy that data; re-add it keeping its changes",
                    if all { "all" } else { "some of" }
                )));
            }
            self.check_last_to_leave(name, &sb, role, &keep)?;
        }
        let catch_up = if all {
            CatchUp::AsItIs
        } else if self.guided_catch_up(&sb, discard_its_changes) {
            CatchUp::Guided
        } else {
            CatchUp::Full
        };
        Ok(Returning {
            sb,
            role,
            catch_up,
            keep,
        })
    }

    /// Does the returning member in `role` hold data no member in sync holds (or can
    /// rebuild)? (All of it: the last leg of a mirror, or a parity array missing more
    /// members than it has parity without it; RAID10: the chunks whose other copies are
    /// all on members not in sync.) Returns whether that is all of its data, and the
    /// roles not in sync that hold the other copies of that data.
    fn held_alone(&self, role: usize) -> (bool, Vec<usize>) {
        let g = &self.geo;
        let in_sync =
            |r: usize| r != role && self.member(r).is_some_and(|m| m.recovery().is_none());
        let sets = match g.level {
            Level::Raid1 | Level::Raid10 => g.copy_sets(role),
            Level::Raid4 | Level::Raid5 | Level::Raid6 if !self.survives_without(role) => {
                // Nothing can rebuild any of it: the members not in sync hold the rest.
                let gone = (0..g.raid_disks).filter(|&r| r != role && !in_sync(r));
                return (true, gone.collect());
            }
            // Linear/RAID0 members are never re-added; a parity array that runs without
            // it rebuilds it.
            _ => Vec::new(),
        };
        let alone: Vec<&Vec<usize>> = sets
            .iter()
            .filter(|set| !set.iter().any(|&r| in_sync(r)))
            .collect();
        let all = !sets.is_empty() && alone.len() == sets.len();
        let mut keep: Vec<usize> = alone.into_iter().flatten().copied().collect();
        keep.retain(|&r| r != role);
        keep.sort_unstable();
        keep.dedup();
        (all, keep)
    }

    /// Refuse (nothing written) a returning member (`name`, superblock `sb`, in `role`)
    /// that is not the last of the holders of its data to leave: the array's last
    /// superblock for it must mark every role of `gone` (the other holders, none in
    /// sync) not active, and the device must still hold that superblock.
    fn check_last_to_leave(
        &self,
        name: &str,
        sb: &Super,
        role: usize,
        gone: &[usize],
    ) -> Result<()> {
        let meta = lock(&self.meta.sb);
        let devnum = sb.dev_number();
        // The array's last superblock for it (it is never removed from the list).
        let Some(idx) = (0..meta.sbs.len()).rev().find(|&i| {
            meta.sbs[i].dev_number() == devnum && meta.sbs[i].own_role() == Role::Active(role)
        }) else {
            return Err(EngineError::Invalid(format!(
                "{name} holds the only copy of its data in this array, but it has not been a member since the array was assembled: nothing records what it last held. Nothing was written; stop the array and assemble it from the members to keep"
            )));
        };
        let last = &meta.sbs[idx];
        let slots = self.slots().clone();
        for &p in gone {
            let Some(holder) = last.holder_of(p) else {
                continue;
            };
            // A member being caught up there now holds no complete copy of anything.
            if slots
                .get(p)
                .and_then(|m| m.as_ref())
                .is_some_and(|m| !m.is_failed())
            {
                continue;
            }
            let devs = self.devs();
            let who = (0..meta.sbs.len().min(devs.len()))
                .rev()
                .find(|&i| meta.sbs[i].dev_number() == holder)
                .map_or_else(
                    || format!("device number {holder}"),
                    |i| devs[i].name().to_string(),
                );
            return Err(EngineError::Invalid(format!(
                "{name} holds data no member in sync holds, but it is not the last of its holders to leave: role {p} ({who}) left after it and holds writes it never got. Nothing was written. Bring {who} back first (it is taken back as it is), then re-add {name}: it is caught up from it"
            )));
        }
        let theirs = sb.events();
        let wrote = last.events();
        // Its last superblock write failed: it holds that one or the one before.
        let known = meta.behind.get(&idx).copied().unwrap_or(wrote);
        if theirs < known || theirs > wrote {
            let what = if theirs < known {
                "older: restored from a snapshot or an old copy, it would serve data older than what was acknowledged"
            } else {
                "newer: it was changed without this array"
            };
            return Err(EngineError::Invalid(format!(
                "{name} holds data no member in sync holds, but its superblock (events {theirs}) is not the last one this array wrote to it (events {wrote}); it is {what}. Nothing was written; stop the array and decide which copy to keep"
            )));
        }
        Ok(())
    }

    /// Does the write-intent bitmap cover every write the returning member (superblock
    /// `sb`) missed, so that copying its dirty regions catches it up? (Its events are at
    /// least the bitmap's `events_cleared`; never when its own changes are discarded.)
    fn guided_catch_up(&self, sb: &Super, discard_its_changes: bool) -> bool {
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
