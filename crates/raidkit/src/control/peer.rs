//! Who is asking, and what they may ask.
//!
//! The server learns the client's uid, gid and supplementary groups from the kernel
//! (`SO_PEERCRED`, `SO_PEERGROUPS`), never from the request. The policy:
//! * root and the server's own user may use every request;
//! * with `--socket-group GROUP`, members of GROUP may use the read-only ones (`status`,
//!   `stats`, `monitor`);
//! * everyone else is refused (the socket's mode, 0600 or 0660 with the group, already
//!   keeps them out; this is the second lock).
//!
//! A request that names a path the server would open (`manage --add`, `--re-add`,
//! `--replace --with`) or create (`trace record`) is refused unless the client could do
//! that itself: the server may hold privileges its user does not show (it runs as root,
//! or with capabilities such as CAP_DAC_OVERRIDE), and must not lend them. The check uses
//! the client's ids against each directory on the canonical path (search permission)
//! and the file (read and write for a member; write, or write to the directory for a new
//! trace file), by owner, group and mode. A file with an access ACL is only accepted from
//! its owner (ACLs are not evaluated). Root clients are not checked. The check is made
//! just before the open, by path: a client that could swap the path in between already
//! has the server's user id (only such clients may name paths).

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The client of a control connection, as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Process id (at connect time).
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Peer {
    /// Ask the kernel who is at the other end of `s`.
    pub fn of(s: &UnixStream) -> io::Result<Peer> {
        let fd = s.as_raw_fd();
        let mut cred = libc::ucred {
            pid: 0,
            uid: u32::MAX,
            gid: u32::MAX,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: fd is a valid socket; cred is a writable ucred and len its size.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Peer {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
            groups: peer_groups(fd)?,
        })
    }

    /// True if the peer is in group `g` (primary or supplementary).
    pub fn in_group(&self, g: u32) -> bool {
        self.gid == g || self.groups.contains(&g)
    }
}

/// The peer's supplementary groups (`SO_PEERGROUPS`, Linux 4.13+).
fn peer_groups(fd: i32) -> io::Result<Vec<u32>> {
    let mut n = 64usize;
    loop {
        let mut v = vec![0 as libc::gid_t; n];
        let mut len = (n * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: v holds n gid_t and len is its size in bytes; fd is a valid socket.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                v.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let got = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            v.truncate(got);
            return Ok(v);
        }
        let e = io::Error::last_os_error();
        // ERANGE: len now says how much is needed (bounded: NGROUPS_MAX is 65536).
        if e.raw_os_error() == Some(libc::ERANGE) && got > n && got <= 65536 {
            n = got;
            continue;
        }
        return Err(e);
    }
}

/// Who may use a server's control socket.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The server's effective user id.
    pub owner: u32,
    /// The group whose members may read (`--socket-group`).
    pub group: Option<u32>,
}

impl Policy {
    /// Refuse `peer` unless the policy lets it make a request (`read_only` says whether
    /// it only reads); the error says why, in a sentence for the client.
    pub fn allow(&self, peer: &Peer, read_only: bool) -> Result<(), String> {
        if peer.uid == 0 || peer.uid == self.owner {
            return Ok(());
        }
        let owner = super::user_name(self.owner);
        match self.group {
            Some(g) if peer.in_group(g) && read_only => Ok(()),
            Some(g) if peer.in_group(g) => Err(format!(
                "permission denied: members of group {} may only read (status, stats, monitor); changes need root or {owner}",
                group_name(g)
            )),
            _ => Err(format!(
                "permission denied: this control socket serves root and {owner} only"
            )),
        }
    }
}

/// The name of a group id (`gid N` when it has none).
pub fn group_name(gid: u32) -> String {
    let mut buf = vec![0u8; 16384];
    // SAFETY: group is plain data filled by getgrgid_r; buf outlives the call and the
    // name is copied out before it is dropped.
    unsafe {
        let mut gr: libc::group = std::mem::zeroed();
        let mut res: *mut libc::group = std::ptr::null_mut();
        let rc = libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr().cast(), buf.len(), &mut res);
        if rc == 0 && !res.is_null() && !gr.gr_name.is_null() {
            if let Ok(n) = std::ffi::CStr::from_ptr(gr.gr_name).to_str() {
                return n.to_string();
            }
        }
    }
    format!("gid {gid}")
}

/// A group given by name or number.
pub fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let name = std::ffi::CString::new(s).map_err(|_| format!("{s:?} is not a group name"))?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: as in group_name; name is a valid C string.
    unsafe {
        let mut gr: libc::group = std::mem::zeroed();
        let mut res: *mut libc::group = std::ptr::null_mut();
        let rc = libc::getgrnam_r(
            name.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut res,
        );
        if rc == 0 && !res.is_null() {
            return Ok(gr.gr_gid);
        }
    }
    Err(format!("no group named {s:?} (see /etc/group)"))
}

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;

/// May `peer` do `want` (R/W/X bits) to a file with this metadata, by its mode bits?
fn permits(peer: &Peer, md: &std::fs::Metadata, want: u32) -> bool {
    let mode = md.mode();
    let bits = if peer.uid == md.uid() {
        (mode >> 6) & 7
    } else if peer.in_group(md.gid()) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits & want == want
}

/// True if `p` carries a POSIX access ACL.
fn has_acl(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return true;
    };
    // SAFETY: c is a valid C string; a null buffer of size 0 asks only for the size.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

/// Refuse unless `peer` could itself open `path` read-write (a member: `create` false)
/// or create/write it (a trace file: `create` true). See the module documentation.
pub fn check_path(peer: &Peer, path: &Path, create: bool) -> Result<(), String> {
    if peer.uid == 0 {
        return Ok(());
    }
    let who = super::user_name(peer.uid);
    let denied = |what: &str| {
        Err(format!(
            "permission denied: {who} could not {what}, so the server will not do it on their behalf"
        ))
    };
    let (canon, exists) = match std::fs::canonicalize(path) {
        Ok(c) => (c, true),
        Err(_) if create => {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            let parent = parent.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            match (std::fs::canonicalize(&parent), path.file_name()) {
                (Ok(c), Some(n)) => (c.join(n), false),
                _ => return denied(&format!("create {}", path.display())),
            }
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    for dir in canon.ancestors().skip(1) {
        match std::fs::metadata(dir) {
            Ok(md) if permits(peer, &md, X) => {}
            _ => {
                return denied(&format!(
                    "reach {} (no search permission on {})",
                    path.display(),
                    dir.display()
                ))
            }
        }
    }
    if !exists {
        let dir = canon.parent().unwrap_or(Path::new("/"));
        return match std::fs::metadata(dir) {
            Ok(md) if permits(peer, &md, W | X) && !has_acl(dir) => Ok(()),
            _ => denied(&format!("create {}", path.display())),
        };
    }
    let md = std::fs::metadata(&canon).map_err(|e| format!("{}: {e}", path.display()))?;
    let kind_ok = md.is_file() || md.file_type().is_block_device();
    if !kind_ok {
        return Err(format!(
            "{} is not a regular file or block device",
            path.display()
        ));
    }
    let want = if create { W } else { R | W };
    if has_acl(&canon) && peer.uid != md.uid() {
        return denied(&format!(
            "be shown to have access to {} (it has an ACL, which raidkit does not evaluate; ask its owner or root)",
            path.display()
        ));
    }
    if !permits(peer, &md, want) {
        return denied(&format!(
            "open {} for {}",
            path.display(),
            if create {
                "writing"
            } else {
                "reading and writing"
            }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn policy() {
        let p = Policy {
            owner: 1000,
            group: Some(50),
        };
        assert!(p.allow(&peer(0, 0, &[]), false).is_ok());
        assert!(p.allow(&peer(1000, 1000, &[]), false).is_ok());
        assert!(p.allow(&peer(1001, 1001, &[50]), true).is_ok());
        assert!(p.allow(&peer(1001, 50, &[]), true).is_ok());
        let e = p.allow(&peer(1001, 1001, &[50]), false).unwrap_err();
        assert!(e.starts_with("permission denied: members of group"), "{e}");
        let e = p.allow(&peer(1002, 1002, &[]), true).unwrap_err();
        assert!(e.starts_with("permission denied"), "{e}");
        let p = Policy {
            owner: 0,
            group: None,
        };
        assert!(p.allow(&peer(1001, 50, &[50]), true).is_err());
    }

    #[test]
    fn paths_are_checked_with_the_peers_ids() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("rk-peer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = d.join("f");
        std::fs::write(&f, b"x").unwrap();
        let md = std::fs::metadata(&f).unwrap();
        let (owner, group) = (md.uid(), md.gid());
        let stranger = peer(owner.wrapping_add(4242), 4242, &[]);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_path(&peer(owner, group, &[]), &f, false).is_ok() || owner == 0);
        assert!(check_path(&stranger, &f, false).is_err());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_path(&stranger, &f, false).is_ok());
        // A directory on the way that the peer may not search.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = check_path(&stranger, &f, false).unwrap_err();
        assert!(e.contains("no search permission"), "{e}");
        // A new file: the directory must be writable by the peer.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_path(&stranger, &d.join("new"), true).is_err());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check_path(&stranger, &d.join("new"), true).is_ok());
        assert!(
            check_path(&stranger, &d, false).is_err(),
            "a directory is no member"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
