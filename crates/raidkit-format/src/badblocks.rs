//! The bad-block log (§1.10): little-endian u64 entries, start in bits 63..10, length in
//! bits 9..0, units of 2^shift sectors, terminated by all-ones.

use crate::{le, FormatError, Result};

/// One bad range, in absolute device sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BadRange {
    /// First bad device sector (counted from the device start).
    pub start: u64,
    /// Number of sectors.
    pub len: u64,
}

/// Largest length (in units) stored in one entry by writers.
pub const MAX_ENTRY_UNITS: u64 = 512;
/// The terminator / unused-slot value.
pub const END: u64 = u64::MAX;

fn bad(why: String) -> FormatError {
    FormatError::BadField {
        field: "bad-block log",
        why,
    }
}

/// Decode one raw entry into (start, len) in units (no shift applied).
pub fn decode_entry(raw: u64) -> (u64, u64) {
    (raw >> 10, raw & 0x3ff)
}

/// Encode one entry from (start, len) in units; None if `start ≥ 2^54` or `len` is not
/// in `1..=1023`.
pub fn encode_entry(start_units: u64, len_units: u64) -> Option<u64> {
    if start_units >> 54 != 0 || !(1..=0x3ff).contains(&len_units) {
        return None;
    }
    Some((start_units << 10) | len_units)
}

/// Decode a log area (`bblog_size * 512` bytes). Entries after the first all-ones entry are
/// ignored; zero-length entries are an error (the kernel only reads the log when the
/// BAD_BLOCKS feature bit is set; a never-written log area is all zero). Lengths up to
/// 1023 units are accepted. Start and length are multiplied by `2^shift`; an overflow or a
/// `shift ≥ 64`, or a range ending beyond 2^54 units or 2^64 sectors, is an error. A trailing partial entry (fewer than 8 bytes) is ignored.
pub fn parse(buf: &[u8], shift: u8) -> Result<Vec<BadRange>> {
    if shift >= 64 {
        return Err(bad(format!("bblog_shift {shift} too large")));
    }
    let mut out = Vec::new();
    for (i, e) in buf.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(e);
        let raw = u64::from_le_bytes(b);
        if raw == END {
            break;
        }
        let (start, len) = decode_entry(raw);
        if len == 0 {
            return Err(bad(format!("entry {i} ({raw:#018x}) has length 0")));
        }
        let scale = |v: u64| {
            v.checked_mul(1u64 << shift).ok_or_else(|| {
                bad(format!(
                    "entry {i} ({raw:#018x}) overflows with shift {shift}"
                ))
            })
        };
        if start + len > 1 << 54 {
            // Not representable by a writer (a split continuation would not fit).
            return Err(bad(format!(
                "entry {i} ({raw:#018x}) ends beyond 2^54 units"
            )));
        }
        let (start, len) = (scale(start)?, scale(len)?);
        if start.checked_add(len).is_none() {
            return Err(bad(format!(
                "entry {i} ({raw:#018x}) ends beyond 2^64 sectors"
            )));
        }
        out.push(BadRange { start, len });
    }
    Ok(out)
}

/// Encode ranges into a log area of `area_bytes`, splitting ranges longer than 512 units,
/// filling unused slots with 0xff. Error if they do not fit, are not aligned to the unit,
/// are empty, or start beyond what 54 bits of units can express. Ranges are written in
/// the order given.
pub fn encode(ranges: &[BadRange], shift: u8, area_bytes: usize) -> Result<Vec<u8>> {
    if shift >= 64 {
        return Err(bad(format!("bblog_shift {shift} too large")));
    }
    let unit = 1u64 << shift;
    let slots = area_bytes / 8;
    let mut out = vec![0xffu8; area_bytes];
    let mut n = 0usize;
    for r in ranges {
        if r.len == 0 || r.start % unit != 0 || r.len % unit != 0 {
            return Err(bad(format!(
                "range {}+{} is empty or not aligned to {unit} sectors",
                r.start, r.len
            )));
        }
        let mut start = r.start / unit;
        let mut left = r.len / unit;
        while left > 0 {
            let len = left.min(MAX_ENTRY_UNITS);
            let raw = encode_entry(start, len)
                .ok_or_else(|| bad(format!("range start {} too large", r.start)))?;
            if n >= slots {
                return Err(bad(format!(
                    "more than {slots} entries needed for {} ranges",
                    ranges.len()
                )));
            }
            le::put(&mut out, n * 8, &raw.to_le_bytes());
            n += 1;
            start += len;
            left -= len;
        }
    }
    Ok(out)
}
