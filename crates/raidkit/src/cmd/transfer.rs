//! `raidkit export` and `import`: copy the array's contents out of or into a file.

use super::{asm_opts, bar, AssembleArgs};
use crate::units::{human, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::Array;
use raidkit_layout::Level;
use std::io::{Read, Write};
use std::path::PathBuf;

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

/// Bytes per read or write: whole stripes, about 8 MiB.
fn io_chunk(arr: &Array) -> usize {
    let g = arr.geometry();
    let stripe = match g.level {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => g.chunk_sectors * g.data_disks() as u64 * 512,
        Level::Raid0 | Level::Raid10 => g.chunk_sectors * g.raid_disks as u64 * 512,
        _ => 1 << 20,
    }
    .max(512);
    let target = 8u64 << 20;
    (target.div_ceil(stripe) * stripe) as usize
}

/// Run `export`.
pub fn export(a: ExportArgs) -> Result<()> {
    let arr = crate::cmd::assemble(&a.asm.members, &asm_opts(&a.asm, false)?)?;
    let mut out: Box<dyn Write> = if a.output == "-" {
        Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::io::stdout().lock(),
        ))
    } else {
        Box::new(
            std::fs::File::create(&a.output).with_context(|| format!("creating {}", a.output))?,
        )
    };
    let size = arr.size_bytes();
    let step = io_chunk(&arr);
    let mut buf = vec![0u8; step];
    let pb = bar(size, "export");
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(step as u64) as usize;
        arr.read(off, &mut buf[..n])?;
        out.write_all(&buf[..n])
            .with_context(|| format!("writing {}", a.output))?;
        off += n as u64;
        pb.set_position(off);
    }
    out.flush()
        .with_context(|| format!("writing {}", a.output))?;
    pb.finish_and_clear();
    if a.output != "-" {
        eprintln!(
            "raidkit: exported {} ({} bytes){} to {}",
            human(size),
            size,
            if arr.is_degraded() {
                let missing = arr.missing_roles();
                if missing.is_empty() {
                    ", degraded (a member is not in sync)".to_string()
                } else {
                    format!(
                        ", degraded: role(s) {} missing",
                        crate::units::role_list(&missing)
                    )
                }
            } else {
                String::new()
            },
            a.output
        );
    }
    Ok(())
}

/// Run `import`.
pub fn import(a: ImportArgs) -> Result<()> {
    let offset = parse_size(&a.offset, 1).map_err(|e| anyhow!("--offset: {e}"))?;
    let mut input: Box<dyn Read> = if a.input == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(&a.input).with_context(|| format!("opening {}", a.input))?)
    };
    let in_len = if a.input == "-" {
        None
    } else {
        std::fs::metadata(&a.input)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    };
    let arr = crate::cmd::assemble(&a.asm.members, &asm_opts(&a.asm, true)?)?;
    if let Some(p) = &a.checksums {
        super::checksums::attach_sidecar(&arr, p)?;
    }
    let size = arr.size_bytes();
    if offset > size || in_len.is_some_and(|l| offset + l > size) {
        bail!(
            "the data ({} bytes at offset {offset}) does not fit in the array ({size} bytes); nothing was written",
            in_len.unwrap_or(0)
        );
    }
    let res = import_into(&arr, &mut input, offset, in_len, &a.input);
    let clean = arr.mark_clean();
    let n = res?;
    clean?;
    eprintln!(
        "raidkit: imported {} ({n} bytes) at offset {offset}; array is clean",
        human(n)
    );
    Ok(())
}

fn import_into(
    arr: &Array,
    input: &mut dyn Read,
    offset: u64,
    in_len: Option<u64>,
    name: &str,
) -> Result<u64> {
    if arr.needs_resync() {
        eprintln!("raidkit: the array was not stopped cleanly; resyncing redundancy first");
        let mut pb: Option<ProgressBar> = None;
        sync::run(arr, SyncMode::Resync, false, &mut |d, t| {
            pb.get_or_insert_with(|| bar(t * 512, "resync"))
                .set_position(d * 512);
        })?;
    }
    let size = arr.size_bytes();
    let step = io_chunk(arr);
    let mut buf = vec![0u8; step];
    let pb = bar(in_len.unwrap_or(size - offset), "import");
    let mut off = offset;
    loop {
        // Fill the buffer completely unless at EOF, so writes stay stripe-aligned.
        let mut got = 0;
        while got < step {
            let r = input
                .read(&mut buf[got..])
                .with_context(|| format!("reading {name}"))?;
            if r == 0 {
                break;
            }
            got += r;
        }
        if got == 0 {
            break;
        }
        if off + got as u64 > size {
            bail!(
                "the input is larger than the array ({size} bytes from offset {offset}); the first {} bytes were written",
                off - offset
            );
        }
        arr.write(off, &buf[..got])?;
        off += got as u64;
        pb.set_position(off - offset);
        if got < step {
            break;
        }
    }
    arr.flush()?;
    pb.finish_and_clear();
    Ok(off - offset)
}
