//! A write queued behind (write-mostly member, write-behind) that fails fails the member
//! at once, with its event, while the client does nothing more — not at the next write,
//! flush or clean mark; and the region it covered stays dirty in the bitmap.

use raidkit_engine::array::ArrayEvent;
use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_failed_write_behind_fails_the_member_at_once_with_its_event() {
    let dir = TempDir::new("rk-wbfail").unwrap();
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(8 << 20);
    o.assume_clean = true;
    o.bitmap = true;
    o.bitmap_chunk_bytes = Some(128 << 10);
    o.write_mostly = vec![1];
    o.write_behind = 16;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    // Role 1 (write-mostly) fails writes from device byte 4 MiB on: past its metadata.
    let specs = vec![
        ps[0].clone(),
        PathBuf::from(format!("fault:weio@8192-20000:{}", ps[1].display())),
    ];
    let opts = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble_paths(&specs, &opts).unwrap());
    arr.watch_write_behind();
    let events = arr.subscribe();
    arr.write(6 << 20, &[3u8; 65536]).unwrap();
    // Nothing else is asked of the array: the failure must come from the queue itself.
    let failed = loop {
        match events.recv_timeout(Duration::from_secs(20)) {
            Ok(ArrayEvent::MemberFailed { role, reason, .. }) => break (role, reason),
            Ok(_) => continue,
            Err(e) => panic!("no member_failed event for the failed write behind: {e}"),
        }
    };
    assert_eq!(failed.0, 1, "{failed:?}");
    assert!(failed.1.contains("write-behind"), "{failed:?}");
    assert_eq!(arr.missing_roles(), vec![1]);
    assert_eq!(arr.write_behind_backlog(), 0);
    // The array goes on on role 0; the region stays dirty for the member's return.
    arr.write(6 << 20, &[4u8; 4096]).unwrap();
    arr.flush().unwrap();
    let mut b = vec![0u8; 4096];
    arr.read(6 << 20, &mut b).unwrap();
    assert_eq!(b, vec![4u8; 4096]);
}
