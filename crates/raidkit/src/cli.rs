//! Command-line definitions (mdadm words).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  # RAID6 over four new 64 MiB sparse files, then put a file in and take it out again
  raidkit create --level 6 --raid-devices 4 --size 64M d0.img d1.img d2.img d3.img
  raidkit import --input /etc/services d0.img d1.img d2.img d3.img
  raidkit export --output copy.img d3.img d1.img d0.img d2.img   # any order
  raidkit detail d0.img d1.img d2.img d3.img
  raidkit examine --json d0.img

  # copy a dead NAS's RAID5 to an image, with one disk missing
  raidkit export --output nas.img /dev/sdb3 /dev/sdc3 /dev/sdd3
";

const REPAIR_EXAMPLES: &str = "\
Verdicts, windows (--from/--to) and the checksum sidecar work as for `check` (see
`raidkit check --help`); repair rewrites what the verdict proves wrong.

Examples:
  # scrub a stopped RAID5 and fix what is wrong
  raidkit repair d0.img d1.img d2.img

  # remove its bad-block logs: every entry is rewritten from redundancy first
  # (what `raidkit manage NAME --update no-bbl` does on a served array)
  raidkit repair --update no-bbl d0.img d1.img d2.img

  # the same when some entries hold data nobody can supply: those ranges become zeros
  raidkit repair --update no-bbl --zero-lost d0.img d1.img d2.img
";

/// Linux MD software RAID in userspace: same disks, same format as the kernel.
#[derive(Parser, Debug)]
#[command(name = "raidkit", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub cmd: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a new array (writes MD superblocks, then makes redundancy consistent).
    Create(CreateArgs),
    /// Print the MD superblock of each member, like `mdadm --examine`.
    Examine(ExamineArgs),
    /// Assemble read-only and report the array, like `mdadm --detail`.
    Detail(DetailArgs),
    /// Copy the array's contents to a file or stdout (degraded if it must be). Never writes a member.
    Export(ExportArgs),
    /// Write a file or stdin into the array, updating redundancy; leaves the array clean.
    Import(ImportArgs),
    /// Scrub offline: compare data with parity/mirrors and report mismatches as array byte ranges.
    Check(ScrubArgs),
    /// Scrub offline and fix: RAID6 rewrites only the block P+Q prove wrong; mirrors vote.
    /// With `--update no-bbl`: remove the bad-block logs instead.
    #[command(after_help = REPAIR_EXAMPLES)]
    Repair(RepairArgs),
    /// Checksum sidecar for scrub verdicts on 2-way mirrors and RAID5: `checksums init`, `checksums status`.
    #[command(subcommand)]
    Checksums(ChecksumsCmd),
    /// Every running array, like /proc/mdstat but readable: members, degraded, sync progress.
    Status(crate::ctl_cmd::StatusArgs),
    /// Change a running array's members: --fail, --remove, --add, --re-add, --replace [--with].
    Manage(crate::ctl_cmd::ManageArgs),
    /// Add or remove the write-intent bitmap: of a running array (NAME) or offline (MEMBER...).
    Grow(crate::ctl_cmd::GrowArgs),
    /// Start or stop background work on a running array: check, repair, resync, recover, idle.
    SyncAction(crate::ctl_cmd::SyncActionArgs),
    /// Stream events of running arrays; run a program, send mail or POST a webhook on each.
    Monitor(crate::ctl_cmd::MonitorArgs),
    /// Live IO statistics of running arrays: mix, size and latency histograms, member shares; Prometheus.
    Stats(crate::ctl_cmd::StatsArgs),
    /// The demo: a RAID6 over sparse files in ./raidkit-demo, filled and checked, then served over NBD.
    Demo(DemoArgs),
    /// Serve the array as one file over FUSE (losetup/mkfs/mount without NBD), in the foreground.
    Mount(crate::mount::MountArgs),
    /// mkfs alignment advice for an array (ext4 stride/stripe_width/-g/-J, xfs su/sw).
    Advise(crate::advise::AdviseArgs),
    /// Benchmarks: `bench parity` (parity kernels), `bench io` (fio-style workloads).
    #[command(subcommand)]
    Bench(crate::bench_parity::BenchCmd),
    /// IO trace tools: `trace analyze FILE` (blkparse text or raidkit JSON lines).
    #[command(subcommand)]
    Trace(crate::trace::TraceCmd),
    /// What a file or device is: rotational, 512 B vs 4 KiB direct writes, erase block.
    Probe(crate::probe::ProbeArgs),
    /// Export arrays over NBD (nbdinfo, qemu, nbd-client, nbdfuse) until SIGINT/SIGTERM.
    Serve(crate::serve::ServeArgs),
    /// Print shell completions.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// Options shared by commands that assemble an existing array.
#[derive(Args, Debug, Clone)]
pub struct AssembleArgs {
    /// Start a dirty degraded array (md's --force); accept stale members if needed to run.
    #[arg(long)]
    pub force: bool,
    /// Which superblock to use when a member carries both 0.90 and 1.x.
    #[arg(long, value_name = "0.90|1.0|1.1|1.2")]
    pub metadata: Option<String>,
    /// Member devices or files, in any order.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// `create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// RAID level: linear, 0, 1, 4, 5, 6, 10.
    #[arg(short, long)]
    pub level: String,
    /// Number of member slots (must equal the number of MEMBERs).
    #[arg(short = 'n', long = "raid-devices")]
    pub raid_devices: usize,
    /// Chunk size (bare number = KiB, as mdadm; default 512K).
    #[arg(short, long)]
    pub chunk: Option<String>,
    /// Layout: left-symmetric, right-asymmetric, parity-first, n2, f2, o2, ... (default per level).
    #[arg(short = 'p', long)]
    pub layout: Option<String>,
    /// Superblock version.
    #[arg(
        short = 'e',
        long,
        default_value = "1.2",
        value_name = "0.90|1.0|1.1|1.2"
    )]
    pub metadata: String,
    /// Array name (stored as HOMEHOST:NAME like mdadm).
    #[arg(short = 'N', long, default_value = "raidkit")]
    pub name: String,
    /// Home host stored with the name (default: this host's name; `none` for no prefix).
    #[arg(long)]
    pub homehost: Option<String>,
    /// Array UUID (default random).
    #[arg(short, long)]
    pub uuid: Option<String>,
    /// Write-intent bitmap.
    #[arg(short, long, default_value = "none", value_name = "internal|none")]
    pub bitmap: String,
    /// Bitmap chunk size (bare number = KiB; default as mdadm: 64M).
    #[arg(long)]
    pub bitmap_chunk: Option<String>,
    /// Reserve a bad-block log on every member where mdadm puts it (1.x only). Default:
    /// none; a member that later gets bad blocks gets a log then if there is room.
    #[arg(long)]
    pub bbl: bool,
    /// Do not make redundancy consistent (only if the members are known to be consistent, e.g. all zeros).
    #[arg(long)]
    pub assume_clean: bool,
    /// Create member files that do not exist, sparse, of this size (bare number = KiB).
    #[arg(short = 'z', long)]
    pub size: Option<String>,
    /// Overwrite members that hold data or another array's superblock.
    #[arg(short, long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep a checksum sidecar at PATH (one CRC-32 per 4 KiB of array data, outside the
    /// MD format) so scrubs of 2-way mirrors and RAID5 can tell which copy is right.
    #[arg(long, value_name = "PATH")]
    pub checksums: Option<PathBuf>,
    /// Members in role order: files, block devices, or the word `missing`.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// `examine`.
#[derive(Args, Debug)]
pub struct ExamineArgs {
    /// JSON output: a list with one object per member.
    #[arg(long)]
    pub json: bool,
    /// Devices or files.
    #[arg(required = true, value_name = "MEMBER")]
    pub members: Vec<PathBuf>,
}

/// `detail`.
#[derive(Args, Debug)]
pub struct DetailArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

/// `export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Output file, or `-` for stdout.
    #[arg(short, long, default_value = "-")]
    pub output: String,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

/// `import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Input file, or `-` for stdin.
    #[arg(short, long)]
    pub input: String,
    /// Byte offset in the array where the data goes.
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// Checksum sidecar of the array, updated with the data.
    #[arg(long, value_name = "PATH")]
    pub checksums: Option<PathBuf>,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

const SCRUB_HELP: &str = "\
Verdicts: RAID6 locates a single bad block from P+Q; 3+ way mirrors vote. 2-way mirrors
and RAID5 need the checksum sidecar (--checksums) to tell which copy is right; without it
the range is reported `undecided` and repair does what md does (mirrors: copy the first
copy over the others; RAID5: recompute parity from the data).

Examples:
  raidkit create --level 1 --raid-devices 2 --size 64M --checksums m.csum m0.img m1.img
  raidkit check m0.img m1.img                           # the whole array
  raidkit check --from 16M --to 32M m0.img m1.img       # only array bytes 16M..32M
  raidkit check --checksums m.csum --json m0.img m1.img
  raidkit repair --checksums m.csum m0.img m1.img       # rewrite the copy that is wrong
";

/// `check` / `repair`.
#[derive(Args, Debug)]
#[command(after_help = SCRUB_HELP)]
pub struct ScrubArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Start of the window, array byte offset (e.g. 10G; rounded down to a stripe row or 4 KiB).
    #[arg(long, value_name = "OFFSET")]
    pub from: Option<String>,
    /// End of the window, array byte offset, exclusive (rounded up; default: the end).
    #[arg(long, value_name = "OFFSET")]
    pub to: Option<String>,
    /// Checksum sidecar of this array (from `create --checksums` or `checksums init`).
    #[arg(long, value_name = "PATH")]
    pub checksums: Option<PathBuf>,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

const CHECKSUMS_HELP: &str = "\
The sidecar is a file outside the MD format: the members stay exactly what the kernel
assembles, and nothing needs the sidecar to assemble or read. If the array is run without
it (by the kernel, or raidkit without --checksums) it becomes stale: raidkit detects that
from the array's event count, says so, and ignores it until it is initialised again.

Examples:
  raidkit create --level 5 --raid-devices 3 --size 64M r0.img r1.img r2.img
  raidkit checksums init --checksums r.csum r0.img r1.img r2.img
  raidkit checksums status --checksums r.csum r0.img r1.img r2.img
  raidkit serve --checksums r.csum r0.img r1.img r2.img     # every write updates it
  raidkit repair --checksums r.csum r0.img r1.img r2.img
";

/// `checksums` subcommands.
#[derive(Subcommand, Debug)]
pub enum ChecksumsCmd {
    /// Check the array (refusing if redundancy disagrees anywhere), then compute the
    /// sidecar from its contents (overwrites a previous sidecar at PATH).
    #[command(after_help = CHECKSUMS_HELP)]
    Init(ChecksumsArgs),
    /// Whether the sidecar is usable for this array; which regions are suspect.
    #[command(after_help = CHECKSUMS_HELP)]
    Status(ChecksumsArgs),
}

/// `checksums init|status`.
#[derive(Args, Debug)]
pub struct ChecksumsArgs {
    /// The sidecar file.
    #[arg(long, value_name = "PATH", required = true)]
    pub checksums: PathBuf,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub asm: AssembleArgs,
}

/// `repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// Change array metadata instead of scrubbing. `no-bbl`: rewrite every bad-block entry
    /// from redundancy, then remove the bad-block log from every member (mdadm's
    /// `--update=no-bbl`). Refused, listing the lost array ranges, if some entries hold
    /// data no member can supply (see --zero-lost).
    #[arg(long, value_name = "WHAT", value_parser = ["no-bbl"])]
    pub update: Option<String>,
    /// With --update no-bbl: remove the logs even if data is lost; the lost ranges are
    /// replaced by zeros (restore them from a backup).
    #[arg(long, requires = "update")]
    pub zero_lost: bool,
    #[command(flatten)]
    pub scrub: ScrubArgs,
}

/// `demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for the member files (created if absent; an existing demo array there is reused).
    #[arg(long, default_value = "raidkit-demo")]
    pub dir: PathBuf,
    /// Size of each member file.
    #[arg(long, default_value = "64M")]
    pub size: String,
    /// Build and verify the array, then exit instead of serving it over NBD.
    #[arg(long)]
    pub no_serve: bool,
}
