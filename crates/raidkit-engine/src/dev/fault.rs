//! Fault injection: a member wrapper that fails, slows down, vanishes, tears writes or lies,
//! for tests and drills. Spec syntax (also accepted wherever a MEMBER path is):
//!
//! `fault:RULE[,RULE...]:PATH` with rules (sectors are absolute device sectors, inclusive
//! ranges `S-E` or single `S`):
//! * `eio@S-E` — reads and writes touching the range fail with EIO;
//! * `reio@S-E` / `weio@S-E` — only reads / only writes fail;
//! * `slow=DUR` — every IO takes this long in the device (`5ms`, `200us`, `1s`; a bare
//!   number is milliseconds); `slow=DUR@N` — from the N-th IO on (0-based; a device that
//!   turns slow, or, with a DUR beyond the member timeout, stops answering in time);
//! * `slow=DUR@S-E` — only IOs touching the sector range take this long (outside the
//!   device model: they do not hold a queue slot), e.g. a member whose data area stops
//!   answering in time while its superblock still reads;
//! * `qd=N` — the device serves at most N IOs at a time; the others wait in arrival (FIFO)
//!   order for a free slot, as in a device's hardware queue;
//! * `bw=RATE` — the device transfers at most RATE bytes per second (`200M`, `1G`, `512K`;
//!   K/M/G are powers of 1024): each IO's transfer time (its length / RATE) follows its
//!   latency and transfers are serialized over the whole device;
//! * `vanish@N` — after N IOs every IO fails with ENODEV (the device disappeared);
//! * `torn@S` — a write covering sector S writes only the part before S, then fails EIO;
//! * `lie@S-E` — reads of the range silently return flipped bytes (a lying member);
//! * `feio` — every flush fails with EIO (writes reach the device but never become
//!   durable: a remote member that stopped answering flushes); `feio@N` — flushes fail
//!   from the N-th one on (counting from 1), the ones before succeed.
//!
//! ## Device model (`slow`, `qd`, `bw`)
//! Together the three rules model a device's speed the way a real drive behaves: an IO
//! that arrives waits for one of the `qd` service slots (FIFO), is then in service for the
//! `slow` latency followed by its transfer, which waits for the device's single transfer
//! channel (`bw`). So a device has both a latency and a capacity: `qd / slow` IOs per
//! second for small IOs and `bw` bytes per second for large ones, and a slow device still
//! adds capacity next to a fast one. Without `qd` the number of IOs in service is
//! unlimited; without `bw` transfers take no time. The completion time of every IO is
//! computed when it arrives (a virtual clock under a short lock): late thread wake-ups on a loaded machine
//! delay that one IO but never lower the modelled device's capacity. Failing IOs
//! (`eio`, `vanish`, ...) take their device time too. The wrapper is an asynchronous
//! device of the member IO layer ([`crate::dev::io::AsyncDev`]): the real IO is done when
//! the IO is submitted and its completion is due at the modelled instant, so a batch of
//! IOs to several modelled members is in service on all of them at once, and no thread
//! sleeps per IO; an IO due after its deadline is reported late at the deadline.

use crate::dev::io::{AsyncDev, AsyncIo, AsyncKind, IoOp, Started, Submission};
use crate::dev::{BlockDev, FileDev};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    /// Every IO takes this latency in the device.
    Slow(Duration),
    /// From this IO on (0-based count), every IO takes this much longer.
    SlowFrom(Duration, u64),
    /// At most this many IOs in service at once; the rest wait in FIFO order.
    Qd(u32),
    /// Transfer bandwidth in bytes per second, one transfer at a time.
    Bw(u64),
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
    /// Flushes fail with EIO from the n-th one on (counting from 1).
    Feio(u64),
    /// IOs touching sectors `start..=end` take this long (on top of the device model).
    SlowRange {
        /// Their latency.
        latency: Duration,
        /// First sector.
        start: u64,
        /// Last sector (inclusive).
        end: u64,
    },
}

/// Split `fault:RULES:MEMBER` into its rules text and the member it wraps (unparsed).
/// None if `spec` is not a fault spec of that shape.
pub fn split_spec(spec: &str) -> Option<(&str, &str)> {
    spec.strip_prefix("fault:")?.split_once(':')
}

/// Parse `fault:RULES:PATH`. Returns None if `spec` does not start with `fault:`.
pub fn parse_spec(spec: &str) -> Option<Result<(Vec<Rule>, PathBuf), String>> {
    spec.strip_prefix("fault:")?;
    let Some((rules, path)) = split_spec(spec) else {
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

/// A duration such as `5ms`, `200us`, `1s` (a bare number is milliseconds).
pub fn duration(s: &str) -> Result<Duration, String> {
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

fn rate(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v: u64 = num.parse().map_err(|_| {
        format!("bad bandwidth {s:?} (bytes per second, e.g. 200M; K/M/G are powers of 1024)")
    })?;
    match v.checked_mul(mult) {
        Some(0) => Err(format!("bandwidth {s:?} must be more than 0")),
        Some(b) => Ok(b),
        None => Err(format!("bandwidth {s:?} is too large")),
    }
}

fn parse_rule(r: &str) -> Result<Rule, String> {
    if r == "feio" {
        return Ok(Rule::Feio(1));
    }
    if let Some(v) = r.strip_prefix("slow=") {
        return match v.split_once('@') {
            None => Ok(Rule::Slow(duration(v)?)),
            Some((d, sectors)) if sectors.contains('-') => {
                let (start, end) = range(sectors)?;
                Ok(Rule::SlowRange {
                    latency: duration(d)?,
                    start,
                    end,
                })
            }
            Some((d, n)) => Ok(Rule::SlowFrom(
                duration(d)?,
                n.parse()
                    .map_err(|_| format!("bad IO count {n:?} in slow=DUR@N"))?,
            )),
        };
    }
    if let Some(v) = r.strip_prefix("qd=") {
        return match v.parse::<u32>() {
            Ok(0) => Err("qd=0: a device serves at least 1 IO at a time (qd=1 or more)".into()),
            Ok(n) => Ok(Rule::Qd(n)),
            Err(_) => Err(format!(
                "bad queue depth {v:?} in qd= (a whole number of IOs, 1 or more)"
            )),
        };
    }
    if let Some(v) = r.strip_prefix("bw=") {
        return Ok(Rule::Bw(rate(v)?));
    }
    let (name, arg) = r.split_once('@').ok_or_else(|| {
        format!(
            "unknown fault rule {r:?} (eio@, reio@, weio@, feio, feio@, slow=, qd=, bw=, vanish@, torn@, lie@)"
        )
    })?;
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
        "feio" => match arg.parse::<u64>() {
            Ok(0) | Err(_) => Err(format!(
                "bad flush number {arg:?} in feio@ (flushes count from 1)"
            )),
            Ok(n) => Ok(Rule::Feio(n)),
        },
        _ => Err(format!(
            "unknown fault rule {name:?} (eio, reio, weio, feio, slow, qd, bw, vanish, torn, lie)"
        )),
    }
}

/// The speed model of a device (`slow`, `qd`, `bw`); see the module docs.
#[derive(Debug)]
pub struct DeviceModel {
    latency: Duration,
    /// Number of service slots (`qd`); 0: unlimited.
    slots: usize,
    bw: Option<u64>,
    clock: Mutex<ModelClock>,
}

#[derive(Debug)]
struct ModelClock {
    /// When each service slot becomes free (one entry per `qd` slot).
    free_at: Vec<Instant>,
    /// When the transfer channel becomes free.
    channel_free: Instant,
}

impl DeviceModel {
    /// The model described by `rules` (None if they contain no `slow`, `qd` or `bw`).
    /// Several `slow` rules add up; the last `qd` and `bw` win.
    pub fn from_rules(rules: &[Rule]) -> Option<DeviceModel> {
        let mut latency = Duration::ZERO;
        let (mut qd, mut bw, mut any) = (None, None, false);
        for r in rules {
            match *r {
                Rule::Slow(d) => latency += d,
                Rule::Qd(n) => qd = Some(n as usize),
                Rule::Bw(b) => bw = Some(b),
                _ => continue,
            }
            any = true;
        }
        let now = Instant::now();
        any.then(|| DeviceModel {
            latency,
            slots: qd.unwrap_or(0),
            bw,
            clock: Mutex::new(ModelClock {
                free_at: vec![now; qd.unwrap_or(0)],
                channel_free: now,
            }),
        })
    }

    /// Book an IO of `len` bytes arriving at `now`: returns when the device completes it.
    pub fn book(&self, now: Instant, len: usize) -> Instant {
        let mut c = crate::array::lock(&self.clock);
        // FIFO: IOs book in arrival order, each taking the slot that frees first.
        let slot = (self.slots > 0).then(|| {
            let (i, _) = c
                .free_at
                .iter()
                .enumerate()
                .min_by_key(|&(_, t)| *t)
                .unwrap_or((0, &now));
            i
        });
        let start = match slot {
            Some(i) => c.free_at.get(i).map_or(now, |&t| t.max(now)),
            None => now,
        };
        let mut done = start + self.latency;
        if let Some(bw) = self.bw {
            let xfer = Duration::from_nanos(
                u64::try_from(len as u128 * 1_000_000_000 / u128::from(bw)).unwrap_or(u64::MAX),
            );
            done = done.max(c.channel_free) + xfer;
            c.channel_free = done;
        }
        if let Some(t) = slot.and_then(|i| c.free_at.get_mut(i)) {
            *t = done;
        }
        done
    }
}

/// A device with injected faults.
pub struct FaultDev {
    inner: Box<dyn BlockDev>,
    rules: Vec<Rule>,
    model: Option<DeviceModel>,
    ios: AtomicU64,
    /// Flushes asked for so far.
    flushes: AtomicU64,
    name: String,
}

impl FaultDev {
    /// Wrap a device.
    pub fn new(inner: Box<dyn BlockDev>, rules: Vec<Rule>) -> FaultDev {
        let name = format!("{} (fault-injected)", inner.name());
        FaultDev {
            inner,
            model: DeviceModel::from_rules(&rules),
            rules,
            ios: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            name,
        }
    }

    /// Open `path` and wrap it.
    pub fn open(path: &Path, rules: Vec<Rule>, write: bool) -> io::Result<FaultDev> {
        Ok(FaultDev::new(Box::new(FileDev::open(path, write)?), rules))
    }

    fn check(&self, off: u64, len: usize, is_write: bool) -> io::Result<()> {
        let n = self.ios.fetch_add(1, Ordering::Relaxed);
        let (s0, s1) = (off / 512, (off + len as u64).div_ceil(512));
        for r in &self.rules {
            match *r {
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

impl FaultDev {
    /// The longest `slow=DUR@S-E` latency of the rules whose range an IO of `len` bytes
    /// at byte `off` touches.
    fn range_latency(&self, off: u64, len: usize) -> Option<Duration> {
        let (s0, s1) = (off / 512, (off + len as u64).div_ceil(512));
        self.rules
            .iter()
            .filter_map(|r| match *r {
                Rule::SlowRange {
                    latency,
                    start,
                    end,
                } if s0 <= end && start < s1 => Some(latency),
                _ => None,
            })
            .max()
    }

    /// Injected read faults (`lie`) on data just read at `off`.
    fn lie(&self, buf: &mut [u8], off: u64) {
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
    }

    /// A write with injected faults (`torn`), on the inner device.
    fn write_inner(&self, buf: &[u8], off: u64) -> io::Result<()> {
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

    fn flush_inner(&self) -> io::Result<()> {
        let n = self.flushes.fetch_add(1, Ordering::Relaxed) + 1;
        if self
            .rules
            .iter()
            .any(|r| matches!(*r, Rule::Vanish(a) if self.ios.load(Ordering::Relaxed) >= a))
        {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        if self
            .rules
            .iter()
            .any(|r| matches!(*r, Rule::Feio(from) if n >= from))
        {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.flush()
    }
}

/// The fault wrapper completes its IOs itself: injected errors first, then the real IO
/// on the inner device at once, and the completion at the instant the device model
/// says (no thread sleeps per IO: the batch waits once for its latest completion, and
/// an IO past its deadline is simply reported late).
impl AsyncDev for FaultDev {
    fn start(&self, io: AsyncIo) -> Started {
        let (len, is_write) = match io.kind {
            AsyncKind::Read(n) => (n, false),
            AsyncKind::Write(n) => (n, true),
            AsyncKind::Flush => return Started::Done(self.flush_inner(), None),
        };
        let off = io.offset;
        let now = Instant::now();
        let mut at = self.model.as_ref().map(|m| m.book(now, len));
        let n = self.ios.load(Ordering::Relaxed);
        for rule in &self.rules {
            if let Rule::SlowFrom(d, from) = *rule {
                if n >= from {
                    at = Some(at.unwrap_or(now) + d);
                }
            }
        }
        let at = match self.range_latency(off, len) {
            Some(d) => Some(at.unwrap_or(now).max(now + d)),
            None => at,
        };
        let mut r = self.check(off, len, is_write);
        if r.is_ok() {
            let ran = if is_write {
                io.with_write_data(|b| r = self.write_inner(b, off))
            } else {
                io.with_read_buf(|b| {
                    r = self.inner.read_at(b, off);
                    if r.is_ok() {
                        self.lie(b, off);
                    }
                })
            };
            if !ran {
                r = Err(io::Error::other("IO abandoned"));
            }
        }
        Started::Done(r, at)
    }
}

impl BlockDev for FaultDev {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        crate::dev::io::run_one(self, off, IoOp::Read(buf))
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        crate::dev::io::run_one(self, off, IoOp::Write(buf))
    }
    fn flush(&self) -> io::Result<()> {
        crate::dev::io::run_one(self, 0, IoOp::Flush)
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
    fn opened_from(&self) -> &str {
        self.inner.opened_from()
    }
    fn identity(&self) -> Option<crate::Identity> {
        self.inner.identity()
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        self.inner.is_hole(offset, len)
    }
    fn hole_end(&self, offset: u64) -> Option<u64> {
        self.inner.hole_end(offset)
    }
    fn submission(&self) -> Submission<'_> {
        Submission::Async(self)
    }
    fn default_timeout(&self) -> Option<Duration> {
        self.inner.default_timeout()
    }
    fn network(&self) -> Option<&crate::dev::nbd::NbdDev> {
        self.inner.network()
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
        assert_eq!(
            parse_spec("fault:slow=20s@64:x").unwrap().unwrap().0,
            vec![Rule::SlowFrom(Duration::from_secs(20), 64)]
        );
        assert!(parse_spec("fault:slow=5ms@x:x")
            .unwrap()
            .unwrap_err()
            .contains("bad IO count"));
        assert!(parse_spec("fault:slow=5h:x")
            .unwrap()
            .unwrap_err()
            .contains("bad duration unit"));
    }

    #[test]
    fn slow_ranges_delay_only_the_ios_touching_them() {
        let (r, _) = parse_spec("fault:slow=20s@4096-8191:/x").unwrap().unwrap();
        let slow = Rule::SlowRange {
            latency: Duration::from_secs(20),
            start: 4096,
            end: 8191,
        };
        assert_eq!(r, vec![slow.clone()]);
        let f = FaultDev::new(Box::new(crate::dev::MemDev::new("m", 8 << 20)), vec![slow]);
        assert_eq!(f.range_latency(0, 4096), None);
        assert_eq!(f.range_latency(4095 * 512, 512), None);
        assert_eq!(
            f.range_latency(4095 * 512, 1024),
            Some(Duration::from_secs(20))
        );
        assert_eq!(f.range_latency(8192 * 512, 4096), None);
        assert!(f.write_at(&[1; 4096], 0).is_ok());
    }

    #[test]
    fn flush_errors_from_the_nth_flush() {
        let (r, _) = parse_spec("fault:feio,feio@3:/x").unwrap().unwrap();
        assert_eq!(r, vec![Rule::Feio(1), Rule::Feio(3)]);
        assert_eq!(
            parse_spec("fault:feio@0:/x").unwrap().unwrap_err(),
            r#""fault:feio@0:/x": bad flush number "0" in feio@ (flushes count from 1)"#
        );
        let f = FaultDev::new(
            Box::new(crate::dev::MemDev::new("m", 4096)),
            vec![Rule::Feio(3)],
        );
        assert!(f.flush().is_ok());
        assert!(f.flush().is_ok());
        for _ in 0..3 {
            assert_eq!(f.flush().unwrap_err().raw_os_error(), Some(libc::EIO));
        }
        // Writes and reads still work: only durability is lost.
        f.write_at(&[7u8; 512], 0).unwrap();
        let mut b = [0u8; 512];
        f.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [7u8; 512]);
    }

    #[test]
    fn parses_device_model_rules_and_rejects_bad_ones() {
        let (r, _) = parse_spec("fault:slow=100us,qd=4,bw=200M:/x")
            .unwrap()
            .unwrap();
        assert_eq!(
            r,
            vec![
                Rule::Slow(Duration::from_micros(100)),
                Rule::Qd(4),
                Rule::Bw(200 << 20)
            ]
        );
        let (r, _) = parse_spec("fault:bw=512k,bw=3G,bw=1000:/x")
            .unwrap()
            .unwrap();
        assert_eq!(
            r,
            vec![Rule::Bw(512 << 10), Rule::Bw(3 << 30), Rule::Bw(1000)]
        );
        let err = |s: &str| parse_spec(s).unwrap().unwrap_err();
        assert_eq!(
            err("fault:qd=0:/x"),
            r#""fault:qd=0:/x": qd=0: a device serves at least 1 IO at a time (qd=1 or more)"#
        );
        assert_eq!(
            err("fault:qd=many:/x"),
            r#""fault:qd=many:/x": bad queue depth "many" in qd= (a whole number of IOs, 1 or more)"#
        );
        assert_eq!(
            err("fault:bw=fast:/x"),
            r#""fault:bw=fast:/x": bad bandwidth "fast" (bytes per second, e.g. 200M; K/M/G are powers of 1024)"#
        );
        assert_eq!(
            err("fault:bw=0M:/x"),
            r#""fault:bw=0M:/x": bandwidth "0M" must be more than 0"#
        );
        assert_eq!(
            err("fault:bw=99999999999999G:/x"),
            r#""fault:bw=99999999999999G:/x": bandwidth "99999999999999G" is too large"#
        );
        assert_eq!(
            err("fault:qd:/x"),
            r#""fault:qd:/x": unknown fault rule "qd" (eio@, reio@, weio@, feio, feio@, slow=, qd=, bw=, vanish@, torn@, lie@)"#
        );
        assert!(DeviceModel::from_rules(&[Rule::Torn(3)]).is_none());
    }

    #[test]
    fn device_model_queues_fifo_on_qd_slots() {
        let m =
            DeviceModel::from_rules(&[Rule::Slow(Duration::from_millis(1)), Rule::Qd(2)]).unwrap();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // Two slots: IOs 1 and 2 start at once, 3 waits for the first free slot, 4 for
        // the second; an IO arriving after the queue drained starts on arrival.
        assert_eq!(m.book(t0, 4096), ms(1));
        assert_eq!(m.book(t0, 4096), ms(1));
        assert_eq!(m.book(t0, 4096), ms(2));
        assert_eq!(m.book(ms(1), 4096), ms(2));
        assert_eq!(m.book(ms(1), 4096), ms(3));
        assert_eq!(m.book(ms(10), 4096), ms(11));
    }

    #[test]
    fn device_model_serializes_transfers_after_latency() {
        // 1 MiB/s: 1 KiB takes 1/1024 s; 512 KiB takes 500 ms.
        let m = DeviceModel::from_rules(&[Rule::Slow(Duration::from_millis(2)), Rule::Bw(1 << 20)])
            .unwrap();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        assert_eq!(m.book(t0, 512 << 10), ms(502));
        // Unlimited slots: its latency overlaps the first transfer, its transfer follows.
        assert_eq!(m.book(t0, 512 << 10), ms(1002));
        // After the channel is free: latency, then transfer.
        assert_eq!(
            m.book(ms(2000), 1024),
            ms(2002) + Duration::from_nanos(976_562)
        );
        // Latency alone (no bw): every IO takes exactly the latency, no queue.
        let m = DeviceModel::from_rules(&[Rule::Slow(Duration::from_millis(3))]).unwrap();
        for _ in 0..5 {
            assert_eq!(m.book(t0, 1 << 20), ms(3));
        }
    }

    #[test]
    fn modelled_device_still_reads_and_writes_exact_data() {
        let m = crate::dev::MemDev::new("m", 64 * 512);
        let f = FaultDev::new(
            Box::new(m),
            vec![
                Rule::Slow(Duration::from_micros(50)),
                Rule::Qd(1),
                Rule::Bw(64 << 20),
            ],
        );
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_at(&data, 3 * 512).unwrap();
        let mut b = vec![0u8; 8192];
        f.read_at(&mut b, 3 * 512).unwrap();
        assert_eq!(b, data);
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
