//! The stripe cache's automatic decisions under a uniformly random 4 KiB write load over
//! a region many times its size: it does not grow on the ghost hits such a load makes
//! (they are in proportion to the ghosts' share of the region), so the decision to let
//! small writes bypass it does not depend on how the first milliseconds went.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::{Array, BlockDev, MemDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::tempdir::TempDir;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAGE: u64 = 4096;

/// xorshift64*: a page index below `n`.
fn next(s: &mut u64, n: u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
}

/// Random 4 KiB writes over `region` bytes from 4 threads, every write through the cache
/// (no bypass: the most the cache can see of such a load) for `run`.
fn random_writes(arr: &Arc<Array>, region: u64, run: Duration) -> u64 {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let arr = Arc::clone(arr);
                s.spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
                    let buf = vec![t as u8; PAGE as usize];
                    let mut n = 0;
                    while t0.elapsed() < run {
                        let page = next(&mut seed, region / PAGE);
                        arr.write(page * PAGE, &buf).expect("write");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("writer")).sum()
    })
}

/// RAID5 over 4 (512 KiB chunks: 128 page rows a stripe), a 512-entry cache (the
/// automatic start), random 4 KiB writes over a region of 16 × 512 page rows: the cache
/// stays at its starting size. It used to keep 128 ghost rows per shard on top of the
/// capacity (8,704 ghost rows, more than this region) and grow at ghost hits of 1/6 of the
/// rows read, so such a load grew it (to the whole region, given time) in some runs and
/// not in others; the engine's 4 KiB random-write benchmark flipped between paths.
#[test]
fn scattered_random_writes_over_a_large_region_do_not_grow_the_cache() {
    // Created on (sparse) files, then run on in-memory copies: a random load leaves
    // files that a loaded disk takes many seconds to delete.
    let dir = TempDir::new("rk-cdec").unwrap();
    let ps = member_files(dir.path(), 4);
    let mut o = create_options(Level::Raid5, &ps);
    o.chunk_bytes = Some(512 << 10);
    o.create_size = Some(36 << 20);
    o.assume_clean = true;
    create(&o, &mut |_, _| {})
        .expect("create")
        .stop()
        .expect("stop");
    let devs: Vec<Arc<dyn BlockDev>> = ps
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).expect("member file");
            let m = MemDev::new(&p.display().to_string(), bytes.len() as u64);
            m.write_at(&bytes, 0).expect("copy");
            Arc::new(m) as Arc<dyn BlockDev>
        })
        .collect();
    let opts = AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(devs, &opts).expect("assemble"));
    arr.force_stripe_cache_bypass(Some(false));
    let start = arr.stripe_cache_stats().expect("a cache");
    assert_eq!((start.mode.as_str(), start.size_entries), ("auto", 512));
    // 16 × 512 page rows of 3 data pages.
    let region = 16 * 512 * 3 * PAGE;
    assert!(region <= arr.size_bytes());
    let writes = random_writes(&arr, region, Duration::from_millis(1500));
    let st = arr.stripe_cache_stats().expect("a cache");
    // Enough writes to fill the ghosts many times over, over many tune periods.
    assert!(writes >= 4000, "only {writes} writes");
    assert_eq!(st.size_entries, 512, "grew: {st:?} after {writes} writes");
}
