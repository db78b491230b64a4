//! Members: the device in each role slot, its counters, and failing it (md's
//! `md_error`), read-error repair included. Their IO is in `member_io`.

use crate::array::balance::ReadLoad;
use crate::array::error_count::ReadErrorCount;
use crate::array::events::ArrayEvent;
use crate::array::holes::HoleHint;
use crate::array::iostats::{lat_bucket, PerCpu, LAT_BUCKETS};
use crate::array::Array;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::locks::lock;
use raidkit_format::badblocks::BadRange;
use raidkit_format::v1;
use raidkit_layout::SECTOR;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// One member device in a role slot.
pub struct Member {
    /// The device.
    pub dev: Arc<dyn BlockDev>,
    /// Index into the array's device list (and superblock list).
    pub index: usize,
    /// Start of the data area, sectors.
    pub data_offset: u64,
    /// If partially rebuilt: data sectors below this are valid (u64::MAX = in sync).
    pub(crate) recovery: AtomicU64,
    /// Bad ranges (absolute device sectors): the bad-block log, plus blocks a rebuild
    /// could not reconstruct. Never read; the data comes from redundancy.
    pub(crate) bad: RwLock<Vec<BadRange>>,
    pub(crate) has_bad: AtomicBool,
    pub(crate) failed: AtomicBool,
    /// Reads in flight and measured speed (for read balancing).
    pub load: ReadLoad,
    /// IO counters for statistics.
    pub stats: MemberStats,
    /// Read errors met on a writable array (fading with time, as md's).
    pub(crate) read_errors: ReadErrorCount,
    /// Slow-member detection state.
    pub(crate) slow: crate::array::slow::SlowState,
    /// md's write-mostly: read only when no other copy can serve (from the superblock).
    pub(crate) write_mostly: AtomicBool,
    /// The last hole found on the device, and the write count that keeps it valid.
    pub(crate) holes: HoleHint,
}

/// The member of each role slot (`None`: empty).
pub(crate) type Slots = Vec<Option<Arc<Member>>>;

/// Who is in which role: the array's devices, the member of each role, the spares, and
/// the replacements being built.
pub(crate) struct Members {
    /// Every device (members and spares), in the order of `meta.sbs`.
    pub(crate) devs: RwLock<Vec<Arc<dyn BlockDev>>>,
    /// Role slot → member, one copy per CPU: every client IO looks at the slots several
    /// times (a 4 KiB parity write five), and one lock's reader count was a cache line
    /// both cores' writers took from each other at every look. A reader locks its CPU's
    /// copy ([`Array::slots`]); a change locks every copy, in order, and makes it in each
    /// ([`Array::update_slots`]), so every look after it sees it.
    slots: PerCpu<RwLock<Slots>>,
    /// Device indices of spares.
    pub(crate) spares: Mutex<Vec<usize>>,
    /// Role slot → replacement being built for that slot's member (md's hot replace):
    /// every write to the role is also written to it; it is never read until it takes
    /// over.
    pub(crate) replacements: RwLock<Vec<Option<Arc<Member>>>>,
    /// Fast check: is any replacement in progress?
    pub(crate) replacing: AtomicBool,
    /// Held while deciding whether a member may be failed and failing it, so two errors
    /// at once on the last two copies cannot fail both ([`crate::array::failing`]).
    pub(crate) fail_gate: Mutex<()>,
}

impl Members {
    /// The devices, the members in their roles, the spares' device indices.
    pub(crate) fn new(
        devs: Vec<Arc<dyn BlockDev>>,
        slots: Vec<Option<Member>>,
        spares: Vec<usize>,
    ) -> Members {
        Members {
            devs: RwLock::new(devs),
            slots: {
                let slots: Slots = slots.into_iter().map(|m| m.map(Arc::new)).collect();
                let copies = PerCpu::<RwLock<Slots>>::default();
                for c in copies.all() {
                    *crate::locks::write(c) = slots.clone();
                }
                copies
            },
            spares: Mutex::new(spares),
            replacements: RwLock::new(Vec::new()),
            replacing: AtomicBool::new(false),
            fail_gate: Mutex::new(()),
        }
    }
}

/// The counters of one direction of one member on one CPU.
#[derive(Default)]
struct DirCounters {
    count: AtomicU64,
    bytes: AtomicU64,
    lat: [AtomicU64; LAT_BUCKETS],
    lat_sum_ns: AtomicU64,
}

impl DirCounters {
    /// Count one successful IO of `bytes`, and its service time if measured.
    fn add(&self, bytes: usize, took: Option<Duration>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if let Some(d) = took {
            self.lat[lat_bucket(d)].fetch_add(1, Ordering::Relaxed);
            self.lat_sum_ns
                .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// The counters of one member on one CPU (see [`PerCpu`]).
#[derive(Default)]
struct MemberCounters {
    read: DirCounters,
    write: DirCounters,
}

/// Per-member IO counters: requests, bytes and service times of successful reads and
/// writes, kept per CPU (every member IO adds to them) and summed when read
/// ([`Array::member_stats`]).
#[derive(Default)]
pub struct MemberStats(PerCpu<MemberCounters>);

impl std::fmt::Debug for MemberStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberStats")
            .field("reads", &self.0.sum(|c| &c.read.count))
            .field("writes", &self.0.sum(|c| &c.write.count))
            .finish()
    }
}

impl MemberStats {
    /// Count one successful member read of `bytes`, and its service time if measured.
    pub(crate) fn count_read(&self, bytes: usize, took: Option<Duration>) {
        self.0.local().read.add(bytes, took);
    }

    /// Count one successful member write of `bytes`, and its service time if measured.
    pub(crate) fn count_write(&self, bytes: usize, took: Option<Duration>) {
        self.0.local().write.add(bytes, took);
    }

    /// The sums, as a report of role `role` on `device`.
    fn report(&self, role: usize, device: String) -> MemberIo {
        let c = &self.0;
        MemberIo {
            role,
            device,
            reads: c.sum(|c| &c.read.count),
            read_bytes: c.sum(|c| &c.read.bytes),
            writes: c.sum(|c| &c.write.count),
            write_bytes: c.sum(|c| &c.write.bytes),
            read_lat_hist_us: c.sums(|c| &c.read.lat),
            write_lat_hist_us: c.sums(|c| &c.write.lat),
            read_lat_sum_ns: c.sum(|c| &c.read.lat_sum_ns),
            write_lat_sum_ns: c.sum(|c| &c.write.lat_sum_ns),
        }
    }
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
            read_errors: ReadErrorCount::default(),
            slow: crate::array::slow::SlowState::default(),
            write_mostly: AtomicBool::new(false),
            holes: HoleHint::default(),
        }
    }

    /// Is the member write-mostly (read only when no other copy can serve)?
    pub fn is_write_mostly(&self) -> bool {
        self.write_mostly.load(Ordering::Relaxed)
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

    pub(crate) fn readable(&self, data_sector: u64, n: u64) -> bool {
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
        let bad = crate::locks::read(&self.bad);
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
        let mut bad = crate::locks::write(&self.bad);
        // Coalesced before counting: a log read from disk may hold overlapping entries,
        // which would count twice and hide a new range as long as the overlap.
        crate::ranges::coalesce(&mut bad);
        let before = crate::ranges::covered(&bad);
        bad.push(BadRange { start, len: n });
        crate::ranges::coalesce(&mut bad);
        self.has_bad.store(true, Ordering::Relaxed);
        crate::ranges::covered(&bad) != before
    }

    /// Forget device sectors `[start, start + n)` as bad (they were rewritten).
    pub(crate) fn clear_bad_dev(&self, start: u64, n: u64) {
        let mut bad = crate::locks::write(&self.bad);
        *bad = crate::ranges::subtract(&bad, start, n);
        self.has_bad.store(!bad.is_empty(), Ordering::Relaxed);
    }

    /// The bad ranges (absolute device sectors).
    pub fn bad_ranges(&self) -> Vec<BadRange> {
        crate::locks::read(&self.bad).clone()
    }
}

/// md fails a member after this many corrected read errors close together (its default
/// for RAID1/10; the count halves every hour, see `error_count`).
pub const MAX_CORRECTED_READ_ERRORS: u32 = 20;

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
    /// Read service time histogram (bucket `i`: `2^i <= µs < 2^(i+1)`, as the array's).
    pub read_lat_hist_us: Vec<u64>,
    /// Write service time histogram.
    pub write_lat_hist_us: Vec<u64>,
    /// Sum of read service times, ns.
    pub read_lat_sum_ns: u64,
    /// Sum of write service times, ns.
    pub write_lat_sum_ns: u64,
}

/// Description of a member for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemberInfo {
    /// Device name.
    pub device: String,
    /// Role slot, or None for a spare.
    pub role: Option<usize>,
    /// `in_sync`, `recovering`, `failed`, `replacement` (being built for the role), `spare`,
    /// `away` (a network member not reached at assembly: its role is known when it answers).
    pub state: String,
    /// A network member's link: connected / connecting / disconnected since when, request
    /// latency (absent for local members).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<crate::dev::nbd::LinkStatus>,
    /// md's write-mostly: read only when no other copy can serve.
    pub write_mostly: bool,
    /// Writes acknowledged to clients and not yet on this member (write-behind).
    pub write_behind_backlog: usize,
}

impl Array {
    /// Record the network members not reached at assembly (see
    /// [`crate::assemble::assemble_paths`]): listed as away until taken back.
    pub(crate) fn set_away(&self, devs: Vec<Arc<dyn BlockDev>>) {
        *lock(&self.away) = devs;
    }

    /// The network members not reached at assembly and not yet taken back.
    pub fn away_members(&self) -> Vec<Arc<dyn BlockDev>> {
        lock(&self.away).clone()
    }

    /// Has the array a network member (one away included)?
    pub(crate) fn has_network_members(&self) -> bool {
        !lock(&self.away).is_empty() || self.devs().iter().any(|d| d.network().is_some())
    }

    /// `dev` (one of [`Array::away_members`]) was taken back: no longer away.
    pub(crate) fn no_longer_away(&self, dev: &Arc<dyn BlockDev>) {
        lock(&self.away).retain(|d| !Arc::ptr_eq(d, dev));
    }

    /// Put `member` into role slot `role` (None: empty the slot). The caller holds the
    /// superblock lock and writes the superblocks after.
    pub(crate) fn set_slot(&self, role: usize, member: Option<Arc<Member>>) {
        self.update_slots(|s| s[role] = member);
    }

    /// Change the role slots: `change` is made to one CPU's copy and the result copied to
    /// the others, all locked at once (so no reader sees them differ); returns what
    /// `change` returned.
    pub(crate) fn update_slots<R: Default>(&self, change: impl FnOnce(&mut Slots) -> R) -> R {
        let mut copies: Vec<_> = self.members.slots.all().map(crate::locks::write).collect();
        let Some((first, rest)) = copies.split_first_mut() else {
            return R::default(); // never: there is a copy per CPU, at least one
        };
        let r = change(first);
        for c in rest {
            c.clone_from(first);
        }
        r
    }

    /// Make a new device known to the array; returns its device index.
    pub(crate) fn add_device(&self, dev: Arc<dyn BlockDev>) -> usize {
        let mut devs = crate::locks::write(&self.members.devs);
        devs.push(dev);
        devs.len() - 1
    }

    /// The spares' device indices (locked: add or take one).
    pub(crate) fn spares(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        lock(&self.members.spares)
    }

    /// Is any replacement being built?
    pub(crate) fn replacing(&self) -> bool {
        self.members.replacing.load(Ordering::Acquire)
    }

    pub(crate) fn slots(&self) -> std::sync::RwLockReadGuard<'_, Slots> {
        crate::locks::read(self.members.slots.local())
    }

    pub(crate) fn devs(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<dyn BlockDev>>> {
        crate::locks::read(&self.members.devs)
    }

    /// Names of every device the array knows (members, spares, failed ones).
    pub fn device_names(&self) -> Vec<String> {
        self.devs().iter().map(|d| d.name().to_string()).collect()
    }

    /// The array's logical block size in bytes: the largest of its devices' (512 or
    /// 4096), as md gives the array device. IO smaller than that may be refused by a
    /// member (an NBD server with a minimum block size), so frontends advertise it.
    pub fn logical_block_size(&self) -> u32 {
        self.devs()
            .iter()
            .map(|d| d.logical_block_size())
            .max()
            .unwrap_or(512)
            .clamp(512, 4096)
    }

    /// The name of the device `given` names ([`crate::dev::names_device`]: its name, its
    /// path in any spelling, or a fault spec around it), looked up in [`Array::places`]
    /// order, so a name that a current device and a departed one share is the current
    /// one's. None if no device matches.
    pub fn device_named(&self, given: &str) -> Option<String> {
        self.places()
            .iter()
            .find(|(_, d, _)| crate::dev::names_device(d.as_ref(), given))
            .map(|(_, d, _)| d.name().to_string())
    }

    /// Every device the array knows, with its index (into the devices and superblocks) and
    /// its place: members by role (failed or not), replacements by role, spares, then the
    /// devices that hold no place now (a failed member whose role was taken over). Each
    /// lock in turn, never two at once.
    pub(crate) fn places(&self) -> Vec<(usize, Arc<dyn BlockDev>, Place)> {
        let mut out: Vec<(usize, Arc<dyn BlockDev>, Place)> = Vec::new();
        for (role, m) in self.slots().iter().enumerate() {
            if let Some(m) = m {
                let failed = m.is_failed();
                out.push((m.index, m.dev.clone(), Place::Member { role, failed }));
            }
        }
        for (role, m) in self.replacements().iter().enumerate() {
            if let Some(m) = m {
                out.push((m.index, m.dev.clone(), Place::Replacement { role }));
            }
        }
        let spares = self.spares().clone();
        let devs = self.devs().clone();
        for &i in &spares {
            if let Some(d) = devs.get(i) {
                out.push((i, d.clone(), Place::Spare));
            }
        }
        let held: Vec<usize> = out.iter().map(|(i, _, _)| *i).collect();
        let departed = devs.iter().enumerate().filter(|(i, _)| !held.contains(i));
        out.extend(departed.map(|(i, d)| (i, d.clone(), Place::Departed)));
        out
    }

    /// Number of hot spares.
    pub fn spare_count(&self) -> usize {
        self.spares().len()
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
                    link: m.dev.network().map(|n| n.link_status()),
                    write_mostly: m.is_write_mostly(),
                    write_behind_backlog: self.wb.backlog_of(r),
                });
            }
        }
        for (r, m) in self.replacements().iter().enumerate() {
            if let Some(m) = m {
                v.push(MemberInfo {
                    device: m.dev.name().to_string(),
                    role: Some(r),
                    state: "replacement".into(),
                    link: m.dev.network().map(|n| n.link_status()),
                    write_mostly: m.is_write_mostly(),
                    write_behind_backlog: 0,
                });
            }
        }
        // Spares' flags are in their superblocks; never wait for the superblock lock here
        // (a superblock write to a member that stopped answering holds it until the
        // deadline, and status must answer meanwhile): contended, they read as unset.
        let spare_wm: Vec<bool> = self
            .meta
            .sb
            .try_lock()
            .map(|m| m.sbs.iter().map(|sb| sb.write_mostly()).collect())
            .unwrap_or_default();
        let devs = self.devs();
        for &i in self.spares().iter() {
            v.push(MemberInfo {
                device: devs[i].name().to_string(),
                role: None,
                state: "spare".into(),
                link: devs[i].network().map(|n| n.link_status()),
                write_mostly: spare_wm.get(i).copied().unwrap_or(false),
                write_behind_backlog: 0,
            });
        }
        // Not reached at assembly: which role it held is known once it answers.
        for d in lock(&self.away).iter() {
            v.push(MemberInfo {
                device: d.name().to_string(),
                role: None,
                state: "away".into(),
                link: d.network().map(|n| n.link_status()),
                write_mostly: false,
                write_behind_backlog: 0,
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
                m.as_ref()
                    .map(|m| m.stats.report(r, m.dev.name().to_string()))
            })
            .collect()
    }

    pub(crate) fn member(&self, role: usize) -> Option<Arc<Member>> {
        self.slots()
            .get(role)
            .and_then(|m| m.clone())
            .filter(|m| !m.is_failed())
    }

    pub(crate) fn can_read(&self, role: usize, dsec: u64, n: u64) -> bool {
        self.member(role).is_some_and(|m| m.readable(dsec, n))
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
        self.record_failed(role, &m, why)
    }

    /// Tell of a member just marked failed: its event, and the others' superblocks.
    pub(crate) fn record_failed(&self, role: usize, m: &Member, why: &str) -> Result<()> {
        self.emit(ArrayEvent::MemberFailed {
            role,
            device: m.dev.name().to_string(),
            reason: why.to_string(),
        });
        if self.writable {
            let mut meta = lock(&self.meta.sb);
            let devnum = meta.sbs[m.index].dev_number();
            if let Some(r) = meta.roles.get_mut(devnum) {
                *r = v1::role::FAULTY;
            }
            self.write_superblocks(&mut meta, |_| {})?;
        }
        Ok(())
    }

    /// md's answer to a read error: the data was recovered from redundancy, so write it
    /// back to the member (the drive remaps the sector). A member that keeps failing, or
    /// whose rewrite fails, is failed. True if the bytes were written back.
    pub(crate) fn repair_read_error(&self, role: usize, dsec: u64, good: &[u8]) -> bool {
        let Some(m) = self.member(role) else {
            return false;
        };
        if !self.writable {
            return false;
        }
        let errors = m.read_errors.add();
        let device = m.dev.name().to_string();
        if errors > MAX_CORRECTED_READ_ERRORS {
            let _ = self.fail_member(role, &format!("{errors} read errors"));
            return false;
        }
        let res = m.dev.write_at(good, (m.data_offset + dsec) * SECTOR);
        m.holes.wrote();
        match res {
            Ok(()) => {
                self.emit(ArrayEvent::ReadErrorCorrected {
                    role,
                    device,
                    sector: m.data_offset + dsec,
                    sectors: good.len() as u64 / SECTOR,
                });
                true
            }
            Err(e) => {
                // md: a member with a bad-block log gets a bad block instead.
                let n = good.len() as u64 / SECTOR;
                if !self.bad_block_instead_of_fail(role, &m, dsec, n) {
                    let _ = self.fail_member(
                        role,
                        &format!("rewriting a sector after a read error failed: {e}"),
                    );
                }
                false
            }
        }
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
    /// A long hole is asked about once, not at every step of a pass ([`HoleHint`]).
    pub(crate) fn member_hole(&self, role: usize, dsec: u64, n: u64) -> bool {
        self.member(role).is_some_and(|m| {
            m.holes
                .is_hole(m.dev.as_ref(), (m.data_offset + dsec) * SECTOR, n * SECTOR)
        })
    }

    /// Forget the holes found on every member (a pass starts: see [`HoleHint::forget`]).
    pub(crate) fn forget_holes(&self) {
        for role in 0..self.geometry().raid_disks {
            if let Some(m) = self.member(role) {
                m.holes.forget();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::array::test_arrays::raid5;
    use std::sync::Arc;

    /// A change of a role slot is made in every CPU's copy of the slots (a reader sees
    /// its CPU's copy only), and what it returns is the change's result.
    #[test]
    fn a_slot_change_reaches_every_cpus_copy() {
        let (_dir, arr) = raid5("rk-slots", 4, 4 << 20, None);
        let second = arr.slots()[2].clone();
        arr.set_slot(1, None);
        let taken = arr.update_slots(|s| s[3].take().is_some());
        assert!(taken);
        for copy in arr.members.slots.all() {
            let copy = crate::locks::read(copy);
            assert_eq!(copy.len(), 4);
            assert!(
                copy[1].is_none() && copy[3].is_none(),
                "a copy kept a member"
            );
            assert!(copy[0].is_some());
            let same = copy[2].as_ref().zip(second.as_ref());
            assert!(same.is_some_and(|(a, b)| Arc::ptr_eq(a, b)));
        }
    }
}

/// Where a device sits in an array ([`Array::places`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// The member of `role`, failed or not.
    Member { role: usize, failed: bool },
    /// The replacement being built for `role`.
    Replacement { role: usize },
    /// A hot spare.
    Spare,
    /// A device the array knew that holds no place now (it has left the array).
    Departed,
}
