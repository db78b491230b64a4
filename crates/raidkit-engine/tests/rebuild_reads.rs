//! A RAID6 rebuild reads only what the lost member's blocks need: one missing data block
//! or P takes P and the data (XOR), never Q; a missing Q takes the data, never P. What it
//! leaves out it still reads when it needs it: a read error on P, or a second member
//! missing, and the rebuild is byte-exact all the same.

use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::rebuild::{rebuild, RebuildOptions};
use raidkit_engine::{Array, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{assert_consistent, create_options, data_offset_bytes, member_files};
use raidkit_testkit::hooked::{members, Hooked, Recorder};
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const CHUNK: u64 = 64 << 10;
const PAGE: u64 = 4096;
const MEMBERS: usize = 6;
/// Each member's size: 17 MiB (runs of 16 stripes, whole).
const MEMBER_BYTES: u64 = 17 << 20;

type RecDev = Hooked<Recorder>;

/// The array's bytes: a pattern of the offset (no page like another).
fn pattern(off: u64, len: usize) -> Vec<u8> {
    raidkit_testkit::pattern::mdref_bytes(5, off, len)
}

/// A RAID6 over 6 member files of 64 KiB chunks filled with `pattern`, stopped; the
/// member files and the data offset (bytes).
fn make(dir: &TempDir) -> (Vec<PathBuf>, u64) {
    let ps = member_files(dir.path(), MEMBERS);
    let mut o = create_options(Level::Raid6, &ps);
    o.chunk_bytes = Some(CHUNK);
    o.create_size = Some(MEMBER_BYTES);
    o.assume_clean = true;
    o.name = "reads".into();
    let arr = create(&o, &mut |_, _| {}).expect("create");
    arr.write(0, &pattern(0, arr.size_bytes() as usize))
        .expect("fill");
    arr.stop().expect("stop");
    let doff = data_offset_bytes(&ps[0]);
    (ps, doff)
}

/// Assemble the first `present` members (the others missing), each recording its IOs,
/// and add a spare file for each missing one.
fn degraded(dir: &TempDir, ps: &[PathBuf], present: usize) -> (Arc<Array>, Vec<Arc<RecDev>>) {
    let recs: Vec<Arc<RecDev>> = ps[..present]
        .iter()
        .map(|p| Arc::new(Recorder::open(p, false)))
        .collect();
    let opts = AssembleOptions {
        writable: true,
        force: true,
        ..Default::default()
    };
    let arr = Arc::new(assemble(members(&recs), &opts).expect("assemble"));
    for i in present..ps.len() {
        let sp = spare_file(dir.path(), i, &ps[0]);
        arr.add_spare(Arc::new(FileDev::open(&sp, true).expect("spare")), false)
            .expect("add spare");
    }
    (arr, recs)
}

fn spare_file(dir: &Path, i: usize, like: &Path) -> PathBuf {
    let sp = dir.join(format!("spare{i}"));
    std::fs::File::create(&sp)
        .expect("spare")
        .set_len(std::fs::metadata(like).expect("size").len())
        .expect("spare size");
    sp
}

/// Rebuild with every member's reads recorded; the array then reads the pattern back
/// whole and its parity agrees. Returns the reads of each member: (data byte, length).
fn rebuild_recorded(arr: &Array, recs: &[Arc<RecDev>], doff: u64) -> Vec<Vec<(u64, u64)>> {
    for r in recs {
        r.reads.lock().unwrap().clear();
        r.record.store(true, Ordering::SeqCst);
    }
    let rep = rebuild(arr, &RebuildOptions::default(), &mut |_, _| {}).expect("rebuild");
    assert_eq!(rep.lost, vec![], "nothing is lost");
    assert_eq!(arr.missing_roles(), Vec::<usize>::new());
    let reads = recs
        .iter()
        .map(|r| {
            r.record.store(false, Ordering::SeqCst);
            let reads = std::mem::take(&mut *r.reads.lock().unwrap());
            reads
                .into_iter()
                .filter(|&(o, _)| o >= doff)
                .map(|(o, l)| (o - doff, l as u64))
                .collect()
        })
        .collect();
    let size = arr.size_bytes() as usize;
    let mut got = vec![0u8; size];
    arr.read(0, &mut got).expect("read back");
    let want = pattern(0, size);
    if let Some(i) = (0..size).find(|&i| got[i] != want[i]) {
        panic!("the array differs from what was written at byte {i}");
    }
    assert_consistent(arr, "after the rebuild");
    reads
}

/// Chunks (stripe numbers) each member's reads covered, counted.
fn chunks_read(reads: &[(u64, u64)], stripes: u64) -> Vec<u32> {
    let mut n = vec![0u32; stripes as usize];
    for &(o, l) in reads {
        for s in o / CHUNK..(o + l).div_ceil(CHUNK) {
            n[s as usize] += 1;
        }
    }
    n
}

#[test]
fn a_raid6_rebuild_reads_neither_q_for_data_or_p_nor_p_for_q() {
    let dir = TempDir::new("rk-rreads").expect("temp dir");
    let (ps, doff) = make(&dir);
    let (arr, recs) = degraded(&dir, &ps, MEMBERS - 1);
    let target = MEMBERS - 1;
    let reads = rebuild_recorded(&arr, &recs, doff);
    let geo = arr.geometry();
    let stripes = geo.stripes();
    let (mut left_out, mut needed) = (0, 0);
    for (m, r) in reads.iter().enumerate() {
        let n = chunks_read(r, stripes);
        for s in 0..stripes {
            let l = geo.stripe(s).expect("layout");
            let unneeded = if l.q == Some(target) {
                l.p
            } else {
                l.q.unwrap()
            };
            let want = u32::from(m != unneeded);
            assert_eq!(
                n[s as usize], want,
                "member {m}, stripe {s} (P {}, Q {:?}): read {} times",
                l.p, l.q, n[s as usize]
            );
            if want == 0 {
                left_out += 1;
            } else {
                needed += 1;
            }
        }
    }
    // One chunk of five per stripe left out.
    assert_eq!((left_out, needed), (stripes, 4 * stripes));
}

/// P unreadable in one page of a stripe whose rebuild leaves Q out: that stripe reads Q
/// after all (its own way), and the rebuild is exact.
#[test]
fn a_raid6_rebuild_reads_q_where_p_cannot_be_read() {
    let dir = TempDir::new("rk-rreads").expect("temp dir");
    let (ps, doff) = make(&dir);
    let (arr, recs) = degraded(&dir, &ps, MEMBERS - 1);
    let target = MEMBERS - 1;
    let geo = arr.geometry();
    // A stripe where the target holds data and P is on a member present.
    let s = (20..geo.stripes())
        .find(|&s| {
            let l = geo.stripe(s).expect("layout");
            l.data.contains(&target) && l.p < target && l.q.is_some_and(|q| q < target)
        })
        .expect("such a stripe");
    let l = geo.stripe(s).expect("layout");
    let at = doff + s * CHUNK + 2 * PAGE;
    *recs[l.p].bad.lock().unwrap() = Some((at, at + PAGE));
    let reads = rebuild_recorded(&arr, &recs, doff);
    let q = l.q.expect("RAID6");
    assert!(
        chunks_read(&reads[q], geo.stripes())[s as usize] > 0,
        "Q of stripe {s} was never read"
    );
}

/// Two members missing: the first rebuilt needs P and Q (the other may be a data block),
/// so its runs read them, and both come back exact. Were Q left out there, each such
/// stripe would be read again on its own (a read per member per stripe).
#[test]
fn a_raid6_rebuild_of_two_missing_members_is_exact_and_reads_by_runs() {
    let dir = TempDir::new("rk-rreads").expect("temp dir");
    let (ps, doff) = make(&dir);
    let (arr, recs) = degraded(&dir, &ps, MEMBERS - 2);
    let reads = rebuild_recorded(&arr, &recs, doff);
    let stripes = arr.geometry().stripes();
    let ios: usize = reads.iter().map(Vec::len).sum();
    // By runs of 16 stripes: 4 members × (a run each for the first role, a few pieces
    // each for the second) — far fewer than a read per member per stripe.
    assert!(
        (ios as u64) < 2 * stripes,
        "{ios} member reads for {stripes} stripes"
    );
}
