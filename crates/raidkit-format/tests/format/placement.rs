use raidkit_format::placement::{self, choose_bm_space, v1_data_offset, V1Layout};
use raidkit_format::v1::Minor;

const MIB: u64 = 2048;

#[test]
fn choose_bm_space_thresholds() {
    assert_eq!(choose_bm_space(0), 0);
    assert_eq!(choose_bm_space(127), 0);
    assert_eq!(choose_bm_space(128), 8);
    assert_eq!(choose_bm_space(16_777_216 + 8), 8);
    assert_eq!(choose_bm_space(16_777_216 + 9), 128);
    assert_eq!(choose_bm_space(419_430_400 + 127), 128);
    assert_eq!(choose_bm_space(419_430_400 + 128), 256);
}

#[test]
fn data_offset_verified_table() {
    let d = |dev: u64, chunk: u64| v1_data_offset(dev, chunk, choose_bm_space(dev));
    assert_eq!(d(8 * MIB, 64), 2048);
    assert_eq!(d(32 * MIB, 64), 2048);
    assert_eq!(d(64 * MIB, 0), 2048);
    assert_eq!(d(64 * MIB, 512), 4096);
    assert_eq!(d(20 * 1024 * MIB, 512), 34816);
    assert_eq!(d(1024 * 1024 * MIB, 0), 264_192);
    // PPL reserves 2048 sectors.
    assert_eq!(v1_data_offset(1024 * 1024 * MIB, 0, 2048), 266_240);
}

#[test]
fn bblog_placement() {
    assert_eq!(placement::v1_bblog_placement(8, 2048, 8), Some((16, 8)));
    assert_eq!(placement::v1_bblog_placement(0, 2048, 8), Some((16, 8)));
    assert_eq!(placement::v1_bblog_placement(8, 2048, 256), Some((264, 8)));
    // Bitmap space too big: log right below the data.
    assert_eq!(
        placement::v1_bblog_placement(8, 2048, 2040),
        Some((2032, 8))
    );
    assert_eq!(placement::v1_bblog_placement(8, 24, 8), Some((8, 8)));
    assert_eq!(placement::v1_bblog_placement(8, 23, 8), None);
}

#[test]
fn v1_0_layouts() {
    // Verified: 64 MiB member with a 1-bit bitmap.
    assert_eq!(
        placement::v1_0_layout(64 * MIB, 0, Some(8)),
        V1Layout {
            super_offset: 131_056,
            data_offset: 0,
            data_size: 131_040,
            bitmap_offset: Some(-16),
            bblog_offset: -8,
            bblog_size: 8
        }
    );
    // No bitmap: choose_bm_space(size) + 8.
    let l = placement::v1_0_layout(32 * MIB, 0, None);
    assert_eq!(
        (l.super_offset, l.data_size, l.bitmap_offset, l.bblog_offset),
        (65_520, 65_504, None, -8)
    );
    // Requested size squeezes the reserve.
    let l = placement::v1_0_layout(32 * MIB, 65_516, None);
    assert_eq!((l.data_size, l.bblog_offset, l.bblog_size), (65_516, 0, 0));
    let l = placement::v1_0_layout(32 * MIB, 65_512, None);
    assert_eq!((l.data_size, l.bblog_offset, l.bblog_size), (65_512, -8, 8));
    assert_eq!(placement::v1_0_layout(5, 0, None).data_size, 0);
}

#[test]
fn v1_head_layouts() {
    let l = placement::v1_layout(Minor::V2, 32 * MIB, 64, None);
    assert_eq!(
        l,
        V1Layout {
            super_offset: 8,
            data_offset: 2048,
            data_size: 63_488,
            bitmap_offset: None,
            bblog_offset: 16,
            bblog_size: 8
        }
    );
    let l = placement::v1_layout(Minor::V1, 32 * MIB, 0, Some(8));
    assert_eq!(
        (
            l.super_offset,
            l.data_offset,
            l.bitmap_offset,
            l.bblog_offset
        ),
        (0, 2048, Some(8), 16)
    );
    assert_eq!(
        placement::v1_layout(Minor::V0, 64 * MIB, 0, Some(8)),
        placement::v1_0_layout(64 * MIB, 0, Some(8))
    );
}

#[test]
fn component_sizes() {
    assert_eq!(placement::component_size(131_040, 1, 0), 130_944);
    assert_eq!(placement::component_size(63_488, 5, 64), 63_488);
    assert_eq!(placement::component_size(63_500, 5, 64), 63_488);
    assert_eq!(placement::component_size(63_500, 0, 512), 63_488);
    assert_eq!(placement::component_size(63_500, -1, 0), 63_500);
    assert_eq!(placement::v090_size_kib(16384, 64), Some(8128));
    assert_eq!(placement::v090_size_kib(16384 + 100, 0), Some(8128));
    assert_eq!(placement::v090_size_kib(100, 64), None);
}
