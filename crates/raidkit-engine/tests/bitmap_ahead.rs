//! Bitmap bits ahead of sequential streams (issue 16): a write that needs a new bitmap bit
//! and continues a recent write also sets the next `bits_ahead` bits in the same round, so
//! a sequential writer pays one bitmap round per several chunks. The window grows with the
//! stream (as long as it has written, 4 to 64 MiB), so a long stream pays a round per
//! doubling, then one per 64 MiB; a random writer, and a degraded array, set only the bits
//! their writes cover. Every data write still finds its
//! own bit on every live member's on-disk bitmap, and marking the array clean clears the
//! bits set ahead too.

use raidkit_engine::bitmap::bits_ahead;
use raidkit_engine::create::create;
use raidkit_engine::sb::probe;
use raidkit_engine::{assemble, Array, AssembleOptions, BlockDev, FileDev};
use raidkit_format::bitmap::{bit_is_set, BITMAP_SB_BYTES};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The bitmap chunk: 1 MiB, as in the slow-remote benchmark.
const CHUNK: u64 = 1 << 20;
/// Chunks the tests look at (the array has a few more).
const CHUNKS: u64 = 24;

/// A member that counts its bitmap writes and checks, at every data write, that the bits
/// covering it are on the on-disk bitmap of every member still live.
struct Watch {
    files: Arc<Vec<PathBuf>>,
    live: Arc<Vec<AtomicBool>>,
    bitmap_byte: u64,
    data_byte: u64,
    bitmap_writes: AtomicU64,
    violations: Arc<Mutex<Vec<String>>>,
}

/// Is bit `i` set in the bitmap stored in `file` (bitmap at byte `bitmap_byte`)?
fn bit_on(file: &PathBuf, bitmap_byte: u64, i: u64) -> bool {
    let mut b = [0u8; 1];
    std::fs::File::open(file)
        .unwrap()
        .read_exact_at(&mut b, bitmap_byte + BITMAP_SB_BYTES as u64 + i / 8)
        .unwrap();
    bit_is_set(&b, i % 8)
}

impl Hooks for Watch {
    fn write(&self, inner: &dyn BlockDev, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset == self.bitmap_byte {
            self.bitmap_writes.fetch_add(1, Ordering::SeqCst);
        } else if offset >= self.data_byte {
            let first = (offset - self.data_byte) / CHUNK;
            let last = (offset - self.data_byte + buf.len() as u64 - 1) / CHUNK;
            for i in first..=last {
                for (m, f) in self.files.iter().enumerate() {
                    if self.live[m].load(Ordering::SeqCst) && !bit_on(f, self.bitmap_byte, i) {
                        self.violations
                            .lock()
                            .unwrap()
                            .push(format!("data write to chunk {i} before its bit was on {m}"));
                    }
                }
            }
        }
        inner.write_at(buf, offset)
    }
}

struct Rig {
    _dir: TempDir,
    arr: Array,
    watch: Vec<Arc<Hooked<Watch>>>,
    live: Arc<Vec<AtomicBool>>,
    /// Chunks the test looks at (the array has a few more).
    chunks: u64,
    /// The chunk the rig's first write makes the array active with (no test writes near
    /// it): the last one looked at.
    last: u64,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_chunks(CHUNKS)
    }

    /// A 2-member RAID1 with bitmap chunks of 1 MiB, assembled over watched members,
    /// made active by a 4 KiB write into chunk `chunks - 1` (`last`).
    fn with_chunks(chunks: u64) -> Rig {
        let last = chunks - 1;
        let dir = TempDir::new("rk-bmahead").unwrap();
        let files = member_files(dir.path(), 2);
        let mut o = create_options(Level::Raid1, &files);
        o.create_size = Some((chunks + 8) * CHUNK);
        o.bitmap = true;
        o.bitmap_chunk_bytes = Some(CHUNK);
        o.assume_clean = true;
        create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
        let d = FileDev::open(&files[0], false).unwrap();
        let (sb, _) = probe(&d).unwrap().found.into_iter().next().unwrap();
        let bitmap_byte = sb.bitmap_sector(d.size_bytes() / 512).unwrap() * 512;
        let files = Arc::new(files);
        let live: Arc<Vec<AtomicBool>> = Arc::new((0..2).map(|_| AtomicBool::new(true)).collect());
        let violations = Arc::new(Mutex::new(Vec::new()));
        let watch: Vec<Arc<Hooked<Watch>>> = files
            .iter()
            .map(|p| {
                let hooks = Watch {
                    files: files.clone(),
                    live: live.clone(),
                    bitmap_byte,
                    data_byte: sb.data_offset() * 512,
                    bitmap_writes: AtomicU64::new(0),
                    violations: violations.clone(),
                };
                Arc::new(Hooked::new(FileDev::open(p, true).unwrap(), hooks))
            })
            .collect();
        let devs = members(&watch);
        let opts = AssembleOptions {
            writable: true,
            ..Default::default()
        };
        let arr = assemble(devs, &opts).unwrap();
        assert!(arr.size_bytes() >= chunks * CHUNK);
        arr.write(last * CHUNK, &[9; 4096]).unwrap();
        assert_eq!(arr.bitmap_chunk_sectors(), Some(CHUNK / 512));
        Rig {
            _dir: dir,
            arr,
            watch,
            live,
            chunks,
            last,
        }
    }

    fn bitmap_writes(&self) -> Vec<u64> {
        self.watch
            .iter()
            .map(|w| w.bitmap_writes.load(Ordering::SeqCst))
            .collect()
    }

    /// Write 1 MiB into each chunk of `chunks`, in order; the bitmap writes each member
    /// saw meanwhile, and the bitmap rounds run.
    fn write_chunks(&self, chunks: &[u64]) -> (Vec<u64>, u64) {
        let before = self.bitmap_writes();
        let rounds = self.arr.bitmap_flushes();
        for &c in chunks {
            self.arr
                .write(c * CHUNK, &vec![c as u8 + 1; CHUNK as usize])
                .unwrap();
        }
        let writes = self
            .bitmap_writes()
            .iter()
            .zip(before)
            .map(|(a, b)| a - b)
            .collect();
        (writes, self.arr.bitmap_flushes() - rounds)
    }

    /// The set bits on member `m`'s on-disk bitmap.
    fn bits_on(&self, m: usize) -> Vec<u64> {
        let w = &self.watch[0];
        (0..self.chunks)
            .filter(|&i| bit_on(&w.files[m], w.bitmap_byte, i))
            .collect()
    }

    fn violations(&self) -> Vec<String> {
        self.watch[0].violations.lock().unwrap().clone()
    }

    fn check_data(&self, chunks: &[u64]) {
        let mut b = vec![0u8; CHUNK as usize];
        for &c in chunks {
            self.arr.read(c * CHUNK, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == c as u8 + 1), "data of chunk {c}");
        }
    }
}

#[test]
fn a_sequential_writer_sets_bits_ahead_in_fewer_rounds_and_clean_clears_them() {
    assert_eq!(
        bits_ahead(CHUNK / 512, 2 * CHUNK / 512),
        4,
        "at least 4 MiB ahead"
    );
    assert_eq!(
        bits_ahead(CHUNK / 512, 7 * CHUNK / 512),
        7,
        "as long as the stream"
    );
    let r = Rig::new();
    // Chunks 0..14 in order. Chunk 0 continues nothing: its own bit. Chunk 1 continues
    // chunk 0 (a 2 MiB stream): bits 1..=5. Chunk 6 (a 7 MiB stream): bits 6..=13. Three
    // rounds, not 14.
    let stream: Vec<u64> = (0..14).collect();
    let (writes, rounds) = r.write_chunks(&stream);
    assert_eq!(rounds, 3, "bitmap rounds for a 14-chunk sequential stream");
    assert_eq!(writes, vec![3, 3], "bitmap writes per member");
    assert_eq!(r.violations(), Vec::<String>::new());
    // The stream's bits and the first write's chunk.
    let mut want: Vec<u64> = (0..14).collect();
    want.push(r.last);
    for m in 0..2 {
        assert_eq!(r.bits_on(m), want, "on-disk bits of member {m}");
    }
    r.check_data(&stream);
    r.arr.mark_clean().unwrap();
    for m in 0..2 {
        assert_eq!(r.bits_on(m), Vec::<u64>::new(), "bits after clean on {m}");
    }
}

#[test]
fn a_long_stream_grows_its_window_up_to_64_mib() {
    assert_eq!(
        bits_ahead(CHUNK / 512, 127 * CHUNK / 512),
        64,
        "at most 64 MiB ahead"
    );
    let r = Rig::with_chunks(200);
    // Rounds at chunks 0 (its own bit), 1 (bits 1..=5), 6 (..=13), 14 (a 15 MiB stream:
    // ..=29), 30 (..=61), 62 (..=125) and 126 (a 127 MiB stream, window capped at 64 MiB:
    // ..=190): 7 rounds for 140 chunks (a fixed 4 MiB window: 29).
    let stream: Vec<u64> = (0..140).collect();
    let (writes, rounds) = r.write_chunks(&stream);
    assert_eq!(rounds, 7, "bitmap rounds for a 140-chunk sequential stream");
    assert_eq!(writes, vec![7, 7], "bitmap writes per member");
    assert_eq!(r.violations(), Vec::<String>::new());
    let mut want: Vec<u64> = (0..=190).collect();
    want.push(r.last);
    for m in 0..2 {
        assert_eq!(r.bits_on(m), want, "on-disk bits of member {m}");
    }
    r.check_data(&[0, 63, 127, 139]);
    r.arr.mark_clean().unwrap();
    for m in 0..2 {
        assert_eq!(r.bits_on(m), Vec::<u64>::new(), "bits after clean on {m}");
    }
}

#[test]
fn a_random_writer_sets_only_its_own_bits() {
    let r = Rig::new();
    // No chunk here begins where another written chunk ends.
    let chunks = [9, 2, 14, 0, 7, 12, 4, 18];
    let (writes, rounds) = r.write_chunks(&chunks);
    assert_eq!(rounds, chunks.len() as u64);
    assert_eq!(writes, vec![chunks.len() as u64; 2]);
    assert_eq!(r.violations(), Vec::<String>::new());
    let mut want: Vec<u64> = chunks.to_vec();
    want.push(r.last);
    want.sort_unstable();
    for m in 0..2 {
        assert_eq!(r.bits_on(m), want, "on-disk bits of member {m}");
    }
    r.check_data(&chunks);
}

#[test]
fn a_degraded_array_sets_no_bits_ahead() {
    let r = Rig::new();
    r.live[1].store(false, Ordering::SeqCst);
    r.arr.fail_member(1, "test").unwrap();
    let stream: Vec<u64> = (0..6).collect();
    let (writes, rounds) = r.write_chunks(&stream);
    assert_eq!(rounds, 6, "one round per new chunk while degraded");
    assert_eq!(writes[0], 6, "bitmap writes on the member that stays");
    assert_eq!(r.violations(), Vec::<String>::new());
    let mut want = stream.clone();
    want.push(r.last);
    assert_eq!(r.bits_on(0), want);
    r.check_data(&stream);
}

#[test]
fn a_stream_whose_writes_overtake_each_other_keeps_its_length() {
    let r = Rig::with_chunks(80);
    // Chunks 0..=40 with chunk 8 written before chunk 7 (writes in flight at once arrive
    // out of order). Chunk 8 begins a stream of its own; chunk 7 joins it to the first,
    // so the window goes on growing: rounds at chunks 0, 1 (bits ..=5), 6 (..=13), 14 (a
    // 15 MiB stream: ..=29) and 30 (..=61). Taken as a new 2 MiB stream from chunk 8, it
    // would need a sixth (chunk 14: ..=21, 22: ..=37, 38: ..=69).
    let mut stream: Vec<u64> = (0..=40).collect();
    stream.swap(7, 8);
    let (writes, rounds) = r.write_chunks(&stream);
    assert_eq!(rounds, 5, "bitmap rounds");
    assert_eq!(writes, vec![5, 5], "bitmap writes per member");
    assert_eq!(r.violations(), Vec::<String>::new());
    let mut want: Vec<u64> = (0..=61).collect();
    want.push(r.last);
    for m in 0..2 {
        assert_eq!(r.bits_on(m), want, "on-disk bits of member {m}");
    }
    r.check_data(&[7, 8, 40]);
}
