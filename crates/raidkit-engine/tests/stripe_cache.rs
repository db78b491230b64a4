//! The RAID4/5/6 stripe cache: random partial/full writes and reads against a model with
//! write-back on (clean, degraded, a member with unreadable sectors), flush semantics
//! (the member files alone hold the data, parity consistent), merging of adjacent partial
//! writes into full-stripe writes, the memory bound, and automatic sizing.

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::Array;
use raidkit_layout::{Level, StripeLayout};
use raidkit_testkit::arrays::{assert_consistent, create_options, member_files};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Rng(u64, u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.1 += 1;
        pattern_word(self.0, self.1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

/// Create an array of `n` members (`chunk_k` KiB chunks, `mib` MiB each), stopped.
fn make(dir: &TempDir, level: Level, n: usize, chunk_k: u64, mib: u64) -> Vec<PathBuf> {
    let ps = member_files(dir.path(), n);
    let mut o = create_options(level, &ps);
    o.chunk_bytes = Some(chunk_k * 1024);
    o.create_size = Some(mib << 20);
    o.name = "sc".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    arr.stop().unwrap();
    ps
}

fn open(ps: &[PathBuf]) -> Arc<Array> {
    let a = Arc::new(assemble_paths(ps, &rw()).unwrap());
    a.start_writeback();
    a
}

/// Everything the array returns, read through a fresh assembly of the member files.
fn reassembled_contents(ps: &[PathBuf]) -> (Vec<u8>, Array) {
    let a = assemble_paths(ps, &rw()).unwrap();
    let mut out = vec![0u8; a.size_bytes() as usize];
    a.read(0, &mut out).unwrap();
    (out, a)
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Random writes (partial, unaligned, full-stripe, multi-stripe) and reads, checked against
/// the model as they go, with a small cache so eviction and early write-out happen.
fn exercise(arr: &Array, model: &mut [u8], seed: u64, rounds: usize) {
    let g = arr.geometry();
    let stripe = (g.chunk_sectors * 512) as usize * g.data_disks();
    let size = model.len();
    let mut rng = Rng(seed, 0);
    for round in 0..rounds {
        let len = match round % 6 {
            0 => 1 + rng.below(6000) as usize,
            1 => 4096 * (1 + rng.below(8) as usize),
            2 => stripe * (1 + rng.below(2) as usize),
            3 => stripe / 3 + 4096,
            4 => 512 * (1 + rng.below(300) as usize),
            _ => 1 + rng.below(200_000) as usize,
        }
        .min(size);
        let off = match round % 3 {
            0 => (rng.below((size - len) as u64 / 4096) * 4096) as usize,
            1 => (rng.below((size - len) as u64 / 512) * 512) as usize,
            _ => rng.below((size - len + 1) as u64) as usize,
        };
        if round % 4 == 3 {
            let mut out = vec![0u8; len];
            arr.read(off as u64, &mut out).unwrap();
            assert!(
                out == model[off..off + len],
                "round {round}: read {off}+{len} differs at {:?}",
                first_diff(&out, &model[off..off + len])
            );
        } else {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            arr.write(off as u64, &data).unwrap();
            model[off..off + len].copy_from_slice(&data);
        }
        if round % 50 == 49 {
            arr.flush().unwrap();
        }
    }
}

fn check_clean(ps: &[PathBuf]) -> Array {
    let (out, a) = reassembled_contents(ps);
    assert_consistent(&a, "parity after flush");
    drop(out);
    a
}

#[test]
fn model_every_parity_level_clean_and_degraded() {
    for (level, n, fail) in [
        (Level::Raid4, 4, vec![]),
        (Level::Raid5, 4, vec![]),
        (Level::Raid6, 5, vec![]),
        (Level::Raid5, 4, vec![1]),
        (Level::Raid6, 5, vec![0, 3]),
        (Level::Raid4, 4, vec![3]),
    ] {
        let dir = TempDir::new("rk-sc").unwrap();
        let ps = make(&dir, level, n, 16, 2);
        let arr = open(&ps);
        // 96 entries: a few stripes of 16 KiB chunks, so eviction and forced write-out run.
        arr.configure_stripe_cache(None, Some(96)).unwrap();
        for &r in &fail {
            arr.fail_member(r, "test").unwrap();
        }
        let mut model = vec![0u8; arr.size_bytes() as usize];
        arr.read(0, &mut model).unwrap();
        exercise(&arr, &mut model, 7 + n as u64 + fail.len() as u64, 400);
        arr.flush().unwrap();
        let st = arr.stripe_cache_stats().unwrap();
        assert_eq!(
            st.dirty_stripes, 0,
            "{level} {fail:?}: flush left held data"
        );
        assert!(st.used_entries <= 96, "{st:?}");
        // Degraded arrays must be clean to be assembled again.
        arr.mark_clean().unwrap();
        // The member files alone (a new assembly, cache cold) hold the data.
        let live: Vec<PathBuf> = (0..n)
            .filter(|r| !fail.contains(r))
            .map(|r| ps[r].clone())
            .collect();
        let (out, a) = reassembled_contents(&live);
        assert!(
            out == model,
            "{level} {fail:?}: differs at {:?}",
            first_diff(&out, &model)
        );
        if fail.is_empty() {
            assert_consistent(&a, &format!("{level}: parity"));
        }
        drop(a);
        drop(arr);
    }
}

#[test]
fn unreadable_member_sectors_are_reconstructed_not_masked() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let dir = TempDir::new("rk-sc-fault").unwrap();
        let ps = make(&dir, level, n, 16, 2);
        // Member 1: reads of its data area's first 512 KiB fail (data offset 2048 sectors).
        let mut specs = ps.clone();
        specs[1] = PathBuf::from(format!("fault:reio@2048-3071:{}", ps[1].display()));
        let arr = open(&specs);
        arr.configure_stripe_cache(None, Some(64)).unwrap();
        let mut model = vec![0u8; arr.size_bytes() as usize];
        arr.read(0, &mut model).unwrap();
        exercise(&arr, &mut model, 99 + n as u64, 300);
        arr.flush().unwrap();
        // Member 1 may have been failed for too many read errors: leave it out then.
        let missing = arr.missing_roles();
        assert!(missing.iter().all(|&r| r == 1), "{missing:?}");
        arr.mark_clean().unwrap();
        drop(arr);
        let live: Vec<PathBuf> = (0..n)
            .filter(|r| !missing.contains(r))
            .map(|r| ps[r].clone())
            .collect();
        let (out, _a) = reassembled_contents(&live);
        assert!(
            out == model,
            "{level}: differs at {:?}",
            first_diff(&out, &model)
        );
    }
}

#[test]
fn flush_puts_held_writes_on_the_members() {
    let dir = TempDir::new("rk-sc-flush").unwrap();
    let ps = make(&dir, Level::Raid5, 4, 64, 4);
    let arr = open(&ps);
    // Partial stripes wait (up to a minute) for the rest of their stripe.
    arr.set_stripe_cache_hold(Duration::from_secs(60));
    let mut model = vec![0u8; arr.size_bytes() as usize];
    arr.read(0, &mut model).unwrap();
    let mut rng = Rng(5, 0);
    for i in 0..40u64 {
        // 8 KiB ending on a chunk boundary (how a stream looks): the stripe waits.
        let off = (i * 3 * 64 * 1024 + (1 + rng.below(3)) * 64 * 1024 - 8192) as usize;
        let data: Vec<u8> = (0..8192).map(|_| rng.next() as u8).collect();
        arr.write(off as u64, &data).unwrap();
        model[off..off + 8192].copy_from_slice(&data);
    }
    let held = arr.stripe_cache_stats().unwrap().dirty_stripes;
    assert_eq!(held, 40, "every partial stripe waits");
    // Reads see held data.
    let mut out = vec![0u8; model.len()];
    arr.read(0, &mut out).unwrap();
    assert!(
        out == model,
        "read differs at {:?}",
        first_diff(&out, &model)
    );
    arr.flush().unwrap();
    assert_eq!(arr.stripe_cache_stats().unwrap().dirty_stripes, 0);
    // While the array is still running, the member files hold everything.
    let a = check_clean(&ps);
    let mut out = vec![0u8; model.len()];
    a.read(0, &mut out).unwrap();
    assert!(
        out == model,
        "members differ at {:?}",
        first_diff(&out, &model)
    );
}

#[test]
fn adjacent_partial_writes_merge_into_full_stripe_writes() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 6)] {
        let dir = TempDir::new("rk-sc-merge").unwrap();
        let ps = make(&dir, level, n, 64, 4);
        let arr = open(&ps);
        arr.set_stripe_cache_hold(Duration::from_secs(60));
        let g = arr.geometry();
        let stripe = g.chunk_sectors * 512 * g.data_disks() as u64;
        // Writes that are not whole stripes (all but one chunk of a stripe), in order.
        let piece = g.chunk_sectors * 512 * (g.data_disks() as u64 - 1);
        let stripes = 12u64;
        let mut model = vec![0u8; (stripes * stripe) as usize];
        let mut rng = Rng(11, 0);
        let mut off = 0u64;
        while off < stripes * stripe {
            let data: Vec<u8> = (0..piece).map(|_| rng.next() as u8).collect();
            arr.write(off, &data).unwrap();
            model[off as usize..(off + piece) as usize].copy_from_slice(&data);
            off += piece;
        }
        arr.flush().unwrap();
        let st = arr.stripe_cache_stats().unwrap();
        assert_eq!(st.full_stripe_merges, stripes, "{level}: {st:?}");
        // Stripes written whole and sent out merged are not kept (a stream would only
        // spread over the cache's memory); nothing was rewritten, so nothing stays.
        assert_eq!(
            (st.used_entries, st.memory_bytes),
            (0, 0),
            "{level}: {st:?}"
        );
        let reads: u64 = arr.member_stats().iter().map(|m| m.reads).sum();
        assert_eq!(reads, 0, "{level}: merged stripes read nothing");
        // Data: 1 write per data block; parity: 1 write per stripe.
        let writes: u64 = arr.member_stats().iter().map(|m| m.writes).sum();
        let par = if level == Level::Raid6 { 2 } else { 1 };
        assert_eq!(writes, stripes * (g.data_disks() as u64 + par), "{level}");
        drop(arr);
        let (out, a) = reassembled_contents(&ps);
        assert!(out[..model.len()] == model[..]);
        assert_consistent(&a, "after the faulty member's writes");
    }
}

/// A stripe the cache filled from the members (a partial write written out by
/// reconstruct-write) stays cached after a later merged write-out: only stripes written
/// whole by clients are dropped once merged.
#[test]
fn stripes_filled_by_member_reads_stay_after_a_merge() {
    let dir = TempDir::new("rk-sc-keep").unwrap();
    let ps = make(&dir, Level::Raid5, 4, 64, 4);
    let arr = open(&ps);
    arr.set_stripe_cache_hold(Duration::from_secs(60));
    let g = arr.geometry();
    let chunk = g.chunk_sectors * 512;
    let rows = chunk / 4096;
    // One chunk of stripe 2: written out by reading the two other data chunks.
    let off = 2 * chunk * g.data_disks() as u64;
    arr.write(off, &vec![0x11u8; chunk as usize]).unwrap();
    arr.flush().unwrap();
    let reads: u64 = arr.member_stats().iter().map(|m| m.reads).sum();
    assert_eq!(reads, 2, "reconstruct-write reads the other two chunks");
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!(
        (st.used_entries, st.full_stripe_merges),
        (rows, 0),
        "{st:?}"
    );
    // The same chunk again: completed from the cache (no reads; the two other chunks'
    // pages are hits, and a write-out completed by cached data is not a merge of client
    // writes), and the stripe stays.
    arr.write(off, &vec![0x22u8; chunk as usize]).unwrap();
    arr.flush().unwrap();
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!(
        (st.used_entries, st.full_stripe_merges, st.hits),
        (rows, 0, 2 * rows),
        "{st:?}"
    );
    assert_eq!(
        st.memory_bytes,
        rows * 4096 * g.data_disks() as u64,
        "{st:?}"
    );
    let reads: u64 = arr.member_stats().iter().map(|m| m.reads).sum();
    assert_eq!(reads, 2, "the merge read nothing");
    drop(arr);
    let a = check_clean(&ps);
    let mut out = vec![0u8; chunk as usize];
    a.read(off, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x22));
}

#[test]
fn memory_bound_is_respected_and_checked() {
    let dir = TempDir::new("rk-sc-bound").unwrap();
    let ps = make(&dir, Level::Raid6, 6, 16, 4);
    let arr = open(&ps);
    arr.set_stripe_cache_hold(Duration::from_secs(60));
    // 4 data members: one entry = 16 KiB.
    let bound = 40 * 16 * 1024;
    assert_eq!(
        arr.configure_stripe_cache(Some(bound), Some(41))
            .unwrap_err()
            .to_string(),
        "a stripe cache of 41 entries needs 671744 bytes (16384 per entry), \
         more than the bound of 655360 bytes; lower the entries or raise the bound"
    );
    arr.configure_stripe_cache(Some(bound), None).unwrap();
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!((st.size_entries, st.max_bytes), (40, Some(bound)));
    let mut model = vec![0u8; arr.size_bytes() as usize];
    arr.read(0, &mut model).unwrap();
    let mut rng = Rng(3, 0);
    let mut peak = 0;
    for _ in 0..2000 {
        let off = rng.below(model.len() as u64 / 4096 - 1) * 4096;
        let data = vec![rng.next() as u8; 4096];
        arr.write(off, &data).unwrap();
        model[off as usize..off as usize + 4096].copy_from_slice(&data);
        let st = arr.stripe_cache_stats().unwrap();
        peak = peak.max(st.memory_bytes);
        assert!(st.size_entries <= 40, "{st:?}");
    }
    assert!(peak <= bound, "peak {peak} over the bound {bound}");
    assert!(peak > bound / 2, "the cache was used: peak {peak}");
    // Nor at any moment in between (a write's page used to be added before room was
    // made for it, and a write-out kept what it read whatever the room).
    let high = arr.stripe_cache_stats().unwrap().peak_memory_bytes;
    assert!(
        (peak..=bound).contains(&high),
        "high-water mark {high}: bound {bound}, seen {peak}"
    );
    arr.flush().unwrap();
    drop(arr);
    let (out, _a) = reassembled_contents(&ps);
    assert!(out == model, "differs at {:?}", first_diff(&out, &model));
}

/// A write needing more pages than the whole cache holds goes straight to the members,
/// after what the cache held of its stripe: the memory never exceeds the size.
#[test]
fn a_write_larger_than_the_cache_goes_around_it() {
    let dir = TempDir::new("rk-sc-around").unwrap();
    let ps = make(&dir, Level::Raid5, 4, 64, 4);
    let arr = open(&ps);
    arr.force_stripe_cache_bypass(Some(false));
    arr.set_stripe_cache_hold(Duration::from_secs(60));
    // One entry: a page on each of the 3 data members.
    arr.configure_stripe_cache(None, Some(1)).unwrap();
    let entry = 3 * 4096;
    // Held (it ends on a chunk boundary): one page in the cache.
    arr.write(60 << 10, &[0x11; 4096]).unwrap();
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!((st.memory_bytes, st.dirty_stripes), (4096, 1), "{st:?}");
    // Five pages of the same stripe (of another chunk): more than the cache holds.
    arr.write(64 << 10, &[0x22; 5 * 4096]).unwrap();
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!((st.memory_bytes, st.dirty_stripes), (0, 0), "{st:?}");
    assert!(st.peak_memory_bytes <= entry, "{st:?}");
    drop(arr);
    let a = check_clean(&ps);
    let mut out = vec![0u8; 128 << 10];
    a.read(0, &mut out).unwrap();
    let mut want = vec![0u8; 128 << 10];
    want[60 << 10..64 << 10].fill(0x11);
    want[64 << 10..84 << 10].fill(0x22);
    assert!(out == want, "differs at {:?}", first_diff(&out, &want));
}

#[test]
fn auto_size_grows_for_a_reused_working_set_and_stays_small_for_full_stripes() {
    let dir = TempDir::new("rk-sc-auto").unwrap();
    let ps = make(&dir, Level::Raid5, 5, 64, 24);
    let arr = open(&ps);
    let start = arr.stripe_cache_stats().unwrap();
    assert_eq!(start.mode, "auto");
    assert_eq!(start.size_entries, 512);
    let g = arr.geometry();
    let stripe = g.chunk_sectors * 512 * g.data_disks() as u64;
    // A purely full-stripe stream: nothing is kept, the size does not move.
    let data = vec![0x5au8; stripe as usize];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        for s in 0..64 {
            arr.write(s * stripe, &data).unwrap();
        }
    }
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!((st.size_entries, st.memory_bytes), (512, 0), "{st:?}");
    // Random 4 KiB writes over 40 MiB (2560 entries of 16 KiB): grows until it fits.
    let ws = 40u64 << 20;
    let mut rng = Rng(9, 0);
    let t0 = Instant::now();
    loop {
        for _ in 0..2000 {
            let off = rng.below(ws / 4096) * 4096;
            arr.write(off, &[rng.next() as u8; 4096]).unwrap();
        }
        let st = arr.stripe_cache_stats().unwrap();
        if st.size_entries >= 2560 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "did not grow: {st:?}"
        );
    }
    // Once every row has been filled, (nearly) every write finds its row in the cache.
    for _ in 0..6000 {
        let off = rng.below(ws / 4096) * 4096;
        arr.write(off, &[rng.next() as u8; 4096]).unwrap();
    }
    let before = arr.stripe_cache_stats().unwrap();
    for _ in 0..2000 {
        let off = rng.below(ws / 4096) * 4096;
        arr.write(off, &[rng.next() as u8; 4096]).unwrap();
    }
    arr.flush().unwrap();
    let after = arr.stripe_cache_stats().unwrap();
    let hits = after.hits - before.hits;
    let misses = after.misses - before.misses;
    assert!(hits > 10 * misses, "hits {hits} misses {misses}: {after:?}");
}

/// Random 4 KiB writes for `ms` milliseconds over the first `region` bytes, `threads` at
/// once.
fn random_4k_writes(arr: &Array, region: u64, ms: u64, threads: u64) {
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                let mut rng = Rng(40 + t, 0);
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(ms) {
                    for _ in 0..256 {
                        let off = rng.below(region / 4096) * 4096;
                        arr.write(off, &[rng.next() as u8; 4096]).unwrap();
                    }
                }
            });
        }
    });
}

/// The grow/bypass decision is made once per load and kept: random 4 KiB writes over a
/// region 4× the starting size with memory for it grow the cache over it without ever
/// switching to bypassing (the old rule, from hits counted through the cache, switched
/// every 25 ms while it decided); the same writes over a region 100× the memory bound
/// switch to bypassing once and stay there, the cache at its bound, not churning.
#[test]
fn the_small_write_decision_is_made_once_and_kept() {
    let dir = TempDir::new("rk-sc-decide").unwrap();
    // RAID5 over 4, 64 KiB chunks: an entry is 12 KiB; 2,048 rows in 24 MiB.
    let ps = make(&dir, Level::Raid5, 4, 64, 40);
    let arr = open(&ps);
    let region = 24u64 << 20;
    let rows = region / 4096 / 3;
    random_4k_writes(&arr, region, 1500, 2);
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!((st.bypassing, st.bypass_switches), (false, 0), "{st:?}");
    assert!(st.size_entries >= rows, "{st:?}");
    // Grown over the region: writes find their rows.
    let before = arr.stripe_cache_stats().unwrap();
    random_4k_writes(&arr, region, 300, 2);
    let after = arr.stripe_cache_stats().unwrap();
    let (hits, misses) = (after.hits - before.hits, after.misses - before.misses);
    assert!(hits > 5 * misses, "hits {hits} misses {misses}: {after:?}");
    arr.flush().unwrap();
    // Memory for 12 entries: the whole array (120 MiB, 10,240 rows) is 850× that.
    arr.configure_stripe_cache(Some(12 * 12 * 1024), None)
        .unwrap();
    random_4k_writes(&arr, arr.size_bytes(), 1500, 2);
    let st = arr.stripe_cache_stats().unwrap();
    assert_eq!((st.bypassing, st.bypass_switches), (true, 1), "{st:?}");
    assert!(st.used_entries <= 12, "{st:?}");
    arr.flush().unwrap();
    drop(arr);
    check_clean(&ps);
}

/// Small writes that bypass the cache (stripes it holds nothing of go straight to the
/// members) racing with writes through it to the same stripes: several threads, each
/// owning every T-th 4 KiB page of a few stripes, so stripes are shared and the final
/// contents are known. A bypassing write must never leave a cached page stale (a later
/// reconstruct-write would compute parity from it), so parity must check clean and every
/// page hold its owner's last write.
#[test]
fn bypassing_writes_race_with_cached_stripes() {
    const T: u64 = 4;
    for (level, n) in [(Level::Raid6, 5), (Level::Raid5, 4)] {
        let dir = TempDir::new("rk-sc-race").unwrap();
        let ps = make(&dir, level, n, 16, 2);
        let arr = open(&ps);
        arr.force_stripe_cache_bypass(Some(true));
        let g = arr.geometry();
        let stripe = g.chunk_sectors * 512 * g.data_disks() as u64;
        // 12 stripes shared by all threads.
        let pages = 12 * stripe / 4096;
        let mut model = vec![0u8; (pages * 4096) as usize];
        arr.read(0, &mut model).unwrap();
        let parts: Vec<Vec<(u64, u8)>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..T)
                .map(|t| {
                    let arr = &arr;
                    sc.spawn(move || {
                        let mut rng = Rng(100 + t, 0);
                        let mut last = Vec::new();
                        for i in 0..4000u64 {
                            let page = rng.below(pages / T) * T + t;
                            let v = (rng.next() as u8) | 1;
                            arr.write(page * 4096, &[v; 4096]).unwrap();
                            last.push((page, v));
                            if i % 64 == 63 {
                                let mut b = [0u8; 4096];
                                arr.read(page * 4096, &mut b).unwrap();
                                assert!(b.iter().all(|&x| x == v), "{level} thread {t}");
                            }
                        }
                        last
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for part in parts {
            for (page, v) in part {
                model[(page * 4096) as usize..][..4096].fill(v);
            }
        }
        let st = arr.stripe_cache_stats().unwrap();
        assert!(
            st.hits + st.misses > 0,
            "{level}: nothing went through the cache: {st:?}"
        );
        arr.flush().unwrap();
        drop(arr);
        let a = check_clean(&ps);
        let mut out = vec![0u8; model.len()];
        a.read(0, &mut out).unwrap();
        assert!(
            out == model,
            "{level}: differs at {:?}",
            first_diff(&out, &model)
        );
    }
}

/// The array of `ps` with reads of stripe 0's data block 1 member failing over its first
/// 512 KiB of data (data offset 2048 sectors), partial stripes held up to a minute.
fn open_block1_unreadable(ps: &[PathBuf], lay: &StripeLayout) -> Arc<Array> {
    let mut specs = ps.to_vec();
    let bad = lay.data[1];
    specs[bad] = PathBuf::from(format!("fault:reio@2048-3071:{}", ps[bad].display()));
    let arr = open(&specs);
    arr.set_stripe_cache_hold(Duration::from_secs(60));
    arr
}

/// Held writes that cannot be written out (a degraded RAID5 whose write-out needs a
/// sector no member can give) make their range read as lost and the next flush fail;
/// writing that range again (restoring it) is taken and makes it valid, while writes
/// elsewhere leave it lost.
#[test]
fn a_lost_held_write_is_restored_by_writing_it_again() {
    let dir = TempDir::new("rk-sc-lost").unwrap();
    let ps = make(&dir, Level::Raid5, 4, 64, 2);
    let (lay, stripe) = {
        let a = assemble_paths(&ps, &rw()).unwrap();
        let g = a.geometry();
        (
            g.stripe(0).unwrap(),
            (g.chunk_sectors * 512) as usize * g.data_disks(),
        )
    };
    let arr = open_block1_unreadable(&ps, &lay);
    // The last 8 KiB of block 0 of stripe 0 (ending on a chunk boundary, as a stream
    // does: held). Then block 2's member fails: writing the
    // held data out needs block 1 (to rebuild block 2 for parity), which cannot be read.
    arr.write(57344, &[0xabu8; 8192]).unwrap();
    arr.fail_member(lay.data[2], "test").unwrap();
    let err = arr.flush().unwrap_err().to_string();
    assert!(err.contains("could not be written"), "{err}");
    assert_eq!(arr.lost_ranges(), vec![(57344, 8192)]);
    let mut out = vec![0u8; 8192];
    assert!(arr.read(57344, &mut out).is_err());
    // A write elsewhere (stripe 9, outside the unreadable area) leaves it lost.
    arr.write(9 * stripe as u64, &[0x11u8; 4096]).unwrap();
    assert_eq!(arr.lost_ranges(), vec![(57344, 8192)]);
    // Restoring stripe 0 (a whole stripe: no reads needed) is taken and readable.
    let data: Vec<u8> = (0..stripe).map(|i| (i % 251) as u8).collect();
    arr.write(0, &data).unwrap();
    assert_eq!(arr.lost_ranges(), vec![]);
    let mut out = vec![0u8; stripe];
    // Block 1 is read through the fault: only blocks 0 and 2 (rebuilt from parity) are
    // checked here; the members are checked below.
    arr.read(0, &mut out[..stripe / 3]).unwrap();
    assert!(out[..stripe / 3] == data[..stripe / 3]);
    arr.flush().unwrap();
    arr.mark_clean().unwrap();
    drop(arr);
    // Without the fault (and without the failed member): stripe 0 as restored.
    let live: Vec<PathBuf> = (0..4)
        .filter(|&r| r != lay.data[2])
        .map(|r| ps[r].clone())
        .collect();
    let a = assemble_paths(&live, &rw()).unwrap();
    let mut out = vec![0u8; stripe];
    a.read(0, &mut out).unwrap();
    assert!(out == data, "differs at {:?}", first_diff(&out, &data));
}

/// With every parity member of a stripe gone, writes there keep no parity: the data goes
/// out alone with no member reads (as md does), so they are taken even where the other
/// data blocks of the stripe cannot be read, directly and out of the cache alike, and
/// what lies between held writes is left as it was.
#[test]
fn writes_where_all_parity_is_gone_read_nothing() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let dir = TempDir::new("rk-sc-noparity").unwrap();
        let ps = make(&dir, level, n, 64, 2);
        let lay = {
            let a = assemble_paths(&ps, &rw()).unwrap();
            let g = a.geometry();
            // Stripe 0 holds a known pattern.
            let stripe = (g.chunk_sectors * 512) as usize * g.data_disks();
            let pat: Vec<u8> = (0..stripe).map(|i| (i % 241) as u8 + 1).collect();
            a.write(0, &pat).unwrap();
            a.mark_clean().unwrap();
            g.stripe(0).unwrap()
        };
        let arr = open_block1_unreadable(&ps, &lay);
        arr.fail_member(lay.p, "test").unwrap();
        if let Some(q) = lay.q {
            arr.fail_member(q, "test").unwrap();
        }
        let mut model: Vec<u8> = (0..65536).map(|i| (i % 241) as u8 + 1).collect();
        // A small write (straight out); the last 8 KiB of block 0 (held), then the first
        // and last sector of one page further up (held with it: that page goes out with
        // six sectors between them that the cache does not know).
        for (off, len, v) in [
            (4096usize, 4096usize, 0x5au8),
            (57344, 8192, 0xa5),
            (8192, 512, 0x77),
            (8192 + 3584, 512, 0x78),
        ] {
            arr.write(off as u64, &vec![v; len]).unwrap();
            model[off..off + len].fill(v);
        }
        arr.flush().unwrap();
        let reads: u64 = arr.member_stats().iter().map(|m| m.reads).sum();
        assert_eq!(reads, 0, "{level}: nothing read");
        let mut out = vec![0u8; 65536];
        arr.read(0, &mut out).unwrap();
        assert!(
            out == model,
            "{level}: differs at {:?}",
            first_diff(&out, &model)
        );
    }
}
