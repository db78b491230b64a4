use crate::common::{example2, word_sum};
use raidkit_format::v1::{self, feature, role, Minor, SuperblockV1};
use raidkit_format::{FormatError, MAX_SECTOR};

/// §1.4 example 1, first 512 bytes rebuilt from the hex dump.
fn example1() -> Vec<u8> {
    let dump = "
fc4e 2ba9 0100 0000 0000 0000 0000 0000
9325 84ed e084 e323 8a92 aef7 af4f 9b8f
7465 7374 686f 7374 3a65 7600 0000 0000
0000 0000 0000 0000 0000 0000 0000 0000
13cf 026b 0000 0000 0100 0000 0000 0000
0078 0000 0000 0000 0000 0000 0200 0000
0000 0000 0000 0000 0000 0000 0000 0000
0000 0000 0000 0000 0000 0000 0000 0000
0008 0000 0000 0000 0078 0000 0000 0000
0800 0000 0000 0000 0000 0000 0000 0000
0000 0000 0000 0000 ec5a d40b 0f61 af59
94cb 5c66 ad55 9434 0000 0800 1000 0000
13cf 026b 0000 0000 0200 0000 0000 0000
ffff ffff ffff ffff c489 be01 8000 0000";
    let mut b: Vec<u8> = dump
        .split_whitespace()
        .flat_map(|g| {
            let v = u16::from_str_radix(g, 16).unwrap();
            v.to_be_bytes()
        })
        .collect();
    assert_eq!(b.len(), 0xe0);
    b.resize(0x100, 0); // pad3
    b.extend_from_slice(&[0, 0, 1, 0]); // roles 0, 1
    b.resize(512, 0xff); // roles 2..127 = 0xffff
    b
}

#[test]
fn example1_checksum_and_intermediate_sums() {
    let mut b = example1();
    assert_eq!(SuperblockV1::checksum(&b).unwrap(), 0x01be_89c4);
    let stored = u32::from_le_bytes(b[216..220].try_into().unwrap());
    assert_eq!(stored, 0x01be_89c4);
    b[216..220].fill(0);
    assert_eq!(word_sum(&b[..256]), 0x8_01bd_89bc);
    assert_eq!(word_sum(&b[256..512]), 0x3f_0000_ffc1);
    assert_eq!(word_sum(&b), 0x47_01be_897d);
    // The csum field does not influence the checksum.
    assert_eq!(SuperblockV1::checksum(&b).unwrap(), 0x01be_89c4);
}

#[test]
fn example1_parses_and_reencodes() {
    let b = example1();
    let sb = SuperblockV1::parse(&b).unwrap();
    assert_eq!(sb.feature_map, 0);
    assert_eq!(
        raidkit_format::uuid::format(&sb.set_uuid),
        "932584ed:e084e323:8a92aef7:af4f9b8f"
    );
    assert_eq!(sb.name(), "testhost:ev");
    assert_eq!(sb.ctime, 0x6b02_cf13);
    assert_eq!(v1::decode_time(sb.ctime), 0x6b02_cf13);
    assert_eq!(sb.level, 1);
    assert_eq!(sb.size, 30720);
    assert_eq!(sb.raid_disks, 2);
    assert_eq!(sb.data_offset, 2048);
    assert_eq!(sb.data_size, 30720);
    assert_eq!(sb.super_offset, 8);
    assert_eq!(sb.minor(), Minor::V2);
    assert_eq!(sb.bblog_size, 8);
    assert_eq!(sb.bblog_offset, 16);
    assert_eq!(sb.events, 2);
    assert_eq!(sb.resync_offset, MAX_SECTOR);
    assert_eq!(sb.max_dev, 128);
    assert_eq!(sb.dev_roles.len(), 128);
    assert_eq!(&sb.dev_roles[..3], &[0, 1, role::SPARE]);
    assert_eq!(sb.own_role(), 0);
    assert_eq!(sb.write_len(), 512);
    let enc = sb.encode();
    assert_eq!(enc.len(), 4096);
    assert_eq!(&enc[..512], &b[..]);
    assert!(enc[512..].iter().all(|&x| x == 0xff));
}

#[test]
fn example2_odd_max_dev() {
    let sb = example2();
    let b = sb.encode();
    assert_eq!(
        u32::from_le_bytes(b[216..220].try_into().unwrap()),
        0x79db_6d7a
    );
    let mut z = b.clone();
    z[216..220].fill(0);
    assert_eq!(word_sum(&z[..260]), 0x4_79db_6d74);
    assert_eq!(u16::from_le_bytes([z[260], z[261]]), 2);
    assert_eq!(SuperblockV1::checksum(&b[..262]).unwrap(), 0x79db_6d7a);
    assert_eq!(
        SuperblockV1::checksum(&b[..261]),
        Err(FormatError::TooShort {
            need: 262,
            have: 261
        })
    );
    // Slots beyond max_dev (and the rest of the 4 KiB) are 0xff and not summed.
    assert!(b[262..].iter().all(|&x| x == 0xff));
    assert_eq!(sb.write_len(), 512);
    let back = SuperblockV1::parse(&b).unwrap();
    assert_eq!(back, sb);
    assert_eq!(back.own_role(), 1);
    assert_eq!(back.name(), "host:demo");
    assert_eq!(back.utime, 1_700_000_000);
}

#[test]
fn parse_errors_exact() {
    let good = example2().encode();
    assert_eq!(
        SuperblockV1::parse(&good[..255]),
        Err(FormatError::TooShort {
            need: 256,
            have: 255
        })
    );

    let mut b = good.clone();
    b[0] = 0;
    assert_eq!(
        SuperblockV1::parse(&b),
        Err(FormatError::BadMagic { found: 0xa92b_4e00 })
    );

    let mut b = good.clone();
    b[4] = 0;
    assert_eq!(
        SuperblockV1::parse(&b),
        Err(FormatError::BadVersion("0 (expected 1.x)".into()))
    );

    let mut b = good.clone();
    b[220..224].copy_from_slice(&1921u32.to_le_bytes());
    assert_eq!(
        SuperblockV1::parse(&b),
        Err(FormatError::OutOfRange {
            field: "max_dev",
            value: 1921,
            min: 0,
            max: 1920
        })
    );

    let mut b = good.clone();
    b[220..224].copy_from_slice(&200u32.to_le_bytes());
    assert_eq!(
        SuperblockV1::parse(&b[..512]),
        Err(FormatError::TooShort {
            need: 656,
            have: 512
        })
    );

    let mut b = good.clone();
    b[9] = 0x20; // feature 0x2000
    assert_eq!(
        SuperblockV1::parse(&b),
        Err(FormatError::UnknownFeatures(0x2000))
    );

    let mut b = good.clone();
    b[80] ^= 1;
    assert_eq!(
        SuperblockV1::parse(&b),
        Err(FormatError::BadChecksum {
            stored: 0x79db_6d7a,
            computed: 0x79db_6d7b
        })
    );
    let (lenient, ok) = SuperblockV1::parse_lenient(&b).unwrap();
    assert!(!ok);
    assert_eq!(lenient.size, 204_801);
    let (_, ok) = SuperblockV1::parse_lenient(&good).unwrap();
    assert!(ok);

    // Field checks run after the checksum: re-encode with bad values.
    let mut sb = example2();
    sb.data_size = 9;
    assert_eq!(
        SuperblockV1::parse(&sb.encode()),
        Err(FormatError::BadField {
            field: "data_size",
            why: "9 < 10".into()
        })
    );
    let fix = |mut b: Vec<u8>| {
        let c = SuperblockV1::checksum(&b).unwrap();
        b[216..220].copy_from_slice(&c.to_le_bytes());
        b
    };
    let mut b = good.clone();
    b[12] = 1;
    assert_eq!(
        SuperblockV1::parse(&fix(b)),
        Err(FormatError::BadField {
            field: "pad0",
            why: "0x1 is not zero".into()
        })
    );
    let mut b = good.clone();
    b[255] = 1;
    let b = fix(b);
    assert_eq!(
        SuperblockV1::parse(&b),
        Err(FormatError::BadField {
            field: "pad3",
            why: "not all zero".into()
        })
    );
    assert!(SuperblockV1::parse_lenient(&b).is_err());

    let mut sb = example2();
    sb.feature_map = feature::RAID0_LAYOUT;
    assert!(matches!(
        SuperblockV1::parse(&sb.encode()),
        Err(FormatError::BadField {
            field: "feature_map",
            ..
        })
    ));
    sb.level = 0;
    assert_eq!(
        SuperblockV1::parse(&sb.encode()).unwrap().feature_map,
        0x1000
    );
}

#[test]
fn minor_and_offsets() {
    assert_eq!(Minor::V0.super_offset(131_072), 131_056);
    assert_eq!(Minor::V0.super_offset(131_075), 131_056);
    assert_eq!(Minor::V0.super_offset(131_079), 131_056);
    assert_eq!(Minor::V0.super_offset(131_080), 131_064);
    assert_eq!(Minor::V0.super_offset(10), 0);
    assert_eq!(Minor::V1.super_offset(131_072), 0);
    assert_eq!(Minor::V2.super_offset(131_072), 8);
    let mut sb = example2();
    for (off, m) in [
        (0, Minor::V1),
        (4, Minor::V1),
        (5, Minor::V2),
        (8, Minor::V2),
        (9, Minor::V0),
        (131_056, Minor::V0),
    ] {
        sb.super_offset = off;
        assert_eq!(sb.minor(), m, "super_offset {off}");
    }
    assert_eq!(Minor::V0.as_str(), "1.0");
}

#[test]
fn roles_names_helpers() {
    let mut sb = example2();
    sb.dev_number = 3;
    assert_eq!(sb.own_role(), role::SPARE);
    sb.dev_number = 2;
    assert_eq!(sb.own_role(), 2);
    sb.set_name_str("0123456789abcdef0123456789abcdefXYZ");
    assert_eq!(&sb.set_name, b"0123456789abcdef0123456789abcdef");
    assert_eq!(sb.name(), "0123456789abcdef0123456789abcdef");
    sb.set_name_str("a");
    assert_eq!(sb.name(), "a");
    assert_eq!(sb.set_name[1..], [0u8; 31]);
    assert_eq!(v1::default_max_dev(1), 128);
    assert_eq!(v1::default_max_dev(128), 128);
    assert_eq!(v1::default_max_dev(129), 384);
    assert_eq!(v1::default_max_dev(5000), 1920);
    assert_eq!(v1::mdadm_set_name(Some("testhost"), "r5"), "testhost:r5");
    assert_eq!(v1::mdadm_set_name(Some("h"), "a:b"), "a:b");
    assert_eq!(v1::mdadm_set_name(None, "0"), "0");
    // 8 + 1 + 22 = 31 < 32 → prefixed; 8 + 1 + 23 = 32 → not.
    assert_eq!(
        v1::mdadm_set_name(Some("testhost"), &"x".repeat(22)).len(),
        31
    );
    assert_eq!(
        v1::mdadm_set_name(Some("testhost"), &"x".repeat(23)),
        "x".repeat(23)
    );
    assert_eq!(v1::mdadm_set_name(None, &"y".repeat(40)), "y".repeat(31));
    assert_eq!(v1::encode_time(0x1234_5678_9abc_def0), 0x78_9abc_def0);
    assert_eq!(v1::decode_time(0xffff_ff00_0000_0001), 1);
}

#[test]
fn encode_pads_short_role_table_and_large_max_dev() {
    let mut sb = example2();
    sb.max_dev = 5;
    sb.dev_roles = vec![0, 1];
    let b = sb.encode();
    assert_eq!(
        &b[256..266],
        &[0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
    );
    let back = SuperblockV1::parse(&b).unwrap();
    assert_eq!(back.dev_roles, vec![0, 1, 0xffff, 0xffff, 0xffff]);
    sb.max_dev = 1920;
    sb.dev_roles = vec![];
    assert_eq!(sb.write_len(), 4096);
    let b = sb.encode();
    assert_eq!(SuperblockV1::parse(&b).unwrap().dev_roles.len(), 1920);
    sb.max_dev = 5000; // invalid: must not panic
    assert_eq!(sb.encode().len(), 4096);
    assert_eq!(sb.write_len(), 4096);
}

#[test]
fn write_mostly_devflag_round_trips() {
    let mut sb = SuperblockV1::parse(&example1()).unwrap();
    assert_eq!(sb.devflags, 0);
    sb.devflags = v1::devflag::WRITE_MOSTLY;
    let b = sb.encode();
    // devflags is byte 184; bit 0 WriteMostly, bit 1 FailFast.
    assert_eq!(b[184], 1);
    assert_eq!(SuperblockV1::parse(&b).unwrap().devflags, 1);
    sb.devflags = v1::devflag::WRITE_MOSTLY | v1::devflag::FAILFAST;
    assert_eq!(sb.encode()[184], 3);
    assert_eq!(SuperblockV1::parse(&sb.encode()).unwrap(), sb);
}
