//! Reading and rewriting a member file's 1.x superblock in place, for tests that give an
//! array the metadata a crash, another tool or an attacker would leave.

use raidkit_format::v1::SuperblockV1;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The 1.x superblock at `sector` of `file` (sector 8 for 1.2). Panics on failure.
pub fn read_v1_at(file: &Path, sector: u64) -> SuperblockV1 {
    let fd = std::fs::File::open(file).unwrap();
    let mut buf = vec![0u8; 4096];
    fd.read_exact_at(&mut buf, sector * 512).unwrap();
    SuperblockV1::parse(&buf).unwrap()
}

/// Rewrite the 1.x superblock at `sector` of `file` through `f`, checksum fixed; returns
/// it as it was. Panics on failure.
pub fn patch_v1_at(file: &Path, sector: u64, f: impl FnOnce(&mut SuperblockV1)) -> SuperblockV1 {
    let mut sb = read_v1_at(file, sector);
    let was = sb.clone();
    f(&mut sb);
    let len = sb.write_len();
    let fd = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    fd.write_all_at(&sb.encode()[..len], sector * 512).unwrap();
    was
}

/// [`read_v1_at`] of a 1.2 superblock (sector 8).
pub fn read_v1(file: &Path) -> SuperblockV1 {
    read_v1_at(file, 8)
}

/// [`patch_v1_at`] of a 1.2 superblock (sector 8).
pub fn patch_v1(file: &Path, f: impl FnOnce(&mut SuperblockV1)) -> SuperblockV1 {
    patch_v1_at(file, 8, f)
}
