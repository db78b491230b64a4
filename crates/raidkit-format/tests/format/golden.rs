//! Superblocks written by the real mdadm 4.2 + Linux 6.1 (made with
//! `tests/golden/make-golden.sh` in mdref; see tests/golden/README.md), compared field by
//! field with `mdadm --examine` and re-encoded byte for byte.

use crate::common::examine_value as ev;
use raidkit_format::bitmap::{self, BitmapSuper};
use raidkit_format::placement::{self, choose_bm_space};
use raidkit_format::v090::SuperblockV090;
use raidkit_format::v1::{self, Minor, SuperblockV1};
use raidkit_format::{uuid, MAX_SECTOR};

fn golden(name: &str) -> Vec<u8> {
    let p = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn text(name: &str) -> String {
    String::from_utf8(golden(name)).unwrap()
}

/// C `ctime()`-style text in UTC ("Mon Jan  1 00:00:03 2024"), as mdadm prints (TZ unset).
fn ctime_text(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    // Civil from days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let mn = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(m - 1) as usize];
    format!(
        "{wd} {mn} {d:>2} {:02}:{:02}:{:02} {y}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[test]
fn ctime_text_matches_reference() {
    assert_eq!(ctime_text(1_700_000_000), "Tue Nov 14 22:13:20 2023");
    assert_eq!(ctime_text(1_704_067_203), "Mon Jan  1 00:00:03 2024");
}

/// Check a v1 superblock against its examine text; returns the parsed superblock.
fn check_v1(bin: &str, sb_at: usize, examine: &str) -> SuperblockV1 {
    let img = golden(bin);
    let buf = &img[sb_at..sb_at + 4096];
    let sb = SuperblockV1::parse(buf).unwrap();
    let t = text(examine);
    assert_eq!(ev(&t, "Magic"), "a92b4efc");
    assert_eq!(ev(&t, "Version"), sb.minor().as_str());
    assert_eq!(ev(&t, "Feature Map"), format!("{:#x}", sb.feature_map));
    assert_eq!(ev(&t, "Array UUID"), uuid::format(&sb.set_uuid));
    assert_eq!(ev(&t, "Name"), sb.name());
    assert_eq!(
        ev(&t, "Creation Time"),
        ctime_text(v1::decode_time(sb.ctime))
    );
    assert_eq!(ev(&t, "Update Time"), ctime_text(v1::decode_time(sb.utime)));
    assert_eq!(ev(&t, "Raid Level"), format!("raid{}", sb.level));
    assert_eq!(ev(&t, "Raid Devices"), sb.raid_disks.to_string());
    assert!(ev(&t, "Avail Dev Size").starts_with(&format!("{} sectors (", sb.data_size)));
    assert_eq!(
        ev(&t, "Super Offset"),
        format!("{} sectors", sb.super_offset)
    );
    if sb.data_offset != 0 {
        assert_eq!(ev(&t, "Data Offset"), format!("{} sectors", sb.data_offset));
    }
    assert_eq!(
        ev(&t, "State"),
        if sb.resync_offset == MAX_SECTOR {
            "clean"
        } else {
            "active"
        }
    );
    assert_eq!(ev(&t, "Device UUID"), uuid::format(&sb.device_uuid));
    assert_eq!(
        ev(&t, "Bad Block Log"),
        format!(
            "{} entries available at offset {} sectors",
            u32::from(sb.bblog_size) * 64,
            sb.bblog_offset
        )
    );
    let csum = SuperblockV1::checksum(buf).unwrap();
    assert_eq!(ev(&t, "Checksum"), format!("{csum:x} - correct"));
    assert_eq!(ev(&t, "Events"), sb.events.to_string());
    assert_eq!(
        ev(&t, "Device Role"),
        format!("Active device {}", sb.own_role())
    );
    let state: String = (0..sb.raid_disks)
        .map(|r| {
            if sb.dev_roles.contains(&(r as u16)) {
                'A'
            } else {
                '.'
            }
        })
        .collect();
    assert!(ev(&t, "Array State").starts_with(&format!("{state} (")));
    if sb.feature_map & v1::feature::BITMAP_OFFSET != 0 {
        assert_eq!(
            ev(&t, "Internal Bitmap"),
            format!("{} sectors from superblock", sb.bitmap_offset)
        );
    }
    if sb.chunksize != 0 {
        assert_eq!(ev(&t, "Chunk Size"), format!("{}K", sb.chunksize / 2));
    }
    // Byte-for-byte re-encode of what is written (256 + 2*max_dev rounded to 512); the rest
    // of the 4 KiB block was never written by mdadm/the kernel (zero in these images; our
    // encoder fills it with 0xff, outside the checksummed range).
    let enc = sb.encode();
    let n = sb.write_len();
    assert_eq!(n, 512);
    assert_eq!(&enc[..n], &buf[..n]);
    assert!(buf[n..].iter().all(|&b| b == 0));
    sb
}

/// Build the superblock mdadm would create from our placement helpers, taking only the
/// random/time fields from the golden one, and compare the written bytes.
fn recreate(golden_sb: &SuperblockV1, mut mine: SuperblockV1, golden_bytes: &[u8]) {
    mine.device_uuid = golden_sb.device_uuid;
    mine.ctime = golden_sb.ctime;
    mine.utime = golden_sb.utime;
    assert_eq!(&mine, golden_sb);
    assert_eq!(&mine.encode()[..512], &golden_bytes[..512]);
}

#[test]
fn v1_2_raid5() {
    let sb = check_v1("v1_2-raid5-head16k.bin", 4096, "v1_2-raid5.examine.txt");
    assert_eq!(
        uuid::format(&sb.set_uuid),
        "11111111:22222222:33333333:44444444"
    );
    assert_eq!(
        (sb.level, sb.layout, sb.chunksize, sb.size),
        (5, 2, 128, 63_488)
    );
    assert_eq!(sb.dev_roles[..5], [0, 1, 2, 3, 0xffff]);
    let dev = 32 * 2048;
    let l = placement::v1_layout(Minor::V2, dev, 64, None);
    let mut m = SuperblockV1::new_default(
        sb.set_uuid,
        &v1::mdadm_set_name(Some("testhost"), "r5"),
        0,
        4,
    );
    m.level = 5;
    m.layout = 2;
    m.chunksize = 128;
    m.size = placement::component_size(l.data_size, 5, 64);
    m.data_offset = l.data_offset;
    m.data_size = l.data_size;
    m.super_offset = l.super_offset;
    m.bblog_offset = l.bblog_offset;
    m.bblog_size = l.bblog_size;
    recreate(&sb, m, &golden("v1_2-raid5-head16k.bin")[4096..]);
    // Bad-block log area: never written (feature bit clear).
    assert!(golden("v1_2-raid5-head16k.bin")[8192..12288]
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn v1_1_raid1() {
    let sb = check_v1("v1_1-raid1-head16k.bin", 0, "v1_1-raid1.examine.txt");
    assert_eq!(sb.minor(), Minor::V1);
    let l = placement::v1_layout(Minor::V1, 32 * 2048, 0, None);
    let mut m = SuperblockV1::new_default(sb.set_uuid, "testhost:r11", 0, 2);
    m.level = 1;
    m.size = placement::component_size(l.data_size, 1, 0);
    m.data_offset = l.data_offset;
    m.data_size = l.data_size;
    m.super_offset = l.super_offset;
    m.bblog_offset = l.bblog_offset;
    m.bblog_size = l.bblog_size;
    recreate(&sb, m, &golden("v1_1-raid1-head16k.bin"));
}

fn check_bitmap(img: &[u8], at: usize, examine: &str, sb: &SuperblockV1) -> BitmapSuper {
    let bm = BitmapSuper::parse(&img[at..at + 256]).unwrap();
    let t = text(examine);
    assert_eq!(ev(&t, "Magic"), "6d746962");
    assert_eq!(ev(&t, "Version"), bm.version.to_string());
    assert_eq!(ev(&t, "UUID"), uuid::format(&bm.uuid));
    assert_eq!(bm.uuid, sb.set_uuid);
    assert_eq!(ev(&t, "Events"), bm.events.to_string());
    assert_eq!(ev(&t, "Events Cleared"), bm.events_cleared.to_string());
    assert_eq!(ev(&t, "Chunksize"), format!("{} MB", bm.chunksize >> 20));
    assert_eq!(
        ev(&t, "Daemon"),
        format!("{}s flush period", bm.daemon_sleep)
    );
    assert!(ev(&t, "Sync Size").starts_with(&format!("{} (", bm.sync_size / 2)));
    assert_eq!(bm.sync_size, sb.size);
    let bits = &img[at + 256..at + 256 + bm.chunks().div_ceil(8) as usize];
    let dirty = (0..bm.chunks())
        .filter(|&i| bitmap::bit_is_set(bits, i))
        .count();
    assert!(ev(&t, "Bitmap").starts_with(&format!("{} bits (chunks), {dirty} dirty", bm.chunks())));
    // mdadm's creation defaults, and the exact 256 bytes.
    let dflt = BitmapSuper::new_default(
        sb.set_uuid,
        sb.size,
        bitmap::default_chunk_bytes(sb.size, choose_bm_space(sb.size)),
    );
    assert_eq!(bm, dflt);
    assert_eq!(&bm.encode()[..], &img[at..at + 256]);
    // mdadm filled the bit area with 0xff; the kernel cleared bit 0 (assume-clean).
    assert_eq!(img[at + 256], 0xfe);
    assert!(img[at + 257..at + 4096].iter().all(|&b| b == 0xff));
    bm
}

#[test]
fn v1_0_raid1_bitmap() {
    let img = golden("v1_0-raid1-bitmap-tail16k.bin");
    // The file holds device sectors 131040..131072 of a 64 MiB member.
    let sb = check_v1(
        "v1_0-raid1-bitmap-tail16k.bin",
        8192,
        "v1_0-raid1-bitmap.examine.txt",
    );
    assert_eq!(sb.minor(), Minor::V0);
    assert_eq!(
        (sb.super_offset, sb.data_offset, sb.data_size),
        (131_056, 0, 131_040)
    );
    assert_eq!(
        (sb.bitmap_offset, sb.bblog_offset, sb.bblog_size),
        (-16, -8, 8)
    );
    assert_eq!(sb.size, 130_944);
    let bm = check_bitmap(&img, 0, "v1_0-raid1-bitmap.examine-bitmap.txt", &sb);
    let bm_sectors = bm.space_sectors();
    assert_eq!(bm_sectors, 8);
    let l = placement::v1_0_layout(64 * 2048, 0, Some(bm_sectors));
    let mut m = SuperblockV1::new_default(sb.set_uuid, "testhost:r1b", 0, 2);
    m.feature_map = v1::feature::BITMAP_OFFSET;
    m.level = 1;
    m.size = placement::component_size(l.data_size, 1, 0);
    m.data_offset = l.data_offset;
    m.data_size = l.data_size;
    m.super_offset = l.super_offset;
    m.bitmap_offset = l.bitmap_offset.unwrap();
    m.bblog_offset = l.bblog_offset;
    m.bblog_size = l.bblog_size;
    recreate(&sb, m, &img[8192..]);
}

#[test]
fn v1_2_raid1_bitmap() {
    let img = golden("v1_2-raid1-bitmap-head16k.bin");
    let sb = check_v1(
        "v1_2-raid1-bitmap-head16k.bin",
        4096,
        "v1_2-raid1-bitmap.examine.txt",
    );
    assert_eq!(
        (sb.feature_map, sb.bitmap_offset, sb.bblog_offset),
        (1, 8, 16)
    );
    let bm = check_bitmap(&img, 8192, "v1_2-raid1-bitmap.examine-bitmap.txt", &sb);
    let l = placement::v1_layout(Minor::V2, 32 * 2048, 0, Some(bm.space_sectors()));
    let mut m = SuperblockV1::new_default(sb.set_uuid, "testhost:r12b", 0, 2);
    m.feature_map = v1::feature::BITMAP_OFFSET;
    m.level = 1;
    m.size = placement::component_size(l.data_size, 1, 0);
    m.data_offset = l.data_offset;
    m.data_size = l.data_size;
    m.super_offset = l.super_offset;
    m.bitmap_offset = l.bitmap_offset.unwrap();
    m.bblog_offset = l.bblog_offset;
    m.bblog_size = l.bblog_size;
    recreate(&sb, m, &img[4096..]);
}

#[test]
fn v0_90_raid5() {
    let img = golden("v0_90-raid5-sb4k.bin");
    let sb = SuperblockV090::parse(&img).unwrap();
    let t = text("v0_90-raid5.examine.txt");
    assert_eq!(
        ev(&t, "Version"),
        format!("0.{}.{:02}", sb.minor_version, sb.patch_version)
    );
    assert_eq!(ev(&t, "UUID"), uuid::format(&sb.uuid_mdadm()));
    assert_eq!(ev(&t, "UUID"), "dddddddd:eeeeeeee:ffffffff:01234567");
    assert_eq!(ev(&t, "Creation Time"), ctime_text(u64::from(sb.ctime)));
    assert_eq!(ev(&t, "Update Time"), ctime_text(u64::from(sb.utime)));
    assert_eq!(ev(&t, "Raid Level"), format!("raid{}", sb.level));
    assert!(ev(&t, "Used Dev Size").starts_with(&format!("{} (", sb.size_kib)));
    assert_eq!(Some(sb.size_kib), placement::v090_size_kib(8 * 2048, 64));
    assert!(ev(&t, "Array Size").starts_with(&format!("{} (", sb.size_kib * 3)));
    assert_eq!(ev(&t, "Raid Devices"), sb.raid_disks.to_string());
    assert_eq!(ev(&t, "Total Devices"), sb.nr_disks.to_string());
    assert_eq!(ev(&t, "Preferred Minor"), sb.md_minor.to_string());
    assert_eq!(ev(&t, "State"), "clean");
    assert_eq!(sb.resync_offset(), MAX_SECTOR);
    assert_eq!(ev(&t, "Active Devices"), sb.active_disks.to_string());
    assert_eq!(ev(&t, "Working Devices"), sb.working_disks.to_string());
    assert_eq!(ev(&t, "Failed Devices"), sb.failed_disks.to_string());
    assert_eq!(ev(&t, "Spare Devices"), sb.spare_disks.to_string());
    let csum = SuperblockV090::checksum(&img).unwrap();
    assert_eq!(ev(&t, "Checksum"), format!("{csum:x} - correct"));
    assert_eq!(ev(&t, "Events"), sb.events.to_string());
    assert_eq!((sb.layout, sb.chunk_size), (2, 65_536));
    assert_eq!(ev(&t, "Chunk Size"), "64K");
    for (i, d) in sb.disks.iter().take(4).enumerate() {
        let line = format!(
            "   {i}     {}     {}      {}        {}      active sync   /dev/vd{}",
            d.number,
            d.major,
            d.minor,
            d.raid_disk,
            (b'i' + i as u8) as char
        );
        assert!(t.contains(&line), "{line}");
        assert_eq!(d.state, 6);
    }
    assert_eq!(sb.this_disk, sb.disks[0]);
    assert_eq!(sb.encode(), img);
}
