//! The write path's half of md's hot replace: a replacement being built for a role gets
//! every write to that role; it is failed alone if it cannot be written.

use crate::array::events::ArrayEvent;
use crate::array::member::Member;
use crate::array::Array;
use crate::error::Result;
use crate::locks::lock;
use raidkit_format::v1::{self};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockReadGuard, RwLockWriteGuard};

impl Array {
    pub(crate) fn replacements(&self) -> RwLockReadGuard<'_, Vec<Option<Arc<Member>>>> {
        crate::locks::read(&self.members.replacements)
    }

    pub(crate) fn replacements_mut(&self) -> RwLockWriteGuard<'_, Vec<Option<Arc<Member>>>> {
        crate::locks::write(&self.members.replacements)
    }

    pub(crate) fn replacement(&self, role: usize) -> Option<Arc<Member>> {
        self.replacements()
            .get(role)
            .cloned()
            .flatten()
            .filter(|m| !m.is_failed())
    }

    /// Install (or, with None, take out) the replacement of `role`.
    pub(crate) fn set_replacement(&self, role: usize, m: Option<Arc<Member>>) {
        let mut reps = self.replacements_mut();
        if reps.len() <= role {
            reps.resize(role + 1, None);
        }
        reps[role] = m;
        let any = reps.iter().flatten().any(|m| !m.is_failed());
        self.members.replacing.store(any, Ordering::Release);
    }

    /// Roles with a replacement being built.
    pub fn replacement_roles(&self) -> Vec<usize> {
        self.replacements()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.as_ref().is_some_and(|m| !m.is_failed()))
            .map(|(r, _)| r)
            .collect()
    }

    /// md: a replacement that fails is marked faulty; the member it was replacing stays.
    pub(crate) fn abort_replacement(&self, role: usize, r: &Arc<Member>, why: &str) -> Result<()> {
        if !Array::set_failed(r) {
            return Ok(());
        }
        self.set_replacement(role, None);
        self.emit(ArrayEvent::MemberFailed {
            role,
            device: r.dev.name().to_string(),
            reason: format!("the replacement failed ({why}); the member it was replacing stays"),
        });
        if self.writable {
            let mut meta = lock(&self.meta.sb);
            let devnum = meta.sbs[r.index].dev_number();
            if let Some(x) = meta.roles.get_mut(devnum) {
                *x = v1::role::FAULTY;
            }
            self.write_superblocks(&mut meta, |_| {})?;
        }
        Ok(())
    }
}
