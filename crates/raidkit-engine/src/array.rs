//! A running array: read and write any byte range at every level and layout, degraded
//! included, keeping the superblocks' clean/dirty state and the write-intent bitmap the way
//! Linux MD does.

use crate::balance::{self, Candidate, ReadLoad};
use crate::bitmap::RunBitmap;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::sb::{write_super, Metadata, Super};
pub use crate::stripe_cache::StripeCacheStats;
use crate::stripe_cache::{Entry, EntryState, StripeCache, Victim, PAGE, PAGE_SECTORS};
use raidkit_format::badblocks::BadRange;
use raidkit_format::{v090, v1, MAX_SECTOR};
use raidkit_layout::{Geometry, Level, StripeLayout};
use raidkit_parity as parity;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

const SECTOR: u64 = 512;

/// One member device in a role slot.
pub struct Member {
    /// The device.
    pub dev: Arc<dyn BlockDev>,
    /// Index into the array's device list (and superblock list).
    pub index: usize,
    /// Start of the data area, sectors.
    pub data_offset: u64,
    /// If partially rebuilt: data sectors below this are valid (u64::MAX = in sync).
    recovery: AtomicU64,
    /// Bad ranges (absolute device sectors): the bad-block log, plus blocks a rebuild
    /// could not reconstruct. Never read; the data comes from redundancy.
    bad: RwLock<Vec<BadRange>>,
    has_bad: AtomicBool,
    failed: AtomicBool,
    /// Reads in flight and measured speed (for read balancing).
    pub load: ReadLoad,
    /// IO counters for statistics.
    pub stats: MemberStats,
    /// Read errors seen (corrected or not).
    read_errors: AtomicU32,
    /// Slow-member detection state.
    pub(crate) slow: crate::bbl::SlowState,
}

/// Per-member IO counters.
#[derive(Debug, Default)]
pub struct MemberStats {
    /// Read requests issued to the member.
    pub reads: AtomicU64,
    /// Bytes read.
    pub read_bytes: AtomicU64,
    /// Write requests issued to the member.
    pub writes: AtomicU64,
    /// Bytes written.
    pub write_bytes: AtomicU64,
}

impl Member {
    /// Build a member.
    pub fn new(
        dev: Arc<dyn BlockDev>,
        index: usize,
        data_offset: u64,
        recovery: Option<u64>,
        bad: Vec<BadRange>,
    ) -> Member {
        Member {
            dev,
            index,
            data_offset,
            recovery: AtomicU64::new(recovery.unwrap_or(u64::MAX)),
            has_bad: AtomicBool::new(!bad.is_empty()),
            bad: RwLock::new(bad),
            failed: AtomicBool::new(false),
            load: ReadLoad::default(),
            stats: MemberStats::default(),
            read_errors: AtomicU32::new(0),
            slow: crate::bbl::SlowState::default(),
        }
    }
    /// True once the member has been failed at run time.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
    /// Rebuild checkpoint: Some(n) if only data sectors below n are valid.
    pub fn recovery(&self) -> Option<u64> {
        let r = self.recovery.load(Ordering::Acquire);
        (r != u64::MAX).then_some(r)
    }

    /// Advance (or finish, with None) the rebuild checkpoint.
    pub fn set_recovery(&self, r: Option<u64>) {
        self.recovery
            .store(r.unwrap_or(u64::MAX), Ordering::Release);
    }

    /// Measured read service time, nanoseconds per KiB (0 = nothing measured yet).
    pub(crate) fn ewma_ns_per_kib(&self) -> u64 {
        self.load.ns_per_kib()
    }

    fn record_read(&self, bytes: usize) {
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn readable(&self, data_sector: u64, n: u64) -> bool {
        if self.is_failed() {
            return false;
        }
        if let Some(r) = self.recovery() {
            if data_sector + n > r {
                return false;
            }
        }
        if !self.has_bad.load(Ordering::Relaxed) {
            return true;
        }
        let s = self.data_offset + data_sector;
        let bad = match self.bad.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        !bad.iter().any(|b| b.start < s + n && s < b.start + b.len)
    }

    /// Mark data sectors `[data_sector, data_sector + n)` of this member as holding no
    /// valid data (they are then reconstructed, or reported lost, instead of read).
    /// Returns true if any of them was not already marked.
    pub fn add_bad(&self, data_sector: u64, n: u64) -> bool {
        self.add_bad_dev(self.data_offset + data_sector, n)
    }

    /// Like [`Member::add_bad`], in absolute device sectors.
    pub(crate) fn add_bad_dev(&self, start: u64, n: u64) -> bool {
        let mut bad = match self.bad.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let before = crate::bbl::covered(&bad);
        bad.push(BadRange { start, len: n });
        crate::bbl::coalesce(&mut bad);
        self.has_bad.store(true, Ordering::Relaxed);
        crate::bbl::covered(&bad) != before
    }

    /// Forget device sectors `[start, start + n)` as bad (they were rewritten).
    pub(crate) fn clear_bad_dev(&self, start: u64, n: u64) {
        let mut bad = match self.bad.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *bad = crate::bbl::subtract(&bad, start, n);
        self.has_bad.store(!bad.is_empty(), Ordering::Relaxed);
    }

    /// The bad ranges (absolute device sectors).
    pub fn bad_ranges(&self) -> Vec<BadRange> {
        match self.bad.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
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
    /// v1 role table (shared by all members).
    pub roles: Vec<u16>,
}

/// Per-stripe IO locks: a stripe is locked while its members are read for parity or
/// written. Sharded by stripe number, so locking unrelated stripes touches different
/// mutexes and an unlock wakes only the waiters of its own shard.
struct StripeLocks {
    shards: Box<[StripeLockShard]>,
}

#[derive(Default)]
struct StripeLockShard {
    /// Stripes locked now (few: at most one per thread).
    held: Mutex<Vec<u64>>,
    cv: Condvar,
}

const STRIPE_LOCK_SHARDS: usize = 64;

struct StripeGuard<'a> {
    shard: &'a StripeLockShard,
    stripe: u64,
}

impl StripeLocks {
    fn new() -> StripeLocks {
        StripeLocks {
            shards: (0..STRIPE_LOCK_SHARDS)
                .map(|_| StripeLockShard::default())
                .collect(),
        }
    }

    fn lock(&self, stripe: u64) -> StripeGuard<'_> {
        let h = (stripe.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
        let shard = &self.shards[h % STRIPE_LOCK_SHARDS];
        let mut g = lock(&shard.held);
        while g.contains(&stripe) {
            g = match shard.cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        g.push(stripe);
        StripeGuard { shard, stripe }
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let mut g = lock(&self.shard.held);
        if let Some(i) = g.iter().position(|&s| s == self.stripe) {
            g.swap_remove(i);
        }
        drop(g);
        self.shard.cv.notify_all();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Blocks of one stripe over a sector range, with missing ones reconstructed.
pub(crate) struct StripeData {
    pub data: Vec<Vec<u8>>,
    pub p: Vec<u8>,
    pub q: Option<Vec<u8>>,
}

/// A running array.
pub struct Array {
    pub(crate) geo: Geometry,
    pub(crate) uuid: [u8; 16],
    pub(crate) name: String,
    pub(crate) metadata: Metadata,
    /// Every device (members and spares), in the order of `meta.sbs`.
    pub(crate) devs: RwLock<Vec<Arc<dyn BlockDev>>>,
    /// Role slot → member.
    pub(crate) slots: RwLock<Vec<Option<Arc<Member>>>>,
    /// Device indices of spares.
    pub(crate) spares: Mutex<Vec<usize>>,
    /// Role slot → replacement being built for that slot's member (md's hot replace):
    /// every write to the role is also written to it; it is never read until it takes over.
    pub(crate) replacements: RwLock<Vec<Option<Arc<Member>>>>,
    /// Fast check: is any replacement in progress?
    pub(crate) replacing: AtomicBool,
    pub(crate) writable: bool,
    pub(crate) meta: Mutex<Meta>,
    /// The write-intent bitmap; switched (added/removed) only with `gate` held exclusively,
    /// so writes see it stable while they hold the gate shared.
    pub(crate) bitmap: RwLock<Option<Mutex<RunBitmap>>>,
    locks: StripeLocks,
    /// Writes hold this shared; marking clean holds it exclusively, so the superblocks
    /// never say "clean" while a write is in flight.
    pub(crate) gate: RwLock<()>,
    /// Forced start of a dirty degraded array: mark clean on the first write.
    pub(crate) forced_clean: bool,
    listeners: Mutex<Vec<std::sync::mpsc::Sender<ArrayEvent>>>,
    /// Array byte ranges known to be lost (unreconstructable); reads there fail.
    lost: Mutex<Vec<(u64, u64)>>,
    has_lost: AtomicBool,
    /// Lost ranges that were zeroed when the bad-block log was dropped by force.
    lost_zeroed: Mutex<Vec<(u64, u64)>>,
    /// Fast check of `meta.dirty` for the write path (the mutex is taken only to change it).
    dirty_fast: AtomicBool,
    /// Client-visible IO statistics and tracing.
    pub io: crate::iostats::IoStats,
    /// Stripe cache (RAID4/5/6 with chunks of whole 4 KiB pages).
    pub(crate) cache: Option<StripeCache>,
    /// The optional checksum sidecar (see [`crate::checksums`]).
    checksums: std::sync::OnceLock<Arc<crate::checksums::Checksums>>,
}

/// md fails a member after this many corrected read errors (its default).
pub const MAX_CORRECTED_READ_ERRORS: u32 = 20;

/// Something that happened to a running array, for logs and monitors.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ArrayEvent {
    /// A member was failed.
    MemberFailed {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Why.
        reason: String,
    },
    /// A read error was repaired by rewriting data recovered from redundancy.
    ReadErrorCorrected {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// First device sector rewritten.
        sector: u64,
        /// Sectors rewritten.
        sectors: u64,
    },
    /// A spare was added.
    SpareAdded {
        /// Device.
        device: String,
    },
    /// A rebuild onto a member started.
    RebuildStarted {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Where it starts (data sectors; non-zero when resumed).
        from: u64,
    },
    /// A hot replacement of a member started (or resumed).
    ReplaceStarted {
        /// Role slot.
        role: usize,
        /// The member being replaced (stays active until the copy is done).
        device: String,
        /// The device taking its place.
        replacement: String,
        /// Where the copy starts (data sectors; non-zero when resumed).
        from: u64,
    },
    /// A hot replacement finished: the replacement took the role, the old member was
    /// marked faulty and removed.
    ReplaceFinished {
        /// Role slot.
        role: usize,
        /// The member replaced.
        device: String,
        /// The device now holding the role.
        replacement: String,
        /// Array byte ranges that neither the old member nor redundancy could supply.
        lost: Vec<(u64, u64)>,
    },
    /// A rebuild finished.
    RebuildFinished {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Array byte ranges that could not be reconstructed.
        lost: Vec<(u64, u64)>,
    },
    /// Sectors of a member were recorded as bad (hold no valid data): a rebuild could not
    /// reconstruct them, a read could not be corrected, or a write to them failed.
    BadBlockRecorded {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// First bad device sector (absolute, like the on-disk log).
        sector: u64,
        /// Number of sectors.
        sectors: u64,
    },
    /// Bad sectors of a member were written successfully and hold valid data again (md's
    /// "made good"); they are gone from its bad-block log.
    BadBlockCleared {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// First cleared device sector (absolute, like the on-disk log).
        sector: u64,
        /// Number of sectors.
        sectors: u64,
    },
    /// A member that had no bad-block log got one, so bad blocks survive a restart.
    BadBlockLogCreated {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Log offset from the superblock, sectors (as `mdadm --examine` prints it).
        offset: i32,
        /// Why.
        reason: String,
    },
    /// Bad blocks could not be written to the member's on-disk log (0.90 metadata, no room
    /// for a log, log full): they are only known while this process runs.
    BadBlockNotPersisted {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The bad-block logs were removed from every member (`--update no-bbl`).
    BadBlockLogRemoved {
        /// Entries rewritten from redundancy (device sector ranges, per role).
        repaired: Vec<(usize, u64, u64)>,
        /// Array byte ranges whose data nobody could supply (zeroed with --force).
        lost: Vec<(u64, u64)>,
    },
    /// A member has been much slower than its peers over a window of reads.
    SlowMember {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// The member's measured read service time, microseconds per MiB.
        member_us: u64,
        /// Median of its peers, microseconds per MiB.
        peers_us: u64,
    },
}

/// IO counters of one member.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemberIo {
    /// Role slot.
    pub role: usize,
    /// Device name.
    pub device: String,
    /// Read requests.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
}

/// Description of a member for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemberInfo {
    /// Device name.
    pub device: String,
    /// Role slot, or None for a spare.
    pub role: Option<usize>,
    /// `in_sync`, `recovering`, `failed`, `replacement` (being built for the role), `spare`.
    pub state: String,
}

impl Array {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        geo: Geometry,
        uuid: [u8; 16],
        name: String,
        metadata: Metadata,
        devs: Vec<Arc<dyn BlockDev>>,
        slots: Vec<Option<Member>>,
        spares: Vec<usize>,
        writable: bool,
        meta: Meta,
        bitmap: Option<RunBitmap>,
        forced_clean: bool,
    ) -> Array {
        let cache = match geo.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6
                if geo.chunk_sectors > 0 && geo.chunk_sectors.is_multiple_of(PAGE_SECTORS) =>
            {
                Some(StripeCache::new(geo.data_disks(), geo.chunk_sectors))
            }
            _ => None,
        };
        Array {
            geo,
            uuid,
            name,
            metadata,
            devs: RwLock::new(devs),
            slots: RwLock::new(slots.into_iter().map(|m| m.map(Arc::new)).collect()),
            spares: Mutex::new(spares),
            replacements: RwLock::new(Vec::new()),
            replacing: AtomicBool::new(false),
            writable,
            meta: Mutex::new(meta),
            bitmap: RwLock::new(bitmap.map(Mutex::new)),
            locks: StripeLocks::new(),
            gate: RwLock::new(()),
            forced_clean,
            listeners: Mutex::new(Vec::new()),
            lost: Mutex::new(Vec::new()),
            has_lost: AtomicBool::new(false),
            lost_zeroed: Mutex::new(Vec::new()),
            dirty_fast: AtomicBool::new(false),
            io: crate::iostats::IoStats::default(),
            cache,
            checksums: std::sync::OnceLock::new(),
        }
    }

    /// Attach a checksum sidecar: from now on every write updates it and scrubs use it for
    /// verdicts. Fails if one is attached already.
    pub fn attach_checksums(&self, cs: Arc<crate::checksums::Checksums>) -> Result<()> {
        self.checksums.set(cs).map_err(|_| {
            EngineError::Invalid("a checksum sidecar is already attached to this array".into())
        })
    }

    /// The attached checksum sidecar, if any.
    pub fn checksums(&self) -> Option<&Arc<crate::checksums::Checksums>> {
        self.checksums.get()
    }

    /// The array's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.geo.array_sectors() * SECTOR
    }
    /// Array UUID.
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }
    /// Array UUID in mdadm's text form.
    pub fn uuid_text(&self) -> String {
        crate::sb::uuid_text(self.metadata, &self.uuid)
    }
    /// Array name from the superblock.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Metadata version.
    pub fn metadata(&self) -> Metadata {
        self.metadata
    }
    /// Level.
    pub fn level(&self) -> Level {
        self.geo.level
    }
    /// True if opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writable
    }
    /// Current event count.
    pub fn events(&self) -> u64 {
        lock(&self.meta).events
    }
    /// True if the superblocks say redundancy may be inconsistent (resync needed).
    pub fn needs_resync(&self) -> bool {
        lock(&self.meta).resync_from != MAX_SECTOR
    }
    pub(crate) fn slots(&self) -> std::sync::RwLockReadGuard<'_, Vec<Option<Arc<Member>>>> {
        match self.slots.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub(crate) fn devs(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<dyn BlockDev>>> {
        match self.devs.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Names of every device the array knows (members, spares, failed ones).
    pub fn device_names(&self) -> Vec<String> {
        self.devs().iter().map(|d| d.name().to_string()).collect()
    }

    /// Number of hot spares.
    pub fn spare_count(&self) -> usize {
        lock(&self.spares).len()
    }

    /// Roles without a working member.
    pub fn missing_roles(&self) -> Vec<usize> {
        self.slots()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.as_ref().is_none_or(|m| m.is_failed()))
            .map(|(i, _)| i)
            .collect()
    }
    /// True if any role lacks a fully valid member.
    pub fn is_degraded(&self) -> bool {
        self.slots().iter().any(|m| {
            m.as_ref()
                .is_none_or(|m| m.is_failed() || m.recovery().is_some())
        })
    }
    /// Members and spares for reports.
    pub fn members(&self) -> Vec<MemberInfo> {
        let mut v = Vec::new();
        for (r, m) in self.slots().iter().enumerate() {
            if let Some(m) = m {
                let state = if m.is_failed() {
                    "failed"
                } else if m.recovery().is_some() {
                    "recovering"
                } else {
                    "in_sync"
                };
                v.push(MemberInfo {
                    device: m.dev.name().to_string(),
                    role: Some(r),
                    state: state.into(),
                });
            }
        }
        for (r, m) in self.replacements().iter().enumerate() {
            if let Some(m) = m {
                v.push(MemberInfo {
                    device: m.dev.name().to_string(),
                    role: Some(r),
                    state: "replacement".into(),
                });
            }
        }
        let devs = self.devs();
        for &i in lock(&self.spares).iter() {
            v.push(MemberInfo {
                device: devs[i].name().to_string(),
                role: None,
                state: "spare".into(),
            });
        }
        v
    }

    /// IO counters per role slot: (role, device, reads, read bytes, writes, write bytes).
    pub fn member_stats(&self) -> Vec<MemberIo> {
        self.slots()
            .iter()
            .enumerate()
            .filter_map(|(r, m)| {
                m.as_ref().map(|m| MemberIo {
                    role: r,
                    device: m.dev.name().to_string(),
                    reads: m.stats.reads.load(Ordering::Relaxed),
                    read_bytes: m.stats.read_bytes.load(Ordering::Relaxed),
                    writes: m.stats.writes.load(Ordering::Relaxed),
                    write_bytes: m.stats.write_bytes.load(Ordering::Relaxed),
                })
            })
            .collect()
    }

    pub(crate) fn member(&self, role: usize) -> Option<Arc<Member>> {
        self.slots()
            .get(role)
            .and_then(|m| m.clone())
            .filter(|m| !m.is_failed())
    }

    /// Are all of the stripe's parity members (P, and Q for RAID6) failed or missing, with
    /// no replacement being built? Then writes there keep no parity.
    fn parity_gone(&self, lay: &StripeLayout) -> bool {
        !self.replacing.load(Ordering::Acquire)
            && self.member(lay.p).is_none()
            && lay.q.is_none_or(|q| self.member(q).is_none())
    }

    fn can_read(&self, role: usize, dsec: u64, n: u64) -> bool {
        self.member(role).is_some_and(|m| m.readable(dsec, n))
    }

    /// Read from one member's data area; any failure is returned (the member is not failed
    /// for read errors here — callers reconstruct).
    fn member_read(&self, role: usize, dsec: u64, buf: &mut [u8]) -> Result<()> {
        let m = self.member(role).ok_or_else(|| EngineError::Unreadable {
            offset: 0,
            end: 0,
            why: format!("role {role} is missing"),
        })?;
        if !m.readable(dsec, buf.len() as u64 / SECTOR) {
            return Err(EngineError::Unreadable {
                offset: 0,
                end: 0,
                why: format!("role {role} ({}) has no valid data there", m.dev.name()),
            });
        }
        m.load.begin();
        let t0 = std::time::Instant::now();
        let r = m.dev.read_at(buf, (m.data_offset + dsec) * SECTOR);
        m.load.end(buf.len(), r.is_ok().then(|| t0.elapsed()));
        if r.is_ok() {
            m.record_read(buf.len());
            self.check_slow(role, &m);
        }
        r.map_err(|e| EngineError::io(m.dev.name(), "reading member data", e))
    }

    /// Write to one member; a failure fails the member (md behaviour) and is reported
    /// as `Ok(false)`. Missing members are skipped (`Ok(false)`).
    fn member_write(&self, role: usize, dsec: u64, buf: &[u8]) -> Result<bool> {
        if self.replacing.load(Ordering::Acquire) {
            self.replacement_write(role, dsec, buf)?;
        }
        let Some(m) = self.member(role) else {
            return Ok(false);
        };
        match m.dev.write_at(buf, (m.data_offset + dsec) * SECTOR) {
            Ok(()) => {
                m.stats.writes.fetch_add(1, Ordering::Relaxed);
                m.stats
                    .write_bytes
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                if m.has_bad.load(Ordering::Relaxed) {
                    // md's "made good": bad blocks under a successful write hold valid
                    // data again.
                    self.made_good(role, &m, dsec, buf.len() as u64 / SECTOR);
                }
                Ok(true)
            }
            Err(e) => {
                // md records a bad block instead of failing the member when the member
                // has a bad-block log; otherwise the member is failed.
                let n = buf.len() as u64 / SECTOR;
                if !self.bad_block_instead_of_fail(role, &m, dsec, n) {
                    self.fail_member(role, &format!("write error: {e}"))?;
                }
                Ok(false)
            }
        }
    }

    /// Mark a member failed (without recording it anywhere yet): true if it was not
    /// failed before.
    pub(crate) fn set_failed(m: &Member) -> bool {
        !m.failed.swap(true, Ordering::AcqRel)
    }

    /// Mark a member failed and record it in the superblocks of the others.
    pub fn fail_member(&self, role: usize, why: &str) -> Result<()> {
        let Some(Some(m)) = self.slots().get(role).cloned() else {
            return Ok(());
        };
        if m.failed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.emit(ArrayEvent::MemberFailed {
            role,
            device: m.dev.name().to_string(),
            reason: why.to_string(),
        });
        if self.writable {
            let mut meta = lock(&self.meta);
            let devnum = meta.sbs[m.index].dev_number();
            if let Some(r) = meta.roles.get_mut(devnum) {
                *r = v1::role::FAULTY;
            }
            self.write_superblocks(&mut meta, |_| {})?;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ superblocks

    /// Apply `f` to every live superblock, bump events, update times, role tables and
    /// the bitmap superblock, then write bitmap first and superblocks second, flushing.
    pub(crate) fn write_superblocks(
        &self,
        meta: &mut Meta,
        mut f: impl FnMut(&mut Super),
    ) -> Result<()> {
        let events = meta.events + 1;
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
        if let Some(bm) = self.bm().as_ref() {
            let mut b = lock(bm);
            b.sb.events = events;
            b.write_header(self, &live)?;
        }
        if let Some(cs) = self.checksums() {
            cs.events_pending(events)?;
        }
        let devs = self.devs();
        for &i in &live {
            write_super(devs[i].as_ref(), &meta.sbs[i])?;
        }
        for &i in &live {
            devs[i]
                .flush()
                .map_err(|e| EngineError::io(devs[i].name(), "flushing superblocks", e))?;
        }
        meta.events = events;
        if let Some(cs) = self.checksums() {
            cs.events_done(events)?;
        }
        Ok(())
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
        if self.replacing.load(Ordering::Acquire) {
            v.extend(
                self.replacements()
                    .iter()
                    .flatten()
                    .filter(|m| !m.is_failed())
                    .map(|m| m.index),
            );
        }
        v.extend(lock(&self.spares).iter().copied());
        v
    }

    pub(crate) fn ensure_dirty(&self) -> Result<()> {
        if !self.writable {
            return Err(EngineError::Invalid(
                "the array was assembled read-only; reassemble it for writing".into(),
            ));
        }
        if self.dirty_fast.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut meta = lock(&self.meta);
        if meta.dirty {
            self.dirty_fast.store(true, Ordering::Release);
            return Ok(());
        }
        if self.forced_clean {
            meta.resync_from = MAX_SECTOR;
        }
        let resync = if meta.resync_from == MAX_SECTOR {
            0
        } else {
            meta.resync_from
        };
        self.write_superblocks(&mut meta, |sb| sb.set_resync_offset(resync))?;
        meta.dirty = true;
        self.dirty_fast.store(true, Ordering::Release);
        Ok(())
    }

    /// Flush every member's completed writes to stable storage.
    pub fn flush(&self) -> Result<()> {
        let t0 = std::time::Instant::now();
        let r = self.flush_inner();
        self.io
            .record(crate::iostats::Op::Flush, 0, 0, t0.elapsed(), r.is_ok());
        r
    }

    fn flush_inner(&self) -> Result<()> {
        if let Some(c) = &self.cache {
            if c.has_dirty() {
                // Held writes go out under the gate, so the array cannot be marked clean
                // while they are written.
                let _gate = match self.gate.read() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                self.cache_drain_all(c);
            }
        }
        self.flush_members()
    }

    /// Flush the members, then report a failure of writing held data since the last flush.
    fn flush_members(&self) -> Result<()> {
        for m in self.slots().iter().flatten().filter(|m| !m.is_failed()) {
            m.dev
                .flush()
                .map_err(|e| EngineError::io(m.dev.name(), "flushing", e))?;
        }
        if let Some(e) = self.cache.as_ref().and_then(|c| c.take_pending()) {
            return Err(e);
        }
        Ok(())
    }

    /// Wait for client writes in flight to finish and hold new ones until the guard is
    /// dropped (reads go on). Background work that reads and rewrites mirror copies, or
    /// switches on-disk state, runs under it so no client write lands in between.
    /// Writes held in the stripe cache are written out first (they are writes in flight),
    /// so under the guard the members hold every acknowledged write.
    pub(crate) fn pause_writes(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        let g = match self.gate.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
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
        if !self.writable {
            return Ok(());
        }
        // Pausing writes also writes out what the stripe cache holds.
        let _gate = self.pause_writes();
        self.flush_members()?;
        if let Some(cs) = self.checksums() {
            cs.mark_clean()?;
        }
        let mut meta = lock(&self.meta);
        if !meta.dirty {
            return Ok(());
        }
        let resync = meta.resync_from;
        let degraded = self.is_degraded();
        if let Some(bm) = self.bm().as_ref() {
            let mut b = lock(bm);
            if !degraded && resync == MAX_SECTOR {
                b.clear_all();
                b.sb.events_cleared = meta.events + 1;
                let live = self.live_devices();
                b.write_bits(self, &live)?;
            }
        }
        self.dirty_fast.store(false, Ordering::Release);
        self.write_superblocks(&mut meta, |sb| sb.set_resync_offset(resync))?;
        meta.dirty = false;
        Ok(())
    }

    /// Stop the array: flush and mark clean.
    pub fn stop(self) -> Result<()> {
        self.mark_clean()
    }

    // ------------------------------------------------------------------ public IO

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.size_bytes();
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(EngineError::OutOfRange { offset, len, size });
        }
        Ok(())
    }

    /// Record array byte ranges whose data is lost, so reads there fail instead of
    /// returning wrong bytes.
    pub(crate) fn add_lost(&self, ranges: &[(u64, u64)]) {
        if ranges.is_empty() {
            return;
        }
        let mut l = lock(&self.lost);
        l.extend_from_slice(ranges);
        crate::bbl::coalesce_pairs(&mut l);
        self.has_lost.store(true, Ordering::Relaxed);
    }

    /// Keep only the parts of the lost ranges that are also in `still` (coalesced): after
    /// a write made some of them valid again.
    pub(crate) fn shrink_lost(&self, still: &[(u64, u64)]) {
        let mut l = lock(&self.lost);
        *l = crate::bbl::intersect_pairs(&l, still);
        self.has_lost.store(!l.is_empty(), Ordering::Relaxed);
    }

    /// Forget lost ranges (their data was replaced, e.g. zeroed by `--update no-bbl
    /// --force`); they are kept in [`Array::lost_zeroed_ranges`].
    pub(crate) fn take_lost(&self) -> Vec<(u64, u64)> {
        let mut l = lock(&self.lost);
        self.has_lost.store(false, Ordering::Relaxed);
        let v = std::mem::take(&mut *l);
        let mut z = lock(&self.lost_zeroed);
        z.extend_from_slice(&v);
        crate::bbl::coalesce_pairs(&mut z);
        v
    }

    /// Array byte ranges whose lost data was replaced by zeros (`--update no-bbl --force`).
    pub fn lost_zeroed_ranges(&self) -> Vec<(u64, u64)> {
        lock(&self.lost_zeroed).clone()
    }

    /// Array byte ranges known to be lost.
    pub fn lost_ranges(&self) -> Vec<(u64, u64)> {
        lock(&self.lost).clone()
    }

    /// Read `buf.len()` bytes at byte `offset` (any alignment).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let t0 = std::time::Instant::now();
        let r = self.read_inner(offset, buf);
        self.io.record(
            crate::iostats::Op::Read,
            offset,
            buf.len() as u64,
            t0.elapsed(),
            r.is_ok(),
        );
        r
    }

    fn read_inner(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        if self.has_lost.load(Ordering::Relaxed) {
            let lost = lock(&self.lost);
            let end = offset + buf.len() as u64;
            if let Some(&(o, l)) = lost.iter().find(|&&(o, l)| o < end && offset < o + l) {
                return Err(EngineError::Unreadable {
                    offset: o.max(offset),
                    end: (o + l).min(end),
                    why: format!(
                        "data lost: array bytes {o}..{} have no valid copy on any member (bad blocks beyond what redundancy covers); writing new data over them (e.g. restoring from a backup) makes them valid again, and `raidkit manage NAME --update no-bbl --force` replaces them all with zeros",
                        o + l
                    ),
                });
            }
        }
        if buf.is_empty() {
            return Ok(());
        }
        let head = offset % SECTOR;
        let end = offset + buf.len() as u64;
        if head == 0 && end.is_multiple_of(SECTOR) {
            return self.read_sectors(offset / SECTOR, buf);
        }
        let s0 = offset / SECTOR;
        let s1 = end.div_ceil(SECTOR);
        let mut tmp = vec![0u8; ((s1 - s0) * SECTOR) as usize];
        self.read_sectors(s0, &mut tmp)?;
        buf.copy_from_slice(&tmp[head as usize..head as usize + buf.len()]);
        Ok(())
    }

    /// Write `buf` at byte `offset` (any alignment; partial sectors are read-modify-written).
    /// Safe to call from many threads at once; writes to the same stripe are serialized.
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let t0 = std::time::Instant::now();
        let r = self.write_inner(offset, buf).and_then(|()| {
            self.written_over_lost(offset, buf.len() as u64);
            self.check_not_lost(offset, buf.len() as u64)
        });
        self.io.record(
            crate::iostats::Op::Write,
            offset,
            buf.len() as u64,
            t0.elapsed(),
            r.is_ok(),
        );
        r
    }

    /// A write that went through makes the lost bytes it covered valid again, except where
    /// bad blocks beyond the redundancy still hold them (those are cleared as the members
    /// take the write: `made_good`). What this clears: ranges lost because held writes
    /// could not be written out of the stripe cache (say, a degraded array with an
    /// unreadable sector and no bad-block log), which no bad block records. A write-out
    /// fails before it writes anything unless the array stops, so the members hold a
    /// consistent stripe there, and the message for that loss tells the admin to restore
    /// the range: that write must be taken.
    fn written_over_lost(&self, offset: u64, len: u64) {
        if !self.has_lost.load(Ordering::Relaxed) || len == 0 {
            return;
        }
        let end = offset + len;
        let overlaps = |l: &[(u64, u64)]| l.iter().any(|&(o, n)| o < end && offset < o + n);
        if !overlaps(&lock(&self.lost)) {
            return;
        }
        // Only for a write over a lost range: the bad-block scan is not on every write.
        let backed = self.derive_lost();
        let mut l = lock(&self.lost);
        let outside = [(0, offset), (end, u64::MAX - end)];
        let mut keep = crate::bbl::intersect_pairs(&l, &outside);
        keep.extend(crate::bbl::intersect_pairs(
            &crate::bbl::intersect_pairs(&l, &[(offset, len)]),
            &backed,
        ));
        crate::bbl::coalesce_pairs(&mut keep);
        *l = keep;
        self.has_lost.store(!l.is_empty(), Ordering::Relaxed);
    }

    /// A write "succeeds" member by member even when its errors turned into bad blocks on
    /// more members than the level survives; then the data cannot be read back, and the
    /// client must be told its write was not stored rather than get an acknowledgement.
    fn check_not_lost(&self, offset: u64, len: u64) -> Result<()> {
        if !self.has_lost.load(Ordering::Relaxed) || len == 0 {
            return Ok(());
        }
        let end = offset + len;
        let lost = lock(&self.lost);
        match lost.iter().find(|&&(o, l)| o < end && offset < o + l) {
            None => Ok(()),
            Some(&(o, l)) => Err(EngineError::WriteFailed {
                offset: o.max(offset),
                end: (o + l).min(end),
                why: "the written data has no valid copy on any member (write errors on more members than the level survives, recorded as bad blocks); see `raidkit status` and replace the failing members".into(),
            }),
        }
    }

    fn write_inner(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let head = offset % SECTOR;
        let end = offset + buf.len() as u64;
        if head == 0 && end.is_multiple_of(SECTOR) {
            return self.write_sectors(offset / SECTOR, buf);
        }
        let s0 = offset / SECTOR;
        let s1 = end.div_ceil(SECTOR);
        let mut tmp = vec![0u8; ((s1 - s0) * SECTOR) as usize];
        // Only the first and last sector need their old contents.
        self.read_sectors(s0, &mut tmp[..SECTOR as usize])?;
        let last = tmp.len() - SECTOR as usize;
        if s1 - 1 > s0 {
            self.read_sectors(s1 - 1, &mut tmp[last..])?;
        }
        tmp[head as usize..head as usize + buf.len()].copy_from_slice(buf);
        self.write_sectors(s0, &tmp)
    }

    /// Size of the pieces a large request is split into for parallel processing, in
    /// sectors (whole stripes for striped levels), or None if it should not be split.
    fn split_unit(&self, total: u64) -> Option<u64> {
        let threads = self.threads();
        if threads < 2 || total < 1024 {
            return None;
        }
        let g = &self.geo;
        let stripe = match g.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => g.chunk_sectors * g.data_disks() as u64,
            Level::Raid0 | Level::Raid10 => g.chunk_sectors.max(1) * g.raid_disks as u64,
            Level::Raid1 | Level::Linear => 256,
        };
        let per = total.div_ceil(threads as u64).div_ceil(stripe) * stripe;
        if per >= total {
            None
        } else {
            Some(per.max(stripe))
        }
    }

    fn threads(&self) -> usize {
        // `available_parallelism` reads cgroup files (about 20 syscalls): once per process,
        // not once per request.
        static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *THREADS.get_or_init(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(8)
        })
    }

    /// Run `f` on every (array sector, piece) job, the first on the calling thread and
    /// each other one in its own scoped thread; the first error (in job order) wins.
    fn run_parallel<P: Send>(
        &self,
        jobs: Vec<(u64, P)>,
        f: impl Fn(u64, P) -> Result<()> + Sync,
    ) -> Result<()> {
        std::thread::scope(|sc| {
            let f = &f;
            let mut jobs = jobs.into_iter();
            let first = jobs.next();
            let handles: Vec<_> = jobs.map(|(at, p)| sc.spawn(move || f(at, p))).collect();
            let mut res = first.map_or(Ok(()), |(at, p)| f(at, p));
            for h in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(EngineError::Invalid("an IO worker thread panicked".into()))
                });
                if res.is_ok() {
                    res = r;
                }
            }
            res
        })
    }

    /// Read whole sectors starting at array sector `s`. Large requests are split on stripe
    /// boundaries and served by several threads; on mirrors they are spread over the
    /// members holding copies (see `read_mirrored`).
    pub fn read_sectors(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        if matches!(self.geo.level, Level::Raid1 | Level::Raid10) {
            return self.read_mirrored(s, buf);
        }
        let total = buf.len() as u64 / SECTOR;
        if let Some(unit) = self.split_unit(total) {
            // Align the first piece so later ones start on unit boundaries.
            let first = (unit - s % unit).min(total);
            let (head, rest) = buf.split_at_mut((first * SECTOR) as usize);
            let mut jobs = vec![(s, head)];
            let mut off = s + first;
            for piece in rest.chunks_mut((unit * SECTOR) as usize) {
                let n = piece.len() as u64 / SECTOR;
                jobs.push((off, piece));
                off += n;
            }
            return self.run_parallel(jobs, |at, p| self.read_serial(at, p));
        }
        self.read_serial(s, buf)
    }

    fn read_serial(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        let mut done = 0u64;
        while done < total {
            let cur = s + done;
            let n = match self.geo.level {
                Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                    let c = self.geo.chunk_sectors;
                    (c - cur % c).min(total - done)
                }
                _ => {
                    let p = self.locate(cur)?;
                    p.run.min(total - done)
                }
            };
            let b = &mut buf[(done * SECTOR) as usize..((done + n) * SECTOR) as usize];
            self.read_piece(cur, b)?;
            done += n;
        }
        Ok(())
    }

    fn locate(&self, s: u64) -> Result<raidkit_layout::Placement> {
        self.geo.locate(s).ok_or(EngineError::OutOfRange {
            offset: s * SECTOR,
            len: SECTOR,
            size: self.size_bytes(),
        })
    }

    /// Read a piece that does not cross a mapping boundary.
    fn read_piece(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64 / SECTOR;
        match self.geo.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                let c = self.geo.chunk_sectors;
                let k_count = self.geo.data_disks() as u64;
                let chunk = s / c;
                let stripe = chunk / k_count;
                let k = (chunk % k_count) as usize;
                let a = s % c;
                if let Some(cache) = &self.cache {
                    if let Some(e) = cache.get(stripe) {
                        let st = lock(&e.st);
                        if !st.dead && st.alloc > 0 {
                            let (all, any) = cached_cover(cache, &st, k, a, n);
                            if all {
                                copy_from_cache(cache, &st, k, a, buf);
                                cache
                                    .hits
                                    .fetch_add(n.div_ceil(PAGE_SECTORS), Ordering::Relaxed);
                                return Ok(());
                            }
                            if any {
                                self.read_parity_piece(s, stripe, k, a, buf)?;
                                copy_from_cache(cache, &st, k, a, buf);
                                return Ok(());
                            }
                        }
                    }
                }
                self.read_parity_piece(s, stripe, k, a, buf)
            }
            _ => {
                let p = self.locate(s)?;
                let cands = self.candidates(&p.copies, n);
                let order = self.try_order(&p.copies, &cands, None, 0);
                self.read_copies(s, buf, &order)
            }
        }
    }

    /// Read data block `k` of `stripe` at chunk sector `a` (array sector `s`) from its
    /// member, reconstructing it from the others if that fails.
    fn read_parity_piece(
        &self,
        s: u64,
        stripe: u64,
        k: usize,
        a: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let n = buf.len() as u64 / SECTOR;
        let c = self.geo.chunk_sectors;
        let lay = self.stripe_layout(stripe)?;
        let role = lay.data[k];
        let dsec = stripe * c + a;
        let direct = if self.can_read(role, dsec, n) {
            Some(self.member_read(role, dsec, buf))
        } else {
            None
        };
        if let Some(Ok(())) = direct {
            return Ok(());
        }
        let _g = self.locks.lock(stripe);
        let sd = self
            .read_stripe(stripe, &lay, a, n, false)
            .map_err(|e| annotate_unreadable(e, s * SECTOR, (s + n) * SECTOR))?;
        buf.copy_from_slice(&sd.data[k]);
        if let Some(Err(EngineError::Io { .. })) = direct {
            self.repair_read_error(role, dsec, buf);
        }
        Ok(())
    }

    // ------------------------------------------------------------------ stripe cache

    /// Bound the stripe cache's memory (`max_bytes`) and/or force a fixed size in entries
    /// (one entry = one 4 KiB row: a page per data member). `None, None` = automatic,
    /// bounded only by memory. Levels without parity have no stripe cache: Ok, no effect.
    pub fn configure_stripe_cache(
        &self,
        max_bytes: Option<u64>,
        fixed_entries: Option<usize>,
    ) -> Result<()> {
        match &self.cache {
            Some(c) => c
                .configure(max_bytes, fixed_entries)
                .map_err(EngineError::Invalid),
            None => Ok(()),
        }
    }

    /// How long partial stripes may wait for the rest of their data with write-back
    /// (default [`crate::stripe_cache::HOLD`]); flushes never wait for it.
    pub fn set_stripe_cache_hold(&self, hold: std::time::Duration) {
        if let Some(c) = &self.cache {
            c.set_hold(hold);
        }
    }

    /// Tests: force whether small writes to stripes the cache holds nothing of bypass it
    /// (`Some(true)`: all but one in 32; `Some(false)`: none), or let the cache decide from
    /// how useful it has been (`None`, the default).
    #[doc(hidden)]
    pub fn force_stripe_cache_bypass(&self, on: Option<bool>) {
        if let Some(c) = &self.cache {
            c.force_bypass(on);
        }
    }

    /// Size, memory and hit counters of the stripe cache (None without one).
    pub fn stripe_cache_stats(&self) -> Option<StripeCacheStats> {
        self.cache.as_ref().map(StripeCache::stats)
    }

    /// Let partial-stripe writes wait briefly (bounded by [`crate::stripe_cache::HOLD`] and
    /// the cache size) for the rest of their stripe, so adjacent writes merge into
    /// full-stripe writes. Starts a thread that writes out what waited long enough; it ends
    /// when the array is dropped. Held writes are written by [`Array::flush`],
    /// [`Array::mark_clean`] and [`Array::stop`]; until then they are like a disk's
    /// volatile write cache.
    pub fn start_writeback(self: &Arc<Self>) {
        let Some(c) = &self.cache else {
            return;
        };
        if !self.writable || c.writeback.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("raidkit-writeback".into())
            .spawn(move || loop {
                std::thread::sleep(crate::stripe_cache::HOLD / 2);
                let Some(a) = weak.upgrade() else {
                    break;
                };
                a.cache_background();
            });
        if spawned.is_err() {
            // No thread: keep writing through.
            c.writeback.store(false, Ordering::Release);
        }
    }

    fn cache_background(&self) {
        let Some(c) = &self.cache else {
            return;
        };
        c.tune();
        if !c.has_dirty() && !c.over() {
            return;
        }
        let _gate = match self.gate.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        while let Some(e) = c.aged(usize::MAX) {
            let _ = self.cache_drain_entry(c, &e);
        }
        self.cache_make_room(c);
    }

    /// Write out every held write (callers hold the gate).
    fn cache_drain_all(&self, c: &StripeCache) {
        let all = c.all_dirty();
        if all.is_empty() {
            return;
        }
        let threads = self.threads().max(1);
        if threads < 2 || all.len() < 2 {
            for e in &all {
                let _ = self.cache_drain_entry(c, e);
            }
        } else {
            let per = all.len().div_ceil(threads);
            let jobs: Vec<(u64, &[Arc<Entry>])> = all.chunks(per).map(|ch| (0, ch)).collect();
            let _ = self.run_parallel(jobs, |_, ch| {
                for e in ch {
                    let _ = self.cache_drain_entry(c, e);
                }
                Ok(())
            });
        }
        // Writing out fills rows; stay within the size.
        self.cache_make_room(c);
    }

    fn cache_drain_entry(&self, c: &StripeCache, e: &Arc<Entry>) -> Result<()> {
        let mut st = lock(&e.st);
        if st.dead {
            return Ok(());
        }
        if !st.is_dirty() {
            c.mark_clean(e);
            return Ok(());
        }
        let streamed = self.cache_drain(c, e, &mut st)?;
        self.drop_streamed(c, e, &mut st, streamed);
        Ok(())
    }

    /// After a write-out: a stripe written whole by clients and sent out merged is what a
    /// sequential stream leaves behind. Unless written pages are being found in the cache
    /// again lately, nothing will ask for it, and keeping it until eviction only spreads
    /// the stream over more memory (a 1 MiB stream ran ~20% slower with 32768 entries
    /// than with 1024 before this). Stripes the cache filled from the members (random
    /// writes over a working set) stay. Only where nothing more is written under the
    /// entry: a new entry for the stripe may appear once this one is removed.
    fn drop_streamed(&self, c: &StripeCache, e: &Entry, st: &mut EntryState, streamed: bool) {
        if streamed && !c.rewrites_seen() {
            c.remove(e, st);
        }
    }

    fn cache_make_room(&self, c: &StripeCache) {
        while c.over() {
            match c.make_room() {
                Some(Victim::Dirty(e)) => {
                    let mut st = lock(&e.st);
                    if !st.dead {
                        if st.is_dirty() {
                            if st.dirty_pages >= c.rows {
                                c.early_write_out();
                            }
                            let _ = self.cache_drain(c, &e, &mut st);
                        }
                        c.remove(&e, &mut st);
                    }
                }
                None => break,
            }
        }
    }

    /// A stripe write through the cache: whole stripes go straight out (the cache's pages
    /// of the stripe are dropped); partial ones are copied in and written out once the
    /// stripe's data is complete over the rows written (no member reads needed), once
    /// they have waited long enough, or at once without write-back.
    fn cache_write(&self, c: &StripeCache, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        let cs = self.geo.chunk_sectors;
        let full = pieces.len() == c.kc && pieces.iter().all(|p| p.a == 0 && p.n == cs);
        // Whole stripes, writes to arrays with bad blocks or lost data (bbl.rs decides
        // what each row may be written from), and (while the cache is of little use)
        // writes to stripes it holds nothing of, go straight to the members; what the
        // cache held of the stripe is written out first.
        let damaged = self.has_lost.load(Ordering::Relaxed)
            || self
                .slots()
                .iter()
                .flatten()
                .any(|m| m.has_bad.load(Ordering::Relaxed));
        let bypass = !full && !damaged && c.bypass();
        if bypass {
            // The common case of scattered small writes, without creating an entry: with
            // the stripe's IO lock held, a stripe that has no entry cannot gain cached
            // pages read from the members (those are read under this lock) until the
            // write is done, and data that clients write into a new entry meanwhile is
            // written out later, under this lock, over this write.
            let g = self.locks.lock(stripe);
            if !c.contains(stripe) {
                let r = self.write_stripe_locked(stripe, pieces);
                drop(g);
                self.cache_housekeeping(c);
                return r;
            }
        }
        loop {
            let e = c.get_or_create(stripe);
            let mut st = lock(&e.st);
            if st.dead {
                continue;
            }
            // A bypassing write goes straight out when the cache has no page where it
            // writes: pages of other blocks or rows stay right (parity is per row, and
            // held data is written out under the stripe's IO lock, reading the members
            // then). Unless written pages have been found in the cache again lately, the
            // stripe's clean pages are dropped with it (while the cache is of little use
            // they would only draw writes into it). A write onto a cached page is reuse:
            // it goes through the cache, which is how the cache learns to stop bypassing.
            if bypass && !touches_cached(c, &st, pieces) {
                let r = self.write_stripe_direct(stripe, pieces);
                if !st.is_dirty() && !c.reuse_likely() {
                    c.remove(&e, &mut st);
                }
                drop(st);
                self.cache_housekeeping(c);
                return r;
            }
            if full || damaged {
                if st.is_dirty() {
                    self.cache_drain(c, &e, &mut st)?;
                }
                c.clear(&e, &mut st);
                let r = self.write_stripe_direct(stripe, pieces);
                c.remove(&e, &mut st);
                drop(st);
                self.cache_housekeeping(c);
                return r;
            }
            let was_dirty = st.is_dirty();
            for pc in pieces {
                let mut sec = pc.a;
                let end = pc.a + pc.n;
                while sec < end {
                    let row = (sec / PAGE_SECTORS) as usize;
                    let in_page = sec % PAGE_SECTORS;
                    let m = (PAGE_SECTORS - in_page).min(end - sec);
                    let idx = pc.k * c.rows + row;
                    let pg = c.page(&mut st, idx);
                    if pg.valid != 0 {
                        c.rewritten_pages.fetch_add(1, Ordering::Relaxed);
                    }
                    let first_write = !pg.written;
                    pg.written = true;
                    c.written_pages.fetch_add(1, Ordering::Relaxed);
                    let from = ((sec - pc.a) * SECTOR) as usize;
                    let to = (in_page * SECTOR) as usize;
                    let len = (m * SECTOR) as usize;
                    pg.data[to..to + len].copy_from_slice(&pc.data[from..from + len]);
                    let bits = sector_bits(in_page, m);
                    pg.valid |= bits;
                    st.set_dirty(idx, bits);
                    if first_write {
                        st.written_pages += 1;
                    }
                    sec += m;
                }
            }
            c.mark_dirty(&e);
            let ends_on_chunk = pieces.iter().any(|p| p.a + p.n == cs);
            let r = if !c.should_hold(was_dirty, ends_on_chunk) || cache_complete(c, &st) {
                self.cache_drain(c, &e, &mut st)
                    .map(|streamed| self.drop_streamed(c, &e, &mut st, streamed))
            } else {
                Ok(())
            };
            drop(st);
            self.cache_housekeeping(c);
            return r;
        }
    }

    /// After a write: make room, and help write out partial stripes that waited long enough.
    fn cache_housekeeping(&self, c: &StripeCache) {
        self.cache_make_room(c);
        if c.help_due() {
            for _ in 0..2 {
                let Some(e) = c.aged(4) else {
                    break;
                };
                let _ = self.cache_drain_entry(c, &e);
            }
        }
        c.tune();
    }

    /// Write an entry's dirty pages to the members (entry lock held). A failure drops the
    /// held data, marks its range lost (reads there fail rather than return old data) and
    /// is reported by the next flush.
    fn cache_drain(&self, c: &StripeCache, e: &Entry, st: &mut EntryState) -> Result<bool> {
        let r = self.cache_drain_inner(c, e, st);
        if let Err(err) = &r {
            let cs = self.geo.chunk_sectors;
            let first = e.stripe * c.kc as u64 * cs;
            let mut lost: Vec<(u64, u64)> = Vec::new();
            for k in 0..c.kc {
                for row in st.rows_used() {
                    if st.pages[k * c.rows + row]
                        .as_ref()
                        .is_some_and(|p| p.dirty != 0)
                    {
                        let off = (first + k as u64 * cs + row as u64 * PAGE_SECTORS) * SECTOR;
                        match lost.last_mut() {
                            Some((o, l)) if *o + *l == off => *l += PAGE as u64,
                            _ => lost.push((off, PAGE as u64)),
                        }
                    }
                }
            }
            self.add_lost(&lost);
            let (o, end) = match (lost.first(), lost.last()) {
                (Some(a), Some(b)) => (a.0, b.0 + b.1),
                _ => (0, 0),
            };
            c.set_pending(EngineError::WriteFailed {
                offset: o,
                end,
                why: format!(
                    "acknowledged writes held in the stripe cache could not be written to the \
                     members ({err}); the range now reads as lost: restore it from a backup"
                ),
            });
            c.clear(e, st);
        }
        r
    }

    /// Write out an entry's dirty rows, each run of adjacent dirty rows on its own (random
    /// writes held together in one stripe are not merged into one wide range). True if
    /// clients had written the whole stripe and it went out without member reads.
    fn cache_drain_inner(&self, c: &StripeCache, e: &Entry, st: &mut EntryState) -> Result<bool> {
        let rows = c.rows;
        let used = st.rows_used();
        let dirty_row = |r: usize| {
            (0..c.kc).any(|k| {
                st.pages[k * rows + r]
                    .as_ref()
                    .is_some_and(|p| p.dirty != 0)
            })
        };
        let runs: Vec<(usize, usize)> = {
            let mut v = Vec::new();
            let mut r = used.start;
            while r < used.end {
                if !dirty_row(r) {
                    r += 1;
                    continue;
                }
                let mut q = r;
                while q < used.end && dirty_row(q) {
                    q += 1;
                }
                v.push((r, q));
                r = q;
            }
            v
        };
        let lay = self.stripe_layout(e.stripe)?;
        let _g = self.locks.lock(e.stripe);
        // Every page of the stripe written by clients (over one or more write-outs): the
        // stripe was written whole, not filled from the members for reuse.
        let whole = st.written_pages == c.kc * c.rows;
        let mut merged = true;
        for (r, q) in runs {
            merged &= self.cache_drain_rows(c, e, st, &lay, r..q)?;
        }
        self.check_still_runs(e.stripe)?;
        c.mark_clean(e);
        Ok(whole && merged)
    }

    /// Write out the dirty data of rows `rows` (stripe lock held). True if that needed no
    /// member reads (the cache knew every data block over the rows: a merge).
    fn cache_drain_rows(
        &self,
        c: &StripeCache,
        e: &Entry,
        st: &mut EntryState,
        lay: &StripeLayout,
        row_range: std::ops::Range<usize>,
    ) -> Result<bool> {
        let cs = self.geo.chunk_sectors;
        let (kc, rows) = (c.kc, c.rows);
        let stripe = e.stripe;
        // Dirty span of each data block, chunk sectors.
        let mut spans: Vec<Option<(u64, u64)>> = vec![None; kc];
        for (k, span) in spans.iter_mut().enumerate() {
            for row in row_range.clone() {
                if let Some(p) = &st.pages[k * rows + row] {
                    if p.dirty != 0 {
                        let r0 = row as u64 * PAGE_SECTORS;
                        let first = r0 + u64::from(p.dirty.trailing_zeros());
                        let last = r0 + PAGE_SECTORS - u64::from(p.dirty.leading_zeros());
                        *span = Some(match *span {
                            None => (first, last),
                            Some((a, b)) => (a.min(first), b.max(last)),
                        });
                    }
                }
            }
        }
        let lo = spans.iter().flatten().map(|s| s.0).min();
        let hi = spans.iter().flatten().map(|s| s.1).max();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Ok(false);
        };
        let rn = hi - lo;
        let len = (rn * SECTOR) as usize;
        let base = stripe * cs;
        // What the cache knows of [lo, hi) of every data block, in reused buffers (a
        // stream writes out a stripe every few hundred microseconds: fresh zeroed buffers
        // made the allocator hand memory back to the kernel and fault it in again).
        let mut bufs = ScratchBufs(Vec::with_capacity(kc));
        let mut known: Vec<Vec<bool>> = vec![vec![false; rn as usize]; kc];
        let mut clean_known = 0u64;
        for (k, kn) in known.iter_mut().enumerate() {
            let mut b = scratch_take();
            b.clear();
            b.reserve(len);
            let mut sec = lo;
            while sec < hi {
                let row_end = ((sec / PAGE_SECTORS + 1) * PAGE_SECTORS).min(hi);
                let i = (sec - lo) as usize;
                match &st.pages[k * rows + (sec / PAGE_SECTORS) as usize] {
                    None => {
                        // Not cached: zeros until read.
                        b.resize(b.len() + ((row_end - sec) * SECTOR) as usize, 0);
                        sec = row_end;
                    }
                    Some(p)
                        if sec % PAGE_SECTORS == 0
                            && row_end - sec == PAGE_SECTORS
                            && p.valid == 0xff =>
                    {
                        // A whole valid page at once.
                        b.extend_from_slice(&p.data);
                        kn[i..i + PAGE_SECTORS as usize].fill(true);
                        clean_known += u64::from((!p.dirty).count_ones());
                        sec = row_end;
                    }
                    Some(p) => {
                        let bit = 1u8 << (sec % PAGE_SECTORS);
                        if p.valid & bit != 0 {
                            let from = ((sec % PAGE_SECTORS) * SECTOR) as usize;
                            b.extend_from_slice(&p.data[from..from + 512]);
                            kn[i] = true;
                            if p.dirty & bit == 0 {
                                clean_known += 1;
                            }
                        } else {
                            b.resize(b.len() + 512, 0);
                        }
                        sec += 1;
                    }
                }
            }
            bufs.push(b);
        }
        let missing: u64 = known.iter().flatten().filter(|&&x| !x).count() as u64;
        if missing > 0 {
            let first_row = (lo / PAGE_SECTORS) as usize;
            let n_rows = (hi.div_ceil(PAGE_SECTORS) - lo / PAGE_SECTORS) as usize;
            c.note_misses(
                stripe,
                (first_row..first_row + n_rows).filter(|&r| {
                    let a = (r as u64 * PAGE_SECTORS).max(lo) - lo;
                    let b = ((r as u64 + 1) * PAGE_SECTORS).min(hi) - lo;
                    known
                        .iter()
                        .any(|kn| kn[a as usize..b as usize].iter().any(|&x| !x))
                }),
            );
        }
        self.bitmap_mark(base + lo, rn)?;
        let is6 = lay.q.is_some();
        let mut roles: Vec<usize> = lay.data.clone();
        roles.push(lay.p);
        roles.extend(lay.q);
        let all_readable = roles.iter().all(|&r| self.can_read(r, base + lo, rn));
        let rmw_reads: u64 =
            spans.iter().flatten().map(|(a, b)| b - a).sum::<u64>() + rn * if is6 { 2 } else { 1 };
        let mut read_secs = 0u64;
        let mut pq: Option<(Vec<u8>, Vec<u8>)> = None;
        c.drains.fetch_add(1, Ordering::Relaxed);
        let parity_gone = self.parity_gone(lay);
        if parity_gone {
            // No parity to keep: the dirty data goes out alone (the parity writes below
            // find no member), nothing is read.
            pq = Some((Vec::new(), Vec::new()));
        } else if missing == 0 {
            pq = Some(compute_parity_scratch(lay, &bufs, len));
            c.merges.fetch_add(1, Ordering::Relaxed);
        } else if all_readable {
            // Reading whole rows fills the cache for later writes: worth it when rows are
            // reused and it costs at most twice the reads of read-modify-write.
            let fill = missing <= 2 * rmw_reads && c.reuse_likely();
            let r = if rmw_reads < missing && !fill {
                read_secs = rmw_reads;
                self.cache_rmw(lay, base, lo, rn, &spans, &mut bufs, &mut known)
            } else {
                read_secs = missing;
                self.cache_rcw(lay, base, lo, &mut bufs, &mut known)
                    .map(|()| compute_parity_scratch(lay, &bufs, len))
            };
            match r {
                Ok(v) => pq = Some(v),
                Err(EngineError::Io { .. }) | Err(EngineError::Unreadable { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // P and Q, handed back to the scratch buffers once written.
        let pq = match pq {
            Some((p, q)) => ScratchBufs(vec![p, q]),
            None => {
                // Degraded (or a read failed): reconstruct what the cache does not know.
                let sd = match self.read_stripe(stripe, lay, lo, rn, false) {
                    Ok(sd) => sd,
                    Err(EngineError::Unreadable { .. })
                        if self.stripe_has_bad(lay, base + lo, rn) =>
                    {
                        // Data is lost here (bad blocks beyond the redundancy): bbl.rs
                        // writes what can be made valid, from the dirty sectors alone.
                        let mut pcs: Vec<(usize, u64, &[u8])> = Vec::new();
                        for (k, buf) in bufs.iter().enumerate() {
                            let dirty = |sec: u64| {
                                st.pages[k * rows + (sec / PAGE_SECTORS) as usize]
                                    .as_ref()
                                    .is_some_and(|p| p.dirty & (1 << (sec % PAGE_SECTORS)) != 0)
                            };
                            let mut sec = lo;
                            while sec < hi {
                                if !dirty(sec) {
                                    sec += 1;
                                    continue;
                                }
                                let mut t = sec;
                                while t < hi && dirty(t) {
                                    t += 1;
                                }
                                let (f, to) =
                                    (((sec - lo) * SECTOR) as usize, ((t - lo) * SECTOR) as usize);
                                pcs.push((k, sec, &buf[f..to]));
                                sec = t;
                            }
                        }
                        self.write_stripe_over_lost(stripe, lay, &pcs)?;
                        for k in 0..kc {
                            for row in row_range.clone() {
                                st.set_clean(k * rows + row);
                            }
                        }
                        return Ok(false);
                    }
                    Err(e) => return Err(annotate_unreadable(e, 0, 0)),
                };
                read_secs = missing;
                for k in 0..kc {
                    for (i, kn) in known[k].iter_mut().enumerate() {
                        if !*kn {
                            bufs[k][i * 512..(i + 1) * 512]
                                .copy_from_slice(&sd.data[k][i * 512..(i + 1) * 512]);
                            *kn = true;
                        }
                    }
                }
                let (p, q) = compute_parity_scratch(lay, &bufs, len);
                ScratchBufs(vec![p, q])
            }
        };
        for (k, span) in spans.iter().enumerate() {
            let Some((a, b)) = *span else {
                continue;
            };
            if parity_gone {
                // Nothing was read: a span may hold sectors the cache does not know
                // (between dirty ones), so only the runs it knows go out.
                let (a, b) = ((a - lo) as usize, (b - lo) as usize);
                let mut i = a;
                while i < b {
                    if !known[k][i] {
                        i += 1;
                        continue;
                    }
                    let mut j = i;
                    while j < b && known[k][j] {
                        j += 1;
                    }
                    self.member_write(
                        lay.data[k],
                        base + lo + i as u64,
                        &bufs[k][i * 512..j * 512],
                    )?;
                    i = j;
                }
                continue;
            }
            let from = ((a - lo) * SECTOR) as usize;
            let to = ((b - lo) * SECTOR) as usize;
            self.member_write(lay.data[k], base + a, &bufs[k][from..to])?;
        }
        self.member_write(lay.p, base + lo, &pq[0])?;
        if let Some(qr) = lay.q {
            self.member_write(qr, base + lo, &pq[1])?;
        }
        drop(pq);
        c.hits
            .fetch_add(clean_known.div_ceil(PAGE_SECTORS), Ordering::Relaxed);
        c.saved.fetch_add(
            if missing == 0 {
                (rn * kc as u64).div_ceil(PAGE_SECTORS)
            } else {
                clean_known.div_ceil(PAGE_SECTORS)
            },
            Ordering::Relaxed,
        );
        c.misses
            .fetch_add(read_secs.div_ceil(PAGE_SECTORS), Ordering::Relaxed);
        // Everything is on the members now; keep what was learnt for later writes.
        for k in 0..kc {
            for sec in lo..hi {
                let i = (sec - lo) as usize;
                let idx = k * rows + (sec / PAGE_SECTORS) as usize;
                let bit = 1u8 << (sec % PAGE_SECTORS);
                if !known[k][i] {
                    continue;
                }
                let pg = c.page(st, idx);
                if pg.valid & bit == 0 {
                    let to = ((sec % PAGE_SECTORS) * SECTOR) as usize;
                    pg.data[to..to + 512].copy_from_slice(&bufs[k][i * 512..(i + 1) * 512]);
                    pg.valid |= bit;
                }
            }
        }
        for k in 0..kc {
            for row in row_range.clone() {
                st.set_clean(k * rows + row);
            }
        }
        Ok(missing == 0)
    }

    /// Read-modify-write of the dirty spans: old data and old parity from the members.
    #[allow(clippy::too_many_arguments)]
    fn cache_rmw(
        &self,
        lay: &StripeLayout,
        base: u64,
        lo: u64,
        rn: u64,
        spans: &[Option<(u64, u64)>],
        bufs: &mut [Vec<u8>],
        known: &mut [Vec<bool>],
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let (mut p, mut q) = self.read_old_parity(lay, base + lo, rn)?;
        for (k, span) in spans.iter().enumerate() {
            let Some((a, b)) = *span else {
                continue;
            };
            let from = ((a - lo) * SECTOR) as usize;
            let to = ((b - lo) * SECTOR) as usize;
            let mut old = vec![0u8; to - from];
            self.member_read(lay.data[k], base + a, &mut old)?;
            // Sectors of the span the cache does not know are unchanged: the old data.
            for i in 0..(b - a) as usize {
                let j = (a - lo) as usize + i;
                if !known[k][j] {
                    bufs[k][j * 512..(j + 1) * 512].copy_from_slice(&old[i * 512..(i + 1) * 512]);
                    known[k][j] = true;
                }
            }
            parity::xor_into(&mut old, &bufs[k][from..to]); // old := delta
            parity::xor_into(&mut p[from..to], &old);
            if lay.q.is_some() {
                let coef = parity::gf::exp(lay.slot[k]);
                parity::mul_acc(&mut q[from..to], &old, coef);
            }
        }
        Ok((p, q))
    }

    /// Reconstruct-write: read what the cache does not know of every data block.
    fn cache_rcw(
        &self,
        lay: &StripeLayout,
        base: u64,
        lo: u64,
        bufs: &mut [Vec<u8>],
        known: &mut [Vec<bool>],
    ) -> Result<()> {
        for k in 0..bufs.len() {
            let mut i = 0;
            let n = known[k].len();
            while i < n {
                if known[k][i] {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j < n && !known[k][j] {
                    j += 1;
                }
                self.member_read(
                    lay.data[k],
                    base + lo + i as u64,
                    &mut bufs[k][i * 512..j * 512],
                )?;
                for kn in &mut known[k][i..j] {
                    *kn = true;
                }
                i = j;
            }
        }
        Ok(())
    }

    /// Members holding readable copies of `n` sectors at `copies`, with their load.
    fn candidates(&self, copies: &[(usize, u64)], n: u64) -> Vec<Candidate> {
        let now = balance::now_ns();
        copies
            .iter()
            .filter_map(|&(role, dsec)| {
                let m = self.member(role)?;
                m.readable(dsec, n).then(|| Candidate {
                    role,
                    cost: m.load.cost_at(now),
                    idle: m.load.idle(),
                })
            })
            .collect()
    }

    /// The copies of a mirrored run in the order to try them, `off` sectors into the run:
    /// `first` (if given), then the readable ones cheapest first, then the rest (which
    /// only report why they could not serve).
    fn try_order(
        &self,
        copies: &[(usize, u64)],
        cands: &[Candidate],
        first: Option<usize>,
        off: u64,
    ) -> Vec<(usize, u64)> {
        let mut roles: Vec<usize> = first.into_iter().collect();
        for r in balance::order(cands)
            .into_iter()
            .chain(copies.iter().map(|c| c.0))
        {
            if !roles.contains(&r) {
                roles.push(r);
            }
        }
        roles
            .into_iter()
            .filter_map(|r| copies.iter().find(|c| c.0 == r).map(|&(r, d)| (r, d + off)))
            .collect()
    }

    /// Read mirrored data from the first copy in `order` that serves it; copies that
    /// failed with an IO error are rewritten with the good data (md's read-error repair).
    fn read_copies(&self, s: u64, buf: &mut [u8], order: &[(usize, u64)]) -> Result<()> {
        let n = buf.len() as u64 / SECTOR;
        let mut errs = Vec::new();
        let mut failed_copies = Vec::new();
        for &(role, dsec) in order {
            if !self.can_read(role, dsec, n) {
                errs.push(format!("role {role} unavailable"));
                continue;
            }
            match self.member_read(role, dsec, buf) {
                Ok(()) => {
                    for (r, d) in failed_copies {
                        self.repair_read_error(r, d, buf);
                    }
                    return Ok(());
                }
                Err(e) => {
                    if matches!(e, EngineError::Io { .. }) {
                        failed_copies.push((role, dsec));
                    }
                    errs.push(e.to_string())
                }
            }
        }
        Err(EngineError::Unreadable {
            offset: s * SECTOR,
            end: (s + n) * SECTOR,
            why: errs.join("; "),
        })
    }

    /// Read whole sectors of a RAID1/RAID10 array. A large read is spread over the idle
    /// members holding copies, in proportion to their speed (`balance::split`), and each
    /// member reads its pieces in its own thread. When every part of the read has its
    /// copies on the same members (RAID1, two-member RAID10) the read is cut into one
    /// contiguous segment per member; otherwise each mapping run is shared separately.
    fn read_mirrored(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        if total < balance::SPLIT_MIN_SECTORS {
            return self.read_serial(s, buf);
        }
        // Mapping runs: (array sector, sectors, copies, readable candidates).
        type Run = (u64, u64, Vec<(usize, u64)>, Vec<Candidate>);
        let mut runs: Vec<Run> = Vec::new();
        let mut done = 0;
        while done < total {
            let cur = s + done;
            let p = self.locate(cur)?;
            let n = p.run.min(total - done);
            let cands = self.candidates(&p.copies, n);
            runs.push((cur, n, p.copies, cands));
            done += n;
        }
        let roles_of = |c: &[Candidate]| {
            let mut v: Vec<usize> = c.iter().map(|c| c.role).collect();
            v.sort_unstable();
            v
        };
        let same_members = runs
            .windows(2)
            .all(|w| roles_of(&w[0].3) == roles_of(&w[1].3));
        // The plan: (array sector, sectors, copies to try), in array order.
        // Pieces that follow each other both in the array and on their first copy's
        // member are merged into one extent, read with one member IO.
        let mut plan: Vec<Extent> = Vec::new();
        let mut push_run = |run: &Run, from: u64, len: u64, first: Option<usize>| {
            let (at, _, copies, cands) = run;
            let order = self.try_order(copies, cands, first, from - at);
            if let Some(last) = plan.last_mut() {
                let follows = last.pieces.last().is_some_and(|(pat, plen, porder)| {
                    pat + plen == from
                        && matches!((porder.first(), order.first()),
                            (Some(&(r0, d0)), Some(&(r1, d1))) if r0 == r1 && d0 + plen == d1)
                });
                if follows {
                    last.len += len;
                    last.pieces.push((from, len, order));
                    return;
                }
            }
            plan.push(Extent {
                len,
                pieces: vec![(from, len, order)],
            });
        };
        if same_members {
            // One contiguous segment per member, each over as many runs as it covers.
            // A cut near a run boundary moves onto it: a member then reads whole runs,
            // not an extra short piece (each member IO costs a device latency).
            let (_, _, _, cands) = &runs[0];
            let mut segments = balance::split(s, total, cands);
            if segments.is_empty() {
                segments.push((usize::MAX, total));
            }
            let mut cuts: Vec<u64> = segments
                .iter()
                .scan(s, |at, &(_, len)| {
                    *at += len;
                    Some(*at)
                })
                .collect();
            let slack = total / 8;
            let last = cuts.len() - 1;
            for c in &mut cuts[..last] {
                if let Some(b) = runs[1..]
                    .iter()
                    .map(|r| r.0)
                    .min_by_key(|b| b.abs_diff(*c))
                    .filter(|b| b.abs_diff(*c) <= slack)
                {
                    *c = b;
                }
            }
            let mut ri = 0;
            let mut at = s;
            for (&(role, _), &end) in segments.iter().zip(&cuts) {
                while at < end {
                    let run = &runs[ri];
                    let run_end = run.0 + run.1;
                    let piece = run_end.min(end) - at;
                    push_run(run, at, piece, (role != usize::MAX).then_some(role));
                    at += piece;
                    if at == run_end {
                        ri += 1;
                    }
                }
            }
        } else {
            // Runs on different members: a large run is shared by its idle copies, a
            // small one goes whole to the copy with the least work planned so far.
            let mut planned = vec![0u64; self.geo.raid_disks];
            for run in &runs {
                let (start, n, _, cands) = run;
                let pieces = if *n >= balance::SPLIT_MIN_SECTORS {
                    balance::split(*start, *n, cands)
                } else {
                    cands
                        .iter()
                        .min_by_key(|c| {
                            let done = planned.get(c.role).copied().unwrap_or(0);
                            c.cost.saturating_mul(done + n)
                        })
                        .map(|c| vec![(c.role, *n)])
                        .unwrap_or_default()
                };
                let mut at = *start;
                for (role, len) in pieces {
                    push_run(run, at, len, Some(role));
                    if let Some(p) = planned.get_mut(role) {
                        *p += len;
                    }
                    at += len;
                }
                if at == *start {
                    push_run(run, at, *n, None);
                }
            }
        }
        // One worker per member, reading its extents in array order.
        type Job<'b> = (&'b mut [u8], Extent);
        let mut per_member: Vec<(usize, Vec<Job<'_>>)> = Vec::new();
        let mut rest = buf;
        for ext in plan {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut((ext.len * SECTOR) as usize);
            rest = tail;
            let role = ext
                .pieces
                .first()
                .and_then(|p| p.2.first())
                .map_or(usize::MAX, |c| c.0);
            match per_member.iter_mut().find(|(r, _)| *r == role) {
                Some((_, jobs)) => jobs.push((piece, ext)),
                None => per_member.push((role, vec![(piece, ext)])),
            }
        }
        let read_jobs = |jobs: Vec<Job<'_>>| -> Result<()> {
            for (buf, ext) in jobs {
                if let [(at, _, order)] = ext.pieces.as_slice() {
                    self.read_copies(*at, buf, order)?;
                    continue;
                }
                // Several pieces in one member IO; if that fails, piece by piece with
                // each piece's own fallback copies (and read-error repair).
                if let Some(&(role, dsec)) = ext.pieces.first().and_then(|p| p.2.first()) {
                    if self.can_read(role, dsec, ext.len)
                        && self.member_read(role, dsec, buf).is_ok()
                    {
                        continue;
                    }
                }
                let mut rest = buf;
                for (at, len, order) in &ext.pieces {
                    let (piece, tail) =
                        std::mem::take(&mut rest).split_at_mut((len * SECTOR) as usize);
                    rest = tail;
                    self.read_copies(*at, piece, order)?;
                }
            }
            Ok(())
        };
        if per_member.len() == 1 {
            let (_, jobs) = per_member.remove(0);
            return read_jobs(jobs);
        }
        self.run_parallel(
            per_member
                .into_iter()
                .map(|(role, jobs)| (role as u64, jobs))
                .collect(),
            |_, jobs| read_jobs(jobs),
        )
    }

    /// md's answer to a read error: the data was recovered from redundancy, so write it
    /// back to the member (the drive remaps the sector). A member that keeps failing, or
    /// whose rewrite fails, is failed.
    fn repair_read_error(&self, role: usize, dsec: u64, good: &[u8]) {
        let Some(m) = self.member(role) else {
            return;
        };
        let errors = m.read_errors.fetch_add(1, Ordering::AcqRel) + 1;
        let device = m.dev.name().to_string();
        if !self.writable {
            return;
        }
        if errors > MAX_CORRECTED_READ_ERRORS {
            let _ = self.fail_member(role, &format!("{errors} read errors"));
            return;
        }
        match m.dev.write_at(good, (m.data_offset + dsec) * SECTOR) {
            Ok(()) => self.emit(ArrayEvent::ReadErrorCorrected {
                role,
                device,
                sector: m.data_offset + dsec,
                sectors: good.len() as u64 / SECTOR,
            }),
            Err(e) => {
                // md: a member with a bad-block log gets a bad block instead.
                let n = good.len() as u64 / SECTOR;
                if !self.bad_block_instead_of_fail(role, &m, dsec, n) {
                    let _ = self.fail_member(
                        role,
                        &format!("rewriting a sector after a read error failed: {e}"),
                    );
                }
            }
        }
    }

    /// Receive the array's events (member failed, read error corrected, rebuild...).
    pub fn subscribe(&self) -> std::sync::mpsc::Receiver<ArrayEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        lock(&self.listeners).push(tx);
        rx
    }

    pub(crate) fn emit(&self, e: ArrayEvent) {
        lock(&self.listeners).retain(|tx| tx.send(e.clone()).is_ok());
    }

    pub(crate) fn stripe_layout(&self, stripe: u64) -> Result<StripeLayout> {
        self.geo
            .stripe(stripe)
            .ok_or_else(|| EngineError::Invalid(format!("stripe {stripe} out of range")))
    }

    /// Read the blocks of `stripe` over chunk sectors `[a, a+n)`, reconstructing what is
    /// missing. With `need_parity`, missing P/Q are recomputed too.
    pub(crate) fn read_stripe(
        &self,
        stripe: u64,
        lay: &StripeLayout,
        a: u64,
        n: u64,
        need_parity: bool,
    ) -> Result<StripeData> {
        let c = self.geo.chunk_sectors;
        let dsec = stripe * c + a;
        let len = (n * SECTOR) as usize;
        let kc = lay.data.len();
        let mut data = Vec::with_capacity(kc);
        let mut missing = Vec::new();
        let mut why = Vec::new();
        for (k, &role) in lay.data.iter().enumerate() {
            let mut b = vec![0u8; len];
            let ok = self.can_read(role, dsec, n) && {
                match self.member_read(role, dsec, &mut b) {
                    Ok(()) => true,
                    Err(e) => {
                        why.push(e.to_string());
                        false
                    }
                }
            };
            if !ok {
                missing.push(k);
            }
            data.push(b);
        }
        let read_par = |role: usize| -> Option<Vec<u8>> {
            let mut b = vec![0u8; len];
            if self.can_read(role, dsec, n) && self.member_read(role, dsec, &mut b).is_ok() {
                Some(b)
            } else {
                None
            }
        };
        let p = read_par(lay.p);
        let q = match lay.q {
            Some(qr) => read_par(qr),
            None => None,
        };
        let is6 = lay.q.is_some();
        let fail = |what: &str, why: &[String]| EngineError::Unreadable {
            offset: 0,
            end: 0,
            why: format!(
                "stripe {stripe}: {what}{}{}",
                if why.is_empty() { "" } else { ": " },
                why.join("; ")
            ),
        };
        match (missing.len(), is6) {
            (0, _) => {}
            (1, false) => {
                let Some(p) = &p else {
                    return Err(fail("a data block and parity are both unavailable", &why));
                };
                let k = missing[0];
                let mut out = p.clone();
                for (j, d) in data.iter().enumerate() {
                    if j != k {
                        parity::xor_into(&mut out, d);
                    }
                }
                data[k] = out;
            }
            (1, true) => {
                let k = missing[0];
                if let Some(p) = &p {
                    let mut out = p.clone();
                    for (j, d) in data.iter().enumerate() {
                        if j != k {
                            parity::xor_into(&mut out, d);
                        }
                    }
                    data[k] = out;
                } else if let Some(q) = &q {
                    let sk = lay.slot[k];
                    let mut slots = to_slots(lay, &mut data, len);
                    {
                        let mut refs: Vec<&mut [u8]> =
                            slots.iter_mut().map(|v| v.as_mut_slice()).collect();
                        parity::recover_one_q(&mut refs, sk, q);
                    }
                    from_slots(lay, &mut data, &mut slots);
                } else {
                    return Err(fail("a data block, P and Q are all unavailable", &why));
                }
            }
            (2, true) => {
                let (Some(p), Some(q)) = (&p, &q) else {
                    return Err(fail(
                        "two data blocks and a parity block are unavailable",
                        &why,
                    ));
                };
                let (sa, sb) = (lay.slot[missing[0]], lay.slot[missing[1]]);
                let mut slots = to_slots(lay, &mut data, len);
                {
                    let mut refs: Vec<&mut [u8]> =
                        slots.iter_mut().map(|v| v.as_mut_slice()).collect();
                    parity::recover_two(&mut refs, sa.min(sb), sa.max(sb), p, q);
                }
                from_slots(lay, &mut data, &mut slots);
            }
            (m, _) => {
                return Err(fail(&format!("{m} data blocks are unavailable"), &why));
            }
        }
        let (p, q) = if need_parity && (p.is_none() || (is6 && q.is_none())) {
            let (np, nq) = compute_parity(lay, &data, len);
            (
                p.unwrap_or(np),
                if is6 { Some(q.unwrap_or(nq)) } else { None },
            )
        } else {
            (p.unwrap_or_else(|| vec![0u8; len]), q)
        };
        Ok(StripeData { data, p, q })
    }

    /// Write whole sectors starting at array sector `s`.
    pub fn write_sectors(&self, s: u64, buf: &[u8]) -> Result<()> {
        let _gate = match self.gate.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        self.ensure_dirty()?;
        match self.checksums() {
            None => self.write_split(s, buf),
            Some(cs) => {
                cs.before_write(s * SECTOR, buf.len() as u64)?;
                let r = self.write_split(s, buf);
                cs.after_write(self, s * SECTOR, buf, r.is_ok())?;
                r
            }
        }
    }

    fn write_split(&self, s: u64, buf: &[u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        if let Some(unit) = self.split_unit(total) {
            let first = (unit - s % unit).min(total);
            let (head, rest) = buf.split_at((first * SECTOR) as usize);
            let mut jobs = vec![(s, head)];
            let mut off = s + first;
            for piece in rest.chunks((unit * SECTOR) as usize) {
                let n = piece.len() as u64 / SECTOR;
                jobs.push((off, piece));
                off += n;
            }
            return self.run_parallel(jobs, |at, p| self.write_serial(at, p));
        }
        self.write_serial(s, buf)
    }

    fn write_serial(&self, s: u64, buf: &[u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        match self.geo.level {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => self.write_parity(s, buf),
            _ => {
                let mut done = 0;
                while done < total {
                    let cur = s + done;
                    let p = self.locate(cur)?;
                    let n = p.run.min(total - done);
                    let b = &buf[(done * SECTOR) as usize..((done + n) * SECTOR) as usize];
                    if matches!(self.geo.level, Level::Raid1 | Level::Raid10) {
                        self.bitmap_mark(cur, n)?;
                    }
                    let mut ok = 0;
                    for &(role, dsec) in &p.copies {
                        if self.member_write(role, dsec, b)? {
                            ok += 1;
                        }
                    }
                    if ok == 0 {
                        return Err(EngineError::WriteFailed {
                            offset: cur * SECTOR,
                            end: (cur + n) * SECTOR,
                            why: "no member holding this range could be written".into(),
                        });
                    }
                    done += n;
                }
                Ok(())
            }
        }
    }

    fn bitmap_mark(&self, start: u64, n: u64) -> Result<()> {
        if let Some(bm) = self.bm().as_ref() {
            let mut b = lock(bm);
            if b.mark(start, n) {
                let live = self.live_devices();
                b.write_bits(self, &live)?;
            }
        }
        Ok(())
    }

    fn write_parity(&self, s: u64, buf: &[u8]) -> Result<()> {
        let c = self.geo.chunk_sectors;
        let kc = self.geo.data_disks() as u64;
        let stripe_sectors = c * kc;
        let total = buf.len() as u64 / SECTOR;
        let mut done = 0;
        while done < total {
            let cur = s + done;
            let stripe = cur / stripe_sectors;
            let stripe_end = (stripe + 1) * stripe_sectors;
            let n = (stripe_end - cur).min(total - done);
            let mut pieces = Vec::new();
            let mut off = 0;
            while off < n {
                let o = cur + off - stripe * stripe_sectors;
                let k = (o / c) as usize;
                let a = o % c;
                let len = (c - a).min(n - off);
                let from = ((done + off) * SECTOR) as usize;
                pieces.push(Piece {
                    k,
                    a,
                    n: len,
                    data: &buf[from..from + (len * SECTOR) as usize],
                });
                off += len;
            }
            self.write_stripe(stripe, &pieces)?;
            done += n;
        }
        Ok(())
    }

    fn write_stripe(&self, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        match &self.cache {
            Some(c) => self.cache_write(c, stripe, pieces),
            None => self.write_stripe_direct(stripe, pieces),
        }
    }

    fn write_stripe_direct(&self, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        let _g = self.locks.lock(stripe);
        self.write_stripe_locked(stripe, pieces)
    }

    /// `write_stripe_direct` with the stripe's IO lock held by the caller.
    fn write_stripe_locked(&self, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        let c = self.geo.chunk_sectors;
        let lay = self.stripe_layout(stripe)?;
        let kc = lay.data.len();
        let lo = pieces.iter().map(|p| p.a).min().unwrap_or(0);
        let hi = pieces.iter().map(|p| p.a + p.n).max().unwrap_or(0);
        let rn = hi - lo;
        let rlen = (rn * SECTOR) as usize;
        let base = stripe * c;
        self.bitmap_mark(base + lo, rn)?;
        let is6 = lay.q.is_some();
        let full = pieces.len() == kc && pieces.iter().all(|p| p.a == 0 && p.n == c);
        let mut roles: Vec<usize> = lay.data.clone();
        roles.push(lay.p);
        if let Some(q) = lay.q {
            roles.push(q);
        }
        let all_readable = roles.iter().all(|&r| self.can_read(r, base + lo, rn));

        if full {
            let data: Vec<&[u8]> = pieces.iter().map(|p| p.data).collect();
            let len = (c * SECTOR) as usize;
            // P/Q go into reused scratch buffers: no allocation, zeroing or fresh pages
            // per stripe (the generators overwrite every byte).
            let mut p = scratch_take();
            let mut q = scratch_take();
            p.resize(len, 0);
            q.resize(if is6 { len } else { 0 }, 0);
            // Parity is generated and the stripe written a slice at a time, so the data and
            // P/Q the kernel copies into the members' page cache are still in this core's
            // cache (about 10% more full-stripe bandwidth on tmpfs than whole chunks).
            let slice = full_stripe_slice(roles.len(), len);
            let written: Result<()> = (|| {
                let mut off = 0;
                while off < len {
                    let n = slice.min(len - off);
                    let ds: Vec<&[u8]> = data.iter().map(|d| &d[off..off + n]).collect();
                    let qn = if is6 { n } else { 0 };
                    parity_into(&lay, &ds, &mut p[..n], &mut q[..qn]);
                    let sec = base + (off as u64) / SECTOR;
                    self.member_write(lay.p, sec, &p[..n])?;
                    if let Some(qr) = lay.q {
                        self.member_write(qr, sec, &q[..n])?;
                    }
                    for pc in pieces {
                        self.member_write(lay.data[pc.k], sec, &pc.data[off..off + n])?;
                    }
                    off += n;
                }
                Ok(())
            })();
            scratch_put(p);
            scratch_put(q);
            written?;
            return self.check_still_runs(stripe);
        }

        if self.parity_gone(&lay) {
            // Every parity member of this stripe is gone: there is no parity to keep, so
            // the data is written alone, as md does, with no reads (a stripe whose other
            // data cannot be read still takes writes).
            for pc in pieces {
                self.member_write(lay.data[pc.k], base + pc.a, pc.data)?;
            }
            return self.check_still_runs(stripe);
        }

        if all_readable {
            // Count sectors to read for read-modify-write vs reconstruct-write.
            let written: u64 = pieces.iter().map(|p| p.n).sum();
            let rmw = written + rn * if is6 { 2 } else { 1 };
            let rcw = rn * kc as u64 - written;
            let done = if rmw < rcw {
                self.rmw(&lay, base, lo, rn, pieces)
            } else {
                self.rcw(&lay, base, lo, rn, pieces)
            };
            match done {
                Ok(()) => return self.check_still_runs(stripe),
                Err(EngineError::Io { .. }) | Err(EngineError::Unreadable { .. }) => {
                    // fall through to the degraded path, which reconstructs
                }
                Err(e) => return Err(e),
            }
        }

        // Degraded (or a read failed): reconstruct the row range, overlay, recompute.
        let mut sd = match self.read_stripe(stripe, &lay, lo, rn, false) {
            Ok(sd) => sd,
            Err(EngineError::Unreadable { .. }) if self.stripe_has_bad(&lay, base + lo, rn) => {
                // Data is lost in this range (bad blocks beyond the redundancy): write
                // what can be made valid, row by row (bbl.rs).
                let pcs: Vec<(usize, u64, &[u8])> =
                    pieces.iter().map(|p| (p.k, p.a, p.data)).collect();
                self.write_stripe_over_lost(stripe, &lay, &pcs)?;
                return self.check_still_runs(stripe);
            }
            Err(e) => return Err(annotate_unreadable(e, 0, 0)),
        };
        for pc in pieces {
            let off = ((pc.a - lo) * SECTOR) as usize;
            sd.data[pc.k][off..off + pc.data.len()].copy_from_slice(pc.data);
        }
        let (p, q) = compute_parity(&lay, &sd.data, rlen);
        for pc in pieces {
            self.member_write(lay.data[pc.k], base + pc.a, pc.data)?;
        }
        self.member_write(lay.p, base + lo, &p)?;
        if let Some(qr) = lay.q {
            self.member_write(qr, base + lo, &q)?;
        }
        self.check_still_runs(stripe)
    }

    fn rmw(
        &self,
        lay: &StripeLayout,
        base: u64,
        lo: u64,
        rn: u64,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let (mut p, mut q) = self.read_old_parity(lay, base + lo, rn)?;
        let mut olds = Vec::with_capacity(pieces.len());
        for pc in pieces {
            let mut old = vec![0u8; pc.data.len()];
            self.member_read(lay.data[pc.k], base + pc.a, &mut old)?;
            olds.push(old);
        }
        for (pc, old) in pieces.iter().zip(olds.iter_mut()) {
            parity::xor_into(old, pc.data); // old := delta
            let off = ((pc.a - lo) * SECTOR) as usize;
            parity::xor_into(&mut p[off..off + old.len()], old);
            if lay.q.is_some() {
                let coef = parity::gf::exp(lay.slot[pc.k]);
                parity::mul_acc(&mut q[off..off + old.len()], old, coef);
            }
        }
        for pc in pieces {
            self.member_write(lay.data[pc.k], base + pc.a, pc.data)?;
        }
        self.member_write(lay.p, base + lo, &p)?;
        if let Some(qr) = lay.q {
            self.member_write(qr, base + lo, &q)?;
        }
        Ok(())
    }

    fn rcw(
        &self,
        lay: &StripeLayout,
        base: u64,
        lo: u64,
        rn: u64,
        pieces: &[Piece<'_>],
    ) -> Result<()> {
        let rlen = (rn * SECTOR) as usize;
        let kc = lay.data.len();
        let mut data: Vec<Vec<u8>> = Vec::with_capacity(kc);
        for k in 0..kc {
            let mut b = vec![0u8; rlen];
            let mine: Vec<&Piece<'_>> = pieces.iter().filter(|p| p.k == k).collect();
            // Read the parts of [lo, hi) not covered by this block's piece.
            let (ca, cb) = match mine.first() {
                Some(p) => (p.a, p.a + p.n),
                None => (lo, lo),
            };
            if ca > lo {
                self.member_read(
                    lay.data[k],
                    base + lo,
                    &mut b[..((ca - lo) * SECTOR) as usize],
                )?;
            }
            if cb < lo + rn {
                let from = ((cb - lo) * SECTOR) as usize;
                self.member_read(lay.data[k], base + cb, &mut b[from..])?;
            }
            if let Some(p) = mine.first() {
                let off = ((p.a - lo) * SECTOR) as usize;
                b[off..off + p.data.len()].copy_from_slice(p.data);
            }
            data.push(b);
        }
        let (p, q) = compute_parity(lay, &data, rlen);
        for pc in pieces {
            self.member_write(lay.data[pc.k], base + pc.a, pc.data)?;
        }
        self.member_write(lay.p, base + lo, &p)?;
        if let Some(qr) = lay.q {
            self.member_write(qr, base + lo, &q)?;
        }
        Ok(())
    }

    /// After member failures during a write, make sure the stripe is still recoverable.
    /// The old P (and Q) of `n` sectors from member sector `dsec` of a stripe, for
    /// read-modify-write (Q empty without one).
    fn read_old_parity(&self, lay: &StripeLayout, dsec: u64, n: u64) -> Result<(Vec<u8>, Vec<u8>)> {
        let len = (n * SECTOR) as usize;
        let mut p = vec![0u8; len];
        self.member_read(lay.p, dsec, &mut p)?;
        let mut q = vec![0u8; if lay.q.is_some() { len } else { 0 }];
        if let Some(qr) = lay.q {
            self.member_read(qr, dsec, &mut q)?;
        }
        Ok((p, q))
    }

    fn check_still_runs(&self, stripe: u64) -> Result<()> {
        let missing = self.missing_roles().len();
        let tolerated = match self.geo.level {
            Level::Raid4 | Level::Raid5 => 1,
            Level::Raid6 => 2,
            _ => 0,
        };
        if missing > tolerated {
            return Err(EngineError::WriteFailed {
                offset: 0,
                end: 0,
                why: format!(
                    "stripe {stripe}: {missing} members have failed, more than {} can survive",
                    self.geo.level
                ),
            });
        }
        Ok(())
    }

    /// Write raw parity/data blocks for a stripe row range (used by sync/repair).
    pub(crate) fn write_block(&self, role: usize, dsec: u64, buf: &[u8]) -> Result<bool> {
        self.member_write(role, dsec, buf)
    }

    /// Read raw blocks (used by sync/check).
    pub(crate) fn read_block(&self, role: usize, dsec: u64, buf: &mut [u8]) -> Result<()> {
        self.member_read(role, dsec, buf)
    }

    /// Walk a mirrored (RAID1/10) member's data sectors `[d, d + n)` in runs that map
    /// contiguously to array sectors: `f(data_sector, array_sector, placement, run)`.
    /// Sectors that hold no array data are skipped. Stops early (Ok(false)) when `f` does.
    pub(crate) fn mirror_runs(
        &self,
        role: usize,
        d: u64,
        n: u64,
        mut f: impl FnMut(u64, u64, &raidkit_layout::Placement, u64) -> Result<bool>,
    ) -> Result<bool> {
        let mut done = 0;
        while done < n {
            let dsec = d + done;
            let Some(s) = self.geo.reverse(role, dsec) else {
                done += 1;
                continue;
            };
            let Some(p) = self.geo.locate(s) else {
                done += 1;
                continue;
            };
            let run = p.run.min(n - done);
            if !f(dsec, s, &p, run)? {
                return Ok(false);
            }
            done += run;
        }
        Ok(true)
    }

    /// Fill `buf` (`run` sectors of placement `p`) from a copy other than `role`'s. Copies
    /// that were readable in principle but failed are pushed to `failed`. False if no
    /// other copy could supply it.
    pub(crate) fn read_other_copy(
        &self,
        role: usize,
        p: &raidkit_layout::Placement,
        run: u64,
        buf: &mut [u8],
        failed: &mut Vec<(usize, u64)>,
    ) -> bool {
        p.copies.iter().any(|&(r, d)| {
            if r == role || !self.readable(r, d, run) {
                return false;
            }
            let ok = self.read_block(r, d, buf).is_ok();
            if !ok {
                failed.push((r, d));
            }
            ok
        })
    }

    /// Can this role be read over this range right now?
    pub(crate) fn readable(&self, role: usize, dsec: u64, n: u64) -> bool {
        self.can_read(role, dsec, n)
    }

    /// Is a working (writable) member present in this role?
    pub(crate) fn present(&self, role: usize) -> bool {
        self.member(role).is_some()
    }

    /// True if the member in `role` is a file hole over the data range (reads as zeros).
    pub(crate) fn member_hole(&self, role: usize, dsec: u64, n: u64) -> bool {
        self.member(role)
            .is_some_and(|m| m.dev.is_hole((m.data_offset + dsec) * SECTOR, n * SECTOR))
    }

    /// Lock a stripe for direct member IO (sync, rebuild): held writes of the stripe are
    /// written out first and its cached pages dropped, so members and cache agree.
    pub(crate) fn lock_stripe(&self, stripe: u64) -> impl Drop + '_ {
        if let Some(c) = &self.cache {
            if let Some(e) = c.get(stripe) {
                let mut st = lock(&e.st);
                if !st.dead {
                    if st.is_dirty() {
                        // A failure is recorded for the next flush.
                        let _ = self.cache_drain(c, &e, &mut st);
                    }
                    c.remove(&e, &mut st);
                }
            }
        }
        self.locks.lock(stripe)
    }

    pub(crate) fn set_resync_done(&self) {
        lock(&self.meta).resync_from = MAX_SECTOR;
    }
}

/// True if the cache holds a page (of any validity) that `pieces` write into.
fn touches_cached(c: &StripeCache, st: &EntryState, pieces: &[Piece<'_>]) -> bool {
    if st.alloc == 0 {
        return false;
    }
    pieces.iter().any(|p| {
        let (r0, r1) = (p.a / PAGE_SECTORS, (p.a + p.n).div_ceil(PAGE_SECTORS));
        (r0..r1).any(|r| {
            st.pages
                .get(p.k * c.rows + r as usize)
                .is_some_and(Option::is_some)
        })
    })
}

/// Sector bits `[first, first + n)` of a page.
fn sector_bits(first: u64, n: u64) -> u8 {
    (((1u16 << n) - 1) << first) as u8
}

/// Does the cache hold data block `k` over chunk sectors `[a, a + n)`: (all, any)?
fn cached_cover(c: &StripeCache, st: &EntryState, k: usize, a: u64, n: u64) -> (bool, bool) {
    let (mut all, mut any) = (true, false);
    let mut sec = a;
    while sec < a + n {
        let in_page = sec % PAGE_SECTORS;
        let m = (PAGE_SECTORS - in_page).min(a + n - sec);
        let bits = sector_bits(in_page, m);
        let v = st
            .pages
            .get(k * c.rows + (sec / PAGE_SECTORS) as usize)
            .and_then(Option::as_ref)
            .map_or(0, |p| p.valid & bits);
        all &= v == bits;
        any |= v != 0;
        sec += m;
    }
    (all, any)
}

/// Copy the valid cached sectors of data block `k` from chunk sector `a` over `buf`.
fn copy_from_cache(c: &StripeCache, st: &EntryState, k: usize, a: u64, buf: &mut [u8]) {
    let n = buf.len() as u64 / SECTOR;
    for sec in a..a + n {
        if let Some(Some(p)) = st.pages.get(k * c.rows + (sec / PAGE_SECTORS) as usize) {
            if p.valid & (1 << (sec % PAGE_SECTORS)) != 0 {
                let from = ((sec % PAGE_SECTORS) * SECTOR) as usize;
                let to = ((sec - a) * SECTOR) as usize;
                buf[to..to + 512].copy_from_slice(&p.data[from..from + 512]);
            }
        }
    }
}

/// Is every sector of every data block known over the rows holding dirty data (so the
/// stripe can be written without reading the members)?
fn cache_complete(c: &StripeCache, st: &EntryState) -> bool {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for k in 0..c.kc {
        for row in st.rows_used() {
            if st.pages[k * c.rows + row]
                .as_ref()
                .is_some_and(|p| p.dirty != 0)
            {
                lo = lo.min(row);
                hi = hi.max(row + 1);
            }
        }
    }
    if lo >= hi {
        return false;
    }
    (0..c.kc).all(|k| {
        (lo..hi).all(|row| {
            st.pages[k * c.rows + row]
                .as_ref()
                .is_some_and(|p| p.valid == 0xff)
        })
    })
}

/// One piece of a mirrored read: array sector, sectors, `(role, data sector)` copies in
/// the order to try them.
type MirrorPiece = (u64, u64, Vec<(usize, u64)>);

/// Consecutive pieces of a mirrored read that one member IO can serve (their first copies
/// are adjacent on one member).
struct Extent {
    len: u64,
    pieces: Vec<MirrorPiece>,
}

struct Piece<'a> {
    k: usize,
    a: u64,
    n: u64,
    data: &'a [u8],
}

fn annotate_unreadable(e: EngineError, offset: u64, end: u64) -> EngineError {
    match e {
        EngineError::Unreadable { why, .. } if end > 0 => {
            EngineError::Unreadable { offset, end, why }
        }
        e => e,
    }
}

/// Move data blocks into syndrome-slot order (zero blocks for unused DDF slots).
fn to_slots(lay: &StripeLayout, data: &mut [Vec<u8>], len: usize) -> Vec<Vec<u8>> {
    let mut slots: Vec<Vec<u8>> = vec![Vec::new(); lay.syndrome_width];
    for (k, d) in data.iter_mut().enumerate() {
        slots[lay.slot[k]] = std::mem::take(d);
    }
    for s in slots.iter_mut() {
        if s.is_empty() {
            *s = vec![0u8; len];
        }
    }
    slots
}

fn from_slots(lay: &StripeLayout, data: &mut [Vec<u8>], slots: &mut [Vec<u8>]) {
    for (k, d) in data.iter_mut().enumerate() {
        *d = std::mem::take(&mut slots[lay.slot[k]]);
    }
}

/// P (and Q) over data blocks given in logical order.
pub(crate) fn compute_parity(
    lay: &StripeLayout,
    data: &[Vec<u8>],
    len: usize,
) -> (Vec<u8>, Vec<u8>) {
    let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    compute_parity_refs(lay, &refs, len)
}

pub(crate) fn compute_parity_refs(
    lay: &StripeLayout,
    data: &[&[u8]],
    len: usize,
) -> (Vec<u8>, Vec<u8>) {
    let mut p = vec![0u8; len];
    let mut q = vec![0u8; if lay.q.is_some() { len } else { 0 }];
    parity_into(lay, data, &mut p, &mut q);
    (p, q)
}

/// Bytes of each member's chunk handled at once by a full-stripe write: the slices of all
/// `members` (data, P and Q) together stay within about 768 KiB, a part of a core's L2
/// cache, so parity generation and the copies into the members reuse cached data. A
/// multiple of 16 KiB, at least 32 KiB (fewer, larger writes beyond that matter more),
/// at most the chunk `len`.
fn full_stripe_slice(members: usize, len: usize) -> usize {
    const BUDGET: usize = 768 << 10;
    let per = (BUDGET / members.max(1)) / (16 << 10) * (16 << 10);
    per.max(32 << 10).min(len)
}

/// Buffers reused by full-stripe writes (P/Q) and stripe-cache write-outs (data and
/// P/Q), last-in first-out (the most recently used are the ones still in cache).
static SCRATCH: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Scratch buffers handed back to [`SCRATCH`] when dropped (on every return path).
struct ScratchBufs(Vec<Vec<u8>>);

impl std::ops::Deref for ScratchBufs {
    type Target = Vec<Vec<u8>>;
    fn deref(&self) -> &Vec<Vec<u8>> {
        &self.0
    }
}

impl std::ops::DerefMut for ScratchBufs {
    fn deref_mut(&mut self) -> &mut Vec<Vec<u8>> {
        &mut self.0
    }
}

impl Drop for ScratchBufs {
    fn drop(&mut self) {
        for v in self.0.drain(..) {
            scratch_put(v);
        }
    }
}

/// [`compute_parity`] into reused scratch buffers (hand them back with [`scratch_put`]).
fn compute_parity_scratch(lay: &StripeLayout, data: &[Vec<u8>], len: usize) -> (Vec<u8>, Vec<u8>) {
    let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut p = scratch_take();
    let mut q = scratch_take();
    // The generators overwrite every byte: only growth needs filling.
    p.resize(len, 0);
    q.resize(if lay.q.is_some() { len } else { 0 }, 0);
    parity_into(lay, &refs, &mut p, &mut q);
    (p, q)
}

fn scratch_take() -> Vec<u8> {
    lock(&SCRATCH).pop().unwrap_or_default()
}

fn scratch_put(v: Vec<u8>) {
    // Up to 32 MiB kept: a write-out's data and P/Q buffers (one chunk each) for several
    // concurrent writers.
    let mut s = lock(&SCRATCH);
    let kept: usize = s.iter().map(Vec::capacity).sum();
    if v.capacity() > 0 && kept + v.capacity() <= (32 << 20) {
        s.push(v);
    }
}

/// P (and Q, for RAID6) over data blocks given in logical order, written over `p` and
/// `q` (every byte; `q` is ignored without a Q). `p.len()` is the block length.
fn parity_into(lay: &StripeLayout, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    if lay.q.is_none() {
        parity::xor_gen(data, p);
        return;
    }
    let mut slots: Vec<Option<&[u8]>> = vec![None; lay.syndrome_width];
    for (k, d) in data.iter().enumerate() {
        slots[lay.slot[k]] = Some(d);
    }
    // Unused syndrome slots (DDF layouts) count as zero blocks.
    let zero = if slots.iter().any(Option::is_none) {
        vec![0u8; p.len()]
    } else {
        Vec::new()
    };
    let slots: Vec<&[u8]> = slots.iter().map(|s| s.unwrap_or(&zero)).collect();
    parity::pq_gen(&slots, p, q);
}

fn update_090_counts(s: &mut v090::SuperblockV090, missing: &[usize]) {
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

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("uuid", &raidkit_format::uuid::format(&self.uuid))
            .field("name", &self.name)
            .field("level", &self.geo.level)
            .field("size_bytes", &self.size_bytes())
            .field("missing_roles", &self.missing_roles())
            .finish()
    }
}

impl Drop for Array {
    /// Best effort: write out held writes (a caller that needs to know whether they reached
    /// the members calls [`Array::flush`] or [`Array::stop`] first).
    fn drop(&mut self) {
        if let Some(c) = &self.cache {
            if c.has_dirty() {
                self.cache_drain_all(c);
                let _ = self.flush_members();
            }
        }
    }
}

#[cfg(test)]
mod mirror_tests {
    use crate::create::{create, CreateOptions, MemberSpec};
    use raidkit_layout::{names, Level};
    use raidkit_testkit::tempdir::TempDir;

    /// Every copy `Geometry::locate` gives, of every mirrored layout, serves reads when
    /// it is the cheapest: with the members of all other copies loaded, a 4 KiB read goes
    /// to exactly that copy and returns the written data.
    #[test]
    fn every_copy_of_every_layout_is_chosen_when_cheapest() {
        for (level, layout, n) in [
            (Level::Raid1, "default", 3usize),
            (Level::Raid10, "n2", 2),
            (Level::Raid10, "n2", 3),
            (Level::Raid10, "f2", 2),
            (Level::Raid10, "f2", 4),
            (Level::Raid10, "o2", 2),
            (Level::Raid10, "o2", 3),
            (Level::Raid10, "n3", 4),
            (Level::Raid10, "f3", 5),
            (Level::Raid10, "o3", 4),
        ] {
            let dir = TempDir::new("rk-balance").unwrap();
            let ps: Vec<_> = (0..n)
                .map(|i| MemberSpec::Path(dir.path().join(format!("m{i}"))))
                .collect();
            let mut o = CreateOptions::new(level, ps);
            o.layout = Some(names::parse_layout(level, layout).unwrap());
            if level == Level::Raid10 {
                o.chunk_bytes = Some(16 << 10);
            }
            o.create_size = Some(2 << 20);
            let arr = create(&o, &mut |_, _| {}).unwrap();
            let size = arr.size_bytes();
            let data: Vec<u8> = (0..size).map(|i| (i * 131 / 512 % 251) as u8).collect();
            arr.write(0, &data).unwrap();
            // Sectors in several chunks, rows and (far/offset) zones.
            // (None crosses a 16 KiB chunk: one run, one set of copies.)
            for s in [0u64, 40, 77, 200, size / 512 / 64 * 32 + 9, size / 512 - 8] {
                let p = arr.geo.locate(s).unwrap();
                assert_eq!(
                    p.copies.len(),
                    if level == Level::Raid1 {
                        n
                    } else {
                        layout[1..].parse().unwrap()
                    }
                );
                for &(role, _) in &p.copies {
                    // The copy on `role` is idle, every other copy's member has 5 reads
                    // queued; all measured equally fast.
                    for &(r, _) in &p.copies {
                        let q = if r == role { 0 } else { 5 };
                        arr.member(r).unwrap().load.set(q, 1000);
                    }
                    let before = arr.member_stats()[role].reads;
                    let mut b = vec![0u8; 4096];
                    arr.read(s * 512, &mut b).unwrap();
                    assert!(
                        b == data[(s * 512) as usize..(s * 512) as usize + 4096],
                        "{level:?} {layout} ×{n} sector {s}: data"
                    );
                    assert_eq!(
                        arr.member_stats()[role].reads,
                        before + 1,
                        "{level:?} {layout} ×{n} sector {s}: copy on role {role} not read"
                    );
                    for &(r, _) in &p.copies {
                        arr.member(r).unwrap().load.set(0, 0);
                    }
                }
            }
        }
    }
}
