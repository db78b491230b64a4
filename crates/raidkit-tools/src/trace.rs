//! IO traces: the text output of `blkparse` (default format) and raidkit's own JSON-lines
//! trace, parsed into [`IoEvent`]s and summarised by [`analyze`].
//!
//! raidkit trace format (one JSON object per line, `docs/TOOLS.md`):
//!
//! ```text
//! {"t":0.000125,"op":"W","off":1048576,"len":65536,"export":"vol0"}
//! {"t":0.000130,"op":"W","off":4194304,"len":65536,"export":"vol0","member":2,"lat_ns":81000}
//! ```
//!
//! `t` seconds since the trace started; `op` `R` read, `W` write, `F` flush, `D` discard;
//! `off`/`len` bytes; `export` the export (or array) name; `member` (optional) the member
//! role for member-level IOs; `lat_ns` (optional) completion latency.

use crate::error::{Result, ToolsError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Direction of an IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Op {
    /// Read.
    #[serde(rename = "R")]
    Read,
    /// Write.
    #[serde(rename = "W")]
    Write,
    /// Flush (cache flush with no data).
    #[serde(rename = "F")]
    Flush,
    /// Discard / trim / secure erase / write zeroes.
    #[serde(rename = "D")]
    Discard,
    /// No data direction (`N`).
    #[serde(rename = "N")]
    Other,
}

/// One IO event.
#[derive(Clone, Debug, PartialEq)]
pub struct IoEvent {
    /// Seconds since the trace started.
    pub t: f64,
    /// blkparse action code (`Q`, `G`, `I`, `D`, `C`, `M`, ...); `Q` for raidkit traces.
    pub action: char,
    /// Direction.
    pub op: Op,
    /// Byte offset (sector × 512 for blkparse).
    pub offset: u64,
    /// Length in bytes (0 when the line has no `+ N`).
    pub len: u64,
    /// Who issued it: the process name (blkparse) or the export (raidkit).
    pub who: String,
    /// RWBS flags other than the direction: `S` sync, `M` meta, `A` readahead, `F` FUA,
    /// `P` preflush (blkparse's leading `F`).
    pub flags: String,
    /// Member role (raidkit traces only).
    pub member: Option<u32>,
}

/// Totals from the summary block blkparse prints at the end (the `Total` section, or the
/// sum of the per-CPU sections when there is no `Total`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BlkSummary {
    /// `Reads Queued` / `Writes Queued` / `Read Dispatches` ... → `(count, KiB)`.
    pub totals: BTreeMap<String, (u64, u64)>,
    /// `Events (dev): N entries`.
    pub events: Option<u64>,
    /// `Throughput (R/W): aKiB/s / bKiB/s`, in KiB/s.
    pub throughput_kib_s: Option<(u64, u64)>,
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// `blkparse` or `raidkit`.
    pub format: String,
    /// Every event line.
    pub events: Vec<IoEvent>,
    /// blkparse's summary block, if present.
    pub summary: Option<BlkSummary>,
    /// Lines that were neither events nor summary (count).
    pub skipped: usize,
    /// First skipped line (1-based) and its text, to show the user.
    pub first_skipped: Option<(usize, String)>,
}

/// Parse a trace, recognising the format: a first non-blank line starting with `{` means
/// raidkit JSON lines, anything else blkparse text. `file` names the input in errors.
pub fn parse(text: &str, file: &str) -> Result<Trace> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.trim_start().starts_with('{') {
        parse_raidkit(text, file)
    } else {
        Ok(parse_blkparse(text))
    }
}

/// Parse `blkparse` default-format text. Never fails: lines that are not understood are
/// counted in [`Trace::skipped`].
pub fn parse_blkparse(text: &str) -> Trace {
    let mut tr = Trace {
        format: "blkparse".into(),
        ..Trace::default()
    };
    let mut sum = BlkSummary::default();
    let mut cpu_sum: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut in_total = false;
    let mut saw_summary = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if !saw_summary {
            if let Some(ev) = parse_blk_line(line) {
                tr.events.push(ev);
                continue;
            }
        }
        let t = line.trim();
        if t.starts_with("CPU") && t.ends_with(':') {
            saw_summary = true;
            in_total = false;
            continue;
        }
        if t.starts_with("Total") && t.ends_with(':') {
            saw_summary = true;
            in_total = true;
            continue;
        }
        if let Some(rest) = t.strip_prefix("Throughput (R/W):") {
            saw_summary = true;
            let mut it = rest
                .split(" / ")
                .map(|p| parse_kib(p.trim().trim_end_matches("/s")));
            if let (Some(Some(r)), Some(Some(w))) = (it.next(), it.next()) {
                sum.throughput_kib_s = Some((r, w));
            }
            continue;
        }
        if t.starts_with("Events (") {
            saw_summary = true;
            sum.events = t
                .split(':')
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok());
            continue;
        }
        if t.starts_with("Skips:") {
            saw_summary = true;
            continue;
        }
        if saw_summary && t.contains(':') {
            for seg in t.split('\t').filter(|s| !s.trim().is_empty()) {
                let Some((k, v)) = seg.split_once(':') else {
                    continue;
                };
                let mut parts = v.split(',');
                let count = parts.next().and_then(|c| c.trim().parse::<u64>().ok());
                let kib = parts.next().and_then(|s| parse_kib(s.trim())).unwrap_or(0);
                if let Some(c) = count {
                    let key = k.trim().to_string();
                    if in_total {
                        sum.totals.insert(key, (c, kib));
                    } else {
                        let e = cpu_sum.entry(key).or_default();
                        e.0 += c;
                        e.1 += kib;
                    }
                }
            }
            continue;
        }
        tr.skipped += 1;
        if tr.first_skipped.is_none() {
            tr.first_skipped = Some((i + 1, line.chars().take(120).collect()));
        }
    }
    if saw_summary {
        if sum.totals.is_empty() {
            sum.totals = cpu_sum;
        }
        tr.summary = Some(sum);
    }
    tr
}

/// `123KiB`, `4MiB`, `0KiB` → KiB.
fn parse_kib(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: u64 = digits.parse().ok()?;
    let unit = s[digits.len()..].trim();
    let mult = match unit {
        "" | "KiB" | "K" | "KB" => 1,
        "MiB" | "M" | "MB" => 1 << 10,
        "GiB" | "G" | "GB" => 1 << 20,
        "TiB" | "T" | "TB" => 1 << 30,
        "B" => return Some(n / 1024),
        _ => return None,
    };
    n.checked_mul(mult)
}

/// One event line of blkparse's default format:
/// `%D %2c %8s %5T.%9t %5p %2a %3d` then, for most actions, `sector + n [process]`.
fn parse_blk_line(line: &str) -> Option<IoEvent> {
    let mut it = line.split_whitespace();
    let dev = it.next()?;
    let (maj, min) = dev.split_once(',')?;
    maj.parse::<u32>().ok()?;
    min.parse::<u32>().ok()?;
    it.next()?.parse::<u32>().ok()?; // cpu
    it.next()?.parse::<u64>().ok()?; // sequence
    let t: f64 = it.next()?.parse().ok()?;
    if !t.is_finite() || t < 0.0 {
        return None;
    }
    it.next()?.parse::<u64>().ok()?; // pid
    let action = it.next()?;
    let mut ac = action.chars();
    let a = ac.next()?;
    if ac.next().is_some() || !a.is_ascii_alphabetic() {
        return None;
    }
    let rwbs = it.next()?;
    if !rwbs.chars().all(|c| "RWDNFSMAEZ".contains(c)) {
        return None;
    }
    let (op, flags) = decode_rwbs(rwbs);
    let rest: Vec<&str> = it.collect();
    let (mut offset, mut len) = (0u64, 0u64);
    if rest.len() >= 3 && rest[1] == "+" {
        if let (Ok(s), Ok(n)) = (rest[0].parse::<u64>(), rest[2].parse::<u64>()) {
            offset = s.checked_mul(512)?;
            len = n.checked_mul(512)?;
        }
    }
    // An empty write with a preflush is how the block layer sends a cache flush.
    let op = if flags.contains('P') && len == 0 {
        Op::Flush
    } else {
        op
    };
    let who = match (line.find('['), line.rfind(']')) {
        (Some(o), Some(c)) if c > o => line[o + 1..c].to_string(),
        _ => String::new(),
    };
    Some(IoEvent {
        t,
        action: a,
        op,
        offset,
        len,
        who,
        flags,
        member: None,
    })
}

/// RWBS → direction and flags. A leading `F` is a preflush (`P`), a later one FUA (`F`).
fn decode_rwbs(s: &str) -> (Op, String) {
    let mut op = None;
    let mut flags = String::new();
    for (i, c) in s.chars().enumerate() {
        match c {
            'R' => op = op.or(Some(Op::Read)),
            'W' => op = op.or(Some(Op::Write)),
            'D' | 'E' | 'Z' => op = Some(Op::Discard),
            'N' => op = op.or(Some(Op::Other)),
            'F' if i == 0 => flags.push('P'),
            other => flags.push(other),
        }
    }
    let op = op.unwrap_or(if flags.contains('P') {
        Op::Flush
    } else {
        Op::Other
    });
    let op = if op == Op::Other && flags.contains('P') {
        Op::Flush
    } else {
        op
    };
    (op, flags)
}

#[derive(Deserialize)]
struct RkLine {
    t: f64,
    op: Op,
    #[serde(default)]
    off: u64,
    #[serde(default)]
    len: u64,
    #[serde(default)]
    export: String,
    #[serde(default)]
    member: Option<u32>,
}

/// Parse raidkit's JSON-lines trace. A line that is not a valid record is an error naming
/// the line.
pub fn parse_raidkit(text: &str, file: &str) -> Result<Trace> {
    let mut tr = Trace {
        format: "raidkit".into(),
        ..Trace::default()
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: RkLine = serde_json::from_str(line).map_err(|e| ToolsError::Parse {
            file: file.to_string(),
            line: i + 1,
            why: format!("not a raidkit trace record: {e}"),
        })?;
        if !r.t.is_finite() || r.t < 0.0 {
            return Err(ToolsError::Parse {
                file: file.to_string(),
                line: i + 1,
                why: "t must be a non-negative number of seconds".into(),
            });
        }
        tr.events.push(IoEvent {
            t: r.t,
            action: 'Q',
            op: r.op,
            offset: r.off,
            len: r.len,
            who: r.export,
            flags: String::new(),
            member: r.member,
        });
    }
    Ok(tr)
}

/// Per-process (blkparse) or per-export (raidkit) counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WhoStats {
    /// Name.
    pub name: String,
    /// IOs.
    pub ios: u64,
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Bytes read + written.
    pub bytes: u64,
}

/// Summary of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TraceReport {
    /// `blkparse` or `raidkit`.
    pub format: String,
    /// Event lines parsed.
    pub events: usize,
    /// Events per action code.
    pub actions: BTreeMap<String, u64>,
    /// Which action's events are counted as IOs (`Q` if present, else `D`, else `C`).
    pub counted_action: String,
    /// IOs counted (events with the counted action).
    pub ios: u64,
    /// Reads among them.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Flushes.
    pub flushes: u64,
    /// Discards.
    pub discards: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// reads / (reads + writes); 0 if none.
    pub read_fraction: f64,
    /// Size histogram of reads and writes: `(power of two ≤ size, count)`, ascending.
    pub size_histogram: Vec<(u64, u64)>,
    /// Most frequent exact size of reads and writes (smallest on ties); 0 if none.
    pub mode_size: u64,
    /// Mean size of reads and writes in bytes.
    pub mean_size: f64,
    /// Time from the first to the last counted event, seconds.
    pub duration_s: f64,
    /// Per process (blkparse) or export (raidkit), most IOs first.
    pub by_who: Vec<WhoStats>,
    /// Per member role (raidkit traces with `member`): `(role, ios)`.
    pub by_member: Vec<(u32, u64)>,
    /// Flags seen on counted IOs (`S`, `M`, `A`, `F`, `P`) → count.
    pub flags: BTreeMap<String, u64>,
    /// blkparse's own summary block, if present.
    pub summary: Option<BlkSummary>,
    /// Lines not understood.
    pub skipped_lines: usize,
}

/// Summarise a trace. `action` forces which action code is counted.
pub fn analyze(tr: &Trace, action: Option<char>) -> Result<TraceReport> {
    if tr.events.is_empty() {
        return Err(ToolsError::Invalid(match &tr.first_skipped {
            Some((n, l)) => format!(
                "no IO events found (line {n} is not a blkparse event or raidkit record: {l:?})"
            ),
            None => "no IO events found: the trace is empty".into(),
        }));
    }
    let mut r = TraceReport {
        format: tr.format.clone(),
        events: tr.events.len(),
        summary: tr.summary.clone(),
        skipped_lines: tr.skipped,
        ..TraceReport::default()
    };
    for e in &tr.events {
        *r.actions.entry(e.action.to_string()).or_default() += 1;
    }
    let counted = match action {
        Some(a) => a,
        None => ['Q', 'D', 'C']
            .into_iter()
            .find(|a| r.actions.contains_key(&a.to_string()))
            .unwrap_or(tr.events[0].action),
    };
    r.counted_action = counted.to_string();
    let mut hist: BTreeMap<u64, u64> = BTreeMap::new();
    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    let mut who: BTreeMap<String, WhoStats> = BTreeMap::new();
    let mut members: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut t0, mut t1) = (f64::INFINITY, f64::NEG_INFINITY);
    for e in tr.events.iter().filter(|e| e.action == counted) {
        r.ios += 1;
        t0 = t0.min(e.t);
        t1 = t1.max(e.t);
        let w = who.entry(e.who.clone()).or_insert_with(|| WhoStats {
            name: e.who.clone(),
            ..WhoStats::default()
        });
        w.ios += 1;
        for f in e.flags.chars() {
            *r.flags.entry(f.to_string()).or_default() += 1;
        }
        if let Some(m) = e.member {
            *members.entry(m).or_default() += 1;
        }
        match e.op {
            Op::Read => {
                r.reads += 1;
                r.read_bytes += e.len;
                w.reads += 1;
                w.bytes += e.len;
            }
            Op::Write => {
                r.writes += 1;
                r.write_bytes += e.len;
                w.writes += 1;
                w.bytes += e.len;
            }
            Op::Flush => r.flushes += 1,
            Op::Discard => r.discards += 1,
            Op::Other => {}
        }
        if matches!(e.op, Op::Read | Op::Write) && e.len > 0 {
            *hist
                .entry(1u64 << (63 - e.len.leading_zeros()))
                .or_default() += 1;
            *sizes.entry(e.len).or_default() += 1;
        }
    }
    let rw = r.reads + r.writes;
    if rw > 0 {
        r.read_fraction = r.reads as f64 / rw as f64;
    }
    let sized: u64 = sizes.values().sum();
    if sized > 0 {
        r.mean_size = (r.read_bytes + r.write_bytes) as f64 / sized as f64;
    }
    r.mode_size = sizes
        .iter()
        .fold(
            (0u64, 0u64),
            |(bs, bc), (&s, &c)| if c > bc { (s, c) } else { (bs, bc) },
        )
        .0;
    r.size_histogram = hist.into_iter().collect();
    if r.ios > 0 {
        r.duration_s = t1 - t0;
    }
    let mut by: Vec<WhoStats> = who.into_values().collect();
    by.sort_by(|a, b| b.ios.cmp(&a.ios).then_with(|| a.name.cmp(&b.name)));
    r.by_who = by;
    r.by_member = members.into_iter().collect();
    Ok(r)
}

/// `4096` → `4K`, `1048576` → `1M`.
pub fn size_label(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}

impl TraceReport {
    /// Human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{} trace: {} events, counting {} ({} IOs over {:.3} s)\n",
            self.format, self.events, self.counted_action, self.ios, self.duration_s
        );
        let acts: Vec<String> = self
            .actions
            .iter()
            .map(|(a, n)| format!("{a}={n}"))
            .collect();
        s += &format!("actions: {}\n", acts.join(" "));
        s += &format!(
            "mix: {} reads ({}), {} writes ({}), {} flushes, {} discards; {:.1}% reads\n",
            self.reads,
            human(self.read_bytes),
            self.writes,
            human(self.write_bytes),
            self.flushes,
            self.discards,
            self.read_fraction * 100.0
        );
        s += &format!(
            "size: mode {}, mean {:.0} bytes ({})\n",
            size_label(self.mode_size),
            self.mean_size,
            human(self.mean_size as u64)
        );
        let total: u64 = self.size_histogram.iter().map(|x| x.1).sum();
        s += "size histogram (power of two ≤ size):\n";
        for (b, c) in &self.size_histogram {
            let pct = if total > 0 {
                *c as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            let bar = "#".repeat((pct / 2.0).round() as usize);
            s += &format!("  {:>6} {:>8} {:>5.1}% {}\n", size_label(*b), c, pct, bar);
        }
        if !self.flags.is_empty() {
            let f: Vec<String> = self.flags.iter().map(|(a, n)| format!("{a}={n}")).collect();
            s += &format!("flags: {}\n", f.join(" "));
        }
        s += &format!(
            "by {}:\n",
            if self.format == "raidkit" {
                "export"
            } else {
                "process"
            }
        );
        for w in &self.by_who {
            s += &format!(
                "  {:<24} {:>8} IOs {:>8} R {:>8} W {:>12}\n",
                if w.name.is_empty() { "(none)" } else { &w.name },
                w.ios,
                w.reads,
                w.writes,
                human(w.bytes)
            );
        }
        if !self.by_member.is_empty() {
            s += "by member:\n";
            for (m, n) in &self.by_member {
                s += &format!("  member {m:<3} {n:>8} IOs\n");
            }
        }
        if let Some(sm) = &self.summary {
            s += "blkparse summary:";
            for k in [
                "Reads Queued",
                "Writes Queued",
                "Reads Completed",
                "Writes Completed",
            ] {
                if let Some((n, kib)) = sm.totals.get(k) {
                    s += &format!(" {k} {n} ({kib} KiB);");
                }
            }
            if let Some(e) = sm.events {
                s += &format!(" {e} events");
            }
            s += "\n";
        }
        if self.skipped_lines > 0 {
            s += &format!("skipped {} lines not understood\n", self.skipped_lines);
        }
        s
    }
}

/// `1.50 MiB`.
pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_of_each_kind() {
        let e = parse_blk_line(
            "  8,0    3        1     0.000000000  1234  Q   W 223490 + 8 [kjournald]",
        )
        .unwrap();
        assert_eq!(
            (e.action, e.op, e.offset, e.len),
            ('Q', Op::Write, 223490 * 512, 4096)
        );
        assert_eq!(e.who, "kjournald");
        let e = parse_blk_line("  8,0    0       12     0.000401000   577  Q FWS [jbd2/sda1-8]")
            .unwrap();
        assert_eq!((e.op, e.len, e.flags.as_str()), (Op::Flush, 0, "PS"));
        let e = parse_blk_line("259,0    1       40     0.120000000  2001  D  RA 1024 + 256 [cat]")
            .unwrap();
        assert_eq!((e.op, e.len, e.flags.as_str()), (Op::Read, 131072, "A"));
        let e =
            parse_blk_line("  8,0    1        3     0.500000000     0  C WFS 10 + 8 [0]").unwrap();
        assert_eq!((e.op, e.flags.as_str()), (Op::Write, "FS"));
        let e =
            parse_blk_line("  8,16   0        5     1.000000000   900  Q  DS 2048 + 2048 [fstrim]")
                .unwrap();
        assert_eq!(e.op, Op::Discard);
        assert!(parse_blk_line("CPU0 (8,0):").is_none());
        assert!(parse_blk_line("  8,0  x 1 0.1 1 Q W 1 + 8 [a]").is_none());
        assert!(parse_blk_line("  8,0  1 1 NaN 1 Q W 1 + 8 [a]").is_none());
        assert!(parse_blk_line("  8,0  1 1 0.1 1 Q W 99999999999999999999 + 8 [a]").is_some());
    }

    #[test]
    fn raidkit_lines() {
        let t =
            "{\"t\":0.5,\"op\":\"R\",\"off\":4096,\"len\":8192,\"export\":\"vol\",\"member\":1}\n";
        let tr = parse(t, "x").unwrap();
        assert_eq!(tr.format, "raidkit");
        assert_eq!(tr.events[0].member, Some(1));
        let bad = parse("{\"t\":1}\n", "x.jsonl");
        assert!(matches!(bad, Err(ToolsError::Parse { line: 1, .. })));
        assert!(analyze(&parse("", "x").unwrap(), None).is_err());
    }
}
