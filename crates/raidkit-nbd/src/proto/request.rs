//! Transmission requests: the header, its validation against an export, and the
//! mapping of IO errors to NBD error values.

use super::*;
use std::io;

/// Size of a request header on the wire.
pub const REQUEST_LEN: usize = 28;

/// A parsed transmission request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub typ: u16,
    /// Client's handle, echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length (payload length for writes).
    pub len: u32,
}

/// Parse a request header. `None` if the magic is wrong (the stream cannot be
/// resynchronised: the connection must be closed).
pub fn parse_request(h: &[u8; REQUEST_LEN]) -> Option<Request> {
    if get32(h, 0) != REQUEST_MAGIC {
        return None;
    }
    Some(Request {
        flags: get16(h, 4),
        typ: get16(h, 6),
        cookie: get64(h, 8),
        offset: get64(h, 16),
        len: get32(h, 24),
    })
}

/// Encode a request header (for clients and tests).
pub fn encode_request(r: &Request) -> [u8; REQUEST_LEN] {
    let mut h = [0u8; REQUEST_LEN];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&r.flags.to_be_bytes());
    h[6..8].copy_from_slice(&r.typ.to_be_bytes());
    h[8..16].copy_from_slice(&r.cookie.to_be_bytes());
    h[16..24].copy_from_slice(&r.offset.to_be_bytes());
    h[24..28].copy_from_slice(&r.len.to_be_bytes());
    h
}

/// What the export allows, as seen by the request validator.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Export size in bytes.
    pub size: u64,
    /// Export is read-only.
    pub read_only: bool,
    /// Largest READ/WRITE payload accepted.
    pub max_payload: u32,
    /// Fast zeroing is available.
    pub fast_zero: bool,
}

/// A validated command, ready for a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    /// Read `len` bytes.
    Read,
    /// Write the payload.
    Write {
        /// Persist before replying.
        fua: bool,
    },
    /// Flush.
    Flush,
    /// Discard.
    Trim {
        /// Persist before replying.
        fua: bool,
    },
    /// Write zeroes.
    WriteZeroes {
        /// Persist before replying.
        fua: bool,
        /// Allocate (do not punch holes).
        no_hole: bool,
    },
    /// Disconnect.
    Disc,
}

/// A request refused with an NBD errno and a human message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// NBD error value.
    pub errno: u32,
    /// Message for structured error replies.
    pub msg: &'static str,
}

const fn refuse(errno: u32, msg: &'static str) -> Refusal {
    Refusal { errno, msg }
}

/// Validate a request against the export. Checks, in order: known command, payload
/// size limit, write permission, range (offset + length must not overflow and must lie
/// within the export; zero-length requests are accepted at any offset up to the size),
/// fast-zero availability.
///
/// Range errors are `ENOSPC` for WRITE and WRITE_ZEROES and `EINVAL` for READ and TRIM,
/// as the NBD specification's "Error values" section asks.
pub fn validate(r: &Request, lim: &Limits) -> Result<Cmd, Refusal> {
    let fua = r.flags & CMD_FLAG_FUA != 0;
    let cmd = match r.typ {
        CMD_READ => Cmd::Read,
        CMD_WRITE => Cmd::Write { fua },
        CMD_DISC => return Ok(Cmd::Disc),
        CMD_FLUSH => Cmd::Flush,
        CMD_TRIM => Cmd::Trim { fua },
        CMD_WRITE_ZEROES => Cmd::WriteZeroes {
            fua,
            no_hole: r.flags & CMD_FLAG_NO_HOLE != 0,
        },
        _ => return Err(refuse(errno::EINVAL, "unknown command")),
    };
    if matches!(cmd, Cmd::Read | Cmd::Write { .. }) && r.len > lim.max_payload {
        return Err(refuse(
            errno::EINVAL,
            "request length exceeds the advertised maximum block size",
        ));
    }
    let writes = matches!(
        cmd,
        Cmd::Write { .. } | Cmd::Trim { .. } | Cmd::WriteZeroes { .. }
    );
    if writes && lim.read_only {
        return Err(refuse(errno::EPERM, "the export is read-only"));
    }
    if cmd == Cmd::Flush {
        return Ok(cmd);
    }
    let in_range = r
        .offset
        .checked_add(u64::from(r.len))
        .is_some_and(|end| end <= lim.size);
    if !in_range {
        return Err(match cmd {
            Cmd::Write { .. } | Cmd::WriteZeroes { .. } => refuse(
                errno::ENOSPC,
                "request extends beyond the end of the export",
            ),
            _ => refuse(
                errno::EINVAL,
                "request extends beyond the end of the export",
            ),
        });
    }
    if r.typ == CMD_WRITE_ZEROES && r.flags & CMD_FLAG_FAST_ZERO != 0 && !lim.fast_zero {
        return Err(refuse(errno::ENOTSUP, "fast zeroing is not available"));
    }
    Ok(cmd)
}

/// Map an IO error from a backend to an NBD error value.
pub fn errno_of(e: &io::Error) -> u32 {
    if let Some(code) = e.raw_os_error() {
        return match code {
            libc::EPERM | libc::EROFS | libc::EACCES => errno::EPERM,
            libc::ENOMEM => errno::ENOMEM,
            libc::EINVAL => errno::EINVAL,
            libc::ENOSPC | libc::EDQUOT | libc::EFBIG => errno::ENOSPC,
            libc::EOVERFLOW => errno::EOVERFLOW,
            libc::ENOTSUP => errno::ENOTSUP,
            libc::ESHUTDOWN => errno::ESHUTDOWN,
            _ => errno::EIO,
        };
    }
    match e.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => errno::EPERM,
        io::ErrorKind::InvalidInput => errno::EINVAL,
        io::ErrorKind::Unsupported => errno::ENOTSUP,
        io::ErrorKind::OutOfMemory => errno::ENOMEM,
        io::ErrorKind::StorageFull => errno::ENOSPC,
        _ => errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        size: 1 << 20,
        read_only: false,
        max_payload: 1 << 16,
        fast_zero: false,
    };

    fn req(typ: u16, flags: u16, offset: u64, len: u32) -> Request {
        Request {
            flags,
            typ,
            cookie: 7,
            offset,
            len,
        }
    }

    #[test]
    fn roundtrip() {
        let r = req(CMD_WRITE, 3, 0x1122334455667788, 0x99aabbcc);
        assert_eq!(parse_request(&encode_request(&r)), Some(r));
        let mut bad = encode_request(&r);
        bad[0] ^= 1;
        assert_eq!(parse_request(&bad), None);
    }

    #[test]
    fn ranges() {
        assert_eq!(validate(&req(CMD_READ, 0, 0, 512), &LIM), Ok(Cmd::Read));
        assert_eq!(
            validate(&req(CMD_READ, 0, (1 << 20) - 512, 512), &LIM),
            Ok(Cmd::Read)
        );
        assert_eq!(
            validate(&req(CMD_READ, 0, (1 << 20) - 511, 512), &LIM).map_err(|e| e.errno),
            Err(errno::EINVAL)
        );
        assert_eq!(
            validate(&req(CMD_WRITE, 0, 1 << 20, 1), &LIM).map_err(|e| e.errno),
            Err(errno::ENOSPC)
        );
        assert_eq!(
            validate(&req(CMD_TRIM, 0, u64::MAX, 2), &LIM).map_err(|e| e.errno),
            Err(errno::EINVAL)
        );
        assert_eq!(validate(&req(CMD_READ, 0, 1 << 20, 0), &LIM), Ok(Cmd::Read));
        assert_eq!(
            validate(&req(CMD_READ, 0, (1 << 20) + 1, 0), &LIM).map_err(|e| e.errno),
            Err(errno::EINVAL)
        );
        assert_eq!(
            validate(&req(CMD_READ, 0, 0, (1 << 16) + 1), &LIM).map_err(|e| e.errno),
            Err(errno::EINVAL)
        );
        assert_eq!(
            validate(&req(9, 0, 0, 0), &LIM).map_err(|e| e.errno),
            Err(errno::EINVAL)
        );
        assert_eq!(
            validate(&req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 4096), &LIM)
                .map_err(|e| e.errno),
            Err(errno::ENOTSUP)
        );
        assert_eq!(
            validate(
                &req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | 1, 0, 1 << 20),
                &LIM
            ),
            Ok(Cmd::WriteZeroes {
                fua: true,
                no_hole: true
            })
        );
        let ro = Limits {
            read_only: true,
            ..LIM
        };
        for t in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
            assert_eq!(
                validate(&req(t, 0, 0, 512), &ro).map_err(|e| e.errno),
                Err(errno::EPERM)
            );
        }
        assert_eq!(validate(&req(CMD_FLUSH, 0, 0, 0), &ro), Ok(Cmd::Flush));
    }

    #[test]
    fn errno_mapping() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EROFS)),
            errno::EPERM
        );
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EDQUOT)),
            errno::ENOSPC
        );
        assert_eq!(errno_of(&io::Error::other("x")), errno::EIO);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]
        /// Random headers: parsing and validation never panic, and whatever is accepted
        /// lies inside the export and the payload limit.
        #[test]
        fn random_headers(bytes in proptest::array::uniform28(proptest::prelude::any::<u8>()),
                          magic in proptest::prelude::any::<bool>(),
                          size in proptest::prelude::any::<u64>(),
                          max in 0u32..(64 << 20), ro in proptest::prelude::any::<bool>()) {
            let mut h = bytes;
            if magic {
                h[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
            }
            let Some(r) = parse_request(&h) else {
                proptest::prop_assert!(!magic);
                return Ok(());
            };
            proptest::prop_assert_eq!(encode_request(&r), h);
            let lim = Limits { size, read_only: ro, max_payload: max, fast_zero: false };
            if let Ok(cmd) = validate(&r, &lim) {
                match cmd {
                    Cmd::Disc | Cmd::Flush => {}
                    _ => {
                        let end = r.offset.checked_add(u64::from(r.len));
                        proptest::prop_assert!(end.is_some_and(|e| e <= size));
                        proptest::prop_assert!(!(ro && cmd != Cmd::Read));
                        if matches!(cmd, Cmd::Read | Cmd::Write { .. }) {
                            proptest::prop_assert!(r.len <= max);
                        }
                    }
                }
            }
        }
    }
}
