//! A figure from a CSV of measurements (`raidkit bench plot`): the benchmark scripts in
//! `benches/` write long-form CSV, one measured point per line, and this turns it into line
//! panels without a plotting tool outside raidkit.
//!
//! The CSV has a header naming at least the columns `panel`, `x`, `series` and `value`
//! (any order; other columns are ignored). Each distinct `panel` is one chart, in order of
//! first appearance; within it, x labels and series keep their order of first appearance;
//! a point a series lacks is left out of its line. Values are in base units (IOPS, bytes
//! per second). Fields may be double-quoted (`"4K randread, RAID0"`), with `""` for a quote.
//! Building the [`Figure`] is pure; [`crate::charts::draw`] writes it.

use crate::error::{Result, ToolsError};
use crate::plot::{Figure, Lines, Panel, Unit};

/// How to draw a CSV: the figure's words and the values' unit.
#[derive(Clone, Debug)]
pub struct CsvPlot {
    /// The figure's title (what was measured).
    pub title: String,
    /// The subtitle (machine, load, date), may be empty.
    pub subtitle: String,
    /// What the x labels are (`queue depth`).
    pub x_desc: String,
    /// What the values are (`IOPS`).
    pub y_desc: String,
    /// The values' unit.
    pub unit: Unit,
    /// A logarithmic y axis.
    pub log_y: bool,
    /// Panels side by side in a row (1 or 2).
    pub per_row: usize,
}

/// Split one CSV line into fields (RFC 4180 quoting, no line breaks inside a field).
fn fields(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (false, '"') if cur.is_empty() => quoted = true,
            (false, ',') => out.push(std::mem::take(&mut cur)),
            (_, c) => cur.push(c),
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    out.push(cur);
    Ok(out)
}

/// The position of `name` in the header, or the error a user can act on.
fn column(header: &[String], name: &str, file: &str) -> Result<usize> {
    header
        .iter()
        .position(|h| h.trim() == name)
        .ok_or_else(|| ToolsError::Parse {
            file: file.into(),
            line: 1,
            why: format!(
                "no column {name:?} in the header (need panel,x,series,value; have {})",
                header.join(",")
            ),
        })
}

/// One panel being collected: x labels and series in order of first appearance.
struct Collect {
    title: String,
    labels: Vec<String>,
    series: Vec<(String, Vec<(usize, f64)>)>,
}

fn index_of(v: &mut Vec<String>, s: &str) -> usize {
    v.iter().position(|x| x == s).unwrap_or_else(|| {
        v.push(s.to_string());
        v.len() - 1
    })
}

/// Parse `text` (the CSV, named `file` in errors) into a figure of line panels.
pub fn csv_figure(text: &str, file: &str, how: &CsvPlot) -> Result<Figure> {
    let perr = |line: usize, why: String| ToolsError::Parse {
        file: file.into(),
        line,
        why,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, head) = lines.next().ok_or_else(|| perr(1, "empty CSV".into()))?;
    let header = fields(head).map_err(|e| perr(1, e))?;
    let [cp, cx, cs, cv] = ["panel", "x", "series", "value"].map(|n| column(&header, n, file));
    let (cp, cx, cs, cv) = (cp?, cx?, cs?, cv?);
    let mut panels: Vec<Collect> = Vec::new();
    for (i, line) in lines {
        let f = fields(line).map_err(|e| perr(i + 1, e))?;
        let get = |c: usize| {
            f.get(c).map(|s| s.trim()).ok_or_else(|| {
                perr(
                    i + 1,
                    format!("{} fields, header has {}", f.len(), header.len()),
                )
            })
        };
        let (p, x, s, v) = (get(cp)?, get(cx)?, get(cs)?, get(cv)?);
        let value: f64 = v
            .parse()
            .map_err(|_| perr(i + 1, format!("value {v:?} is not a number")))?;
        let pi = match panels.iter().position(|c| c.title == p) {
            Some(k) => k,
            None => {
                panels.push(Collect {
                    title: p.to_string(),
                    labels: Vec::new(),
                    series: Vec::new(),
                });
                panels.len() - 1
            }
        };
        let c = &mut panels[pi];
        let xi = index_of(&mut c.labels, x);
        let si = match c.series.iter().position(|(n, _)| n == s) {
            Some(k) => k,
            None => {
                c.series.push((s.to_string(), Vec::new()));
                c.series.len() - 1
            }
        };
        c.series[si].1.push((xi, value));
    }
    if panels.is_empty() {
        return Err(perr(2, "no data lines after the header".into()));
    }
    let as_panel = |c: Collect| {
        let n = c.labels.len();
        let series = c
            .series
            .into_iter()
            .map(|(name, pts)| {
                let mut ys = vec![f64::NAN; n];
                for (x, y) in pts {
                    ys[x] = y;
                }
                (name, ys)
            })
            .collect();
        Panel::Lines(Lines {
            title: c.title,
            x_desc: how.x_desc.clone(),
            y_desc: how.y_desc.clone(),
            y_unit: how.unit,
            labels: c.labels,
            series,
            log_y: how.log_y,
        })
    };
    let per_row = how.per_row.clamp(1, 2);
    let mut rows: Vec<Vec<Panel>> = Vec::new();
    for c in panels {
        match rows.last_mut() {
            Some(r) if r.len() < per_row => r.push(as_panel(c)),
            _ => rows.push(vec![as_panel(c)]),
        }
    }
    Ok(Figure {
        title: how.title.clone(),
        subtitle: how.subtitle.clone(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn how() -> CsvPlot {
        CsvPlot {
            title: "t".into(),
            subtitle: String::new(),
            x_desc: "QD".into(),
            y_desc: "IOPS".into(),
            unit: Unit::Count,
            log_y: false,
            per_row: 2,
        }
    }

    fn lines(p: &Panel) -> &Lines {
        match p {
            Panel::Lines(l) => l,
            Panel::Bars(_) => panic!("bars"),
        }
    }

    #[test]
    fn panels_labels_and_series_keep_first_appearance_order_and_gaps() {
        let csv = "round,panel,x,series,value\n\
                   1,\"4K read, RAID0\",1,raw,100\n\
                   1,\"4K read, RAID0\",1,nbdkit,50\n\
                   1,\"4K read, RAID0\",2,raw,180\n\
                   1,\"4K read, RAID0\",2,raidkit,90\n\
                   1,b,c2,raw,7.5\n\
                   \n\
                   1,c,x,\"say \"\"hi\"\"\",1e3\n";
        let f = csv_figure(csv, "f.csv", &how()).unwrap();
        assert_eq!(f.rows.len(), 2);
        assert_eq!(f.rows[0].len(), 2);
        assert_eq!(f.rows[1].len(), 1);
        let a = lines(&f.rows[0][0]);
        assert_eq!(a.title, "4K read, RAID0");
        assert_eq!(a.labels, vec!["1", "2"]);
        let names: Vec<&str> = a.series.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, vec!["raw", "nbdkit", "raidkit"]);
        assert_eq!(a.series[0].1, vec![100.0, 180.0]);
        assert_eq!(a.series[1].1[0], 50.0);
        assert!(a.series[1].1[1].is_nan());
        assert!(a.series[2].1[0].is_nan());
        assert_eq!(a.series[2].1[1], 90.0);
        assert_eq!(lines(&f.rows[0][1]).series[0].1, vec![7.5]);
        let c = lines(&f.rows[1][0]);
        assert_eq!(c.series[0].0, "say \"hi\"");
        assert_eq!(c.series[0].1, vec![1000.0]);
        assert_eq!(c.y_unit, Unit::Count);
        assert_eq!(c.x_desc, "QD");
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        let e = csv_figure("panel,x,value\np,1,2\n", "f.csv", &how()).unwrap_err();
        assert!(e.to_string().contains("no column \"series\""), "{e}");
        let e = csv_figure("panel,x,series,value\np,1,s,fast\n", "f.csv", &how()).unwrap_err();
        assert_eq!(e.to_string(), "f.csv:2: value \"fast\" is not a number");
        let e = csv_figure("panel,x,series,value\np,1\n", "f.csv", &how()).unwrap_err();
        assert_eq!(e.to_string(), "f.csv:2: 2 fields, header has 4");
        let e = csv_figure("panel,x,series,value\n", "f.csv", &how()).unwrap_err();
        assert!(e.to_string().contains("no data lines"), "{e}");
        let e = csv_figure("panel,x,series,value\n\"p,1,s,2\n", "f.csv", &how()).unwrap_err();
        assert!(e.to_string().contains("unterminated"), "{e}");
        assert!(csv_figure("", "f.csv", &how()).is_err());
    }

    #[test]
    fn one_panel_per_row_when_asked() {
        let csv = "panel,x,series,value\na,1,s,1\nb,1,s,2\n";
        let f = csv_figure(
            csv,
            "-",
            &CsvPlot {
                per_row: 1,
                ..how()
            },
        )
        .unwrap();
        assert_eq!(f.rows.len(), 2);
    }
}
