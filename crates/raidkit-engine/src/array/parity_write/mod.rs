//! Writes to RAID4/5/6 stripes. A client write is cut into per-stripe [`Piece`]s here,
//! then goes through the stripe cache (`cache::write`) or straight to the members
//! ([`direct`]). Whatever the way, what a stripe write reads, computes and writes is
//! decided once, by [`plan::plan`]; writes over lost data go row run by row run
//! ([`over_lost`]).

pub(crate) mod direct;
pub(crate) mod over_lost;
pub(crate) mod plan;

use crate::array::Array;
use crate::error::{EngineError, Result};
use raidkit_layout::{StripeLayout, SECTOR};
use std::ops::Range;

/// The part of one data block of a stripe that a write covers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece<'a> {
    /// Data block (logical index in the stripe, `0..K`).
    pub(crate) block: usize,
    /// First chunk sector written.
    pub(crate) at: u64,
    /// Sectors written.
    pub(crate) sectors: u64,
    /// The bytes (`sectors × 512`).
    pub(crate) data: &'a [u8],
}

impl Piece<'_> {
    /// Chunk sectors `[at, at + sectors)`.
    pub(crate) fn rows(&self) -> Range<u64> {
        self.at..self.at + self.sectors
    }
}

/// The chunk sectors `[first, end)` the pieces cover, on every block (empty for none).
pub(crate) fn rows_of(pieces: &[Piece<'_>]) -> Range<u64> {
    let start = pieces.iter().map(|p| p.at).min().unwrap_or(0);
    let end = pieces.iter().map(|p| p.at + p.sectors).max().unwrap_or(0);
    start..end
}

/// Every member of a stripe: the data blocks' in logical order, then P, then Q.
pub(crate) fn stripe_members(layout: &StripeLayout) -> impl Iterator<Item = usize> + '_ {
    layout
        .data
        .iter()
        .copied()
        .chain(std::iter::once(layout.p))
        .chain(layout.q)
}

impl Array {
    /// Write whole sectors at array sector `start` of a RAID4/5/6 array, stripe by stripe.
    pub(crate) fn write_parity(&self, start: u64, buf: &[u8]) -> Result<()> {
        let chunk = self.geo.chunk_sectors;
        let stripe_sectors = chunk * self.geo.data_disks() as u64;
        let total = buf.len() as u64 / SECTOR;
        let mut done = 0;
        while done < total {
            let cur = start + done;
            let stripe = cur / stripe_sectors;
            let n = ((stripe + 1) * stripe_sectors - cur).min(total - done);
            let mut pieces = Vec::new();
            let mut off = 0;
            while off < n {
                let in_stripe = cur + off - stripe * stripe_sectors;
                let at = in_stripe % chunk;
                let sectors = (chunk - at).min(n - off);
                let from = ((done + off) * SECTOR) as usize;
                pieces.push(Piece {
                    block: (in_stripe / chunk) as usize,
                    at,
                    sectors,
                    data: &buf[from..from + (sectors * SECTOR) as usize],
                });
                off += sectors;
            }
            self.write_stripe(stripe, &pieces)?;
            done += n;
        }
        Ok(())
    }

    /// Write pieces of one stripe: through the stripe cache if there is one.
    pub(crate) fn write_stripe(&self, stripe: u64, pieces: &[Piece<'_>]) -> Result<()> {
        match &self.cache {
            Some(cache) => self.cache_write(cache, stripe, pieces),
            None => self.write_stripe_direct(stripe, pieces),
        }
    }

    /// After member failures during a write, make sure the array still runs (more failed
    /// members than the level survives: the write is not stored).
    pub(crate) fn check_still_runs(&self, stripe: u64) -> Result<()> {
        // Counted under the slots' lock, without collecting the roles (once per write).
        let missing = self
            .slots()
            .iter()
            .filter(|m| m.as_ref().is_none_or(|m| m.is_failed()))
            .count();
        if missing > self.geo.failures_tolerated() {
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
}
