//! Kernel-made fixtures committed under `tests/fixtures/kernel/<name>/`.
//!
//! Each fixture directory holds `manifest.json` ([`Manifest`]), one compressed image per
//! member (`N.img.xz` or `N.img.zst`), `examine-N.txt` and `detail.txt`. The array was
//! created by mdadm 4.2 on Linux 6.1 (via mdref) and filled completely with the tagged
//! pattern ([`crate::pattern::fill_tagged`]) of `seed`.

use serde::Deserialize;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One member image of a fixture.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    /// Compressed image file name inside the fixture directory.
    pub file: String,
    /// Size of the decompressed image in bytes.
    pub image_bytes: u64,
    /// Role (slot) of this member in the array.
    pub role: u32,
    /// Name of the file with `mdadm --examine` of this member.
    pub examine: String,
}

/// `manifest.json` of a fixture.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// Fixture (directory) name.
    pub fixture: String,
    /// Level as mdadm prints it: `raid0`, `raid1`, `raid4`, `raid5`, `raid6`, `raid10`,
    /// `linear`.
    pub level: String,
    /// Layout as passed to `mdadm --create` (e.g. `n2`, `left-symmetric-6`), if any.
    pub layout: Option<String>,
    /// Layout as `mdadm --detail` prints it (e.g. `near=2`), if it prints one.
    pub layout_display: Option<String>,
    /// Chunk size in KiB as `mdadm --examine` prints it, if it prints one.
    pub chunk_kib: Option<u64>,
    /// Superblock version: `0.90`, `1.0`, `1.1`, `1.2`.
    pub metadata: String,
    /// Number of member slots.
    pub raid_disks: u32,
    /// `none` or `internal`.
    pub bitmap: String,
    /// Array UUID in mdadm's text form.
    pub uuid: String,
    /// Array name as stored in a 1.x superblock (`mdref:NAME`); `None` for 0.90.
    pub name: Option<String>,
    /// Seed of the tagged pattern the whole array holds.
    pub seed: u64,
    /// Always `tagged`.
    pub pattern: String,
    /// Array size in bytes (`blockdev --getsize64`).
    pub array_bytes: u64,
    /// Members in creation order.
    pub members: Vec<Member>,
    /// Name of the file with `mdadm --detail`.
    pub detail: String,
}

/// A fixture directory and its manifest.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// The fixture directory.
    pub dir: PathBuf,
    /// Its parsed manifest.
    pub manifest: Manifest,
}

/// `<repo>/tests/fixtures/kernel`.
pub fn kernel_fixtures_dir() -> PathBuf {
    crate::repo_root()
        .join("tests")
        .join("fixtures")
        .join("kernel")
}

/// All kernel fixtures, sorted by name.
pub fn list() -> io::Result<Vec<Fixture>> {
    list_in(&kernel_fixtures_dir())
}

/// All fixtures in `dir` (subdirectories with a `manifest.json`), sorted by name.
pub fn list_in(dir: &Path) -> io::Result<Vec<Fixture>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.join("manifest.json").is_file() {
            out.push(Fixture::open(&path)?);
        }
    }
    out.sort_by(|a, b| a.manifest.fixture.cmp(&b.manifest.fixture));
    Ok(out)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl Fixture {
    /// Read `dir/manifest.json`.
    pub fn open(dir: &Path) -> io::Result<Fixture> {
        let text = std::fs::read_to_string(dir.join("manifest.json"))?;
        let manifest: Manifest = serde_json::from_str(&text)
            .map_err(|e| invalid(format!("{}: {e}", dir.join("manifest.json").display())))?;
        Ok(Fixture {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The fixture's name.
    pub fn name(&self) -> &str {
        &self.manifest.fixture
    }

    /// Read one of the fixture's text files (examine/detail output).
    pub fn read_text(&self, file: &str) -> io::Result<String> {
        std::fs::read_to_string(self.dir.join(file))
    }

    /// Decompress every member image into `into` as `<fixture>-<index>.img`; returns the
    /// paths in manifest (creation) order. Checks each decompressed size.
    pub fn decompress(&self, into: &Path) -> io::Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        for (i, m) in self.manifest.members.iter().enumerate() {
            let dst = into.join(format!("{}-{i}.img", self.name()));
            decompress_file(&self.dir.join(&m.file), &dst)?;
            let len = std::fs::metadata(&dst)?.len();
            if len != m.image_bytes {
                return Err(invalid(format!(
                    "{}: decompressed to {len} bytes, manifest says {}",
                    m.file, m.image_bytes
                )));
            }
            paths.push(dst);
        }
        Ok(paths)
    }
}

/// Decompress `src` to `dst` with `xz -dc` (`.xz`) or `zstd -dc` (`.zst`); other files are
/// copied.
pub fn decompress_file(src: &Path, dst: &Path) -> io::Result<()> {
    let tool = match src.extension().and_then(|e| e.to_str()) {
        Some("xz") => "xz",
        Some("zst") => "zstd",
        _ => {
            std::fs::copy(src, dst)?;
            return Ok(());
        }
    };
    let out = File::create(dst)?;
    let status = Command::new(tool)
        .arg("-dc")
        .arg(src)
        .stdout(Stdio::from(out))
        .status()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {tool}: {e}")))?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "{tool} -dc {} failed: {status}",
            src.display()
        )));
    }
    Ok(())
}
