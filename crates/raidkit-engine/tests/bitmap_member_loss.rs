//! A member lost at the moment a write sets a new bitmap bit (its bitmap write fails: a
//! network member whose server just died) is failed, and the write goes on degraded on
//! the members that stay — with its bit set on them, so that the member's return (a
//! bitmap-guided catch-up) copies that range. The bit used to be left clear.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::dev::{BlockDev, FileDev};
use raidkit_engine::sb::probe;
use raidkit_format::bitmap::{self, BitmapSuper, BITMAP_SB_BYTES};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};

/// The set bits of the bitmap on member file `p`.
fn dirty_bits(p: &Path) -> Vec<u64> {
    let d = FileDev::open(p, false).unwrap();
    let (sb, _) = probe(&d).unwrap().found.into_iter().next().unwrap();
    let loc = sb.bitmap_sector(d.size_bytes() / 512).unwrap();
    let mut head = vec![0u8; BITMAP_SB_BYTES];
    d.read_at(&mut head, loc * 512).unwrap();
    let bm = BitmapSuper::parse(&head).unwrap();
    let mut bits = vec![0u8; bm.chunks().div_ceil(8) as usize];
    d.read_at(&mut bits, loc * 512 + BITMAP_SB_BYTES as u64)
        .unwrap();
    (0..bm.chunks())
        .filter(|&i| bitmap::bit_is_set(&bits, i))
        .collect()
}

#[test]
fn a_bit_whose_write_fails_on_a_lost_member_is_set_on_the_members_that_stay() {
    let t = TempDir::new("rk-bmloss").unwrap();
    let ps = member_files(t.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(16 << 20);
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(1 << 20);
    o.assume_clean = true;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    assert_eq!(dirty_bits(&ps[0]), Vec::<u64>::new());
    // Member 1's flushes fail from the second on: the superblocks' flush at the first
    // write succeeds (the array is active), the flush of the first new bitmap bit fails.
    let specs = vec![
        ps[0].clone(),
        PathBuf::from(format!("fault:feio@2:{}", ps[1].display())),
    ];
    let arr = assemble_paths(
        &specs,
        &AssembleOptions {
            writable: true,
            ..Default::default()
        },
    )
    .unwrap();
    // 4 KiB at 5 MiB: bitmap chunk 5.
    arr.write(5 << 20, &[7; 4096]).unwrap();
    arr.flush().unwrap();
    assert_eq!(arr.missing_roles(), vec![1]);
    // A later write's new bit writes the bitmap as the array holds it.
    arr.write(9 << 20, &[8; 4096]).unwrap();
    arr.flush().unwrap();
    arr.stop().unwrap();
    assert_eq!(
        dirty_bits(&ps[0]),
        vec![5, 9],
        "the ranges written degraded are dirty"
    );
}
