//! The array's metadata at run time: superblocks (written to every live device with the
//! event count bumped), the dirty/clean state md keeps in `resync_offset`, quiescing
//! client writes, and the write-intent bitmap's bits set before the writes they cover.

use crate::array::{Array, ArrayEvent, Member};
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use crate::meta::bitmap::RunBitmap;
use crate::meta::sb::write_super;
use crate::meta::sb::Super;
use raidkit_format::{v090, MAX_SECTOR};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// The array's metadata at run time.
pub(crate) struct MetaState {
    /// Superblocks, events, role table.
    pub(crate) sb: Mutex<Meta>,
    /// Fast check of `sb.dirty` for the write path (the mutex is taken only to change it).
    pub(crate) dirty_fast: AtomicBool,
    /// Writes hold this shared; marking clean holds it exclusively, so the superblocks
    /// never say "clean" while a write is in flight.
    pub(crate) gate: RwLock<()>,
    /// The write-intent bitmap; switched (added/removed) only with `gate` held
    /// exclusively, so writes see it stable while they hold the gate shared.
    pub(crate) bitmap: RwLock<Option<Mutex<RunBitmap>>>,
    /// Forced start of a dirty degraded array: mark clean on the first write.
    pub(crate) forced_clean: bool,
}

impl MetaState {
    /// The state of a just assembled array (clean in memory until the first write).
    pub(crate) fn new(meta: Meta, bitmap: Option<RunBitmap>, forced_clean: bool) -> MetaState {
        MetaState {
            sb: Mutex::new(meta),
            dirty_fast: AtomicBool::new(false),
            gate: RwLock::new(()),
            bitmap: RwLock::new(bitmap.map(Mutex::new)),
            forced_clean,
        }
    }
}

/// Mutable superblock state shared by all writers.
pub(crate) struct Meta {
    /// Superblocks, one per device (index = `Member::index` / spare index).
    pub sbs: Vec<Super>,
    /// Current event count.
    pub events: u64,
    /// True while the superblocks say "dirty" (resync_offset != MAX written by us).
    pub dirty: bool,
    /// Resync checkpoint: MAX_SECTOR when redundancy is known consistent.
    pub resync_from: u64,
    /// True while the superblocks on the members say "active" (resync_offset != MAX):
    /// found so at assembly, or written by us. What the array's state reports.
    pub disk_active: bool,
    /// v1 role table (shared by all members).
    pub roles: Vec<u16>,
}

impl Array {
    /// Hold client writes' share of the write gate (see [`Array::pause_writes`]).
    pub(crate) fn write_gate(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        crate::locks::read(&self.meta.gate)
    }

    /// Install (Some) or take out (None) the write-intent bitmap; returns the old one.
    /// The caller holds the write gate exclusively.
    pub(crate) fn swap_bitmap(&self, bitmap: Option<RunBitmap>) -> Option<RunBitmap> {
        let old = std::mem::replace(
            &mut *crate::locks::write(&self.meta.bitmap),
            bitmap.map(Mutex::new),
        );
        old.map(crate::locks::into_inner)
    }

    /// Current event count.
    pub fn events(&self) -> u64 {
        lock(&self.meta.sb).events
    }

    /// True if the superblocks say redundancy may be inconsistent (resync needed).
    pub fn needs_resync(&self) -> bool {
        lock(&self.meta.sb).resync_from != MAX_SECTOR
    }

    /// Apply `f` to every live superblock, bump events, update times, role tables and
    /// the bitmap superblock, then write bitmap first and superblocks second, flushing.
    /// A member whose superblock cannot be written (an error, or no answer within the
    /// member timeout) is failed, as md does, and the others' superblocks are written
    /// again saying so — unless the array cannot run without it: then the error.
    pub(crate) fn write_superblocks(
        &self,
        meta: &mut Meta,
        mut f: impl FnMut(&mut Super),
    ) -> Result<()> {
        loop {
            let failed = self.write_superblocks_once(meta, &mut f)?;
            let Some((_, first)) = failed.first() else {
                return Ok(());
            };
            let first = EngineError::io(
                &first.0,
                "writing the superblock",
                std::io::Error::new(first.1.kind(), first.1.to_string()),
            );
            if !self.fail_unwritable(meta, &failed) {
                return Err(first);
            }
        }
    }

    /// One round of [`Array::write_superblocks`]: the devices whose metadata could not be
    /// written, with the error (device name, error).
    fn write_superblocks_once(
        &self,
        meta: &mut Meta,
        f: &mut impl FnMut(&mut Super),
    ) -> Result<Vec<(usize, (String, std::io::Error))>> {
        // md never lets the counter wrap (it stays at its maximum): neither do we.
        let events = meta.events.saturating_add(1);
        let t = crate::util::now();
        let live = self.live_devices();
        let roles = meta.roles.clone();
        let missing: Vec<usize> = self.missing_roles();
        for &i in &live {
            let sb = &mut meta.sbs[i];
            f(sb);
            sb.set_events(events);
            sb.set_utime(t);
            match sb {
                Super::V1(s) => {
                    for (j, r) in roles.iter().enumerate() {
                        if let Some(slot) = s.dev_roles.get_mut(j) {
                            *slot = *r;
                        }
                    }
                }
                Super::V090(s) => update_090_counts(s, &missing),
            }
        }
        let devs = self.devs();
        let mut failed: Vec<(usize, (String, std::io::Error))> = Vec::new();
        let as_io = |e: EngineError| match e {
            EngineError::Io { source, .. } => source,
            e => std::io::Error::other(e.to_string()),
        };
        if let Some(bm) = self.bm().as_ref() {
            let mut b = lock(bm);
            b.sb.events = events;
            for &i in &live {
                if let Err(e) = b.write_header(&devs, &[i]) {
                    failed.push((i, (devs[i].name().to_string(), as_io(e))));
                }
            }
        }
        if let Some(cs) = self.checksums() {
            cs.events_pending(events)?;
        }
        for &i in &live {
            if failed.iter().any(|(d, _)| *d == i) {
                continue;
            }
            let written = write_super(devs[i].as_ref(), &meta.sbs[i]).map_err(as_io);
            if let Err(e) = written.and_then(|()| devs[i].flush()) {
                failed.push((i, (devs[i].name().to_string(), e)));
            }
        }
        if failed.is_empty() {
            meta.events = events;
            if let Some(cs) = self.checksums() {
                cs.events_done(events)?;
            }
        }
        Ok(failed)
    }

    /// md's answer to a superblock that cannot be written: fail that member (or
    /// replacement; a spare is dropped). False if one of them is a member the array
    /// cannot run without.
    fn fail_unwritable(
        &self,
        meta: &mut Meta,
        failed: &[(usize, (String, std::io::Error))],
    ) -> bool {
        let slots: Vec<Option<Arc<Member>>> = self.slots().clone();
        let mut missing = self.missing_roles();
        for (i, (device, e)) in failed {
            if let Some((role, m)) = slots
                .iter()
                .enumerate()
                .find_map(|(r, m)| m.as_ref().filter(|m| m.index == *i).map(|m| (r, m)))
            {
                missing.push(role);
                if !self.geo.survives_without(&missing) {
                    return false;
                }
                if Array::set_failed(m) {
                    self.emit(ArrayEvent::MemberFailed {
                        role,
                        device: device.clone(),
                        reason: format!("its superblock could not be written: {e}"),
                    });
                }
            } else if let Some((role, r)) =
                self.replacements().iter().enumerate().find_map(|(r, m)| {
                    m.as_ref()
                        .filter(|m| m.index == *i)
                        .map(|m| (r, Arc::clone(m)))
                })
            {
                Array::set_failed(&r);
                self.set_replacement(role, None);
            } else {
                self.spares().retain(|&s| s != *i);
            }
            let devnum = meta.sbs[*i].dev_number();
            if let Some(r) = meta.roles.get_mut(devnum) {
                *r = raidkit_format::v1::role::FAULTY;
            }
        }
        true
    }

    /// Devices that get superblock writes: working members and spares.
    pub(crate) fn live_devices(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .slots()
            .iter()
            .flatten()
            .filter(|m| !m.is_failed())
            .map(|m| m.index)
            .collect();
        if self.replacing() {
            v.extend(
                self.replacements()
                    .iter()
                    .flatten()
                    .filter(|m| !m.is_failed())
                    .map(|m| m.index),
            );
        }
        v.extend(self.spares().iter().copied());
        v
    }

    pub(crate) fn ensure_dirty(&self) -> Result<()> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing".into(),
            ));
        }
        if self.meta.dirty_fast.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut meta = lock(&self.meta.sb);
        if meta.dirty {
            self.meta.dirty_fast.store(true, Ordering::Release);
            return Ok(());
        }
        if self.meta.forced_clean {
            meta.resync_from = MAX_SECTOR;
        }
        let resync = if meta.resync_from == MAX_SECTOR {
            0
        } else {
            meta.resync_from
        };
        self.write_superblocks(&mut meta, |sb| sb.set_resync_offset(resync))?;
        meta.dirty = true;
        meta.disk_active = true;
        self.meta.dirty_fast.store(true, Ordering::Release);
        Ok(())
    }

    /// Wait for client writes in flight to finish and hold new ones until the guard is
    /// dropped (reads go on). Background work that reads and rewrites mirror copies, or
    /// switches on-disk state, runs under it so no client write lands in between.
    /// Writes held in the stripe cache are written out first (they are writes in flight),
    /// so under the guard the members hold every acknowledged write.
    pub(crate) fn pause_writes(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        let g = crate::locks::write(&self.meta.gate);
        if let Some(c) = self.cache.as_ref().filter(|c| c.has_dirty()) {
            // A failure is recorded for the next flush.
            self.cache_drain_all(c);
        }
        g
    }

    /// Flush, then record the array as clean (`resync_offset = MAX` if redundancy is
    /// consistent) and clear the bitmap if the array is not degraded — what md does after
    /// writes go idle, and on a clean stop.
    pub fn mark_clean(&self) -> Result<()> {
        match self.enter() {
            Ok(_in) => self.mark_clean_inner(),
            Err(next) => next.mark_clean(),
        }
    }

    /// [`Array::mark_clean`] of this array (no successor, caller holds the array).
    pub(crate) fn mark_clean_inner(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        // The bitmap bits of writes queued behind are cleared only once they are written:
        // the queue drains first with writes still flowing, then (short) with them paused.
        self.drain_write_behind();
        // Pausing writes also writes out what the stripe cache holds.
        let _gate = self.pause_writes();
        self.drain_write_behind();
        self.flush_members()?;
        if let Some(cs) = self.checksums() {
            cs.mark_clean()?;
        }
        let mut meta = lock(&self.meta.sb);
        let resync = meta.resync_from;
        // Written dirty by us, or found active on disk with consistent redundancy (a
        // dirty degraded array started by force, as md does): the superblocks must say
        // clean now.
        let forced_clean_on_disk = meta.disk_active && resync == MAX_SECTOR;
        if !(meta.dirty || forced_clean_on_disk) {
            return Ok(());
        }
        let degraded = self.is_degraded();
        if let Some(bm) = self.bm().as_ref() {
            let mut b = lock(bm);
            if !degraded && resync == MAX_SECTOR {
                b.clear_all();
                b.sb.events_cleared = meta.events.saturating_add(1);
                let live = self.live_devices();
                b.write_bits(&self.devs(), &live)?;
            }
        }
        self.meta.dirty_fast.store(false, Ordering::Release);
        self.write_superblocks(&mut meta, |sb| sb.set_resync_offset(resync))?;
        meta.dirty = false;
        meta.disk_active = resync != MAX_SECTOR;
        Ok(())
    }

    /// The array's state as md words it (mdadm's `State :`): `active` while the
    /// superblocks say so (written since the last clean mark, or not stopped cleanly),
    /// else `clean`; then `degraded` if a role lacks a fully valid member.
    pub fn state_words(&self) -> Vec<&'static str> {
        let active = lock(&self.meta.sb).disk_active;
        let mut words = vec![if active { "active" } else { "clean" }];
        if self.is_degraded() {
            words.push("degraded");
        }
        words
    }

    /// Stop the array: flush and mark clean.
    pub fn stop(self) -> Result<()> {
        self.mark_clean()
    }

    pub(crate) fn bitmap_mark(&self, start: u64, n: u64) -> Result<()> {
        // Each round that fails a member leaves one member fewer; one more round than
        // there are devices ends it whatever happens.
        for _ in 0..=self.devs().len() {
            let failed: Vec<(usize, EngineError)> = {
                let bm = self.bm();
                let Some(bm) = bm.as_ref() else {
                    return Ok(());
                };
                let mut b = lock(bm);
                let new_bits = b.mark_new(start, n);
                if new_bits.is_empty() {
                    return Ok(());
                }
                let devs = self.devs();
                let failed: Vec<(usize, EngineError)> = self
                    .live_devices()
                    .into_iter()
                    .filter_map(|i| b.write_bits(&devs, &[i]).err().map(|e| (i, e)))
                    .collect();
                if failed.is_empty() {
                    return Ok(());
                }
                // Until every member that stays has them on disk, the bits are not set.
                for i in new_bits {
                    b.clear(i);
                }
                failed
            };
            // Outside the bitmap lock: failing a member writes the bitmap header.
            self.metadata_write_failed(failed)?;
            // The write this mark covers goes on without the failed members: its bits
            // must be on every member that stays, or a returning member's bitmap-guided
            // catch-up would skip the range (found by a network member killed before the
            // first write of a new region). Mark again on those that stay.
        }
        Err(EngineError::Invalid(
            "the write-intent bitmap could not be written to the members that stay".into(),
        ))
    }

    pub(crate) fn set_resync_done(&self) {
        lock(&self.meta.sb).resync_from = MAX_SECTOR;
    }

    /// True if the array has an internal write-intent bitmap.
    pub fn has_bitmap(&self) -> bool {
        self.bm().is_some()
    }

    /// The bitmap slot (read-locked: it cannot be added or removed while held).
    pub(crate) fn bm(&self) -> std::sync::RwLockReadGuard<'_, Option<std::sync::Mutex<RunBitmap>>> {
        crate::locks::read(&self.meta.bitmap)
    }

    /// Sectors per bitmap bit, if there is a bitmap.
    pub fn bitmap_chunk_sectors(&self) -> Option<u64> {
        self.bm()
            .as_ref()
            .map(|b| crate::array::lock(b).chunk_sectors)
    }
}

pub(crate) fn update_090_counts(s: &mut v090::SuperblockV090, missing: &[usize]) {
    use v090::disk_state::*;
    let raid = s.raid_disks as usize;
    for d in s.disks.iter_mut() {
        let r = d.raid_disk as usize;
        if r < raid && missing.contains(&r) && d.state & (ACTIVE | SYNC) == (ACTIVE | SYNC) {
            d.state = FAULTY | REMOVED;
        }
    }
    let active = raid - missing.len().min(raid);
    s.active_disks = active as u32;
    s.working_disks = active as u32 + s.spare_disks;
    s.failed_disks = missing.len() as u32;
    if let Some(d) = s.disks.get(s.this_disk.number as usize) {
        s.this_disk = *d;
    }
}
