//! Charts with `plotters`: PNG (bitmap backend) or SVG by the file's extension. Labels are
//! drawn with `ab_glyph` from a TrueType font read at run time: `$RAIDKIT_FONT`, else
//! DejaVu Sans from Debian's `fonts-dejavu-core` (or the usual other places).

use crate::error::{Result, ToolsError};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

static FONT: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Register the font once under the family name `sans-serif`.
fn ensure_font() -> Result<()> {
    FONT.get_or_init(|| {
        let env = std::env::var("RAIDKIT_FONT").ok();
        let candidates = env.iter().map(String::as_str).chain(FONT_PATHS.iter().copied());
        for p in candidates {
            if let Ok(bytes) = std::fs::read(p) {
                // The font must live as long as the process: plotters keeps a &'static.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err("no TrueType font found: install fonts-dejavu-core or set RAIDKIT_FONT=/path/to/font.ttf".into())
    })
    .clone()
    .map_err(ToolsError::Plot)
}

fn perr<E: std::fmt::Display>(e: E) -> ToolsError {
    ToolsError::Plot(e.to_string())
}

/// Chart size in pixels.
pub const SIZE: (u32, u32) = (900, 560);

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draw into `path` (`.png` or `.svg`) with `f`.
fn with_area(
    path: &Path,
    size: (u32, u32),
    f: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<()>,
    g: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<()>,
) -> Result<()> {
    ensure_font()?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "png" => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            root.fill(&WHITE).map_err(perr)?;
            f(&root)?;
            root.present().map_err(perr)
        }
        "svg" => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            root.fill(&WHITE).map_err(perr)?;
            g(&root)?;
            root.present().map_err(perr)
        }
        _ => Err(ToolsError::Invalid(format!(
            "{}: the chart file must end in .png or .svg",
            path.display()
        ))),
    }
}

/// A bar chart with categorical x labels and one or more series drawn side by side.
#[derive(Clone, Debug)]
pub struct Bars {
    /// Title.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description.
    pub y_desc: String,
    /// Category labels.
    pub labels: Vec<String>,
    /// `(series name, one value per label)`.
    pub series: Vec<(String, Vec<f64>)>,
    /// Logarithmic y axis (for latencies spanning decades).
    pub log_y: bool,
}

/// Lines over numeric or categorical x (points at 0, 1, 2, ... labelled with `labels`).
#[derive(Clone, Debug)]
pub struct Lines {
    /// Title.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description.
    pub y_desc: String,
    /// X labels, one per point.
    pub labels: Vec<String>,
    /// `(series name, one y per label)`.
    pub series: Vec<(String, Vec<f64>)>,
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, b: &Bars) -> Result<()> {
    let vals = || {
        b.series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|v| v.is_finite())
    };
    let ymax = vals().fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.12 } else { 1.0 };
    if b.log_y {
        let ymin = vals().filter(|&v| v > 0.0).fold(f64::INFINITY, f64::min);
        let ymin = if ymin.is_finite() { ymin / 2.0 } else { 1.0 };
        let ymax = (ymax * 2.0).max(ymin * 10.0);
        let chart = ChartBuilder::on(root)
            .caption(&b.title, ("sans-serif", 26))
            .margin(18)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (0..b.labels.len().max(1) - 1).into_segmented(),
                (ymin..ymax).log_scale(),
            )
            .map_err(perr)?;
        bars_into(chart, b, ymin)
    } else {
        let chart = ChartBuilder::on(root)
            .caption(&b.title, ("sans-serif", 26))
            .margin(18)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d((0..b.labels.len().max(1) - 1).into_segmented(), 0f64..ymax)
            .map_err(perr)?;
        bars_into(chart, b, 0.0)
    }
}

fn bars_into<'a, DB: DrawingBackend + 'a, Y>(
    mut chart: ChartContext<
        'a,
        DB,
        Cartesian2d<
            plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordusize>,
            Y,
        >,
    >,
    b: &Bars,
    base: f64,
) -> Result<()>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let n = b.labels.len().max(1);
    let labels = b.labels.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&b.x_desc)
        .y_desc(&b.y_desc)
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(perr)?;
    let k = b.series.len().max(1) as f64;
    // Each category is one segment of `seg` pixels; series `si` takes slot `si` of `k` in
    // its middle 80 %.
    let seg = f64::from(chart.plotting_area().dim_in_pixel().0) / n as f64;
    for (si, (name, vals)) in b.series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let left = (seg * (0.1 + 0.8 * si as f64 / k)).max(0.0) as u32;
        let right = (seg * (0.1 + 0.8 * (k - 1.0 - si as f64) / k)).max(0.0) as u32;
        let series = chart
            .draw_series(vals.iter().enumerate().map(|(i, &v)| {
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), base),
                        (SegmentValue::Exact(i + 1), v.max(base)),
                    ],
                    color.filled(),
                );
                r.set_margin(0, 0, left, right);
                r
            }))
            .map_err(perr)?;
        if b.series.len() > 1 {
            series.label(name.clone()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
            });
        }
    }
    if b.series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(perr)?;
    }
    Ok(())
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Lines) -> Result<()> {
    let n = l.labels.len().max(1);
    let ymax = l
        .series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.12 } else { 1.0 };
    let labels = l.labels.clone();
    let mut chart = ChartBuilder::on(root)
        .caption(&l.title, ("sans-serif", 26))
        .margin(18)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.3f64..(n as f64 - 0.7), 0f64..ymax)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc(&l.x_desc)
        .y_desc(&l.y_desc)
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(perr)?;
    for (si, (name, ys)) in l.series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let pts: Vec<(f64, f64)> = ys.iter().enumerate().map(|(i, y)| (i as f64, *y)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
            .map_err(perr)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 5, color.filled())))
            .map_err(perr)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(perr)?;
    Ok(())
}

/// Draw a bar chart to `path`.
pub fn bars(path: &Path, b: &Bars) -> Result<()> {
    with_area(path, SIZE, |a| draw_bars(a, b), |a| draw_bars(a, b))
}

/// Draw a line chart to `path`.
pub fn lines(path: &Path, l: &Lines) -> Result<()> {
    with_area(path, SIZE, |a| draw_lines(a, l), |a| draw_lines(a, l))
}

/// One chart of a [`stacked`] pair.
#[derive(Clone, Debug)]
pub enum Chart {
    /// Bars.
    Bars(Bars),
    /// Lines.
    Lines(Lines),
}

fn draw_chart<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, c: &Chart) -> Result<()> {
    match c {
        Chart::Bars(b) => draw_bars(a, b),
        Chart::Lines(l) => draw_lines(a, l),
    }
}

/// Two charts stacked vertically in one image (twice the usual height).
pub fn stacked(path: &Path, top: &Chart, bottom: &Chart) -> Result<()> {
    let size = (SIZE.0, SIZE.1 * 2);
    let f = |a: &DrawingArea<BitMapBackend<'_>, Shift>| {
        let (t, b) = a.split_vertically(SIZE.1);
        draw_chart(&t, top)?;
        draw_chart(&b, bottom)
    };
    let g = |a: &DrawingArea<SVGBackend<'_>, Shift>| {
        let (t, b) = a.split_vertically(SIZE.1);
        draw_chart(&t, top)?;
        draw_chart(&b, bottom)
    };
    with_area(path, size, f, g)
}
