//! `raidkit demo`: a RAID6 over sparse files, filled and checked, then served over NBD.

use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use raidkit_engine::assemble::AssembleOptions;
use raidkit_engine::create::{create, default_homehost, CreateOptions, MemberSpec};
use raidkit_engine::sync::{self, SyncMode};
use raidkit_layout::Level;
use std::path::PathBuf;

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

/// Run `demo`.
pub fn run(a: DemoArgs) -> Result<()> {
    let size = parse_size(&a.size, 1024).map_err(|e| anyhow!("--size: {e}"))?;
    let members: Vec<PathBuf> = (0..4).map(|i| a.dir.join(format!("disk{i}.img"))).collect();
    let reuse = members.iter().all(|p| p.exists());
    if reuse {
        outln!("raidkit: reusing the demo array in {}", a.dir.display());
    } else {
        if a.dir.exists()
            && std::fs::read_dir(&a.dir)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true)
        {
            bail!(
                "{} exists and holds other files; remove it or pass --dir DIR",
                a.dir.display()
            );
        }
        std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
        demo_build(&members, size, &a.size)?;
    }
    if a.no_serve {
        return Ok(());
    }
    outln!();
    let mut argv = vec![
        "serve".to_string(),
        "--socket".into(),
        a.dir.join("demo.sock").display().to_string(),
        "--export".into(),
        "demo".into(),
    ];
    argv.extend(members.iter().map(|p| p.display().to_string()));
    outln!("$ raidkit {}", argv.join(" "));
    // The demo's fixed worker count, whatever the machine.
    argv.extend(["--workers".to_string(), "4".to_string()]);
    crate::serve::run(crate::serve::ServeArgs::from_words(&argv)?)
}

fn demo_build(members: &[PathBuf], size: u64, size_text: &str) -> Result<()> {
    outln!(
        "$ raidkit create --level 6 --raid-devices 4 --chunk 64K --size {size_text} {}",
        members
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut o = CreateOptions::new(
        Level::Raid6,
        members.iter().cloned().map(MemberSpec::Path).collect(),
    );
    o.chunk_bytes = Some(64 * 1024);
    o.create_size = Some(size);
    o.name = "demo".into();
    o.homehost = default_homehost();
    let arr = create(&o, &mut |_, _| {})?;
    let total = arr.size_bytes();
    outln!("created raid6 {} ({})", arr.uuid_text(), human(total));
    // Fill the array with a deterministic pattern, then read it back through every
    // degraded combination of two missing members.
    let mut data = vec![0u8; total as usize];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for w in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
    arr.write(0, &data)?;
    arr.stop()?;
    outln!("wrote {} of pseudo-random data", human(total));
    let mut checked = 0;
    for a1 in 0..4 {
        for b1 in a1 + 1..4 {
            let sub: Vec<PathBuf> = members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != a1 && *i != b1)
                .map(|(_, p)| p.clone())
                .collect();
            let arr = crate::cmd::assemble(&sub, &AssembleOptions::default())?;
            let mut back = vec![0u8; total as usize];
            arr.read(0, &mut back)?;
            if back != data {
                bail!("read-back without members {a1} and {b1} differs: this is a bug, please report it");
            }
            checked += 1;
        }
    }
    outln!("read back identical with every pair of members missing ({checked} combinations)");
    let arr = crate::cmd::assemble(members, &AssembleOptions::default())?;
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {})?;
    outln!("check: {} mismatches", rep.mismatches.len());
    Ok(())
}
