//! What happens to a running array (member failed, rebuild finished, bad blocks...), as
//! typed events for logs and monitors.

use crate::array::Array;
use crate::locks::lock;

/// Something that happened to a running array, for logs and monitors.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ArrayEvent {
    /// A member was failed.
    MemberFailed {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Why.
        reason: String,
    },
    /// A read error was repaired by rewriting data recovered from redundancy.
    ReadErrorCorrected {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// First device sector rewritten.
        sector: u64,
        /// Sectors rewritten.
        sectors: u64,
    },
    /// A spare was added.
    SpareAdded {
        /// Device.
        device: String,
    },
    /// A rebuild onto a member started.
    RebuildStarted {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Where it starts (data sectors; non-zero when resumed).
        from: u64,
    },
    /// A hot replacement of a member started (or resumed).
    ReplaceStarted {
        /// Role slot.
        role: usize,
        /// The member being replaced (stays active until the copy is done).
        device: String,
        /// The device taking its place.
        replacement: String,
        /// Where the copy starts (data sectors; non-zero when resumed).
        from: u64,
    },
    /// A hot replacement finished: the replacement took the role, the old member was
    /// marked faulty and removed.
    ReplaceFinished {
        /// Role slot.
        role: usize,
        /// The member replaced.
        device: String,
        /// The device now holding the role.
        replacement: String,
        /// Array byte ranges that neither the old member nor redundancy could supply.
        lost: Vec<(u64, u64)>,
    },
    /// A rebuild finished.
    RebuildFinished {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Array byte ranges that could not be reconstructed.
        lost: Vec<(u64, u64)>,
    },
    /// Sectors of a member were recorded as bad (hold no valid data): a rebuild could not
    /// reconstruct them, a read could not be corrected, or a write to them failed.
    BadBlockRecorded {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// First bad device sector (absolute, like the on-disk log).
        sector: u64,
        /// Number of sectors.
        sectors: u64,
    },
    /// Bad sectors of a member were written successfully and hold valid data again (md's
    /// "made good"); they are gone from its bad-block log.
    BadBlockCleared {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// First cleared device sector (absolute, like the on-disk log).
        sector: u64,
        /// Number of sectors.
        sectors: u64,
    },
    /// A member that had no bad-block log got one, so bad blocks survive a restart.
    BadBlockLogCreated {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Log offset from the superblock, sectors (as `mdadm --examine` prints it).
        offset: i32,
        /// Why.
        reason: String,
    },
    /// Bad blocks could not be written to the member's on-disk log (0.90 metadata, no room
    /// for a log, log full): they are only known while this process runs.
    BadBlockNotPersisted {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The bad-block logs were removed from every member (`--update no-bbl`).
    BadBlockLogRemoved {
        /// Entries rewritten from redundancy (device sector ranges, per role).
        repaired: Vec<(usize, u64, u64)>,
        /// Array byte ranges whose data nobody could supply (zeroed with --force).
        lost: Vec<(u64, u64)>,
    },
    /// A member has been much slower than its peers over a window of reads.
    SlowMember {
        /// Role slot.
        role: usize,
        /// Device.
        device: String,
        /// The member's measured read service time, microseconds per MiB.
        member_us: u64,
        /// Median of its peers, microseconds per MiB.
        peers_us: u64,
    },
}

/// Something the assembly found and worked around, for the frontend to tell the admin
/// (the array runs; this is why it runs differently from what its metadata says).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum AssemblyNote {
    /// The superblocks record a write-intent bitmap, but it cannot be used: the array
    /// runs without it. Nothing in it is trusted or allocated from. Every superblock
    /// write leaves it further behind the array's event count, so md (and raidkit) treat
    /// it as stale later: every region is resynced, none is skipped on its word.
    BitmapIgnored {
        /// The member whose bitmap was read.
        device: String,
        /// What is wrong with it.
        why: String,
        /// True if the array was not stopped cleanly: it is resynced in full (a bitmap
        /// would have limited that to the regions it marked).
        full_resync: bool,
    },
    /// A network member could not be reached: the array runs without it (degraded), and
    /// it is re-added when it answers and is still the member it was.
    MemberUnreachable {
        /// The member's URI.
        device: String,
        /// The connection error.
        why: String,
    },
}

impl std::fmt::Display for AssemblyNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssemblyNote::BitmapIgnored {
                device,
                why,
                full_resync,
            } => write!(
                f,
                "{device}: the write-intent bitmap is ignored ({why}); the array runs without it{}. Remove and re-add the bitmap to have one again",
                if *full_resync {
                    " and, since it was not stopped cleanly, is resynced in full"
                } else {
                    ""
                }
            ),
            AssemblyNote::MemberUnreachable { device, why } => write!(
                f,
                "{device} could not be reached ({why}); the array runs without it (degraded) and keeps trying to connect: when it answers and is still this array's member, it is re-added and caught up"
            ),
        }
    }
}

impl Array {
    /// Receive the array's events (member failed, read error corrected, rebuild...).
    pub fn subscribe(&self) -> std::sync::mpsc::Receiver<ArrayEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        lock(&self.listeners).push(tx);
        rx
    }

    pub(crate) fn emit(&self, e: ArrayEvent) {
        lock(&self.listeners).retain(|tx| tx.send(e.clone()).is_ok());
    }

    /// What the assembly found wrong in the metadata and worked around (see
    /// [`AssemblyNote`]); frontends show these to the admin.
    pub fn assembly_notes(&self) -> &[AssemblyNote] {
        &self.notes
    }
}
