//! Bad-block log: parsing never panics; whatever parses re-encodes (split into ≤ 512-unit
//! entries) and parses back to the same sectors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_format::badblocks::{self, BadRange};

fuzz_target!(|data: &[u8]| {
    let Some((&shift, area)) = data.split_first() else {
        return;
    };
    let shift = shift % 72; // mostly valid, sometimes ≥ 64 (must be an error)
    let Ok(ranges) = badblocks::parse(area, shift) else {
        return;
    };
    let unit = 1u64 << shift;
    let split: Vec<BadRange> = ranges
        .iter()
        .flat_map(|r| {
            let units = r.len / unit;
            (0..units.div_ceil(512)).map(move |k| BadRange {
                start: r.start + k * 512 * unit,
                len: (units - k * 512).min(512) * unit,
            })
        })
        .collect();
    let enc = badblocks::encode(&ranges, shift, split.len() * 8 + 8).expect("parsed ranges must encode");
    assert_eq!(badblocks::parse(&enc, shift).expect("encoded log must parse"), split);
    if !split.is_empty() {
        assert!(badblocks::encode(&ranges, shift, split.len() * 8 - 1).is_err());
    }
});
