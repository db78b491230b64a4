//! What the end-to-end engine tests share: an array of any level made with random writes
//! against an in-memory model, and whole-array reads.
#![allow(dead_code)] // each test crate uses its own part

use raidkit_engine::assemble::{assemble_paths, AssembleOptions};
use raidkit_engine::create::create;
use raidkit_engine::sb::Metadata;
use raidkit_engine::EngineError;
use raidkit_layout::{names, Level};
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::pattern::pattern_word;
use raidkit_testkit::tempdir::TempDir;
use std::path::PathBuf;

pub struct Rng(pub u64, pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.1 += 1;
        pattern_word(self.0, self.1)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn ro() -> AssembleOptions {
    AssembleOptions::default()
}
pub fn rw() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..Default::default()
    }
}

pub struct Case {
    pub level: Level,
    pub layout: &'static str,
    pub n: usize,
    pub chunk_k: u64,
    pub meta: &'static str,
    pub member_mib: u64,
}

impl Case {
    /// A case on 1.2 metadata (the default).
    pub fn v12(
        level: Level,
        layout: &'static str,
        n: usize,
        chunk_k: u64,
        member_mib: u64,
    ) -> Case {
        Case {
            level,
            layout,
            n,
            chunk_k,
            meta: "1.2",
            member_mib,
        }
    }
}

pub fn make(c: &Case, dir: &TempDir) -> (Vec<PathBuf>, Vec<u8>) {
    let ps = member_files(dir.path(), c.n);
    let mut o = create_options(c.level, &ps);
    o.layout = Some(names::parse_layout(c.level, c.layout).unwrap());
    if c.level != Level::Raid1 && c.level != Level::Linear {
        o.chunk_bytes = Some(c.chunk_k * 1024);
    }
    o.metadata = Metadata::parse(c.meta).unwrap();
    o.create_size = Some(c.member_mib << 20);
    o.name = "t".into();
    let arr = create(&o, &mut |_, _| {}).unwrap();
    let size = arr.size_bytes() as usize;
    // Random writes against a model.
    let mut model = vec![0u8; size];
    let mut rng = Rng(c.n as u64 * 1000 + c.chunk_k, 0);
    let stripe = (c.chunk_k * 1024) as usize * c.n;
    for round in 0..60 {
        let len = match round % 4 {
            0 => 1 + rng.below(5000) as usize,
            1 => 512 * (1 + rng.below(64) as usize),
            2 => stripe * (1 + rng.below(3) as usize),
            _ => 1 + rng.below(300_000) as usize,
        }
        .min(size);
        let off = if round % 5 == 0 {
            (rng.below((size - len) as u64 / 512) * 512) as usize
        } else {
            rng.below((size - len + 1) as u64) as usize
        };
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        arr.write(off as u64, &data).unwrap();
        model[off..off + len].copy_from_slice(&data);
        if round % 7 == 0 {
            let roff = rng.below(size as u64 - 4096) as usize;
            let mut b = vec![0u8; 4096];
            arr.read(roff as u64, &mut b).unwrap();
            assert_eq!(b, model[roff..roff + 4096], "read-back at {roff}");
        }
    }
    arr.stop().unwrap();
    (ps, model)
}

pub fn read_all(ps: &[PathBuf], opts: &AssembleOptions) -> Result<Vec<u8>, EngineError> {
    let arr = assemble_paths(ps, opts)?;
    let mut out = vec![0u8; arr.size_bytes() as usize];
    for (i, ch) in out.chunks_mut(1 << 20).enumerate() {
        arr.read((i as u64) << 20, ch)?;
    }
    Ok(out)
}
