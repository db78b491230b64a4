//! Size parsing: `512`, `64K`, `1M`, `2G`, `1T` (binary units), `16s` (sectors), `0x..`.

/// Parse a size. A bare number is taken in `bare_unit` bytes (mdadm uses KiB for
/// `--chunk` and `--size`).
pub fn parse_size(s: &str, bare_unit: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && !t.starts_with("0x") => {
            let m = match c.to_ascii_lowercase() {
                'b' => 1,
                's' => 512,
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1u64 << 40,
                _ if t[..i].parse::<u64>().is_ok() => {
                    return Err(format!(
                        "unknown size suffix in {s:?} (use K, M, G, T or s)"
                    ))
                }
                _ => return Err(format!("{s:?} is not a size (examples: 512K, 64M, 2G)")),
            };
            (&t[..i], m)
        }
        _ => (t, bare_unit),
    };
    let v = if let Some(h) = num.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
    } else {
        num.parse::<u64>()
    }
    .map_err(|_| format!("{s:?} is not a size (examples: 512K, 64M, 2G)"))?;
    v.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// [`human`] of a count of 512-byte sectors as metadata records it (any u64: a damaged
/// superblock's field shows as at least 16 EiB instead of overflowing).
pub fn human_sectors(sectors: u64) -> String {
    human(sectors.saturating_mul(512))
}

/// Sector `base + delta` (a data offset and a relative new offset, as metadata records
/// them), or None when that falls outside 0..=u64::MAX (damaged metadata).
pub fn offset_sectors(base: u64, delta: i32) -> Option<u64> {
    base.checked_add_signed(i64::from(delta))
}

/// Human-readable binary size: `1.50 GiB` (bytes below 1 KiB as `512 B`).
pub fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

/// Runs of numbers beyond which [`role_list`] only counts.
const MAX_RUNS: usize = 16;

/// A list of roles as runs: `0, 2, 5-9`, at most 16 runs then `... (N roles)`; with the
/// count when it is not obvious (`3-65533 (65531 roles)`).
pub fn role_list(roles: &[usize]) -> String {
    let mut sorted = roles.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &r in &sorted {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == r => *hi = r,
            _ => runs.push((r, r)),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .take(MAX_RUNS)
        .map(|&(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect();
    let mut s = text.join(", ");
    if runs.len() > MAX_RUNS {
        s.push_str(", ...");
    }
    if sorted.len() > 2 && sorted.len() != text.len() {
        s.push_str(&format!(" ({} roles)", sorted.len()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes() {
        assert_eq!(parse_size("64", 1024), Ok(65536));
        assert_eq!(parse_size("64K", 1), Ok(65536));
        assert_eq!(parse_size("1M", 1), Ok(1 << 20));
        assert_eq!(parse_size("2g", 1), Ok(2 << 30));
        assert_eq!(parse_size("8s", 1), Ok(4096));
        assert_eq!(parse_size("0x10", 1), Ok(16));
        assert!(parse_size("12Q", 1)
            .unwrap_err()
            .contains("unknown size suffix"));
        assert!(parse_size("abc", 1).unwrap_err().contains("not a size"));
        assert!(parse_size("99999999999T", 1)
            .unwrap_err()
            .contains("too large"));
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(100), "100 B");
    }

    #[test]
    fn role_lists_are_runs() {
        assert_eq!(role_list(&[]), "");
        assert_eq!(role_list(&[2]), "2");
        assert_eq!(role_list(&[0, 2]), "0, 2");
        assert_eq!(role_list(&[5, 0, 6, 7]), "0, 5-7 (4 roles)");
        let many: Vec<usize> = (3..=65533).collect();
        assert_eq!(role_list(&many), "3-65533 (65531 roles)");
        let sparse: Vec<usize> = (0..1000).map(|i| i * 2).collect();
        let t = role_list(&sparse);
        assert!(t.ends_with(", ... (1000 roles)") && t.len() < 120, "{t}");
    }
}
