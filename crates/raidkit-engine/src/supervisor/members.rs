//! Member management of a running array: fail, remove, add, and re-add (a returning
//! member checked now, caught up in the background from the bitmap where it can be).

use super::{Event, JobResult, RebuildResult, Result, Supervisor, SupervisorError};
use crate::array::lock;
use crate::error::EngineError;
use crate::jobs::returning::CatchUp;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Supervisor {
    /// The role of the member `device` names (see [`crate::array::Array::device_named`]).
    pub(super) fn find_role(&self, device: &str) -> Option<usize> {
        let name = self.cur().device_named(device)?;
        self.cur()
            .members()
            .into_iter()
            .find(|m| m.device == name)
            .and_then(|m| m.role)
    }

    /// The array's name of the device `device` names (as the user typed it: its name,
    /// its path, or a fault spec around it), or `device` itself if none matches (the
    /// engine's refusal then names it as given).
    pub(super) fn canonical_member_name(&self, device: &str) -> String {
        self.cur()
            .device_named(device)
            .unwrap_or_else(|| device.to_string())
    }

    /// Fail a member.
    pub fn fail(&self, device: &str) -> Result<()> {
        let role = self
            .find_role(device)
            .ok_or_else(|| SupervisorError::NotAMember {
                device: device.to_string(),
                array: self.name.clone(),
            })?;
        Ok(self
            .cur()
            .fail_member_checked(role, "failed by the administrator")?)
    }

    /// Mark a member (or spare) write-mostly, or clear it.
    pub fn set_write_mostly(&self, device: &str, on: bool) -> Result<()> {
        Ok(self
            .cur()
            .set_write_mostly(&self.canonical_member_name(device), on)?)
    }

    /// Set md's write-behind limit (0: synchronous).
    pub fn set_write_behind(&self, n: u32) -> Result<()> {
        Ok(self.cur().set_write_behind(n)?)
    }

    /// Remove a failed member or a spare.
    pub fn remove(&self, device: &str) -> Result<()> {
        let device = self.canonical_member_name(device);
        self.cur().remove_member(&device)?;
        self.emit(Event::MemberRemoved { device });
        Ok(())
    }

    /// Add a device as a spare; if a role is missing, recovery onto it starts.
    pub fn add(self: &Arc<Self>, path: &Path, force: bool) -> Result<()> {
        let dev = crate::dev::open_member(path, true).map_err(|e| {
            EngineError::io(&path.display().to_string(), "opening the new member", e)
        })?;
        self.cur().add_spare(dev, force)?;
        if !self.cur().missing_roles().is_empty() {
            self.sync_action("recover")?;
        }
        Ok(())
    }

    /// Re-add a member that left (bitmap-guided when possible), in the background. One
    /// that changed while it was away (split brain, or newer than this array) is refused
    /// unless `discard_its_changes` (then it is rebuilt in full from this array).
    pub fn re_add(self: &Arc<Self>, path: &Path, discard_its_changes: bool) -> Result<()> {
        let dev = crate::dev::open_member(path, true)
            .map_err(|e| EngineError::io(&path.display().to_string(), "opening the member", e))?;
        self.re_add_dev(dev, discard_its_changes)
    }

    /// [`Supervisor::re_add`] of an open device: checked now (nothing written if it is
    /// refused), caught up in the background.
    pub(super) fn re_add_dev(
        self: &Arc<Self>,
        dev: Arc<dyn crate::dev::BlockDev>,
        discard_its_changes: bool,
    ) -> Result<()> {
        let mut job = lock(&self.job);
        self.busy(&job)?;
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(EngineError::Invalid("the array is stopping".into()).into());
        }
        // Every refusal is decided here, before the job starts: a member refused is
        // told so at once (the reconnector then leaves it alone), and the job decides
        // again on the array as it is then.
        let back = self
            .cur()
            .returning_member(dev.as_ref(), discard_its_changes)?;
        let (role, guided) = (back.role, back.catch_up != CatchUp::Full);
        let device = dev.name().to_string();
        self.emit(Event::ResyncStarted {
            role,
            device: device.clone(),
            bitmap_guided: guided,
        });
        let me = self.clone();
        *job = Some(self.spawn_job("recovery", move |stop| {
            let opts = me.rebuild_options(&stop);
            let t0 = Instant::now();
            let r = me
                .cur()
                .re_add_with(dev, discard_its_changes, &opts, &mut |d, t| {
                    me.progress(d, t)
                });
            let (v, copied, error) = match r {
                Ok(rep) => {
                    let _ = me.cur().mark_clean();
                    let sectors = rep.sectors;
                    let v = JobResult::Rebuild(RebuildResult {
                        action: "re-add".into(),
                        roles: rep.roles,
                        sectors: Some(sectors),
                        lost: rep.lost,
                    });
                    (v, sectors * 512, None)
                }
                Err(e) => {
                    let msg = e.to_string();
                    (JobResult::failed("re-add", e), 0, Some(msg))
                }
            };
            me.emit(Event::ResyncFinished {
                role,
                device,
                bytes_copied: copied,
                millis: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
                error,
            });
            me.emit(Event::RebuildFinished(v.clone()));
            *lock(&me.last_result) = Some(v);
            me.set_idle();
        })?);
        Ok(())
    }
}
