//! `raidkit trace analyze`: read/write mix, size histogram, per-process or per-export
//! breakdown of a `blkparse` text trace or a raidkit JSON-lines trace.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use raidkit_tools::charts;
use raidkit_tools::trace::{analyze, parse};
use std::io::Read;
use std::path::PathBuf;

/// `raidkit trace <what>`.
#[derive(Subcommand, Debug)]
pub enum TraceCmd {
    /// Summarise a blkparse text trace or a raidkit JSON-lines trace.
    Analyze(TraceAnalyzeArgs),
    /// Record every client request of a running array to a JSON-lines trace.
    Record(crate::ctl::trace::TraceRecordArgs),
}

/// `trace analyze`.
#[derive(Args, Debug)]
pub struct TraceAnalyzeArgs {
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Draw the size histogram to this file (.png or .svg).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// blkparse action to count as one IO (default Q if present, else D, else C).
    #[arg(long)]
    pub action: Option<char>,
    /// The trace (`blkparse -i dev` output, or raidkit JSON lines); `-` for stdin.
    pub file: String,
}

/// Run `trace`.
pub fn run(cmd: TraceCmd) -> Result<()> {
    match cmd {
        TraceCmd::Analyze(a) => analyze_cmd(a),
        TraceCmd::Record(a) => crate::ctl::trace::record(a),
    }
}

fn analyze_cmd(a: TraceAnalyzeArgs) -> Result<()> {
    let bytes = if a.file == "-" {
        let mut v = Vec::new();
        std::io::stdin()
            .read_to_end(&mut v)
            .context("reading stdin")?;
        v
    } else {
        std::fs::read(&a.file).with_context(|| format!("reading {}", a.file))?
    };
    let text = String::from_utf8_lossy(&bytes);
    let tr = parse(&text, &a.file)?;
    let r = analyze(&tr, a.action)?;
    if let Some(p) = &a.plot {
        charts::draw(p, &charts::trace_figure(&a.file, &r))?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        out!("{}", r.to_text());
    }
    Ok(())
}
