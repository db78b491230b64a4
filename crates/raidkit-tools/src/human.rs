//! Numbers, sizes, rates, durations and timestamps the way people read them: `10k`, `1.2 GiB/s`,
//! `850 µs`, `2025-11-25T15:33:02+01:00`. One place for every chart axis, table and log line.
//!
//! Rules: at most three significant digits (`1.23 GiB`, `12.3 MiB`, `123 KiB`), no trailing
//! `.0`, binary units (KiB, MiB, ...) for bytes and byte rates as fio and mdadm print them,
//! decimal (MB/s) only where a device's speed is compared with its link's (link speeds are
//! decimal), SI suffixes (k, M, G) for counts.

/// `v` with at most three significant digits and no trailing zeros (`1.5`, `12`, `0.25`).
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    let decimals = if a == 0.0 || a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        // Three significant digits below 1, at most 3 decimals (0.123, 0.05).
        3
    };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Scale `v` by `base` until it is below `base`, returning the value and the unit index.
fn scaled(v: f64, base: f64, units: usize) -> (f64, usize) {
    let mut x = v;
    let mut u = 0;
    while x.abs() >= base && u + 1 < units {
        x /= base;
        u += 1;
    }
    // 1023.7 KiB prints as 1020 KiB with three digits, never "1024 KiB".
    (x, u)
}

const BIN: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// Bytes in binary units: `0 B`, `512 B`, `4 KiB`, `1.5 MiB`, `1.23 GiB`.
pub fn bytes(n: f64) -> String {
    let (x, u) = scaled(n, 1024.0, BIN.len());
    format!("{} {}", num(x), BIN[u])
}

/// A byte rate in binary units: `1.2 GiB/s`.
pub fn rate(bytes_per_sec: f64) -> String {
    format!("{}/s", bytes(bytes_per_sec))
}

/// A byte rate in decimal megabytes, as drive and link speeds are quoted: `520 MB/s`.
pub fn mb_s(bytes_per_sec: f64) -> String {
    let v = bytes_per_sec / 1e6;
    if v >= 1000.0 {
        format!("{} GB/s", num(v / 1000.0))
    } else {
        format!("{} MB/s", num(v))
    }
}

/// A count with SI suffixes: `950`, `10k`, `1.2k`, `3.4M`.
pub fn count(n: f64) -> String {
    const SI: [&str; 5] = ["", "k", "M", "G", "T"];
    let (x, u) = scaled(n, 1000.0, SI.len());
    format!("{}{}", num(x), SI[u])
}

/// A duration given in nanoseconds: `850 ns`, `12 µs`, `1.2 ms`, `3.4 s`, `2 min`.
pub fn duration_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let a = ns.abs();
    if a < 1e3 {
        format!("{} ns", num(ns))
    } else if a < 1e6 {
        format!("{} µs", num(ns / 1e3))
    } else if a < 1e9 {
        format!("{} ms", num(ns / 1e6))
    } else if a < 120e9 {
        format!("{} s", num(ns / 1e9))
    } else {
        format!("{} min", num(ns / 60e9))
    }
}

/// A fraction as a percentage: `0.253` → `25.3%`.
pub fn percent(frac: f64) -> String {
    format!("{}%", num(frac * 100.0))
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// ISO 8601 with an explicit UTC offset: `unix_secs` shown at `offset_secs` east of UTC,
/// e.g. `2025-11-25T15:33:02+01:00`.
pub fn iso8601_at(unix_secs: i64, offset_secs: i64) -> String {
    let t = unix_secs + offset_secs;
    let (y, mo, d) = civil_from_days(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    let sign = if offset_secs < 0 { '-' } else { '+' };
    let off = offset_secs.abs();
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}{sign}{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        off / 3600,
        off / 60 % 60
    )
}

/// The local time zone's offset from UTC at `unix_secs`, in seconds east (0 if unknown).
pub fn local_offset_secs(unix_secs: i64) -> i64 {
    let t: libc::time_t = unix_secs as libc::time_t;
    // SAFETY: `tm` is a plain C struct that localtime_r fills completely on success; both
    // pointers are valid for the call, and localtime_r is the thread-safe variant.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if ok {
        tm.tm_gmtoff as i64
    } else {
        0
    }
}

/// `unix_secs` as local time in ISO 8601 with its UTC offset (`2025-11-25T15:33:02+01:00`).
pub fn timestamp(unix_secs: u64) -> String {
    let t = i64::try_from(unix_secs).unwrap_or(i64::MAX / 2);
    iso8601_at(t, local_offset_secs(t))
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The current local time, as [`timestamp`].
pub fn timestamp_now() -> String {
    timestamp(now_unix())
}

/// A short label for a member device path: its file name (`sda`, `d0.img`), or the whole path
/// when two members would share a file name.
pub fn device_labels(devices: &[String]) -> Vec<String> {
    let base = |d: &str| {
        std::path::Path::new(d)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| d.to_string())
    };
    let names: Vec<String> = devices.iter().map(|d| base(d)).collect();
    names
        .iter()
        .zip(devices)
        .map(|(n, d)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                d.clone()
            } else {
                n.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_three_digits_and_no_trailing_zero() {
        let got: Vec<String> = [0.0, 1.0, 1.5, 12.34, 123.4, 10_000.0, 0.25, 0.0504, -2.0]
            .into_iter()
            .map(num)
            .collect();
        assert_eq!(
            got,
            ["0", "1", "1.5", "12.3", "123", "10000", "0.25", "0.05", "-2"]
        );
    }

    #[test]
    fn units() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(4096.0), "4 KiB");
        assert_eq!(bytes(1.5 * 1048576.0), "1.5 MiB");
        assert_eq!(rate(1.2 * 1073741824.0), "1.2 GiB/s");
        assert_eq!(mb_s(180e6), "180 MB/s");
        assert_eq!(mb_s(1.5e9), "1.5 GB/s");
        assert_eq!(count(950.0), "950");
        assert_eq!(count(10_000.0), "10k");
        assert_eq!(count(1_234.0), "1.23k");
        assert_eq!(count(3_400_000.0), "3.4M");
        assert_eq!(duration_ns(850.0), "850 ns");
        assert_eq!(duration_ns(12_000.0), "12 µs");
        assert_eq!(duration_ns(1_200_000.0), "1.2 ms");
        assert_eq!(duration_ns(3.4e9), "3.4 s");
        assert_eq!(percent(0.253), "25.3%");
    }

    #[test]
    fn iso8601() {
        // 2025-11-25 15:33:02 UTC.
        let t = 1_764_084_782;
        assert_eq!(iso8601_at(t, 0), "2025-11-25T15:33:02+00:00");
        assert_eq!(iso8601_at(t, 3600), "2025-11-25T16:33:02+01:00");
        assert_eq!(
            iso8601_at(t, -(5 * 3600 + 1800)),
            "2025-11-25T10:03:02-05:30"
        );
        assert_eq!(iso8601_at(0, 0), "1970-01-01T00:00:00+00:00");
        // Leap day.
        assert_eq!(iso8601_at(951_782_400, 0), "2000-02-29T00:00:00+00:00");
        // The local form carries a zone.
        let s = timestamp(1_764_084_782);
        assert!(s.starts_with("2025-11-2"), "{s}");
        assert!(
            s.len() == 25 && (s.contains('+') || s[19..].contains('-')),
            "{s}"
        );
    }

    #[test]
    fn labels_use_file_names_unless_ambiguous() {
        let d = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(device_labels(&d(&["/dev/sda", "/dev/sdb"])), ["sda", "sdb"]);
        assert_eq!(
            device_labels(&d(&["/a/d0.img", "/b/d0.img", "/a/d1.img"])),
            ["/a/d0.img", "/b/d0.img", "d1.img"]
        );
    }
}
