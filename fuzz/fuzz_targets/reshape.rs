//! Reshape arithmetic and mdadm's backup record from hostile values: geometries and data
//! starts as a superblock could claim them, positions, and a 512-byte record. Nothing
//! panics; every step `next_step` plans stays within the array and moves forwards; every
//! located sector lies on a member of its geometry; a parsed record re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_format::backup::BackupRecord;
use raidkit_layout::reshape::{Direction, Reshape, Side, Step, StepEvidence};
use raidkit_layout::{Geometry, Level};

fn take<const N: usize>(d: &mut &[u8]) -> [u8; N] {
    let mut b = [0u8; N];
    let n = N.min(d.len());
    b[..n].copy_from_slice(&d[..n]);
    *d = &d[n..];
    b
}

fn geometry(d: &mut &[u8]) -> Option<Geometry> {
    let [lv, n, c, l] = take::<4>(d);
    let level = [Level::Raid4, Level::Raid5, Level::Raid6, Level::Raid10][usize::from(lv % 4)];
    let layout = match level {
        Level::Raid10 => 0x100 | u32::from(l % 4),
        _ => u32::from(l % 24),
    };
    let dev = u64::from(u16::from_le_bytes(take::<2>(d))) + 1;
    Geometry::new(
        level,
        layout,
        8u64 << (c % 5),
        usize::from(n % 12),
        dev,
        Vec::new(),
    )
    .ok()
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let rec = take::<512>(&mut d);
    if let Ok(r) = BackupRecord::parse(&rec) {
        assert_eq!(BackupRecord::parse(&r.encode()), Ok(r));
        let x = u64::from_le_bytes(take::<8>(&mut d));
        let _ = (
            r.check_within(x),
            r.needed(x, x % 2 == 0),
            r.position_after_restore(x, true),
        );
    }
    let (Some(old), Some(new)) = (geometry(&mut d), geometry(&mut d)) else {
        return;
    };
    let [dir, base, delta, jit] = take::<4>(&mut d);
    let direction = if dir % 2 == 0 {
        Direction::Forwards
    } else {
        Direction::Backwards
    };
    let base = u64::from(base) * 64 + 4096;
    let delta = u64::from(delta) * 8;
    let offs = |n: usize, moved: bool| -> Vec<u64> {
        (0..n)
            .map(|r| {
                let o = base + 8 * u64::from(jit.rotate_left(r as u32) % 4);
                match (moved, direction) {
                    (false, _) => o,
                    (true, Direction::Forwards) => o - delta.min(o),
                    (true, Direction::Backwards) => o + delta,
                }
            })
            .collect()
    };
    let (oo, no) = (offs(old.raid_disks, false), offs(new.raid_disks, true));
    let Ok(r) = Reshape::new(old, new, oo, no, direction) else {
        return;
    };
    let size = r.array_sectors();
    let [p0, p1, s0, s1] = take::<4>(&mut d).map(u64::from);
    let pos = (p0 * 256 + p1) * r.step_sectors() % (r.new_geometry().array_sectors() + 1);
    for s in [0, s0 * 97 + s1, size.saturating_sub(1), size] {
        if let Some(l) = r.locate(s, pos) {
            let (g, offsets) = match l.side {
                Side::Old => (r.old(), r.old_offsets()),
                Side::New => (r.new_geometry(), r.new_offsets()),
            };
            assert!(l.run >= 1 && !l.copies.is_empty());
            for c in &l.copies {
                assert!(c.role < g.raid_disks && c.sector >= offsets[c.role]);
            }
        }
        let _ = r.write_access(s, pos, pos, None);
    }
    // A few planned steps from the start: each stays within the array.
    let (mut p, mut rec_pos, mut backup) = (r.start_position(), r.start_position(), None);
    for _ in 0..8 {
        match r.next_step(p, rec_pos, backup) {
            Ok(Step::Move { from, to }) => {
                assert!(from < to && to <= r.new_geometry().array_sectors());
                p = if direction == Direction::Forwards {
                    to
                } else {
                    from
                };
            }
            Ok(Step::Checkpoint { position }) => {
                assert_eq!(position, p);
                rec_pos = p;
                backup = None;
            }
            Ok(Step::Backup { from, to }) => backup = Some((from, to)),
            Ok(Step::Done) | Err(_) => break,
        }
    }
    let _ = r.resume_needs_backup(pos);
    let _ = r.infer_progress(pos, 4, |a, b| {
        if (a ^ b) % 3 == 0 {
            StepEvidence::Copied
        } else {
            StepEvidence::Differ
        }
    });
});
