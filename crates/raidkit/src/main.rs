//! `raidkit`: Linux MD software RAID in userspace. Thin CLI over `raidkit-engine`.
//!
//! * [`cli`]: the command line (mdadm words).
//! * [`cmd`]: offline commands that open the members themselves.
//! * [`ctl`]: commands that talk to a running array over its control socket.
//! * [`control`]: the control socket (server and client sides) and the run directory.
//! * [`online`]: bringing arrays online for a frontend, shared by [`serve`] and [`mount`].
//! * [`serve`] (NBD) and [`mount`] (FUSE): the frontends.

#[macro_use]
mod out;
mod cli;
mod cmd;
mod control;
mod ctl;
mod mount;
mod online;
mod sd;
mod serve;
mod units;

use anyhow::{Context, Result};
use clap::Parser;
use cli::{Cli, Command};

fn main() {
    let args = Cli::parse();
    if let Err(e) = run(args) {
        if out::is_broken_pipe(&e) {
            std::process::exit(out::EXIT_PIPE);
        }
        // Under journald, `<3>` marks the line as an error (SyslogLevelPrefix).
        let level = if sd::stderr_is_journal() { "<3>" } else { "" };
        eprintln!("{level}raidkit: error: {}", out::error_text(&e));
        std::process::exit(1);
    }
}

/// Dispatch a command.
fn run(cli: Cli) -> Result<()> {
    use cmd::scrub;
    if let Some(tls) = member_tls(&cli.cmd) {
        tls.apply()?;
    }
    match cli.cmd {
        Command::Create(a) => cmd::create::run(a),
        Command::Examine(a) => cmd::examine::run(a),
        Command::Scan(a) => cmd::scan::run(a),
        Command::InstallUnits(a) => cmd::install_units::run(a),
        Command::Detail(a) => cmd::detail::run(a),
        Command::Export(a) => cmd::transfer::export(a),
        Command::Import(a) => cmd::transfer::import(a),
        Command::Check(a) => scrub::run(a, raidkit_engine::sync::SyncMode::Check),
        Command::Repair(a) => scrub::repair(a),
        Command::Checksums(c) => cmd::checksums::run(c),
        Command::Status(a) => ctl::status::run(a),
        Command::Manage(a) => ctl::manage::manage(a),
        Command::Grow(a) => cmd::grow::run(a),
        Command::SyncAction(a) => ctl::manage::sync_action(a),
        Command::Monitor(a) => ctl::monitor::run(a),
        Command::Stats(a) => ctl::stats::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Advise(a) => cmd::advise::run(a),
        Command::Bench(c) => cmd::bench_parity::cmd_bench(c),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Completions { shell } => {
            // Rendered in memory: clap_complete panics on a failed write.
            let mut c = <Cli as clap::CommandFactory>::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut c, "raidkit", &mut buf);
            out::write_bytes(&buf);
            Ok(())
        }
        Command::Man { command } => {
            let mut c = <Cli as clap::CommandFactory>::command();
            // Built, so subcommands carry the names the main page refers to
            // (`raidkit-create`).
            c.build();
            let mut page = &c;
            for word in &command {
                page = page.find_subcommand(word).ok_or_else(|| {
                    anyhow::anyhow!(
                        "no command {word:?} under `{}`: `raidkit --help` lists them",
                        page.get_display_name().unwrap_or_else(|| page.get_name())
                    )
                })?;
            }
            let mut buf = Vec::new();
            clap_mangen::Man::new(page.clone())
                .render(&mut buf)
                .context("rendering the man page")?;
            out::write_bytes(&buf);
            Ok(())
        }
    }
}

/// The member TLS options of a command that opens members itself (`serve` and `mount`
/// apply theirs with their other member options; `manage` and an online `grow` ask the
/// server, which opens members with its own).
fn member_tls(c: &Command) -> Option<&online::MemberTlsArgs> {
    Some(match c {
        Command::Create(a) => &a.tls,
        Command::Examine(a) => &a.tls,
        Command::Detail(a) => &a.asm.tls,
        Command::Export(a) => &a.asm.tls,
        Command::Import(a) => &a.asm.tls,
        Command::Check(a) => &a.asm.tls,
        Command::Repair(a) => &a.scrub.asm.tls,
        Command::Grow(a) => &a.tls,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::out::error_text;

    #[test]
    fn causes_are_said_once() {
        let io = std::io::Error::from_raw_os_error(2);
        let e = anyhow::Error::new(io).context("opening x: No such file or directory (os error 2)");
        assert_eq!(
            error_text(&e),
            "opening x: No such file or directory (os error 2)"
        );
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }

    #[test]
    fn permission_errors_say_what_to_do() {
        use crate::out::PERMISSION_HINT;
        let io = std::io::Error::from_raw_os_error(libc::EACCES);
        let e = anyhow::Error::new(io).context("opening /dev/sdb");
        assert_eq!(
            error_text(&e),
            format!("opening /dev/sdb: Permission denied (os error 13){PERMISSION_HINT}")
        );
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let e = anyhow::Error::new(io).context("opening x");
        assert_eq!(
            error_text(&e),
            "opening x: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn long_number_lists_become_runs() {
        use crate::out::summarise_numbers;
        let roles: Vec<String> = (3..=65533).map(|r| r.to_string()).collect();
        let msg = format!(
            "role(s) {} missing; give role(s) {}",
            roles.join(", "),
            roles.join(", ")
        );
        let e = anyhow::anyhow!(msg);
        assert_eq!(
            error_text(&e),
            "role(s) 3-65533 (65531 roles) missing; give role(s) 3-65533 (65531 roles)"
        );
        assert_eq!(
            summarise_numbers("roles 1, 2 and 3, 4, 5"),
            "roles 1, 2 and 3, 4, 5"
        );
        assert_eq!(summarise_numbers("at 4096, 8192: x"), "at 4096, 8192: x");
        assert_eq!(summarise_numbers("ü 12, 13"), "ü 12, 13");
    }
}
