//! A temporary directory removed on drop (no external crate needed).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A directory under the system temp dir (or `$TMPDIR`), deleted with its contents on
/// drop unless [`TempDir::keep`] was called.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// Create a new unique directory whose name starts with `prefix`.
    pub fn new(prefix: &str) -> io::Result<TempDir> {
        TempDir::new_in(&std::env::temp_dir(), prefix)
    }

    /// A new directory on `/dev/shm` where that is tmpfs as the engine sees it (member
    /// files there are "in memory": the engine's paths for such members apply); `None`
    /// elsewhere, after saying so on stderr (the caller's test has nothing to test).
    #[cfg(feature = "engine")]
    pub fn in_memory(prefix: &str) -> Option<TempDir> {
        use raidkit_engine::{BlockDev, FileDev};
        let d = TempDir::new_in(Path::new("/dev/shm"), prefix).ok()?;
        let probe = d.path().join("probe");
        std::fs::write(&probe, b"x").ok()?;
        let on_tmpfs = FileDev::open(&probe, false).is_ok_and(|f| f.submission().in_memory());
        if !on_tmpfs {
            eprintln!("skipped: /dev/shm is not tmpfs here");
            return None;
        }
        Some(d)
    }

    /// Create a new unique directory in `base` whose name starts with `prefix`.
    pub fn new_in(base: &Path, prefix: &str) -> io::Result<TempDir> {
        let pid = std::process::id();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("{prefix}-{pid}-{nanos:x}-{n}"));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path, keep: false }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Do not delete the directory on drop (for debugging a failed test).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_unique_and_removed() {
        let a = TempDir::new("rk-test").unwrap();
        let b = TempDir::new("rk-test").unwrap();
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("f"), b"x").unwrap();
        let p = a.path().to_path_buf();
        assert!(p.join("f").exists());
        drop(a);
        assert!(!p.exists());
    }
}
