//! Serial numbers of one manufacturing batch. Drives made together carry serials that share
//! everything but a running number (`WD-WCC4N0123456`, `WD-WCC4N0123471`); they are often
//! bought together, run together, and fail together.
//!
//! Rule: two serials are *adjacent* when they differ, have the same length, and split into
//! the same text before and after their last run of digits, with the numbers in that run at
//! most [`BATCH_DISTANCE`] apart. Serials shorter than 6 characters are never adjacent (too
//! little to tell a batch from a coincidence).

/// Largest difference of the running numbers of two serials of one batch.
pub const BATCH_DISTANCE: u64 = 1000;

/// `(text before, number, digits, text after)` around the last run of digits (at most 18
/// digits are read; longer runs keep their leading digits in the text before).
pub fn split(serial: &str) -> Option<(&str, u64, usize, &str)> {
    let b = serial.as_bytes();
    let end = b.iter().rposition(u8::is_ascii_digit)? + 1;
    let mut start = end;
    while start > 0 && b[start - 1].is_ascii_digit() && end - start < 18 {
        start -= 1;
    }
    let n = serial[start..end].parse().ok()?;
    Some((&serial[..start], n, end - start, &serial[end..]))
}

/// Whether `a` and `b` look like serials of one batch (see the module rule).
pub fn adjacent(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if a == b || a.len() != b.len() || a.len() < 6 {
        return false;
    }
    match (split(a), split(b)) {
        (Some((ha, na, la, ta)), Some((hb, nb, lb, tb))) => {
            ha == hb && ta == tb && la == lb && na.abs_diff(nb) <= BATCH_DISTANCE
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_last_digit_run() {
        assert_eq!(split("WD-WCC4N0123456"), Some(("WD-WCC4N", 123456, 7, "")));
        assert_eq!(split("S4EVNF0M712345K"), Some(("S4EVNF0M", 712345, 6, "K")));
        assert_eq!(split("ABCDEF"), None);
    }

    #[test]
    fn batch_neighbours() {
        assert!(adjacent("WD-WCC4N0123456", "WD-WCC4N0123471"));
        assert!(adjacent("S4EVNF0M712345K", "S4EVNF0M712399K"));
        assert!(adjacent("ZA1B2C3D", "ZA1B2C5D"));
        // Far apart, other prefix, other suffix, other length, the same drive, too short.
        assert!(!adjacent("WD-WCC4N0123456", "WD-WCC4N0923456"));
        assert!(!adjacent("WD-WCC4N0123456", "WD-WCC4M0123457"));
        assert!(!adjacent("S4EVNF0M712345K", "S4EVNF0M712346L"));
        assert!(!adjacent("WD-WCC4N0123456", "WD-WCC4N123457"));
        assert!(!adjacent("WD-WCC4N0123456", "WD-WCC4N0123456"));
        assert!(!adjacent("A1", "A2"));
    }
}
