//! The array's metadata at run time: superblocks (written to every live device with the
//! event count bumped), the dirty/clean state md keeps in `resync_offset`, quiescing
//! client writes, and the write-intent bitmap's bits set before the writes they cover.

use crate::array::{Array, ArrayEvent, Member};
use crate::dev::io::{self, IoOp, IoReq};
use crate::dev::BlockDev;
use crate::error::EngineError;
use crate::error::Result;
use crate::locks::lock;
use crate::meta::bitmap::{bits_ahead, RunBitmap};
use crate::meta::sb::write_super;
use crate::meta::sb::Super;
use raidkit_format::bitmap::BITMAP_SB_BYTES;
use raidkit_format::{v090, MAX_SECTOR};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

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
    /// Group commit of bitmap bits ([`Array::bitmap_mark`]).
    pub(crate) commit: BitmapCommit,
    /// Where recent writes ended, to set bits ahead of sequential streams.
    pub(crate) streams: RecentEnds,
    /// Held while the bitmap is written to the devices (taken before `bitmap`'s mutex,
    /// after `sb`'s): a group-commit round writes an image of the bitmap taken under it,
    /// so no other bitmap write (a header with new events) lands between.
    pub(crate) bitmap_io: Mutex<()>,
}

/// How many sequential writes' ends are remembered: streams (or writes of one stream in
/// flight at once, arriving out of order) recognised at a time.
const STREAMS: usize = 8;

/// The ends (in the bitmap's sectors) of the last [`STREAMS`] writes, and where the
/// stream each one ended began. A write that begins where one of them ended continues a
/// sequential stream. A heuristic: racing writers may overwrite each other's ends, which
/// costs at most a missed recognition (or a stream taken as shorter than it is).
pub(crate) struct RecentEnds {
    ends: [AtomicU64; STREAMS],
    begun: [AtomicU64; STREAMS],
    next: AtomicUsize,
}

impl Default for RecentEnds {
    fn default() -> RecentEnds {
        RecentEnds {
            ends: std::array::from_fn(|_| AtomicU64::new(u64::MAX)),
            begun: std::array::from_fn(|_| AtomicU64::new(0)),
            next: AtomicUsize::new(0),
        }
    }
}

impl RecentEnds {
    /// Record a write of `n` sectors at `start`. If it continues a recent one: the
    /// sectors its stream has written, this write included.
    fn note(&self, start: u64, n: u64) -> Option<u64> {
        // The slot of the write it continues takes its new end (one slot per stream).
        let continued = self
            .ends
            .iter()
            .position(|e| e.load(Ordering::Relaxed) == start);
        let (slot, begun) = match continued {
            Some(k) => (k, self.begun[k].load(Ordering::Relaxed).min(start)),
            None => (self.next.fetch_add(1, Ordering::Relaxed) % STREAMS, start),
        };
        let end = start.saturating_add(n);
        self.begun[slot].store(begun, Ordering::Relaxed);
        self.ends[slot].store(end, Ordering::Relaxed);
        if continued.is_some() {
            // A later write of the stream that arrived first (writes in flight at once
            // overtake each other) began a slot of its own where this one ends: it is
            // the same stream, as long as it is.
            for (j, b) in self.begun.iter().enumerate() {
                if j != slot && b.load(Ordering::Relaxed) == end {
                    b.store(begun, Ordering::Relaxed);
                }
            }
        }
        continued.map(|_| end - begun)
    }
}

/// Writers waiting for bitmap bits, and the round that writes them.
#[derive(Default)]
pub(crate) struct BitmapCommit {
    st: Mutex<CommitState>,
    done: Condvar,
}

#[derive(Default)]
struct CommitState {
    /// Bits wanted by writers waiting for the next round.
    queued: Vec<u64>,
    /// The round the bits queued now are written in.
    next_round: u64,
    /// Rounds up to this one are over.
    done_round: u64,
    /// A round is being written.
    flushing: bool,
    /// Rounds written since assembly.
    rounds: u64,
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
            commit: BitmapCommit {
                st: Mutex::new(CommitState {
                    next_round: 1,
                    ..CommitState::default()
                }),
                done: Condvar::new(),
            },
            streams: RecentEnds::default(),
            bitmap_io: Mutex::new(()),
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
    /// Devices (by index) whose last superblock write failed, with the events of the
    /// last one known written: such a device holds that superblock or the one in `sbs`.
    pub behind: std::collections::HashMap<usize, u64>,
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
        let (active, spare, faulty) = self.counts_090(&live);
        let before: Vec<(usize, u64)> = live.iter().map(|&i| (i, meta.sbs[i].events())).collect();
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
                Super::V090(s) => update_090_counts(s, &missing, [active, spare, faulty]),
            }
        }
        let devs = self.devs();
        let mut failed: Vec<(usize, (String, std::io::Error))> = Vec::new();
        let as_io = |e: EngineError| match e {
            EngineError::Io { source, .. } => source,
            e => std::io::Error::other(e.to_string()),
        };
        if let Some(bm) = self.bm().as_ref() {
            let _io = lock(&self.meta.bitmap_io);
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
        let mut written: Vec<usize> = Vec::with_capacity(live.len());
        for &i in &live {
            if failed.iter().any(|(d, _)| *d == i) {
                continue;
            }
            match write_super(devs[i].as_ref(), &meta.sbs[i]) {
                Ok(()) => written.push(i),
                Err(e) => failed.push((i, (devs[i].name().to_string(), as_io(e)))),
            }
        }
        // Then every device's flush at once, as md waits for its superblock writes
        // together: one flush's latency instead of one per member (on disks a flush is
        // the slow part). Nothing returns before all are durable, as before.
        let targets: Vec<&dyn BlockDev> = written.iter().map(|&i| devs[i].as_ref()).collect();
        for (&i, r) in written.iter().zip(io::flush_each(&targets, &mut |_| {})) {
            if let Err(e) = r {
                failed.push((i, (devs[i].name().to_string(), e)));
            }
        }
        for (i, was) in before {
            if failed.iter().any(|(d, _)| *d == i) {
                meta.behind.entry(i).or_insert(was);
            } else {
                meta.behind.remove(&i);
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
    /// The (active, spare, faulty) device counts 0.90 superblocks record: active are the
    /// members in sync; every other `live` device (a spare, a member being rebuilt or
    /// caught up, a replacement being built) counts as a spare, as md writes it; faulty
    /// are failed members not removed yet.
    fn counts_090(&self, live: &[usize]) -> (u32, u32, u32) {
        let slots = self.slots();
        let members = slots.iter().flatten();
        let active = members
            .clone()
            .filter(|m| !m.is_failed() && m.recovery().is_none())
            .count()
            .min(live.len());
        let faulty = members.filter(|m| m.is_failed()).count();
        (active as u32, (live.len() - active) as u32, faulty as u32)
    }

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
        // Dirty, the superblocks say 0 whatever resync is owed (md's rule): writes in
        // flight at a crash may leave parity stale anywhere, below a resync's resume
        // point too. Only a clean mark records that point.
        self.write_superblocks(&mut meta, |sb| sb.set_resync_offset(0))?;
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
            let _io = lock(&self.meta.bitmap_io);
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

    /// Set the bitmap bits covering array sectors `[start, start + n)` on every live
    /// device before the write they cover goes on. Concurrent writers that need new bits
    /// join one bitmap flush (md's batching of bit updates): while one writer (the
    /// leader) writes the bitmap, the others queue their bits for the next round, which
    /// one of them then writes for all. A bit is set in memory only once it is durable on
    /// every device that stays, so a writer that finds its bits set goes on at once.
    ///
    /// Bits ahead: a write that needs a new bit and begins where a recent write ended (a
    /// sequential stream) also sets the next [`bits_ahead`](crate::meta::bitmap::bits_ahead)
    /// bits in the same round, so the stream's next writes find theirs durable already
    /// (one bitmap round per several chunks instead of one per chunk: with a small bitmap
    /// chunk and a slow member, that round trip is what a sequential writer waits for).
    /// The window grows with the stream (as long as it has written so far, 4 to 64 MiB),
    /// so a long stream pays a few rounds, not one per 4 MiB. The cost: a crash resyncs up
    /// to that window more per stream. Not while the array is degraded (bits set then stay
    /// until the missing member's return, whose resync would copy the window for nothing).
    /// The bits are cleared as every bit is, when the array is marked clean.
    pub(crate) fn bitmap_mark(&self, start: u64, n: u64) -> Result<()> {
        let stream = self.meta.streams.note(start, n);
        // Each failed round fails a member (one fewer each time) or ends in an error; one
        // more round than there are devices ends it whatever happens.
        for _ in 0..=self.devs().len() {
            let needed = {
                let bm = self.bm();
                let Some(bm) = bm.as_ref() else {
                    return Ok(());
                };
                let b = lock(bm);
                let mut needed = unset_bits(&b, start, n);
                if let Some(len) = stream.filter(|_| !needed.is_empty() && !self.is_degraded()) {
                    needed.extend(ahead_bits(&b, start, n, len));
                }
                needed
            };
            if needed.is_empty() {
                return Ok(());
            }
            self.bitmap_commit(needed)?;
        }
        Err(EngineError::Invalid(
            "the write-intent bitmap could not be written to the members that stay".into(),
        ))
    }

    /// Queue `bits` for a bitmap flush and wait for the round that writes them, leading
    /// it if no flush is running. Ok once that round is over (its bits are set unless it
    /// failed: the caller looks again); Err if this writer led a round that failed.
    fn bitmap_commit(&self, bits: Vec<u64>) -> Result<()> {
        let gc = &self.meta.commit;
        let mut st = lock(&gc.st);
        st.queued.extend(bits);
        let mine = st.next_round;
        loop {
            if st.done_round >= mine {
                return Ok(());
            }
            if !st.flushing {
                st.flushing = true;
                let round = st.next_round;
                st.next_round += 1;
                let bits = std::mem::take(&mut st.queued);
                drop(st);
                // Ends the round when dropped, also if the round unwinds, so the writers
                // waiting for it look at their bits again instead of waiting forever.
                let end = RoundEnd { gc, round };
                let r = self.bitmap_round(&bits);
                drop(end);
                r?;
                st = lock(&gc.st);
                continue;
            }
            st = gc
                .done
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// One group-commit round: write the bitmap with `bits` set to every live device at
    /// once (one write, then one flush, per device), then set them in memory. A device
    /// whose write fails is failed (the array goes on without it; the bits are then on
    /// every device that stays) — unless it is one the array cannot lose: then Err and
    /// the bits stay clear.
    fn bitmap_round(&self, bits: &[u64]) -> Result<()> {
        let failed = {
            // Lock order as everywhere: the bitmap slot, the bitmap IO turn, the bitmap.
            let bm = self.bm();
            let Some(bm) = bm.as_ref() else {
                return Ok(());
            };
            let _io_turn = lock(&self.meta.bitmap_io);
            let (image, targets) = {
                let b = lock(bm);
                if bits
                    .iter()
                    .all(|&i| raidkit_format::bitmap::bit_is_set(&b.bits, i))
                {
                    return Ok(());
                }
                let mut image = b.sb.encode();
                image.extend_from_slice(&b.bits);
                for &i in bits {
                    raidkit_format::bitmap::set_bit(&mut image[BITMAP_SB_BYTES..], i, true);
                }
                let devs = self.devs();
                let targets: Vec<(usize, Arc<dyn BlockDev>, u64)> = self
                    .live_devices()
                    .into_iter()
                    .filter_map(|i| {
                        let loc = (*b.locs.get(i)?)?;
                        Some((i, Arc::clone(devs.get(i)?), loc * 512))
                    })
                    .collect();
                (image, targets)
            };
            let failed = write_bitmap_images(&image, &targets);
            if failed.is_empty() {
                // Still in the IO turn: whoever copies the bits next (a member taken
                // back, say) copies these too.
                set_bits(&mut lock(bm), bits);
            }
            failed
        };
        if !failed.is_empty() {
            // Outside the bitmap's locks: failing a member writes the superblocks and the
            // bitmap header. The devices that stay have the bits already.
            self.metadata_write_failed(failed)?;
            if let Some(bm) = self.bm().as_ref() {
                let _io_turn = lock(&self.meta.bitmap_io);
                set_bits(&mut lock(bm), bits);
            }
        }
        Ok(())
    }

    /// Bitmap flush rounds run since assembly (group commits of bitmap bits).
    pub fn bitmap_flushes(&self) -> u64 {
        lock(&self.meta.commit.st).rounds
    }

    pub(crate) fn set_resync_done(&self) {
        lock(&self.meta.sb).resync_from = MAX_SECTOR;
    }

    /// Where a resync owed resumes (sync-space sectors, md's `resync_offset`): 0 when
    /// none is owed (a resync asked for anyway covers everything).
    pub(crate) fn resync_resume(&self) -> u64 {
        match lock(&self.meta.sb).resync_from {
            MAX_SECTOR => 0,
            at => at,
        }
    }

    /// A resync owed was stopped at sync-space sector `at`, everything before it done:
    /// the next one resumes there (recorded at the next clean mark; while dirty the
    /// superblocks say 0, see `ensure_dirty`). Nothing is recorded when no resync is
    /// owed.
    pub(crate) fn resync_stopped_at(&self, at: u64) {
        let mut meta = lock(&self.meta.sb);
        if meta.resync_from != MAX_SECTOR {
            meta.resync_from = meta.resync_from.max(at);
        }
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

/// The end of a group-commit round (see [`Array::bitmap_commit`]): when dropped, the
/// round is over and its waiters are woken.
struct RoundEnd<'a> {
    gc: &'a BitmapCommit,
    round: u64,
}

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.gc.st);
        st.flushing = false;
        st.done_round = self.round;
        st.rounds += 1;
        self.gc.done.notify_all();
    }
}

/// Set `bits` in the in-memory bitmap.
fn set_bits(b: &mut RunBitmap, bits: &[u64]) {
    for &i in bits {
        raidkit_format::bitmap::set_bit(&mut b.bits, i, true);
    }
}

/// The bits covering array sectors `[start, start + n)` that are not set.
fn unset_bits(b: &RunBitmap, start: u64, n: u64) -> Vec<u64> {
    if n == 0 || b.chunk_sectors == 0 || b.chunks() == 0 {
        return Vec::new();
    }
    let first = start / b.chunk_sectors;
    let last = ((start + n - 1) / b.chunk_sectors).min(b.chunks() - 1);
    (first..=last)
        .filter(|&i| !raidkit_format::bitmap::bit_is_set(&b.bits, i))
        .collect()
}

/// The unset bits of the [`bits_ahead`](crate::meta::bitmap::bits_ahead) chunks (for a
/// stream of `stream` sectors) after the last one covering `[start, start + n)`, within
/// the bitmap.
fn ahead_bits(b: &RunBitmap, start: u64, n: u64, stream: u64) -> Vec<u64> {
    if n == 0 || b.chunk_sectors == 0 || b.chunks() == 0 {
        return Vec::new();
    }
    let last = (start + n - 1) / b.chunk_sectors;
    let end = last
        .saturating_add(bits_ahead(b.chunk_sectors, stream))
        .min(b.chunks() - 1);
    (last + 1..=end)
        .filter(|&i| !raidkit_format::bitmap::bit_is_set(&b.bits, i))
        .collect()
}

/// Write the bitmap `image` (superblock and bits) at byte offset `at` of each target
/// device (index, device, offset), all at once through the member IO layer, then flush
/// them all at once. Returns the devices whose write or flush failed.
fn write_bitmap_images(
    image: &[u8],
    targets: &[(usize, Arc<dyn BlockDev>, u64)],
) -> Vec<(usize, EngineError)> {
    let mut failed = Vec::new();
    // Each device's write, widened to its logical block size (read-modify-write of the
    // partial blocks at the ends).
    let mut bufs: Vec<(usize, u64, std::borrow::Cow<'_, [u8]>)> = Vec::new();
    for (k, (_, dev, at)) in targets.iter().enumerate() {
        let lbs = u64::from(dev.logical_block_size().max(512));
        let start = at / lbs * lbs;
        let end = (at + image.len() as u64).div_ceil(lbs) * lbs;
        if start == *at && end == at + image.len() as u64 {
            bufs.push((k, start, std::borrow::Cow::Borrowed(image)));
            continue;
        }
        let mut buf = vec![0u8; (end - start) as usize];
        let o = (at - start) as usize;
        match io::run_one(dev.as_ref(), start, IoOp::Read(&mut buf)) {
            Ok(()) => {
                buf[o..o + image.len()].copy_from_slice(image);
                bufs.push((k, start, std::borrow::Cow::Owned(buf)));
            }
            Err(e) => failed.push((k, EngineError::io(dev.name(), "reading the bitmap", e))),
        }
    }
    let mut reqs: Vec<IoReq<'_>> = bufs
        .iter()
        .map(|(k, start, buf)| {
            let dev = targets[*k].1.as_ref();
            IoReq::new(dev, *start, IoOp::Write(buf), io::member_timeout(dev))
        })
        .collect();
    io::run(&mut reqs, &mut |_| {});
    let mut written = Vec::new();
    for (r, (k, _, _)) in reqs.iter_mut().zip(&bufs) {
        match r.take_result() {
            Ok(()) => written.push(*k),
            Err(e) => failed.push((*k, EngineError::io(r.dev.name(), "writing the bitmap", e))),
        }
    }
    let flushed: Vec<&dyn BlockDev> = written.iter().map(|&k| targets[k].1.as_ref()).collect();
    for (&k, r) in written.iter().zip(io::flush_each(&flushed, &mut |_| {})) {
        if let Err(e) = r {
            let name = targets[k].1.name();
            failed.push((k, EngineError::io(name, "flushing the bitmap", e)));
        }
    }
    failed.into_iter().map(|(k, e)| (targets[k].0, e)).collect()
}

/// Mark the 0.90 descriptors of the `missing` roles failed and removed, and set the
/// counts from the `active` (in sync), `spare` (spares, members being rebuilt or caught
/// up) and `faulty` (failed, not removed) devices, as md recounts them on every write.
pub(crate) fn update_090_counts(
    s: &mut v090::SuperblockV090,
    missing: &[usize],
    [active, spare, faulty]: [u32; 3],
) {
    use v090::disk_state::*;
    let raid = s.raid_disks as usize;
    for d in s.disks.iter_mut() {
        let r = d.raid_disk as usize;
        if r < raid && missing.contains(&r) && d.state & (ACTIVE | SYNC) == (ACTIVE | SYNC) {
            d.state = FAULTY | REMOVED;
        }
    }
    s.set_counts(active, spare, faulty);
    if let Some(d) = s.disks.get(s.this_disk.number as usize) {
        s.this_disk = *d;
    }
}
