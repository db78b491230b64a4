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

/// Human-readable binary size: `1.50 GiB`.
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
}
