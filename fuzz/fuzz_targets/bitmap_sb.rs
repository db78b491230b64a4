//! Bitmap superblock and bit helpers: never panic; whatever parses round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_format::bitmap::{self, BitmapSuper};

fuzz_target!(|data: &[u8]| {
    if let Ok(bm) = BitmapSuper::parse(data) {
        let enc = bm.encode();
        assert_eq!(BitmapSuper::parse(&enc).expect("re-encoded bitmap must parse"), bm);
        assert_eq!(&enc[..136], &data[..136]);
        let chunks = bm.chunks();
        assert_eq!(bm.disk_bytes(), 256 + chunks.div_ceil(8));
        let _ = bm.chunk_range(chunks);
        let bits = &data[256.min(data.len())..];
        let mut copy = bits.to_vec();
        for i in [0, 1, 7, 8, chunks, chunks.saturating_sub(1), u64::MAX] {
            let was = bitmap::bit_is_set(bits, i);
            bitmap::set_bit(&mut copy, i, !was);
            assert_eq!(bitmap::bit_is_set(&copy, i), !was && (i / 8) < bits.len() as u64);
            bitmap::set_bit(&mut copy, i, was);
        }
        assert_eq!(copy, bits);
    }
    if data.len() >= 16 {
        let s = u64::from_le_bytes(data[..8].try_into().unwrap_or_default());
        let r = u64::from_le_bytes(data[8..16].try_into().unwrap_or_default());
        let c = bitmap::default_chunk_bytes(s, r);
        assert!(c.is_power_of_two() && c >= 64 << 20);
    }
});
