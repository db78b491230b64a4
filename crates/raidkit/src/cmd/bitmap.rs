//! `raidkit examine --bitmap`: the write-intent bitmap of each member, like `mdadm -X`
//! (chunk, events, dirty bits per region), and what a resync or a re-add would copy.

use crate::units::human;
use anyhow::{bail, Context, Result};
use raidkit_engine::dev::{BlockDev, FileDev};
use raidkit_engine::sb::{probe, Super};
use raidkit_format::bitmap::{self, BitmapSuper, BITMAP_SB_BYTES};
use raidkit_format::MAX_SECTOR;
use raidkit_layout::Level;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Text output shows at most this many dirty runs per bitmap (JSON has them all).
const TEXT_RUNS: usize = 32;

/// One member's superblock and bitmap.
struct Member {
    path: PathBuf,
    sb: Super,
    bm: BitmapSuper,
    bits: Vec<u8>,
}

/// A run of consecutive dirty bits `[first, last]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First dirty bit.
    pub first: u64,
    /// Last dirty bit (inclusive).
    pub last: u64,
}

/// The dirty bits of `bits` (the first `nbits` of them) as runs, in order.
pub fn dirty_runs(bits: &[u8], nbits: u64) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for i in 0..nbits {
        if !bitmap::bit_is_set(bits, i) {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.last + 1 == i => r.last = i,
            _ => runs.push(Run { first: i, last: i }),
        }
    }
    runs
}

/// Bits in `runs`.
fn count(runs: &[Run]) -> u64 {
    runs.iter().map(|r| r.last - r.first + 1).sum()
}

/// Array bytes per sector of the bitmap's address space, as (sync sectors per row, array
/// bytes per row): parity levels map one chunk of member data to a row of data chunks;
/// mirrors (RAID1, RAID10) cover array sectors.
fn row(sb: &Super) -> (u64, u64) {
    match Level::from_md(sb.level()) {
        Some(l) if l.has_parity() && sb.chunk_sectors() > 0 => {
            let data = sb.raid_disks().saturating_sub(l.parity_blocks()) as u64;
            (sb.chunk_sectors(), sb.chunk_sectors() * 512 * data)
        }
        _ => (1, 512),
    }
}

/// The member-data sectors `[start, end)` and array bytes `[start, end)` of a run.
fn run_span(sb: &Super, bm: &BitmapSuper, r: Run) -> ((u64, u64), (u64, u64)) {
    let (s, _) = bm.chunk_range(r.first);
    let (_, e) = bm.chunk_range(r.last);
    let (c, rb) = row(sb);
    ((s, e), (s / c * rb, e.div_ceil(c) * rb))
}

/// Read one member's superblock and bitmap.
fn read_member(p: &Path) -> Result<Member> {
    super::check_member(p)?;
    let d = FileDev::open(p, false).with_context(|| format!("opening {}", p.display()))?;
    let dev_sectors = d.size_bytes() / 512;
    let pr = probe(&d)?;
    let Some((sb, _)) = pr.found.into_iter().next() else {
        bail!("{}: no MD superblock", p.display());
    };
    let Some(loc) = sb.bitmap_sector(dev_sectors) else {
        bail!(
            "{}: the array has no internal write-intent bitmap (add one with mdadm --grow --bitmap=internal)",
            p.display()
        );
    };
    let mut head = vec![0u8; BITMAP_SB_BYTES];
    d.read_at(&mut head, loc * 512)
        .with_context(|| format!("reading the bitmap superblock of {}", p.display()))?;
    let bm = BitmapSuper::parse(&head)
        .with_context(|| format!("{}: the bitmap superblock is unreadable", p.display()))?;
    let nbytes = bm.chunks().div_ceil(8);
    let room = d
        .size_bytes()
        .saturating_sub(loc * 512 + BITMAP_SB_BYTES as u64);
    if nbytes > room {
        bail!(
            "{}: the bitmap says {} bits ({nbytes} bytes) but only {room} bytes follow it on the device: it is corrupt",
            p.display(),
            bm.chunks()
        );
    }
    let mut bits = vec![0u8; nbytes as usize];
    d.read_at(&mut bits, loc * 512 + BITMAP_SB_BYTES as u64)
        .with_context(|| format!("reading the bitmap of {}", p.display()))?;
    Ok(Member {
        path: p.to_path_buf(),
        sb,
        bm,
        bits,
    })
}

/// The bitmap's state words, as mdadm prints them.
fn state_text(m: &Member) -> String {
    let mut s = Vec::new();
    if m.bm.state & bitmap::state::STALE != 0 || m.bm.events < m.sb.events() {
        s.push("Out of date (every bit counts as dirty)");
    }
    if m.bm.state & bitmap::state::WRITE_ERROR != 0 {
        s.push("Write error");
    }
    if s.is_empty() {
        "OK".into()
    } else {
        s.join(", ")
    }
}

fn runs_json(m: &Member, runs: &[Run]) -> Value {
    runs.iter()
        .map(|&r| {
            let ((s, e), (a, b)) = run_span(&m.sb, &m.bm, r);
            json!({"first_bit": r.first, "last_bit": r.last, "member_sectors": [s, e], "array_bytes": [a, b]})
        })
        .collect()
}

fn member_json(m: &Member) -> Value {
    let runs = dirty_runs(&m.bits, m.bm.chunks());
    json!({
        "device": m.path.display().to_string(),
        "uuid": raidkit_format::uuid::format(&m.bm.uuid),
        "version": m.bm.version,
        "events": m.bm.events,
        "events_cleared": m.bm.events_cleared,
        "superblock_events": m.sb.events(),
        "state": state_text(m),
        "stale": m.bm.state & bitmap::state::STALE != 0 || m.bm.events < m.sb.events(),
        "chunk_bytes": m.bm.chunksize,
        "daemon_sleep_seconds": m.bm.daemon_sleep,
        "write_behind": m.bm.write_behind,
        "sync_size_sectors": m.bm.sync_size,
        "bits": m.bm.chunks(),
        "dirty_bits": count(&runs),
        "dirty": runs_json(m, &runs),
    })
}

fn member_text(m: &Member) -> String {
    let runs = dirty_runs(&m.bits, m.bm.chunks());
    let mut s = format!("{}:\n", m.path.display());
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:>16} : {v}\n"));
    line("Magic", format!("{:08x}", bitmap::BITMAP_MAGIC));
    line("Version", m.bm.version.to_string());
    line("UUID", raidkit_format::uuid::format(&m.bm.uuid));
    line("Events", m.bm.events.to_string());
    line("Events Cleared", m.bm.events_cleared.to_string());
    line("State", state_text(m));
    line("Chunksize", human(u64::from(m.bm.chunksize)));
    line("Daemon", format!("{}s flush period", m.bm.daemon_sleep));
    line(
        "Write Mode",
        if m.bm.write_behind == 0 {
            "Normal".into()
        } else {
            format!("Allow write behind, max {}", m.bm.write_behind)
        },
    );
    line(
        "Sync Size",
        format!(
            "{} sectors ({})",
            m.bm.sync_size,
            crate::units::human_sectors(m.bm.sync_size)
        ),
    );
    let n = m.bm.chunks();
    let d = count(&runs);
    line(
        "Bitmap",
        format!("{n} bits (chunks), {d} dirty ({:.1}%)", pct(d, n)),
    );
    for (i, &r) in runs.iter().enumerate() {
        if i == TEXT_RUNS {
            s.push_str(&format!(
                "{:>19}... {} more runs (--json lists all)\n",
                "",
                runs.len() - i
            ));
            break;
        }
        s.push_str(&format!("{:>19}{}\n", "", run_text(m, r)));
    }
    s.push('\n');
    s
}

fn pct(d: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        d as f64 * 100.0 / n as f64
    }
}

fn run_text(m: &Member, r: Run) -> String {
    let ((s, e), (a, b)) = run_span(&m.sb, &m.bm, r);
    let bits = if r.first == r.last {
        format!("bit {}", r.first)
    } else {
        format!("bits {}-{}", r.first, r.last)
    };
    format!(
        "dirty {bits}: member data sectors {s}-{} ({}), array bytes {a}-{} ({})",
        e.saturating_sub(1),
        human((e - s) * 512),
        b.saturating_sub(1),
        human(b - a)
    )
}

/// What assembling these members would copy, per array: the bitmap raidkit (and md)
/// would use is an in-sync member's with the newest events; a stale one counts as all
/// dirty; members behind the others are re-added from the bitmap if it still covers
/// their absence (their events ≥ `events_cleared`), else rebuilt in full.
fn plan(ms: &[&Member]) -> Value {
    let newest = ms.iter().map(|m| m.sb.events()).max().unwrap_or(0);
    let Some(src) = ms
        .iter()
        .filter(|m| m.sb.events() == newest)
        .find(|m| m.sb.recovery_offset().is_none())
        .or_else(|| ms.iter().find(|m| m.sb.events() == newest))
    else {
        return Value::Null;
    };
    let stale = src.bm.events < newest || src.bm.state & bitmap::state::STALE != 0;
    let n = src.bm.chunks();
    let runs = if stale {
        if n == 0 {
            Vec::new()
        } else {
            vec![Run {
                first: 0,
                last: n - 1,
            }]
        }
    } else {
        dirty_runs(&src.bits, n)
    };
    let clean = src.sb.resync_offset() == MAX_SECTOR;
    let behind: Vec<Value> = ms
        .iter()
        .filter(|m| m.sb.events() < newest)
        .map(|m| {
            let guided = m.sb.events() >= src.bm.events_cleared && !stale;
            json!({"device": m.path.display().to_string(), "events": m.sb.events(),
                   "copy": if guided { "dirty regions" } else { "everything" }})
        })
        .collect();
    json!({
        "uuid": raidkit_format::uuid::format(&src.bm.uuid),
        "bitmap_from": src.path.display().to_string(),
        "array_events": newest,
        "clean": clean,
        "stale_bitmap": stale,
        "resync_at_start": !clean,
        "bits": n,
        "copy_bits": count(&runs),
        "copy_member_bytes": runs.iter().map(|&r| { let ((s, e), _) = run_span(&src.sb, &src.bm, r); (e - s) * 512 }).sum::<u64>(),
        "copy": runs_json(src, &runs),
        "members_behind": behind,
    })
}

fn plan_text(p: &Value) -> String {
    let mut s = format!(
        "Resync plan for array {}:\n",
        p["uuid"].as_str().unwrap_or("?")
    );
    let bits = p["copy_bits"].as_u64().unwrap_or(0);
    let n = p["bits"].as_u64().unwrap_or(0);
    let bytes = p["copy_member_bytes"].as_u64().unwrap_or(0);
    s.push_str(&format!(
        "  bitmap of {} (array events {}){}\n",
        p["bitmap_from"].as_str().unwrap_or("?"),
        p["array_events"],
        if p["stale_bitmap"] == true {
            ": out of date, every region counts as dirty"
        } else {
            ""
        }
    ));
    let what = format!(
        "{bits} of {n} regions ({:.1}%, {} of each member's data)",
        pct(bits, n),
        human(bytes)
    );
    if p["clean"] == true {
        s.push_str(&format!(
            "  the array is clean: no resync runs when it starts; a resync started by hand (sync-action resync) would copy {what}\n"
        ));
    } else {
        s.push_str(&format!(
            "  the array was not shut down cleanly: starting it resyncs {what}\n"
        ));
    }
    for r in p["copy"].as_array().into_iter().flatten().take(TEXT_RUNS) {
        let ms = &r["member_sectors"];
        let ab = &r["array_bytes"];
        s.push_str(&format!(
            "    bits {}-{}: member data sectors {}-{}, array bytes {}-{}\n",
            r["first_bit"],
            r["last_bit"],
            ms[0],
            ms[1].as_u64().unwrap_or(1).saturating_sub(1),
            ab[0],
            ab[1].as_u64().unwrap_or(1).saturating_sub(1)
        ));
    }
    for b in p["members_behind"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  {} is behind (events {}): adding it back copies {}\n",
            b["device"].as_str().unwrap_or("?"),
            b["events"],
            if b["copy"] == "everything" {
                "everything (the bitmap no longer covers its absence)"
            } else {
                "the dirty regions only"
            }
        ));
    }
    s
}

/// Run `examine --bitmap` over `paths`.
pub fn run(paths: &[PathBuf], as_json: bool) -> Result<()> {
    let mut ms = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        match read_member(p) {
            Ok(m) => ms.push(m),
            Err(e) => errors.push((p.clone(), crate::out::error_text(&e))),
        }
    }
    let mut uuids: Vec<[u8; 16]> = ms.iter().map(|m| m.sb.uuid()).collect();
    uuids.sort();
    uuids.dedup();
    let plans: Vec<Value> = uuids
        .iter()
        .map(|u| plan(&ms.iter().filter(|m| m.sb.uuid() == *u).collect::<Vec<_>>()))
        .collect();
    if as_json {
        let mut members: Vec<Value> = ms.iter().map(member_json).collect();
        for (p, e) in &errors {
            members.push(json!({"device": p.display().to_string(), "error": e}));
        }
        let v = json!({"members": members, "arrays": plans});
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for m in &ms {
            out!("{}", member_text(m));
        }
        for (p, e) in &errors {
            outln!("{}:\n    {e}\n", p.display());
        }
        for p in &plans {
            out!("{}", plan_text(p));
        }
    }
    if !errors.is_empty() {
        bail!(
            "{} of {} device(s) have no readable bitmap",
            errors.len(),
            paths.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_neighbours_and_stop_at_nbits() {
        // bits 0, 1, 2, 5, 9 set; 9 is beyond nbits = 8.
        let bits = [0b0010_0111u8, 0b0000_0010];
        assert_eq!(
            dirty_runs(&bits, 8),
            vec![Run { first: 0, last: 2 }, Run { first: 5, last: 5 }]
        );
        assert_eq!(
            dirty_runs(&bits, 16).last(),
            Some(&Run { first: 9, last: 9 })
        );
        assert_eq!(count(&dirty_runs(&bits, 16)), 5);
        assert!(dirty_runs(&[0u8; 4], 32).is_empty());
    }
}
