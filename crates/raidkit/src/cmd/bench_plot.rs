//! `raidkit bench plot`: draw a benchmark script's long-form CSV (`panel,x,series,value`)
//! as line charts, with raidkit's own chart code (`raidkit_tools::csvplot`).

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use raidkit_tools::charts;
use raidkit_tools::csvplot::{csv_figure, CsvPlot};
use raidkit_tools::plot::Unit;
use std::io::Read;
use std::path::PathBuf;

/// The values' unit on the y axis.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PlotUnit {
    /// A count per second or a plain count (IOPS): `10k`, `1.2M`.
    Count,
    /// Bytes per second: `520 MiB/s`.
    BytesPerSec,
    /// Nanoseconds: `850 µs`.
    Nanos,
    /// Percent (0-100).
    Percent,
}

/// `raidkit bench plot`.
///
/// Example: `raidkit bench plot docs/qd-sweep.csv --out qd.svg --unit count --y IOPS --x "queue depth / clients"`
#[derive(Args, Debug)]
pub struct BenchPlotArgs {
    /// The CSV (`-` = standard input): a header with the columns panel, x, series and value
    /// (others ignored), then one point per line; each panel becomes one line chart.
    pub csv: PathBuf,
    /// The image to write (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The figure's title.
    #[arg(long, default_value = "")]
    pub title: String,
    /// The subtitle (machine, load, date).
    #[arg(long, default_value = "")]
    pub subtitle: String,
    /// What the x labels are.
    #[arg(long = "x", default_value = "x")]
    pub x_desc: String,
    /// What the values are.
    #[arg(long = "y", default_value = "value")]
    pub y_desc: String,
    /// The values' unit.
    #[arg(long, value_enum, default_value = "count")]
    pub unit: PlotUnit,
    /// A logarithmic y axis.
    #[arg(long)]
    pub log_y: bool,
    /// Panels per row (1 or 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub per_row: u8,
}

/// Run `raidkit bench plot`.
pub fn run(a: BenchPlotArgs) -> Result<()> {
    let name = a.csv.display().to_string();
    let mut text = String::new();
    if name == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the CSV from standard input")?;
    } else {
        text = std::fs::read_to_string(&a.csv).with_context(|| format!("reading {name}"))?;
    }
    let how = CsvPlot {
        title: a.title,
        subtitle: a.subtitle,
        x_desc: a.x_desc,
        y_desc: a.y_desc,
        unit: match a.unit {
            PlotUnit::Count => Unit::Count,
            PlotUnit::BytesPerSec => Unit::BytesPerSec,
            PlotUnit::Nanos => Unit::Nanos,
            PlotUnit::Percent => Unit::Percent,
        },
        log_y: a.log_y,
        per_row: a.per_row as usize,
    };
    let fig = csv_figure(&text, &name, &how)?;
    charts::draw(&a.out, &fig).with_context(|| format!("drawing {}", a.out.display()))?;
    Ok(())
}
