//! A mirrored rebuild between files in memory copies in the kernel (`splice`: no buffer
//! of the engine's, one copy of the data instead of two), and the rebuilt member holds
//! exactly the source's bytes; the members' counters see the copy as a read of the
//! source and a write of the target. Members elsewhere (not tmpfs) copy through a buffer
//! as before (`tests/recovery.rs`).

use raidkit_engine::assemble_paths;
use raidkit_engine::create::create;
use raidkit_engine::dev::io::kernel_copied_bytes;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::{AssembleOptions, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::sync::Arc;

#[test]
fn a_raid1_rebuild_between_files_in_memory_copies_in_the_kernel_byte_exact() {
    let Some(dir) = TempDir::in_memory("rk-rik") else {
        return;
    };
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(7 << 20);
    o.assume_clean = true;
    o.name = "rik".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes();
    let model: Vec<u8> = (0..size)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect();
    arr.write(0, &model).expect("fill");
    arr.stop().expect("stop");
    // Member 1 lost; a blank spare of the same size takes its place.
    let rw = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = assemble_paths(&ps[..1], &rw).expect("assemble degraded");
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .and_then(|f| f.set_len(std::fs::metadata(&ps[1])?.len()))
        .expect("spare");
    arr.add_spare(Arc::new(FileDev::open(&spare, true).expect("open")), false)
        .expect("add");
    let before = kernel_copied_bytes();
    let rep = rebuild(&arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    assert_eq!((rep.roles.clone(), rep.lost.clone()), (vec![1], vec![]));
    assert!(
        kernel_copied_bytes() - before >= size,
        "copied in the kernel: {} of {size} bytes",
        kernel_copied_bytes() - before
    );
    // Counted as member IO: the source read and the target written, every byte.
    let stats = arr.member_stats();
    let of = |r: usize| stats.iter().find(|s| s.role == r).expect("role");
    assert!(of(0).read_bytes >= size, "{:?}", of(0));
    assert!(of(1).write_bytes >= size, "{:?}", of(1));
    assert!(!arr.is_degraded());
    assert_consistent(&arr, "after the rebuild");
    arr.stop().expect("stop");
    // The rebuilt member alone holds the array's bytes.
    let ro = AssembleOptions {
        writable: false,
        ..Default::default()
    };
    let alone = assemble_paths(&[spare], &ro).expect("assemble the spare alone");
    let mut got = vec![0u8; size as usize];
    alone.read(0, &mut got).expect("read");
    assert!(got == model, "the rebuilt member's bytes");
}
