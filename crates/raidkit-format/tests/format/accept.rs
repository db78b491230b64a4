//! raidkit-encoded superblocks accepted by the real mdadm/kernel.
//!
//! `write_images` (ignored; run by hand) writes sparse member images built with our
//! encoder and placement helpers into `$RAIDKIT_FORMAT_IMG_DIR`; they were examined,
//! assembled and scrubbed once in mdref (`tests/golden/encoder-accept/run.sh`), and the
//! output was committed as `tests/golden/encoder-accept/result.txt`.
//! `recorded_checksums_match` (no VM needed) recomputes the superblocks and checks them
//! against that record.

use crate::common::example2;
use raidkit_format::bitmap::{self, BitmapSuper};
use raidkit_format::placement::{self, choose_bm_space};
use raidkit_format::uuid;
use raidkit_format::v090::{self, disk_state, sb_state, DiskDescriptor, SuperblockV090};
use raidkit_format::v1::{self, Minor, SuperblockV1};

const T: u64 = 1_714_000_000;

/// One member image: (file name, size in bytes, [(byte offset, bytes)]).
type Image = (String, u64, Vec<(u64, Vec<u8>)>);

#[allow(clippy::too_many_arguments)] // test helper mirroring mdadm's options
fn v1_member(
    minor: Minor,
    dev: u64,
    level: i32,
    chunk_kib: u64,
    n: u32,
    i: u32,
    uuid_text: &str,
    name: &str,
    with_bitmap: bool,
) -> (SuperblockV1, Option<BitmapSuper>) {
    let set_uuid = uuid::parse(uuid_text).unwrap();
    // Bitmap sized for the default chunk (always 1 chunk-ish here, 8 sectors).
    let bm_sectors = with_bitmap.then_some(8);
    let l = placement::v1_layout(minor, dev, chunk_kib, bm_sectors);
    let mut sb =
        SuperblockV1::new_default(set_uuid, &v1::mdadm_set_name(Some("raidkit"), name), T, n);
    sb.level = level;
    sb.layout = if level == 5 { 2 } else { 0 };
    sb.chunksize = (chunk_kib * 2) as u32;
    sb.size = placement::component_size(l.data_size, level, chunk_kib);
    sb.data_offset = l.data_offset;
    sb.data_size = l.data_size;
    sb.super_offset = l.super_offset;
    sb.bblog_offset = l.bblog_offset;
    sb.bblog_size = l.bblog_size;
    sb.dev_number = i;
    sb.device_uuid = [0xd0 + i as u8; 16];
    let bm = l.bitmap_offset.map(|off| {
        sb.feature_map |= v1::feature::BITMAP_OFFSET;
        sb.bitmap_offset = off;
        let chunk = bitmap::default_chunk_bytes(sb.size, choose_bm_space(sb.size));
        let bm = BitmapSuper::new_default(set_uuid, sb.size, chunk);
        assert_eq!(bm.space_sectors(), 8);
        bm
    });
    (sb, bm)
}

#[allow(clippy::too_many_arguments)] // test helper mirroring mdadm's options
fn v1_images(
    tag: &str,
    minor: Minor,
    dev: u64,
    level: i32,
    chunk_kib: u64,
    n: u32,
    uuid_text: &str,
    bitmap: bool,
) -> Vec<(Image, SuperblockV1)> {
    (0..n)
        .map(|i| {
            let (sb, bm) = v1_member(minor, dev, level, chunk_kib, n, i, uuid_text, tag, bitmap);
            let mut writes = vec![(
                sb.super_offset * 512,
                sb.encode()[..sb.write_len()].to_vec(),
            )];
            if let Some(bm) = bm {
                let at = (sb.super_offset as i64 + i64::from(sb.bitmap_offset)) as u64 * 512;
                let mut b = bm.encode();
                b.resize(4096, 0); // all bits clean
                writes.push((at, b));
            }
            ((format!("{tag}_{i}.img"), dev * 512, writes), sb)
        })
        .collect()
}

fn v090_images() -> Vec<(Image, SuperblockV090)> {
    let dev = 8 * 2048u64;
    let mut disks = [DiskDescriptor::default(); v090::MD_SB_DISKS];
    for (i, d) in disks.iter_mut().take(4).enumerate() {
        *d = DiskDescriptor {
            number: i as u32,
            major: 0,
            minor: 0,
            raid_disk: i as u32,
            state: disk_state::ACTIVE | disk_state::SYNC,
        };
    }
    (0..4)
        .map(|i| {
            let mut sb = SuperblockV090 {
                minor_version: 90,
                patch_version: 0,
                uuid_words: [0; 4],
                ctime: T as u32,
                level: 5,
                size_kib: placement::v090_size_kib(dev, 64).unwrap(),
                nr_disks: 4,
                raid_disks: 4,
                md_minor: 3,
                utime: T as u32,
                state: sb_state::CLEAN,
                active_disks: 4,
                working_disks: 4,
                failed_disks: 0,
                spare_disks: 0,
                events: 1,
                cp_events: 0,
                recovery_cp: 0,
                reshape_position: 0,
                new_level: 0,
                delta_disks: 0,
                new_layout: 0,
                new_chunk: 0,
                layout: 2,
                chunk_size: 65536,
                disks,
                this_disk: disks[i],
            };
            sb.set_uuid_mdadm(uuid::parse("ea1dc17a:00000000:00000000:00000090").unwrap());
            let off = v090::super_offset(dev).unwrap() * 512;
            (
                (format!("g90_{i}.img"), dev * 512, vec![(off, sb.encode())]),
                sb,
            )
        })
        .collect()
}

/// Every image with the checksum its superblock must have.
fn all_images() -> Vec<(Image, u32)> {
    let mut out = Vec::new();
    let mib = 2048;
    for (img, sb) in v1_images(
        "r5",
        Minor::V2,
        32 * mib,
        5,
        64,
        4,
        "ea1dc17a:00000000:00000000:00000012",
        false,
    )
    .into_iter()
    .chain(v1_images(
        "r1b",
        Minor::V0,
        64 * mib,
        1,
        0,
        2,
        "ea1dc17a:00000000:00000000:00000010",
        true,
    ))
    .chain(v1_images(
        "r11",
        Minor::V1,
        32 * mib,
        1,
        0,
        2,
        "ea1dc17a:00000000:00000000:00000011",
        false,
    )) {
        let c = SuperblockV1::checksum(&sb.encode()).unwrap();
        out.push((img, c));
    }
    for (img, sb) in v090_images() {
        let c = SuperblockV090::checksum(&sb.encode()).unwrap();
        out.push((img, c));
    }
    let ex2 = example2();
    let b = ex2.encode();
    let dev = ex2.data_offset + ex2.data_size;
    out.push((
        ("ex2.img".into(), dev * 512, vec![(4096, b[..512].to_vec())]),
        0x79db_6d7a,
    ));
    out
}

#[test]
#[ignore = "writes images for the one-time mdref check"]
fn write_images() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = std::env::var("RAIDKIT_FORMAT_IMG_DIR").expect("set RAIDKIT_FORMAT_IMG_DIR");
    for ((name, size, writes), _) in all_images() {
        let mut f = std::fs::File::create(format!("{dir}/{name}")).unwrap();
        f.set_len(size).unwrap();
        for (off, bytes) in writes {
            f.seek(SeekFrom::Start(off)).unwrap();
            f.write_all(&bytes).unwrap();
        }
    }
}

#[test]
fn recorded_checksums_match() {
    let p = format!(
        "{}/tests/golden/encoder-accept/result.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let rec = std::fs::read_to_string(p).unwrap();
    // The record holds "=== examine NAME" sections followed by mdadm --examine output.
    let images = all_images();
    assert_eq!(images.len(), 13);
    for ((name, _, _), csum) in &images {
        let sec = rec
            .split("=== examine ")
            .find(|s| s.starts_with(&format!("{name}\n")))
            .unwrap_or_else(|| panic!("no examine section for {name}"));
        let line = format!("Checksum : {csum:x} - correct");
        assert!(sec.contains(&line), "{name}: {line} not recorded");
    }
    // The kernel assembled every array and the scrub found them consistent.
    for md in ["md0", "md1", "md2", "md3"] {
        assert!(rec.contains(&format!("{md} mismatch_cnt=0")), "{md}");
    }
    assert!(rec.contains("ALL-ASSEMBLED"));
}
