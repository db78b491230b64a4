//! systemd integration without a library: `sd_notify` (one datagram to `$NOTIFY_SOCKET`,
//! as sd_notify(3) specifies it) and whether stderr goes to the journal (`$JOURNAL_STREAM`
//! names the device and inode of the stream systemd connected, see systemd.exec(5)).

use std::os::unix::net::UnixDatagram;

/// Send `state` (`READY=1`, `STOPPING=1`, `STATUS=...`) to the service manager, if one
/// listens. Failures are ignored: a notification is advice, never a reason to stop.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket: the name after '@'.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(&path))
    };
    let _ = sent;
}

/// True if stderr is the journal's stream (then lines carry no timestamps of their own:
/// journald adds them) — `$JOURNAL_STREAM` is `DEVICE:INODE` of that stream.
pub fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    is_stream(2, dev, ino) || is_stream(1, dev, ino)
}

fn is_stream(fd: i32, dev: u64, ino: u64) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes a `struct stat` into the buffer we own; fd is a plain number
    // (a closed one makes fstat fail, which we check).
    let r = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if r != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    st.st_dev == dev && st.st_ino == ino
}

#[cfg(test)]
mod tests {
    #[test]
    fn notify_reaches_a_datagram_socket() {
        let dir = std::env::temp_dir().join(format!("rk-sd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("notify");
        let _ = std::fs::remove_file(&p);
        let l = std::os::unix::net::UnixDatagram::bind(&p).unwrap();
        // SAFETY of set_var: this test is the only one in the binary touching NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &p);
        super::notify("READY=1");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut b = [0u8; 64];
        let n = l.recv(&mut b).unwrap();
        assert_eq!(&b[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
