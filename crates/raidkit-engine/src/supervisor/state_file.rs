//! The file that keeps a stopped check/repair's resume position: small JSON, mode 0600,
//! replaced atomically (a new file renamed over the old one), never opened through a
//! symlink, so a planted link cannot make the server write elsewhere.

use super::ScrubResume;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Largest state file read (it holds a UUID and three numbers).
const MAX_BYTES: u64 = 64 << 10;

/// The recorded position, if there is a readable one.
pub(super) fn read(path: &Path) -> Option<ScrubResume> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(MAX_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Record `r` (or remove the record).
pub(super) fn write(path: &Path, r: Option<&ScrubResume>) -> io::Result<()> {
    let Some(r) = r else {
        // Unlinking removes a symlink itself, never its target.
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            res => res,
        };
    };
    let tmp = path.with_extension("tmp");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(r).map_err(io::Error::other)?)?;
    f.sync_all()?;
    // rename replaces the name (a link planted there included), not what it points to.
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_writes_through_a_symlink() {
        let d = std::env::temp_dir().join(format!("rk-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let state = d.join("scrub.json");
        std::os::unix::fs::symlink(&victim, &state).unwrap();
        std::os::unix::fs::symlink(&victim, d.join("scrub.tmp")).unwrap();
        assert_eq!(read(&state), None, "read through a symlink");
        let r = ScrubResume {
            uuid: "u".into(),
            action: "check".into(),
            next: 4096,
            to: 8192,
        };
        write(&state, Some(&r)).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(read(&state), Some(r));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::symlink_metadata(&state)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_file(&state).unwrap();
        std::os::unix::fs::symlink(&victim, &state).unwrap();
        write(&state, None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
