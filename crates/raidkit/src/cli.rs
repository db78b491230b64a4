//! Command-line definitions (mdadm words).

use crate::cmd;
use crate::ctl;
use clap::{Parser, Subcommand};

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
    Create(cmd::create::CreateArgs),
    /// Print the MD superblock of each member, like `mdadm --examine`.
    Examine(cmd::examine::ExamineArgs),
    /// Find arrays on devices or files (like `mdadm --examine --scan`); print or write the
    /// `serve --config` file that serves them under the same names anywhere.
    Scan(cmd::scan::ScanArgs),
    /// Install the systemd units (`raidkit-serve@NAME` for /etc/raidkit/NAME.toml,
    /// `raidkit-monitor`) with this binary's path.
    InstallUnits(cmd::install_units::InstallUnitsArgs),
    /// Assemble read-only and report the array, like `mdadm --detail`.
    Detail(cmd::detail::DetailArgs),
    /// Copy the array's contents to a file or stdout (degraded if it must be). Never writes a member.
    Export(cmd::transfer::ExportArgs),
    /// Write a file or stdin into the array, updating redundancy; leaves the array clean.
    Import(cmd::transfer::ImportArgs),
    /// Scrub offline: compare data with parity/mirrors and report mismatches as array byte ranges.
    Check(cmd::scrub::ScrubArgs),
    /// Scrub offline and fix: RAID6 rewrites only the block P+Q prove wrong; mirrors vote;
    /// a sector that fails to read is written back from redundancy (as md does).
    /// With `--update no-bbl`: remove the bad-block logs instead.
    #[command(after_help = cmd::scrub::REPAIR_EXAMPLES)]
    Repair(cmd::scrub::RepairArgs),
    /// Checksum sidecar for scrub verdicts on 2-way mirrors and RAID5: `checksums init`, `checksums status`.
    #[command(subcommand)]
    Checksums(cmd::checksums::ChecksumsCmd),
    /// Every running array, like /proc/mdstat but readable: members, degraded, sync progress.
    Status(ctl::status::StatusArgs),
    /// Change a running array's members: --fail, --remove, --add, --re-add, --replace [--with].
    Manage(ctl::manage::ManageArgs),
    /// Reshape an array (devices, level, layout, chunk; --dry-run plans), or add/remove the
    /// write-intent bitmap: a running array (NAME) in the background, or offline (MEMBER...).
    Grow(cmd::grow::GrowArgs),
    /// Start or stop background work on a running array: check, repair, resync, recover, idle.
    SyncAction(ctl::manage::SyncActionArgs),
    /// Stream events of running arrays; run a program, send mail or POST a webhook on each.
    Monitor(ctl::monitor::MonitorArgs),
    /// Live IO statistics of running arrays: mix, size and latency histograms, member shares; Prometheus.
    Stats(ctl::stats::StatsArgs),
    /// The demo: a RAID6 over sparse files in ./raidkit-demo, filled and checked, then served over NBD.
    Demo(cmd::demo::DemoArgs),
    /// Serve the array as one file over FUSE (losetup/mkfs/mount without NBD), in the foreground.
    Mount(crate::mount::MountArgs),
    /// mkfs alignment advice for an array (ext4 stride/stripe_width/-g/-J, xfs su/sw).
    Advise(cmd::advise::AdviseArgs),
    /// Benchmarks: `bench parity` (parity kernels), `bench io` (fio-style workloads), `bench plot` (CSV to chart).
    #[command(subcommand)]
    Bench(cmd::bench_parity::BenchCmd),
    /// IO trace tools: `trace analyze FILE` (blkparse text or raidkit JSON lines).
    #[command(subcommand)]
    Trace(cmd::trace::TraceCmd),
    /// What a file or device is: rotational, 512 B vs 4 KiB direct writes, erase block; with
    /// several paths (an array's members), their sequential read speeds against each other and their links.
    Probe(cmd::probe::ProbeArgs),
    /// Export arrays over NBD (nbdinfo, qemu, nbd-client, nbdfuse) until SIGINT/SIGTERM.
    Serve(crate::serve::ServeArgs),
    /// Print shell completions.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): raidkit(1), or with a command the page the main one
    /// lists for it (`raidkit man create` prints raidkit-create(1)).
    Man {
        /// A command, and a subcommand of it (`bench parity`).
        #[arg(value_name = "COMMAND")]
        command: Vec<String>,
    },
}
