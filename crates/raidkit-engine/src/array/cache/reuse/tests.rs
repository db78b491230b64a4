use super::*;
use proptest::prelude::*;

/// xorshift64*: a seeded stream of row numbers.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
    }
}

/// Page row key of row `i` of a region (128 page rows per stripe: 512 KiB chunks).
fn key(i: u64) -> u64 {
    ((i / 128) << 20) | (i % 128)
}

/// Feed `writes` uniformly random single-row writes over `rows` rows.
fn feed_uniform(s: &mut Sampler, rng: &mut Rng, rows: u64, writes: u64) {
    for _ in 0..writes {
        let k = key(rng.below(rows));
        if sampled(k) {
            s.access(k);
        }
    }
}

/// RAID5 over 4 members (3 data blocks), a memory bound of `max` entries.
fn raid5(curve: &Curve, max: usize, was: Decision) -> Decision {
    decide(&Inputs {
        curve,
        max_entries: max,
        min_entries: 512,
        data_blocks: 3,
        parity_blocks: 1,
        was,
    })
}

const REGION_256M_RAID5: u64 = (256 << 20) / 4096 / 3;

#[test]
fn about_one_row_in_sample_is_followed() {
    let n = (0..200_000u64).filter(|&i| sampled(key(i))).count() as f64;
    let want = 200_000.0 / SAMPLE as f64;
    assert!(
        (n - want).abs() < want * 0.05,
        "{n} sampled, {want} expected"
    );
}

/// Uniform writes over H rows: an LRU cache of C rows misses 1 − C/H of them.
#[test]
fn the_curve_of_uniform_writes_is_that_of_lru() {
    let rows = 32_000u64;
    let mut s = Sampler::new(1 << 20);
    let mut rng = Rng(7);
    feed_uniform(&mut s, &mut rng, rows, 1_500_000);
    let c = s.curve();
    let hs = rows as f64 / SAMPLE as f64;
    for frac in [0.1, 0.25, 0.5, 0.75, 0.9] {
        let m = c.miss_at(frac * hs);
        assert!(
            (m - (1.0 - frac)).abs() < 0.06,
            "cache of {frac} of the rows: miss {m}, want {}",
            1.0 - frac
        );
    }
    assert!(c.miss_at(2.0 * hs) < 0.03, "{}", c.miss_at(2.0 * hs));
    let need = c.rows_for(0.05) * SAMPLE as f64;
    assert!(
        need > 0.85 * rows as f64 && need < 1.15 * rows as f64,
        "{need} rows for a miss ratio of 5 %, of {rows}"
    );
}

/// The case the old rule got wrong: 4 KiB random writes over a 256 MiB region (21,845
/// RAID5 rows, 43× the starting size) with memory to hold it must grow over the region,
/// and do so in every run (seed), to the same size give or take the sample, the size
/// moving only a few times as the measure settles (not with every period's noise).
#[test]
fn a_256_mib_random_region_with_memory_for_it_grows_over_it_every_time() {
    let mut sizes = Vec::new();
    for seed in 1..=8 {
        let mut s = Sampler::new(1 << 20);
        let mut rng = Rng(seed);
        let mut d = Decision::initial(512);
        // 3 s at 240k writes/s, decided every 25 ms (6000 writes).
        let mut grew_at = None;
        let mut resized = 0;
        for period in 0..120 {
            feed_uniform(&mut s, &mut rng, REGION_256M_RAID5, 6000);
            let next = raid5(&s.curve(), 400_000, d);
            resized += usize::from(next.target_entries != d.target_entries);
            if grew_at.is_some() {
                assert!(
                    !next.bypass,
                    "seed {seed}: back to bypassing at period {period}"
                );
            } else if !next.bypass && next.target_entries > 512 {
                grew_at = Some(period);
            }
            d = next;
        }
        let at = grew_at.expect("never grew");
        assert!(resized <= 8, "seed {seed}: the size moved {resized} times");
        assert!(at <= 8, "seed {seed}: grew only at period {at}");
        let t = d.target_entries as u64;
        assert!(
            (REGION_256M_RAID5..=REGION_256M_RAID5 * 3 / 2).contains(&t),
            "seed {seed}: {t} entries for {REGION_256M_RAID5} rows"
        );
        sizes.push(t);
    }
    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
    assert!(hi * 10 <= lo * 12, "sizes over the seeds: {sizes:?}");
}

/// A working set 100× what memory allows: bypass, at the smallest size, every period once
/// the first writes are seen (no thrashing: the cache does not grow to the bound and
/// churn through it).
#[test]
fn a_working_set_100_times_the_memory_bound_bypasses() {
    let max = 2048;
    let rows = 100 * max as u64;
    let mut s = Sampler::new(4 * max / SAMPLE as usize);
    let mut rng = Rng(3);
    let mut d = Decision::initial(512);
    for period in 0..200 {
        feed_uniform(&mut s, &mut rng, rows, 6000);
        d = raid5(&s.curve(), max, d);
        if period >= 2 {
            assert_eq!(
                d,
                Decision {
                    target_entries: 512,
                    bypass: true,
                    fill: false,
                },
                "period {period}"
            );
        }
    }
}

/// Between the two thresholds the decision in force stays, whichever it is.
#[test]
fn between_the_thresholds_the_decision_in_force_stays() {
    // Uniform over H rows with memory for 0.18 H: saves ~18 % of the reads, between
    // LEAVE (10 %) and ENTER (25 %).
    let rows = 40_000u64;
    let mut s = Sampler::new(1 << 20);
    feed_uniform(&mut s, &mut Rng(5), rows, 2_000_000);
    let c = s.curve();
    let max = (rows as f64 * 0.18) as usize;
    let off = Decision {
        target_entries: 512,
        bypass: true,
        fill: false,
    };
    assert_eq!(raid5(&c, max, off), off);
    let on = Decision {
        target_entries: max,
        bypass: false,
        fill: true,
    };
    assert_eq!(raid5(&c, max, on), on);
    // Well above ENTER it grows; well below LEAVE it bypasses, from either state.
    for was in [on, off] {
        assert!(!raid5(&c, rows as usize, was).bypass);
        assert!(raid5(&c, (rows / 50) as usize, was).bypass);
    }
}

/// Nothing measured, or a load gone long enough that its curve faded: back to the
/// smallest size (the cache shrinks), used.
#[test]
fn without_a_recent_load_the_cache_goes_back_to_its_smallest_size() {
    let mut s = Sampler::new(1 << 20);
    assert_eq!(
        raid5(&s.curve(), 400_000, Decision::initial(512)),
        Decision::initial(512)
    );
    feed_uniform(&mut s, &mut Rng(9), REGION_256M_RAID5, 400_000);
    let grown = raid5(&s.curve(), 400_000, Decision::initial(512));
    assert!(
        grown.target_entries as u64 >= REGION_256M_RAID5,
        "{grown:?}"
    );
    let mut halvings = 0;
    while raid5(&s.curve(), 400_000, grown) != Decision::initial(512) {
        s.decay();
        halvings += 1;
        assert!(
            halvings < 12,
            "still {:?}",
            raid5(&s.curve(), 400_000, grown)
        );
    }
}

/// Memory needed elsewhere: a bound below the size in force takes the size down to it.
#[test]
fn a_lower_memory_bound_takes_the_size_down() {
    let mut s = Sampler::new(1 << 20);
    feed_uniform(&mut s, &mut Rng(2), REGION_256M_RAID5, 400_000);
    let grown = raid5(&s.curve(), 400_000, Decision::initial(512));
    let max = grown.target_entries * 2 / 3;
    let d = raid5(&s.curve(), max, grown);
    assert_eq!(
        d,
        Decision {
            target_entries: max,
            bypass: false,
            fill: true,
        }
    );
}

/// A sequential stream of 4 KiB writes rewrites each row once per data block a stripe
/// (128 rows) apart: the smallest cache pays, so it stays in use (and merges).
#[test]
fn a_sequential_small_write_stream_keeps_the_cache_in_use() {
    let mut s = Sampler::new(1 << 20);
    for i in 0..200_000u64 {
        // Page i of the stream: stripe i / 384, block (i / 128) % 3, row i % 128.
        let k = ((i / 384) << 20) | (i % 128);
        if sampled(k) {
            s.access(k);
        }
    }
    let d = raid5(&s.curve(), 400_000, Decision::initial(512));
    assert!(!d.bypass && d.fill, "{d:?}");
    assert_eq!(d.target_entries, 512);
}

#[test]
fn member_reads_per_write_by_geometry() {
    // RAID5 over 4: 2 reads bypassing; whole rows filled, so a hit reads nothing.
    assert_eq!(reads_per_write(3, 1, 0.0), (2.0, 2.0));
    assert_eq!(reads_per_write(3, 1, 0.75), (2.0, 0.5));
    // RAID6 over 6: 3 and 3.
    assert_eq!(reads_per_write(4, 2, 0.5), (3.0, 1.5));
    // RAID5 over 3: reconstruct-write reads 1.
    assert_eq!(reads_per_write(2, 1, 0.5), (1.0, 0.5));
    // RAID5 over 10: rows are not filled (8 reads > 2 × 2): a hit saves the old data.
    assert_eq!(reads_per_write(9, 1, 0.5), (2.0, 1.5));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Uniform writes over any region and any bound: grows when memory covers at least
    /// half of the region, bypasses when it covers 8 % or less (the leave threshold is a
    /// tenth; the sampled curve's estimate at a cover just under it can read just over
    /// it: 9.7 % failed once); the size never passes the bound nor falls below the
    /// smallest.
    #[test]
    fn uniform_loads_grow_when_memory_covers_them_and_bypass_when_not(
        rows in 4_000u64..60_000,
        cover in 0.02f64..3.0,
        seed in 1u64..1000,
    ) {
        let mut s = Sampler::new(1 << 20);
        feed_uniform(&mut s, &mut Rng(seed), rows, rows * 40);
        let max = ((rows as f64 * cover) as usize).max(1);
        for was in [Decision::initial(512), Decision { target_entries: 512, bypass: true, fill: false }] {
            let d = raid5(&s.curve(), max, was);
            prop_assert!(d.target_entries <= max.max(1));
            prop_assert!(d.target_entries >= 512.min(max));
            if cover >= 0.5 {
                prop_assert!(!d.bypass, "{d:?}");
                let covered = (rows as usize).min(max) * 9 / 10;
                prop_assert!(d.target_entries >= covered, "{d:?} of {rows} rows");
            }
            if cover <= 0.08 {
                prop_assert!(d.bypass, "{d:?}");
            }
        }
    }
}
