//! Transmission replies: simple replies and structured reply chunks, encoded by the
//! server and parsed (and checked) by the client.

use super::*;

/// Length of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Length of a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;
/// Longest error message the server sends in an error chunk.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// A simple reply header.
pub fn simple_reply(errno: u32, cookie: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut h = [0u8; SIMPLE_REPLY_LEN];
    h[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    h[4..8].copy_from_slice(&errno.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h
}

/// A structured reply chunk header (`len`: payload bytes that follow).
pub fn chunk_header(flags: u16, typ: u16, cookie: u64, len: u32) -> [u8; CHUNK_HEADER_LEN] {
    let mut h = [0u8; CHUNK_HEADER_LEN];
    h[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&typ.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..20].copy_from_slice(&len.to_be_bytes());
    h
}

/// `m` cut to at most `max` bytes on a character boundary.
fn truncate_str(m: &str, max: usize) -> &str {
    let mut end = m.len().min(max);
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    m.get(..end).unwrap_or("")
}

/// A whole final error chunk (header and payload): `NBD_REPLY_TYPE_ERROR`, or
/// `NBD_REPLY_TYPE_ERROR_OFFSET` with `offset`. The message is cut to
/// [`MAX_ERROR_MESSAGE`] bytes.
pub fn error_chunk(cookie: u64, errno: u32, msg: &str, offset: Option<u64>) -> Vec<u8> {
    let msg = truncate_str(msg, MAX_ERROR_MESSAGE).as_bytes();
    let mut p = Vec::with_capacity(CHUNK_HEADER_LEN + 14 + msg.len());
    p.extend_from_slice(&[0u8; CHUNK_HEADER_LEN]);
    p.extend_from_slice(&errno.to_be_bytes());
    p.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    p.extend_from_slice(msg);
    let typ = match offset {
        Some(o) => {
            p.extend_from_slice(&o.to_be_bytes());
            REPLY_TYPE_ERROR_OFFSET
        }
        None => REPLY_TYPE_ERROR,
    };
    let len = (p.len() - CHUNK_HEADER_LEN) as u32;
    p[..CHUNK_HEADER_LEN].copy_from_slice(&chunk_header(REPLY_FLAG_DONE, typ, cookie, len));
    p
}

/// The fields of a simple reply after its magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleReply {
    /// NBD error value (0: success).
    pub errno: u32,
    /// The request's cookie (handle).
    pub cookie: u64,
}

/// Parse the 12 bytes of a simple reply that follow its magic.
pub fn parse_simple_reply(b: &[u8; 12]) -> SimpleReply {
    SimpleReply {
        errno: get32(b, 0),
        cookie: get64(b, 4),
    }
}

/// The fields of a structured reply chunk header after its magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Chunk flags (`REPLY_FLAG_DONE`).
    pub flags: u16,
    /// Chunk type.
    pub typ: u16,
    /// The request's cookie (handle).
    pub cookie: u64,
    /// Payload length.
    pub len: u32,
}

impl ChunkHeader {
    /// True if this is the last chunk of its reply.
    pub fn done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
    /// True for error chunk types (bit 15 set), known or not.
    pub fn is_error(&self) -> bool {
        self.typ & REPLY_TYPE_ERROR_BIT != 0
    }
}

/// Parse the 16 bytes of a chunk header that follow its magic.
pub fn parse_chunk_header(b: &[u8; 16]) -> ChunkHeader {
    ChunkHeader {
        flags: get16(b, 0),
        typ: get16(b, 2),
        cookie: get64(b, 4),
        len: get32(b, 12),
    }
}

/// Longest error chunk payload a client should accept: errno, message length, a
/// message of at most [`MAX_STRING_LEN`] bytes and an offset.
pub const MAX_ERROR_PAYLOAD: u32 = 4 + 2 + MAX_STRING_LEN as u32 + 8;

/// A parsed error chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorChunk {
    /// NBD error value (nonzero).
    pub errno: u32,
    /// The server's message (lossy UTF-8, control characters replaced).
    pub message: String,
    /// The offset, for `NBD_REPLY_TYPE_ERROR_OFFSET`.
    pub offset: Option<u64>,
}

/// Parse an error chunk's payload. Unknown error types are accepted (with no offset)
/// as the specification asks, as long as the message fits in the payload.
pub fn parse_error_chunk(typ: u16, payload: &[u8]) -> Result<ErrorChunk, &'static str> {
    if payload.len() < 6 {
        return Err("error chunk shorter than 6 bytes");
    }
    let errno = get32(payload, 0);
    let mlen = usize::from(get16(payload, 4));
    let rest = payload.len() - 6;
    if mlen > rest {
        return Err("error chunk message longer than the chunk");
    }
    let msg = payload.get(6..6 + mlen).unwrap_or(&[]);
    let offset = if typ == REPLY_TYPE_ERROR_OFFSET {
        if rest - mlen != 8 {
            return Err("error offset chunk without an 8-byte offset");
        }
        Some(get64(payload, 6 + mlen))
    } else {
        None
    };
    if errno == 0 {
        return Err("error chunk with error value 0");
    }
    Ok(ErrorChunk {
        errno,
        message: printable(msg, MAX_STRING_LEN),
        offset,
    })
}

/// Parse an `NBD_REPLY_TYPE_OFFSET_HOLE` payload: (offset, length).
pub fn parse_hole(payload: &[u8]) -> Result<(u64, u32), &'static str> {
    if payload.len() != 12 {
        return Err("hole chunk payload is not 12 bytes");
    }
    let len = get32(payload, 8);
    if len == 0 {
        return Err("hole chunk of length 0");
    }
    Ok((get64(payload, 0), len))
}

/// True if `[offset, offset + len)` lies within the request `[req_offset, req_offset +
/// req_len)` (no overflow; `len` may be 0 only for an offset inside or at its end).
pub fn within(req_offset: u64, req_len: u32, offset: u64, len: u64) -> bool {
    let req_end = req_offset.checked_add(u64::from(req_len));
    let end = offset.checked_add(len);
    matches!((req_end, end), (Some(re), Some(e)) if offset >= req_offset && e <= re)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chunks_roundtrip() {
        let c = error_chunk(9, errno::EIO, "disk on fire", Some(4096));
        let mut h = [0u8; 16];
        h.copy_from_slice(&c[4..20]);
        let ch = parse_chunk_header(&h);
        assert_eq!(get32(&c, 0), STRUCTURED_REPLY_MAGIC);
        assert_eq!(
            ch,
            ChunkHeader {
                flags: REPLY_FLAG_DONE,
                typ: REPLY_TYPE_ERROR_OFFSET,
                cookie: 9,
                len: 4 + 2 + 12 + 8
            }
        );
        let e = parse_error_chunk(ch.typ, &c[20..]).unwrap();
        assert_eq!(
            e,
            ErrorChunk {
                errno: errno::EIO,
                message: "disk on fire".into(),
                offset: Some(4096)
            }
        );
        let long = "é".repeat(1000);
        let c = error_chunk(1, errno::EINVAL, &long, None);
        let e = parse_error_chunk(REPLY_TYPE_ERROR, &c[20..]).unwrap();
        assert_eq!(e.message.len(), 1024);
        assert_eq!(e.offset, None);
    }

    #[test]
    fn lying_error_chunks_refused() {
        assert!(parse_error_chunk(REPLY_TYPE_ERROR, &[0, 0, 0, 5, 0]).is_err());
        assert!(parse_error_chunk(REPLY_TYPE_ERROR, &[0, 0, 0, 5, 0, 9, b'x']).is_err());
        assert!(parse_error_chunk(REPLY_TYPE_ERROR, &[0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_error_chunk(REPLY_TYPE_ERROR_OFFSET, &[0, 0, 0, 5, 0, 0, 1]).is_err());
        assert!(parse_hole(&[0; 12]).is_err());
        assert_eq!(
            parse_hole(&[0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 2, 0]),
            Ok((8, 512))
        );
    }

    #[test]
    fn within_bounds() {
        assert!(within(100, 50, 100, 50));
        assert!(within(100, 50, 149, 1));
        assert!(!within(100, 50, 149, 2));
        assert!(!within(100, 50, 99, 1));
        assert!(!within(u64::MAX - 1, 50, u64::MAX, 1));
        assert!(!within(0, 50, u64::MAX, 2));
    }
}
