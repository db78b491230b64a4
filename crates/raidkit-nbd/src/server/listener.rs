//! Listening sockets: a Unix socket created with an explicit mode (never more
//! accessible than asked, whatever the umask), or TCP; accepting with the peer's
//! identity (user id by `SO_PEERCRED`, or IP address) for per-peer limits.

use super::config::UnixAccess;
use super::stream::Sock;
use crate::NbdError;
use std::ffi::CString;
use std::io;
use std::net::{IpAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Who is on the other end, for per-peer connection limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    /// A local user (Unix socket).
    Uid(u32),
    /// A remote address (TCP); IPv4-mapped IPv6 addresses count as IPv4.
    Ip(IpAddr),
    /// The credentials could not be read (counted together).
    Unknown,
}

pub(crate) enum Listener {
    /// The listener, its path, and the (device, inode) of the socket file it made.
    Unix(UnixListener, PathBuf, (u64, u64)),
    Tcp(TcpListener),
}

fn listen_err(what: &'static str, addr: &Path, source: io::Error) -> NbdError {
    NbdError::Listen {
        what,
        addr: addr.display().to_string(),
        source,
    }
}

impl Listener {
    pub(crate) fn bind(listen: &super::Listen, access: UnixAccess) -> Result<Listener, NbdError> {
        match listen {
            super::Listen::Unix(p) => {
                let l = bind_unix(p, access)?;
                let md = std::fs::symlink_metadata(p)
                    .map_err(|e| listen_err("checking the new socket", p, e))?;
                Ok(Listener::Unix(l, p.clone(), (md.dev(), md.ino())))
            }
            super::Listen::Tcp(a) => {
                let err = |source| NbdError::Listen {
                    what: "listening on",
                    addr: a.clone(),
                    source,
                };
                let addrs: Vec<_> = a.to_socket_addrs().map_err(err)?.collect();
                Ok(Listener::Tcp(TcpListener::bind(&addrs[..]).map_err(err)?))
            }
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Listener::Unix(l, _, _) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }

    /// Accept one connection and tell who it is from.
    pub(crate) fn accept(&self) -> io::Result<(Sock, Peer)> {
        match self {
            Listener::Unix(l, _, _) => {
                let (s, _) = l.accept()?;
                let peer = peer_uid(s.as_raw_fd()).map_or(Peer::Unknown, Peer::Uid);
                Ok((Sock::unix(s), peer))
            }
            Listener::Tcp(l) => {
                let (s, addr) = l.accept()?;
                let ip = match addr.ip() {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                    v4 => v4,
                };
                Ok((Sock::tcp(s), Peer::Ip(ip)))
            }
        }
    }

    /// The socket path, or the bound `IP:PORT`.
    pub(crate) fn local_addr(&self) -> String {
        match self {
            Listener::Unix(_, p, _) => p.display().to_string(),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into()),
        }
    }

    /// Stop listening; a Unix socket's file is removed (if it is still ours).
    pub(crate) fn close(self) {
        if let Listener::Unix(_, p, id) = &self {
            let ours = std::fs::symlink_metadata(p).is_ok_and(|md| (md.dev(), md.ino()) == *id);
            if ours {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

fn peer_uid(fd: RawFd) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `fd` is an open Unix socket; `cred` and `len` are live and `len` holds
    // the exact size of `cred`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

/// Refuse a path that exists and is not a stale socket; remove a stale one.
fn clear_stale(p: &Path) -> Result<(), NbdError> {
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    if !md.file_type().is_socket() {
        return Err(NbdError::Config(format!(
            "{} exists and is not a socket; choose another path",
            p.display()
        )));
    }
    if UnixStream::connect(p).is_ok() {
        return Err(NbdError::Config(format!(
            "{} is in use by a running server",
            p.display()
        )));
    }
    std::fs::remove_file(p).map_err(|e| listen_err("removing the stale socket", p, e))
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// Create, bind and listen on a Unix socket whose file ends up with exactly
/// `access.mode()`. The socket's own inode is made 0600 before `bind`, and Linux creates
/// the file with that mode less the umask, so the file is never accessible to anyone
/// but its owner until it is given its final group and mode.
fn bind_unix(p: &Path, access: UnixAccess) -> Result<UnixListener, NbdError> {
    clear_stale(p)?;
    let bytes = p.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(NbdError::Config(format!(
            "{}: a Unix socket path must be 1 to {} bytes long",
            p.display(),
            addr.sun_path.len() - 1
        )));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain system call; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(listen_err("creating Unix socket", p, last_err()));
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `fd` is an open socket; fchmod on it sets the mode the file is created with.
    if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
        return Err(listen_err("setting the socket's mode", p, last_err()));
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `addr` is a fully initialised sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(listen_err("binding Unix socket", p, last_err()));
    }
    let l = UnixListener::from(fd);
    if let Err(e) = set_access(p, access) {
        let _ = std::fs::remove_file(p);
        return Err(listen_err("setting the socket's owner and mode", p, e));
    }
    // SAFETY: plain system call on an open, bound socket.
    if unsafe { libc::listen(l.as_raw_fd(), 128) } != 0 {
        let e = last_err();
        let _ = std::fs::remove_file(p);
        return Err(listen_err("listening on Unix socket", p, e));
    }
    Ok(l)
}

/// Give the socket file its group and mode, without following a symlink that might
/// have replaced it.
fn set_access(p: &Path, access: UnixAccess) -> io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path; the result is checked.
    let raw = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(last_err());
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: fstat on an open descriptor into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(last_err());
    }
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_uid != me {
        return Err(io::Error::other(
            "the path no longer names the socket just created",
        ));
    }
    // chmod/chown through /proc/self/fd act on the file the O_PATH descriptor holds.
    let via =
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(io::Error::other)?;
    if let UnixAccess::Group(gid) = access {
        // SAFETY: valid path; uid -1 leaves the owner unchanged.
        if unsafe { libc::chown(via.as_ptr(), libc::uid_t::MAX, gid) } != 0 {
            return Err(last_err());
        }
    }
    // SAFETY: valid path and mode.
    if unsafe { libc::chmod(via.as_ptr(), access.mode() as libc::mode_t) } != 0 {
        return Err(last_err());
    }
    Ok(())
}

/// A group's id, by name or number.
pub(crate) fn group_id(name: &str) -> Result<libc::gid_t, NbdError> {
    if let Ok(n) = name.parse::<libc::gid_t>() {
        return Ok(n);
    }
    let c = CString::new(name)
        .map_err(|_| NbdError::Config(format!("{name:?} is not a valid group name")))?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: group is plain data; all zeroes is valid before getgrnam_r fills it.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is to live memory of the size passed.
        let r = unsafe {
            libc::getgrnam_r(
                c.as_ptr(),
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            )
        };
        if r == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if r == 0 && !out.is_null() {
            return Ok(grp.gr_gid);
        }
        return Err(NbdError::Config(format!("no group named {name:?}")));
    }
}
