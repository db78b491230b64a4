//! The fixed newstyle handshake: greeting, option requests, option replies and the
//! `NBD_OPT_INFO`/`NBD_OPT_GO` data, encoded and parsed for both sides.

use super::*;

/// Length of the server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub const GREETING_LEN: usize = 18;
/// Length of an option request header: `IHAVEOPT`, option, data length.
pub const OPTION_HEADER_LEN: usize = 16;
/// Length of an option reply header: magic, option, reply type, data length.
pub const OPTION_REPLY_HEADER_LEN: usize = 20;

/// The server's greeting.
pub fn greeting(flags: u16) -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    g[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    g[16..18].copy_from_slice(&flags.to_be_bytes());
    g
}

/// Why a greeting is not one we can talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GreetingError {
    /// The first 8 bytes are not `NBDMAGIC`: not an NBD server.
    NotNbd,
    /// An oldstyle server (no option haggling, no export names).
    Oldstyle,
    /// Newstyle without the fixed newstyle flag.
    NotFixedNewstyle,
}

/// Parse the server's greeting; returns its handshake flags.
pub fn parse_greeting(g: &[u8; GREETING_LEN]) -> Result<u16, GreetingError> {
    if get64(g, 0) != NBDMAGIC {
        return Err(GreetingError::NotNbd);
    }
    match get64(g, 8) {
        IHAVEOPT => {}
        OLDSTYLE_MAGIC => return Err(GreetingError::Oldstyle),
        _ => return Err(GreetingError::NotNbd),
    }
    let flags = get16(g, 16);
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(GreetingError::NotFixedNewstyle);
    }
    Ok(flags)
}

/// An option request: header and data.
pub fn option_request(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(OPTION_HEADER_LEN + data.len());
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// Parse an option request header: (option, data length), or None if the magic is
/// wrong.
pub fn parse_option_header(h: &[u8; OPTION_HEADER_LEN]) -> Option<(u32, u32)> {
    (get64(h, 0) == IHAVEOPT).then(|| (get32(h, 8), get32(h, 12)))
}

/// An option reply: header and data.
pub fn option_reply(opt: u32, typ: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(OPTION_REPLY_HEADER_LEN + data.len());
    v.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&typ.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// An option reply header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option it answers.
    pub opt: u32,
    /// Reply type (`REP_*`).
    pub typ: u32,
    /// Data length.
    pub len: u32,
}

impl OptionReplyHeader {
    /// True for error replies (bit 31 set).
    pub fn is_error(&self) -> bool {
        self.typ & REP_FLAG_ERROR != 0
    }
}

/// Parse an option reply header, or None if the magic is wrong.
pub fn parse_option_reply_header(h: &[u8; OPTION_REPLY_HEADER_LEN]) -> Option<OptionReplyHeader> {
    (get64(h, 0) == REPLY_MAGIC).then(|| OptionReplyHeader {
        opt: get32(h, 8),
        typ: get32(h, 12),
        len: get32(h, 16),
    })
}

/// The data of `NBD_OPT_INFO`/`NBD_OPT_GO`: name length, name, count, info types.
pub fn go_data(name: &[u8], infos: &[u16]) -> Vec<u8> {
    let mut d = Vec::with_capacity(6 + name.len() + 2 * infos.len());
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name);
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

/// Parse `NBD_OPT_INFO`/`NBD_OPT_GO` data: (export name, requested info types as
/// big-endian u16 pairs), or None if the lengths are inconsistent.
pub fn parse_go_data(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let nlen = usize::try_from(get32(data, 0)).ok()?;
    let rest = data.get(4..)?;
    let name = rest.get(..nlen)?;
    let tail = rest.get(nlen..)?;
    let count = usize::from(get16(tail, 0));
    (tail.len() == 2 + 2 * count).then_some((name, tail.get(2..)?))
}

/// True if the info request list (big-endian u16s) asks for `typ`.
pub fn wants_info(requests: &[u8], typ: u16) -> bool {
    requests.chunks_exact(2).any(|c| get16(c, 0) == typ)
}

/// `NBD_INFO_EXPORT` payload.
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut d = Vec::with_capacity(12);
    d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    d.extend_from_slice(&size.to_be_bytes());
    d.extend_from_slice(&flags.to_be_bytes());
    d
}

/// `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION` payload.
pub fn info_string(typ: u16, s: &str) -> Vec<u8> {
    let mut d = typ.to_be_bytes().to_vec();
    d.extend_from_slice(s.as_bytes());
    d
}

/// `NBD_INFO_BLOCK_SIZE` payload.
pub fn info_block_size(min: u32, pref: u32, max: u32) -> Vec<u8> {
    let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    d.extend_from_slice(&min.to_be_bytes());
    d.extend_from_slice(&pref.to_be_bytes());
    d.extend_from_slice(&max.to_be_bytes());
    d
}

/// One `NBD_REP_INFO` item, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Info {
    /// Size in bytes and transmission flags.
    Export {
        /// Size in bytes.
        size: u64,
        /// Transmission flags.
        flags: u16,
    },
    /// The export's canonical name.
    Name(String),
    /// A description.
    Description(String),
    /// Block size constraints.
    BlockSize {
        /// Minimum block size.
        min: u32,
        /// Preferred block size.
        pref: u32,
        /// Maximum payload.
        max: u32,
    },
    /// An info type this side does not know (to be ignored).
    Unknown(u16),
}

/// Parse an `NBD_REP_INFO` payload, checking each known type's exact length and, for
/// block sizes, the constraints the specification puts on them.
pub fn parse_info(d: &[u8]) -> Result<Info, &'static str> {
    if d.len() < 2 {
        return Err("NBD_REP_INFO shorter than its type");
    }
    let body = d.get(2..).unwrap_or(&[]);
    match get16(d, 0) {
        INFO_EXPORT if d.len() == 12 => Ok(Info::Export {
            size: get64(d, 2),
            flags: get16(d, 10),
        }),
        INFO_EXPORT => Err("NBD_INFO_EXPORT is not 12 bytes"),
        INFO_NAME if body.len() <= MAX_STRING_LEN => {
            Ok(Info::Name(printable(body, MAX_STRING_LEN)))
        }
        INFO_DESCRIPTION if body.len() <= MAX_STRING_LEN => {
            Ok(Info::Description(printable(body, MAX_STRING_LEN)))
        }
        INFO_NAME | INFO_DESCRIPTION => Err("NBD_INFO string longer than 4096 bytes"),
        INFO_BLOCK_SIZE if d.len() == 14 => {
            let (min, pref, max) = (get32(d, 2), get32(d, 6), get32(d, 10));
            let legal = min.is_power_of_two()
                && min <= 65536
                && pref.is_power_of_two()
                && pref >= min
                && max >= min
                && (max == u32::MAX || max % min == 0);
            if legal {
                Ok(Info::BlockSize { min, pref, max })
            } else {
                Err("NBD_INFO_BLOCK_SIZE values the protocol forbids")
            }
        }
        INFO_BLOCK_SIZE => Err("NBD_INFO_BLOCK_SIZE is not 14 bytes"),
        t => Ok(Info::Unknown(t)),
    }
}

/// The server's reply to `NBD_OPT_EXPORT_NAME`: size, flags, and 124 zeroes unless
/// `NO_ZEROES` was negotiated.
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut r = Vec::with_capacity(134);
    r.extend_from_slice(&size.to_be_bytes());
    r.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        r.extend_from_slice(&[0u8; 124]);
    }
    r
}

/// Symbolic name of an option reply error type, for messages.
pub fn rep_name(typ: u32) -> &'static str {
    match typ {
        REP_ACK => "NBD_REP_ACK",
        REP_SERVER => "NBD_REP_SERVER",
        REP_INFO => "NBD_REP_INFO",
        REP_ERR_UNSUP => "NBD_REP_ERR_UNSUP",
        REP_ERR_POLICY => "NBD_REP_ERR_POLICY",
        REP_ERR_INVALID => "NBD_REP_ERR_INVALID",
        REP_ERR_PLATFORM => "NBD_REP_ERR_PLATFORM",
        REP_ERR_TLS_REQD => "NBD_REP_ERR_TLS_REQD",
        REP_ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN",
        REP_ERR_SHUTDOWN => "NBD_REP_ERR_SHUTDOWN",
        REP_ERR_BLOCK_SIZE_REQD => "NBD_REP_ERR_BLOCK_SIZE_REQD",
        REP_ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG",
        _ => "an unknown reply type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_roundtrip_and_refusals() {
        let g = greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        assert_eq!(parse_greeting(&g), Ok(3));
        let mut old = g;
        old[8..16].copy_from_slice(&OLDSTYLE_MAGIC.to_be_bytes());
        assert_eq!(parse_greeting(&old), Err(GreetingError::Oldstyle));
        let mut bad = g;
        bad[0] = b'X';
        assert_eq!(parse_greeting(&bad), Err(GreetingError::NotNbd));
        assert_eq!(
            parse_greeting(&greeting(0)),
            Err(GreetingError::NotFixedNewstyle)
        );
    }

    #[test]
    fn go_data_roundtrip() {
        let d = go_data(b"disk", &[INFO_BLOCK_SIZE, INFO_NAME]);
        let (name, reqs) = parse_go_data(&d).unwrap();
        assert_eq!(name, b"disk");
        assert!(wants_info(reqs, INFO_NAME) && !wants_info(reqs, INFO_DESCRIPTION));
        assert_eq!(parse_go_data(&d[..d.len() - 1]), None);
        assert_eq!(parse_go_data(&[0xff, 0xff, 0xff, 0xff, 0, 0]), None);
        assert_eq!(parse_go_data(&[0, 0, 0, 0, 0, 1]), None);
    }

    #[test]
    fn info_items() {
        assert_eq!(
            parse_info(&info_export(1 << 40, 3)),
            Ok(Info::Export {
                size: 1 << 40,
                flags: 3
            })
        );
        assert_eq!(
            parse_info(&info_block_size(512, 4096, 1 << 25)),
            Ok(Info::BlockSize {
                min: 512,
                pref: 4096,
                max: 1 << 25
            })
        );
        assert!(parse_info(&info_block_size(3, 4096, 1 << 25)).is_err());
        assert!(parse_info(&info_block_size(4096, 512, 1 << 25)).is_err());
        assert!(parse_info(&info_block_size(512, 4096, 1000)).is_err());
        assert!(parse_info(&[0, 0, 1]).is_err());
        assert_eq!(
            parse_info(&info_string(INFO_NAME, "a\u{1}b")),
            Ok(Info::Name("a?b".into()))
        );
        assert_eq!(parse_info(&[0, 77, 1, 2]), Ok(Info::Unknown(77)));
        let h = option_reply(OPT_GO, REP_ERR_UNKNOWN, b"no");
        let mut a = [0u8; 20];
        a.copy_from_slice(&h[..20]);
        let r = parse_option_reply_header(&a).unwrap();
        assert!(r.is_error() && r.len == 2 && r.opt == OPT_GO);
    }
}
