//! UUID text forms: mdadm's `xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx`.

/// Format 16 bytes as mdadm does (lowercase hex, `:` after every 4 bytes).
pub fn format(u: &[u8; 16]) -> String {
    let mut s = String::with_capacity(35);
    for (i, b) in u.iter().enumerate() {
        if i > 0 && i % 4 == 0 {
            s.push(':');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Parse 32 hex digits, with any of `:` `-` `.` or spaces between groups (anywhere).
/// Upper- and lowercase accepted. None if there are not exactly 32 hex digits or another
/// character appears.
pub fn parse(s: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut n = 0usize;
    for c in s.chars() {
        if matches!(c, ':' | '-' | '.' | ' ') {
            continue;
        }
        let d = c.to_digit(16)? as u8;
        let byte = out.get_mut(n / 2)?;
        *byte = (*byte << 4) | d;
        n += 1;
    }
    (n == 32).then_some(out)
}
