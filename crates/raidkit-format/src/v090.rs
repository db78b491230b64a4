//! Superblock version 0.90 (§2): 4096 bytes at the last 64 KiB-aligned 64 KiB block,
//! host-endian (raidkit reads and writes little-endian, refuses big-endian).

use crate::{le, FormatError, Result};

/// Size of the superblock in bytes.
pub const SB_BYTES: usize = 4096;
/// Number of disk descriptors.
pub const MD_SB_DISKS: usize = 27;

/// Descriptor state bits.
pub mod disk_state {
    /// Faulty.
    pub const FAULTY: u32 = 1 << 0;
    /// Active.
    pub const ACTIVE: u32 = 1 << 1;
    /// In sync.
    pub const SYNC: u32 = 1 << 2;
    /// Removed.
    pub const REMOVED: u32 = 1 << 3;
    /// Write-mostly.
    pub const WRITEMOSTLY: u32 = 1 << 9;
    /// Fail-fast.
    pub const FAILFAST: u32 = 1 << 10;
}

/// Superblock `state` bits.
pub mod sb_state {
    /// Array clean.
    pub const CLEAN: u32 = 1 << 0;
    /// Errors.
    pub const ERRORS: u32 = 1 << 1;
    /// Internal bitmap present.
    pub const BITMAP_PRESENT: u32 = 1 << 8;
}

/// Device sector where the 0.90 superblock of a device of `dev_sectors` lives:
/// `(dev_sectors & !127) - 128`. None if the device is too small (< 128 sectors).
pub fn super_offset(dev_sectors: u64) -> Option<u64> {
    (dev_sectors & !127).checked_sub(128)
}

/// One disk descriptor (words 0..5 of a 32-word entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskDescriptor {
    /// Index in `disks[]`.
    pub number: u32,
    /// Device major.
    pub major: u32,
    /// Device minor.
    pub minor: u32,
    /// Role (raid disk slot).
    pub raid_disk: u32,
    /// State bits.
    pub state: u32,
}

/// A decoded 0.90 superblock (§2.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperblockV090 {
    /// Minor version: 90, or 91 while reshaping.
    pub minor_version: u32,
    /// Patch version.
    pub patch_version: u32,
    /// UUID words 0..3 (words 5, 13, 14, 15), host(LE) order.
    pub uuid_words: [u32; 4],
    /// Creation time (seconds).
    pub ctime: u32,
    /// Level.
    pub level: i32,
    /// Used device size in KiB.
    pub size_kib: u32,
    /// Descriptors in use.
    pub nr_disks: u32,
    /// Raid disks.
    pub raid_disks: u32,
    /// Preferred minor.
    pub md_minor: u32,
    /// Update time.
    pub utime: u32,
    /// State bits.
    pub state: u32,
    /// Active disks.
    pub active_disks: u32,
    /// Working disks.
    pub working_disks: u32,
    /// Failed disks.
    pub failed_disks: u32,
    /// Spare disks.
    pub spare_disks: u32,
    /// Event counter.
    pub events: u64,
    /// Events at last checkpoint.
    pub cp_events: u64,
    /// Resync checkpoint (sectors, u32).
    pub recovery_cp: u32,
    /// Reshape position (0.91).
    pub reshape_position: u64,
    /// New level (0.91).
    pub new_level: i32,
    /// Delta disks (0.91).
    pub delta_disks: i32,
    /// New layout (0.91).
    pub new_layout: u32,
    /// New chunk in bytes (0.91).
    pub new_chunk: u32,
    /// Layout.
    pub layout: u32,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Descriptors.
    pub disks: [DiskDescriptor; MD_SB_DISKS],
    /// This device's descriptor.
    pub this_disk: DiskDescriptor,
}

/// Magic as read on a little-endian host from a big-endian-written superblock.
const FOREIGN_MAGIC: u32 = 0xfc4e_2ba9;
/// Word index of `sb_csum`.
const CSUM_WORD: usize = 38;

fn word(buf: &[u8], w: usize) -> Result<u32> {
    le::u32_at(buf, w * 4)
}

fn put_word(buf: &mut [u8], w: usize, v: u32) {
    le::put(buf, w * 4, &v.to_le_bytes());
}

fn desc_at(buf: &[u8], w: usize) -> Result<DiskDescriptor> {
    Ok(DiskDescriptor {
        number: word(buf, w)?,
        major: word(buf, w + 1)?,
        minor: word(buf, w + 2)?,
        raid_disk: word(buf, w + 3)?,
        state: word(buf, w + 4)?,
    })
}

fn put_desc(buf: &mut [u8], w: usize, d: &DiskDescriptor) {
    put_word(buf, w, d.number);
    put_word(buf, w + 1, d.major);
    put_word(buf, w + 2, d.minor);
    put_word(buf, w + 3, d.raid_disk);
    put_word(buf, w + 4, d.state);
}

/// A count must be within `0..=27`.
fn check_count(field: &'static str, value: i128) -> Result<()> {
    if !(0..=MD_SB_DISKS as i128).contains(&value) {
        return Err(FormatError::OutOfRange {
            field,
            value,
            min: 0,
            max: MD_SB_DISKS as i128,
        });
    }
    Ok(())
}

fn csum_words(buf: &[u8]) -> u32 {
    let mut sum: u64 = 0;
    for (i, w) in buf.chunks_exact(4).take(SB_BYTES / 4).enumerate() {
        if i == CSUM_WORD {
            continue;
        }
        let mut b = [0u8; 4];
        b.copy_from_slice(w);
        sum += u64::from(u32::from_le_bytes(b));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

/// The ones'-complement 16-bit fold of a 32-bit checksum (two end-around-carry folds).
fn fold16(csum: u32) -> u32 {
    let once = (csum & 0xffff) + (csum >> 16);
    (once & 0xffff) + (once >> 16)
}

/// Whether a stored checksum is accepted against the computed one: equal, or equal in
/// their 16-bit folds, which is all the kernel compares (§2.4). A superblock the kernel
/// assembles must not be refused here; raidkit itself always writes the full value.
fn checksum_accepted(stored: u32, computed: u32) -> bool {
    stored == computed || fold16(stored) == fold16(computed)
}

impl SuperblockV090 {
    /// Decode and validate (magic, major 0, minor 90/91, checksum; `raid_disks`, `nr_disks`
    /// and, for minor 91, the pre-reshape count `raid_disks − delta_disks` within
    /// `0..=27` as [`FormatError::OutOfRange`]). `buf` ≥ 4096 bytes. The other fields are
    /// checked by [`SuperblockV090::validate`] and [`SuperblockV090::areas`].
    /// A magic that reads `0xfc4e2ba9` gives [`FormatError::ForeignEndian`].
    pub fn parse(buf: &[u8]) -> Result<SuperblockV090> {
        let (sb, ok) = Self::decode(buf)?;
        if !ok {
            let stored = word(buf, CSUM_WORD)?;
            return Err(FormatError::BadChecksum {
                stored,
                computed: csum_words(buf),
            });
        }
        Ok(sb)
    }

    /// Decode without checking the checksum; returns whether it was correct.
    pub fn parse_lenient(buf: &[u8]) -> Result<(SuperblockV090, bool)> {
        Self::decode(buf)
    }

    fn decode(buf: &[u8]) -> Result<(SuperblockV090, bool)> {
        le::need(buf, SB_BYTES)?;
        let magic = word(buf, 0)?;
        if magic == FOREIGN_MAGIC {
            return Err(FormatError::ForeignEndian);
        }
        if magic != crate::MD_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let major = word(buf, 1)?;
        let minor_version = word(buf, 2)?;
        if major != 0 || !(minor_version == 90 || minor_version == 91) {
            return Err(FormatError::BadVersion(format!(
                "{major}.{minor_version} (expected 0.90 or 0.91)"
            )));
        }
        // Counts that size loops over descriptors: at most 27 (MD_SB_DISKS).
        let raid_disks = word(buf, 10)?;
        check_count("raid_disks", raid_disks.into())?;
        check_count("nr_disks", word(buf, 9)?.into())?;
        let delta_disks = word(buf, 47)? as i32;
        if minor_version == 91 {
            let old = i64::from(raid_disks) - i64::from(delta_disks);
            if !(0..=MD_SB_DISKS as i64).contains(&old) {
                return Err(FormatError::OutOfRange {
                    field: "delta_disks",
                    value: delta_disks.into(),
                    min: i128::from(raid_disks) - MD_SB_DISKS as i128,
                    max: raid_disks.into(),
                });
            }
        }
        let ok = checksum_accepted(word(buf, CSUM_WORD)?, csum_words(buf));
        let mut disks = [DiskDescriptor::default(); MD_SB_DISKS];
        for (i, d) in disks.iter_mut().enumerate() {
            *d = desc_at(buf, 128 + 32 * i)?;
        }
        let u64_words = |lo: usize| -> Result<u64> {
            Ok(u64::from(word(buf, lo)?) | (u64::from(word(buf, lo + 1)?) << 32))
        };
        let sb = SuperblockV090 {
            minor_version,
            patch_version: word(buf, 3)?,
            uuid_words: [
                word(buf, 5)?,
                word(buf, 13)?,
                word(buf, 14)?,
                word(buf, 15)?,
            ],
            ctime: word(buf, 6)?,
            level: word(buf, 7)? as i32,
            size_kib: word(buf, 8)?,
            nr_disks: word(buf, 9)?,
            raid_disks,
            md_minor: word(buf, 11)?,
            utime: word(buf, 32)?,
            state: word(buf, 33)?,
            active_disks: word(buf, 34)?,
            working_disks: word(buf, 35)?,
            failed_disks: word(buf, 36)?,
            spare_disks: word(buf, 37)?,
            events: u64_words(39)?,
            cp_events: u64_words(41)?,
            recovery_cp: word(buf, 43)?,
            reshape_position: u64_words(44)?,
            new_level: word(buf, 46)? as i32,
            delta_disks,
            new_layout: word(buf, 48)?,
            new_chunk: word(buf, 49)?,
            layout: word(buf, 64)?,
            chunk_size: word(buf, 65)?,
            disks,
            this_disk: desc_at(buf, 992)?,
        };
        Ok((sb, ok))
    }

    /// Encode to 4096 bytes with the checksum computed (full 32-bit value). Words not
    /// represented in the struct (gvalid_words, not_persistent, root_pv/root_block,
    /// reserved words, the 27 reserved words of each descriptor) are written as zero.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SB_BYTES];
        put_word(&mut b, 0, crate::MD_MAGIC);
        put_word(&mut b, 1, 0);
        put_word(&mut b, 2, self.minor_version);
        put_word(&mut b, 3, self.patch_version);
        put_word(&mut b, 5, self.uuid_words[0]);
        put_word(&mut b, 6, self.ctime);
        put_word(&mut b, 7, self.level as u32);
        put_word(&mut b, 8, self.size_kib);
        put_word(&mut b, 9, self.nr_disks);
        put_word(&mut b, 10, self.raid_disks);
        put_word(&mut b, 11, self.md_minor);
        put_word(&mut b, 13, self.uuid_words[1]);
        put_word(&mut b, 14, self.uuid_words[2]);
        put_word(&mut b, 15, self.uuid_words[3]);
        put_word(&mut b, 32, self.utime);
        put_word(&mut b, 33, self.state);
        put_word(&mut b, 34, self.active_disks);
        put_word(&mut b, 35, self.working_disks);
        put_word(&mut b, 36, self.failed_disks);
        put_word(&mut b, 37, self.spare_disks);
        put_word(&mut b, 39, self.events as u32);
        put_word(&mut b, 40, (self.events >> 32) as u32);
        put_word(&mut b, 41, self.cp_events as u32);
        put_word(&mut b, 42, (self.cp_events >> 32) as u32);
        put_word(&mut b, 43, self.recovery_cp);
        put_word(&mut b, 44, self.reshape_position as u32);
        put_word(&mut b, 45, (self.reshape_position >> 32) as u32);
        put_word(&mut b, 46, self.new_level as u32);
        put_word(&mut b, 47, self.delta_disks as u32);
        put_word(&mut b, 48, self.new_layout);
        put_word(&mut b, 49, self.new_chunk);
        put_word(&mut b, 64, self.layout);
        put_word(&mut b, 65, self.chunk_size);
        for (i, d) in self.disks.iter().enumerate() {
            put_desc(&mut b, 128 + 32 * i, d);
        }
        put_desc(&mut b, 992, &self.this_disk);
        let csum = csum_words(&b);
        put_word(&mut b, CSUM_WORD, csum);
        b
    }

    /// §2.4 checksum of a 4096-byte buffer (word 38 treated as zero).
    pub fn checksum(buf: &[u8]) -> Result<u32> {
        le::need(buf, SB_BYTES)?;
        Ok(csum_words(buf))
    }

    /// The 16-byte array UUID (the four words as LE bytes, in order).
    pub fn uuid(&self) -> [u8; 16] {
        let mut u = [0u8; 16];
        for (dst, w) in u.chunks_exact_mut(4).zip(self.uuid_words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        u
    }

    /// Set the UUID from 16 bytes.
    pub fn set_uuid(&mut self, uuid: [u8; 16]) {
        for (w, src) in self.uuid_words.iter_mut().zip(uuid.chunks_exact(4)) {
            let mut b = [0u8; 4];
            b.copy_from_slice(src);
            *w = u32::from_le_bytes(b);
        }
    }

    /// The UUID as mdadm shows and parses it for 0.90 (`%08x` of each word, i.e. the words
    /// as big-endian bytes): `uuid::format(&sb.uuid_mdadm())` is mdadm's "UUID" line.
    /// (The kernel's raw view, also copied into a bitmap superblock, is [`Self::uuid`].)
    pub fn uuid_mdadm(&self) -> [u8; 16] {
        let mut u = [0u8; 16];
        for (dst, w) in u.chunks_exact_mut(4).zip(self.uuid_words) {
            dst.copy_from_slice(&w.to_be_bytes());
        }
        u
    }

    /// Set the UUID from mdadm's textual form (as parsed by [`crate::uuid::parse`]): each
    /// group of 4 bytes becomes one word, read big-endian. `--uuid=…:01234567` therefore
    /// stores word 15 = 0x01234567 (bytes `67 45 23 01` on disk), as mdadm 4.2 does.
    pub fn set_uuid_mdadm(&mut self, text_bytes: [u8; 16]) {
        for (w, src) in self.uuid_words.iter_mut().zip(text_bytes.chunks_exact(4)) {
            let mut b = [0u8; 4];
            b.copy_from_slice(src);
            *w = u32::from_be_bytes(b);
        }
    }

    /// Set the device counts as md writes them (it recounts its devices on every
    /// superblock write): `active` devices in sync in a role, `spare` working devices
    /// that are not (spares, and members still being rebuilt or caught up, which md
    /// records as spares), `faulty` failed devices not removed yet (counted in
    /// `nr_disks` only); every role without an in-sync device counts as failed.
    pub fn set_counts(&mut self, active: u32, spare: u32, faulty: u32) {
        self.nr_disks = active + spare + faulty;
        self.active_disks = active;
        self.working_disks = active + spare;
        self.failed_disks = self.raid_disks.saturating_sub(active);
        self.spare_disks = spare;
    }

    /// Resync offset as a v1-style value: MAX_SECTOR if CLEAN, `recovery_cp` if
    /// `cp_events == events`, else 0.
    pub fn resync_offset(&self) -> u64 {
        if self.state & sb_state::CLEAN != 0 {
            crate::MAX_SECTOR
        } else if self.cp_events == self.events {
            u64::from(self.recovery_cp)
        } else {
            0
        }
    }
}
