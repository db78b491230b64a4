//! `raidkit`: Linux MD software RAID in userspace. Thin CLI over `raidkit-engine`.

mod advise;
mod bench_io;
mod bench_parity;
mod cli;
mod cmd;
mod control;
mod ctl_cmd;
mod mount;
mod probe;
mod serve;
mod trace;
mod units;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    if let Err(e) = cmd::run(args) {
        eprintln!("raidkit: error: {e:#}");
        std::process::exit(1);
    }
}
