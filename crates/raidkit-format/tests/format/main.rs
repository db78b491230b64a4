//! Tests for raidkit-format: worked examples from the reference, golden superblocks made
//! by the real mdadm 4.2 / Linux 6.1, and property tests.

mod accept;
mod backup;
mod badblocks;
mod bitmap;
mod fixtures;
mod golden;
mod hostile;
mod placement;
mod props;
mod reshape_fixtures;
mod uuid;
mod v090;
mod v1;

/// Shared helpers.
pub mod common {
    use raidkit_format::v1::SuperblockV1;

    /// Example 2 of §1.4 (synthetic, odd max_dev = 3).
    pub fn example2() -> SuperblockV1 {
        let mut sb = SuperblockV1::new_default(
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
            "host:demo",
            1_700_000_000,
            3,
        );
        sb.level = 5;
        sb.layout = 2;
        sb.size = 204_800;
        sb.chunksize = 1024;
        sb.data_offset = 2048;
        sb.data_size = 204_800;
        sb.super_offset = 8;
        sb.dev_number = 1;
        sb.bblog_size = 8;
        sb.bblog_offset = 16;
        sb.events = 42;
        sb.max_dev = 3;
        sb.dev_roles = vec![0, 1, 2];
        sb
    }

    /// Sum of LE u32 words of `b` (length multiple of 4).
    pub fn word_sum(b: &[u8]) -> u64 {
        b.chunks_exact(4)
            .map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap())))
            .sum()
    }

    /// Parse `key : value` lines of `mdadm --examine` output.
    pub fn examine_value(text: &str, key: &str) -> String {
        for line in text.lines() {
            if let Some((k, v)) = line.split_once(" : ") {
                if k.trim() == key {
                    return v.trim().to_string();
                }
            }
        }
        panic!("key {key:?} not in examine output")
    }
}
