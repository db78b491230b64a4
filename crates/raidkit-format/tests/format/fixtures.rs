//! Every member of every kernel-made fixture (`tests/fixtures/kernel/*`, made by mdadm 4.2
//! on Linux 6.1) passes every validation: the checks refuse hostile metadata, never what
//! md writes.

use raidkit_format::bitmap::BitmapSuper;
use raidkit_format::v090::{self, SuperblockV090};
use raidkit_format::v1::{Minor, SuperblockV1};
use raidkit_format::validate::MemberAreas;
use raidkit_testkit::fixtures::{self, Fixture};
use raidkit_testkit::tempdir::TempDir;

/// The decompressed member images of a fixture, or None (with a note) without xz/zstd.
pub fn images(f: &Fixture) -> Option<Vec<Vec<u8>>> {
    let dir = TempDir::new(&format!("rk-format-{}", f.name())).unwrap();
    match f.decompress(dir.path()) {
        Ok(paths) => Some(paths.iter().map(|p| std::fs::read(p).unwrap()).collect()),
        Err(e) if e.to_string().contains("cannot run") => {
            eprintln!(
                "skipping {}: {e} (scripts/deps.sh installs xz and zstd)",
                f.name()
            );
            None
        }
        Err(e) => panic!("{}: {e}", f.name()),
    }
}

/// One member's superblock, validated and placed; with its bitmap checked if it has one.
#[allow(clippy::large_enum_variant)] // a handful per test
pub enum Member {
    /// 1.x.
    V1(SuperblockV1, MemberAreas),
    /// 0.90.
    V090(SuperblockV090, MemberAreas),
}

/// Parse the member's superblock of `metadata` (`1.0`/`1.1`/`1.2`/`0.90`) and run every
/// check on it; panics with the fixture name on any error.
pub fn check_member(name: &str, metadata: &str, img: &[u8]) -> Member {
    let dev = img.len() as u64 / 512;
    let (bitmap_need, member) = if metadata == "0.90" {
        let at = v090::super_offset(dev).unwrap() as usize * 512;
        let sb = SuperblockV090::parse(&img[at..at + 4096]).unwrap();
        sb.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = sb.areas(dev).unwrap_or_else(|e| panic!("{name}: {e}"));
        (sb.bitmap_sync_size(), Member::V090(sb, a))
    } else {
        let minor = match metadata {
            "1.0" => Minor::V0,
            "1.1" => Minor::V1,
            _ => Minor::V2,
        };
        let at = minor.super_offset(dev) as usize * 512;
        let sb = SuperblockV1::parse(&img[at..at + 4096]).unwrap();
        sb.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = sb.areas(dev).unwrap_or_else(|e| panic!("{name}: {e}"));
        (sb.bitmap_sync_size(), Member::V1(sb, a))
    };
    let a = match &member {
        Member::V1(_, a) | Member::V090(_, a) => a,
    };
    if let Some(b) = a.bitmap_start {
        let at = b as usize * 512;
        let bsb = BitmapSuper::parse(&img[at..at + 256]).unwrap();
        let need = bitmap_need.unwrap_or_else(|| panic!("{name}: bitmap on a level without one"));
        let e = a
            .check_bitmap(&bsb, need)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(e.end <= a.bitmap_room_end, "{name}");
    }
    member
}

#[test]
fn every_kernel_fixture_member_passes_validation() {
    let list = fixtures::list().expect("reading tests/fixtures/kernel");
    assert!(list.len() >= 40, "expected the committed kernel fixtures");
    let mut bitmaps = 0;
    for f in &list {
        let Some(imgs) = images(f) else { return };
        for (i, img) in imgs.iter().enumerate() {
            let name = format!("{} member {i}", f.name());
            let (Member::V1(_, a) | Member::V090(_, a)) =
                check_member(&name, &f.manifest.metadata, img);
            bitmaps += usize::from(a.bitmap_start.is_some());
        }
    }
    assert!(
        bitmaps >= 8,
        "the bitmap fixtures were checked ({bitmaps} members)"
    );
}
