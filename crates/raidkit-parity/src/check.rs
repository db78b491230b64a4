//! Argument validation shared by every path (the documented programming-error panics).

/// Panics unless `got == want`.
#[inline]
#[track_caller]
pub(crate) fn len(what: &str, got: usize, want: usize) {
    assert!(
        got == want,
        "raidkit-parity: {what} length {got} differs from {want}"
    );
}

/// Panics unless every block has length `want`.
#[inline]
#[track_caller]
pub(crate) fn blocks<B: AsRef<[u8]>>(what: &str, blocks: &[B], want: usize) {
    for b in blocks {
        len(what, b.as_ref().len(), want);
    }
}

/// Validation for `pq_gen`.
#[inline]
#[track_caller]
pub(crate) fn pq(data: &[&[u8]], p: usize, q: usize) {
    assert!(
        !data.is_empty(),
        "raidkit-parity: pq_gen needs at least one data block"
    );
    len("q", q, p);
    blocks("data", data, p);
}

/// Validation for the one-block recoveries.
#[inline]
#[track_caller]
pub(crate) fn recover_one(data: &[&mut [u8]], a: usize, pq: usize) {
    assert!(
        a < data.len(),
        "raidkit-parity: lost slot {a} out of range ({} data blocks)",
        data.len()
    );
    blocks("data", data, pq);
}

/// Validation for `recover_two`.
#[inline]
#[track_caller]
pub(crate) fn recover_two(data: &[&mut [u8]], a: usize, b: usize, p: usize, q: usize) {
    assert!(
        a != b,
        "raidkit-parity: recover_two needs two distinct slots ({a})"
    );
    assert!(
        a < data.len() && b < data.len(),
        "raidkit-parity: lost slots {a},{b} out of range ({} data blocks)",
        data.len()
    );
    len("q", q, p);
    blocks("data", data, p);
}
