//! Arrays for the engine's unit tests.

use crate::array::Array;
use crate::create::{create, CreateOptions, MemberSpec};
use raidkit_layout::Level;
use raidkit_testkit::tempdir::TempDir;

/// A RAID5 of `members` new member files of `member_bytes` each, in a new directory
/// named from `prefix`, created clean (no initial sync); `chunk_bytes` (None: the
/// default chunk). The directory goes when the returned `TempDir` is dropped.
pub(crate) fn raid5(
    prefix: &str,
    members: usize,
    member_bytes: u64,
    chunk_bytes: Option<u64>,
) -> (TempDir, Array) {
    let dir = TempDir::new(prefix).unwrap();
    let ps = (0..members)
        .map(|i| MemberSpec::Path(dir.path().join(format!("m{i}"))))
        .collect();
    let mut o = CreateOptions::new(Level::Raid5, ps);
    o.create_size = Some(member_bytes);
    o.chunk_bytes = chunk_bytes;
    o.assume_clean = true;
    let arr = create(&o, &mut |_, _| {}).unwrap();
    (dir, arr)
}
