//! Which device a member path names, before anything opens it: two paths for one device
//! (a symlink, a hard link, a loop device over the file) are refused, and so are paths
//! that are no device at all (opening a FIFO for reading waits for a writer forever).

use crate::error::{EngineError, Result};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What a member path is, by identity: a regular file `(st_dev, st_ino)`, a block device
/// `(u64::MAX, st_rdev)`; a loop device over a file counts as that file.
pub type Identity = (u64, u64);

/// The identity of member `p` as given: a fault spec (`fault:RULES:PATH`) is the file it
/// wraps; an NBD URI has none (two are told apart by their text, see [`check_distinct`]);
/// nor has a path that does not exist yet, unless `must_exist` (then looking it up fails).
/// Errors name `p` as given.
pub fn member_identity(p: &Path, must_exist: bool) -> Result<Option<Identity>> {
    let real = match p.to_str().and_then(crate::fault::parse_spec) {
        Some(Ok((_, path))) => path,
        _ => p.to_path_buf(),
    };
    if real.to_str().is_some_and(crate::dev::nbd::is_nbd_uri) || (!must_exist && !real.exists()) {
        return Ok(None);
    }
    identity(&real).map(Some).map_err(|e| match e {
        EngineError::BadMember { why, .. } => EngineError::BadMember {
            device: p.display().to_string(),
            why,
        },
        e => e,
    })
}

/// The identity of the existing path `p`; an error for a path that is neither a regular
/// file nor a block device (nothing is opened).
pub(crate) fn identity(p: &Path) -> Result<Identity> {
    let name = p.display().to_string();
    let md =
        std::fs::metadata(p).map_err(|e| EngineError::io(&name, "looking up the member", e))?;
    let ft = md.file_type();
    if ft.is_file() {
        return Ok((md.dev(), md.ino()));
    }
    if ft.is_block_device() {
        return Ok(loop_backing(md.rdev()).unwrap_or((u64::MAX, md.rdev())));
    }
    let what = not_member_kind(ft).unwrap_or("not a file");
    Err(EngineError::BadMember {
        device: name,
        why: format!("is {what}: members are regular files or block devices"),
    })
}

/// What a path of file type `ft` is, said for a refusal ("a FIFO", "a directory", ...),
/// or None for the kinds a member may be: a regular file or a block device.
pub fn not_member_kind(ft: std::fs::FileType) -> Option<&'static str> {
    Some(if ft.is_file() || ft.is_block_device() {
        return None;
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a file"
    })
}

/// The identity of the file behind loop device `rdev`, if it is one with a backing file.
fn loop_backing(rdev: u64) -> Option<Identity> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = format!("/sys/dev/block/{major}:{minor}/loop/backing_file");
    let backing = std::fs::read_to_string(sys).ok()?;
    let md = std::fs::metadata(backing.trim_end_matches('\n')).ok()?;
    md.file_type().is_file().then(|| (md.dev(), md.ino()))
}

/// Refuse a list of member paths that names one device twice (`None`: a path that does
/// not exist yet, compared by its name). Nothing is opened.
pub(crate) fn check_distinct(paths: &[(&Path, Option<Identity>)]) -> Result<()> {
    for (i, (p, id)) in paths.iter().enumerate() {
        let twin = paths[..i].iter().find(|(q, other)| match (id, other) {
            (Some(a), Some(b)) => a == b,
            (None, None) => same_new_path(p, q),
            _ => false,
        });
        if let Some((q, _)) = twin {
            return Err(EngineError::BadMember {
                device: p.display().to_string(),
                why: format!(
                    "is the same device as {} (the same file, through a link or a loop device); give each member once",
                    q.display()
                ),
            });
        }
    }
    Ok(())
}

/// Do two paths that do not exist yet name the same file (same directory, same name)?
fn same_new_path(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        std::fs::canonicalize(dir)
            .ok()
            .map(|d| d.join(p.file_name().unwrap_or_default()))
    };
    a == b || matches!((canon(a), canon(b)), (Some(x), Some(y)) if x == y)
}
