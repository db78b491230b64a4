//! A set of 2–6 members with crossed fields: format validation never panics and keeps its
//! promises, and the engine's `assemble` over the members that pass it never panics,
//! aborts or allocates without bound.
//!
//! The input drives a small builder: one array template (metadata 1.0/1.1/1.2/0.90, level,
//! layout, chunk, device count, offsets, events, an optional bitmap and bad-block log),
//! then per member a few "crossings" (another UUID, role, events, level, offsets, feature
//! bits, reshape fields, bitmap fields) and raw byte flips in the metadata (with or
//! without the checksum fixed). Each member is a `MemDev` of 128 KiB – 2 MiB.
//!
//! Checked per member, for every superblock found at any location (what assembly does
//! after wiring in `raidkit_format::validate`): `validate()`, `areas()`, the bitmap
//! (`check_bitmap`) and the bad-block log parse never panic, and what `areas()` accepts
//! really lies inside the device without overlaps. The engine's `assemble` (which
//! validates every member itself) then gets every member, and the members that pass on
//! their own (read-only, with and without `--force`), and reads at a few places.
//! libFuzzer's `-malloc_limit_mb` (set by run-short.sh) turns an allocation sized by an
//! untrusted field into a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_engine::{assemble, AssembleOptions, BlockDev, MemDev};
use raidkit_format::badblocks;
use raidkit_format::bitmap::BitmapSuper;
use raidkit_format::v090::{self, disk_state, sb_state, DiskDescriptor, SuperblockV090};
use raidkit_format::v1::{feature, Minor, SuperblockV1};
use raidkit_format::validate::MemberAreas;
use std::sync::Arc;

/// Reads the input as a stream of small numbers; zeros once it runs out.
struct Input<'a> {
    d: &'a [u8],
    i: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// True one time in `n`.
    fn one_in(&mut self, n: u8) -> bool {
        self.u8() % n == 0
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[usize::from(self.u8()) % xs.len()]
    }
}

const UUIDS: [[u8; 16]; 2] = [[0x11; 16], [0x22; 16]];
const LEVELS: [i32; 8] = [1, 4, 5, 6, 10, 0, -1, 5];
const LAYOUTS: [u32; 8] = [0, 1, 2, 3, 5, 18, 0x102, 0x201];
const CHUNKS: [u32; 5] = [8, 16, 32, 128, 0];

/// What every member shares before crossing.
struct Template {
    kind: u8, // 0, 1: 1.2; 2: 1.1; 3: 1.0; 4: 0.90
    level: i32,
    layout: u32,
    chunk: u32,
    raid_disks: u32,
    data_offset: u64,
    events: u64,
    bitmap: bool,
    bitmap_chunk: u32,
    bblog: bool,
    reshape: bool,
}

fn template(inp: &mut Input, n: u32) -> Template {
    let kind = inp.u8() % 5;
    Template {
        kind,
        level: if inp.one_in(16) {
            inp.u32() as i32
        } else {
            inp.pick(&LEVELS)
        },
        layout: if inp.one_in(16) {
            inp.u32()
        } else {
            inp.pick(&LAYOUTS)
        },
        chunk: if inp.one_in(16) {
            inp.u32()
        } else {
            inp.pick(&CHUNKS)
        },
        raid_disks: match inp.u8() % 8 {
            0 => inp.u32(),
            1 => n.saturating_sub(1).max(1),
            2 => u32::from(inp.u8()),
            _ => n,
        },
        data_offset: if inp.one_in(8) {
            inp.u64() % 4096
        } else {
            inp.pick(&[24, 40, 64, 128, 256])
        },
        events: u64::from(inp.u16()),
        bitmap: inp.one_in(3),
        bitmap_chunk: if inp.one_in(8) {
            inp.u32()
        } else {
            1 << (12 + inp.u8() % 16)
        },
        bblog: inp.one_in(2),
        reshape: inp.one_in(6),
    }
}

/// Build one member's image: superblock, bitmap, bad-block log; then crossings and flips.
fn member(inp: &mut Input, t: &Template, n: u32, m: u32) -> Vec<u8> {
    let dev_sectors = u64::from(inp.pick(&[256u32, 512, 1024, 2048, 4096]));
    let mut img = vec![0u8; dev_sectors as usize * 512];
    let uuid = if inp.one_in(8) { UUIDS[1] } else { UUIDS[0] };
    let mut events = t.events;
    if inp.one_in(4) {
        events = events.wrapping_add(u64::from(inp.u8() % 4)).wrapping_sub(1);
    }
    let (sb_at, bitmap_at, bblog_at) = if t.kind == 4 {
        v090_meta(inp, t, n, m, uuid, events, dev_sectors, &mut img)
    } else {
        v1_meta(inp, t, n, m, uuid, events, dev_sectors, &mut img)
    };
    if let Some(at) = bitmap_at {
        let sync = if inp.one_in(6) {
            inp.u64()
        } else {
            dev_sectors
        };
        let mut b = BitmapSuper::new_default(uuid, sync, t.bitmap_chunk);
        b.events = events;
        if inp.one_in(10) {
            b.version = u32::from(inp.u8() % 7);
            b.nodes = u32::from(inp.u8());
        }
        put(&mut img, at, &b.encode());
    }
    if let Some(at) = bblog_at {
        for k in 0..usize::from(inp.u8() % 4) {
            put(&mut img, at + 8 * k, &inp.u64().to_le_bytes());
        }
        put(&mut img, at + 8 * 4, &u64::MAX.to_le_bytes());
    }
    // Raw flips in the metadata, with the checksum fixed or not.
    for _ in 0..inp.u8() % 4 {
        let off = usize::from(inp.u16()) % 4096;
        let v = inp.u8();
        if let Some(b) = img.get_mut(sb_at + off) {
            *b = v;
        }
    }
    if inp.one_in(2) && t.kind != 4 {
        if let Ok(c) = SuperblockV1::checksum(&img[sb_at..(sb_at + 4096).min(img.len())]) {
            put(&mut img, sb_at + 216, &c.to_le_bytes());
        }
    } else if inp.one_in(2) && t.kind == 4 {
        if let Ok(c) = SuperblockV090::checksum(&img[sb_at..]) {
            put(&mut img, sb_at + 38 * 4, &c.to_le_bytes());
        }
    }
    img
}

/// Write a 0.90 superblock; returns (superblock, bitmap, bad-block log) byte offsets.
#[allow(clippy::too_many_arguments)]
fn v090_meta(
    inp: &mut Input,
    t: &Template,
    n: u32,
    m: u32,
    uuid: [u8; 16],
    events: u64,
    dev_sectors: u64,
    img: &mut [u8],
) -> (usize, Option<usize>, Option<usize>) {
    let so = v090::super_offset(dev_sectors).unwrap_or(0);
    let size = if inp.one_in(8) {
        inp.u32()
    } else {
        (so / 2) as u32
    };
    let disks: [DiskDescriptor; v090::MD_SB_DISKS] = std::array::from_fn(|i| DiskDescriptor {
        number: i as u32,
        major: 0,
        minor: 0,
        raid_disk: i as u32,
        state: if (i as u32) < n {
            disk_state::ACTIVE | disk_state::SYNC
        } else {
            0
        },
    });
    let mut this = disks[(m as usize) % v090::MD_SB_DISKS];
    if inp.one_in(8) {
        this.number = u32::from(inp.u8());
    }
    let mut sb = SuperblockV090 {
        minor_version: if t.reshape { 91 } else { 90 },
        patch_version: 0,
        uuid_words: [0; 4],
        ctime: 1,
        level: if inp.one_in(10) {
            inp.pick(&LEVELS)
        } else {
            t.level
        },
        size_kib: size,
        nr_disks: n,
        raid_disks: t.raid_disks.min(40),
        md_minor: 0,
        utime: 1,
        state: sb_state::CLEAN
            | if t.bitmap {
                sb_state::BITMAP_PRESENT
            } else {
                0
            },
        active_disks: n,
        working_disks: n,
        failed_disks: 0,
        spare_disks: 0,
        events,
        cp_events: events,
        recovery_cp: u32::MAX,
        reshape_position: if t.reshape { inp.u64() % 4096 } else { 0 },
        new_level: t.level,
        delta_disks: if t.reshape {
            i32::from(inp.u8() % 3) - 1
        } else {
            0
        },
        new_layout: t.layout,
        new_chunk: t.chunk.wrapping_mul(512),
        layout: t.layout,
        chunk_size: t.chunk.wrapping_mul(512),
        disks,
        this_disk: this,
    };
    sb.set_uuid(uuid);
    let at = so as usize * 512;
    put(img, at, &sb.encode());
    (at, t.bitmap.then_some(at + 4096), None)
}

/// Write a 1.x superblock; returns (superblock, bitmap, bad-block log) byte offsets.
#[allow(clippy::too_many_arguments)]
fn v1_meta(
    inp: &mut Input,
    t: &Template,
    n: u32,
    m: u32,
    uuid: [u8; 16],
    events: u64,
    dev_sectors: u64,
    img: &mut [u8],
) -> (usize, Option<usize>, Option<usize>) {
    let minor = match t.kind {
        2 => Minor::V1,
        3 => Minor::V0,
        _ => Minor::V2,
    };
    let so = minor.super_offset(dev_sectors);
    let mut sb = SuperblockV1::new_default(uuid, "fuzz", 1, n);
    sb.level = if inp.one_in(10) {
        inp.pick(&LEVELS)
    } else {
        t.level
    };
    sb.layout = t.layout;
    sb.chunksize = t.chunk;
    sb.raid_disks = if inp.one_in(10) {
        u32::from(inp.u8())
    } else {
        t.raid_disks.min(1920)
    };
    sb.super_offset = so;
    sb.dev_number = if inp.one_in(8) {
        u32::from(inp.u8())
    } else {
        m
    };
    if inp.one_in(8) {
        let i = usize::from(inp.u8()) % sb.dev_roles.len();
        sb.dev_roles[i] = inp.pick(&[0, 1, 2, 0xffff, 0xfffe, 0xfffd, 0xff00]);
    }
    let (data_offset, data_size) = if minor == Minor::V0 {
        let reserve = 16u64;
        (0, so.saturating_sub(reserve))
    } else {
        (t.data_offset, dev_sectors.saturating_sub(t.data_offset))
    };
    sb.data_offset = if inp.one_in(12) {
        inp.u64() % (dev_sectors * 2)
    } else {
        data_offset
    };
    sb.data_size = if inp.one_in(12) {
        inp.u64() % (dev_sectors * 2)
    } else {
        data_size
    }
    .max(10);
    let c = u64::from(t.chunk.max(1));
    sb.size = if inp.one_in(12) {
        inp.u64()
    } else {
        data_size / c * c
    };
    sb.events = events;
    sb.resync_offset = if inp.one_in(4) { 0 } else { u64::MAX };
    if t.bitmap {
        sb.feature_map |= feature::BITMAP_OFFSET;
        sb.bitmap_offset = if minor == Minor::V0 { -16 } else { 8 };
    }
    if t.bblog {
        sb.bblog_size = 8;
        sb.bblog_offset = if minor == Minor::V0 { -8 } else { 16 };
        if inp.one_in(2) {
            sb.feature_map |= feature::BAD_BLOCKS;
        }
    }
    if t.reshape {
        sb.feature_map |= feature::RESHAPE_ACTIVE;
        sb.delta_disks = i32::from(inp.u8() % 3) - 1;
        sb.new_level = sb.level;
        sb.new_layout = sb.layout;
        sb.new_chunk = sb.chunksize;
        sb.reshape_position = inp.u64() % 4096;
        if inp.one_in(2) {
            sb.feature_map |= feature::NEW_OFFSET;
            sb.new_offset = i32::from(inp.u8() as i8);
        }
    }
    if inp.one_in(12) {
        sb.feature_map ^= 1 << (inp.u8() % 13);
    }
    if inp.one_in(12) {
        sb.recovery_offset = inp.u64() % dev_sectors;
        sb.feature_map |= feature::RECOVERY_OFFSET;
    }
    let at = so as usize * 512;
    let enc = sb.encode();
    put(img, at, &enc[..sb.write_len()]);
    let rel = |off: i32| (so as i64 + i64::from(off)).max(0) as usize * 512;
    (
        at,
        t.bitmap.then(|| rel(sb.bitmap_offset)),
        t.bblog.then(|| rel(sb.bblog_offset)),
    )
}

fn put(img: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = img.get_mut(at..at.saturating_add(bytes.len())) {
        dst.copy_from_slice(bytes);
    }
}

/// What `areas()` accepted must hold: every area inside the device, none overlapping
/// (except the data area with its reshape twin), the bitmap room after the bitmap.
fn check_areas(a: &MemberAreas, dev: u64) {
    use raidkit_format::{Area, Extent};
    let mut all: Vec<(Area, Extent)> = vec![(Area::Superblock, a.superblock), (Area::Data, a.data)];
    all.extend(a.new_data.map(|e| (Area::NewData, e)));
    all.extend(a.bblog.map(|e| (Area::BadBlockLog, e)));
    all.extend(a.ppl.map(|e| (Area::Ppl, e)));
    all.extend(a.bitmap_start.map(|b| (Area::Bitmap, Extent::at(b, 1))));
    for (i, (ax, x)) in all.iter().enumerate() {
        assert!(x.end <= dev, "{ax:?} {x:?} beyond {dev}");
        for (ay, y) in &all[i + 1..] {
            let twins = matches!((ax, ay), (Area::Data, Area::NewData));
            assert!(
                twins || !x.overlaps(y),
                "{ax:?} {x:?} overlaps {ay:?} {y:?}"
            );
        }
    }
    if let Some(b) = a.bitmap_start {
        assert!(a.bitmap_room_end > b && a.bitmap_room_end <= dev);
    }
}

/// Every check on every superblock of `img`; true if all that were found pass.
fn member_passes(img: &[u8]) -> bool {
    let dev = img.len() as u64 / 512;
    let mut ok = true;
    let mut found = 0;
    for minor in [Minor::V2, Minor::V1, Minor::V0] {
        let at = minor.super_offset(dev) as usize * 512;
        let Some(buf) = img.get(at..at + 4096) else {
            continue;
        };
        let Ok((sb, csum_ok)) = SuperblockV1::parse_lenient(buf) else {
            continue;
        };
        if sb.super_offset != minor.super_offset(dev) {
            continue;
        }
        found += 1;
        let need = sb.bitmap_sync_size();
        let areas = sb.validate().and_then(|()| sb.areas(dev));
        ok &= csum_ok && areas.is_ok() && extras(img, &areas, need, sb.bblog_shift);
    }
    if let Some(so) = v090::super_offset(dev) {
        let at = so as usize * 512;
        if let Ok((sb, csum_ok)) = SuperblockV090::parse_lenient(&img[at..at + 4096]) {
            found += 1;
            let areas = sb.validate().and_then(|()| sb.areas(dev));
            ok &= csum_ok && areas.is_ok() && extras(img, &areas, sb.bitmap_sync_size(), 0);
        }
    }
    ok && found > 0
}

/// The bitmap and bad-block log of a placed member: checked, then read within bounds.
fn extras(
    img: &[u8],
    areas: &raidkit_format::Result<MemberAreas>,
    need: Option<u64>,
    shift: u8,
) -> bool {
    let Ok(a) = areas else { return false };
    check_areas(a, img.len() as u64 / 512);
    let mut ok = true;
    if let Some(b) = a.bitmap_start {
        let at = b as usize * 512;
        ok &= match BitmapSuper::parse(&img[at..(at + 256).min(img.len())]) {
            Ok(bsb) => match (need, a.check_bitmap(&bsb, need.unwrap_or(0))) {
                (Some(_), Ok(e)) => {
                    assert!(e.end <= a.bitmap_room_end);
                    // What a reader may now allocate is within the device.
                    assert!(bsb.disk_bytes() <= (a.bitmap_room_end - b) * 512);
                    true
                }
                _ => false,
            },
            Err(_) => false,
        };
    }
    if let Some(e) = a.bblog {
        let bytes = &img[e.start as usize * 512..e.end as usize * 512];
        let _ = badblocks::parse(bytes, shift);
    }
    ok
}

/// Assemble `devs` read-only (with and without force) and read a few places.
fn assemble_and_read(devs: &[Arc<dyn BlockDev>], read_at: u64) {
    for force in [false, true] {
        let opts = AssembleOptions {
            writable: false,
            force,
            report_only: true,
            ..Default::default()
        };
        if let Ok(arr) = assemble(devs.to_vec(), &opts) {
            let size = arr.size_bytes();
            let mut buf = vec![0u8; 4096];
            for off in [
                0,
                size.saturating_sub(4096),
                read_at % size.max(1) / 512 * 512,
            ] {
                if off + 4096 <= size {
                    let _ = arr.read(off, &mut buf);
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input { d: data, i: 0 };
    let n = 2 + u32::from(inp.u8() % 5);
    let t = template(&mut inp, n);
    let imgs: Vec<Vec<u8>> = (0..n).map(|m| member(&mut inp, &t, n, m)).collect();
    let dev = |i: usize, img: &Vec<u8>| {
        let d = MemDev::new(&format!("m{i}"), img.len() as u64);
        d.write_at(img, 0).expect("in-memory write");
        Arc::new(d) as Arc<dyn BlockDev>
    };
    let passes: Vec<bool> = imgs.iter().map(|img| member_passes(img)).collect();
    let all: Vec<Arc<dyn BlockDev>> = imgs.iter().enumerate().map(|(i, m)| dev(i, m)).collect();
    let passing: Vec<Arc<dyn BlockDev>> = all
        .iter()
        .zip(&passes)
        .filter(|(_, &p)| p)
        .map(|(d, _)| d.clone())
        .collect();
    let read_at = inp.u64();
    // The engine validates every member itself: all of them (it must refuse the bad ones
    // without a panic or an unbounded allocation), and the ones that pass on their own
    // (which get further: roles, events, bitmap, reads).
    assemble_and_read(&all, read_at);
    if !passing.is_empty() && passing.len() < all.len() {
        assemble_and_read(&passing, read_at);
    }
});
