//! The system as the disk checks see it: sysfs and udev files, symlinks, `stat(2)` and
//! `statfs(2)`. [`HostSystem`] is the real one; [`FakeSystem`] is an in-memory tree that tests
//! fill with exactly the sysfs layout a case needs (see [`super::fake`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// What a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A block device node.
    Block,
    /// A directory.
    Directory,
    /// Anything else (character device, socket, ...).
    Other,
}

/// The parts of `stat(2)` (following symlinks) the checks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// What it is.
    pub kind: FileKind,
    /// `st_dev` as (major, minor): the file system holding it.
    pub dev: (u32, u32),
    /// `st_ino`.
    pub ino: u64,
    /// `st_rdev` as (major, minor) for device nodes, else (0, 0).
    pub rdev: (u32, u32),
}

/// Read-only access to the parts of the system the disk checks need.
pub trait SystemView {
    /// Contents of a file (sysfs attribute, udev database entry); None if absent.
    fn read(&self, path: &Path) -> Option<Vec<u8>>;
    /// The path with every symlink resolved; None if it does not exist.
    fn canonical(&self, path: &Path) -> Option<PathBuf>;
    /// Names in a directory (following symlinks), sorted; empty if none.
    fn list(&self, path: &Path) -> Vec<String>;
    /// `stat(2)` of a path, following symlinks.
    fn stat(&self, path: &Path) -> Option<FileStat>;
    /// The type of the file system holding `path` (`ext4`, `tmpfs`, `fuse`, ...).
    fn fs_type(&self, path: &Path) -> Option<String>;
    /// A file's contents as trimmed text; None if absent or empty.
    fn read_text(&self, path: &Path) -> Option<String> {
        let b = self.read(path)?;
        let s = String::from_utf8_lossy(&b).trim().to_string();
        (!s.is_empty()).then_some(s)
    }
}

/// The real system.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostSystem;

impl SystemView for HostSystem {
    fn read(&self, path: &Path) -> Option<Vec<u8>> {
        std::fs::read(path).ok()
    }
    fn canonical(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
    fn list(&self, path: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(path)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
    fn stat(&self, path: &Path) -> Option<FileStat> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let m = std::fs::metadata(path).ok()?;
        let ft = m.file_type();
        let kind = if ft.is_file() {
            FileKind::Regular
        } else if ft.is_block_device() {
            FileKind::Block
        } else if ft.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        };
        let split = |d: u64| (libc::major(d), libc::minor(d));
        Some(FileStat {
            kind,
            dev: split(m.dev()),
            ino: m.ino(),
            rdev: if kind == FileKind::Block {
                split(m.rdev())
            } else {
                (0, 0)
            },
        })
    }
    fn fs_type(&self, path: &Path) -> Option<String> {
        crate::probe::statfs_name(path).map(str::to_string)
    }
}

#[derive(Clone, Debug)]
enum Node {
    File(Vec<u8>),
    Link(PathBuf),
}

/// An in-memory system for tests: files, symlinks (relative or absolute, resolved like the
/// kernel does), stat results and file-system types by device number.
#[derive(Clone, Debug, Default)]
pub struct FakeSystem {
    nodes: BTreeMap<PathBuf, Node>,
    stats: BTreeMap<PathBuf, FileStat>,
    fs_types: BTreeMap<(u32, u32), String>,
}

/// `a/b/../c` → `a/c` (purely lexical, as symlink targets are resolved against their folder).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

impl FakeSystem {
    /// Empty.
    pub fn new() -> FakeSystem {
        FakeSystem::default()
    }
    /// A file with these contents.
    pub fn file(&mut self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> &mut Self {
        self.nodes.insert(
            normalize(path.as_ref()),
            Node::File(contents.as_ref().to_vec()),
        );
        self
    }
    /// A symlink to `target` (relative to the link's folder, or absolute).
    pub fn link(&mut self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> &mut Self {
        self.nodes.insert(
            normalize(path.as_ref()),
            Node::Link(target.as_ref().to_path_buf()),
        );
        self
    }
    /// What `stat` says about `path` (after symlinks are resolved).
    pub fn set_stat(&mut self, path: impl AsRef<Path>, st: FileStat) -> &mut Self {
        let p = self
            .canonical(path.as_ref())
            .unwrap_or_else(|| normalize(path.as_ref()));
        self.stats.insert(p, st);
        self
    }
    /// The file system type of device `dev`.
    pub fn set_fs_type(&mut self, dev: (u32, u32), name: &str) -> &mut Self {
        self.fs_types.insert(dev, name.to_string());
        self
    }
    fn exists(&self, p: &Path) -> bool {
        p == Path::new("/")
            || self.nodes.contains_key(p)
            || self.stats.contains_key(p)
            || self.nodes.keys().any(|k| k.starts_with(p))
            || self.stats.keys().any(|k| k.starts_with(p))
    }
}

impl SystemView for FakeSystem {
    fn read(&self, path: &Path) -> Option<Vec<u8>> {
        match self.nodes.get(&self.canonical(path)?) {
            Some(Node::File(b)) => Some(b.clone()),
            _ => None,
        }
    }
    fn canonical(&self, path: &Path) -> Option<PathBuf> {
        let mut todo: Vec<PathBuf> = normalize(path)
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(PathBuf::from(n)),
                _ => None,
            })
            .rev()
            .collect();
        let mut cur = PathBuf::from("/");
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            cur.push(&c);
            if let Some(Node::Link(t)) = self.nodes.get(&cur) {
                hops += 1;
                if hops > 40 {
                    return None;
                }
                let parent = cur.parent().map(Path::to_path_buf).unwrap_or_default();
                let target = normalize(&parent.join(t));
                // Resolve the target from the root again, then the rest of the path.
                for comp in target.components().rev() {
                    if let Component::Normal(n) = comp {
                        todo.push(PathBuf::from(n));
                    }
                }
                cur = PathBuf::from("/");
            }
        }
        self.exists(&cur).then_some(cur)
    }
    fn list(&self, path: &Path) -> Vec<String> {
        let Some(dir) = self.canonical(path) else {
            return Vec::new();
        };
        let mut v: Vec<String> = self
            .nodes
            .keys()
            .chain(self.stats.keys())
            .filter_map(|k| k.strip_prefix(&dir).ok())
            .filter_map(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v.dedup();
        v
    }
    fn stat(&self, path: &Path) -> Option<FileStat> {
        self.stats.get(&self.canonical(path)?).copied()
    }
    fn fs_type(&self, path: &Path) -> Option<String> {
        self.fs_types.get(&self.stat(path)?.dev).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_symlinks_resolve_like_sysfs() {
        let mut f = FakeSystem::new();
        f.file("/sys/devices/pci0/ata1/block/sda/dev", "8:0\n")
            .link("/sys/dev/block/8:0", "../../devices/pci0/ata1/block/sda")
            .link("/sys/class/block/sda", "/sys/devices/pci0/ata1/block/sda")
            .file("/sys/devices/pci0/ata1/block/sda/sda1/partition", "1");
        assert_eq!(
            f.canonical(Path::new("/sys/dev/block/8:0/sda1")),
            Some(PathBuf::from("/sys/devices/pci0/ata1/block/sda/sda1"))
        );
        assert_eq!(
            f.read_text(Path::new("/sys/class/block/sda/dev"))
                .as_deref(),
            Some("8:0")
        );
        assert_eq!(f.list(Path::new("/sys/class/block/sda")), ["dev", "sda1"]);
        assert_eq!(f.canonical(Path::new("/sys/class/block/sdz")), None);
        // A loop of links ends.
        f.link("/a", "/b").link("/b", "/a");
        assert_eq!(f.canonical(Path::new("/a/x")), None);
    }
}
