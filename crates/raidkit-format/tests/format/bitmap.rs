use raidkit_format::bitmap::{self, BitmapSuper, BITMAP_MAGIC};
use raidkit_format::FormatError;

pub fn sample() -> BitmapSuper {
    let mut b = BitmapSuper::new_default([0x55; 16], 130_944, 64 << 20);
    b.events = 7;
    b.events_cleared = 5;
    b
}

#[test]
fn layout_exact() {
    let b = sample().encode();
    assert_eq!(b.len(), 256);
    assert_eq!(&b[0..4], b"bitm");
    assert_eq!(
        u32::from_le_bytes(b[0..4].try_into().unwrap()),
        BITMAP_MAGIC
    );
    assert_eq!(&b[4..8], &[4, 0, 0, 0]);
    assert_eq!(&b[8..24], &[0x55; 16]);
    assert_eq!(&b[24..32], &7u64.to_le_bytes());
    assert_eq!(&b[32..40], &5u64.to_le_bytes());
    assert_eq!(&b[40..48], &130_944u64.to_le_bytes());
    assert_eq!(&b[52..56], &[0, 0, 0, 4]);
    assert_eq!(&b[56..60], &[5, 0, 0, 0]);
    assert!(b[60..].iter().all(|&x| x == 0));
    assert_eq!(BitmapSuper::parse(&b).unwrap(), sample());
}

#[test]
fn validation_errors() {
    let good = sample().encode();
    assert_eq!(
        BitmapSuper::parse(&good[..255]),
        Err(FormatError::TooShort {
            need: 256,
            have: 255
        })
    );
    let mut b = good.clone();
    b[0] = b'x';
    assert_eq!(
        BitmapSuper::parse(&b),
        Err(FormatError::BadMagic { found: 0x6d74_6978 })
    );
    for (v, ok) in [(2u32, false), (3, true), (4, true), (5, true), (6, false)] {
        let mut b = good.clone();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert_eq!(BitmapSuper::parse(&b).is_ok(), ok, "version {v}");
    }
    let mut b = good.clone();
    b[4] = 6;
    assert_eq!(
        BitmapSuper::parse(&b),
        Err(FormatError::BadVersion(
            "bitmap version 6 (supported: 3, 4, 5)".into()
        ))
    );
    for (cs, ok) in [
        (256u32, false),
        (512, true),
        (768, false),
        (1 << 31, true),
        (0, false),
    ] {
        let mut b = good.clone();
        b[52..56].copy_from_slice(&cs.to_le_bytes());
        assert_eq!(BitmapSuper::parse(&b).is_ok(), ok, "chunksize {cs}");
    }
    let mut b = good.clone();
    b[56] = 0;
    assert!(matches!(
        BitmapSuper::parse(&b),
        Err(FormatError::BadField {
            field: "daemon_sleep",
            ..
        })
    ));
    let mut b = good.clone();
    b[60..64].copy_from_slice(&16383u32.to_le_bytes());
    assert_eq!(BitmapSuper::parse(&b).unwrap().write_behind, 16383);
    b[60..64].copy_from_slice(&16384u32.to_le_bytes());
    assert_eq!(
        BitmapSuper::parse(&b),
        Err(FormatError::BadField {
            field: "write_behind",
            why: "16384 > 16383".into()
        })
    );
}

#[test]
fn sizes() {
    let mut s = sample();
    assert_eq!(s.chunks(), 1);
    assert_eq!(s.disk_bytes(), 257);
    assert_eq!(s.space_sectors(), 8);
    s.sync_size = 2_147_219_456; // 1 TiB member minus 129 MiB data offset
    assert_eq!(s.chunks(), 16382);
    assert_eq!(s.disk_bytes(), 256 + 2048);
    s.chunksize = 512;
    s.sync_size = 17;
    assert_eq!((s.chunks(), s.disk_bytes()), (17, 259));
    s.sync_size = 0;
    assert_eq!((s.chunks(), s.disk_bytes()), (0, 256));
    s.chunksize = 0; // invalid, must not divide by zero
    s.sync_size = 3;
    assert_eq!(s.chunks(), 3);
    assert_eq!(bitmap::space_sectors(4096), 8);
    assert_eq!(bitmap::space_sectors(4097), 16);
    assert_eq!(bitmap::space_sectors(0), 0);
    let s = BitmapSuper::new_default([0; 16], 10_000, 1 << 20);
    assert_eq!(s.chunk_range(0), (0, 2048));
    assert_eq!(s.chunk_range(4), (8192, 10_000));
    assert_eq!(s.chunk_range(5), (10_000, 10_000));
    assert_eq!(s.chunk_range(u64::MAX), (10_000, 10_000));
}

#[test]
fn bits_raid1_vector() {
    // RAID1, 1 MiB chunks, 3 MiB written at array offset 5 MiB → bits 5, 6, 7 → 0xe0.
    let s = BitmapSuper::new_default([0; 16], 63 * 2048, 1 << 20);
    let mut bits = vec![0u8; s.chunks().div_ceil(8) as usize];
    let (start, end) = (5 * 2048u64, 8 * 2048u64);
    for i in start / 2048..end.div_ceil(2048) {
        bitmap::set_bit(&mut bits, i, true);
    }
    assert_eq!(bits[0], 0xe0);
    assert!(bits[1..].iter().all(|&b| b == 0));
    assert!(bitmap::bit_is_set(&bits, 5) && bitmap::bit_is_set(&bits, 7));
    assert!(!bitmap::bit_is_set(&bits, 4) && !bitmap::bit_is_set(&bits, 8));
    bitmap::set_bit(&mut bits, 6, false);
    assert_eq!(bits[0], 0xa0);
    bitmap::set_bit(&mut bits, 9, true);
    assert_eq!(bits[1], 0x02);
    // Out of range: false / no-op, never a panic.
    assert!(!bitmap::bit_is_set(&bits, 64));
    assert!(!bitmap::bit_is_set(&bits, u64::MAX));
    let before = bits.clone();
    bitmap::set_bit(&mut bits, 64, true);
    bitmap::set_bit(&mut bits, u64::MAX, true);
    assert_eq!(bits, before);
}

#[test]
fn default_chunk() {
    // 64 MiB members, room = choose_bm_space = 8 sectors → 64 MiB.
    assert_eq!(bitmap::default_chunk_bytes(130_944, 8), 64 << 20);
    // 1 TiB member, room 256 → still 64 MiB (16382 bits).
    assert_eq!(bitmap::default_chunk_bytes(2_147_219_456, 256), 64 << 20);
    // 4 KiB room = 256 bytes sb + 3840 bytes = 30720 bits: 30720 * 64 MiB fits exactly.
    let s = 30_720u64 * (64 << 11);
    assert_eq!(bitmap::default_chunk_bytes(s, 8), 64 << 20);
    assert_eq!(bitmap::default_chunk_bytes(s + 1, 8), 128 << 20);
    // 128 KiB room (the cap): 64 TiB fits in 64 MiB chunks, 128 TiB needs 128 MiB.
    let s = 1_046_528u64 << 17;
    assert_eq!(bitmap::default_chunk_bytes(s, 256), 64 << 20);
    assert_eq!(bitmap::default_chunk_bytes(s + 1, 256), 128 << 20);
    assert_eq!(bitmap::default_chunk_bytes(1 << 38, 256), 256 << 20);
    // No room at all: capped at 2 GiB instead of looping forever.
    assert_eq!(bitmap::default_chunk_bytes(u64::MAX, 0), 1 << 31);
}
