//! A running array: read and write any byte range at every level and layout, degraded
//! included, keeping the superblocks' clean/dirty state and the write-intent bitmap the way
//! Linux MD does.
//!
//! * `mod.rs`: the [`Array`] and its client entry points (`read`, `write`, `flush`).
//! * [`member`]: member IO and failing; [`replacement`]: md's hot replace, write side.
//! * [`meta`]: superblocks, dirty/clean, the write-intent bitmap's bits.
//! * [`mirror`]: RAID1/10 reads and read balancing ([`balance`]).
//! * [`stripe`]: RAID4/5/6 stripe data and parity; [`parity_write`]: direct stripe writes;
//!   [`stripe_lock`]: per-stripe IO locks; [`scratch`]: reused buffers.
//! * [`range_gate`]: client writes ordered against mirrored copy jobs, range by range.
//! * [`write_buf`]: a write's owned data ([`SharedBuf`]); [`write_behind`]: md's
//!   write-behind queue for write-mostly members.
//! * [`cache`]: the stripe cache of RAID4/5/6.
//! * [`lost`]: lost ranges; [`bad_blocks`]: md's bad-block log; [`slow`]: slow members.
//! * [`events`]: typed events; [`iostats`]: client IO statistics.

use crate::array::cache::StripeCache;
use crate::array::cache::PAGE_SECTORS;
use crate::array::lost::LostRanges;
use crate::array::member::Members;
use crate::array::member_io::MemberOp;
use crate::array::meta::{Meta, MetaState};
use crate::array::stripe_lock::StripeLocks;
use crate::dev::io;
use crate::dev::BlockDev;
use crate::error::EngineError;
use crate::error::Result;
use crate::meta::bitmap::RunBitmap;
use crate::meta::sb::Metadata;
use raidkit_layout::{Geometry, Level};
use std::sync::{Arc, Mutex};
pub mod bad_blocks;
pub mod balance;
pub mod cache;
pub(crate) mod error_count;
pub mod events;
pub(crate) mod failing;
pub(crate) mod holes;
pub mod iostats;
pub(crate) mod lost;
pub mod member;
mod member_io;
pub(crate) mod meta;
pub(crate) mod mirror;
pub(crate) mod parity_write;
pub(crate) mod range_gate;
pub(crate) mod replacement;
pub mod reshape;
pub(crate) mod scratch;
pub(crate) mod sector_merge;
pub mod slow;
pub(crate) mod stripe;
pub(crate) mod stripe_lock;
#[cfg(test)]
pub(crate) mod test_arrays;
pub(crate) mod write_behind;
pub mod write_buf;
pub(crate) mod zeroes;

pub use crate::array::cache::StripeCacheStats;
pub use crate::array::events::{ArrayEvent, AssemblyNote};
pub use crate::array::member::{
    Member, MemberInfo, MemberIo, MemberStats, MAX_CORRECTED_READ_ERRORS,
};
pub use crate::array::write_behind::MAX_QUEUED_BYTES as MAX_WRITE_BEHIND_BYTES;
use crate::array::write_buf::WriteData;
pub use crate::array::write_buf::{BufOwner, SharedBuf};
pub(crate) use crate::locks::lock;
use raidkit_layout::SECTOR;

/// How one piece of a read is read (`read_serial`).
enum PieceRead {
    /// Copied from the stripe cache.
    Done,
    /// One member read: role, data sector.
    Member(usize, u64),
    /// Cache and member together, another copy, or reconstruction: `read_piece`.
    FullWay,
}

/// A running array. Its state is grouped by the module that owns it.
pub struct Array {
    /// The shape (never changes while the array runs).
    pub(crate) geo: Geometry,
    /// `geo.array_sectors()`, derived once (every request's range check asks for it).
    geo_sectors: u64,
    /// `geo.stripes()`, derived once.
    geo_stripes: u64,
    /// RAID4/5/6: the layout of stripes `0..geo.stripe_period()` (every stripe has that of
    /// its place in the rotation), derived once; empty for other levels or long periods.
    layouts: Box<[raidkit_layout::StripeLayout]>,
    pub(crate) uuid: [u8; 16],
    pub(crate) name: String,
    pub(crate) metadata: Metadata,
    pub(crate) writable: bool,
    /// Who is in which role ([`member`], [`replacement`]).
    pub(crate) members: Members,
    /// Superblocks, dirty/clean, the bitmap, the write gate ([`meta`]).
    pub(crate) meta: MetaState,
    /// Array byte ranges whose data is lost ([`lost`]).
    pub(crate) lost: LostRanges,
    /// Per-stripe IO locks ([`stripe_lock`]).
    locks: StripeLocks,
    /// Client writes ordered against mirrored copy jobs by range ([`range_gate`]).
    ranges: range_gate::RangeGate,
    /// Writes merging partial sectors, ordered by sector ([`sector_merge`]).
    merges: sector_merge::SectorMerges,
    /// Event subscribers ([`events`]).
    listeners: Mutex<Vec<std::sync::mpsc::Sender<ArrayEvent>>>,
    /// Client-visible IO statistics and tracing.
    pub io: crate::iostats::IoStats,
    /// Stripe cache (RAID4/5/6 with chunks of whole 4 KiB pages; [`cache`]).
    pub(crate) cache: Option<StripeCache>,
    /// The optional checksum sidecar (see [`crate::checksums`]).
    checksums: std::sync::OnceLock<Arc<crate::checksums::Checksums>>,
    /// What the assembly worked around ([`events::AssemblyNote`]).
    pub(crate) notes: Vec<crate::array::events::AssemblyNote>,
    /// Network members not reached at assembly, not yet taken back ([`member`]).
    pub(crate) away: Mutex<Vec<Arc<dyn BlockDev>>>,
    /// A reshape in progress: the route by position, or the successor ([`reshape`]).
    pub(crate) reshape: reshape::ReshapeSlot,
    /// Writes queued behind to write-mostly members ([`write_behind`]).
    pub(crate) wb: write_behind::WriteBehind,
}

/// Longest rotation whose stripe layouts an array keeps.
const MAX_KEPT_LAYOUTS: u64 = 256;

/// The layouts of one rotation of `geo`'s stripes (empty: derive each when asked).
fn stripe_layouts(geo: &Geometry) -> Box<[raidkit_layout::StripeLayout]> {
    let Some(period) = geo.stripe_period() else {
        return Box::default();
    };
    if period > MAX_KEPT_LAYOUTS || period > geo.stripes() {
        return Box::default();
    }
    (0..period)
        .map(|s| geo.stripe(s))
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
        .into_boxed_slice()
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
        // Large IO buffers from the heap, not a fresh mapping each (see dev::io::alloc).
        crate::dev::io::alloc::tune();
        // RAID4/5/6 with chunks of whole 4 KiB pages have a stripe cache.
        let cached = geo.level.has_parity()
            && geo.chunk_sectors > 0
            && geo.chunk_sectors.is_multiple_of(PAGE_SECTORS);
        let cache = cached.then(|| {
            StripeCache::new(
                geo.data_disks(),
                geo.raid_disks - geo.data_disks(),
                geo.chunk_sectors,
            )
        });
        let wb = write_behind::WriteBehind::default();
        if geo.level == Level::Raid1 {
            wb.set_limit(bitmap.as_ref().map_or(0, |b| b.sb.write_behind));
        }
        for m in slots.iter().flatten() {
            let wm = meta.sbs.get(m.index).is_some_and(|sb| sb.write_mostly());
            m.write_mostly
                .store(wm, std::sync::atomic::Ordering::Relaxed);
        }
        let layouts = stripe_layouts(&geo);
        Array {
            geo_sectors: geo.array_sectors(),
            geo_stripes: geo.stripes(),
            layouts,
            geo,
            uuid,
            name,
            metadata,
            writable,
            members: Members::new(devs, slots, spares),
            meta: MetaState::new(meta, bitmap, forced_clean),
            lost: LostRanges::default(),
            locks: StripeLocks::new(),
            ranges: Default::default(),
            merges: Default::default(),
            listeners: Mutex::new(Vec::new()),
            io: crate::iostats::IoStats::default(),
            cache,
            checksums: std::sync::OnceLock::new(),
            notes: Vec::new(),
            away: Mutex::new(Vec::new()),
            reshape: reshape::ReshapeSlot::default(),
            wb,
        }
    }

    /// Attach a checksum sidecar: from now on every write updates it and scrubs use it for
    /// verdicts. Fails if one is attached already.
    pub fn attach_checksums(&self, cs: Arc<crate::checksums::Checksums>) -> Result<()> {
        if self.route().is_some() {
            return Err(EngineError::Invalid(
                "the array is being reshaped: the checksum sidecar covers a fixed array size; attach it after the reshape (and recompute it)".into(),
            ));
        }
        self.checksums.set(cs).map_err(|_| {
            EngineError::Invalid("a checksum sidecar is already attached to this array".into())
        })
    }

    /// The attached checksum sidecar, if any.
    pub fn checksums(&self) -> Option<&Arc<crate::checksums::Checksums>> {
        self.checksums.get()
    }

    /// The array's geometry (while reshaping: the new one; see
    /// [`Array::reshape_status`]).
    pub fn geometry(&self) -> &Geometry {
        match self.successor() {
            Some(s) => s.geometry(),
            None => &self.geo,
        }
    }

    /// Size in bytes (while reshaping: the smaller of the two geometries, as md shows).
    pub fn size_bytes(&self) -> u64 {
        if let Some(s) = self.successor() {
            return s.size_bytes();
        }
        self.routed_sectors().unwrap_or(self.geo_sectors) * SECTOR
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

    /// Flush every member's completed writes to stable storage.
    pub fn flush(&self) -> Result<()> {
        let _in = match self.enter() {
            Ok(g) => g,
            Err(next) => return next.flush(),
        };
        let t0 = std::time::Instant::now();
        let r = self.flush_inner();
        self.io
            .record(crate::iostats::Op::Flush, 0, 0, t0.elapsed(), r.is_ok());
        r
    }

    pub(crate) fn flush_inner(&self) -> Result<()> {
        if let Some(c) = &self.cache {
            if c.has_dirty() {
                // Held writes go out under the gate, so the array cannot be marked clean
                // while they are written.
                let _gate = self.write_gate();
                self.cache_drain_all(c);
            }
        }
        self.settle_write_behind();
        self.flush_members_of(false)
    }

    /// Flush the members, then report a failure of writing held data since the last flush.
    pub(crate) fn flush_members(&self) -> Result<()> {
        self.flush_members_of(true)
    }

    /// [`Array::flush_members`]; with `all` false, members written behind are left out
    /// (a client flush: the data is durable on the other copies, and their regions stay
    /// dirty in the bitmap until [`Array::mark_clean`] flushes them too).
    fn flush_members_of(&self, all: bool) -> Result<()> {
        // Every member's flush at once; one that misses its deadline is failed (the
        // others hold the data).
        let behind = !all && self.wb.limit() > 0;
        let live: Vec<(usize, Arc<Member>)> = self
            .slots()
            .iter()
            .enumerate()
            .filter_map(|(r, m)| m.clone().filter(|m| !m.is_failed()).map(|m| (r, m)))
            .filter(|(_, m)| !(behind && m.is_write_mostly()))
            .collect();
        let devs: Vec<&dyn BlockDev> = live.iter().map(|(_, m)| m.dev.as_ref()).collect();
        let results = io::flush_each(&devs, &mut |i| {
            let (role, m) = &live[i];
            let _ = self.fail_gone(*role, m, "no answer to a flush within the member timeout");
        });
        // A member whose flush fails is failed as md does, unless it holds the last copy
        // of some data: then the flush fails (after every member's outcome is handled).
        let mut kept = Ok(());
        for ((role, m), r) in live.iter().zip(results) {
            match r {
                Ok(()) => {}
                // A local member gone is failed whatever it holds (see `failing`).
                Err(e) if io::is_gone(&e) && m.dev.network().is_none() => {
                    self.fail_member(*role, &format!("flush: {e}"))?
                }
                Err(e) => {
                    let r = self.flush_failed(*role, m.dev.name(), e);
                    if kept.is_ok() {
                        kept = r;
                    }
                }
            }
        }
        kept?;
        if let Some(e) = self.cache.as_ref().and_then(|c| c.take_pending()) {
            return Err(e);
        }
        Ok(())
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.size_bytes();
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(EngineError::OutOfRange { offset, len, size });
        }
        Ok(())
    }

    /// Read `buf.len()` bytes at byte `offset` (any alignment).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let _in = match self.enter() {
            Ok(g) => g,
            Err(next) => return next.read(offset, buf),
        };
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

    pub(crate) fn read_inner(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        self.check_lost_read(offset, buf.len() as u64)?;
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
        self.write_data(offset, WriteData::borrowed(buf))
    }

    /// [`Array::write`] of a buffer the caller owns: a write queued behind for a
    /// write-mostly member keeps a reference to it instead of a copy (see [`write_buf`]).
    pub fn write_shared(&self, offset: u64, buf: &SharedBuf) -> Result<()> {
        self.write_data(offset, WriteData::shared(buf))
    }

    fn write_data(&self, offset: u64, data: WriteData<'_>) -> Result<()> {
        let _in = match self.enter() {
            Ok(g) => g,
            Err(next) => return next.write_data(offset, data),
        };
        let len = data.bytes().len() as u64;
        let t0 = std::time::Instant::now();
        let r = self.write_inner(offset, data).and_then(|()| {
            self.written_over_lost(offset, len);
            self.check_not_lost(offset, len)
        });
        self.io.record(
            crate::iostats::Op::Write,
            offset,
            len,
            t0.elapsed(),
            r.is_ok(),
        );
        r
    }

    fn write_inner(&self, offset: u64, data: WriteData<'_>) -> Result<()> {
        let buf = data.bytes();
        self.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let head = offset % SECTOR;
        let end = offset + buf.len() as u64;
        if head == 0 && end.is_multiple_of(SECTOR) {
            let _order = self
                .merges
                .whole(offset / SECTOR, buf.len() as u64 / SECTOR);
            return self.write_sectors_data(offset / SECTOR, data);
        }
        let s0 = offset / SECTOR;
        let s1 = end.div_ceil(SECTOR);
        let _order = self.merges.merge(s0, s1 - 1);
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

    /// Read whole sectors starting at array sector `s`: every member read of the request
    /// at once (see `read_serial`); on mirrors spread over the members holding copies
    /// (see `read_mirrored`).
    pub fn read_sectors(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(r) = self.route() {
            return self.read_routed(&r, s, buf);
        }
        self.read_sectors_plain(s, buf)
    }

    /// [`Array::read_sectors`] through this array's own geometry.
    pub(crate) fn read_sectors_plain(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        if self.geo.level.mirrors() {
            return self.read_mirrored(s, buf);
        }
        self.read_serial(s, buf)
    }

    /// Read whole sectors at array sector `s`, cut into pieces that each map onto one
    /// chunk (parity levels) or one run of copies: the pieces' member reads go out
    /// together; a piece the stripe cache holds is copied from it, and one whose read
    /// failed (or that cannot be read simply) goes the full way (`read_piece`: other
    /// copies, reconstruction, read-error repair).
    pub(crate) fn read_serial(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        let mut pieces: Vec<(u64, &mut [u8])> = Vec::new();
        let mut rest = buf;
        let mut done = 0u64;
        while done < total {
            let cur = s + done;
            let n = if self.geo.level.has_parity() {
                let chunk = self.geo.chunk_sectors;
                (chunk - cur % chunk).min(total - done)
            } else {
                self.locate(cur)?.run.min(total - done)
            };
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut((n * SECTOR) as usize);
            pieces.push((cur, piece));
            rest = tail;
            done += n;
        }
        if let [(at, piece)] = pieces.as_mut_slice() {
            return self.read_piece(*at, piece);
        }
        let mut ok = vec![false; pieces.len()];
        {
            let mut ops = Vec::with_capacity(pieces.len());
            let mut which = Vec::with_capacity(pieces.len());
            for (k, (at, piece)) in pieces.iter_mut().enumerate() {
                match self.plan_piece_read(*at, piece)? {
                    PieceRead::Done => ok[k] = true,
                    PieceRead::Member(role, dsec) => {
                        ops.push(MemberOp::read(role, dsec, piece));
                        which.push(k);
                    }
                    PieceRead::FullWay => {}
                }
            }
            self.member_io(&mut ops);
            for (op, k) in ops.iter().zip(which) {
                ok[k] = op.ok();
            }
        }
        for ((at, piece), done) in pieces.into_iter().zip(ok) {
            if !done {
                self.read_piece(at, piece)?;
            }
        }
        Ok(())
    }

    /// How a piece of a multi-piece read is read: copied from the stripe cache now, with
    /// one member read, or the full way.
    fn plan_piece_read(&self, at: u64, buf: &mut [u8]) -> Result<PieceRead> {
        let sectors = buf.len() as u64 / SECTOR;
        if self.geo.level.has_parity() {
            let (stripe, block, a) = self.stripe_place(at);
            match self.read_from_cache(stripe, block, a, buf) {
                Some(true) => return Ok(PieceRead::Done),
                Some(false) => return Ok(PieceRead::FullWay),
                None => {}
            }
            let role = self.stripe_layout(stripe)?.data[block];
            let dsec = stripe * self.geo.chunk_sectors + a;
            return Ok(if self.can_read(role, dsec, sectors) {
                PieceRead::Member(role, dsec)
            } else {
                PieceRead::FullWay
            });
        }
        let p = self.locate(at)?;
        let cands = self.candidates(&p.copies, sectors);
        Ok(match self.try_order(&p.copies, &cands, None, 0).first() {
            Some(&(role, dsec)) if self.can_read(role, dsec, sectors) => {
                PieceRead::Member(role, dsec)
            }
            _ => PieceRead::FullWay,
        })
    }

    pub(crate) fn locate(&self, s: u64) -> Result<raidkit_layout::Placement> {
        self.geo.locate(s).ok_or(EngineError::OutOfRange {
            offset: s * SECTOR,
            len: SECTOR,
            size: self.size_bytes(),
        })
    }

    /// Read a piece that does not cross a mapping boundary.
    pub(crate) fn read_piece(&self, s: u64, buf: &mut [u8]) -> Result<()> {
        if self.geo.level.has_parity() {
            self.read_stripe_piece(s, buf)
        } else {
            self.read_mapped_piece(s, buf)
        }
    }

    /// Write whole sectors starting at array sector `s`.
    pub fn write_sectors(&self, s: u64, buf: &[u8]) -> Result<()> {
        self.write_sectors_data(s, WriteData::borrowed(buf))
    }

    fn write_sectors_data(&self, s: u64, data: WriteData<'_>) -> Result<()> {
        let buf = data.bytes();
        if let Some(r) = self.route() {
            return self.write_routed(&r, s, buf);
        }
        self.refuse_while_kept_member_down()?;
        let _gate = self.write_gate();
        self.ensure_dirty()?;
        match self.checksums() {
            None => self.write_serial_data(s, data),
            Some(cs) => {
                cs.before_write(s * SECTOR, buf.len() as u64)?;
                let r = self.write_serial_data(s, data);
                // The read-back of partly written blocks is internal: not client IO.
                cs.after_write(s * SECTOR, buf, r.is_ok(), |off, b| self.read_inner(off, b))?;
                r
            }
        }
    }

    /// Write whole sectors at array sector `s`: stripe by stripe (parity levels), or onto
    /// every copy of every run at once.
    pub(crate) fn write_serial(&self, s: u64, buf: &[u8]) -> Result<()> {
        self.write_serial_data(s, WriteData::borrowed(buf))
    }

    fn write_serial_data(&self, s: u64, data: WriteData<'_>) -> Result<()> {
        if self.geo.level.has_parity() {
            self.write_parity(s, data.bytes())
        } else {
            self.write_mapped(s, data)
        }
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
