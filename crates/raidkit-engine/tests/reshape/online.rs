//! Client IO while the data moves: a writer and a reader run against the array during
//! the whole reshape (routed by position, waiting where md waits), and everything they
//! wrote is there afterwards. Reverting at random points brings the array back to its old
//! shape with every byte intact.

use crate::common::*;
use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::jobs::reshape::{
    continue_reshape, reshape, revert, ReshapeEnd, ReshapeOptions, ReshapeRequest,
};
use raidkit_engine::Array;
use raidkit_layout::{names, Level};
use raidkit_testkit::pattern::fill_tagged;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A client of the array: writes random ranges of the first half (the model follows),
/// reads them back, and checks that the second half keeps the original pattern.
struct Client {
    stop: Arc<AtomicBool>,
    model: Arc<Mutex<Vec<u8>>>,
    handles: Vec<std::thread::JoinHandle<u64>>,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

impl Client {
    fn start(arr: Arc<Array>, m: &Made) -> Client {
        let stop = Arc::new(AtomicBool::new(false));
        let mut init = vec![0u8; m.bytes as usize];
        fill_tagged(m.seed, 0, &mut init);
        let model = Arc::new(Mutex::new(init));
        let half = m.bytes / 2 / 4096 * 4096;
        let mut handles = Vec::new();
        {
            let (arr, stop, model) = (arr.clone(), stop.clone(), model.clone());
            handles.push(std::thread::spawn(move || {
                let mut s = 0x1234_5678u64;
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let len = (xorshift(&mut s) % 64 + 1) * 512;
                    let off = xorshift(&mut s) % (half - len) / 512 * 512;
                    let mut buf = vec![0u8; len as usize];
                    fill_tagged(xorshift(&mut s), off, &mut buf);
                    arr.current().write(off, &buf).unwrap();
                    model.lock().unwrap()[off as usize..(off + len) as usize].copy_from_slice(&buf);
                    let mut back = vec![0u8; len as usize];
                    arr.current().read(off, &mut back).unwrap();
                    assert!(back == buf, "read back after a write at {off} differs");
                    n += 1;
                }
                n
            }));
        }
        {
            let (arr, stop, model, bytes) = (arr, stop.clone(), model.clone(), m.bytes);
            handles.push(std::thread::spawn(move || {
                let mut s = 0x8765_4321u64;
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let len = (xorshift(&mut s) % 256 + 1) * 512;
                    let off = half + xorshift(&mut s) % (bytes - half - len) / 512 * 512;
                    let mut got = vec![0u8; len as usize];
                    arr.current().read(off, &mut got).unwrap();
                    let m = model.lock().unwrap();
                    assert!(
                        got[..] == m[off as usize..(off + len) as usize],
                        "a read at {off} during the reshape is wrong"
                    );
                    n += 1;
                }
                n
            }));
        }
        Client {
            stop,
            model,
            handles,
        }
    }

    /// Stop; returns the model and how many IOs each thread did.
    fn finish(self) -> (Vec<u8>, Vec<u64>) {
        self.stop.store(true, Ordering::Relaxed);
        let n = self
            .handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        (
            Arc::try_unwrap(self.model).unwrap().into_inner().unwrap(),
            n,
        )
    }
}

fn check_model(name: &str, arr: &Array, model: &[u8]) {
    let mut got = vec![0u8; model.len()];
    arr.read(0, &mut got).unwrap();
    if got != model {
        let bad = got.iter().zip(model).position(|(a, b)| a != b).unwrap();
        panic!("{name}: array byte {bad} differs from what was written");
    }
}

#[test]
fn client_io_during_reshapes() {
    for (name, level, layout, n, add_n, req) in [
        (
            "raid5 4->5",
            Level::Raid5,
            "left-symmetric",
            4usize,
            1usize,
            ReshapeRequest {
                raid_disks: Some(5),
                ..Default::default()
            },
        ),
        (
            "raid6 4->5",
            Level::Raid6,
            "left-symmetric",
            4,
            1,
            ReshapeRequest {
                raid_disks: Some(5),
                ..Default::default()
            },
        ),
        (
            "raid5 chunk",
            Level::Raid5,
            "left-symmetric",
            4,
            0,
            ReshapeRequest {
                chunk_sectors: Some(256),
                ..Default::default()
            },
        ),
        (
            "raid10 4->5",
            Level::Raid10,
            "n2",
            4,
            1,
            ReshapeRequest {
                raid_disks: Some(5),
                ..Default::default()
            },
        ),
    ] {
        let m = make(level, layout, n, "1.2", 64, add_n);
        let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
        let client = Client::start(arr.clone(), &m);
        // Small batches and a speed limit so the clients meet the window many times.
        let opts = ReshapeOptions {
            buffer_sectors: Some(1024),
            max_bytes_per_sec: Some(Arc::new(std::sync::atomic::AtomicU64::new(16 << 20))),
            checkpoint_every: std::time::Duration::from_millis(50),
            ..Default::default()
        };
        let req = ReshapeRequest {
            add: add(&m),
            ..req
        };
        let (cur, end) =
            reshape(&arr, &req, &opts, &mut |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(end, ReshapeEnd::Finished);
        let (model, ios) = client.finish();
        assert!(ios.iter().all(|&k| k > 10), "{name}: client IOs {ios:?}");
        check_model(name, &cur, &model);
        clean_check(name, &cur);
        cur.mark_clean().unwrap();
        drop(cur);
        drop(arr);
        let mut all = m.members.clone();
        all.extend(m.extra.iter().cloned());
        let again = assemble_paths(&all, &rw()).unwrap();
        check_model(name, &again, &model);
    }
}

#[test]
fn revert_at_random_points() {
    let mut seed = 0xfeed_beefu64;
    for (name, level, layout, n, req) in [
        (
            "raid5 4->5",
            Level::Raid5,
            "left-symmetric",
            4usize,
            ReshapeRequest {
                raid_disks: Some(5),
                ..Default::default()
            },
        ),
        (
            "raid5 ls->la",
            Level::Raid5,
            "left-symmetric",
            4,
            ReshapeRequest {
                layout: Some(names::parse_layout(Level::Raid5, "left-asymmetric").unwrap()),
                ..Default::default()
            },
        ),
        (
            "raid6 chunk",
            Level::Raid6,
            "left-symmetric",
            5,
            ReshapeRequest {
                chunk_sectors: Some(256),
                ..Default::default()
            },
        ),
    ] {
        for _ in 0..3 {
            let add_n = usize::from(req.raid_disks.is_some());
            let m = make(level, layout, n, "1.2", 64, add_n);
            let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
            let client = Client::start(arr.clone(), &m);
            let size = arr.size_bytes() / 512;
            let at = xorshift(&mut seed) % size;
            let opts = ReshapeOptions {
                buffer_sectors: Some(1024),
                stop_at: Some(at),
                ..Default::default()
            };
            let r = ReshapeRequest {
                add: add(&m),
                ..req.clone()
            };
            let (cur, end) = reshape(&arr, &r, &opts, &mut |_| {}).unwrap();
            let what = format!("{name}, reverted at {at}: {end:?}");
            let back =
                revert(&cur, &ReshapeOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
            let end = continue_reshape(&back, &ReshapeOptions::default(), &mut |_| {}).unwrap();
            assert_eq!(end, ReshapeEnd::Finished, "{what}");
            let (model, _) = client.finish();
            let last = arr.current();
            let g = last.geometry();
            assert_eq!(
                (
                    g.level,
                    g.raid_disks,
                    names::layout_name(g.level, g.layout),
                    g.chunk_sectors
                ),
                (level, n, layout.to_string(), 128),
                "{what}"
            );
            check_model(&what, &last, &model);
            clean_check(&what, &last);
        }
    }
}

/// Right after a revert, before anything moves the data back, the position the members
/// record is where the data stands: copies that happen to agree below it (the old places
/// of data moved forwards still hold it) are not taken for a move back, so a client write
/// there goes to the right side at once instead of failing for want of a mover.
#[test]
fn writes_right_after_a_revert() {
    for (name, level, n, req) in [
        (
            "raid5 4->5",
            Level::Raid5,
            4usize,
            ReshapeRequest {
                raid_disks: Some(5),
                ..Default::default()
            },
        ),
        (
            "raid6 chunk",
            Level::Raid6,
            5,
            ReshapeRequest {
                chunk_sectors: Some(256),
                ..Default::default()
            },
        ),
    ] {
        let add_n = usize::from(req.raid_disks.is_some());
        let m = make(level, "left-symmetric", n, "1.2", 64, add_n);
        let arr = Arc::new(assemble_paths(&m.members, &rw()).unwrap());
        let opts = ReshapeOptions {
            buffer_sectors: Some(1024),
            stop_at: Some(4608),
            ..Default::default()
        };
        let r = ReshapeRequest {
            add: add(&m),
            ..req.clone()
        };
        let (cur, end) = reshape(&arr, &r, &opts, &mut |_| {}).unwrap();
        let back = revert(&cur, &ReshapeOptions::default()).unwrap();
        let st = back.reshape_status().unwrap();
        let mut model = vec![0u8; m.bytes as usize];
        fill_tagged(m.seed, 0, &mut model);
        let p = st.recorded_sectors * 512;
        let off = p.saturating_sub(64 << 10);
        let mut buf = vec![0u8; (p - off) as usize];
        fill_tagged(0xabcd, off, &mut buf);
        back.write(off, &buf)
            .unwrap_or_else(|e| panic!("{name}: a write below the position: {e}"));
        model[off as usize..p as usize].copy_from_slice(&buf);
        let st = back.reshape_status().unwrap();
        assert_eq!(
            st.progress_sectors, st.recorded_sectors,
            "{name} ({end:?}): the progress after the revert"
        );
        let end = continue_reshape(&back, &ReshapeOptions::default(), &mut |_| {}).unwrap();
        assert_eq!(end, ReshapeEnd::Finished, "{name}");
        let last = arr.current();
        check_model(name, &last, &model);
        clean_check(name, &last);
    }
}
