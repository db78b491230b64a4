//! UUID text forms: mdadm's `xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx`.

/// Format 16 bytes as mdadm does (lowercase hex, `:` after every 4 bytes).
pub fn format(u: &[u8; 16]) -> String {
    todo!("{u:?}")
}

/// Parse 32 hex digits, with any of `:` `-` `.` or spaces between groups.
pub fn parse(s: &str) -> Option<[u8; 16]> {
    todo!("{s}")
}
