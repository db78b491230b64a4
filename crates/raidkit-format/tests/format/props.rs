//! Property tests: round trips, garbage never panics, single-byte corruption detected.

use proptest::prelude::*;
use raidkit_format::badblocks::{self, BadRange};
use raidkit_format::bitmap::BitmapSuper;
use raidkit_format::v090::{DiskDescriptor, SuperblockV090, MD_SB_DISKS};
use raidkit_format::v1::{feature, SuperblockV1};

fn arb_v1() -> impl Strategy<Value = SuperblockV1> {
    let a = (
        any::<u32>().prop_map(|f| f & feature::ALL & !feature::RAID0_LAYOUT),
        any::<[u8; 16]>(),
        any::<[u8; 32]>(),
        any::<u64>(),
        any::<i32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<i32>(),
        any::<i32>(),
        any::<u64>(),
    );
    let b = (
        any::<i32>(),
        any::<u32>(),
        any::<u32>(),
        any::<i32>(),
        any::<u64>(),
        10u64..,
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<u8>(),
    );
    let c = (
        any::<u8>(),
        any::<u16>(),
        any::<i32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(any::<u16>(), 0..=1920),
    );
    (a, b, c, 0u32..=1920, 0u32..=1920).prop_map(|(a, b, c, raid_disks, old)| SuperblockV1 {
        feature_map: a.0,
        set_uuid: a.1,
        set_name: a.2,
        ctime: a.3,
        level: a.4,
        layout: a.5,
        size: a.6,
        chunksize: a.7,
        raid_disks,
        bitmap_offset: a.9,
        new_level: a.10,
        reshape_position: a.11,
        // Counts within the format's limits (parsing refuses others): with a reshape
        // active, the pre-reshape count raid_disks − delta_disks is within 0..=1920 too.
        delta_disks: if a.0 & feature::RESHAPE_ACTIVE != 0 {
            raid_disks as i32 - old as i32
        } else {
            b.0
        },
        new_layout: b.1,
        new_chunk: b.2,
        new_offset: b.3,
        data_offset: b.4,
        data_size: b.5,
        super_offset: b.6,
        recovery_offset: b.7,
        dev_number: b.8,
        cnt_corrected_read: b.9,
        device_uuid: b.10,
        devflags: b.11,
        bblog_shift: c.0,
        bblog_size: c.1,
        bblog_offset: c.2,
        utime: c.3,
        events: c.4,
        resync_offset: c.5,
        max_dev: c.6.len() as u32,
        dev_roles: c.6,
    })
}

fn arb_desc() -> impl Strategy<Value = DiskDescriptor> {
    any::<[u32; 5]>().prop_map(|w| DiskDescriptor {
        number: w[0],
        major: w[1],
        minor: w[2],
        raid_disk: w[3],
        state: w[4],
    })
}

fn arb_v090() -> impl Strategy<Value = SuperblockV090> {
    let a = (
        prop_oneof![Just(90u32), Just(91u32)],
        any::<u32>(),
        any::<[u32; 4]>(),
        any::<u32>(),
        any::<i32>(),
        any::<[u32; 5]>(),
        any::<[u32; 6]>(),
    );
    let b = (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        any::<[i32; 2]>(),
        any::<[u32; 4]>(),
        prop::collection::vec(arb_desc(), MD_SB_DISKS),
        arb_desc(),
    );
    (a, b, 0u32..=27, 0u32..=27, 0u32..=27).prop_map(|(a, b, raid_disks, nr_disks, old)| {
        SuperblockV090 {
            minor_version: a.0,
            patch_version: a.1,
            uuid_words: a.2,
            ctime: a.3,
            level: a.4,
            size_kib: a.5[0],
            nr_disks,
            raid_disks,
            md_minor: a.5[3],
            utime: a.5[4],
            state: a.6[0],
            active_disks: a.6[1],
            working_disks: a.6[2],
            failed_disks: a.6[3],
            spare_disks: a.6[4],
            recovery_cp: a.6[5],
            events: b.0,
            cp_events: b.1,
            new_chunk: b.2,
            reshape_position: b.3,
            new_level: b.4[0],
            delta_disks: if a.0 == 91 {
                raid_disks as i32 - old as i32
            } else {
                b.4[1]
            },
            new_layout: b.5[0],
            layout: b.5[1],
            chunk_size: b.5[2],
            disks: b.6.try_into().unwrap(),
            this_disk: b.7,
        }
    })
}

fn arb_bitmap() -> impl Strategy<Value = BitmapSuper> {
    (
        3u32..=5,
        any::<[u8; 16]>(),
        any::<[u64; 3]>(),
        any::<u32>(),
        9u32..32,
        1u32..,
        0u32..=16383,
        any::<[u32; 2]>(),
        prop::collection::vec(any::<u8>(), 64),
    )
        .prop_map(|(v, uuid, e, state, cs, ds, wb, sn, name)| BitmapSuper {
            version: v,
            uuid,
            events: e[0],
            events_cleared: e[1],
            sync_size: e[2],
            state,
            chunksize: 1 << cs,
            daemon_sleep: ds,
            write_behind: wb,
            sectors_reserved: sn[0],
            nodes: sn[1],
            cluster_name: name.try_into().unwrap(),
        })
}

/// 512 cases unless `PROPTEST_CASES` says otherwise (fuzz/run-short.sh's fallback).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn v1_roundtrip(sb in arb_v1()) {
        let b = sb.encode();
        prop_assert_eq!(b.len(), 4096);
        prop_assert_eq!(SuperblockV1::parse(&b).unwrap(), sb.clone());
        // Only write_len bytes are needed.
        prop_assert_eq!(SuperblockV1::parse(&b[..sb.write_len()]).unwrap(), sb);
    }

    #[test]
    fn v1_single_byte_flip_detected(sb in arb_v1(), pos in any::<prop::sample::Index>(), x in 1u8..) {
        let mut b = sb.encode();
        let n = 256 + 2 * sb.max_dev as usize;
        let i = pos.index(n);
        b[i] ^= x;
        prop_assert!(SuperblockV1::parse(&b).is_err(), "flip at {} undetected", i);
    }

    #[test]
    fn v090_roundtrip_and_flip(sb in arb_v090(), pos in any::<prop::sample::Index>(), x in 1u8..) {
        let mut b = sb.encode();
        prop_assert_eq!(SuperblockV090::parse(&b).unwrap(), sb);
        let i = pos.index(4096);
        b[i] ^= x;
        prop_assert!(SuperblockV090::parse(&b).is_err(), "flip at {} undetected", i);
    }

    #[test]
    fn bitmap_roundtrip(bm in arb_bitmap()) {
        prop_assert_eq!(BitmapSuper::parse(&bm.encode()).unwrap(), bm);
    }

    #[test]
    fn badblocks_roundtrip(
        raw in prop::collection::vec((0u64..(1 << 44), 1u64..=512), 0..=64),
        shift in 0u8..8,
    ) {
        let ranges: Vec<BadRange> = raw
            .iter()
            .map(|&(s, l)| BadRange { start: s << shift, len: l << shift })
            .collect();
        let enc = badblocks::encode(&ranges, shift, 4096).unwrap();
        prop_assert_eq!(enc.len(), 4096);
        prop_assert_eq!(badblocks::parse(&enc, shift).unwrap(), ranges);
    }

    #[test]
    fn badblocks_long_ranges_split(start in 0u64..(1 << 40), len in 1u64..20_000) {
        let enc = badblocks::encode(&[BadRange { start, len }], 0, 4096).unwrap();
        let got = badblocks::parse(&enc, 0).unwrap();
        prop_assert_eq!(got.len() as u64, len.div_ceil(512));
        prop_assert!(got.iter().all(|r| r.len <= 512));
        prop_assert_eq!(got.iter().map(|r| r.len).sum::<u64>(), len);
        prop_assert_eq!(got[0].start, start);
        for w in got.windows(2) {
            prop_assert_eq!(w[0].start + w[0].len, w[1].start);
        }
    }

    #[test]
    fn garbage_never_panics(buf in prop::collection::vec(any::<u8>(), 0..5000), shift in any::<u8>()) {
        let _ = SuperblockV1::parse(&buf);
        let _ = SuperblockV1::parse_lenient(&buf);
        let _ = SuperblockV1::checksum(&buf);
        let _ = SuperblockV090::parse(&buf);
        let _ = SuperblockV090::parse_lenient(&buf);
        let _ = BitmapSuper::parse(&buf);
        let _ = badblocks::parse(&buf, shift);
        let _ = raidkit_format::bitmap::bit_is_set(&buf, buf.len() as u64 * 8);
    }

    #[test]
    fn garbage_with_magic_never_panics(
        mut buf in prop::collection::vec(any::<u8>(), 256..4200),
        max_dev in prop_oneof![0u32..2000, any::<u32>()],
    ) {
        buf[0..4].copy_from_slice(&0xa92b_4efcu32.to_le_bytes());
        buf[4..8].copy_from_slice(&1u32.to_le_bytes());
        buf[220..224].copy_from_slice(&max_dev.to_le_bytes());
        if let Ok((sb, _)) = SuperblockV1::parse_lenient(&buf) {
            // Anything that parses re-encodes to something that parses to itself.
            prop_assert_eq!(SuperblockV1::parse(&sb.encode()).unwrap(), sb);
        }
        buf[4..8].copy_from_slice(&0u32.to_le_bytes());
        buf[8..12].copy_from_slice(&90u32.to_le_bytes());
        if buf.len() >= 4096 {
            // Decodes unless a count is beyond the format (then it must say which).
            match SuperblockV090::parse_lenient(&buf) {
                Ok((sb, _)) => prop_assert_eq!(SuperblockV090::parse(&sb.encode()).unwrap(), sb),
                Err(e) => prop_assert!(
                    matches!(e, raidkit_format::FormatError::OutOfRange { .. }),
                    "unexpected error {:?}", e
                ),
            }
        }
    }

    #[test]
    fn uuid_roundtrip(u in any::<[u8; 16]>()) {
        let s = raidkit_format::uuid::format(&u);
        prop_assert_eq!(s.len(), 35);
        prop_assert_eq!(raidkit_format::uuid::parse(&s), Some(u));
    }
}
