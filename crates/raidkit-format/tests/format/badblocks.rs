use raidkit_format::badblocks::{self, BadRange};
use raidkit_format::FormatError;

fn r(start: u64, len: u64) -> BadRange {
    BadRange { start, len }
}

#[test]
fn reference_example_decodes_exactly() {
    let raw: [u64; 5] = [
        0x0000_0000_000f_a008,
        0x0000_0000_004e_2003,
        0x0000_0000_044d_c058,
        0x0000_0000_0445_c200,
        u64::MAX,
    ];
    let mut area: Vec<u8> = raw.iter().flat_map(|e| e.to_le_bytes()).collect();
    // Junk after the terminator is ignored.
    area.extend_from_slice(&0x0000_0000_0000_0400u64.to_le_bytes());
    area.resize(4096, 0);
    let got = badblocks::parse(&area, 0).unwrap();
    assert_eq!(
        got,
        vec![r(1000, 8), r(5000, 3), r(70512, 88), r(70000, 512)]
    );
    // Encoding the same ranges in the same order gives the same bytes.
    let enc = badblocks::encode(&got, 0, 4096).unwrap();
    assert_eq!(&enc[..40], &area[..40]);
    assert!(enc[40..].iter().all(|&b| b == 0xff));
    // 70000+600 is split into 512 + 88 by the encoder.
    let enc = badblocks::encode(&[r(70000, 600)], 0, 64).unwrap();
    assert_eq!(&enc[..8], &0x0000_0000_0445_c200u64.to_le_bytes());
    assert_eq!(&enc[8..16], &0x0000_0000_044d_c058u64.to_le_bytes());
    assert_eq!(&enc[16..], &[0xff; 48]);
}

#[test]
fn shift_and_errors() {
    // shift 3: units of 8 sectors.
    let e = badblocks::encode(&[r(80, 16)], 3, 16).unwrap();
    assert_eq!(
        u64::from_le_bytes(e[..8].try_into().unwrap()),
        (10 << 10) | 2
    );
    assert_eq!(badblocks::parse(&e, 3).unwrap(), vec![r(80, 16)]);
    assert!(matches!(
        badblocks::encode(&[r(81, 16)], 3, 16),
        Err(FormatError::BadField { .. })
    ));
    assert!(matches!(
        badblocks::encode(&[r(80, 15)], 3, 16),
        Err(FormatError::BadField { .. })
    ));
    assert!(matches!(
        badblocks::encode(&[r(80, 0)], 0, 16),
        Err(FormatError::BadField { .. })
    ));
    // Does not fit: 513 sectors need two entries, area has one slot.
    assert!(matches!(
        badblocks::encode(&[r(0, 513)], 0, 8),
        Err(FormatError::BadField { .. })
    ));
    assert_eq!(
        badblocks::encode(&[r(0, 512)], 0, 8).unwrap(),
        512u64.to_le_bytes().to_vec()
    );
    // Start beyond 54 bits.
    assert!(badblocks::encode(&[r(1 << 54, 1)], 0, 8).is_err());
    assert!(badblocks::encode(&[r(0, 1)], 64, 8).is_err());
    // Zero-length entry is an error; so is a never-written (all-zero) log.
    assert_eq!(
        badblocks::parse(&[0u8; 8], 0),
        Err(FormatError::BadField {
            field: "bad-block log",
            why: "entry 0 (0x0000000000000000) has length 0".into()
        })
    );
    // Empty / terminator-only / partial trailing entry.
    assert_eq!(badblocks::parse(&[], 0).unwrap(), vec![]);
    assert_eq!(badblocks::parse(&[0xff; 4096], 0).unwrap(), vec![]);
    let mut b = ((7u64 << 10) | 1).to_le_bytes().to_vec();
    b.extend_from_slice(&[1, 2, 3]);
    assert_eq!(badblocks::parse(&b, 0).unwrap(), vec![r(7, 1)]);
    // Length up to 1023 accepted when reading; overflow on shift is an error.
    assert_eq!(
        badblocks::parse(&0x3ffu64.to_le_bytes(), 0).unwrap(),
        vec![r(0, 1023)]
    );
    assert!(badblocks::parse(&(u64::MAX - 1).to_le_bytes(), 20).is_err());
    assert!(badblocks::parse(&[0xff; 8], 64).is_err());
    // Start and length each fit after the shift, but the range ends beyond 2^64.
    let raw = (((1u64 << 54) - 1) << 10) | 2;
    assert_eq!(
        badblocks::parse(&raw.to_le_bytes(), 0),
        Err(FormatError::BadField {
            field: "bad-block log",
            why: format!("entry 0 ({raw:#018x}) ends beyond 2^54 units")
        })
    );
    // Fuzz regression: start 2^54-1, 768 units (a split continuation could not be written).
    assert!(badblocks::parse(&0xffff_ffff_ffff_ff00u64.to_le_bytes(), 0).is_err());
    let raw = (((1u64 << 54) - 2) << 10) | 2;
    assert_eq!(
        badblocks::parse(&raw.to_le_bytes(), 10),
        Err(FormatError::BadField {
            field: "bad-block log",
            why: format!("entry 0 ({raw:#018x}) ends beyond 2^64 sectors")
        })
    );
    let raw = (((1u64 << 54) - 1) << 10) | 1;
    assert_eq!(
        badblocks::parse(&raw.to_le_bytes(), 9).unwrap(),
        vec![r(((1 << 54) - 1) << 9, 1 << 9)]
    );
    assert_eq!(badblocks::encode_entry(1000, 8), Some(0xfa008));
    assert_eq!(badblocks::encode_entry(1000, 0), None);
    assert_eq!(badblocks::decode_entry(0x44d_c058), (70512, 88));
}
