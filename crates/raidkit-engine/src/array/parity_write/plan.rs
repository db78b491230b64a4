//! The one decision of a RAID4/5/6 write: given what a write finds in a stripe's rows (what
//! it writes, what it already knows, which members can be read, which are gone, whether
//! data is lost there), what to read, what to compute and what to write — the way md's
//! `handle_stripe` analyses a stripe once and then decides once. Pure: no IO, no locks.
//!
//! Every write to a parity stripe goes through [`plan`]: the direct path
//! (`parity_write::direct`), the stripe cache's write-out (`cache::drain`) and writes over
//! lost data (`parity_write::over_lost`, row by row). When a read the plan counted on
//! fails, the caller records it in the state ([`StripeState::read_failed`],
//! [`StripeState::reconstruct_failed`]) and asks again: the next plan never repeats a
//! step that failed, so the loop ends.

/// What a write finds in the rows `[lo, hi)` of one stripe (chunk sectors, the same rows
/// on every member). Counts, not per-block lists: the hot path builds it without
/// allocating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StripeState {
    /// Data blocks per stripe (K).
    pub data_blocks: usize,
    /// Parity blocks per stripe: 1 (RAID4/5) or 2 (RAID6).
    pub parity_blocks: usize,
    /// Sectors of each block in the rows (`hi - lo`).
    pub row_sectors: u64,
    /// Every data block is written whole, over the whole chunk (a full-stripe write).
    pub whole_stripe: bool,
    /// Data sectors to write to the members: the written spans, one per data block
    /// (a cached span may enclose sectors that are not new).
    pub span_sectors: u64,
    /// Data sectors of the rows known without reading a member (written now, or held
    /// by the stripe cache), of `data_blocks × row_sectors`.
    pub known_sectors: u64,
    /// Every member of the stripe (data, P, Q) is present and readable over the rows.
    pub all_readable: bool,
    /// Every parity member of the stripe is gone (failed or missing, no replacement
    /// being built): there is no parity to keep.
    pub parity_gone: bool,
    /// Reading the unknown data of whole rows (rather than old data and parity) pays
    /// later: the stripe cache keeps what is read and sees its rows reused.
    pub prefer_fill: bool,
    /// The rows hold lost data (bad blocks beyond the redundancy): written row run by row
    /// run, parity recomputed from known data or recorded stale.
    pub over_lost: bool,
    /// Data blocks not written in the rows whose member cannot be read there
    /// (`over_lost` only).
    pub unwritten_unreadable: usize,
    /// A written data block's member is missing (`over_lost` only).
    pub written_member_missing: bool,
    /// A read of a read-modify-write or reconstruct-write (or, over lost data, of the
    /// unwritten blocks) failed.
    pub read_failed: bool,
    /// Reconstructing the rows from redundancy failed.
    pub reconstruct_failed: bool,
    /// Some member of the stripe has bad blocks over the rows (looked at only once a
    /// reconstruction failed).
    pub bad_blocks: bool,
}

/// What to do with a write to a stripe's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Every data block is written whole: P/Q from the new data; no reads; write data
    /// and P/Q.
    FullStripe,
    /// No parity member is left: write the data alone; no reads (md does the same).
    DataOnly,
    /// Every data sector of the rows is known: P/Q from them; no reads; write the spans
    /// and P/Q.
    Compute,
    /// Read the old data under the spans and the old P/Q; P/Q += the change; write the
    /// spans and P/Q. Fewer reads than [`Plan::ReconstructWrite`].
    ReadModifyWrite,
    /// Read the data sectors of the rows that are not known; P/Q from all data; write
    /// the spans and P/Q.
    ReconstructWrite,
    /// Some member cannot be read: read what can be read, reconstruct the rest from
    /// parity, overlay the new data, P/Q from all data; write the spans and P/Q.
    Reconstruct,
    /// Over lost data, the unwritten blocks can all be read: read them, P/Q from all
    /// data; write the spans and P/Q (which makes the bad entries under them good).
    ReadUnwritten,
    /// Over lost data, some unwritten block cannot be known: record the parity of the
    /// rows as bad first (it goes stale), then write the data alone.
    StaleParity,
    /// Over lost data, a written block's member is missing: the data can be stored
    /// nowhere. Nothing is written.
    Refuse,
    /// The rows could not be reconstructed and members have bad blocks there: data is
    /// lost; write row run by row run, each planned with `over_lost`.
    OverLost,
    /// The rows could not be reconstructed and no bad block explains it: fail with the
    /// reconstruction's error.
    Fail,
}

impl StripeState {
    /// Data sectors of the rows not known without reading.
    pub(crate) fn unknown_sectors(&self) -> u64 {
        debug_assert!(
            self.known_sectors <= self.data_blocks as u64 * self.row_sectors,
            "stripe plan: {} known sectors in {} blocks of {} sectors",
            self.known_sectors,
            self.data_blocks,
            self.row_sectors
        );
        (self.data_blocks as u64 * self.row_sectors).saturating_sub(self.known_sectors)
    }

    /// Member sectors a read-modify-write reads: old data under the spans, old P/Q.
    pub(crate) fn rmw_reads(&self) -> u64 {
        self.span_sectors + self.row_sectors * self.parity_blocks as u64
    }

    /// Member sectors a reconstruct-write reads: the unknown data.
    pub(crate) fn rcw_reads(&self) -> u64 {
        self.unknown_sectors()
    }
}

/// Decide what a write to a stripe's rows does (see [`Plan`]).
pub(crate) fn plan(s: &StripeState) -> Plan {
    debug_assert!(
        (1..=2).contains(&s.parity_blocks) && s.data_blocks >= 1,
        "stripe plan: {} data and {} parity blocks",
        s.data_blocks,
        s.parity_blocks
    );
    debug_assert!(
        s.span_sectors <= s.data_blocks as u64 * s.row_sectors,
        "stripe plan: spans of {} sectors in {} blocks of {} sectors",
        s.span_sectors,
        s.data_blocks,
        s.row_sectors
    );
    if s.over_lost {
        return plan_over_lost(s);
    }
    if s.whole_stripe {
        return Plan::FullStripe;
    }
    if s.parity_gone {
        return Plan::DataOnly;
    }
    if s.unknown_sectors() == 0 {
        return Plan::Compute;
    }
    if s.reconstruct_failed {
        return if s.bad_blocks {
            Plan::OverLost
        } else {
            Plan::Fail
        };
    }
    if !s.all_readable || s.read_failed {
        return Plan::Reconstruct;
    }
    let (rmw, rcw) = (s.rmw_reads(), s.rcw_reads());
    // Reading whole rows fills the cache for later writes: worth it when rows are reused
    // and it costs at most twice the reads of read-modify-write.
    let fill = s.prefer_fill && rcw <= 2 * rmw;
    if rmw < rcw && !fill {
        Plan::ReadModifyWrite
    } else {
        Plan::ReconstructWrite
    }
}

/// One run of rows over lost data: recompute parity from known data where the data can be
/// known (reconstructed, or read where it is not written), else mark the parity stale.
fn plan_over_lost(s: &StripeState) -> Plan {
    if s.unknown_sectors() == 0 {
        return Plan::Compute;
    }
    if !s.reconstruct_failed {
        return Plan::Reconstruct;
    }
    if s.unwritten_unreadable == 0 && !s.read_failed {
        return Plan::ReadUnwritten;
    }
    if s.written_member_missing {
        Plan::Refuse
    } else {
        Plan::StaleParity
    }
}

#[cfg(test)]
mod tests;
