use raidkit_format::v090::{self, disk_state, sb_state, DiskDescriptor, SuperblockV090};
use raidkit_format::{FormatError, MAX_SECTOR};

pub fn sample() -> SuperblockV090 {
    let mut disks = [DiskDescriptor::default(); v090::MD_SB_DISKS];
    for (i, d) in disks.iter_mut().take(4).enumerate() {
        *d = DiskDescriptor {
            number: i as u32,
            major: 254,
            minor: 128 + 16 * i as u32,
            raid_disk: i as u32,
            state: disk_state::ACTIVE | disk_state::SYNC,
        };
    }
    SuperblockV090 {
        minor_version: 90,
        patch_version: 0,
        uuid_words: [0xdddd_dddd, 0xeeee_eeee, 0xffff_ffff, 0x0123_4567],
        ctime: 1_704_067_204,
        level: 5,
        size_kib: 8128,
        nr_disks: 4,
        raid_disks: 4,
        md_minor: 3,
        utime: 1_704_067_204,
        state: sb_state::CLEAN,
        active_disks: 4,
        working_disks: 4,
        failed_disks: 0,
        spare_disks: 0,
        events: 1,
        cp_events: 1,
        recovery_cp: 0,
        reshape_position: 0,
        new_level: 0,
        delta_disks: 0,
        new_layout: 0,
        new_chunk: 0,
        layout: 2,
        chunk_size: 65536,
        disks,
        this_disk: disks[0],
    }
}

#[test]
fn super_offset_rule() {
    assert_eq!(v090::super_offset(16384), Some(16256));
    assert_eq!(v090::super_offset(16384 + 127), Some(16256));
    assert_eq!(v090::super_offset(16384 + 128), Some(16384));
    assert_eq!(v090::super_offset(128), Some(0));
    assert_eq!(v090::super_offset(127), None);
    assert_eq!(v090::super_offset(0), None);
}

#[test]
fn roundtrip_layout_and_checksum() {
    let sb = sample();
    let b = sb.encode();
    assert_eq!(b.len(), 4096);
    let w = |i: usize| u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(w(0), 0xa92b_4efc);
    assert_eq!(w(2), 90);
    assert_eq!(
        (w(5), w(13), w(14), w(15)),
        (0xdddd_dddd, 0xeeee_eeee, 0xffff_ffff, 0x0123_4567)
    );
    assert_eq!(
        (w(8), w(33), w(39), w(40), w(64), w(65)),
        (8128, 1, 1, 0, 2, 65536)
    );
    assert_eq!(
        (
            w(128 + 32),
            w(128 + 33),
            w(128 + 34),
            w(128 + 35),
            w(128 + 36)
        ),
        (1, 254, 144, 1, 6)
    );
    assert_eq!(w(992 + 2), 128);
    // The checksum: plain 64-bit sum of all words except 38, folded once.
    let mut sum: u64 = (0..1024)
        .filter(|&i| i != 38)
        .map(|i| u64::from(w(i)))
        .sum();
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    assert_eq!(w(38), sum as u32);
    assert_eq!(SuperblockV090::checksum(&b).unwrap(), w(38));
    assert_eq!(SuperblockV090::parse(&b).unwrap(), sb);
}

#[test]
fn errors_exact() {
    let b = sample().encode();
    assert_eq!(
        SuperblockV090::parse(&b[..4095]),
        Err(FormatError::TooShort {
            need: 4096,
            have: 4095
        })
    );
    let mut x = b.clone();
    x[0..4].copy_from_slice(&[0xa9, 0x2b, 0x4e, 0xfc]);
    assert_eq!(SuperblockV090::parse(&x), Err(FormatError::ForeignEndian));
    x[0] = 0;
    assert_eq!(
        SuperblockV090::parse(&x),
        Err(FormatError::BadMagic { found: 0xfc4e_2b00 })
    );
    let mut x = b.clone();
    x[8] = 91;
    assert!(matches!(
        SuperblockV090::parse(&x),
        Err(FormatError::BadChecksum { .. })
    ));
    let (sb, ok) = SuperblockV090::parse_lenient(&x).unwrap();
    assert_eq!((sb.minor_version, ok), (91, false));
    x[8] = 92;
    assert_eq!(
        SuperblockV090::parse_lenient(&x),
        Err(FormatError::BadVersion(
            "0.92 (expected 0.90 or 0.91)".into()
        ))
    );
    let mut x = b.clone();
    x[4] = 1;
    assert_eq!(
        SuperblockV090::parse(&x),
        Err(FormatError::BadVersion(
            "1.90 (expected 0.90 or 0.91)".into()
        ))
    );
    let mut x = b.clone();
    x[4000] = 7; // reserved word of this_disk: still checksummed
    let stored = u32::from_le_bytes(b[152..156].try_into().unwrap());
    assert_eq!(
        SuperblockV090::parse(&x),
        Err(FormatError::BadChecksum {
            stored,
            computed: stored + 7
        })
    );
}

/// The kernel compares only the 16-bit folds of the stored and computed checksums, so a
/// stored value that differs in 32 bits but not in its fold is accepted (the kernel
/// assembles it); one that differs in its fold is refused.
#[test]
fn checksum_equal_in_its_16_bit_fold_is_accepted() {
    let b = sample().encode();
    let computed = u32::from_le_bytes(b[152..156].try_into().unwrap());
    // x and x ± 0xffff have the same ones'-complement 16-bit fold.
    let same_fold = if computed >= 0x1_0000 {
        computed - 0xffff
    } else {
        computed + 0xffff
    };
    let mut x = b.clone();
    x[152..156].copy_from_slice(&same_fold.to_le_bytes());
    let sb = SuperblockV090::parse(&x).unwrap();
    assert_eq!(sb.encode(), b, "re-encoded with the full 32-bit checksum");
    let (_, ok) = SuperblockV090::parse_lenient(&x).unwrap();
    assert!(ok);
    let other_fold = same_fold ^ 0x1;
    x[152..156].copy_from_slice(&other_fold.to_le_bytes());
    assert_eq!(
        SuperblockV090::parse(&x),
        Err(FormatError::BadChecksum {
            stored: other_fold,
            computed
        })
    );
}

#[test]
fn uuid_views() {
    let mut sb = sample();
    assert_eq!(
        raidkit_format::uuid::format(&sb.uuid()),
        "dddddddd:eeeeeeee:ffffffff:67452301"
    );
    assert_eq!(
        raidkit_format::uuid::format(&sb.uuid_mdadm()),
        "dddddddd:eeeeeeee:ffffffff:01234567"
    );
    let raw = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
    sb.set_uuid(raw);
    assert_eq!(
        sb.uuid_words,
        [0x0403_0201, 0x0807_0605, 0x0c0b_0a09, 0x100f_0e0d]
    );
    assert_eq!(sb.uuid(), raw);
    sb.set_uuid_mdadm(raw);
    assert_eq!(
        sb.uuid_words,
        [0x0102_0304, 0x0506_0708, 0x090a_0b0c, 0x0d0e_0f10]
    );
    assert_eq!(sb.uuid_mdadm(), raw);
}

#[test]
fn resync_offset_rule() {
    let mut sb = sample();
    assert_eq!(sb.resync_offset(), MAX_SECTOR);
    sb.state = 0;
    sb.recovery_cp = 2304;
    assert_eq!(sb.resync_offset(), 2304);
    sb.cp_events = 0;
    assert_eq!(sb.resync_offset(), 0);
}

#[test]
fn write_mostly_bit_round_trips() {
    let mut s = sample();
    s.disks[1].state |= disk_state::WRITEMOSTLY;
    s.this_disk = s.disks[1];
    let b = s.encode();
    // disks[1].state is word 128 + 32 + 4; this_disk.state word 992 + 4: bit 9 in both.
    let word = |w: usize| u32::from_le_bytes(b[w * 4..w * 4 + 4].try_into().unwrap());
    assert_eq!(word(164), 0x206);
    assert_eq!(word(996), 0x206);
    assert_eq!(word(132), 0x006);
    let back = SuperblockV090::parse(&b).unwrap();
    assert_eq!(back.disks[1].state & disk_state::WRITEMOSTLY, 1 << 9);
    assert_eq!(back.disks[0].state & disk_state::WRITEMOSTLY, 0);
    assert_eq!(back, s);
}

/// md's counts (read back with `mdadm -E` from kernel 6.1): a 3-member RAID5 with a spare
/// (4 3 4 0 1), one member failed (4 2 3 1 1) and removed (3 2 3 1 1), re-added and being caught up, which md
/// writes as a spare (4 2 4 1 2).
#[test]
fn counts_as_md_writes_them() {
    let mut sb = sample();
    sb.raid_disks = 3;
    let c = |s: &SuperblockV090| {
        [
            s.nr_disks,
            s.active_disks,
            s.working_disks,
            s.failed_disks,
            s.spare_disks,
        ]
    };
    sb.set_counts(3, 1, 0);
    assert_eq!(c(&sb), [4, 3, 4, 0, 1]);
    sb.set_counts(2, 1, 1);
    assert_eq!(c(&sb), [4, 2, 3, 1, 1]);
    sb.set_counts(2, 1, 0);
    assert_eq!(c(&sb), [3, 2, 3, 1, 1]);
    sb.set_counts(2, 2, 0);
    assert_eq!(c(&sb), [4, 2, 4, 1, 2]);
    sb.set_counts(0, 0, 0);
    assert_eq!(c(&sb), [0, 0, 0, 3, 0]);
}
