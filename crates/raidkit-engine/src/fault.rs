//! Fault injection: a member wrapper that fails, slows down, vanishes, tears writes or lies,
//! for tests and drills. Spec syntax (also accepted wherever a MEMBER path is):
//!
//! `fault:RULE[,RULE...]:PATH` with rules (sectors are absolute device sectors, inclusive
//! ranges `S-E` or single `S`):
//! * `eio@S-E` — reads and writes touching the range fail with EIO;
//! * `reio@S-E` / `weio@S-E` — only reads / only writes fail;
//! * `slow=DUR` — every IO is delayed (`5ms`, `200us`, `1s`);
//! * `vanish@N` — after N IOs every IO fails with ENODEV (the device disappeared);
//! * `torn@S` — a write covering sector S writes only the part before S, then fails EIO;
//! * `lie@S-E` — reads of the range silently return flipped bytes (a lying member).

use crate::dev::{BlockDev, FileDev};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One fault rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Fail reads (`read`) and/or writes (`write`) touching sectors `start..=end`.
    Eio {
        /// First sector.
        start: u64,
        /// Last sector (inclusive).
        end: u64,
        /// Applies to reads.
        read: bool,
        /// Applies to writes.
        write: bool,
    },
    /// Delay every IO.
    Slow(Duration),
    /// After this many IOs, everything fails with ENODEV.
    Vanish(u64),
    /// A write covering this sector is cut short before it.
    Torn(u64),
    /// Reads of `start..=end` return corrupted bytes without an error.
    Lie {
        /// First sector.
        start: u64,
        /// Last sector (inclusive).
        end: u64,
    },
}

/// Parse `fault:RULES:PATH`. Returns None if `spec` does not start with `fault:`.
pub fn parse_spec(spec: &str) -> Option<Result<(Vec<Rule>, PathBuf), String>> {
    let rest = spec.strip_prefix("fault:")?;
    let Some((rules, path)) = rest.split_once(':') else {
        return Some(Err(format!("{spec:?}: expected fault:RULE[,RULE...]:PATH")));
    };
    let mut out = Vec::new();
    for r in rules.split(',').filter(|r| !r.is_empty()) {
        match parse_rule(r) {
            Ok(x) => out.push(x),
            Err(e) => return Some(Err(format!("{spec:?}: {e}"))),
        }
    }
    Some(Ok((out, PathBuf::from(path))))
}

fn range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (a, b),
        None => (s, s),
    };
    let a: u64 = a.parse().map_err(|_| format!("bad sector {a:?}"))?;
    let b: u64 = b.parse().map_err(|_| format!("bad sector {b:?}"))?;
    if b < a {
        return Err(format!("range {s:?} ends before it starts"));
    }
    Ok((a, b))
}

fn duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .unwrap_or((s, "ms"));
    let v: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    match unit {
        "us" => Ok(Duration::from_micros(v)),
        "ms" => Ok(Duration::from_millis(v)),
        "s" => Ok(Duration::from_secs(v)),
        _ => Err(format!("bad duration unit in {s:?} (use us, ms or s)")),
    }
}

fn parse_rule(r: &str) -> Result<Rule, String> {
    if let Some(v) = r.strip_prefix("slow=") {
        return Ok(Rule::Slow(duration(v)?));
    }
    let (name, arg) = r
        .split_once('@')
        .ok_or_else(|| format!("unknown fault rule {r:?}"))?;
    match name {
        "eio" | "reio" | "weio" => {
            let (start, end) = range(arg)?;
            Ok(Rule::Eio {
                start,
                end,
                read: name != "weio",
                write: name != "reio",
            })
        }
        "lie" => {
            let (start, end) = range(arg)?;
            Ok(Rule::Lie { start, end })
        }
        "vanish" => Ok(Rule::Vanish(
            arg.parse().map_err(|_| format!("bad count {arg:?}"))?,
        )),
        "torn" => Ok(Rule::Torn(
            arg.parse().map_err(|_| format!("bad sector {arg:?}"))?,
        )),
        _ => Err(format!(
            "unknown fault rule {name:?} (eio, reio, weio, slow, vanish, torn, lie)"
        )),
    }
}

/// A device with injected faults.
pub struct FaultDev {
    inner: Box<dyn BlockDev>,
    rules: Vec<Rule>,
    ios: AtomicU64,
    name: String,
}

impl FaultDev {
    /// Wrap a device.
    pub fn new(inner: Box<dyn BlockDev>, rules: Vec<Rule>) -> FaultDev {
        let name = format!("{} (fault-injected)", inner.name());
        FaultDev {
            inner,
            rules,
            ios: AtomicU64::new(0),
            name,
        }
    }

    /// Open `path` and wrap it.
    pub fn open(path: &Path, rules: Vec<Rule>, write: bool) -> io::Result<FaultDev> {
        Ok(FaultDev::new(Box::new(FileDev::open(path, write)?), rules))
    }

    fn before(&self, off: u64, len: usize, is_write: bool) -> io::Result<()> {
        let n = self.ios.fetch_add(1, Ordering::Relaxed);
        let (s0, s1) = (off / 512, (off + len as u64).div_ceil(512));
        for r in &self.rules {
            match *r {
                Rule::Slow(d) => std::thread::sleep(d),
                Rule::Vanish(after) if n >= after => {
                    return Err(io::Error::from_raw_os_error(libc::ENODEV));
                }
                Rule::Eio {
                    start,
                    end,
                    read,
                    write,
                } if s0 <= end && start < s1 && ((is_write && write) || (!is_write && read)) => {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl BlockDev for FaultDev {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.before(off, buf.len(), false)?;
        self.inner.read_at(buf, off)?;
        for r in &self.rules {
            if let Rule::Lie { start, end } = *r {
                for (i, b) in buf.iter_mut().enumerate() {
                    let sec = (off + i as u64) / 512;
                    if sec >= start && sec <= end {
                        *b ^= 0x5a;
                    }
                }
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.before(off, buf.len(), true)?;
        for r in &self.rules {
            if let Rule::Torn(sec) = *r {
                let (s0, s1) = (off / 512, (off + buf.len() as u64).div_ceil(512));
                if s0 <= sec && sec < s1 {
                    let keep = ((sec * 512).saturating_sub(off)) as usize;
                    self.inner.write_at(&buf[..keep.min(buf.len())], off)?;
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
            }
        }
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        if self
            .rules
            .iter()
            .any(|r| matches!(*r, Rule::Vanish(a) if self.ios.load(Ordering::Relaxed) >= a))
        {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        self.inner.flush()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        self.inner.logical_block_size()
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        self.inner.is_hole(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rules() {
        let (r, p) = parse_spec("fault:eio@100-107,slow=5ms,vanish@10,torn@64,lie@3,weio@9:/x/y")
            .unwrap()
            .unwrap();
        assert_eq!(p, PathBuf::from("/x/y"));
        assert_eq!(
            r,
            vec![
                Rule::Eio {
                    start: 100,
                    end: 107,
                    read: true,
                    write: true
                },
                Rule::Slow(Duration::from_millis(5)),
                Rule::Vanish(10),
                Rule::Torn(64),
                Rule::Lie { start: 3, end: 3 },
                Rule::Eio {
                    start: 9,
                    end: 9,
                    read: false,
                    write: true
                },
            ]
        );
        assert!(parse_spec("plain.img").is_none());
        assert!(parse_spec("fault:bogus@1:x")
            .unwrap()
            .unwrap_err()
            .contains("unknown fault rule"));
        assert!(parse_spec("fault:eio@9-3:x")
            .unwrap()
            .unwrap_err()
            .contains("ends before"));
        assert!(parse_spec("fault:slow=5h:x")
            .unwrap()
            .unwrap_err()
            .contains("bad duration unit"));
    }

    #[test]
    fn injects() {
        let m = crate::dev::MemDev::new("m", 64 * 512);
        m.write_at(&[7u8; 64 * 512], 0).unwrap();
        let f = FaultDev::new(
            Box::new(m),
            vec![
                Rule::Eio {
                    start: 4,
                    end: 5,
                    read: true,
                    write: false,
                },
                Rule::Lie { start: 10, end: 10 },
                Rule::Torn(20),
            ],
        );
        let mut b = vec![0u8; 512];
        assert_eq!(
            f.read_at(&mut b, 5 * 512).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        f.read_at(&mut b, 6 * 512).unwrap();
        assert!(b.iter().all(|&x| x == 7));
        f.write_at(&b, 4 * 512).unwrap();
        f.read_at(&mut b, 10 * 512).unwrap();
        assert!(b.iter().all(|&x| x == 7 ^ 0x5a));
        assert!(f.write_at(&[1u8; 2048], 18 * 512).is_err());
        f.read_at(&mut b, 18 * 512).unwrap();
        assert!(b.iter().all(|&x| x == 1), "part before the tear is written");
        f.read_at(&mut b, 20 * 512).unwrap();
        assert!(b.iter().all(|&x| x == 7), "part after the tear is not");
    }
}
