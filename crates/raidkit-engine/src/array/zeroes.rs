//! Zeroing a range of the array (an NBD client's WRITE_ZEROES and TRIM): the range is
//! written through the ordinary write path as zeros — so bitmap bits, dirty marking,
//! stripe locks, the stripe cache, reshape windows, write-behind order and failed or
//! missing members are decided exactly as for any write — while every member write of
//! zeros that this produces gives the storage back instead where the member can
//! ([`crate::dev::io::punch_zeroes`]: a hole punched in a member file, WRITE_ZEROES sent to
//! an NBD member) and is written as zeros where it cannot. Mirrors and RAID0/RAID10 punch
//! each copy's mapped range; RAID4/5/6 punch whole stripes on every member, parity
//! included (the P and Q of all-zero data are zero), and write the stripes the range
//! covers only in part the usual way (new parity over the zeros). Afterwards the range
//! reads as zeros from every copy, and parity is consistent.

use crate::array::Array;
use crate::dev::io;
use crate::error::Result;
use raidkit_layout::SECTOR;

/// Most bytes zeroed per pass through the write path.
const MAX_PIECE_BYTES: u64 = 64 << 20;
/// Bytes zeroed per pass when a stripe is small.
const PIECE_BYTES: u64 = 4 << 20;

impl Array {
    /// Make `[offset, offset + len)` read as zeros on every copy, giving the storage back
    /// where the members can (see the module docs). Any alignment; an error as a write's.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.zero_range(offset, len, true)
    }

    /// [`Array::write_zeroes`], with `punch` false: zeros are written, never punched (an
    /// NBD client's WRITE_ZEROES with NO_HOLE: the storage stays allocated).
    pub fn zero_range(&self, offset: u64, len: u64, punch: bool) -> Result<()> {
        self.check_range(offset, len)?;
        let piece = self.zero_piece_bytes();
        let end = offset + len;
        let zeros = vec![0u8; piece.min(len) as usize];
        let _punch = punch.then(io::punch_zeroes);
        // Sectors zeroed only in part are written on their own (a write's partial
        // sectors are read, merged and written whole: not zeros).
        let first_whole = offset.div_ceil(SECTOR) * SECTOR;
        let last_whole = end / SECTOR * SECTOR;
        if first_whole >= last_whole {
            return self.write(offset, &zeros[..len as usize]);
        }
        self.write(offset, &zeros[..(first_whole - offset) as usize])?;
        let mut at = first_whole;
        while at < last_whole {
            // Pieces end on piece boundaries (whole stripes): only the first and last
            // may cover stripes in part.
            let next = (at / piece + 1) * piece;
            let n = (next.min(last_whole) - at) as usize;
            self.write(at, &zeros[..n])?;
            at += n as u64;
        }
        self.write(last_whole, &zeros[..(end - last_whole) as usize])
    }

    /// Bytes zeroed per pass: whole stripes of data (the largest multiple of the stripe
    /// within [`PIECE_BYTES`], at least one stripe, at most [`MAX_PIECE_BYTES`]).
    fn zero_piece_bytes(&self) -> u64 {
        let g = self.geometry();
        let Some(stripe) = g.full_stripe_sectors().map(|s| s * SECTOR) else {
            return PIECE_BYTES;
        };
        if stripe >= MAX_PIECE_BYTES {
            let chunk = (g.chunk_sectors * SECTOR).max(SECTOR);
            return (MAX_PIECE_BYTES / chunk).max(1) * chunk;
        }
        (PIECE_BYTES / stripe.max(SECTOR)).max(1) * stripe
    }
}
