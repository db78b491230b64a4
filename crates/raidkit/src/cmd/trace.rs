//! `raidkit trace analyze`: read/write mix, size histogram, per-process or per-export
//! breakdown of a `blkparse` text trace or a raidkit JSON-lines trace.

use anyhow::{anyhow, Context, Result};
use clap::{Args, Subcommand};
use raidkit_tools::plot::{self, Bars};
use raidkit_tools::trace::{analyze, parse, size_label};
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
        let total: u64 = r.size_histogram.iter().map(|x| x.1).sum();
        // Every power of two from the smallest to the largest bucket, empty ones too.
        let mut buckets: Vec<(u64, u64)> = Vec::new();
        if let (Some(lo), Some(hi)) = (r.size_histogram.first(), r.size_histogram.last()) {
            let mut b = lo.0;
            while b <= hi.0 && buckets.len() < 64 {
                let c = r
                    .size_histogram
                    .iter()
                    .find(|x| x.0 == b)
                    .map_or(0, |x| x.1);
                buckets.push((b, c));
                b = b.saturating_mul(2);
            }
        }
        plot::bars(
            p,
            &Bars {
                title: format!(
                    "IO sizes: {} IOs, {:.0}% reads, mode {}",
                    total,
                    r.read_fraction * 100.0,
                    size_label(r.mode_size)
                ),
                x_desc: "size (power of two ≤ size)".into(),
                y_desc: "IOs".into(),
                labels: buckets.iter().map(|x| size_label(x.0)).collect(),
                series: vec![("IOs".into(), buckets.iter().map(|x| x.1 as f64).collect())],
                log_y: false,
            },
        )
        .map_err(|e| anyhow!(e))?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        out!("{}", r.to_text());
    }
    Ok(())
}
