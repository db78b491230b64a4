//! Re-adding a member that left the array (md's `--re-add`): taken back in its old role
//! and caught up — only the regions the write-intent bitmap marks when it covers what the
//! member missed, else in full.

use crate::array::member::Member;
use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::jobs::rebuild::{rebuild_role, RebuildOptions, RebuildReport};
use crate::jobs::returning::{CatchUp, Returning};
use crate::locks::lock;
use crate::meta::sb::Super;
use raidkit_format::v090::{self, disk_state};
use raidkit_format::v1::{self, feature};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Array {
    /// Re-add a member that left the array (md's `--re-add`). If the write-intent bitmap
    /// still covers every write it missed (its events ≥ the bitmap's `events_cleared`),
    /// only the dirty regions are resynced; otherwise it is rebuilt in full.
    /// A member that changed while it was away (split brain, or newer than us) is refused
    /// ([`EngineError::Diverged`]); see [`Array::re_add_with`]. A member holding the
    /// only copy of its data (no member in sync holds it) is taken back as it is there,
    /// only if it was the last of its holders to leave and still holds the array's last
    /// superblock for it (else refused, naming the one to bring back first); a parity
    /// array then owes a resync. Refused while a reshape is recorded, and (with
    /// [`EngineError::BadMember`]) when the member has no room for the array's bitmap.
    pub fn re_add(
        &self,
        dev: Arc<dyn BlockDev>,
        opts: &RebuildOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<RebuildReport> {
        self.re_add_with(dev, false, opts, progress)
    }

    /// [`Array::re_add`]; with `discard_its_changes` a member that changed while it was
    /// away is taken back anyway, rebuilt in full from this array (whatever it wrote on
    /// its own is lost: the admin chose this side).
    pub fn re_add_with(
        &self,
        dev: Arc<dyn BlockDev>,
        discard_its_changes: bool,
        opts: &RebuildOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<RebuildReport> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only".into(),
            ));
        }
        self.refuse_during_reshape()?;
        // Every refusal (changed while away, not the last holder of its only copy,
        // older than the array's record of it) comes from here, before anything is
        // written.
        let back = self.returning_member(dev.as_ref(), discard_its_changes)?;
        let (role, keep) = (back.role, back.keep.clone());
        // Writes still queued behind for the member it was (failed since) are done or
        // dropped first: none lands on the device after its catch-up copied the region.
        self.drain_write_behind();
        let (m, guided) = self.take_back(dev, back)?;
        let ranges = guided.map(|chunks| self.bitmap_ranges_for_role(role, &chunks));
        let mut rep = RebuildReport::default();
        rebuild_role(self, role, &m, opts, progress, &mut rep, ranges, &keep)?;
        rep.roles.push(role);
        Ok(rep)
    }

    fn refuse_during_reshape(&self) -> Result<()> {
        if self.route().is_some() {
            return Err(EngineError::Invalid(
                "a reshape is recorded: re-add the member once it has finished (or add it as a new member then)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Put the returning member `back` (device `dev`) into its role, unreadable until
    /// caught up; returns it and the bitmap chunks to copy (None: all; none when it is
    /// taken back as it is). Client
    /// writes are held from before the dirty regions are listed until it is in its slot
    /// with every superblock saying so, so each write either sets a bit in the list or
    /// reaches the member. Everything that can fail on the device (reading its bad-block
    /// log, writing its bitmap) is done before anything of the array changes.
    fn take_back(
        &self,
        dev: Arc<dyn BlockDev>,
        back: Returning,
    ) -> Result<(Arc<Member>, Option<Vec<u64>>)> {
        let Returning {
            mut sb,
            role,
            catch_up,
            ..
        } = back;
        let _gate = self.pause_writes();
        self.refuse_during_reshape()?;
        let name = dev.name().to_string();
        if self.member(role).is_some() {
            return Err(EngineError::Invalid(format!(
                "role {role} of {name} is occupied by a working member; nothing to re-add"
            )));
        }
        let meta = lock(&self.meta.sb);
        // Which regions did it miss? (None: all of them; none to copy for the only copy.)
        let guided = match catch_up {
            CatchUp::AsItIs => Some(Vec::new()),
            CatchUp::Guided => self.bm().as_ref().map(|bm| lock(bm).dirty()),
            CatchUp::Full => None,
        };
        // A parity array's last member to go usually went at a deadline in the middle
        // of stripe writes, parts of which reached the others: taken back as it is, its
        // stripes may disagree with their parity (md's dirty degraded array). Whether a
        // write was in flight then cannot be known for sure (writes tried after it went
        // may have reached the others too), so a resync is always owed from 0, as after
        // a crash; with a bitmap it covers the dirty regions (never cleared while
        // degraded).
        let owe_resync = catch_up == CatchUp::AsItIs && self.geo.level.has_parity();
        // It says what the array was when it left: shape, size, bitmap and state are
        // the array's now (a working member's), only its own fields stay.
        if let Some(&i) = self.live_devices().first() {
            sb.take_array_fields(&meta.sbs[i]);
        }
        let devnum = sb.dev_number();
        let mut roles = meta.roles.clone();
        if devnum >= roles.len() {
            roles.resize(devnum + 1, v1::role::SPARE);
        }
        roles[devnum] = role as u16;
        // Its superblock said what the array was when it left (clean, perhaps): from now
        // on it says what the array is, or a crash while the array is active would find
        // a member that calls it clean and resync nothing. (Active on disk while clean
        // in memory — forced clean at assembly — keeps what the members say.)
        if meta.dirty || owe_resync {
            sb.set_resync_offset(0);
        } else if !meta.disk_active {
            sb.set_resync_offset(meta.resync_from);
        }
        match &mut sb {
            Super::V1(s) => {
                s.feature_map |= feature::RECOVERY_OFFSET;
                if guided.is_some() {
                    s.feature_map |= feature::RECOVERY_BITMAP;
                }
                s.recovery_offset = 0;
                s.dev_roles.clone_from(&roles);
            }
            Super::V090(s) => catching_up_090(s, devnum, role),
        }
        // Nothing it says is used before it is checked against the device.
        let areas = crate::assemble::checked_areas(dev.as_ref(), &sb)?;
        // Where the array's bitmap goes on it (its shape cannot change: set_bitmap waits
        // for the write gate held here).
        let bitmap_at = match self.bm().as_ref() {
            Some(bm) => Some(bitmap_room(&name, &areas, &sb, &lock(bm).sb)?),
            None => None,
        };
        // The member's own bad-block log stays with it (those sectors still hold no
        // valid data); nothing is copied from the other members.
        let bad = crate::assemble::load_bbl(dev.as_ref(), &sb, areas.bblog)?;
        let idx = match (self.bm().as_ref(), bitmap_at) {
            (Some(bm), Some(loc)) => {
                // Its own bits are those of when it left: it gets the array's now (in
                // the bitmap's IO turn, so no round setting bits is in flight), or the
                // next assembly could read its copy and miss bits set meanwhile that
                // later writes found already set.
                let _io = lock(&self.meta.bitmap_io);
                let mut b = lock(bm);
                b.write_image_at(dev.as_ref(), loc)?;
                let idx = self.add_device(dev.clone());
                if b.locs.len() <= idx {
                    b.locs.resize(idx + 1, None);
                }
                b.locs[idx] = Some(loc);
                idx
            }
            _ => self.add_device(dev.clone()),
        };
        let m = self.register(meta, sb, idx, role, roles, bad, owe_resync)?;
        Ok((m, guided))
    }

    /// The device at index `idx` (just added; its IO done) becomes the member in `role`
    /// and every superblock says so (and, with `owe_resync`, that a resync is owed from
    /// 0); undone in memory if that cannot be written.
    #[allow(clippy::too_many_arguments)]
    fn register(
        &self,
        mut meta: std::sync::MutexGuard<'_, crate::array::meta::Meta>,
        sb: Super,
        idx: usize,
        role: usize,
        roles: Vec<u16>,
        bad: Vec<raidkit_format::badblocks::BadRange>,
        owe_resync: bool,
    ) -> Result<Arc<Member>> {
        let devnum = sb.dev_number();
        let data_offset = sb.data_offset();
        let write_mostly = sb.write_mostly();
        meta.sbs.push(sb);
        let old_roles = std::mem::replace(&mut meta.roles, roles);
        // 0.90: every superblock says it is active in its role, not in sync, until the
        // catch-up ends (the kernel judges each device by its own superblock).
        for s in meta.sbs.iter_mut() {
            if let Super::V090(s) = s {
                catching_up_090(s, devnum, role);
            }
        }
        let dev = Arc::clone(&self.devs()[idx]);
        let m = Arc::new(Member::new(dev, idx, data_offset, Some(0), bad));
        m.write_mostly.store(write_mostly, Ordering::Relaxed);
        self.set_slot(role, Some(m.clone()));
        let old_state = (meta.resync_from, meta.disk_active);
        if owe_resync {
            meta.resync_from = 0;
            meta.disk_active = true;
        }
        let owed = |s: &mut Super| {
            if owe_resync {
                s.set_resync_offset(0);
            }
        };
        if let Err(e) = self.write_superblocks(&mut meta, owed) {
            // Not taken back: it stays a known device that nothing reads or writes.
            self.set_slot(role, None);
            meta.roles = old_roles;
            (meta.resync_from, meta.disk_active) = old_state;
            return Err(e);
        }
        Ok(m)
    }
}

/// Where the array's bitmap (superblock `bsb`) goes on the returning member (its
/// checked `areas`, superblock `sb`): refused when it does not fit the room there.
fn bitmap_room(
    name: &str,
    areas: &raidkit_format::validate::MemberAreas,
    sb: &Super,
    bsb: &raidkit_format::bitmap::BitmapSuper,
) -> Result<u64> {
    let need = sb.bitmap_sync_size().unwrap_or(0);
    let ext = areas
        .check_bitmap(bsb, need)
        .map_err(|e| EngineError::BadMember {
            device: name.to_string(),
            why: format!(
                "it has no room for the array's bitmap ({e}); nothing was written: add it as a new member instead (rebuilt in full), or remove the bitmap first"
            ),
        })?;
    Ok(ext.start)
}

/// Record device number `devnum` in 0.90 superblock `s` as active in `role` and not in
/// sync (being caught up), keeping its write-mostly flag; the device's own superblock
/// says the same of itself.
fn catching_up_090(s: &mut v090::SuperblockV090, devnum: usize, role: usize) {
    if let Some(d) = s.disks.get_mut(devnum) {
        d.number = devnum as u32;
        d.raid_disk = role as u32;
        d.state = disk_state::ACTIVE | (d.state & disk_state::WRITEMOSTLY);
        if s.this_disk.number as usize == devnum {
            s.this_disk = *d;
        }
    }
}
