//! What a benchmark runs against: a file or block device, or an array assembled over
//! members that count the IOs going through them.

use super::{fill_random, ArrayInfo, MemberShare};
use crate::error::{Result, ToolsError};
use crate::stats::AtomicHistogram;
use raidkit_engine::assemble::{assemble, AssembleOptions};
use raidkit_engine::dev::{BlockDev, FileDev};
use raidkit_engine::Array;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Something to do IO on.
pub trait Target: Send + Sync {
    /// Read `buf.len()` bytes at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Usable size in bytes.
    fn size(&self) -> u64;
    /// Required buffer and offset alignment (1 when none).
    fn align(&self) -> u64 {
        1
    }
    /// Name for reports.
    fn name(&self) -> String;
    /// What kind of storage it is, for titles (`file on ext4`); None for arrays, whose
    /// [`ArrayInfo`] says more.
    fn kind(&self) -> Option<String> {
        None
    }
    /// Make completed writes durable (run at the end of a write workload, inside the
    /// measured time: data held in a write-back cache counts only once written out).
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A file or block device, optionally with O_DIRECT.
#[derive(Debug)]
pub struct FileTarget {
    file: File,
    path: PathBuf,
    size: u64,
    direct: bool,
    lbs: u64,
}

impl FileTarget {
    /// Open `path` (creating a file of `create_size` bytes if it does not exist).
    pub fn open(
        path: &Path,
        write: bool,
        direct: bool,
        create_size: Option<u64>,
    ) -> Result<FileTarget> {
        let name = path.display().to_string();
        if !path.exists() {
            let Some(sz) = create_size else {
                return Err(ToolsError::Invalid(format!(
                    "{name} does not exist; give --size to create it"
                )));
            };
            let f =
                File::create(path).map_err(|e| ToolsError::io(&name, "creating the file", e))?;
            fill_file(&f, sz).map_err(|e| ToolsError::io(&name, "filling the file", e))?;
        }
        let mut oo = OpenOptions::new();
        oo.read(true).write(write);
        if direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let file = oo.open(path).map_err(|e| {
            if direct && e.raw_os_error() == Some(libc::EINVAL) {
                ToolsError::Invalid(format!(
                    "{name}: this filesystem does not support O_DIRECT (tmpfs?); run without --direct"
                ))
            } else {
                ToolsError::io(&name, "opening", e)
            }
        })?;
        let meta = file
            .metadata()
            .map_err(|e| ToolsError::io(&name, "stat", e))?;
        let (size, lbs) = if meta.file_type().is_block_device() {
            let d = FileDev::open(path, false).map_err(|e| ToolsError::io(&name, "opening", e))?;
            (d.size_bytes(), u64::from(d.logical_block_size()))
        } else {
            (meta.len(), 512)
        };
        Ok(FileTarget {
            file,
            path: path.to_path_buf(),
            size,
            direct,
            lbs,
        })
    }
}

/// Write `size` bytes of non-zero pseudo-random data (so reads hit real blocks, not holes).
fn fill_file(f: &File, size: u64) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    fill_random(&mut buf, 1);
    let mut off = 0;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        f.write_all_at(&buf[..n], off)?;
        off += n as u64;
    }
    f.sync_all()
}

impl Target for FileTarget {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.file.write_all_at(buf, off)
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn align(&self) -> u64 {
        if self.direct {
            self.lbs.max(512)
        } else {
            1
        }
    }
    fn name(&self) -> String {
        self.path.display().to_string()
    }
    fn kind(&self) -> Option<String> {
        Some(crate::probe::kind_of(&self.path))
    }
}

/// IO counters of one member.
#[derive(Debug, Default)]
pub struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    lat_ns: AtomicHistogram,
}

impl Counters {
    /// `(reads, writes, read bytes, written bytes)`.
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
            self.read_bytes.load(Ordering::Relaxed),
            self.write_bytes.load(Ordering::Relaxed),
        )
    }
    /// Zero all counters.
    pub fn reset(&self) {
        for c in [
            &self.reads,
            &self.writes,
            &self.read_bytes,
            &self.write_bytes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.lat_ns.reset();
    }
    /// Latencies of the member's reads and writes, ns.
    pub fn latency(&self) -> crate::stats::Histogram {
        self.lat_ns.snapshot()
    }
}

/// A member device that counts the IOs going through it. The member IO layer carries out
/// its IOs as it does the inner device's (batched, io_uring, writer lanes: what the
/// engine does when serving) and reports each to it ([`BlockDev::io_done`]).
pub struct CountingDev {
    inner: Arc<dyn BlockDev>,
    /// The counters (shared with the bench).
    pub counters: Arc<Counters>,
}

impl CountingDev {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn BlockDev>) -> CountingDev {
        CountingDev {
            inner,
            counters: Arc::new(Counters::default()),
        }
    }
}

impl BlockDev for CountingDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn logical_block_size(&self) -> u32 {
        self.inner.logical_block_size()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        self.inner.is_hole(offset, len)
    }
    fn hole_end(&self, offset: u64) -> Option<u64> {
        self.inner.hole_end(offset)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        self.inner.punch_hole(offset, len)
    }
    fn submission(&self) -> raidkit_engine::dev::io::Submission<'_> {
        self.inner.submission()
    }
    fn default_timeout(&self) -> Option<std::time::Duration> {
        self.inner.default_timeout()
    }
    fn io_done(&self, write: bool, bytes: usize, took: std::time::Duration, _ok: bool) {
        let (n, b) = if write {
            (&self.counters.writes, &self.counters.write_bytes)
        } else {
            (&self.counters.reads, &self.counters.read_bytes)
        };
        n.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes as u64, Ordering::Relaxed);
        self.counters
            .lat_ns
            .record(took.as_nanos().min(u128::from(u64::MAX)) as u64);
    }
}

struct CountedMember {
    role: usize,
    device: String,
    size_bytes: u64,
    counters: Arc<Counters>,
}

/// An array assembled over counting members.
pub struct ArrayTarget {
    array: Arc<Array>,
    members: Vec<CountedMember>,
}

impl ArrayTarget {
    /// Assemble the array formed by `devs` (writable if `write`), counting member IO.
    pub fn assemble(devs: Vec<Arc<dyn BlockDev>>, write: bool, force: bool) -> Result<ArrayTarget> {
        let mut counted: Vec<Arc<dyn BlockDev>> = Vec::new();
        let mut counters = Vec::new();
        for d in devs {
            let c = CountingDev::new(d);
            counters.push((c.name().to_string(), c.size_bytes(), c.counters.clone()));
            counted.push(Arc::new(c));
        }
        let array = assemble(
            counted,
            &AssembleOptions {
                writable: write,
                force,
                metadata: None,
                report_only: false,
                backup_file: None,
            },
        )?;
        let array = Arc::new(array);
        // Partial stripes wait briefly for their neighbours, as when serving.
        array.start_writeback();
        let mut members = Vec::new();
        for m in array.members() {
            if let Some((_, size, c)) = counters.iter().find(|(n, _, _)| *n == m.device) {
                members.push(CountedMember {
                    role: m.role.unwrap_or(usize::MAX),
                    device: m.device.clone(),
                    size_bytes: *size,
                    counters: c.clone(),
                });
            }
        }
        members.sort_by_key(|m| m.role);
        Ok(ArrayTarget { array, members })
    }
    /// Open member paths and assemble.
    pub fn open(paths: &[PathBuf], write: bool, force: bool) -> Result<ArrayTarget> {
        let mut devs: Vec<Arc<dyn BlockDev>> = Vec::new();
        for p in paths {
            let d = FileDev::open(p, write)
                .map_err(|e| ToolsError::io(p.display().to_string(), "opening the member", e))?;
            devs.push(Arc::new(d));
        }
        ArrayTarget::assemble(devs, write, force)
    }
    /// The array.
    pub fn array(&self) -> &Array {
        &self.array
    }
    /// Zero the member counters (assembly reads superblocks).
    pub fn reset_counters(&self) {
        for m in &self.members {
            m.counters.reset();
        }
    }
    /// What the array is: level, layout, members, chunk.
    pub fn info(&self) -> ArrayInfo {
        let g = self.array.geometry();
        ArrayInfo {
            level: g.level.to_string(),
            layout: raidkit_layout::names::layout_name(g.level, g.layout),
            default_layout: g.layout == raidkit_layout::names::default_layout(g.level),
            raid_disks: g.raid_disks,
            member_bytes: self.members.iter().map(|m| m.size_bytes).collect(),
            chunk_bytes: if g.level.uses_chunk() {
                g.chunk_sectors * 512
            } else {
                0
            },
            array_bytes: self.array.size_bytes(),
        }
    }
    /// Per-member shares of the IO counted since the last reset.
    pub fn shares(&self) -> Vec<MemberShare> {
        let vals: Vec<(u64, u64, u64, u64)> =
            self.members.iter().map(|m| m.counters.get()).collect();
        let ios: u64 = vals.iter().map(|v| v.0 + v.1).sum();
        let bytes: u64 = vals.iter().map(|v| v.2 + v.3).sum();
        self.members
            .iter()
            .zip(vals)
            .map(|(m, (r, w, rb, wb))| MemberShare {
                role: m.role,
                device: m.device.clone(),
                reads: r,
                writes: w,
                read_bytes: rb,
                write_bytes: wb,
                bytes: rb + wb,
                lat_ns: {
                    let h = m.counters.latency();
                    (h.count() > 0).then(|| h.summary())
                },
                io_share: if ios > 0 {
                    (r + w) as f64 / ios as f64
                } else {
                    0.0
                },
                byte_share: if bytes > 0 {
                    (rb + wb) as f64 / bytes as f64
                } else {
                    0.0
                },
            })
            .collect()
    }
    /// Stop the array cleanly (marks it clean after writes).
    pub fn stop(self) -> Result<()> {
        self.array.mark_clean()?;
        Ok(())
    }
}

impl Target for ArrayTarget {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.array.read(off, buf).map_err(io::Error::other)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.array.write(off, buf).map_err(io::Error::other)
    }
    fn size(&self) -> u64 {
        self.array.size_bytes()
    }
    fn name(&self) -> String {
        format!("{} ({})", self.array.name(), self.array.level())
    }
    fn flush(&self) -> io::Result<()> {
        self.array.flush().map_err(io::Error::other)
    }
}

/// What an array created on the fly looks like.
#[derive(Clone, Debug)]
pub struct ArraySpec {
    /// Level.
    pub level: raidkit_layout::Level,
    /// Members.
    pub raid_devices: usize,
    /// Member file size in bytes.
    pub member_size: u64,
    /// Chunk in bytes (None: default).
    pub chunk: Option<u64>,
    /// Layout name (None: default).
    pub layout: Option<String>,
}

/// Create an array of sparse member files in `dir` (which must exist) and assemble it
/// writable with counting members. The files are named `bench-<tag>-<role>.img`.
pub fn create_array(
    dir: &Path,
    tag: &str,
    spec: &ArraySpec,
) -> Result<(ArrayTarget, Vec<PathBuf>)> {
    use raidkit_engine::create::{create, CreateOptions, MemberSpec};
    let paths: Vec<PathBuf> = (0..spec.raid_devices)
        .map(|i| dir.join(format!("bench-{tag}-{i}.img")))
        .collect();
    for p in &paths {
        if p.exists() {
            std::fs::remove_file(p).map_err(|e| {
                ToolsError::io(p.display().to_string(), "removing an old bench member", e)
            })?;
        }
    }
    let mut o = CreateOptions::new(
        spec.level,
        paths.iter().cloned().map(MemberSpec::Path).collect(),
    );
    o.chunk_bytes = spec.chunk;
    o.layout = spec
        .layout
        .as_deref()
        .map(|l| raidkit_layout::names::parse_layout(spec.level, l))
        .transpose()
        .map_err(|e| ToolsError::Invalid(e.to_string()))?;
    o.assume_clean = true;
    o.create_size = Some(spec.member_size);
    o.homehost = None;
    o.name = "bench".into();
    let a = create(&o, &mut |_, _| {})?;
    a.stop()?;
    Ok((ArrayTarget::open(&paths, true, false)?, paths))
}

/// Remove member files made by [`create_array`].
pub fn remove_array(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}
