//! Hostile metadata (issue 14 items 4 and 5), on byte images of real mdadm-made members:
//! each defect the testers measured gives the exact error that names the field, and the
//! untouched images pass every check.

use raidkit_format::bitmap::BitmapSuper;
use raidkit_format::v090::SuperblockV090;
use raidkit_format::v1::{feature, SuperblockV1};
use raidkit_format::{Area, Extent, FormatError};

fn golden(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Member 0 of the 1.2 RAID1 with an internal bitmap: 32 MiB, superblock at 4 KiB, bitmap
/// at 8 KiB (sector 16), bad-block log at sector 24, data at sector 2048.
const R12B_SECTORS: u64 = 65_536;

/// Rewrite the checksum of the 1.x superblock at `at` (as a crafted image would have it).
fn fix_v1_csum(img: &mut [u8], at: usize) {
    let c = SuperblockV1::checksum(&img[at..at + 4096]).unwrap();
    img[at + 216..at + 220].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn golden_members_pass_every_check() {
    let img = golden("v1_2-raid1-bitmap-head16k.bin");
    let sb = SuperblockV1::parse(&img[4096..8192]).unwrap();
    sb.validate().unwrap();
    let a = sb.areas(R12B_SECTORS).unwrap();
    assert_eq!(a.superblock, Extent { start: 8, end: 9 });
    assert_eq!(
        a.data,
        Extent {
            start: 2048,
            end: 65_536
        }
    );
    assert_eq!(a.bitmap_start, Some(16));
    assert_eq!(
        a.bitmap_room_end, 24,
        "the bad-block log follows the bitmap"
    );
    assert_eq!(a.bblog, Some(Extent { start: 24, end: 32 }));
    let bsb = BitmapSuper::parse(&img[8192..8192 + 256]).unwrap();
    // mdadm -X prints "Sync Size : 31744" (KiB).
    assert_eq!(sb.bitmap_sync_size(), Some(63_488));
    assert_eq!(bsb.sync_size, 63_488);
    assert_eq!(
        a.check_bitmap(&bsb, 63_488),
        Ok(Extent { start: 16, end: 17 })
    );

    // 1.0 RAID1 with a bitmap, 64 MiB member: the tail 16 KiB start at sector 131040.
    let tail = golden("v1_0-raid1-bitmap-tail16k.bin");
    let sb = SuperblockV1::parse(&tail[8192..12288]).unwrap();
    sb.validate().unwrap();
    let a = sb.areas(131_072).unwrap();
    assert_eq!(a.bitmap_start, Some(131_040));
    assert_eq!(
        a.bitmap_room_end, 131_048,
        "the bad-block log follows the bitmap"
    );
    let bsb = BitmapSuper::parse(&tail[..256]).unwrap();
    let need = sb.bitmap_sync_size().unwrap();
    assert_eq!(a.check_bitmap(&bsb, need), Ok(Extent::at(131_040, 1)));

    for (file, at, dev) in [
        ("v1_2-raid5-head16k.bin", 4096, 65_536),
        ("v1_1-raid1-head16k.bin", 0, 65_536),
    ] {
        let img = golden(file);
        let sb = SuperblockV1::parse(&img[at..at + 4096]).unwrap();
        sb.validate().unwrap();
        sb.areas(dev).unwrap();
    }
    // 0.90 RAID5 on 8 MiB members (superblock at sector 16256).
    let sb = SuperblockV090::parse(&golden("v0_90-raid5-sb4k.bin")).unwrap();
    sb.validate().unwrap();
    let a = sb.areas(16_384).unwrap();
    assert_eq!(
        a.superblock,
        Extent {
            start: 16_256,
            end: 16_264
        }
    );
    assert_eq!(
        a.data,
        Extent {
            start: 0,
            end: 16_256
        }
    );
}

/// `printf '\xc7' | dd of=m0.img bs=1 seek=8238 conv=notrunc` on a fresh 1.2 bitmap array
/// made detail/export/check/serve abort allocating 53,418,656,256 bytes. The bitmap check
/// refuses it before anything is allocated, with the bytes it would have needed.
#[test]
fn bitmap_sync_size_byte_flip_is_refused_before_allocating() {
    let mut img = golden("v1_2-raid1-bitmap-head16k.bin");
    img[8238] = 0xc7;
    let sb = SuperblockV1::parse(&img[4096..8192]).unwrap();
    let a = sb.areas(R12B_SECTORS).unwrap();
    let bsb = BitmapSuper::parse(&img[8192..8192 + 256]).unwrap();
    assert_eq!(bsb.sync_size, 0x00c7_0000_0000_f800);
    let err = a.check_bitmap(&bsb, sb.bitmap_sync_size().unwrap());
    assert_eq!(
        err,
        Err(FormatError::BitmapNoRoom {
            sync_size: 0x00c7_0000_0000_f800,
            chunksize: 64 << 20,
            // ceil((0xc7 << 31) + 1 chunks / 8): the engine rounded this to 512 and
            // aborted allocating 53,418,656,256 bytes.
            bytes: 256 + 53_418_655_745,
            room_bytes: 4096,
        })
    );
    let msg = err.unwrap_err().to_string();
    assert!(
        msg.contains("sync_size") && msg.contains("ignore this bitmap"),
        "{msg}"
    );

    // A flip that makes it smaller leaves writes untracked: refused too.
    let mut img = golden("v1_2-raid1-bitmap-head16k.bin");
    img[8233] = 0x00; // sync_size 0xf800 -> 0x0000
    let bsb = BitmapSuper::parse(&img[8192..8192 + 256]).unwrap();
    let a = SuperblockV1::parse(&img[4096..8192])
        .unwrap()
        .areas(R12B_SECTORS)
        .unwrap();
    assert_eq!(
        a.check_bitmap(&bsb, 63_488),
        Err(FormatError::BitmapTooShort {
            sync_size: 0,
            needed: 63_488
        })
    );
}

/// `raid_disks = 0xffffffff` (checksum valid) made `examine` grow without end; 1e7 took
/// 800 MB. Parsing refuses any count beyond 1920 roles.
#[test]
fn raid_disks_beyond_the_format_is_refused_at_parse() {
    for (value, lenient_too) in [(u32::MAX, true), (10_000_000, true), (1921, true)] {
        let mut img = golden("v1_2-raid5-head16k.bin");
        img[4096 + 92..4096 + 96].copy_from_slice(&value.to_le_bytes());
        fix_v1_csum(&mut img, 4096);
        let want = Err(FormatError::OutOfRange {
            field: "raid_disks",
            value: value.into(),
            min: 0,
            max: 1920,
        });
        assert_eq!(SuperblockV1::parse(&img[4096..8192]), want);
        if lenient_too {
            assert_eq!(
                SuperblockV1::parse_lenient(&img[4096..8192]).map(|(s, _)| s),
                want
            );
        }
    }
    // 1920 is the limit, 0 parses (and is refused by validate()).
    let mut img = golden("v1_2-raid5-head16k.bin");
    img[4096 + 92..4096 + 96].copy_from_slice(&0u32.to_le_bytes());
    fix_v1_csum(&mut img, 4096);
    let sb = SuperblockV1::parse(&img[4096..8192]).unwrap();
    assert_eq!(
        sb.validate(),
        Err(FormatError::OutOfRange {
            field: "raid_disks",
            value: 0,
            min: 1,
            max: 1920
        })
    );
}

/// A reshape whose pre-reshape device count (`raid_disks − delta_disks`) is beyond the
/// format is refused at parse time too.
#[test]
fn delta_disks_beyond_the_format_is_refused_at_parse() {
    let mut sb = SuperblockV1::parse(&golden("v1_2-raid5-head16k.bin")[4096..8192]).unwrap();
    sb.feature_map |= feature::RESHAPE_ACTIVE;
    sb.delta_disks = i32::MIN;
    assert_eq!(
        SuperblockV1::parse(&sb.encode()),
        Err(FormatError::OutOfRange {
            field: "delta_disks",
            value: i32::MIN.into(),
            min: 4 - 1920,
            max: 4,
        })
    );
    sb.delta_disks = 4; // old count 0: parses, validate() refuses
    let sb = SuperblockV1::parse(&sb.encode()).unwrap();
    assert_eq!(
        sb.validate(),
        Err(FormatError::OutOfRange {
            field: "delta_disks",
            value: 4,
            min: 4 - 1920,
            max: 3,
        })
    );
}

/// 0.90 accepted 28 members; its limit is 27 descriptors (MD_SB_DISKS).
#[test]
fn v090_more_than_27_members_is_refused() {
    let sb = SuperblockV090::parse(&golden("v0_90-raid5-sb4k.bin")).unwrap();
    let mut bad = sb.clone();
    bad.raid_disks = 28;
    assert_eq!(
        SuperblockV090::parse(&bad.encode()),
        Err(FormatError::OutOfRange {
            field: "raid_disks",
            value: 28,
            min: 0,
            max: 27
        })
    );
    let mut bad = sb.clone();
    bad.nr_disks = 28;
    assert_eq!(
        SuperblockV090::parse(&bad.encode()),
        Err(FormatError::OutOfRange {
            field: "nr_disks",
            value: 28,
            min: 0,
            max: 27
        })
    );
    let mut bad = sb.clone();
    bad.this_disk.number = 27;
    assert_eq!(
        SuperblockV090::parse(&bad.encode()).unwrap().validate(),
        Err(FormatError::OutOfRange {
            field: "this_disk.number",
            value: 27,
            min: 0,
            max: 26
        })
    );
    let mut ok = sb;
    ok.raid_disks = 27;
    ok.nr_disks = 27;
    SuperblockV090::parse(&ok.encode())
        .unwrap()
        .validate()
        .unwrap();
}

/// A 1.2 member with `data_offset = 0` (checksum fixed) was served, and writes at array
/// offset 0 landed on the superblock.
#[test]
fn data_over_the_superblock_is_refused() {
    let mut img = golden("v1_2-raid5-head16k.bin");
    img[4096 + 128..4096 + 136].copy_from_slice(&0u64.to_le_bytes());
    fix_v1_csum(&mut img, 4096);
    let sb = SuperblockV1::parse(&img[4096..8192]).unwrap();
    sb.validate().unwrap();
    let err = sb.areas(65_536);
    assert_eq!(
        err,
        Err(FormatError::Overlap {
            field: "data_offset",
            area: Area::Data,
            extent: Extent {
                start: 0,
                end: 63_488
            },
            other: Area::Superblock,
            other_extent: Extent { start: 8, end: 9 },
        })
    );
    let msg = err.unwrap_err().to_string();
    assert!(
        msg.contains("data_offset") && msg.contains("leave this device out"),
        "{msg}"
    );

    // Data over the bad-block log (sectors 16..24) or the bitmap is refused the same way.
    let mut img = golden("v1_2-raid5-head16k.bin");
    img[4096 + 128..4096 + 136].copy_from_slice(&20u64.to_le_bytes());
    fix_v1_csum(&mut img, 4096);
    let sb = SuperblockV1::parse(&img[4096..8192]).unwrap();
    assert!(matches!(
        sb.areas(65_536),
        Err(FormatError::Overlap {
            field: "bblog_offset",
            area: Area::BadBlockLog,
            other: Area::Data,
            ..
        })
    ));
    // Data running past the end of the device (a truncated member).
    let sb = SuperblockV1::parse(&golden("v1_2-raid5-head16k.bin")[4096..8192]).unwrap();
    assert_eq!(
        sb.areas(65_535),
        Err(FormatError::OutsideDevice {
            field: "data_offset",
            area: Area::Data,
            extent: Extent {
                start: 2048,
                end: 65_536
            },
            dev_sectors: 65_535,
        })
    );
}

/// A 0.90 member with `size = 0xffffffff` KiB served 12 TiB over 16 MiB files; a size that
/// reaches into the superblock is refused as well.
#[test]
fn v090_size_beyond_the_superblock_is_refused() {
    let mut sb = SuperblockV090::parse(&golden("v0_90-raid5-sb4k.bin")).unwrap();
    sb.size_kib = u32::MAX;
    let sb = SuperblockV090::parse(&sb.encode()).unwrap();
    assert_eq!(
        sb.areas(32_768),
        Err(FormatError::OutsideDevice {
            field: "size",
            area: Area::Data,
            extent: Extent {
                start: 0,
                end: 0x1_ffff_fffe
            },
            dev_sectors: 32_768,
        })
    );
    let mut sb = sb;
    sb.size_kib = 8132; // 16264 sectors: over the superblock at 16256 of an 8 MiB member
    assert_eq!(
        sb.areas(16_384),
        Err(FormatError::Overlap {
            field: "size",
            area: Area::Data,
            extent: Extent {
                start: 0,
                end: 16_264
            },
            other: Area::Superblock,
            other_extent: Extent {
                start: 16_256,
                end: 16_264
            },
        })
    );
}

/// A change to a superblock.
type Edit = Box<dyn Fn(&mut SuperblockV1)>;

/// Shape fields: levels, layouts, chunks and counts md cannot run are named.
#[test]
fn shape_fields_are_checked() {
    let base = SuperblockV1::parse(&golden("v1_2-raid5-head16k.bin")[4096..8192]).unwrap();
    let cases: Vec<(Edit, &str, i128)> = vec![
        (Box::new(|s| s.level = 7), "level", 7),
        (Box::new(|s| s.level = -4), "level", -4),
        (Box::new(|s| s.layout = 6), "layout", 6),
        (Box::new(|s| s.chunksize = 12), "chunksize", 12),
        (Box::new(|s| s.chunksize = 4), "chunksize", 4),
        (Box::new(|s| s.raid_disks = 1), "raid_disks", 1),
        (Box::new(|s| s.size = 63_489), "size", 63_489),
        (Box::new(|s| s.bblog_size = 9), "bblog_size", 9),
    ];
    for (edit, field, value) in cases {
        let mut sb = base.clone();
        edit(&mut sb);
        if field == "bblog_size" {
            sb.feature_map |= feature::BAD_BLOCKS;
        }
        match sb.validate() {
            Err(FormatError::BadShape {
                field: f, value: v, ..
            })
            | Err(FormatError::OutOfRange {
                field: f, value: v, ..
            }) => {
                assert_eq!((f, v), (field, value))
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    // The same for the target of a reshape.
    let mut sb = base.clone();
    sb.feature_map |= feature::RESHAPE_ACTIVE;
    sb.new_level = 5;
    sb.new_layout = 2;
    sb.new_chunk = 96;
    assert!(matches!(
        sb.validate(),
        Err(FormatError::BadShape {
            field: "new_chunk",
            value: 96,
            ..
        })
    ));
    sb.new_chunk = 256;
    sb.validate().unwrap();
    // Feature bits the kernel refuses together.
    let mut sb = base;
    sb.feature_map |= feature::PPL | feature::BITMAP_OFFSET;
    assert!(matches!(
        sb.validate(),
        Err(FormatError::BadField {
            field: "feature_map",
            ..
        })
    ));
}

/// The reshape's new data area must fit too (a negative `new_offset` moving data over the
/// superblock, or past the start of the device).
#[test]
fn reshape_new_offset_is_checked_against_the_device() {
    let mut sb = SuperblockV1::parse(&golden("v1_2-raid5-head16k.bin")[4096..8192]).unwrap();
    sb.feature_map |= feature::RESHAPE_ACTIVE | feature::NEW_OFFSET;
    sb.new_level = 5;
    sb.new_layout = 2;
    sb.new_chunk = sb.chunksize;
    sb.delta_disks = 1;
    sb.raid_disks = 5;
    sb.new_offset = -512;
    sb.validate().unwrap();
    let a = sb.areas(65_536).unwrap();
    assert_eq!(a.new_data, Some(Extent::at(1536, sb.size)));
    sb.new_offset = -2040;
    assert!(matches!(
        sb.areas(65_536),
        Err(FormatError::Overlap {
            field: "new_offset",
            area: Area::NewData,
            other: Area::Superblock,
            ..
        })
    ));
    sb.new_offset = -2049;
    assert_eq!(
        sb.areas(65_536),
        Err(FormatError::OutOfRange {
            field: "new_offset",
            value: -2049,
            min: -2048,
            max: i128::from(u64::MAX) - 2048,
        })
    );
}
