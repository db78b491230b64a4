//! The checksum sidecar: one CRC-32 per 4 KiB block of array data, in a file outside the
//! MD format (the members stay exactly what the kernel assembles; the sidecar is never
//! needed to assemble or read). It lets a scrub of a 2-way mirror or a RAID5 say which
//! copy is right when redundancy disagrees.
//!
//! # Algorithm
//! CRC-32 (IEEE, via `crc32fast`, already in the dependency tree: no new crate). It runs at
//! several GB/s with PCLMULQDQ, detects every burst error up to 32 bits and any odd
//! number of flipped bits, and a wrong 4 KiB copy matches by accident with probability
//! 2^-32 per disagreement — enough to pick between two copies, and 4 bytes per 4 KiB
//! (0.1 % of the array) keep the table small. It is not a defence against an adversary.
//!
//! # File layout (little-endian)
//! * Header, 4096 bytes: magic `RKCSUM\r\n`, version 1, algorithm 1 (CRC-32 IEEE), block
//!   size, blocks per region, array UUID, array bytes, `events`, `pending_events`, state
//!   (0 = being initialised, never trusted; 1 = valid), CRC-32 of bytes 0..4092 at 4092.
//! * Region map: one byte per region of [`REGION_BLOCKS`] blocks, padded to 4 KiB:
//!   0 = clean, 1 = being written, 2 = suspect (was being written when the array stopped
//!   uncleanly).
//! * Table: 4 bytes per block.
//!
//! # Staleness (the epoch)
//! The header records the array's superblock event count. Before raidkit writes
//! superblocks it records the new count as `pending_events` (flushed), afterwards as
//! `events`. A sidecar is trusted only if the members' event count equals one of the two:
//! anything else means the array was run without this sidecar (by the kernel, or raidkit
//! without `--checksums`) and its data may have changed; opening then fails with
//! [`EngineError::Sidecar`] `stale: true`, and callers ignore the sidecar loudly.
//!
//! # Crash consistency
//! Checksums are written after the data is on the members, so after an unclean stop a
//! block being written may have a stale checksum. Like the write-intent bitmap, a region
//! is marked "being written" in the region map and the map flushed before the first write
//! to it; when the array goes clean the table is flushed and the marks cleared. A region
//! found marked at open becomes "suspect": its checksums are never used for a verdict
//! until `raidkit checksums init` recomputes the sidecar. A write that fails makes its
//! regions suspect at once. Blocks with a write in flight are not judged.

use crate::array::{lock, Array};
use crate::error::{EngineError, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// Bytes of array data per checksum.
pub const BLOCK: u64 = 4096;
/// Blocks per region of the region map (64 MiB of array data).
pub const REGION_BLOCKS: u64 = 16384;
const MAGIC: &[u8; 8] = b"RKCSUM\r\n";
const VERSION: u32 = 1;
const ALGO_CRC32: u32 = 1;
const HDR: u64 = 4096;
const CLEAN: u8 = 0;
const WRITING: u8 = 1;
const SUSPECT: u8 = 2;

/// What a checksum says about one block's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The bytes match the recorded checksum.
    Match,
    /// They do not.
    Mismatch,
    /// The checksum is not authoritative here (suspect region or a write in flight).
    Unknown,
}

/// CRC-32 of one block.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[derive(Clone, Debug)]
struct Header {
    region_blocks: u64,
    uuid: [u8; 16],
    array_bytes: u64,
    events: u64,
    pending_events: u64,
    valid: bool,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HDR as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&ALGO_CRC32.to_le_bytes());
        b[16..20].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        b[20..24].copy_from_slice(&(self.region_blocks as u32).to_le_bytes());
        b[24..40].copy_from_slice(&self.uuid);
        b[40..48].copy_from_slice(&self.array_bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.events.to_le_bytes());
        b[56..64].copy_from_slice(&self.pending_events.to_le_bytes());
        b[64..68].copy_from_slice(&(self.valid as u32).to_le_bytes());
        let c = crc(&b[..4092]);
        b[4092..].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8], path: &str) -> Result<Header> {
        let bad = |why: String| EngineError::Sidecar {
            path: path.to_string(),
            why,
            stale: false,
        };
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        if b.len() < HDR as usize || &b[0..8] != MAGIC {
            return Err(bad("not a raidkit checksum sidecar (bad magic); give the path of this array's sidecar, or create one".into()));
        }
        if u32at(4092) != crc(&b[..4092]) {
            return Err(bad(
                "header checksum mismatch (the file is damaged); recompute the sidecar".into(),
            ));
        }
        if u32at(8) != VERSION || u32at(12) != ALGO_CRC32 || u32at(16) != BLOCK as u32 {
            return Err(bad(format!(
                "unsupported sidecar version {} / algorithm {} / block size {}; recompute the sidecar with this version",
                u32at(8),
                u32at(12),
                u32at(16)
            )));
        }
        let region_blocks = u32at(20) as u64;
        if region_blocks == 0 {
            return Err(bad(
                "region size 0 in the header; recompute the sidecar".into()
            ));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[24..40]);
        Ok(Header {
            region_blocks,
            uuid,
            array_bytes: u64at(40),
            events: u64at(48),
            pending_events: u64at(56),
            valid: u32at(64) == 1,
        })
    }

    fn blocks(&self) -> u64 {
        self.array_bytes.div_ceil(BLOCK)
    }
    fn regions(&self) -> u64 {
        self.blocks().div_ceil(self.region_blocks)
    }
    fn map_len(&self) -> u64 {
        self.regions().div_ceil(HDR) * HDR
    }
    fn table_off(&self) -> u64 {
        HDR + self.map_len()
    }
}

/// An open checksum sidecar attached to (or being built for) one array.
pub struct Checksums {
    path: PathBuf,
    file: File,
    hdr: Mutex<Header>,
    /// Region states (CLEAN / WRITING / SUSPECT), mirrored in the file's region map.
    regions: Vec<AtomicU8>,
    /// Serialises region-map updates.
    map_lock: Mutex<()>,
    /// Block ranges `[first, end)` with a write in flight (one entry per write). Writes
    /// whose block ranges overlap run one after the other (see `before_write`), so the
    /// checksums are stored in the order the data reached the array.
    inflight: Mutex<Vec<(u64, u64)>>,
    /// Signalled when a write leaves `inflight`.
    inflight_cv: std::sync::Condvar,
    /// Serialises read-back of partially written blocks with their table update.
    partial: Mutex<()>,
}

/// Numbers about a sidecar for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SidecarInfo {
    /// File path.
    pub path: String,
    /// Blocks covered.
    pub blocks: u64,
    /// Array event count it agrees with.
    pub events: u64,
    /// Suspect regions as array byte ranges (checksums there are not used).
    pub suspect: Vec<(u64, u64)>,
}

impl Checksums {
    fn err(&self, what: &'static str, e: std::io::Error) -> EngineError {
        EngineError::io(&self.path.display().to_string(), what, e)
    }

    /// Compute a new sidecar at `path` from the array's current contents (overwriting a
    /// previous sidecar there; refusing any other existing file). `progress(done, total)`
    /// in bytes. The caller should have checked that redundancy is consistent first.
    pub fn init(path: &Path, arr: &Array, progress: &mut dyn FnMut(u64, u64)) -> Result<Checksums> {
        let ps = path.display().to_string();
        if let Ok(mut f) = File::open(path) {
            let mut m = [0u8; 8];
            let is_ours = std::io::Read::read_exact(&mut f, &mut m).is_ok() && &m == MAGIC;
            let empty = f.metadata().map(|m| m.len() == 0).unwrap_or(false);
            if !is_ours && !empty {
                return Err(EngineError::Refused {
                    device: ps,
                    why: "it exists and is not a raidkit checksum sidecar; give a new path or remove the file".into(),
                });
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| EngineError::io(&ps, "creating the checksum sidecar", e))?;
        let events = arr.events();
        let hdr = Header {
            region_blocks: REGION_BLOCKS,
            uuid: arr.uuid(),
            array_bytes: arr.size_bytes(),
            events,
            pending_events: events,
            valid: false,
        };
        let cs = Checksums {
            path: path.to_path_buf(),
            file,
            regions: (0..hdr.regions()).map(|_| AtomicU8::new(CLEAN)).collect(),
            hdr: Mutex::new(hdr.clone()),
            map_lock: Mutex::new(()),
            inflight: Mutex::new(Vec::new()),
            inflight_cv: std::sync::Condvar::new(),
            partial: Mutex::new(()),
        };
        cs.file
            .write_all_at(&hdr.encode(), 0)
            .map_err(|e| cs.err("writing the sidecar header", e))?;
        cs.file
            .set_len(hdr.table_off() + hdr.blocks() * 4)
            .map_err(|e| cs.err("sizing the sidecar", e))?;
        let size = arr.size_bytes();
        let step = 1u64 << 20;
        let mut buf = vec![0u8; step as usize];
        let mut off = 0;
        progress(0, size);
        while off < size {
            let n = step.min(size - off);
            let b = &mut buf[..n as usize];
            // An internal read: not counted as client IO.
            arr.read_inner(off, b)?;
            cs.store(off / BLOCK, b)?;
            off += n;
            progress(off, size);
        }
        cs.sync()?;
        lock(&cs.hdr).valid = true;
        cs.write_header()?;
        Ok(cs)
    }

    /// Open an existing sidecar for `arr`. Fails with a [`EngineError::Sidecar`] error if
    /// it is not a sidecar, belongs to another array or size, was never completed, or is
    /// stale (`stale: true`: the array was changed without it).
    pub fn open(path: &Path, arr: &Array) -> Result<Checksums> {
        let ps = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(arr.is_writable())
            .open(path)
            .map_err(|e| EngineError::io(&ps, "opening the checksum sidecar", e))?;
        let mut b = vec![0u8; HDR as usize];
        file.read_exact_at(&mut b, 0)
            .map_err(|e| EngineError::io(&ps, "reading the sidecar header", e))?;
        let hdr = Header::decode(&b, &ps)?;
        let bad = |why: String, stale: bool| EngineError::Sidecar {
            path: ps.clone(),
            why,
            stale,
        };
        if hdr.uuid != arr.uuid() {
            return Err(bad(format!("it belongs to another array (UUID {}, this array is {}); give this array's sidecar", crate::sb::uuid_text(arr.metadata(), &hdr.uuid), arr.uuid_text()), false));
        }
        if hdr.array_bytes != arr.size_bytes() {
            return Err(bad(
                format!(
                    "it covers {} bytes but the array has {}; recompute the sidecar",
                    hdr.array_bytes,
                    arr.size_bytes()
                ),
                true,
            ));
        }
        if !hdr.valid {
            return Err(bad(
                "its initialisation never completed; recompute the sidecar".into(),
                true,
            ));
        }
        let ev = arr.events();
        if ev != hdr.events && ev != hdr.pending_events {
            return Err(bad(format!("stale: it matches array event count {} but the members are at {ev} (the array was run without this sidecar, e.g. by the kernel); its checksums are ignored until they are recomputed from the data", hdr.events), true));
        }
        let mut map = vec![0u8; hdr.regions() as usize];
        file.read_exact_at(&mut map, HDR)
            .map_err(|e| EngineError::io(&ps, "reading the sidecar region map", e))?;
        let cs = Checksums {
            path: path.to_path_buf(),
            file,
            regions: map
                .iter()
                .map(|&m| AtomicU8::new(if m == CLEAN { CLEAN } else { SUSPECT }))
                .collect(),
            hdr: Mutex::new(hdr),
            map_lock: Mutex::new(()),
            inflight: Mutex::new(Vec::new()),
            inflight_cv: std::sync::Condvar::new(),
            partial: Mutex::new(()),
        };
        if map.contains(&WRITING) && arr.is_writable() {
            cs.write_map()?;
        }
        Ok(cs)
    }

    /// The sidecar's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Numbers for reports.
    pub fn info(&self) -> SidecarInfo {
        let h = lock(&self.hdr).clone();
        let rb = h.region_blocks * BLOCK;
        SidecarInfo {
            path: self.path.display().to_string(),
            blocks: h.blocks(),
            events: h.events,
            suspect: self
                .regions
                .iter()
                .enumerate()
                .filter(|(_, r)| r.load(Ordering::Relaxed) == SUSPECT)
                .map(|(i, _)| (i as u64 * rb, rb.min(h.array_bytes - i as u64 * rb)))
                .collect(),
        }
    }

    fn write_header(&self) -> Result<()> {
        let b = lock(&self.hdr).encode();
        self.file
            .write_all_at(&b, 0)
            .map_err(|e| self.err("writing the sidecar header", e))?;
        self.sync()
    }

    fn write_map(&self) -> Result<()> {
        let map: Vec<u8> = self
            .regions
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .collect();
        self.file
            .write_all_at(&map, HDR)
            .map_err(|e| self.err("writing the sidecar region map", e))?;
        self.sync()
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| self.err("flushing the sidecar", e))
    }

    /// Store the checksums of whole blocks starting at block `first`.
    fn store(&self, first: u64, data: &[u8]) -> Result<()> {
        let table = lock(&self.hdr).table_off();
        let mut out = Vec::with_capacity(data.len() / BLOCK as usize * 4);
        for b in data.chunks(BLOCK as usize) {
            out.extend_from_slice(&crc(b).to_le_bytes());
        }
        self.file
            .write_all_at(&out, table + first * 4)
            .map_err(|e| self.err("writing checksums", e))
    }

    fn load(&self, block: u64) -> Result<u32> {
        let table = lock(&self.hdr).table_off();
        let mut b = [0u8; 4];
        self.file
            .read_exact_at(&mut b, table + block * 4)
            .map_err(|e| self.err("reading checksums", e))?;
        Ok(u32::from_le_bytes(b))
    }

    /// Before the array writes bytes `[off, off+len)`: mark their regions "being written"
    /// (flushing the map if that changed it) and register the write as in flight.
    pub(crate) fn before_write(&self, off: u64, len: u64) -> Result<()> {
        let first = off / BLOCK;
        let end = (off + len).div_ceil(BLOCK);
        {
            // Two writes sharing a block must not interleave: otherwise the one whose data
            // landed first could store its checksum last, and the table would disagree
            // with the array (a false "wrong copy" verdict later).
            let mut f = lock(&self.inflight);
            while f.iter().any(|&(a, e)| a < end && first < e) {
                f = crate::locks::wait(&self.inflight_cv, f);
            }
            f.push((first, end));
        }
        let rb = lock(&self.hdr).region_blocks;
        let rs = (first / rb) as usize..(end.div_ceil(rb) as usize).min(self.regions.len());
        if self.regions[rs.clone()]
            .iter()
            .all(|r| r.load(Ordering::Relaxed) != CLEAN)
        {
            return Ok(());
        }
        let _g = lock(&self.map_lock);
        let mut changed = false;
        for r in &self.regions[rs] {
            if r.load(Ordering::Relaxed) == CLEAN {
                r.store(WRITING, Ordering::Relaxed);
                changed = true;
            }
        }
        let res = if changed { self.write_map() } else { Ok(()) };
        if res.is_err() {
            self.done_inflight(first, end);
        }
        res
    }

    fn done_inflight(&self, first: u64, end: u64) {
        let mut f = lock(&self.inflight);
        if let Some(i) = f.iter().position(|&x| x == (first, end)) {
            f.swap_remove(i);
        }
        self.inflight_cv.notify_all();
    }

    /// After the array wrote `buf` at byte `off` (`ok`: whether it succeeded): record the
    /// checksums of the blocks written (partially covered blocks are read back from the
    /// array) and end the in-flight registration.
    /// `read_back(offset, buf)` reads array bytes as they are now (an internal read of
    /// the array, not client IO).
    pub(crate) fn after_write(
        &self,
        off: u64,
        buf: &[u8],
        ok: bool,
        read_back: impl FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let first = off / BLOCK;
        let end = (off + buf.len() as u64).div_ceil(BLOCK);
        let res = if ok {
            self.record(off, buf, read_back)
        } else {
            // A failed write leaves the blocks' contents undefined: stop trusting their
            // region's checksums rather than record either version.
            self.mark_suspect(first, end)
        };
        self.done_inflight(first, end);
        res
    }

    fn mark_suspect(&self, first: u64, end: u64) -> Result<()> {
        let rb = lock(&self.hdr).region_blocks;
        let _g = lock(&self.map_lock);
        let rs = (first / rb) as usize..(end.div_ceil(rb) as usize).min(self.regions.len());
        for r in &self.regions[rs] {
            r.store(SUSPECT, Ordering::Relaxed);
        }
        self.write_map()
    }

    fn record(
        &self,
        off: u64,
        buf: &[u8],
        mut read_back: impl FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let end = off + buf.len() as u64;
        let full_lo = off.div_ceil(BLOCK) * BLOCK;
        let full_hi = (end / BLOCK * BLOCK).max(full_lo);
        if full_hi > full_lo {
            let a = (full_lo - off) as usize;
            let b = (full_hi - off) as usize;
            self.store(full_lo / BLOCK, &buf[a..b])?;
        }
        // Partially covered blocks at either end: read back and record under one lock so
        // the last writer of a block records what is on disk after every earlier write.
        let size = lock(&self.hdr).array_bytes;
        let mut partial: Vec<u64> = Vec::new();
        if off < full_lo {
            partial.push(off / BLOCK);
        }
        if end > full_hi {
            let b = (end - 1) / BLOCK;
            if partial.last() != Some(&b) {
                partial.push(b);
            }
        }
        if partial.is_empty() {
            return Ok(());
        }
        let _g = lock(&self.partial);
        for blk in partial {
            let s = blk * BLOCK;
            let n = BLOCK.min(size - s) as usize;
            let mut b = vec![0u8; n];
            read_back(s, &mut b)?;
            self.store(blk, &b)?;
        }
        Ok(())
    }

    /// Judge one block's bytes (`block`: array byte offset / 4096).
    pub fn judge(&self, block: u64, bytes: &[u8]) -> Result<Judgement> {
        let rb = lock(&self.hdr).region_blocks;
        let r = (block / rb) as usize;
        if self
            .regions
            .get(r)
            .is_none_or(|x| x.load(Ordering::Relaxed) == SUSPECT)
        {
            return Ok(Judgement::Unknown);
        }
        if lock(&self.inflight)
            .iter()
            .any(|&(a, e)| a <= block && block < e)
        {
            return Ok(Judgement::Unknown);
        }
        Ok(if self.load(block)? == crc(bytes) {
            Judgement::Match
        } else {
            Judgement::Mismatch
        })
    }

    /// Record the checksum of one block as given (after a repair made `bytes` the block's
    /// contents on every copy).
    pub(crate) fn set(&self, block: u64, bytes: &[u8]) -> Result<()> {
        self.store(block, bytes)
    }

    /// The array is going clean (no write in flight, members flushed): flush the table and
    /// clear the "being written" marks.
    pub(crate) fn mark_clean(&self) -> Result<()> {
        let _g = lock(&self.map_lock);
        if !self
            .regions
            .iter()
            .any(|r| r.load(Ordering::Relaxed) == WRITING)
        {
            return Ok(());
        }
        self.sync()?;
        for r in &self.regions {
            let _ = r.compare_exchange(WRITING, CLEAN, Ordering::Relaxed, Ordering::Relaxed);
        }
        self.write_map()
    }

    /// Superblocks are about to be written with event count `events`.
    pub(crate) fn events_pending(&self, events: u64) -> Result<()> {
        lock(&self.hdr).pending_events = events;
        self.write_header()
    }

    /// Superblocks were written with event count `events`.
    pub(crate) fn events_done(&self, events: u64) -> Result<()> {
        {
            let mut h = lock(&self.hdr);
            h.events = events;
            h.pending_events = events;
        }
        self.write_header()
    }
}
