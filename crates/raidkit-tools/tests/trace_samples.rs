//! The committed sample traces parse to exactly the numbers worked out by hand.

use raidkit_tools::trace::{analyze, parse, Op};

const BLK: &str = include_str!("data/sample-blkparse.txt");
const RK: &str = include_str!("data/sample-raidkit.jsonl");

#[test]
fn blkparse_sample() {
    let tr = parse(BLK, "sample-blkparse.txt").unwrap();
    assert_eq!(tr.format, "blkparse");
    assert_eq!(tr.events.len(), 208);
    assert_eq!(tr.skipped, 0);
    let r = analyze(&tr, None).unwrap();
    assert_eq!(r.counted_action, "Q");
    let acts: Vec<(String, u64)> = r.actions.clone().into_iter().collect();
    let want: Vec<(String, u64)> = [
        ("A", 1),
        ("C", 40),
        ("D", 40),
        ("G", 40),
        ("I", 40),
        ("M", 2),
        ("P", 1),
        ("Q", 42),
        ("U", 1),
        ("m", 1),
    ]
    .iter()
    .map(|(a, n)| (a.to_string(), *n))
    .collect();
    assert_eq!(acts, want);
    assert_eq!(
        (r.ios, r.reads, r.writes, r.flushes, r.discards),
        (42, 28, 12, 1, 1)
    );
    assert_eq!((r.read_bytes, r.write_bytes), (622_592, 811_008));
    assert_eq!(r.read_fraction, 0.7);
    assert_eq!(r.size_histogram, vec![(4096, 30), (131072, 10)]);
    assert_eq!(r.mode_size, 4096);
    assert_eq!(r.mean_size, 35_840.0);
    let who: Vec<(&str, u64)> = r.by_who.iter().map(|w| (w.name.as_str(), w.ios)).collect();
    assert_eq!(
        who,
        vec![
            ("fio", 24),
            ("kworker/u4:1", 8),
            ("jbd2/sda1-8", 5),
            ("cat", 4),
            ("fstrim", 1)
        ]
    );
    let flags: Vec<(String, u64)> = r.flags.clone().into_iter().collect();
    assert_eq!(
        flags,
        vec![
            ("A".into(), 4),
            ("F".into(), 1),
            ("P".into(), 1),
            ("S".into(), 6)
        ]
    );
    let sm = r.summary.unwrap();
    assert_eq!(sm.totals.get("Reads Queued"), Some(&(28, 608)));
    assert_eq!(sm.totals.get("Writes Completed"), Some(&(12, 2832)));
    assert_eq!(sm.totals.get("Write Merges"), Some(&(2, 8)));
    assert_eq!(sm.events, Some(208));
    assert_eq!(sm.throughput_kib_s, Some((67555, 315555)));
    // Counting dispatches instead: merged requests are gone.
    let d = analyze(&tr, Some('D')).unwrap();
    assert_eq!((d.ios, d.reads, d.writes), (40, 28, 10));
}

#[test]
fn raidkit_sample() {
    let tr = parse(RK, "sample-raidkit.jsonl").unwrap();
    assert_eq!(tr.format, "raidkit");
    assert_eq!(tr.events.len(), 14);
    assert_eq!(tr.events[12].op, Op::Flush);
    let r = analyze(&tr, None).unwrap();
    assert_eq!(
        (r.ios, r.reads, r.writes, r.flushes, r.discards),
        (14, 6, 6, 1, 1)
    );
    assert_eq!(r.mode_size, 4096);
    assert_eq!(r.size_histogram, vec![(4096, 9), (65536, 3)]);
    assert_eq!(r.by_member, vec![(0, 3), (1, 1), (2, 1), (3, 3)]);
    let who: Vec<(&str, u64)> = r.by_who.iter().map(|w| (w.name.as_str(), w.ios)).collect();
    assert_eq!(who, vec![("vol0", 11), ("vol1", 3)]);
    assert_eq!(r.duration_s, 0.001);
}

#[test]
fn garbage_is_counted_not_fatal_and_empty_is_an_error() {
    let tr = parse("hello\n  8,0 0 1 0.5 9 Q R 8 + 8 [x]\n\u{0}\u{ff}", "g").unwrap();
    assert_eq!((tr.events.len(), tr.skipped), (1, 2));
    assert_eq!(tr.first_skipped.as_ref().map(|x| x.0), Some(1));
    let e = analyze(&parse("nothing here\n", "g").unwrap(), None).unwrap_err();
    assert!(e.to_string().contains("line 1"), "{e}");
}
