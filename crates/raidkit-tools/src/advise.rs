//! Filesystem alignment advice for an array: the numbers to give `mkfs.ext4` and
//! `mkfs.xfs`, each with a one-line reason.
//!
//! The rules (also in `docs/TOOLS.md`):
//!
//! * **data width** `D`: how many consecutive chunks of the array lie on different members
//!   before the pattern repeats one member: RAID0 `N`, RAID4/5 `N−1`, RAID6 `N−2`, RAID10
//!   `N / near-copies` (far and offset copies live in other rows or the other half of each
//!   member, so they do not narrow a row), RAID1 and linear: no striping.
//! * ext4 `stride` = chunk / block size; `stripe_width` = stride × D; xfs `su` = chunk,
//!   `sw` = D.
//! * ext4 block-group size `-g B`: mke2fs accepts multiples of 8 in `[256, 8 × block
//!   size]`. The advice is the **largest B that is a multiple of lcm(8, stride)** (so every
//!   group starts on a chunk boundary) **whose group starts, mapped through the array's
//!   real layout, land on the most distinct members**. The group-start member of group `g`
//!   is the member holding array block `g × B` ([`Geometry::locate`]); the sequence is
//!   periodic with a period dividing `D × N` groups, which is what is simulated.
//! * journal `-J size=M`: mke2fs's default journal size for the filesystem size (or 1 GiB
//!   when the size is unknown), rounded up to a multiple of both the stripe width and 1 MiB.

use crate::error::{Result, ToolsError};
use raidkit_layout::{names, Geometry, Level};
use serde::Serialize;

/// Filesystem to advise for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fs {
    /// ext4 (also ext2/ext3: same `-E stride,stripe_width`).
    Ext4,
    /// XFS.
    Xfs,
}

impl Fs {
    /// Parse `ext4`, `ext3`, `ext2` or `xfs`.
    pub fn parse(s: &str) -> Result<Fs> {
        match s.to_ascii_lowercase().as_str() {
            "ext4" | "ext3" | "ext2" => Ok(Fs::Ext4),
            "xfs" => Ok(Fs::Xfs),
            _ => Err(ToolsError::Invalid(format!(
                "unknown filesystem {s:?}: use ext4 or xfs"
            ))),
        }
    }
}

/// One advised number and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// The option (`stride`, `stripe_width`, `-g`, `-J size`, `su`, `sw`, `-l su`).
    pub what: String,
    /// Its value as written on the command line.
    pub value: String,
    /// One line: why this number.
    pub why: String,
}

/// The block-group analysis for ext4.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupAdvice {
    /// Advised blocks per group (`-g`), or None when no candidate is a multiple of the chunk.
    pub blocks_per_group: Option<u32>,
    /// Distinct members on which the advised group size puts group starts.
    pub members_hit: usize,
    /// mke2fs's default blocks per group (8 × block size).
    pub default_blocks_per_group: u32,
    /// Distinct members on which the default group size puts group starts.
    pub default_members_hit: usize,
    /// Number of members of the array.
    pub members: usize,
}

/// Everything `raidkit advise` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// Filesystem.
    pub fs: Fs,
    /// Level (`raid6`).
    pub level: String,
    /// Layout name as mdadm spells it.
    pub layout: String,
    /// Number of members.
    pub raid_devices: usize,
    /// Chunk in bytes (0 for RAID1/linear).
    pub chunk_bytes: u64,
    /// Filesystem block size in bytes.
    pub block_size: u32,
    /// Data width D in chunks (0 = not striped).
    pub data_disks: usize,
    /// ext4 stride in blocks (0 = not striped).
    pub stride: u64,
    /// ext4 stripe width in blocks (0 = not striped).
    pub stripe_width: u64,
    /// ext4 block-group analysis (ext4 only, striped arrays only).
    pub groups: Option<GroupAdvice>,
    /// Advised journal size in MiB (ext4, striped arrays).
    pub journal_mib: Option<u64>,
    /// The command to run, with `DEVICE` for the block device the array is served as.
    pub command: String,
    /// One line per number.
    pub reasons: Vec<Reason>,
    /// Extra remarks (layout caveats).
    pub notes: Vec<String>,
}

/// What the advice is computed from.
#[derive(Clone, Debug)]
pub struct AdviseInput {
    /// The array's geometry (from superblocks, or built from `--level/--raid-devices/--chunk`).
    pub geometry: Geometry,
    /// Filesystem.
    pub fs: Fs,
    /// Filesystem block size in bytes (1024..=65536, a power of two).
    pub block_size: u32,
    /// Size of the array in bytes, when known (chooses mke2fs's default journal size).
    pub array_bytes: Option<u64>,
}

/// Build a geometry from command-line words, for advice without members. The member size
/// is irrelevant to the advice and set to 1 TiB.
pub fn geometry_from_spec(
    level: Level,
    raid_devices: usize,
    chunk_bytes: u64,
    layout: Option<&str>,
) -> Result<Geometry> {
    let layout = match layout {
        Some(l) => names::parse_layout(level, l).map_err(|e| ToolsError::Invalid(e.to_string()))?,
        None => names::default_layout(level),
    };
    let chunk_sectors = if level.uses_chunk() {
        if chunk_bytes == 0 || !chunk_bytes.is_multiple_of(512) {
            return Err(ToolsError::Invalid(format!(
                "chunk {chunk_bytes} bytes is not a positive multiple of 512"
            )));
        }
        chunk_bytes / 512
    } else {
        0
    };
    let dev = (1u64 << 31).max(chunk_sectors);
    let dev = dev - dev % chunk_sectors.max(1);
    let members = match level {
        Level::Linear | Level::Raid0 => vec![dev; raid_devices],
        _ => Vec::new(),
    };
    Geometry::new(level, layout, chunk_sectors, raid_devices, dev, members)
        .map_err(|e| ToolsError::Invalid(e.to_string()))
}

/// Near copies, far copies, offset flag of a RAID10 layout.
fn r10_parts(layout: u32) -> (usize, usize, bool) {
    (
        (layout & 0xff) as usize,
        ((layout >> 8) & 0xff) as usize,
        layout & (1 << 16) != 0,
    )
}

/// Data width D (see the module docs) and a note when the level needs one.
pub fn data_width(g: &Geometry) -> (usize, Option<String>) {
    let n = g.raid_disks;
    match g.level {
        Level::Linear => (
            0,
            Some("linear concatenates members: there is no stripe to align to".into()),
        ),
        Level::Raid1 => (
            0,
            Some("RAID1 mirrors whole members: there is no stripe to align to".into()),
        ),
        Level::Raid0 => {
            let zones = g.zones();
            let d = zones.first().map_or(n, |z| z.devs.len());
            let note = (zones.len() > 1).then(|| {
                format!("members differ in size: the first zone stripes over {d} members, later zones over fewer; advice is for the first zone")
            });
            (d, note)
        }
        Level::Raid4 | Level::Raid5 => (n.saturating_sub(1), None),
        Level::Raid6 => (n.saturating_sub(2), None),
        Level::Raid10 => {
            let (nc, fc, offset) = r10_parts(g.layout);
            let nc = nc.max(1);
            let kind = if fc > 1 && offset {
                format!("offset layout ({fc} copies): each chunk's copies sit in the following rows, shifted by one member, so a row still holds {} different chunks", n / nc)
            } else if fc > 1 {
                format!("far layout ({fc} copies): the first copy of the array is striped RAID0-like over all members and the other copies live in later parts of each member, so a row holds {} different chunks (reads stripe like RAID0; every write also goes to the far copies)", n / nc)
            } else {
                format!("near layout ({nc} copies): each chunk is written to {nc} adjacent members, so a row of {n} members holds N/{nc} different chunks")
            };
            if !n.is_multiple_of(nc) {
                (0, Some(format!("{kind}; {n} members are not a multiple of {nc} near copies, so rows do not repeat on the same members and no stripe width fits")))
            } else {
                (n / nc, Some(kind))
            }
        }
    }
}

/// mke2fs's default journal size in blocks for a filesystem of `blocks` blocks
/// (`ext2fs_default_journal_size`, e2fsprogs ≥ 1.43). None below 2048 blocks (no journal).
pub fn default_journal_blocks(blocks: u64) -> Option<u64> {
    let v = if blocks < 2048 {
        return None;
    } else if blocks < 32768 {
        1024
    } else if blocks < 256 * 1024 {
        4096
    } else if blocks < 512 * 1024 {
        8192
    } else if blocks < 4096 * 1024 {
        16384
    } else if blocks < 8192 * 1024 {
        32768
    } else if blocks < 16384 * 1024 {
        65536
    } else if blocks < 32768 * 1024 {
        131072
    } else {
        262144
    };
    Some(v)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// Largest number of groups simulated when counting group-start members.
const MAX_GROUPS: u64 = 1 << 16;

/// Number of distinct members holding the first block of groups `0..period` for groups of
/// `bpg` blocks of `block_size` bytes (all copies counted for mirrored levels).
pub fn group_start_members(g: &Geometry, bpg: u64, block_size: u32) -> usize {
    let (d, _) = data_width(g);
    let n = g.raid_disks;
    let period = (d.max(1) as u64 * n as u64).clamp(1, MAX_GROUPS);
    let group_sectors = bpg * u64::from(block_size) / 512;
    // A geometry large enough to hold `period` groups.
    let need = group_sectors.saturating_mul(period + 1);
    let c = g.chunk_sectors.max(1);
    let dev = need.div_ceil(c).saturating_mul(c).saturating_mul(2);
    let members = match g.level {
        Level::Linear | Level::Raid0 => vec![dev; n],
        _ => Vec::new(),
    };
    let Ok(big) = Geometry::new(g.level, g.layout, g.chunk_sectors, n, dev, members) else {
        return 0;
    };
    let mut seen = vec![false; n];
    let mut count = 0;
    for grp in 0..period {
        let Some(p) = big.locate(grp * group_sectors) else {
            break;
        };
        for &(role, _) in &p.copies {
            if let Some(s) = seen.get_mut(role) {
                if !*s {
                    *s = true;
                    count += 1;
                }
            }
        }
        if count == n {
            break;
        }
    }
    count
}

/// The block-group size search (see the module docs). `stride` in blocks, ≥ 1.
pub fn advise_groups(g: &Geometry, block_size: u32, stride: u64) -> GroupAdvice {
    let max = 8 * u64::from(block_size);
    let step = lcm(8, stride.max(1));
    let default_members_hit = group_start_members(g, max, block_size);
    let mut best: Option<(u64, usize)> = None;
    let mut b = max - max % step;
    while b >= 256 {
        let hit = group_start_members(g, b, block_size);
        if best.is_none_or(|(_, h)| hit > h) {
            best = Some((b, hit));
        }
        if hit == g.raid_disks {
            break;
        }
        b -= step;
    }
    GroupAdvice {
        blocks_per_group: best.map(|(b, _)| b as u32),
        members_hit: best.map_or(0, |(_, h)| h),
        default_blocks_per_group: max as u32,
        default_members_hit,
        members: g.raid_disks,
    }
}

/// Compute the advice.
pub fn advise(input: &AdviseInput) -> Result<Advice> {
    let g = &input.geometry;
    let bs = input.block_size;
    if !(1024..=65536).contains(&bs) || !bs.is_power_of_two() {
        return Err(ToolsError::Invalid(format!(
            "block size {bs} is not a power of two between 1024 and 65536"
        )));
    }
    let (d, note) = data_width(g);
    let chunk_bytes = if g.level.uses_chunk() {
        g.chunk_sectors * 512
    } else {
        0
    };
    let mut notes: Vec<String> = note.into_iter().collect();
    let mut reasons = Vec::new();
    let striped = d > 0 && chunk_bytes > 0;
    if striped && chunk_bytes % u64::from(bs) != 0 {
        return Err(ToolsError::Invalid(format!(
            "the chunk ({chunk_bytes} bytes) is not a multiple of the block size ({bs}); use a smaller --block-size"
        )));
    }
    let stride = if striped {
        chunk_bytes / u64::from(bs)
    } else {
        0
    };
    let stripe_width = stride * d as u64;
    let layout = names::layout_name(g.level, g.layout);
    let row = Row {
        bs,
        chunk_bytes,
        data_chunks: d,
        stride,
        stripe_width,
        striped,
    };
    let mut groups = None;
    let mut journal_mib = None;
    let command = match input.fs {
        Fs::Ext4 => {
            let (cmd, ga, jm) = ext4_command(input, &row, &mut reasons, &mut notes);
            groups = ga;
            journal_mib = jm;
            cmd
        }
        Fs::Xfs => xfs_command(&row, &mut reasons, &mut notes),
    };
    if !striped {
        reasons.push(Reason {
            what: "(none)".into(),
            value: String::new(),
            why: "nothing to align: every block maps to whole members the same way".into(),
        });
    }
    Ok(Advice {
        fs: input.fs,
        level: g.level.to_string(),
        layout,
        raid_devices: g.raid_disks,
        chunk_bytes,
        block_size: bs,
        data_disks: d,
        stride,
        stripe_width,
        groups,
        journal_mib,
        command,
        reasons,
        notes,
    })
}

/// The stripe facts both file systems' advice is computed from.
struct Row {
    /// File system block size (bytes).
    bs: u32,
    /// Chunk size (bytes; 0 where the level has none).
    chunk_bytes: u64,
    /// Data chunks per row.
    data_chunks: usize,
    /// Blocks per chunk.
    stride: u64,
    /// Blocks per row of data chunks.
    stripe_width: u64,
    /// True when there is a stripe to align to.
    striped: bool,
}

/// `mkfs.ext4` for `row`: the command, the block-group advice and the journal size (MiB).
fn ext4_command(
    input: &AdviseInput,
    row: &Row,
    reasons: &mut Vec<Reason>,
    notes: &mut Vec<String>,
) -> (String, Option<GroupAdvice>, Option<u64>) {
    let g = &input.geometry;
    let Row {
        bs,
        chunk_bytes,
        data_chunks: d,
        stride,
        stripe_width,
        striped,
    } = *row;
    let mut groups = None;
    let mut journal_mib = None;
    let mut cmd = format!("mkfs.ext4 -b {bs}");
    if striped {
        cmd += &format!(" -E stride={stride},stripe_width={stripe_width}");
        reasons.push(Reason {
            what: "stride".into(),
            value: stride.to_string(),
            why: format!(
                "chunk {} / block {} = {stride} blocks written to one member before the next",
                kib(chunk_bytes),
                kib(u64::from(bs))
            ),
        });
        reasons.push(Reason {
                what: "stripe_width".into(),
                value: stripe_width.to_string(),
                why: format!("stride {stride} × {d} data chunks per row = {stripe_width} blocks ({}): a full-stripe write needs no parity read", kib(stripe_width * u64::from(bs))),
            });
        let ga = advise_groups(g, bs, stride);
        if let Some(b) = ga.blocks_per_group {
            cmd += &format!(" -g {b}");
            reasons.push(Reason {
                    what: "-g".into(),
                    value: b.to_string(),
                    why: format!(
                        "largest multiple of lcm(8, stride) ≤ {} whose group starts land on {} of {} members (the default {} lands on {})",
                        ga.default_blocks_per_group, ga.members_hit, ga.members, ga.default_blocks_per_group, ga.default_members_hit
                    ),
                });
        } else {
            notes.push(format!("the chunk is larger than the largest block group ({} blocks): group starts cannot be rotated with -g", 8 * u64::from(bs)));
        }
        groups = Some(ga);
        let fs_blocks = input.array_bytes.map(|b| b / u64::from(bs));
        let (jblocks, basis) = match fs_blocks.map(default_journal_blocks) {
            Some(Some(j)) => (j, "mke2fs's default for this size"),
            Some(None) => (0, ""),
            None => (
                262144,
                "mke2fs's default from 128 GiB up; the size is unknown",
            ),
        };
        if jblocks > 0 {
            let unit = lcm(stripe_width * u64::from(bs), 1 << 20);
            let bytes = (jblocks * u64::from(bs)).div_ceil(unit) * unit;
            let mib = bytes >> 20;
            cmd += &format!(" -J size={mib}");
            journal_mib = Some(mib);
            reasons.push(Reason {
                what: "-J size".into(),
                value: mib.to_string(),
                why: format!(
                    "{} MiB ({basis}) rounded up to a multiple of the stripe width {} and of 1 MiB",
                    (jblocks * u64::from(bs)) >> 20,
                    kib(stripe_width * u64::from(bs))
                ),
            });
        }
        notes.push("with ext4's default flex_bg, bitmaps and inode tables of 16 groups are packed together; group starts still hold the backup superblocks and group descriptors".into());
    }
    (cmd + " DEVICE", groups, journal_mib)
}

/// `mkfs.xfs` for `row`.
fn xfs_command(row: &Row, reasons: &mut Vec<Reason>, notes: &mut Vec<String>) -> String {
    let Row {
        bs,
        chunk_bytes,
        data_chunks: d,
        striped,
        ..
    } = *row;
    let mut cmd = format!("mkfs.xfs -b size={bs}");
    if striped {
        cmd += &format!(" -d su={},sw={d}", kib_word(chunk_bytes));
        reasons.push(Reason {
            what: "su".into(),
            value: kib_word(chunk_bytes),
            why: "the chunk: bytes written to one member before the next".into(),
        });
        reasons.push(Reason {
            what: "sw".into(),
            value: d.to_string(),
            why: format!(
                "{d} data chunks per row: allocation aligns to su × sw = {}",
                kib(chunk_bytes * d as u64)
            ),
        });
        if chunk_bytes <= 256 * 1024 {
            cmd += &format!(" -l su={}", kib_word(chunk_bytes));
            reasons.push(Reason {
                what: "-l su".into(),
                value: kib_word(chunk_bytes),
                why: "log writes padded to the chunk, so a log write never straddles two members"
                    .into(),
            });
        } else {
            notes.push("the chunk is over 256 KiB, the largest log stripe unit: mkfs.xfs uses 32 KiB for the log".into());
        }
    }
    cmd + " DEVICE"
}

fn kib(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b.is_multiple_of(1024) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn kib_word(b: u64) -> String {
    if b.is_multiple_of(1024) {
        format!("{}k", b >> 10)
    } else {
        b.to_string()
    }
}

impl Advice {
    /// The text `raidkit advise` prints.
    pub fn to_text(&self) -> String {
        let mut s =
            format!(
            "{} {} ({}), {} members, chunk {}, {} data chunks per row, {}-byte blocks\n\n  {}\n\n",
            self.level,
            self.layout,
            match self.fs {
                Fs::Ext4 => "ext4",
                Fs::Xfs => "xfs",
            },
            self.raid_devices,
            if self.chunk_bytes > 0 { kib(self.chunk_bytes) } else { "-".into() },
            self.data_disks,
            self.block_size,
            self.command
        );
        for r in &self.reasons {
            if r.value.is_empty() {
                s += &format!("  {}\n", r.why);
            } else {
                s += &format!("  {:<13} {:>7}  {}\n", r.what, r.value, r.why);
            }
        }
        for n in &self.notes {
            s += &format!("  note: {n}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adv(level: Level, n: usize, chunk: u64, layout: Option<&str>, fs: Fs) -> Advice {
        let geometry = geometry_from_spec(level, n, chunk, layout).unwrap();
        advise(&AdviseInput {
            geometry,
            fs,
            block_size: 4096,
            array_bytes: None,
        })
        .unwrap()
    }

    #[test]
    fn raid6_8_disks_8k_chunk() {
        let a = adv(Level::Raid6, 8, 8192, None, Fs::Ext4);
        assert_eq!((a.stride, a.stripe_width, a.data_disks), (2, 12, 6));
        let g = geometry_from_spec(Level::Raid6, 8, 8192, None).unwrap();
        // The default 32768 and the classic "multiple of chunk×(D+1)" 28000 both put group
        // starts on the same 3 of 8 members (left-symmetric RAID6: chunk L is data block
        // d = L mod 6 of stripe s = L / 6, on member (d − s + 1) mod 8); 32760 on 4, 32752 on
        // 6, 32744 on all 8.
        assert_eq!(group_start_members(&g, 32768, 4096), 3);
        assert_eq!(group_start_members(&g, 28000, 4096), 3);
        assert_eq!(group_start_members(&g, 32760, 4096), 4);
        assert_eq!(group_start_members(&g, 32752, 4096), 6);
        let ga = a.groups.clone().unwrap();
        assert_eq!(ga.default_members_hit, 3);
        assert_eq!(ga.blocks_per_group, Some(32744));
        assert_eq!(ga.members_hit, 8);
        // 1 GiB (size unknown) rounded up to a multiple of lcm(48 KiB, 1 MiB) = 3 MiB.
        assert_eq!(a.journal_mib, Some(1026));
        assert_eq!(
            a.command,
            "mkfs.ext4 -b 4096 -E stride=2,stripe_width=12 -g 32744 -J size=1026 DEVICE"
        );
    }

    #[test]
    fn raid5_left_symmetric() {
        // Left-symmetric RAID5 puts logical chunk L on member L mod N: group starts rotate
        // over all members iff B / stride is odd (N = 4), whether or not B is a multiple of
        // the stripe width (48 blocks).
        let a = adv(Level::Raid5, 4, 64 << 10, None, Fs::Ext4);
        assert_eq!((a.stride, a.stripe_width), (16, 48));
        let ga = a.groups.unwrap();
        assert_eq!(ga.default_members_hit, 1);
        assert_eq!((ga.blocks_per_group, ga.members_hit), (Some(32752), 4));
        let g = geometry_from_spec(Level::Raid5, 4, 64 << 10, None).unwrap();
        assert_eq!(group_start_members(&g, 48 * 681, 4096), 4);
        assert_eq!(group_start_members(&g, 48 * 682, 4096), 2);
    }

    #[test]
    fn raid0_default_group_hits_one_member() {
        let a = adv(Level::Raid0, 4, 64 << 10, None, Fs::Ext4);
        let ga = a.groups.unwrap();
        assert_eq!(ga.default_members_hit, 1);
        assert_eq!(ga.blocks_per_group, Some(32752));
        assert_eq!(ga.members_hit, 4);
    }

    #[test]
    fn xfs_and_raid10() {
        let a = adv(Level::Raid6, 8, 8192, None, Fs::Xfs);
        assert_eq!(
            a.command,
            "mkfs.xfs -b size=4096 -d su=8k,sw=6 -l su=8k DEVICE"
        );
        let a = adv(Level::Raid10, 4, 512 << 10, Some("n2"), Fs::Xfs);
        assert_eq!(a.data_disks, 2);
        assert_eq!(a.command, "mkfs.xfs -b size=4096 -d su=512k,sw=2 DEVICE");
        let a = adv(Level::Raid10, 4, 512 << 10, Some("f2"), Fs::Xfs);
        assert_eq!(a.data_disks, 4);
        let a = adv(Level::Raid10, 3, 512 << 10, Some("n2"), Fs::Ext4);
        assert_eq!((a.data_disks, a.stride), (0, 0));
        let a = adv(Level::Raid1, 2, 0, None, Fs::Ext4);
        assert_eq!(a.command, "mkfs.ext4 -b 4096 DEVICE");
    }

    #[test]
    fn journal_defaults_and_bad_input() {
        assert_eq!(default_journal_blocks(1000), None);
        assert_eq!(default_journal_blocks(100_000), Some(4096));
        assert_eq!(default_journal_blocks(40 << 20), Some(262144));
        let g = geometry_from_spec(Level::Raid5, 4, 4096, None).unwrap();
        let e = advise(&AdviseInput {
            geometry: g,
            fs: Fs::Ext4,
            block_size: 8192,
            array_bytes: None,
        });
        assert!(matches!(e, Err(ToolsError::Invalid(_))));
        assert!(Fs::parse("btrfs").is_err());
    }
}
