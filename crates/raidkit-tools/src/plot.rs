//! Charts with `plotters`: PNG (bitmap backend) or SVG by the file's extension. Labels are
//! drawn with `ab_glyph` from a TrueType font read at run time: `$RAIDKIT_FONT`, else
//! DejaVu Sans from Debian's `fonts-dejavu-core` (or the usual other places).
//!
//! A [`Figure`] is a title saying what was measured, a subtitle with the headline numbers,
//! and rows of one or two [`Panel`]s. Values are given in base units (bytes, bytes per
//! second, nanoseconds, counts) with a [`Unit`]; axes are labelled in human units
//! (`10k`, `1.2 GiB/s`, `850 µs`), never `10000.0`.

use crate::error::{Result, ToolsError};
use crate::human;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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

/// Width of a figure in pixels.
pub const WIDTH: u32 = 1100;
/// Height of one row of panels in pixels.
pub const ROW_HEIGHT: u32 = 470;

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The colour of a series: the same name has the same colour in every panel (reads blue,
/// writes orange, p50 purple, p99 red), other series take the palette in order.
fn color_of(name: &str, index: usize) -> RGBColor {
    match name {
        "read" => PALETTE[0],
        "write" => PALETTE[1],
        "p50" => PALETTE[4],
        "p99" => PALETTE[3],
        _ => PALETTE[(index + 2) % PALETTE.len()],
    }
}

/// Whether a bar chart needs a legend: several series, a reference line, or one series whose
/// name the axis does not already say.
fn bars_legend(b: &Bars) -> bool {
    b.series.len() > 1
        || b.reference.is_some()
        || b.series
            .first()
            .is_some_and(|s| !s.0.eq_ignore_ascii_case(&b.y_desc))
}

/// What the values of an axis are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A count (IOs, IOPS): `950`, `10k`, `1.2M`.
    Count,
    /// Bytes: `4 KiB`, `1.5 GiB`.
    Bytes,
    /// Bytes per second: `520 MiB/s`.
    BytesPerSec,
    /// Decimal bytes per second, for device and link speeds: `520 MB/s`.
    DecimalBytesPerSec,
    /// Nanoseconds: `850 µs`, `12 ms`.
    Nanos,
    /// Percent (values 0–100): `25%`.
    Percent,
}

/// How the ticks of a linear axis are labelled: values are divided by `div` and printed with
/// `suffix`, so a whole axis uses one unit and plotters' round ticks stay round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AxisScale {
    /// Divisor applied to the values.
    pub div: f64,
    /// Unit after the number.
    pub suffix: &'static str,
}

impl Unit {
    /// The scale of a linear axis whose largest value is `max`.
    pub fn scale_for(self, max: f64) -> AxisScale {
        let pick = |steps: &[(f64, &'static str)]| {
            let mut best = steps[0];
            for &s in steps {
                if max >= s.0 {
                    best = s;
                }
            }
            AxisScale {
                div: best.0,
                suffix: best.1,
            }
        };
        const K: f64 = 1024.0;
        match self {
            Unit::Count => pick(&[(1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G")]),
            Unit::Bytes => pick(&[
                (1.0, " B"),
                (K, " KiB"),
                (K * K, " MiB"),
                (K * K * K, " GiB"),
                (K * K * K * K, " TiB"),
            ]),
            Unit::BytesPerSec => pick(&[
                (1.0, " B/s"),
                (K, " KiB/s"),
                (K * K, " MiB/s"),
                (K * K * K, " GiB/s"),
            ]),
            Unit::DecimalBytesPerSec => pick(&[
                (1.0, " B/s"),
                (1e3, " kB/s"),
                (1e6, " MB/s"),
                (1e9, " GB/s"),
            ]),
            Unit::Nanos => pick(&[(1.0, " ns"), (1e3, " µs"), (1e6, " ms"), (1e9, " s")]),
            Unit::Percent => AxisScale {
                div: 1.0,
                suffix: "%",
            },
        }
    }
    /// A single value in this unit, fully formatted (used for log axes and annotations).
    pub fn format(self, v: f64) -> String {
        match self {
            Unit::Count => human::count(v),
            Unit::Bytes => human::bytes(v),
            Unit::BytesPerSec => human::rate(v),
            Unit::DecimalBytesPerSec => human::mb_s(v),
            Unit::Nanos => human::duration_ns(v),
            Unit::Percent => format!("{}%", human::num(v)),
        }
    }
}

impl AxisScale {
    /// The label of a tick at scaled value `v`.
    pub fn label(&self, v: f64) -> String {
        if v == 0.0 {
            return "0".into();
        }
        format!("{}{}", human::num(v), self.suffix)
    }
}

/// A bar chart with categorical x labels and one or more series.
#[derive(Clone, Debug)]
pub struct Bars {
    /// Panel title.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description (the unit is on the ticks).
    pub y_desc: String,
    /// Unit of the values.
    pub y_unit: Unit,
    /// Category labels.
    pub labels: Vec<String>,
    /// `(series name, one value per label)`.
    pub series: Vec<(String, Vec<f64>)>,
    /// Logarithmic y axis (for latencies spanning decades).
    pub log_y: bool,
    /// Stack the series on each other (parts of one total) instead of side by side.
    pub stacked: bool,
    /// A dashed horizontal line: `(legend, value)` (an even share, a peer median).
    pub reference: Option<(String, f64)>,
}

/// Lines over categorical x (points at 0, 1, 2, ... labelled with `labels`).
#[derive(Clone, Debug)]
pub struct Lines {
    /// Panel title.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description (the unit is on the ticks).
    pub y_desc: String,
    /// Unit of the values.
    pub y_unit: Unit,
    /// X labels, one per point.
    pub labels: Vec<String>,
    /// `(series name, one y per label)`.
    pub series: Vec<(String, Vec<f64>)>,
    /// Logarithmic y axis (latencies spanning decades).
    pub log_y: bool,
}

/// One chart of a [`Figure`].
#[derive(Clone, Debug)]
pub enum Panel {
    /// Bars.
    Bars(Bars),
    /// Lines.
    Lines(Lines),
}

impl Panel {
    /// The panel's title.
    pub fn title(&self) -> &str {
        match self {
            Panel::Bars(b) => &b.title,
            Panel::Lines(l) => &l.title,
        }
    }
}

/// A titled image of panels.
#[derive(Clone, Debug)]
pub struct Figure {
    /// What was measured: array, level, members, workload, machine.
    pub title: String,
    /// The headline numbers and when (may be empty).
    pub subtitle: String,
    /// Rows of one or two panels each.
    pub rows: Vec<Vec<Panel>>,
}

impl Figure {
    /// Every panel, row by row.
    pub fn panels(&self) -> impl Iterator<Item = &Panel> {
        self.rows.iter().flatten()
    }
    /// Image size in pixels.
    pub fn size(&self) -> (u32, u32) {
        (
            WIDTH,
            header_height(self) + ROW_HEIGHT * self.rows.len().max(1) as u32,
        )
    }
}

fn header_height(f: &Figure) -> u32 {
    if f.subtitle.is_empty() {
        52
    } else {
        80
    }
}

/// The largest finite value of all series (stacked: of the sums), and the reference.
fn y_max(b: &Bars) -> f64 {
    let n = b.labels.len();
    let mut m = b.reference.as_ref().map_or(0.0, |r| r.1);
    if b.stacked {
        for i in 0..n {
            let s: f64 = b
                .series
                .iter()
                .filter_map(|s| s.1.get(i))
                .filter(|v| v.is_finite())
                .sum();
            m = m.max(s);
        }
    } else {
        for v in b.series.iter().flat_map(|s| s.1.iter()) {
            if v.is_finite() {
                m = m.max(*v);
            }
        }
    }
    m
}

fn label_at(labels: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() < 1e-6 && i >= 0.0 {
        labels.get(i as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, b: &Bars) -> Result<()> {
    let n = b.labels.len().max(1);
    let x = -0.5f64..(n as f64 - 0.5);
    let max = y_max(b);
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&b.title, ("sans-serif", 19))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(84);
    if b.log_y {
        let ymin = b
            .series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|&v| v > 0.0 && v.is_finite())
            .fold(f64::INFINITY, f64::min);
        let ymin = if ymin.is_finite() { ymin / 2.0 } else { 1.0 };
        let ymax = (max * if bars_legend(b) { 6.0 } else { 2.5 }).max(ymin * 10.0);
        let chart = builder
            .build_cartesian_2d(x, (ymin..ymax).log_scale())
            .map_err(perr)?;
        let unit = b.y_unit;
        bars_into(chart, b, 1.0, ymin, &move |v| unit.format(*v))
    } else {
        let scale = b.y_unit.scale_for(max);
        let room = if bars_legend(b) { 1.35 } else { 1.12 };
        let top = if max > 0.0 {
            max / scale.div * room
        } else {
            1.0
        };
        let chart = builder.build_cartesian_2d(x, 0f64..top).map_err(perr)?;
        bars_into(chart, b, scale.div, 0.0, &move |v| scale.label(*v))
    }
}

type Chart2d<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>;

fn bars_into<'a, DB: DrawingBackend + 'a, Y>(
    mut chart: Chart2d<'a, DB, Y>,
    b: &Bars,
    div: f64,
    base: f64,
    ylab: &dyn Fn(&f64) -> String,
) -> Result<()>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let n = b.labels.len().max(1);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&b.x_desc)
        .y_desc(&b.y_desc)
        .x_labels(n)
        .y_labels(8)
        .x_label_formatter(&|v| label_at(&b.labels, *v))
        .y_label_formatter(ylab)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(perr)?;
    let k = if b.stacked {
        1.0
    } else {
        b.series.len().max(1) as f64
    };
    let mut cum = vec![base; n];
    for (si, (name, vals)) in b.series.iter().enumerate() {
        let color = color_of(name, si);
        // Category i spans [i-0.4, i+0.4]; side by side, series si takes slot si of k.
        let slot = if b.stacked { 0.0 } else { si as f64 };
        let w = 0.8 / k;
        let rects: Vec<Rectangle<(f64, f64)>> = vals
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, &v)| {
                let x0 = i as f64 - 0.4 + w * slot;
                let lo = if b.stacked { cum[i] } else { base };
                let hi = if b.stacked {
                    cum[i] + v / div
                } else {
                    (v / div).max(base)
                };
                if b.stacked {
                    cum[i] = hi;
                }
                Rectangle::new([(x0, lo), (x0 + w * 0.97, hi)], color.filled())
            })
            .collect();
        let series = chart.draw_series(rects).map_err(perr)?;
        if bars_legend(b) {
            series.label(name.clone()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
            });
        }
    }
    if let Some((name, v)) = &b.reference {
        let y = v / div;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, y), (n as f64 - 0.5, y)],
                8,
                6,
                BLACK.stroke_width(2),
            ))
            .map_err(perr)?
            .label(name.clone())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(2)));
    }
    if bars_legend(b) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(perr)?;
    }
    Ok(())
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Lines) -> Result<()> {
    let n = l.labels.len().max(1);
    let vals = || {
        l.series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|v| v.is_finite())
    };
    let max = vals().fold(0.0f64, f64::max);
    let x = -0.3f64..(n as f64 - 0.7);
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&l.title, ("sans-serif", 19))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(84);
    if l.log_y {
        let ymin = vals().filter(|&v| v > 0.0).fold(f64::INFINITY, f64::min);
        let ymin = if ymin.is_finite() { ymin / 2.0 } else { 1.0 };
        let ymax = (max * 6.0).max(ymin * 10.0);
        let chart = builder
            .build_cartesian_2d(x, (ymin..ymax).log_scale())
            .map_err(perr)?;
        let unit = l.y_unit;
        lines_into(chart, l, 1.0, &move |v| unit.format(*v))
    } else {
        let scale = l.y_unit.scale_for(max);
        let top = if max > 0.0 {
            max / scale.div * 1.3
        } else {
            1.0
        };
        let chart = builder.build_cartesian_2d(x, 0f64..top).map_err(perr)?;
        lines_into(chart, l, scale.div, &move |v| scale.label(*v))
    }
}

fn lines_into<'a, DB: DrawingBackend + 'a, Y>(
    mut chart: Chart2d<'a, DB, Y>,
    l: &Lines,
    div: f64,
    ylab: &dyn Fn(&f64) -> String,
) -> Result<()>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(&l.x_desc)
        .y_desc(&l.y_desc)
        .x_labels(l.labels.len().max(1))
        .y_labels(8)
        .x_label_formatter(&|v| label_at(&l.labels, *v))
        .y_label_formatter(ylab)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(perr)?;
    for (si, (name, ys)) in l.series.iter().enumerate() {
        let color = color_of(name, si);
        let pts: Vec<(f64, f64)> = ys
            .iter()
            .enumerate()
            .filter(|(_, y)| y.is_finite() && (div == 1.0 || **y >= 0.0))
            .map(|(i, y)| (i as f64, y / div))
            .collect();
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
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(perr)?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(a: &DrawingArea<DB, Shift>, p: &Panel) -> Result<()> {
    match p {
        Panel::Bars(b) => draw_bars(a, b),
        Panel::Lines(l) => draw_lines(a, l),
    }
}

/// One line of centred text, shrunk until it fits the width.
fn centred<DB: DrawingBackend>(
    a: &DrawingArea<DB, Shift>,
    text: &str,
    size: u32,
    color: &RGBColor,
    y: i32,
) -> Result<()> {
    let w = a.dim_in_pixel().0;
    let mut px = size;
    while px > 11 {
        let fits = a
            .estimate_text_size(text, &("sans-serif", px).into_text_style(a))
            .map(|(tw, _)| tw + 24 <= w)
            .unwrap_or(true);
        if fits {
            break;
        }
        px -= 1;
    }
    let style = ("sans-serif", px)
        .into_font()
        .color(color)
        .pos(Pos::new(HPos::Center, VPos::Top));
    a.draw_text(text, &style, (w as i32 / 2, y)).map_err(perr)
}

fn draw_figure<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<()> {
    let (head, body) = root.split_vertically(header_height(f));
    centred(&head, &f.title, 24, &BLACK, 12)?;
    if !f.subtitle.is_empty() {
        centred(&head, &f.subtitle, 17, &RGBColor(80, 80, 80), 46)?;
    }
    let rows = body.split_evenly((f.rows.len().max(1), 1));
    for (row, area) in f.rows.iter().zip(rows) {
        let cells = area.split_evenly((1, row.len().max(1)));
        for (p, cell) in row.iter().zip(cells) {
            draw_panel(&cell, p)?;
        }
    }
    Ok(())
}

/// Draw `f` into `path` (`.png` or `.svg`).
pub fn draw(path: &Path, f: &Figure) -> Result<()> {
    ensure_font()?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let size = f.size();
    match ext.as_str() {
        "png" => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            root.fill(&WHITE).map_err(perr)?;
            draw_figure(&root, f)?;
            root.present().map_err(perr)
        }
        "svg" => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            root.fill(&WHITE).map_err(perr)?;
            draw_figure(&root, f)?;
            root.present().map_err(perr)
        }
        _ => Err(ToolsError::Invalid(format!(
            "{}: the chart file must end in .png or .svg",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_scales_pick_one_unit_per_axis() {
        let s = Unit::BytesPerSec.scale_for(1.8 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!((s.div, s.suffix), (1024.0 * 1024.0 * 1024.0, " GiB/s"));
        assert_eq!(s.label(1.2), "1.2 GiB/s");
        assert_eq!(s.label(0.0), "0");
        let s = Unit::Count.scale_for(18_000.0);
        assert_eq!(s.label(10.0), "10k");
        assert_eq!(s.label(2.5), "2.5k");
        let s = Unit::Nanos.scale_for(850_000.0);
        assert_eq!(s.label(200.0), "200 µs");
        assert_eq!(Unit::Nanos.scale_for(0.0).suffix, " ns");
        assert_eq!(Unit::Percent.scale_for(25.0).label(25.0), "25%");
        // Log axes format each tick in full.
        assert_eq!(Unit::Nanos.format(10_000_000.0), "10 ms");
        assert_eq!(Unit::Count.format(10_000.0), "10k");
    }

    #[test]
    fn stacked_max_is_the_largest_sum() {
        let b = Bars {
            title: String::new(),
            x_desc: String::new(),
            y_desc: String::new(),
            y_unit: Unit::Bytes,
            labels: vec!["a".into(), "b".into()],
            series: vec![("r".into(), vec![1.0, 5.0]), ("w".into(), vec![4.0, 1.0])],
            log_y: false,
            stacked: true,
            reference: Some(("even".into(), 3.0)),
        };
        assert_eq!(y_max(&b), 6.0);
        let side = Bars {
            stacked: false,
            ..b.clone()
        };
        assert_eq!(y_max(&side), 5.0);
    }
}
