//! The `--config` file of `raidkit serve` (TOML, read with the `toml` crate).

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The whole file: listener and TLS settings, then one `[[array]]` table per array.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Unix socket to listen on.
    pub socket: Option<PathBuf>,
    /// TCP address to listen on.
    pub listen: Option<String>,
    /// TLS certificate chain (PEM).
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// TLS pre-shared keys file.
    pub tls_psk: Option<PathBuf>,
    /// Refuse clients that do not start TLS.
    #[serde(default)]
    pub tls_required: bool,
    /// The arrays.
    #[serde(default, rename = "array")]
    pub arrays: Vec<ArrayEntry>,
}

/// One `[[array]]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArrayEntry {
    /// Export name (default: the array's name without its home host; for 0.90 arrays,
    /// which have no name field, the UUID).
    pub name: Option<String>,
    /// The array's UUID: when given, members holding another array are refused (a
    /// renamed or swapped device) instead of being served under this name.
    pub uuid: Option<String>,
    /// Member devices or files, in any order (required; missing or empty is refused
    /// with a message saying so).
    #[serde(default)]
    pub members: Vec<PathBuf>,
    /// Serve read-only.
    #[serde(default)]
    pub read_only: bool,
    /// Start a dirty degraded array (md's --force).
    #[serde(default)]
    pub force: bool,
    /// Export description shown to clients.
    #[serde(default)]
    pub description: String,
    /// Checksum sidecar of the array.
    pub checksums: Option<PathBuf>,
    /// Backup file of a reshape in progress (mdadm's `--backup-file`).
    pub backup_file: Option<PathBuf>,
}

/// Parse a config file's text; `origin` names it in errors.
pub fn parse(text: &str, origin: &Path) -> Result<ConfigFile> {
    let cfg: ConfigFile =
        toml::from_str(text).with_context(|| format!("in {}", origin.display()))?;
    if cfg.arrays.is_empty() {
        bail!("{}: no [[array]] sections", origin.display());
    }
    for (i, a) in cfg.arrays.iter().enumerate() {
        if a.members.is_empty() {
            bail!(
                "{}: array #{}: members = [\"...\", ...] is required",
                origin.display(),
                i + 1
            );
        }
    }
    Ok(cfg)
}

/// Largest config file read (a few hundred arrays take a few KiB each).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read and parse a config file: a regular file (not a device, FIFO or directory) of at
/// most [`MAX_CONFIG_BYTES`], read with that bound whatever its size says.
pub fn load(path: &Path) -> Result<ConfigFile> {
    use std::io::Read;
    let reading = || format!("reading {}", path.display());
    let f = open_regular(path).with_context(reading)?;
    if !f.metadata().with_context(reading)?.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    set_blocking(&f).with_context(reading)?;
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(reading)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        bail!(
            "{} is larger than {} KiB: not a raidkit config file",
            path.display(),
            MAX_CONFIG_BYTES >> 10
        );
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{}: not UTF-8 text ({e})", path.display()))?;
    parse(&text, path)
}

/// Open `path` for reading without waiting: a FIFO (even one swapped in after a look at
/// the path) would wait for a writer; what was opened is then looked at through its
/// descriptor (see [`load`]).
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Clear `O_NONBLOCK` on `f` (a regular file: reads as usual).
fn set_blocking(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: `fd` is an open descriptor owned by `f` for the duration of both calls;
    // F_GETFL/F_SETFL take and return plain flag words.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<ConfigFile> {
        parse(text, Path::new("c.toml"))
    }

    #[test]
    fn config_file() {
        let c = p(
            "# c\nsocket = \"/tmp/x.sock\" # trailing\ntls_required = true\n\n[[array]]\nname = 'a#1'\nmembers = [\"m0\", 'm1',\n  \"m\\\"2\", # c\n]\nread_only = true\n[[ array ]]\nmembers=[\"z\"]\n",
        )
        .unwrap();
        assert_eq!(c.socket, Some(PathBuf::from("/tmp/x.sock")));
        assert!(c.tls_required);
        assert_eq!(c.arrays.len(), 2);
        assert_eq!(c.arrays[0].name.as_deref(), Some("a#1"));
        assert_eq!(
            c.arrays[0].members,
            vec![
                PathBuf::from("m0"),
                PathBuf::from("m1"),
                PathBuf::from("m\"2")
            ]
        );
        assert!(c.arrays[0].read_only);
        assert_eq!(c.arrays[1].members, vec![PathBuf::from("z")]);
        for bad in [
            "[x]\n",
            "a = \"x\n",
            "a = [\"x\"\n",
            "a = 1\n",
            "a = \"1\"\na = \"2\"\n",
            "[[array]]\nmembers = []\n",
            "[[array]]\nname = \"x\"\n",
            "socket = \"s\"\n",
            "[[array]]\nmembers = [\"m\"]\nread_only = \"yes\"\n",
        ] {
            assert!(p(bad).is_err(), "{bad:?} must be refused");
        }
        let e = format!(
            "{:#}",
            p("[[array]]\nmembers = [\"m\"]\nmembres = 1\n").unwrap_err()
        );
        assert!(e.contains("c.toml") && e.contains("membres"), "{e}");
    }

    /// `--config /dev/zero` read until memory ran out, a FIFO hung in open, and a huge
    /// file was read whole; all are refused, saying why.
    #[test]
    fn load_refuses_what_is_not_a_small_file() {
        let e = format!("{:#}", load(Path::new("/dev/zero")).unwrap_err());
        assert_eq!(e, "/dev/zero is not a regular file");
        let t = raidkit_testkit::tempdir::TempDir::new("rk-cfg").unwrap();
        let fifo = t.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid C string; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = format!("{:#}", load(&fifo).unwrap_err());
        assert!(e.ends_with("fifo is not a regular file"), "{e}");
        let big = t.path().join("big.toml");
        let mut text = "[[array]]\nmembers = [\"m\"]\n".to_string();
        text.push_str(&"# padding\n".repeat(110_000));
        std::fs::write(&big, &text).unwrap();
        let e = format!("{:#}", load(&big).unwrap_err());
        assert!(
            e.ends_with("big.toml is larger than 1024 KiB: not a raidkit config file"),
            "{e}"
        );
        text.truncate(1 << 19);
        std::fs::write(&big, &text).unwrap();
        assert_eq!(load(&big).unwrap().arrays.len(), 1);
    }

    /// A FIFO swapped in between a look at the path and its opening hung the load (it
    /// waited for a writer): the path is swapped between a config and a FIFO while it is
    /// loaded over and over; every load must return.
    #[test]
    fn a_fifo_swapped_in_while_loading_does_not_hang() {
        let t = raidkit_testkit::tempdir::TempDir::new("rk-cfg").unwrap();
        let (cfg, fifo) = (t.path().join("cfg"), t.path().join("fifo"));
        std::fs::write(&cfg, "[[array]]\nmembers = [\"m\"]\n").unwrap();
        let c = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let (c_cfg, c_fifo) = (c(&cfg), c(&fifo));
        // SAFETY: a valid C string; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapping = std::sync::Arc::clone(&stop);
        let swapper = std::thread::spawn(move || {
            use std::sync::atomic::Ordering;
            while !swapping.load(Ordering::Relaxed) {
                // SAFETY: valid C strings; renameat2 only exchanges two names.
                let r = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        c_cfg.as_ptr(),
                        libc::AT_FDCWD,
                        c_fifo.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0);
            }
        });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let path = cfg.clone();
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                let _ = load(&path);
            }
            let _ = done_tx.send(());
        });
        let done = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        if done.is_err() {
            // Free the load stuck on the FIFO (a writer comes and goes), then fail.
            use std::os::unix::fs::OpenOptionsExt;
            for p in [&cfg, &fifo] {
                let _ = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(p);
            }
        }
        assert!(done.is_ok(), "a load hung on the FIFO swapped in");
    }
}
