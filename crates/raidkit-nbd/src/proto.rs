//! NBD wire constants and the pure (IO-free) parts of the protocol: request parsing,
//! request validation and errno mapping. Everything here is total over its input: any
//! byte sequence yields a value or an error, never a panic.

use std::io;

/// `NBDMAGIC`, first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, also prefixes every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic of every option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the 124 zero bytes after `NBD_OPT_EXPORT_NAME` may be omitted.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: no zeroes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Option: enter transmission (old way, cannot fail gracefully).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: soft disconnect.
pub const OPT_ABORT: u32 = 2;
/// Option: list exports.
pub const OPT_LIST: u32 = 3;
/// Option: upgrade to TLS.
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies.
pub const OPT_STRUCTURED_REPLY: u32 = 8;

/// Option reply: done.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of `NBD_OPT_LIST`.
pub const REP_SERVER: u32 = 2;
/// Option reply: one info item of `NBD_OPT_INFO`/`NBD_OPT_GO`.
pub const REP_INFO: u32 = 3;
/// Option error: unknown option.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Option error: forbidden by policy.
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// Option error: syntactically invalid.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// Option error: TLS required first.
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
/// Option error: server shutting down.
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
/// Option error: request too big.
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

/// Info: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Info: export name.
pub const INFO_NAME: u16 = 1;
/// Info: export description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Info: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flag: flags field is valid.
pub const TF_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: export is read-only.
pub const TF_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `NBD_CMD_FLUSH` supported.
pub const TF_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `NBD_CMD_FLAG_FUA` supported.
pub const TF_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: `NBD_CMD_TRIM` supported.
pub const TF_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `NBD_CMD_WRITE_ZEROES` supported.
pub const TF_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: several connections share one cache (flush on one covers all).
pub const TF_CAN_MULTI_CONN: u16 = 1 << 8;
/// Transmission flag: `NBD_CMD_FLAG_FAST_ZERO` supported.
pub const TF_SEND_FAST_ZERO: u16 = 1 << 11;

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write (payload follows the header).
pub const CMD_WRITE: u16 = 1;
/// Command: disconnect.
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag: write zeroes must allocate.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag: fail write zeroes with `ENOTSUP` unless it is fast.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply flag: last chunk.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Chunk type: empty final chunk.
pub const REPLY_TYPE_NONE: u16 = 0;
/// Chunk type: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Chunk type: error.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
/// Chunk type: error at an offset.
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// NBD error values (they are the Linux errno values, but fixed by the protocol).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: u32 = 1;
    /// IO error.
    pub const EIO: u32 = 5;
    /// Out of memory.
    pub const ENOMEM: u32 = 12;
    /// Invalid argument.
    pub const EINVAL: u32 = 22;
    /// No space (write past the end).
    pub const ENOSPC: u32 = 28;
    /// Value too large.
    pub const EOVERFLOW: u32 = 75;
    /// Not supported (fast zero that would not be fast).
    pub const ENOTSUP: u32 = 95;
    /// Server shutting down.
    pub const ESHUTDOWN: u32 = 108;
}

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

fn be16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_be_bytes(a)
}
fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_be_bytes(a)
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_be_bytes(a)
}

/// Parse a request header. `None` if the magic is wrong (the stream cannot be
/// resynchronised: the connection must be closed).
pub fn parse_request(h: &[u8; REQUEST_LEN]) -> Option<Request> {
    if be32(h, 0) != REQUEST_MAGIC {
        return None;
    }
    Some(Request {
        flags: be16(h, 4),
        typ: be16(h, 6),
        cookie: be64(h, 8),
        offset: be64(h, 16),
        len: be32(h, 24),
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

/// Read a big-endian u16 at `at` (0 if out of bounds; callers check lengths first).
pub(crate) fn get16(b: &[u8], at: usize) -> u16 {
    be16(b, at)
}
/// Read a big-endian u32 at `at` (0 if out of bounds; callers check lengths first).
pub(crate) fn get32(b: &[u8], at: usize) -> u32 {
    be32(b, at)
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
