//! `probe` over several members: the speed comparison on synthetic measurements, and a real
//! measurement of two files.

use raidkit_tools::disks::link::{LinkInfo, LinkKind};
use raidkit_tools::disks::Severity;
use raidkit_tools::probe::{compare, probe_peers, PeerOptions, PeerSample};
use std::time::Duration;

fn ssd(path: &str, mb_s: f64, link: Option<LinkInfo>) -> PeerSample {
    PeerSample {
        path: path.into(),
        kind: "block device (SSD or virtual)".into(),
        rotational: Some(false),
        link,
        read_bytes_per_sec: mb_s * 1e6,
        bytes: 256 << 20,
        direct: true,
    }
}

fn sata(cur: &str, max: Option<&str>) -> LinkInfo {
    let rate = |s: &str| raidkit_tools::disks::link::sata_bytes_per_sec(s).unwrap();
    LinkInfo {
        kind: LinkKind::Sata,
        current: cur.into(),
        current_bytes_per_sec: rate(cur),
        max: max.map(str::to_string),
        max_bytes_per_sec: max.map(rate),
    }
}

#[test]
fn a_slow_member_on_a_slow_link_is_named_with_its_cause() {
    let s = vec![
        ssd("/dev/sda", 520.0, Some(sata("6.0 Gb/s", Some("6.0 Gb/s")))),
        ssd("/dev/sdb", 515.0, Some(sata("6.0 Gb/s", Some("6.0 Gb/s")))),
        ssd("/dev/sdc", 140.0, Some(sata("1.5 Gb/s", Some("6.0 Gb/s")))),
        ssd("/dev/sdd", 530.0, Some(sata("6.0 Gb/s", Some("6.0 Gb/s")))),
    ];
    let f = compare(&s);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(f[0].path, "/dev/sdc");
    assert_eq!(
        f[0].message,
        "/dev/sdc reads at 140 MB/s, its peers at 520 MB/s: its SATA link at 1.5 Gb/s (150 MB/s; it can do 6.0 Gb/s): check its cable and controller port"
    );
}

#[test]
fn other_causes_and_no_cause() {
    // At the limit of a link that is as fast as it can be (an old port).
    let s = vec![
        ssd("/dev/sda", 520.0, None),
        ssd("/dev/sdb", 290.0, Some(sata("3.0 Gb/s", None))),
        ssd("/dev/sdc", 525.0, None),
    ];
    let f = compare(&s);
    assert_eq!(
        f[0].message,
        "/dev/sdb reads at 290 MB/s, its peers at 522 MB/s: it runs at its link's limit (SATA link at 3.0 Gb/s (300 MB/s))"
    );
    // A spinning disk among SSDs.
    let mut hdd = ssd("/dev/sdb", 180.0, None);
    hdd.rotational = Some(true);
    let f = compare(&[
        ssd("/dev/sda", 520.0, None),
        hdd,
        ssd("/dev/sdc", 510.0, None),
    ]);
    assert!(
        f[0].message
            .ends_with("it is a spinning disk among SSDs: the array waits for it"),
        "{}",
        f[0].message
    );
    // No visible cause.
    let f = compare(&[
        ssd("/dev/sda", 520.0, None),
        ssd("/dev/sdb", 200.0, None),
        ssd("/dev/sdc", 510.0, None),
    ]);
    assert!(
        f[0].message.ends_with(
            "check its cable/controller, its SMART health, and whether something else is using it"
        ),
        "{}",
        f[0].message
    );
}

#[test]
fn peers_in_line_give_nothing_but_a_degraded_link_is_noticed() {
    let even = vec![
        ssd("/dev/sda", 520.0, None),
        ssd("/dev/sdb", 400.0, None),
        ssd("/dev/sdc", 480.0, None),
    ];
    assert!(compare(&even).is_empty(), "{:#?}", compare(&even));
    // Within 60 % of its peers, but its link trained low: a notice.
    let s = vec![
        ssd("/dev/sda", 140.0, Some(sata("1.5 Gb/s", Some("6.0 Gb/s")))),
        ssd("/dev/sdb", 150.0, None),
    ];
    let f = compare(&s);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Notice);
    assert_eq!(
        f[0].message,
        "/dev/sda reads at 140 MB/s on a SATA link at 1.5 Gb/s (150 MB/s; it can do 6.0 Gb/s): check its cable and controller port"
    );
    // One member alone has no peers.
    assert!(compare(&[ssd("/dev/sda", 10.0, None)]).is_empty());
}

#[test]
fn measures_real_files_read_only() {
    let d = raidkit_testkit::tempdir::TempDir::new("rk-peers").unwrap();
    let mut paths = Vec::new();
    for i in 0..2 {
        let p = d.path().join(format!("m{i}.img"));
        std::fs::write(&p, vec![0x5au8; 4 << 20]).unwrap();
        paths.push(p);
    }
    let o = PeerOptions {
        bytes: 2 << 20,
        time: Duration::from_secs(5),
        ..PeerOptions::default()
    };
    let r = probe_peers(&paths, &o).unwrap();
    assert_eq!(r.samples.len(), 2);
    for s in &r.samples {
        assert_eq!(s.bytes, 2 << 20, "{s:?}");
        assert!(s.read_bytes_per_sec > 0.0);
        assert!(s.kind.starts_with("file on "), "{}", s.kind);
    }
    // Untouched.
    for p in &paths {
        assert!(std::fs::read(p).unwrap().iter().all(|&b| b == 0x5a));
    }
    assert!(r
        .to_text()
        .starts_with("sequential reads, one member at a time:\n"));
}
