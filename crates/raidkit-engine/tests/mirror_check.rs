//! A mirrored check reads each copy 256 KiB at a time (the pieces of its 1 MiB steps,
//! each compared as soon as it is read) and finds exactly the pages that differ, at the
//! edges of its steps, of their pieces and of the array; copies that agree are compared
//! whole, and one page that differs inside a step's later piece is still found on its own.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::sync::{self, SyncMode};
use raidkit_engine::{BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, data_offset_bytes, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::sync::{Arc, Mutex};

const PAGE: u64 = 4096;
const STEP: u64 = 1 << 20;
const PIECE: u64 = 256 << 10;

/// A member that records the lengths and offsets of its reads.
#[derive(Default)]
struct Reads(Mutex<Vec<(u64, usize)>>);

impl Hooks for Reads {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.lock().unwrap().push((offset, buf.len()));
        inner.read_at(buf, offset)
    }
}

#[test]
fn a_raid1_check_reads_256_kib_pieces_per_copy_and_finds_exactly_the_differing_pages() {
    let dir = TempDir::new("rk-mirrorcheck").expect("temp dir");
    let ps = member_files(dir.path(), 2);
    let mut o = create_options(Level::Raid1, &ps);
    o.create_size = Some(9 << 20);
    o.assume_clean = true;
    o.name = "mc".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    let size = arr.size_bytes() / PAGE * PAGE;
    let fill: Vec<u8> = (0..size).map(|i| (i / PAGE) as u8 ^ (i as u8)).collect();
    arr.write(0, &fill).expect("fill");
    arr.stop().expect("stop");
    let doff = data_offset_bytes(&ps[1]);
    // Array pages made to differ on member 1: the last of the first step, the first of
    // the next, one inside the third step, one inside the last piece of the fourth (its
    // first three pieces agree), and the array's last.
    let planted = [
        STEP - PAGE,
        STEP,
        2 * STEP + 5 * PAGE,
        3 * STEP + 3 * PIECE + 9 * PAGE,
        size - PAGE,
    ];
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&ps[1])
            .expect("open member 1");
        for &off in &planted {
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, doff + off + 17).expect("read");
            b[0] ^= 0x81;
            f.write_all_at(&b, doff + off + 17).expect("write");
        }
    }
    let recs: Vec<Arc<Hooked<Reads>>> = ps
        .iter()
        .map(|p| {
            Arc::new(Hooked::new(
                FileDev::open(p, true).expect("open"),
                Reads::default(),
            ))
        })
        .collect();
    let opts = AssembleOptions {
        writable: false,
        ..Default::default()
    };
    let arr = assemble(members(&recs), &opts).expect("assemble");
    for r in &recs {
        r.0.lock().unwrap().clear();
    }
    let rep = sync::run(&arr, SyncMode::Check, true, &mut |_, _| {}).expect("check");
    let want = vec![
        (STEP - PAGE, 2 * PAGE),
        (2 * STEP + 5 * PAGE, PAGE),
        (3 * STEP + 3 * PIECE + 9 * PAGE, PAGE),
        (size - PAGE, PAGE),
    ];
    assert_eq!(rep.mismatches, want, "verdicts {:?}", rep.verdicts);
    for (m, r) in recs.iter().enumerate() {
        let reads = r.0.lock().unwrap().clone();
        let data: Vec<usize> = reads
            .iter()
            .filter(|&&(o, _)| o >= doff)
            .map(|&(_, l)| l)
            .collect();
        let short = data.iter().filter(|&&l| l as u64 != PIECE).count();
        assert!(
            data.len() as u64 == size.div_ceil(PIECE) && short <= 1,
            "member {m} read {} times for {size} bytes, {short} of them not 256 KiB: {:?}",
            data.len(),
            data
        );
    }
}
