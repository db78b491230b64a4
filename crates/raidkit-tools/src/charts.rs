//! The figures `bench io`, `probe` and `trace analyze` draw: what was measured in the title
//! (array, level, members, workload, machine), the headline numbers and the time in the
//! subtitle, values in human units. Building a [`Figure`] is pure (tested); [`draw`] writes it.

use crate::bench::{BenchResult, MemberShare, Pattern, SweepResult};
use crate::error::Result;
use crate::human;
use crate::plot::{self, Bars, Figure, Lines, Panel, Unit};
use crate::probe::ProbeReport;
use crate::trace::{size_label, TraceReport};
use std::path::Path;

/// Draw `f` to `path` (`.png` or `.svg`).
pub fn draw(path: &Path, f: &Figure) -> Result<()> {
    plot::draw(path, f)
}

/// `16K random 40% read / 60% write QD4 ×2 jobs` (the part named `omit` — `bs`, `iodepth`,
/// `jobs` — left out: it is what a sweep varies).
pub fn workload(r: &BenchResult, omit: Option<&str>) -> String {
    let pat = Pattern::parse(&r.pattern).map_or_else(|_| r.pattern.clone(), |p| p.describe());
    let mut s = String::new();
    if omit != Some("bs") {
        s += &format!("{} ", size_label(r.block_size));
    }
    s += &pat;
    if omit != Some("iodepth") {
        s += &format!(" QD{}", r.iodepth);
    }
    if r.jobs > 1 && omit != Some("jobs") {
        s += &format!(" ×{} jobs", r.jobs);
    }
    if r.direct && r.array.is_none() {
        s += ", O_DIRECT";
    }
    s
}

/// The array (`raid6 4×64 MiB, 64 KiB chunk`) or the file/device (`/srv/x (file on ext4)`).
pub fn target(r: &BenchResult, omit: Option<&str>) -> String {
    match (&r.array, &r.target_kind) {
        (Some(a), _) => a.describe(omit),
        (None, Some(k)) => format!("{} ({k})", r.target),
        (None, None) => r.target.clone(),
    }
}

/// Short x labels for members: the role alone when the device names differ only by it
/// (`bench-run-0.img` …), else `role:name` (at most 14 characters, the end kept).
pub fn member_labels(roles: &[usize], devices: &[String]) -> Vec<String> {
    let names = human::device_labels(devices);
    let common_prefix = |v: &[String]| -> usize {
        let first = v.first().map(String::as_str).unwrap_or("");
        (0..=first.len())
            .rev()
            .find(|&n| first.is_char_boundary(n) && v.iter().all(|s| s.starts_with(&first[..n])))
            .unwrap_or(0)
    };
    let rev: Vec<String> = names.iter().map(|s| s.chars().rev().collect()).collect();
    let (p, q) = (common_prefix(&names), common_prefix(&rev));
    let rest: Vec<&str> = names
        .iter()
        .map(|s| s.get(p..s.len().saturating_sub(q).max(p)).unwrap_or(""))
        .collect();
    let role_like = names.len() > 1
        && rest
            .iter()
            .zip(roles)
            .all(|(r, role)| r.parse::<usize>().ok() == Some(*role));
    roles
        .iter()
        .zip(&names)
        .map(|(role, n)| {
            if role_like {
                return role.to_string();
            }
            let s = format!("{role}:{n}");
            let chars: Vec<char> = s.chars().collect();
            if chars.len() > 14 {
                let tail: String = chars[chars.len() - 12..].iter().collect();
                format!("{role}:…{}", tail.trim_start_matches(':'))
            } else {
                s
            }
        })
        .collect()
}

fn latency_panel(r: &BenchResult) -> Panel {
    let mut series = Vec::new();
    for (name, l) in [("read", &r.read_lat_ns), ("write", &r.write_lat_ns)] {
        if let Some(l) = l {
            series.push((
                name.to_string(),
                [l.p50, l.p90, l.p99, l.p999, l.max]
                    .iter()
                    .map(|&v| v as f64)
                    .collect(),
            ));
        }
    }
    Panel::Bars(Bars {
        title: "client latency".into(),
        x_desc: "percentile".into(),
        y_desc: "latency (log scale)".into(),
        y_unit: Unit::Nanos,
        labels: ["p50", "p90", "p99", "p99.9", "max"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        series,
        log_y: true,
        stacked: false,
        reference: None,
    })
}

/// Member bytes per client byte, reads and writes together (`None` without client bytes).
pub fn amplification(r: &BenchResult, ms: &[MemberShare]) -> Option<f64> {
    let client = r.read_bytes + r.write_bytes;
    let member: u64 = ms.iter().map(|m| m.bytes).sum();
    (client > 0).then(|| member as f64 / client as f64)
}

fn member_panels(r: &BenchResult, ms: &[MemberShare]) -> Vec<Panel> {
    let roles: Vec<usize> = ms.iter().map(|m| m.role).collect();
    let devices: Vec<String> = ms.iter().map(|m| m.device.clone()).collect();
    let labels = member_labels(&roles, &devices);
    let secs = r.seconds.max(1e-9);
    let total: f64 = ms.iter().map(|m| m.bytes as f64 / secs).sum();
    let even = total / ms.len().max(1) as f64;
    let amp = amplification(r, ms).map_or_else(String::new, |a| {
        format!(": {}× the client's bytes", human::num(a))
    });
    let traffic = Bars {
        title: format!("member traffic{amp}"),
        x_desc: "member".into(),
        y_desc: "throughput".into(),
        y_unit: Unit::BytesPerSec,
        labels: labels.clone(),
        series: vec![
            (
                "read".into(),
                ms.iter().map(|m| m.read_bytes as f64 / secs).collect(),
            ),
            (
                "write".into(),
                ms.iter().map(|m| m.write_bytes as f64 / secs).collect(),
            ),
        ],
        log_y: false,
        stacked: true,
        reference: Some(("even share".into(), even)),
    };
    let pick = |f: fn(&crate::stats::LatencySummary) -> u64| -> Vec<f64> {
        ms.iter()
            .map(|m| m.lat_ns.as_ref().map_or(f64::NAN, |l| f(l) as f64))
            .collect()
    };
    let latency = Bars {
        title: "member latency, as the engine saw it".into(),
        x_desc: "member".into(),
        y_desc: "latency (log scale)".into(),
        y_unit: Unit::Nanos,
        labels,
        series: vec![
            ("p50".into(), pick(|l| l.p50)),
            ("p99".into(), pick(|l| l.p99)),
        ],
        log_y: true,
        stacked: false,
        reference: None,
    };
    vec![Panel::Bars(traffic), Panel::Bars(latency)]
}

/// The figure of one `bench io` run: client latency percentiles; for arrays also each
/// member's read and write traffic against the even share, and each member's latency.
pub fn bench_figure(r: &BenchResult) -> Figure {
    let title = format!(
        "{} · {} · {}",
        target(r, None),
        workload(r, None),
        r.machine.short()
    );
    let subtitle = format!(
        "{} · {} IOPS · {} IOs in {} · {}",
        human::rate((r.read_bytes + r.write_bytes) as f64 / r.seconds.max(1e-9)),
        human::count(r.iops),
        human::count(r.ios as f64),
        human::duration_ns(r.seconds * 1e9),
        human::timestamp(r.started_unix)
    );
    let mut rows = vec![vec![latency_panel(r)]];
    if let Some(ms) = r.members.as_ref().filter(|m| !m.is_empty()) {
        rows.push(member_panels(r, ms));
    }
    Figure {
        title,
        subtitle,
        rows,
    }
}

/// The figure of a `bench io --sweep`: throughput, then p50/p99 latency, by the swept value.
pub fn sweep_figure(s: &SweepResult) -> Figure {
    let labels: Vec<String> = s.points.iter().map(|p| p.value.clone()).collect();
    let (title, when) = match s.points.first() {
        Some(p) => (
            format!(
                "{} · {} · {}",
                target(&p.result, Some(&s.param)),
                workload(&p.result, Some(&s.param)),
                p.result.machine.short()
            ),
            human::timestamp(p.result.started_unix),
        ),
        None => ("empty sweep".into(), String::new()),
    };
    let best = s
        .points
        .iter()
        .max_by(|a, b| a.result.mib_s.total_cmp(&b.result.mib_s));
    let subtitle = match best {
        Some(b) => format!(
            "{} = {}: best {} at {}={} · {when}",
            s.param,
            labels.join(", "),
            human::rate(b.result.mib_s * 1048576.0),
            s.param,
            b.value
        ),
        None => String::new(),
    };
    let top = Lines {
        title: format!("throughput by {}", s.param),
        x_desc: s.param.clone(),
        y_desc: "throughput".into(),
        y_unit: Unit::BytesPerSec,
        labels: labels.clone(),
        series: vec![(
            "throughput".into(),
            s.points
                .iter()
                .map(|p| p.result.mib_s * 1048576.0)
                .collect(),
        )],
        log_y: false,
    };
    let lat = |f: fn(&crate::stats::LatencySummary) -> u64| -> Vec<f64> {
        s.points
            .iter()
            .map(|p| f(&p.result.lat_ns) as f64)
            .collect()
    };
    let bottom = Lines {
        title: format!("latency by {}", s.param),
        x_desc: s.param.clone(),
        y_desc: "latency (log scale)".into(),
        y_unit: Unit::Nanos,
        labels,
        series: vec![
            ("p50".into(), lat(|l| l.p50)),
            ("p99".into(), lat(|l| l.p99)),
        ],
        log_y: true,
    };
    Figure {
        title,
        subtitle,
        rows: vec![vec![Panel::Lines(top)], vec![Panel::Lines(bottom)]],
    }
}

/// The figure of `probe`: sequential write throughput by write size.
pub fn probe_figure(r: &ProbeReport) -> Figure {
    let mode = if r.direct_io { "direct" } else { "buffered" };
    let range = match (r.sweep.first(), r.sweep.last()) {
        (Some(a), Some(b)) => format!(" {}…{}", size_label(a.block), size_label(b.block)),
        _ => String::new(),
    };
    let title = format!(
        "{} ({}) · {mode} sequential writes{range} · {}",
        r.path,
        r.kind,
        r.machine.short()
    );
    let best = r.sweep.iter().max_by(|a, b| a.mib_s.total_cmp(&b.mib_s));
    let mut sub = Vec::new();
    if let Some(b) = best {
        sub.push(format!(
            "best {} at {}",
            human::rate(b.mib_s * 1048576.0),
            size_label(b.block)
        ));
    }
    if let Some(e) = r.erase_block_estimate {
        sub.push(format!("knee (90% of best) at {}", size_label(e)));
    }
    if let Some(l) = &r.link {
        sub.push(format!("link {}", l.describe()));
    }
    sub.push(human::timestamp(r.started_unix));
    let lines = Lines {
        title: "throughput by write size".into(),
        x_desc: "write size".into(),
        y_desc: "throughput".into(),
        y_unit: Unit::BytesPerSec,
        labels: r.sweep.iter().map(|p| size_label(p.block)).collect(),
        series: vec![(
            "throughput".into(),
            r.sweep.iter().map(|p| p.mib_s * 1048576.0).collect(),
        )],
        log_y: false,
    };
    Figure {
        title,
        subtitle: sub.join(" · "),
        rows: vec![vec![Panel::Lines(lines)]],
    }
}

/// The figure of `trace analyze`: IOs by size (every power of two between the smallest and
/// the largest bucket, empty ones too).
pub fn trace_figure(file: &str, r: &TraceReport) -> Figure {
    let mut buckets: Vec<(u64, u64)> = Vec::new();
    if let (Some(lo), Some(hi)) = (r.size_histogram.first(), r.size_histogram.last()) {
        let mut b = lo.0.max(1);
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
    let total: u64 = r.size_histogram.iter().map(|x| x.1).sum();
    let title = format!("IO sizes · {} trace {file}", r.format);
    let subtitle = format!(
        "{} IOs ({} counted), {} reads · mode {} · mean {} · {} read, {} written over {}",
        human::count(total as f64),
        r.counted_action,
        human::percent(r.read_fraction),
        size_label(r.mode_size),
        human::bytes(r.mean_size),
        human::bytes(r.read_bytes as f64),
        human::bytes(r.write_bytes as f64),
        human::duration_ns(r.duration_s * 1e9)
    );
    let bars = Bars {
        title: "IOs by size".into(),
        x_desc: "size (power of two ≤ size)".into(),
        y_desc: "IOs".into(),
        y_unit: Unit::Count,
        labels: buckets.iter().map(|x| size_label(x.0)).collect(),
        series: vec![("IOs".into(), buckets.iter().map(|x| x.1 as f64).collect())],
        log_y: false,
        stacked: false,
        reference: None,
    };
    Figure {
        title,
        subtitle,
        rows: vec![vec![Panel::Bars(bars)]],
    }
}

/// The figure of `probe` over several members: each one's sequential read rate against the
/// other members' median, and what its link could carry.
pub fn peers_figure(r: &crate::probe::PeerReport) -> Figure {
    let devices: Vec<String> = r.samples.iter().map(|s| s.path.clone()).collect();
    let labels = human::device_labels(&devices);
    let all: Vec<f64> = r.samples.iter().map(|s| s.read_bytes_per_sec).collect();
    let mut sorted = all.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    let direct = r.samples.iter().all(|s| s.direct);
    let title = format!(
        "{} members · {} sequential reads, one at a time · {}",
        r.samples.len(),
        if direct { "direct" } else { "buffered" },
        r.machine.short()
    );
    // The first finding's claim (its cause is in the text report).
    let verdict = match r.findings.first() {
        Some(f) => {
            let claim = f.message.split(": ").next().unwrap_or(&f.message);
            let more = match r.findings.len() {
                1 => String::new(),
                n => format!(" (+{} more)", n - 1),
            };
            format!("{}: {claim}{more}", f.severity)
        }
        None => "no member out of line with its peers or its link".into(),
    };
    let mut series = vec![("read".to_string(), all)];
    if r.samples.iter().any(|s| s.link.is_some()) {
        series.push((
            "link can carry".to_string(),
            r.samples
                .iter()
                .map(|s| {
                    s.link
                        .as_ref()
                        .map_or(f64::NAN, |l| l.current_bytes_per_sec)
                })
                .collect(),
        ));
    }
    let bars = Bars {
        title: "sequential read rate per member".into(),
        x_desc: "member".into(),
        y_desc: "read rate".into(),
        y_unit: Unit::DecimalBytesPerSec,
        labels,
        series,
        log_y: false,
        stacked: false,
        reference: Some(("median".into(), median)),
    };
    Figure {
        title,
        subtitle: format!("{verdict} · {}", human::timestamp(r.started_unix)),
        rows: vec![vec![Panel::Bars(bars)]],
    }
}
