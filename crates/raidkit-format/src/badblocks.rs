//! The bad-block log (§1.10): little-endian u64 entries, start in bits 63..10, length in
//! bits 9..0, units of 2^shift sectors, terminated by all-ones.

use crate::Result;

/// One bad range, in absolute device sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BadRange {
    /// First bad device sector (counted from the device start).
    pub start: u64,
    /// Number of sectors.
    pub len: u64,
}

/// Decode a log area (`bblog_size * 512` bytes). Entries after the first all-ones entry are
/// ignored; zero-length entries are an error.
pub fn parse(buf: &[u8], shift: u8) -> Result<Vec<BadRange>> {
    todo!("{} {shift}", buf.len())
}

/// Encode ranges into a log area of `area_bytes`, splitting ranges longer than 512 units,
/// filling unused slots with 0xff. Error if they do not fit or are not aligned to the unit.
pub fn encode(ranges: &[BadRange], shift: u8, area_bytes: usize) -> Result<Vec<u8>> {
    todo!("{} {shift} {area_bytes}", ranges.len())
}
