//! The figures: titles say what was measured, axes speak human units, member panels show
//! traffic against the even share and member latency; drawn to PNG and SVG.

use raidkit_tools::bench::{ArrayInfo, BenchResult, MemberShare, SweepPoint, SweepResult};
use raidkit_tools::charts::{self, member_labels};
use raidkit_tools::machine::Machine;
use raidkit_tools::plot::{Panel, Unit};
use raidkit_tools::stats::LatencySummary;

fn lat(p50: u64, p99: u64) -> LatencySummary {
    LatencySummary {
        min: p50 / 2,
        mean: p50 as f64,
        p50,
        p90: p50 * 2,
        p99,
        p999: p99 * 2,
        max: p99 * 3,
    }
}

fn result() -> BenchResult {
    let mib = 1u64 << 20;
    let members: Vec<MemberShare> = (0..4)
        .map(|i| MemberShare {
            role: i,
            device: format!("/tmp/raidkit-bench-1/bench-run-{i}.img"),
            reads: 1000,
            writes: 1000,
            read_bytes: 8 * mib,
            write_bytes: 8 * mib,
            bytes: 16 * mib,
            lat_ns: Some(lat(20_000 + i as u64 * 1000, 400_000)),
            io_share: 0.25,
            byte_share: 0.25,
        })
        .collect();
    BenchResult {
        started_unix: 1_764_084_782,
        machine: Machine {
            cores: 2,
            arch: "x86_64".into(),
            cpu: None,
            kernel: None,
        },
        array: Some(ArrayInfo {
            level: "raid6".into(),
            layout: "left-symmetric".into(),
            default_layout: true,
            raid_disks: 4,
            member_bytes: vec![64 * mib; 4],
            chunk_bytes: 64 * 1024,
            array_bytes: 128 * mib,
        }),
        target_kind: None,
        stripe_cache: None,
        target: "bench (raid6)".into(),
        pattern: "randwrite".into(),
        block_size: 4096,
        iodepth: 32,
        jobs: 1,
        direct: false,
        seconds: 2.0,
        ios: 8192,
        reads: 0,
        writes: 8192,
        read_bytes: 0,
        write_bytes: 32 * mib,
        iops: 4096.0,
        mib_s: 16.0,
        lat_ns: lat(50_000, 900_000),
        read_lat_ns: None,
        write_lat_ns: Some(lat(50_000, 900_000)),
        members: Some(members),
    }
}

#[test]
fn a_bench_figure_says_what_was_measured() {
    let f = charts::bench_figure(&result());
    assert_eq!(
        f.title,
        "raid6 4×64 MiB, 64 KiB chunk · 4K random write QD32 · 2-core x86_64"
    );
    assert!(
        f.subtitle
            .starts_with("16 MiB/s · 4.1k IOPS · 8.19k IOs in 2 s · 2025-11-2"),
        "{}",
        f.subtitle
    );
    assert_eq!(f.rows.len(), 2);
    assert_eq!(f.rows[1].len(), 2);
    let Panel::Bars(traffic) = &f.rows[1][0] else {
        panic!("bars")
    };
    // Members moved 64 MiB for 32 MiB of client writes: 2×.
    assert_eq!(traffic.title, "member traffic: 2× the client's bytes");
    assert_eq!(traffic.labels, ["0", "1", "2", "3"]);
    assert!(traffic.stacked);
    assert_eq!(traffic.y_unit, Unit::BytesPerSec);
    let (name, even) = traffic.reference.clone().unwrap();
    assert_eq!(name, "even share");
    assert_eq!(even, 8.0 * 1048576.0);
    let Panel::Bars(mlat) = &f.rows[1][1] else {
        panic!("bars")
    };
    assert_eq!(mlat.y_unit, Unit::Nanos);
    assert!(mlat.log_y);
    assert_eq!(mlat.series[0].1[3], 23_000.0);
}

#[test]
fn sweep_titles_leave_out_what_varies() {
    let mut a = result();
    a.array.as_mut().unwrap().chunk_bytes = 16 * 1024;
    let mut b = result();
    b.mib_s = 32.0;
    let s = SweepResult {
        param: "chunk".into(),
        points: vec![
            SweepPoint {
                value: "16K".into(),
                result: a,
            },
            SweepPoint {
                value: "64K".into(),
                result: b,
            },
        ],
    };
    let f = charts::sweep_figure(&s);
    assert_eq!(
        f.title,
        "raid6 4×64 MiB · 4K random write QD32 · 2-core x86_64"
    );
    assert!(
        f.subtitle
            .starts_with("chunk = 16K, 64K: best 32 MiB/s at chunk=64K · "),
        "{}",
        f.subtitle
    );
}

#[test]
fn member_labels_are_short() {
    let d = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        member_labels(&[0, 1], &d(&["/x/bench-p0-0.img", "/x/bench-p0-1.img"])),
        ["0", "1"]
    );
    assert_eq!(
        member_labels(&[0, 1], &d(&["/dev/sda", "/dev/sdb"])),
        ["0:sda", "1:sdb"]
    );
    assert_eq!(
        member_labels(
            &[2],
            &d(&["/dev/disk/by-id/ata-WDC_WD140EDFZ-11A0VA0_9RK1A0123456"])
        ),
        ["2:…9RK1A0123456"]
    );
}

#[test]
fn figures_are_drawn_as_png_and_svg() {
    let d = raidkit_testkit::tempdir::TempDir::new("rk-charts").unwrap();
    let f = charts::bench_figure(&result());
    let png = d.path().join("b.png");
    charts::draw(&png, &f).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 20_000, "{}", bytes.len());
    let svg = d.path().join("b.svg");
    charts::draw(&svg, &f).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("raid6 4×64 MiB, 64 KiB chunk"),
        "title in the SVG"
    );
    // Human units on the axes, never raw floats.
    assert!(text.contains("MiB/s"));
    assert!(!text.contains("10000.0") && !text.contains(">0.0<"));
    if let Ok(keep) = std::env::var("RK_KEEP_CHART") {
        std::fs::copy(&png, keep).unwrap();
    }
    let e = charts::draw(&d.path().join("b.gif"), &f).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("the chart file must end in .png or .svg"),
        "{e}"
    );
}
