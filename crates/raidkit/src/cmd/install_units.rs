//! `raidkit install-units`: install the systemd units shipped in `systemd/`
//! (`raidkit-serve@.service`, `raidkit-monitor.service`) with this binary's path, make
//! `/etc/raidkit`, and reload systemd. See `docs/SERVICE.md`.

use anyhow::{Context, Result};
use clap::Args;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The units, as shipped (`@BIN@` stands for the binary's path).
pub const UNITS: [(&str, &str); 2] = [
    (
        "raidkit-serve@.service",
        include_str!("../../../../systemd/raidkit-serve@.service"),
    ),
    (
        "raidkit-monitor.service",
        include_str!("../../../../systemd/raidkit-monitor.service"),
    ),
];

/// `install-units`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  sudo raidkit install-units\n  sudo raidkit scan --config /etc/raidkit/vol.toml /dev/disk/by-id/ata-*\n  sudo systemctl enable --now raidkit-serve@vol raidkit-monitor\n  raidkit install-units --print"
)]
pub struct InstallUnitsArgs {
    /// Where unit files go.
    #[arg(long, default_value = "/etc/systemd/system", value_name = "DIR")]
    pub dir: PathBuf,
    /// Where the configs (`NAME.toml`, `monitor.env`) live; made if missing.
    #[arg(long, default_value = "/etc/raidkit", value_name = "DIR")]
    pub config_dir: PathBuf,
    /// The raidkit binary the units run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub bin: Option<PathBuf>,
    /// Do not run `systemctl daemon-reload`.
    #[arg(long)]
    pub no_reload: bool,
    /// Print the units instead of installing them.
    #[arg(long)]
    pub print: bool,
}

/// The unit texts with the binary path filled in.
pub fn rendered(bin: &Path) -> Vec<(&'static str, String)> {
    UNITS
        .iter()
        .map(|(n, t)| (*n, t.replace("@BIN@", &bin.display().to_string())))
        .collect()
}

/// Run `install-units`.
pub fn run(a: InstallUnitsArgs) -> Result<()> {
    let bin = match &a.bin {
        Some(b) => std::path::absolute(b)?,
        None => std::env::current_exe().context("finding this binary's path")?,
    };
    let units = rendered(&bin);
    if a.print {
        for (n, t) in &units {
            outln!("# {n}\n{t}");
        }
        return Ok(());
    }
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    for (n, t) in &units {
        let p = a.dir.join(n);
        std::fs::write(&p, t).with_context(|| format!("writing {}", p.display()))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))?;
        eprintln!("raidkit: installed {}", p.display());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&a.config_dir)
        .with_context(|| format!("creating {}", a.config_dir.display()))?;
    if !a.no_reload {
        match std::process::Command::new("systemctl")
            .arg("daemon-reload")
            .status()
        {
            Ok(s) if s.success() => {}
            Ok(s) => eprintln!("raidkit: systemctl daemon-reload failed ({s}); run it yourself"),
            Err(e) => {
                eprintln!("raidkit: could not run systemctl daemon-reload ({e}); run it yourself")
            }
        }
    }
    eprintln!(
        "raidkit: next: `raidkit scan --config {0}/NAME.toml DEVICES...`, then `systemctl enable --now raidkit-serve@NAME`; for events put RAIDKIT_MONITOR_ARGS=--mail root in {0}/monitor.env and `systemctl enable --now raidkit-monitor`",
        a.config_dir.display()
    );
    Ok(())
}
