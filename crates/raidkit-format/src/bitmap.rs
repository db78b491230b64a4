//! Internal write-intent bitmap superblock (256 bytes, little-endian) and bit helpers (§3).

use crate::{le, FormatError, Result};

/// Bitmap magic (`"bitm"`).
pub const BITMAP_MAGIC: u32 = 0x6d74_6962;
/// Size of the bitmap superblock.
pub const BITMAP_SB_BYTES: usize = 256;

/// Bitmap `state` bits.
pub mod state {
    /// Stale.
    pub const STALE: u32 = 1 << 1;
    /// Write error.
    pub const WRITE_ERROR: u32 = 1 << 2;
    /// Host-endian bits.
    pub const HOSTENDIAN: u32 = 1 << 15;
}

/// A decoded bitmap superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitmapSuper {
    /// 3, 4 (normal) or 5 (clustered).
    pub version: u32,
    /// Copy of the array UUID.
    pub uuid: [u8; 16],
    /// md events at last bitmap superblock write.
    pub events: u64,
    /// Events when bits were last allowed to be cleared.
    pub events_cleared: u64,
    /// Sectors covered.
    pub sync_size: u64,
    /// State bits.
    pub state: u32,
    /// Bytes per bit (power of two ≥ 512).
    pub chunksize: u32,
    /// Seconds between daemon passes.
    pub daemon_sleep: u32,
    /// Write-behind limit.
    pub write_behind: u32,
    /// Sectors reserved (0 = unknown).
    pub sectors_reserved: u32,
    /// Clustered nodes.
    pub nodes: u32,
    /// Clustered name.
    pub cluster_name: [u8; 64],
}

impl BitmapSuper {
    /// Decode and validate (magic, version 3..=5 accepted for reading — version 6 refused,
    /// chunksize power of two ≥ 512, daemon_sleep ≥ 1, write_behind ≤ 16383). The 120
    /// padding bytes at offset 136 are not checked (the kernel ignores them).
    pub fn parse(buf: &[u8]) -> Result<BitmapSuper> {
        le::need(buf, BITMAP_SB_BYTES)?;
        let magic = le::u32_at(buf, 0)?;
        if magic != BITMAP_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = le::u32_at(buf, 4)?;
        if !(3..=5).contains(&version) {
            return Err(FormatError::BadVersion(format!(
                "bitmap version {version} (supported: 3, 4, 5)"
            )));
        }
        let chunksize = le::u32_at(buf, 52)?;
        if chunksize < 512 || !chunksize.is_power_of_two() {
            return Err(FormatError::BadField {
                field: "chunksize",
                why: format!("{chunksize} is not a power of two >= 512"),
            });
        }
        let daemon_sleep = le::u32_at(buf, 56)?;
        if daemon_sleep < 1 {
            return Err(FormatError::BadField {
                field: "daemon_sleep",
                why: "0 (must be at least 1 second)".into(),
            });
        }
        let write_behind = le::u32_at(buf, 60)?;
        if write_behind > MAX_WRITE_BEHIND {
            return Err(FormatError::BadField {
                field: "write_behind",
                why: format!("{write_behind} > {MAX_WRITE_BEHIND}"),
            });
        }
        Ok(BitmapSuper {
            version,
            uuid: le::arr(buf, 8)?,
            events: le::u64_at(buf, 24)?,
            events_cleared: le::u64_at(buf, 32)?,
            sync_size: le::u64_at(buf, 40)?,
            state: le::u32_at(buf, 48)?,
            chunksize,
            daemon_sleep,
            write_behind,
            sectors_reserved: le::u32_at(buf, 64)?,
            nodes: le::u32_at(buf, 68)?,
            cluster_name: le::arr(buf, 72)?,
        })
    }

    /// Encode to 256 bytes (padding zero).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BITMAP_SB_BYTES];
        le::put(&mut b, 0, &BITMAP_MAGIC.to_le_bytes());
        le::put(&mut b, 4, &self.version.to_le_bytes());
        le::put(&mut b, 8, &self.uuid);
        le::put(&mut b, 24, &self.events.to_le_bytes());
        le::put(&mut b, 32, &self.events_cleared.to_le_bytes());
        le::put(&mut b, 40, &self.sync_size.to_le_bytes());
        le::put(&mut b, 48, &self.state.to_le_bytes());
        le::put(&mut b, 52, &self.chunksize.to_le_bytes());
        le::put(&mut b, 56, &self.daemon_sleep.to_le_bytes());
        le::put(&mut b, 60, &self.write_behind.to_le_bytes());
        le::put(&mut b, 64, &self.sectors_reserved.to_le_bytes());
        le::put(&mut b, 68, &self.nodes.to_le_bytes());
        le::put(&mut b, 72, &self.cluster_name);
        b
    }

    /// Number of bits (chunks): ceil(sync_size / (chunksize/512)). A (invalid) chunksize
    /// below 512 is treated as 512.
    pub fn chunks(&self) -> u64 {
        let cs = u64::from(self.chunksize / 512).max(1);
        self.sync_size.div_ceil(cs)
    }

    /// Bytes on disk: 256 + ceil(chunks/8).
    pub fn disk_bytes(&self) -> u64 {
        BITMAP_SB_BYTES as u64 + self.chunks().div_ceil(8)
    }

    /// Sectors mdadm reserves for this bitmap: [`BitmapSuper::disk_bytes`] rounded up to
    /// 4 KiB, in sectors (§3.3).
    pub fn space_sectors(&self) -> u64 {
        space_sectors(self.disk_bytes())
    }

    /// A version-4 bitmap superblock as mdadm 4.2 creates it (§3.4, §3.6): `events =
    /// events_cleared = 0`, state 0, `daemon_sleep = 5`, `write_behind = 0`,
    /// `sectors_reserved = 0`, not clustered.
    pub fn new_default(uuid: [u8; 16], sync_size: u64, chunksize: u32) -> BitmapSuper {
        BitmapSuper {
            version: 4,
            uuid,
            events: 0,
            events_cleared: 0,
            sync_size,
            state: 0,
            chunksize,
            daemon_sleep: DEFAULT_DAEMON_SLEEP,
            write_behind: 0,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
        }
    }

    /// The array sector/device data sector range `[start, end)` covered by bit `i`
    /// (§3.3), in the bitmap's address space; `end` is clipped to `sync_size`.
    pub fn chunk_range(&self, i: u64) -> (u64, u64) {
        let cs = u64::from(self.chunksize / 512).max(1);
        let start = i.saturating_mul(cs).min(self.sync_size);
        let end = start.saturating_add(cs).min(self.sync_size);
        (start, end)
    }
}

/// Largest `write_behind` the kernel accepts.
pub const MAX_WRITE_BEHIND: u32 = 16383;
/// mdadm's default `daemon_sleep` (seconds).
pub const DEFAULT_DAEMON_SLEEP: u32 = 5;
/// mdadm's minimum default bitmap chunk (64 MiB, §3.6).
pub const DEFAULT_MIN_CHUNK: u32 = 64 << 20;

/// `bytes` rounded up to 4 KiB, in sectors: the space mdadm reserves for a bitmap of
/// `bytes` bytes (superblock + bits).
pub fn space_sectors(bytes: u64) -> u64 {
    bytes.div_ceil(4096) * 8
}

/// Is bit `i` set in the bit bytes (the bytes following the 256-byte superblock)?
/// Bit `i` is bit `i % 8` (LSB = 0) of byte `i / 8`; out of range → false.
pub fn bit_is_set(bits: &[u8], i: u64) -> bool {
    usize::try_from(i / 8)
        .ok()
        .and_then(|byte| bits.get(byte))
        .is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// Set or clear bit `i` (out of range → no-op).
pub fn set_bit(bits: &mut [u8], i: u64, on: bool) {
    if let Some(b) = usize::try_from(i / 8)
        .ok()
        .and_then(|byte| bits.get_mut(byte))
    {
        let m = 1u8 << (i % 8);
        if on {
            *b |= m;
        } else {
            *b &= !m;
        }
    }
}

/// mdadm's default bitmap chunk in bytes for a bitmap covering `sync_size` sectors that
/// must fit in `room_sectors` sectors (superblock + bits): the smallest power of two
/// ≥ 4 KiB with `256 + ceil(chunks/8) ≤ room_sectors*512`, then at least 64 MiB (§3.6).
/// Capped at 2 GiB (`1 << 31`).
pub fn default_chunk_bytes(sync_size: u64, room_sectors: u64) -> u32 {
    let room_bytes = room_sectors.saturating_mul(512);
    let mut chunk: u64 = 4096;
    while chunk < 1 << 31 {
        let bits = sync_size.div_ceil(chunk / 512);
        if BITMAP_SB_BYTES as u64 + bits.div_ceil(8) <= room_bytes {
            break;
        }
        chunk *= 2;
    }
    (chunk as u32).max(DEFAULT_MIN_CHUNK)
}
