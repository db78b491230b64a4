//! mdadm's reshape backup record and the typed reshape fields: exact bytes, exact errors,
//! mdadm's restore rules (the real records are checked against kernel fixtures in
//! `reshape_fixtures.rs`).

use proptest::prelude::*;
use raidkit_format::backup::{self, BackupRecord, Section, BACKUP_DATA_SECTOR};
use raidkit_format::reshape::ReshapeInfo;
use raidkit_format::v1::{feature, role, SuperblockV1};
use raidkit_format::{Area, Extent, FormatError};

fn record(version: u8) -> BackupRecord {
    BackupRecord {
        version,
        set_uuid: [0x5e; 16],
        mtime: 1_704_067_200,
        devstart: BACKUP_DATA_SECTOR,
        arraystart: 768,
        length: 768,
        devstart2: if version == 2 { 768 } else { 0 },
        arraystart2: if version == 2 { 1536 } else { 0 },
        length2: if version == 2 { 768 } else { 0 },
    }
}

#[test]
fn checksum_is_mdadms() {
    // The value in the record mdadm 4.2 wrote for the 0.90 grow fixture (bytes 64..68:
    // 15 49 92 24): only the first byte ('m') and the length count.
    let b = record(1).encode();
    assert_eq!(backup::checksum(&b, 64), 0x2492_4915);
    assert_eq!(
        u32::from_le_bytes(b[64..68].try_into().unwrap()),
        0x2492_4915
    );
    assert_eq!(backup::checksum(&b, 96), 0x2492_4915);
    // Sign extension of a first byte ≥ 0x80, 32-bit wrap.
    assert_eq!(backup::checksum(&[0xff], 1), 0xffff_ffff);
    assert_eq!(backup::checksum(&[0xff], 2), 0xffff_fff7);
    assert_eq!(backup::checksum(&[], 5), 0);
}

#[test]
fn encode_parse_and_errors() {
    for v in [1, 2] {
        let r = record(v);
        let b = r.encode();
        assert_eq!(
            &b[..16],
            if v == 1 {
                b"md_backup_data-1"
            } else {
                b"md_backup_data-2"
            }
        );
        assert_eq!(BackupRecord::parse(&b), Ok(r));
        assert!(b[100..].iter().all(|&x| x == 0));
    }
    let b = record(1).encode();
    assert_eq!(
        BackupRecord::parse(&b[..511]),
        Err(FormatError::TooShort {
            need: 512,
            have: 511
        })
    );
    let mut bad = b;
    bad[15] = b'3';
    assert!(matches!(
        BackupRecord::parse(&bad),
        Err(FormatError::BadField { field: "magic", .. })
    ));
    let mut bad = b;
    bad[64] ^= 1;
    assert_eq!(
        BackupRecord::parse(&bad),
        Err(FormatError::BadChecksum {
            stored: 0x2492_4914,
            computed: 0x2492_4915
        })
    );
    // Version 2 checks its second checksum; version 1 ignores it.
    let mut bad = record(2).encode();
    bad[96] ^= 1;
    assert!(matches!(
        BackupRecord::parse(&bad),
        Err(FormatError::BadChecksum { .. })
    ));
    let mut ok = record(1).encode();
    ok[96] ^= 1;
    assert!(BackupRecord::parse(&ok).is_ok());
}

#[test]
fn sections_are_checked_against_the_area() {
    let r = record(2);
    assert_eq!(
        r.check_within(8 + 1536),
        Ok(vec![
            Section {
                array_sector: 768,
                sectors: 768,
                dev_sector: 8
            },
            Section {
                array_sector: 1536,
                sectors: 768,
                dev_sector: 776
            },
        ])
    );
    assert_eq!(
        r.check_within(8 + 1535),
        Err(FormatError::OutsideDevice {
            field: "length2",
            area: Area::Backup,
            extent: Extent {
                start: 776,
                end: 1544
            },
            dev_sectors: 1543,
        })
    );
    let mut r2 = r;
    r2.devstart2 = 100;
    assert!(matches!(
        r2.check_within(10_000),
        Err(FormatError::Overlap {
            field: "length2",
            ..
        })
    ));
    let mut r3 = record(1);
    r3.devstart = 4;
    assert_eq!(
        r3.check_within(10_000),
        Err(FormatError::OutOfRange {
            field: "devstart",
            value: 4,
            min: 8,
            max: 10_000
        })
    );
    let mut r4 = record(1);
    r4.length = u64::MAX;
    assert!(matches!(
        r4.check_within(10_000),
        Err(FormatError::OutsideDevice { .. })
    ));
    // A forgotten backup (length 0) has no sections.
    let mut r5 = record(1);
    r5.length = 0;
    assert_eq!(r5.check_within(16), Ok(vec![]));
}

#[test]
fn array_identity_and_mdadms_time_window() {
    let r = record(1);
    let t = r.mtime;
    assert!(r.check_for_array(&[0x5e; 16], t, false).is_ok());
    assert!(matches!(
        r.check_for_array(&[0x5f; 16], t, false),
        Err(FormatError::BadField {
            field: "set_uuid",
            ..
        })
    ));
    assert!(r.check_for_array(&[0x5e; 16], t + 7200, false).is_ok());
    assert!(r.check_for_array(&[0x5e; 16], t + 7201, false).is_err());
    assert!(r.check_for_array(&[0x5e; 16], t - 600, false).is_ok());
    assert!(r.check_for_array(&[0x5e; 16], t - 601, false).is_err());
    assert!(r.check_for_array(&[0x5e; 16], t + 100_000, true).is_ok());
}

#[test]
fn mdadms_restore_rules() {
    let r = record(1); // 768..1536
    assert!(r.needed(0, true) && r.needed(1536, true) && !r.needed(1537, true));
    assert!(r.needed(769, false) && !r.needed(768, false));
    assert_eq!(r.position_after_restore(1000, true), 1536);
    assert_eq!(r.position_after_restore(1000, false), 768);
    assert_eq!(r.position_after_restore(100, true), 100);
    let r2 = record(2); // 768..1536 and 1536..2304
    assert_eq!(r2.position_after_restore(768, true), 2304);
    assert_eq!(r2.position_after_restore(2304, false), 768);
    assert_eq!(
        backup::spare_placement(2048, 14336, 768),
        Some((15600, 15608, 16376))
    );
    assert_eq!(backup::spare_placement(2048, 100, 768), None);
}

#[test]
fn reshape_fields_record_and_finish_as_the_kernel() {
    let mut sb = SuperblockV1::new_default([1; 16], "r", 1, 5);
    sb.level = 5;
    sb.layout = 2;
    sb.chunksize = 128;
    sb.data_offset = 2048;
    sb.data_size = 14_336;
    let info = ReshapeInfo {
        position: 4608,
        delta_disks: 1,
        new_level: 5,
        new_layout: 2,
        new_chunk_sectors: 128,
        backwards: false,
        new_offset: Some(-512),
    };
    sb.set_reshape(&info);
    assert_eq!(
        sb.feature_map,
        feature::RESHAPE_ACTIVE | feature::NEW_OFFSET
    );
    assert_eq!(
        SuperblockV1::parse(&sb.encode()).unwrap().reshape(),
        Some(info)
    );
    // RESHAPE_BACKWARDS only with no device count change; no NEW_OFFSET for 0.
    let back = ReshapeInfo {
        delta_disks: 0,
        backwards: true,
        new_offset: Some(0),
        ..info
    };
    let mut b = sb.clone();
    b.set_reshape(&back);
    assert_eq!(
        b.feature_map,
        feature::RESHAPE_ACTIVE | feature::RESHAPE_BACKWARDS
    );
    assert_eq!(b.reshape().unwrap().new_offset, None);
    let shrink = ReshapeInfo {
        delta_disks: -1,
        backwards: true,
        ..info
    };
    b.set_reshape(&shrink);
    assert_eq!(
        b.feature_map & feature::RESHAPE_BACKWARDS,
        0,
        "direction follows delta"
    );
    assert!(b.reshape().unwrap().backwards);

    sb.finish_reshape();
    assert_eq!(sb.feature_map, 0);
    assert_eq!((sb.data_offset, sb.data_size), (1536, 14_848));
    assert_eq!(sb.delta_disks, 0);
    assert_eq!(sb.reshape_position, 4608, "stale, as the kernel leaves it");
    assert_eq!(sb.reshape(), None);

    // A shrink 5 -> 4: role 4 becomes a spare.
    let mut s = SuperblockV1::new_default([1; 16], "r", 1, 5);
    s.raid_disks = 4;
    s.chunksize = 128;
    s.set_reshape(&ReshapeInfo {
        delta_disks: -1,
        new_offset: None,
        new_chunk_sectors: 256,
        ..info
    });
    s.finish_reshape();
    assert_eq!(&s.dev_roles[..5], &[0, 1, 2, 3, role::SPARE]);
    assert_eq!(s.chunksize, 256);
}

proptest! {
    #[test]
    fn backup_garbage_never_panics(buf in prop::collection::vec(any::<u8>(), 0..600), area in any::<u64>()) {
        if let Ok(r) = BackupRecord::parse(&buf) {
            prop_assert_eq!(BackupRecord::parse(&r.encode()), Ok(r));
            let _ = r.check_within(area);
            let _ = (r.needed(area, true), r.position_after_restore(area, false));
        }
    }

    #[test]
    fn backup_roundtrip(v in 1u8..=2, f in any::<[u64; 7]>(), uuid in any::<[u8; 16]>()) {
        let r = BackupRecord {
            version: v, set_uuid: uuid, mtime: f[0], devstart: f[1], arraystart: f[2],
            length: f[3], devstart2: f[4], arraystart2: f[5], length2: f[6],
        };
        prop_assert_eq!(BackupRecord::parse(&r.encode()), Ok(r));
    }
}
