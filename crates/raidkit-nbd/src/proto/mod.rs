//! The NBD wire format, shared by the server and the client: constants, and pure
//! (IO-free) encoders and parsers for every message of the handshake and of the
//! transmission phase. Everything here is total over its input: any byte sequence
//! yields a value or an error, never a panic, and no parser allocates more than the
//! caller allowed.
//!
//! * [`handshake`]: greeting, client flags, option requests and option replies,
//!   `NBD_OPT_GO`/`NBD_OPT_INFO` data and `NBD_REP_INFO` items.
//! * [`request`]: the request header, its validation against an export, errno mapping.
//! * [`reply`]: simple replies and structured reply chunks.

pub mod handshake;
pub mod reply;
pub mod request;

pub use handshake::*;
pub use reply::*;
pub use request::*;

/// `NBDMAGIC`, first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, also prefixes every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Oldstyle negotiation magic (after `NBDMAGIC`), not supported by raidkit.
pub const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
/// Magic of every option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// The IANA-assigned NBD port.
pub const DEFAULT_PORT: u16 = 10809;

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
/// Bit set in every option error reply type.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
/// Option error: unknown option.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Option error: forbidden by policy.
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// Option error: syntactically invalid.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// Option error: not supported on this platform.
pub const REP_ERR_PLATFORM: u32 = (1 << 31) + 4;
/// Option error: TLS required first.
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
/// Option error: server shutting down.
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
/// Option error: the client must ask for block sizes.
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = (1 << 31) + 8;
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
/// Chunk type: a hole (reads as zeroes) at an offset.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// Bit set in every error chunk type.
pub const REPLY_TYPE_ERROR_BIT: u16 = 1 << 15;
/// Chunk type: error.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
/// Chunk type: error at an offset.
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// Longest string (export name, message) the protocol allows.
pub const MAX_STRING_LEN: usize = 4096;

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

    /// The symbolic name of an NBD error value (`"EIO"`), or `"E?"` if unknown.
    pub fn name(e: u32) -> &'static str {
        match e {
            EPERM => "EPERM",
            EIO => "EIO",
            ENOMEM => "ENOMEM",
            EINVAL => "EINVAL",
            ENOSPC => "ENOSPC",
            EOVERFLOW => "EOVERFLOW",
            ENOTSUP => "ENOTSUP",
            ESHUTDOWN => "ESHUTDOWN",
            _ => "E?",
        }
    }
}

/// Big-endian u16 at `at` (0 if out of bounds; callers check lengths first).
pub fn get16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at.saturating_add(2)) {
        a.copy_from_slice(s);
    }
    u16::from_be_bytes(a)
}

/// Big-endian u32 at `at` (0 if out of bounds; callers check lengths first).
pub fn get32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at.saturating_add(4)) {
        a.copy_from_slice(s);
    }
    u32::from_be_bytes(a)
}

/// Big-endian u64 at `at` (0 if out of bounds; callers check lengths first).
pub fn get64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at.saturating_add(8)) {
        a.copy_from_slice(s);
    }
    u64::from_be_bytes(a)
}

/// A protocol string from the wire, made printable (lossy UTF-8, at most `max` bytes,
/// control characters replaced), for error messages.
pub fn printable(b: &[u8], max: usize) -> String {
    let cut = b.get(..b.len().min(max)).unwrap_or(b);
    let s: String = String::from_utf8_lossy(cut)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if b.len() > max {
        format!("{s}…")
    } else {
        s
    }
}
