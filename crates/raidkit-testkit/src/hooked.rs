//! [`Hooked`]: a member device that passes every [`BlockDev`] call on to an inner device,
//! except the IO a test's [`Hooks`] take over — to count, delay, fail or watch a member's
//! reads, writes and flushes, or to start something at a chosen IO.
//!
//! Every IO comes through the hooks: by default the device asks the member IO layer for
//! blocking calls ([`Submission::Blocking`]), so batched IO reaches [`Hooks::read`] /
//! [`Hooks::write`] / [`Hooks::flush`] instead of going straight to the inner device's
//! descriptor, and it declines to punch holes ([`BlockDev::punch_hole`]), so zeros are
//! written through [`Hooks::write`]. Everything else (size, block size, name, holes,
//! deadline, network link, IO completions) is the inner device's.

use raidkit_engine::dev::io::Submission;
use raidkit_engine::dev::nbd::NbdDev;
use raidkit_engine::BlockDev;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// What a test changes about a member's IO. Each method gets the inner device and by
/// default passes the IO on to it unchanged.
pub trait Hooks: Send + Sync {
    /// A read of `buf.len()` bytes at byte `offset`.
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], offset: u64) -> io::Result<()> {
        inner.read_at(buf, offset)
    }
    /// A write of `buf` at byte `offset`.
    fn write(&self, inner: &dyn BlockDev, buf: &[u8], offset: u64) -> io::Result<()> {
        inner.write_at(buf, offset)
    }
    /// A flush.
    fn flush(&self, inner: &dyn BlockDev) -> io::Result<()> {
        inner.flush()
    }
    /// How the member IO layer carries out the device's IOs. Default: blocking calls,
    /// which come through the hooks above. A test that returns the inner device's own
    /// path (its descriptor, say) lets batched IO bypass them.
    fn submission<'a>(&'a self, inner: &'a dyn BlockDev) -> Submission<'a> {
        let _ = inner;
        Submission::Blocking
    }
}

/// A device that forwards to `inner` through the hooks `H` (see the module). It
/// dereferences to the hooks, so a test reaches their state as `dev.field`.
pub struct Hooked<H> {
    inner: Arc<dyn BlockDev>,
    hooks: H,
}

impl<H: Hooks> Hooked<H> {
    /// `inner` behind `hooks`.
    pub fn new(inner: impl BlockDev + 'static, hooks: H) -> Hooked<H> {
        Hooked::over(Arc::new(inner), hooks)
    }
    /// A shared `inner` behind `hooks`.
    pub fn over(inner: Arc<dyn BlockDev>, hooks: H) -> Hooked<H> {
        Hooked { inner, hooks }
    }
    /// The device behind the hooks.
    pub fn inner(&self) -> &dyn BlockDev {
        self.inner.as_ref()
    }
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: Hooks> BlockDev for Hooked<H> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.hooks.read(self.inner.as_ref(), buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.hooks.write(self.inner.as_ref(), buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.hooks.flush(self.inner.as_ref())
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
    /// Declines: the zeros are written through [`Hooks::write`], which sees every write.
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        let _ = (offset, len);
        Ok(false)
    }
    fn submission(&self) -> Submission<'_> {
        self.hooks.submission(self.inner.as_ref())
    }
    fn default_timeout(&self) -> Option<Duration> {
        self.inner.default_timeout()
    }
    fn network(&self) -> Option<&NbdDev> {
        self.inner.network()
    }
    fn io_done(&self, write: bool, bytes: usize, took: Duration, ok: bool) {
        self.inner.io_done(write, bytes, took, ok)
    }
}

/// `devs` as the member list [`raidkit_engine::assemble`] takes.
pub fn members<D: BlockDev + 'static>(devs: &[Arc<D>]) -> Vec<Arc<dyn BlockDev>> {
    devs.iter()
        .map(|d| Arc::clone(d) as Arc<dyn BlockDev>)
        .collect()
}

/// Hooks that record a member's IOs (offset and length, while `record` is on), fail reads
/// over one byte range with EIO — leaving 0xEE garbage in the buffer, as a failed read
/// may — and run `race` once, after the read, when a read covers the `trigger` offset.
#[derive(Default)]
pub struct Recorder {
    /// Whether IOs are recorded now.
    pub record: std::sync::atomic::AtomicBool,
    /// Reads recorded: (device byte offset, length).
    pub reads: std::sync::Mutex<Vec<(u64, usize)>>,
    /// Writes recorded: (device byte offset, length).
    pub writes: std::sync::Mutex<Vec<(u64, usize)>>,
    /// Device byte range `[start, end)` whose reads fail.
    pub bad: std::sync::Mutex<Option<(u64, u64)>>,
    /// Device byte offset whose read runs `race` (once; taken when it fires).
    pub trigger: std::sync::Mutex<Option<u64>>,
    /// What a triggered read runs (a client write racing the read, say).
    pub race: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Recorder {
    /// A member file at `path` under these hooks, recording from the start if `record`.
    pub fn open(path: &std::path::Path, record: bool) -> Hooked<Recorder> {
        let file = raidkit_engine::FileDev::open(path, true).expect("open member");
        let hooks = Recorder::default();
        hooks
            .record
            .store(record, std::sync::atomic::Ordering::SeqCst);
        Hooked::new(file, hooks)
    }

    fn recording(&self) -> bool {
        self.record.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Take the trigger if `[offset, end)` covers it.
    fn triggered(&self, offset: u64, end: u64) -> bool {
        let mut t = self.trigger.lock().unwrap();
        match *t {
            Some(at) if offset <= at && at < end => t.take().is_some(),
            _ => false,
        }
    }
}

impl Hooks for Recorder {
    fn read(&self, inner: &dyn BlockDev, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        if self.recording() {
            self.reads.lock().unwrap().push((offset, buf.len()));
        }
        if let Some((a, b)) = *self.bad.lock().unwrap() {
            if offset < b && a < end {
                buf.fill(0xEE);
                return Err(io::Error::from_raw_os_error(5));
            }
        }
        inner.read_at(buf, offset)?;
        if self.triggered(offset, end) {
            if let Some(f) = self.race.get() {
                f();
            }
        }
        Ok(())
    }

    fn write(&self, inner: &dyn BlockDev, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.recording() {
            self.writes.lock().unwrap().push((offset, buf.len()));
        }
        inner.write_at(buf, offset)
    }
}
