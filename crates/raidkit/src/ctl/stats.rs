//! `raidkit stats`: live IO statistics of running arrays (the Prometheus endpoint is in
//! [`super::prometheus`]).

use super::wire;
use crate::control::client::ask_all;
use crate::control::protocol::Request;
use crate::units::human;
use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};
use std::time::Duration;

/// `stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Array name (default: every running array).
    pub name: Option<String>,
    /// JSON output (cumulative counters; with --watch one object per interval).
    #[arg(long)]
    pub json: bool,
    /// Print again every SECONDS, with the rates of that window.
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    /// Serve Prometheus metrics of every running array on this local HTTP address
    /// (e.g. 127.0.0.1:9273) until interrupted.
    #[arg(long, value_name = "HOST:PORT")]
    pub prometheus: Option<String>,
}

/// The statistics of one array (`name`) or of every running array, as the servers sent
/// them, and a sentence per server this user may not ask (as `status` says them).
pub fn stats_now(name: Option<&str>) -> Result<(Vec<Value>, Vec<String>)> {
    let mut v = Vec::new();
    let req = Request::Stats {
        array: name.unwrap_or("").to_string(),
    };
    let (replies, denied) = ask_all(&req)?;
    for (_, r) in replies {
        v.extend(r["arrays"].as_array().cloned().unwrap_or_default());
    }
    if let Some(n) = name {
        if v.is_empty() {
            match denied.first() {
                Some(d) => bail!("no running array named {n:?} that you may use; {d}"),
                None => bail!("no running array named {n:?} (see `raidkit status`)"),
            }
        }
    }
    Ok((v, denied))
}

/// A size or latency histogram as `label:share` pairs.
fn hist_line(v: &[u64], unit_sizes: bool) -> String {
    let total: u64 = v.iter().sum();
    if total == 0 {
        return "-".into();
    }
    v.iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| {
            let label = if unit_sizes {
                human(512u64 << i)
            } else {
                format!("{}µs", 1u64 << i)
            };
            format!("{label}:{:.0}%", c as f64 * 100.0 / total as f64)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The latency bucket holding quantile `q`, as `<Nµs`.
fn lat_pct(v: &[u64], q: f64) -> String {
    let total: u64 = v.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let target = (total as f64 * q).ceil() as u64;
    let mut acc = 0;
    for (i, c) in v.iter().enumerate() {
        acc += c;
        if acc >= target {
            return format!("<{}µs", 2u64 << i);
        }
    }
    "-".into()
}

/// Counters of `a` minus those of `b` (same shape; numbers saturate at 0; a member's
/// `role` is its identity, not a counter, and is kept).
fn diff(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => json!(x
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(y.as_u64().unwrap_or(0))),
        (Value::Array(x), Value::Array(y)) => {
            Value::Array(x.iter().zip(y.iter()).map(|(p, q)| diff(p, q)).collect())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut o = serde_json::Map::new();
            for (k, v) in x {
                let d = match y.get(k) {
                    Some(w) if k != "role" => diff(v, w),
                    _ => v.clone(),
                };
                o.insert(k.clone(), d);
            }
            Value::Object(o)
        }
        (x, _) => x.clone(),
    }
}

fn print_stats(name: &str, uuid: &str, io: &wire::Io, window: Option<f64>) {
    let (r, w) = (&io.read, &io.write);
    let (rc, wc) = (r.count, w.count);
    let secs = window.unwrap_or(io.uptime_ms as f64 / 1000.0).max(1e-3);
    outln!(
        "{name} ({uuid}) {}: {} reads / {} writes ({:.0}% reads), {}/s read, {}/s write, {:.0} IOPS, {} flushes",
        if window.is_some() { format!("last {secs:.0} s") } else { format!("since start ({secs:.0} s)") },
        rc,
        wc,
        if rc + wc > 0 { rc as f64 * 100.0 / (rc + wc) as f64 } else { 0.0 },
        human((r.bytes as f64 / secs) as u64),
        human((w.bytes as f64 / secs) as u64),
        (rc + wc) as f64 / secs,
        io.flush.count
    );
    outln!("  read sizes : {}", hist_line(&r.size_hist, true));
    outln!("  write sizes: {}", hist_line(&w.size_hist, true));
    outln!(
        "  read latency p50 {} p99 {}   write latency p50 {} p99 {}",
        lat_pct(&r.lat_hist_us, 0.5),
        lat_pct(&r.lat_hist_us, 0.99),
        lat_pct(&w.lat_hist_us, 0.5),
        lat_pct(&w.lat_hist_us, 0.99)
    );
}

/// One line about the stripe cache.
pub fn print_stripe_cache(c: &wire::StripeCache) {
    let (h, m) = (c.hits, c.misses);
    outln!(
        "  stripe cache: {} entries ({}), {} used, {} memory (peak {}), max {} entries; {} hits {} misses ({:.1}% hit), {} held stripes, {} full-stripe merges",
        c.size_entries,
        c.mode,
        c.used_entries,
        human(c.memory_bytes),
        human(c.peak_memory_bytes),
        c.max_entries,
        h,
        m,
        if h + m > 0 {
            h as f64 * 100.0 / (h + m) as f64
        } else {
            0.0
        },
        c.dirty_stripes,
        c.full_stripe_merges
    );
}

/// One line per member, labelled by device name (with `window`: the rates of that window).
fn print_members(members: &Value, window: Option<f64>) {
    let members = raidkit_tools::watch::parse_members(members);
    for l in raidkit_tools::watch::member_lines(&members, window) {
        outln!("{l}");
    }
}

/// `raidkit stats`.
pub fn run(a: StatsArgs) -> Result<()> {
    if let Some(addr) = &a.prometheus {
        return super::prometheus::serve(addr);
    }
    let (prev, denied) = stats_now(a.name.as_deref())?;
    // Like `status`: say each server that would not answer (once, also with --watch).
    for d in &denied {
        eprintln!("raidkit: {d}");
    }
    match a.watch {
        Some(every) => return watch(&a, prev, every.max(1)),
        None if a.json => outln!("{}", serde_json::to_string_pretty(&Value::Array(prev))?),
        None if prev.is_empty() && denied.is_empty() => outln!(
            "no running arrays (control sockets in {})",
            crate::control::run_dir().display()
        ),
        None => {
            for v in prev {
                let s: wire::Stats = serde_json::from_value(v.clone())?;
                print_stats(&s.name, &s.uuid, &s.io, None);
                print_members(&v["members"], None);
                if let Some(c) = &s.stripe_cache {
                    print_stripe_cache(c);
                }
            }
        }
    }
    if !denied.is_empty() {
        bail!(
            "{} serving process(es) would not tell you their arrays' statistics",
            denied.len()
        );
    }
    Ok(())
}

/// `stats --watch`: every `every` seconds, the counters of that window.
fn watch(a: &StatsArgs, mut prev: Vec<Value>, every: u64) -> Result<()> {
    loop {
        std::thread::sleep(Duration::from_secs(every));
        let (now, _) = stats_now(a.name.as_deref())?;
        if !a.json {
            outln!("{}", raidkit_tools::human::timestamp_now());
        }
        for s in &now {
            let before = prev.iter().find(|p| p["name"] == s["name"]);
            let win_io = before
                .map(|b| diff(&s["io"], &b["io"]))
                .unwrap_or_else(|| s["io"].clone());
            // Members are matched by role and device (a replaced member counts from 0).
            let win_m = before
                .map(|b| raidkit_tools::watch::window_json(&s["members"], &b["members"]))
                .unwrap_or_else(|| s["members"].clone());
            if a.json {
                outln!(
                    "{}",
                    json!({"name": s["name"], "time": raidkit_tools::human::now_unix(), "window_seconds": every, "window": win_io, "members_window": win_m, "total": s["io"]})
                );
            } else {
                let io: wire::Io = serde_json::from_value(win_io)?;
                let name = s["name"].as_str().unwrap_or("?");
                let uuid = s["uuid"].as_str().unwrap_or("");
                print_stats(name, uuid, &io, Some(every as f64));
                print_members(&win_m, Some(every as f64));
            }
        }
        prev = now;
    }
}
