//! md's write-mostly and write-behind for mirrors over slow links.
//!
//! A *write-mostly* member (1.x `devflags` bit 0, 0.90 descriptor state bit 9) is read
//! only when no other copy can serve ([`Array::candidates`]). With *write-behind* `N`
//! (the bitmap superblock's `write_behind`, RAID1 only, as md), a client write is
//! acknowledged once every other copy has it; the write-mostly members' copies are queued
//! here and written in the background, at most `N` outstanding (a write that would exceed
//! it waits; so does one that would keep more than [`MAX_QUEUED_BYTES`] of memory). A
//! queued write keeps the caller's own buffer when it has one ([`SharedBuf`]: the NBD
//! server's request buffer), else a copy. Their bitmap
//! bits were set before the write and are cleared only by [`Array::mark_clean`], which
//! first waits for this queue to drain: a crash, or the member failing with writes
//! outstanding, leaves those regions dirty, and the member's return resyncs exactly them. A client flush does not wait for the queue (the data is durable
//! on the other copies, as in md). Overlapping queued writes are written in order, never
//! at once. A read that only a write-mostly member can serve waits until no queued write
//! overlaps it.
//!
//! The queue runs on one thread per array, in batches (every queued write that overlaps
//! none before it, at once, each until the member's deadline). A write it could not do
//! fails the member at once: the thread marks it failed before the write leaves the
//! queue (so whoever waits for the queue to drain sees it failed, and keeps its bitmap
//! regions dirty), then records the failure — its event and the others' superblocks —
//! itself if the array is held in an `Arc` ([`Array::watch_write_behind`], as a served
//! array is), else the next array operation that settles the queue does
//! ([`Array::settle_write_behind`]).

use crate::array::member::Member;
use crate::array::write_buf::{SharedBuf, WriteData};
use crate::array::Array;
use crate::dev::io::{self, IoOp, IoReq};
use crate::locks::lock;
use raidkit_layout::SECTOR;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// One queued write to a write-mostly member.
struct Job {
    id: u64,
    role: usize,
    member: Arc<Member>,
    /// Data sector on the member.
    dsec: u64,
    data: SharedBuf,
    /// Zeros queued by a zeroing of the array ([`io::punch_zeroes`]): punched where the
    /// member can.
    punch: bool,
}

impl Job {
    fn sectors(&self) -> u64 {
        self.data.len() as u64 / SECTOR
    }
}

/// Most bytes of memory the queued writes keep at once, whatever `N` is (each holds its
/// data, as md's behind pages: every buffer counted whole, once — [`SharedBuf::footprint`]):
/// a client cannot make the queue hold more.
pub const MAX_QUEUED_BYTES: u64 = 64 << 20;

/// A queued write.
struct Pending {
    id: u64,
    role: usize,
    /// Data sector on the member.
    dsec: u64,
    sectors: u64,
    /// Whose buffer it keeps ([`SharedBuf::owner_id`]; None: its own copy).
    owner: Option<usize>,
    /// The memory of that buffer, or of its copy.
    footprint: u64,
}

impl Pending {
    fn overlaps(&self, role: usize, dsec: u64, n: u64) -> bool {
        self.role == role && self.dsec < dsec + n && dsec < self.dsec + self.sectors
    }
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    next_id: u64,
    /// The buffers queued writes keep, by owner: writes holding it, its footprint.
    held: std::collections::HashMap<usize, (usize, u64)>,
    /// Their footprints' sum: the memory the queue keeps.
    held_bytes: u64,
    /// Members marked failed by the queue's thread, whose failure is not yet recorded:
    /// role, member, error.
    failed: Vec<(usize, Arc<Member>, String)>,
    /// Threads waiting on [`Shared::changed`] (for room, an overlap, a drain): the
    /// queue's thread wakes them only if there are any (a notify is a system call even
    /// when nobody waits, and it was one per batch written).
    waiters: usize,
    /// Times the queue's thread woke them.
    wakeups: u64,
}

impl Queue {
    /// What queueing `p` adds to the memory held (nothing if a queued write holds its
    /// buffer already).
    fn charge(&self, p: &Pending) -> u64 {
        match p.owner {
            Some(o) if self.held.contains_key(&o) => 0,
            _ => p.footprint,
        }
    }

    fn add(&mut self, p: Pending) {
        self.held_bytes += self.charge(&p);
        if let Some(o) = p.owner {
            self.held.entry(o).or_insert((0, p.footprint)).0 += 1;
        }
        self.pending.push(p);
    }

    /// The write `id` left the queue (its buffer reference dropped already).
    fn remove(&mut self, id: u64) {
        let Some(k) = self.pending.iter().position(|p| p.id == id) else {
            return;
        };
        let p = self.pending.remove(k);
        let Some(o) = p.owner else {
            self.held_bytes -= p.footprint;
            return;
        };
        if let Some(h) = self.held.get_mut(&o) {
            h.0 -= 1;
            if h.0 == 0 {
                self.held_bytes -= h.1;
                self.held.remove(&o);
            }
        }
    }
}

#[derive(Default)]
struct Shared {
    q: Mutex<Queue>,
    changed: Condvar,
    /// The array, for the queue's thread to record a member's failure at once.
    owner: Mutex<Option<std::sync::Weak<Array>>>,
}

impl Shared {
    /// Wait for the queue to change (counted as a waiter meanwhile).
    fn wait<'a>(&self, mut q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        q.waiters += 1;
        let mut q = self
            .changed
            .wait(q)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        q.waiters -= 1;
        q
    }
}

/// The array's write-behind state.
#[derive(Default)]
pub(crate) struct WriteBehind {
    /// Most writes outstanding (0: synchronous, md's and DRBD's protocol C).
    limit: AtomicU32,
    shared: Arc<Shared>,
    tx: Mutex<Option<Sender<Job>>>,
}

impl WriteBehind {
    /// Outstanding writes.
    pub(crate) fn backlog(&self) -> usize {
        lock(&self.shared.q).pending.len()
    }

    /// Bytes of memory the outstanding writes keep.
    pub(crate) fn held_bytes(&self) -> u64 {
        lock(&self.shared.q).held_bytes
    }

    /// Times the queue's thread woke threads waiting on the queue.
    pub(crate) fn wakeups(&self) -> u64 {
        lock(&self.shared.q).wakeups
    }

    /// Outstanding writes to `role`.
    pub(crate) fn backlog_of(&self, role: usize) -> usize {
        lock(&self.shared.q)
            .pending
            .iter()
            .filter(|p| p.role == role)
            .count()
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, n: u32) {
        self.limit.store(n, Ordering::Relaxed);
        self.shared.changed.notify_all();
    }

    /// Queue `data` (the caller's buffer or a copy, see [`WriteData::keep`]) for
    /// `member` (role `role`) at data sector `dsec`; waits while the limit is reached.
    /// False if write-behind is off (write it synchronously).
    fn queue(&self, role: usize, member: Arc<Member>, dsec: u64, data: WriteData<'_>) -> bool {
        let bytes = data.bytes();
        let punch = io::punching_zeroes() && io::is_zero(bytes);
        let kept = if punch { None } else { data.keep() };
        let mut p = Pending {
            id: 0,
            role,
            dsec,
            sectors: bytes.len() as u64 / SECTOR,
            owner: kept.as_ref().map(SharedBuf::owner_id),
            footprint: kept.as_ref().map_or(bytes.len(), SharedBuf::footprint) as u64,
        };
        let mut q = lock(&self.shared.q);
        loop {
            let limit = self.limit() as usize;
            if limit == 0 {
                return false;
            }
            let fits = q.pending.is_empty() || q.held_bytes + q.charge(&p) <= MAX_QUEUED_BYTES;
            if q.pending.len() < limit && fits {
                break;
            }
            q = self.shared.wait(q);
        }
        let id = q.next_id;
        q.next_id += 1;
        p.id = id;
        q.add(p);
        drop(q);
        // Copied only once admitted, so writers waiting for room hold no copies.
        let data = match kept {
            Some(b) => b,
            // Zeros need no copy (a fresh zeroed allocation is not touched until used).
            None if punch => SharedBuf::zeroed(bytes.len()),
            None => SharedBuf::copy_of(bytes),
        };
        let job = Job {
            id,
            role,
            member,
            dsec,
            data,
            punch,
        };
        let mut tx = lock(&self.tx);
        let sender = tx.get_or_insert_with(|| {
            let (tx, rx) = channel();
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("raidkit-wbehind".into())
                .spawn(move || worker(&shared, &rx))
                .map(|_| tx)
                .unwrap_or_else(|_| channel().0)
        });
        if let Err(std::sync::mpsc::SendError(job)) = sender.send(job) {
            // No worker (it could not be started): the write fails as if the member had.
            let Job {
                id, member, data, ..
            } = job;
            drop(data); // back to its owner before the queue stops counting it
            let mut q = lock(&self.shared.q);
            q.remove(id);
            q.failed.push((
                role,
                member,
                "write-behind thread could not be started".into(),
            ));
            self.shared.changed.notify_all();
        }
        true
    }

    /// Wait until no queued write overlaps data sectors `[dsec, dsec + n)` of `role`.
    fn wait_overlap(&self, role: usize, dsec: u64, n: u64) {
        let mut q = lock(&self.shared.q);
        while q.pending.iter().any(|p| p.overlaps(role, dsec, n)) {
            q = self.shared.wait(q);
        }
    }

    /// Wait until nothing is queued.
    fn drain(&self) {
        let mut q = lock(&self.shared.q);
        while !q.pending.is_empty() {
            q = self.shared.wait(q);
        }
    }

    fn take_failed(&self) -> Vec<(usize, Arc<Member>, String)> {
        std::mem::take(&mut lock(&self.shared.q).failed)
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // The worker ends once the queue it was given is written.
        lock(&self.tx).take();
    }
}

/// The queue's thread: write batches of non-overlapping jobs, in queue order.
fn worker(shared: &Shared, rx: &Receiver<Job>) {
    let mut held: Option<Job> = None;
    loop {
        let first = match held.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        while let Ok(j) = rx.try_recv() {
            let overlaps = batch.iter().any(|b| {
                b.role == j.role && b.dsec < j.dsec + j.sectors() && j.dsec < b.dsec + b.sectors()
            });
            if overlaps {
                held = Some(j);
                break;
            }
            batch.push(j);
        }
        let results = write_batch(&batch);
        // The buffers go back to their owners before the queue stops counting them.
        let done: Vec<_> = batch
            .into_iter()
            .map(
                |Job {
                     id, role, member, ..
                 }| (id, role, member),
            )
            .collect();
        let mut q = lock(&shared.q);
        let mut newly_failed = false;
        for ((id, role, member), res) in done.into_iter().zip(results) {
            if let Err(e) = res {
                // Failed before the write leaves the queue: a drain sees the member failed.
                if Array::set_failed(&member) {
                    q.failed.push((role, member, e));
                    newly_failed = true;
                }
            }
            q.remove(id);
        }
        // Whoever waits checks the queue under its lock before waiting, so one that
        // starts waiting after this look sees the change already.
        let waiting = q.waiters > 0;
        if waiting {
            q.wakeups += 1;
        }
        drop(q);
        if waiting {
            shared.changed.notify_all();
        }
        if newly_failed {
            let owner = lock(&shared.owner)
                .as_ref()
                .and_then(std::sync::Weak::upgrade);
            if let Some(arr) = owner {
                arr.settle_write_behind();
            }
        }
    }
}

/// Write the jobs at once, each until its member's deadline.
fn write_batch(batch: &[Job]) -> Vec<Result<(), String>> {
    let mut out = vec![Ok(()); batch.len()];
    let mut reqs = Vec::with_capacity(batch.len());
    let mut which = Vec::with_capacity(batch.len());
    for (k, j) in batch.iter().enumerate() {
        if j.member.is_failed() {
            // Failed meanwhile: its bitmap regions stay dirty for its return.
            out[k] = Err("the member was failed".into());
            continue;
        }
        let at = (j.member.data_offset + j.dsec) * SECTOR;
        let timeout = io::member_timeout(j.member.dev.as_ref());
        reqs.push(IoReq::new(
            j.member.dev.as_ref(),
            at,
            IoOp::Write(&j.data),
            timeout,
        ));
        which.push(k);
    }
    let t0 = std::time::Instant::now();
    let _punch = batch.iter().any(|j| j.punch).then(io::punch_zeroes);
    io::run(&mut reqs, &mut |_| {});
    for (r, &k) in reqs.iter_mut().zip(&which) {
        let done_at = r.done_at;
        let j = &batch[k];
        j.member.holes.wrote();
        match r.take_result() {
            Ok(()) => {
                let took = done_at.map(|d| d.saturating_duration_since(t0));
                j.member.stats.count_write(j.data.len(), took);
            }
            Err(e) => out[k] = Err(format!("write-behind write failed: {e}")),
        }
    }
    out
}

impl Array {
    /// Queue the write of `data` at data sector `dsec` of `role` behind (see the module
    /// docs); false if it must be written now (write-behind off, not a write-mostly member,
    /// or the member is not in sync).
    pub(crate) fn write_behind(&self, role: usize, dsec: u64, data: WriteData<'_>) -> bool {
        if self.wb.limit() == 0 {
            return false;
        }
        let Some(m) = self.member(role) else {
            return false;
        };
        if !m.is_write_mostly() || m.recovery().is_some() || self.replacing() {
            return false;
        }
        self.wb.queue(role, m, dsec, data)
    }

    /// Record the failure (event, superblocks) of the write-mostly members whose queued
    /// writes failed (the queue's thread marked them failed already).
    pub(crate) fn settle_write_behind(&self) {
        for (role, m, why) in self.wb.take_failed() {
            let same = self
                .slots()
                .get(role)
                .and_then(|s| s.as_ref())
                .is_some_and(|s| Arc::ptr_eq(s, &m));
            if same {
                // The array keeps running on the other copies; the regions stay dirty.
                let _ = self.record_failed(role, &m, &why);
            }
        }
    }

    /// Let the queue's thread record a member's failure as soon as its write behind
    /// fails (see the module docs), for an array held in an `Arc`.
    pub fn watch_write_behind(self: &Arc<Self>) {
        *lock(&self.wb.shared.owner) = Some(Arc::downgrade(self));
    }

    /// Wait until every queued write-behind write is done, then fail the members whose
    /// writes failed.
    pub(crate) fn drain_write_behind(&self) {
        self.wb.drain();
        self.settle_write_behind();
    }

    /// Before reading `role` (a write-mostly member serving because nothing else can):
    /// wait until no queued write overlaps the range.
    pub(crate) fn wait_write_behind(&self, role: usize, dsec: u64, n: u64) {
        if self.wb.limit() > 0 || self.wb.backlog() > 0 {
            self.wb.wait_overlap(role, dsec, n);
        }
    }

    /// Writes queued behind to write-mostly members and not yet done.
    pub fn write_behind_backlog(&self) -> usize {
        self.wb.backlog()
    }

    /// Bytes of memory the writes queued behind keep (their buffers, each counted whole
    /// and once; at most [`MAX_QUEUED_BYTES`] unless one write is larger).
    pub fn write_behind_bytes(&self) -> u64 {
        self.wb.held_bytes()
    }

    /// Times the write-behind queue's thread woke threads waiting on the queue (writers
    /// waiting for room, reads waiting for an overlapping write, a drain): only when
    /// there are any.
    pub fn write_behind_wakeups(&self) -> u64 {
        self.wb.wakeups()
    }

    /// Writes queued behind to the member in `role`.
    pub fn write_behind_backlog_of(&self, role: usize) -> usize {
        self.wb.backlog_of(role)
    }

    /// The write-behind limit (0: synchronous).
    pub fn write_behind_limit(&self) -> u32 {
        self.wb.limit()
    }
}

impl Array {
    /// Mark the device named `device` (a member or a spare) write-mostly or not, in its
    /// superblock (1.x `devflags`; 0.90 every superblock's descriptor of it) and for read
    /// balancing at once. Clearing it on the last write-mostly member of an array with
    /// write-behind is refused (md's write-behind applies to write-mostly members only).
    pub fn set_write_mostly(&self, device: &str, on: bool) -> crate::error::Result<()> {
        use crate::error::EngineError;
        let idx = self
            .devs()
            .iter()
            .position(|d| d.name() == device)
            .ok_or_else(|| {
                EngineError::Invalid(format!("{device} is not a device of this array"))
            })?;
        let slot = self
            .slots()
            .iter()
            .flatten()
            .find(|m| m.index == idx)
            .cloned();
        if !on && self.wb.limit() > 0 {
            let others = self
                .slots()
                .iter()
                .flatten()
                .filter(|m| m.index != idx && m.is_write_mostly() && !m.is_failed())
                .count();
            if others == 0 && slot.as_ref().is_some_and(|m| m.is_write_mostly()) {
                return Err(EngineError::Invalid(format!(
                    "{device} is the last write-mostly member and the array writes behind (max {}); turn write-behind off first",
                    self.wb.limit()
                )));
            }
        }
        let _gate = self.pause_writes();
        if !on {
            // Its queued writes land first: from now on it may serve reads.
            self.drain_write_behind();
        }
        let mut meta = lock(&self.meta.sb);
        let devnum = meta.sbs[idx].dev_number();
        let result = self.write_superblocks(&mut meta, |sb| sb.set_write_mostly(devnum, on));
        if result.is_ok() {
            if let Some(m) = &slot {
                m.write_mostly.store(on, Ordering::Relaxed);
            }
        }
        result
    }

    /// Set md's write-behind limit (RAID1 with a write-intent bitmap; 0 turns it off) in
    /// the bitmap superblock of every member. More than 0 needs a write-mostly member.
    pub fn set_write_behind(&self, n: u32) -> crate::error::Result<()> {
        use crate::error::EngineError;
        check_write_behind(
            n,
            self.geo.level,
            self.has_bitmap(),
            self.members().iter().any(|m| m.write_mostly),
        )?;
        let _gate = self.pause_writes();
        if n == 0 {
            self.drain_write_behind();
        }
        let bm = self.bm();
        let Some(bm) = bm.as_ref() else {
            return Err(EngineError::Invalid("the array has no bitmap".into()));
        };
        let _io = lock(&self.meta.bitmap_io);
        let mut b = lock(bm);
        let old = b.sb.write_behind;
        b.sb.write_behind = n;
        let live = self.live_devices();
        if let Err(e) = b.write_header(&self.devs(), &live) {
            b.sb.write_behind = old;
            return Err(e);
        }
        drop(b);
        self.wb.set_limit(n);
        Ok(())
    }
}

/// Is write-behind `n` possible: RAID1 (md's write-behind is RAID1 only), a write-intent
/// bitmap (the regions written behind are kept dirty in it), a write-mostly member (only
/// they are written behind), `n` within the kernel's limit.
pub fn check_write_behind(
    n: u32,
    level: raidkit_layout::Level,
    bitmap: bool,
    any_write_mostly: bool,
) -> crate::error::Result<()> {
    use crate::error::EngineError;
    if n == 0 {
        return Ok(());
    }
    let max = raidkit_format::bitmap::MAX_WRITE_BEHIND;
    if n > max {
        return Err(EngineError::Invalid(format!(
            "write-behind {n} is over the most md allows ({max})"
        )));
    }
    if level != raidkit_layout::Level::Raid1 {
        return Err(EngineError::Invalid(format!(
            "write-behind is for RAID1 only (as in md), not {level}"
        )));
    }
    if !bitmap {
        return Err(EngineError::Request {
            why: "write-behind needs a write-intent bitmap (the regions written behind stay dirty in it until the write-mostly member has them)".into(),
            remedy: crate::error::Remedy::WriteBehindNeedsBitmap,
        });
    }
    if !any_write_mostly {
        return Err(EngineError::Request {
            why: "write-behind applies only to write-mostly members, and there is none".into(),
            remedy: crate::error::Remedy::WriteBehindNeedsWriteMostly,
        });
    }
    Ok(())
}
