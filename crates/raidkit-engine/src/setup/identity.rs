//! Which device a member path names, before anything opens it: two paths for one device
//! (a symlink, a hard link, a loop device over the file) are refused, and so are paths
//! that are no device at all (opening a FIFO for reading waits for a writer forever).

use crate::error::{EngineError, Result};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What a member path is, by identity: a regular file `(st_dev, st_ino)`, a block device
/// `(u64::MAX, st_rdev)`; a loop device over a whole file (no offset, no size limit)
/// counts as that file (one over a window of it keeps its own identity: two windows that
/// do not overlap are two devices).
pub type Identity = (u64, u64);

/// The identity of member `p` as given: a fault spec (`fault:RULES:PATH`) is the file it
/// wraps; an NBD URI has none (two are told apart by their text, see [`same_member`]);
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
    if let Some(id) = identity_of(&md) {
        return Ok(id);
    }
    let what = not_member_kind(md.file_type()).unwrap_or("not a file");
    Err(EngineError::BadMember {
        device: name,
        why: format!("is {what}: members are regular files or block devices"),
    })
}

/// The identity of what `md` describes (of a path, or of an open descriptor: then a
/// rename or a replacement of the path since does not change it); None unless it is a
/// regular file or a block device.
pub(crate) fn identity_of(md: &std::fs::Metadata) -> Option<Identity> {
    let ft = md.file_type();
    if ft.is_file() {
        return Some((md.dev(), md.ino()));
    }
    ft.is_block_device()
        .then(|| loop_backing(md.rdev()).unwrap_or((u64::MAX, md.rdev())))
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

/// The identity of the file behind loop device `rdev`, if it is one over the whole of a
/// backing file (see [`whole_file_window`]).
fn loop_backing(rdev: u64) -> Option<Identity> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = format!("/sys/dev/block/{major}:{minor}/loop");
    let read = |what: &str| std::fs::read_to_string(format!("{sys}/{what}")).ok();
    let number = |what: &str| read(what)?.trim().parse::<u64>().ok();
    if !whole_file_window(number("offset"), number("sizelimit")) {
        return None;
    }
    let backing = read("backing_file")?;
    let md = std::fs::metadata(backing.trim_end_matches('\n')).ok()?;
    md.file_type().is_file().then(|| (md.dev(), md.ino()))
}

/// Does a loop device with this `offset` and `sizelimit` (bytes, as sysfs gives them; 0:
/// none) show its whole backing file? Only then is it the file's identity: windows of one
/// file at other offsets may not overlap (two arrays on them share no byte), and one that
/// cannot be read is not taken for the whole file.
fn whole_file_window(offset_bytes: Option<u64>, sizelimit_bytes: Option<u64>) -> bool {
    offset_bytes == Some(0) && sizelimit_bytes == Some(0)
}

/// Refuse a list of member paths that names one device twice (`None`: a path that does
/// not exist yet, compared by its name). Nothing is opened.
pub(crate) fn check_distinct(paths: &[(&Path, Option<Identity>)]) -> Result<()> {
    for (i, &(p, id)) in paths.iter().enumerate() {
        let twin = paths[..i]
            .iter()
            .find(|&&(q, other)| same_member((p, id), (q, other)));
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

/// Are two member paths, each with its [`member_identity`], the same member? By identity
/// where both have one; where neither has (NBD URIs, paths that do not exist yet) by name
/// (the same text, or the same name in the same directory); one with an identity and one
/// without are not.
pub fn same_member(a: (&Path, Option<Identity>), b: (&Path, Option<Identity>)) -> bool {
    match (a.1, b.1) {
        (Some(x), Some(y)) => x == y,
        (None, None) => same_new_path(a.0, b.0),
        _ => false,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loop_over_the_whole_file_is_the_file() {
        assert!(whole_file_window(Some(0), Some(0)));
        assert!(!whole_file_window(Some(512), Some(0)));
        assert!(!whole_file_window(Some(0), Some(1 << 20)));
        // Unknown (an old kernel, a read failing): not taken for the whole file.
        assert!(!whole_file_window(None, Some(0)));
        assert!(!whole_file_window(Some(0), None));
    }

    #[test]
    fn members_match_by_identity_else_by_name() {
        let (a, b) = (
            Path::new("/nonexistent-rk/x"),
            Path::new("/nonexistent-rk/./x"),
        );
        assert!(same_member((a, Some((1, 2))), (b, Some((1, 2)))));
        assert!(!same_member((a, Some((1, 2))), (a, Some((1, 3)))));
        assert!(!same_member((a, Some((1, 2))), (a, None)));
        assert!(same_member((a, None), (a, None)));
        let uri = Path::new("nbd://host/export");
        assert!(same_member((uri, None), (uri, None)));
        assert!(!same_member(
            (uri, None),
            (Path::new("nbd://host/other"), None)
        ));
        let here = std::env::current_dir().unwrap();
        let (c, d) = (here.join("rk-not-there"), Path::new("./rk-not-there"));
        assert!(same_member((&c, None), (d, None)));
    }
}
