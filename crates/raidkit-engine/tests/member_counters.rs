//! The member and array IO counters (kept per CPU, summed when read) count every IO
//! exactly while several threads write at once, and every counted member IO has its
//! service time in the latency histograms.

use raidkit_engine::create::create;
use raidkit_engine::Array;
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::sync::Arc;

const CHUNK: u64 = 64 << 10;
const PAGE: u64 = 4096;
const THREADS: u64 = 4;
const WRITES_PER_THREAD: u64 = 400;

fn array(dir: &TempDir, level: Level, n: usize) -> Arc<Array> {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    if level != Level::Raid1 {
        o.chunk_bytes = Some(CHUNK);
    }
    o.create_size = Some(4 << 20);
    o.assume_clean = true;
    Arc::new(create(&o, &mut |_, _| {}).expect("create"))
}

/// `THREADS` writers, each `WRITES_PER_THREAD` 4 KiB writes, thread `t` on pages
/// `t, t + THREADS, …` (never the same page twice at once). Then as many 4 KiB reads of
/// page 0 by as many threads.
fn run_mix(arr: &Arc<Array>) {
    let pages = arr.size_bytes() / PAGE;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let arr = Arc::clone(arr);
            s.spawn(move || {
                let buf = vec![t as u8 + 1; PAGE as usize];
                for i in 0..WRITES_PER_THREAD {
                    let page = (t + i * THREADS * 7) % pages;
                    let page = page - page % THREADS + t;
                    arr.write(page * PAGE, &buf).expect("write");
                }
            });
        }
    });
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let arr = Arc::clone(arr);
            s.spawn(move || {
                let mut buf = vec![0u8; PAGE as usize];
                for _ in 0..WRITES_PER_THREAD {
                    arr.read(0, &mut buf).expect("read");
                }
            });
        }
    });
}

/// A 4 KiB write to a RAID1 of 2 writes 2 member pages, to a RAID0 or a RAID10 (n2) of 4
/// one or 2; a 4 KiB read reads one member page (levels without a stripe cache, so every
/// IO goes to the members at once: exact sums). Exact sums after concurrent writers
/// and readers.
#[test]
fn counters_are_exact_after_concurrent_writers_and_readers() {
    for (level, n, per_write) in [
        (Level::Raid1, 2, 2),
        (Level::Raid0, 4, 1),
        (Level::Raid10, 4, 2),
    ] {
        let dir = TempDir::new("rk-ctr").unwrap();
        let arr = array(&dir, level, n);
        let before = arr.member_stats();
        let io_before = arr.io.snapshot();
        run_mix(&arr);
        let writes = THREADS * WRITES_PER_THREAD;
        let reads = THREADS * WRITES_PER_THREAD;
        let st = arr.member_stats();
        let d = |f: fn(&raidkit_engine::array::MemberIo) -> u64| -> u64 {
            st.iter().map(f).sum::<u64>() - before.iter().map(f).sum::<u64>()
        };
        let what = format!("{level:?} of {n}");
        assert_eq!(d(|m| m.writes), per_write * writes, "{what}: member writes");
        assert_eq!(
            d(|m| m.write_bytes),
            per_write * writes * PAGE,
            "{what}: member bytes written"
        );
        assert_eq!(d(|m| m.reads), reads, "{what}: member reads");
        assert_eq!(
            d(|m| m.read_bytes),
            reads * PAGE,
            "{what}: member bytes read"
        );
        // Every counted member IO has its service time: histograms hold as many.
        for (m, b) in st.iter().zip(&before) {
            let h = |v: &[u64]| v.iter().sum::<u64>();
            assert_eq!(
                h(&m.read_lat_hist_us) - h(&b.read_lat_hist_us),
                m.reads - b.reads,
                "{what}: role {} read latencies",
                m.role
            );
            assert_eq!(
                h(&m.write_lat_hist_us) - h(&b.write_lat_hist_us),
                m.writes - b.writes,
                "{what}: role {} write latencies",
                m.role
            );
            if m.writes > b.writes {
                assert!(m.write_lat_sum_ns > b.write_lat_sum_ns, "{what}");
            }
        }
        // The array's own counters: as many requests as clients made.
        let io = arr.io.snapshot();
        assert_eq!(io.write.count - io_before.write.count, writes, "{what}");
        assert_eq!(io.write.bytes - io_before.write.bytes, writes * PAGE);
        assert_eq!(io.read.count - io_before.read.count, reads, "{what}");
        assert_eq!(io.read.bytes - io_before.read.bytes, reads * PAGE);
        assert_eq!(
            io.write.size_hist[3] - io_before.write.size_hist[3],
            writes,
            "{what}: 4 KiB bucket"
        );
        let lat: u64 = io.write.lat_hist_us.iter().sum::<u64>()
            - io_before.write.lat_hist_us.iter().sum::<u64>();
        assert_eq!(lat, writes, "{what}: write latencies");
        Arc::into_inner(arr)
            .expect("one owner")
            .stop()
            .expect("stop");
    }
}
