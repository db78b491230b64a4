//! The fixed newstyle handshake, server side: greeting, option haggling, the TLS
//! upgrade; all of it within the handshake deadline.

use super::admission::Ticket;
use super::config::ExportEntry;
use super::stream::{Sock, Stream, Transport};
use super::Registration;
use super::{transmission, Shared};
use crate::proto::{self, printable};
use crate::util::drain;
use openssl::ssl::Ssl;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options longer than this are refused with `NBD_REP_ERR_TOO_BIG`.
const MAX_OPTION_LEN: u32 = 64 << 10;
/// Options longer than this close the connection instead of being drained.
const OPTION_DRAIN_LIMIT: u32 = 16 << 20;
/// How long a new connection waits for a connection slot to be freed.
const ADMIT_WAIT: Duration = Duration::from_millis(500);
/// How long a refused connection is given to read why.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// What the option haggling has agreed so far.
pub(crate) struct NegState {
    pub(crate) tls_active: bool,
    pub(crate) structured: bool,
    pub(crate) no_zeroes: bool,
}

/// How the option haggling ended.
pub(crate) enum Outcome {
    Close,
    StartTls,
    Transmit(Arc<ExportEntry>),
}

/// Serve one accepted connection: admission, handshake, then transmission.
pub(crate) fn serve_conn(
    sh: &Arc<Shared>,
    mut sock: Sock,
    (mut ticket, reg): (Ticket, Registration),
    transmitting: &AtomicBool,
) -> io::Result<()> {
    let deadline = ticket.started() + sh.limits.handshake_timeout;
    if let Err(full) = ticket.admit(ADMIT_WAIT.min(sh.limits.handshake_timeout)) {
        sock.set_deadline(Some(Instant::now() + REFUSAL_TIME))?;
        return refuse(sock, &full.message());
    }
    sock.set_deadline(Some(deadline))?;
    let mut s = Stream::Plain(sock);
    let Some(no_zeroes) = greet(&mut s)? else {
        return Ok(());
    };
    let mut st = NegState {
        tls_active: false,
        structured: false,
        no_zeroes,
    };
    let export = loop {
        match negotiate(&mut s, sh, &mut st)? {
            Outcome::Close => return Ok(()),
            Outcome::Transmit(e) => break e,
            Outcome::StartTls => {
                let (Stream::Plain(p), Some(tls)) = (s, &sh.tls) else {
                    return Ok(());
                };
                let ssl = Ssl::new(&tls.ctx).map_err(io::Error::other)?;
                match ssl.accept(p) {
                    Ok(t) => s = Stream::Tls(Box::new(t)),
                    Err(_) => return Ok(()),
                }
                st.tls_active = true;
            }
        }
    };
    ticket.handshake_done();
    transmitting.store(true, Ordering::SeqCst);
    let transport = Transport::from_stream(s)?;
    transmission::run(
        sh,
        transport,
        export,
        st.structured,
        Box::new((ticket, reg)),
    );
    Ok(())
}

/// Send the greeting and read the client's flags: Some(no_zeroes), or None if the
/// client sent flags we do not know (the connection is closed).
pub(crate) fn greet(s: &mut dyn ReadWrite) -> io::Result<Option<bool>> {
    s.write_all(&proto::greeting(
        proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES,
    ))?;
    s.flush()?;
    let mut cf = [0u8; 4];
    s.read_exact(&mut cf)?;
    let cflags = u32::from_be_bytes(cf);
    if cflags & !(proto::FLAG_C_FIXED_NEWSTYLE | proto::FLAG_C_NO_ZEROES) != 0 {
        return Ok(None);
    }
    Ok(Some(cflags & proto::FLAG_C_NO_ZEROES != 0))
}

/// A connection over the limits: answer its options with `NBD_REP_ERR_POLICY` and the
/// reason (clients print it) until it gives up or its short deadline passes.
fn refuse(sock: Sock, why: &str) -> io::Result<()> {
    let mut s = Stream::Plain(sock);
    if greet(&mut s)?.is_none() {
        return Ok(());
    }
    loop {
        let Some((opt, len)) = read_option_header(&mut s)? else {
            return Ok(());
        };
        if opt == proto::OPT_EXPORT_NAME || len > MAX_OPTION_LEN {
            return Ok(());
        }
        drain(&mut s, u64::from(len))?;
        if opt == proto::OPT_ABORT {
            let _ = opt_reply(&mut s, opt, proto::REP_ACK, &[]);
            return Ok(());
        }
        opt_reply(&mut s, opt, proto::REP_ERR_POLICY, why.as_bytes())?;
    }
}

pub(crate) trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn opt_reply(s: &mut dyn ReadWrite, opt: u32, typ: u32, data: &[u8]) -> io::Result<()> {
    s.write_all(&proto::option_reply(opt, typ, data))?;
    s.flush()
}

fn read_option_header(s: &mut dyn ReadWrite) -> io::Result<Option<(u32, u32)>> {
    let mut h = [0u8; proto::OPTION_HEADER_LEN];
    s.read_exact(&mut h)?;
    Ok(proto::parse_option_header(&h))
}

fn find_export(sh: &Shared, name: &[u8]) -> Option<Arc<ExportEntry>> {
    if name.is_empty() {
        return sh.exports.first().cloned();
    }
    sh.exports
        .iter()
        .find(|e| e.name.as_bytes() == name)
        .cloned()
}

/// What to do after an option.
enum Next {
    Continue,
    Done(Outcome),
}

/// Process options until the client enters transmission, upgrades to TLS or leaves.
pub(crate) fn negotiate(
    s: &mut dyn ReadWrite,
    sh: &Shared,
    st: &mut NegState,
) -> io::Result<Outcome> {
    loop {
        let Some((opt, len)) = read_option_header(s)? else {
            return Ok(Outcome::Close);
        };
        if len > MAX_OPTION_LEN {
            if len > OPTION_DRAIN_LIMIT || opt == proto::OPT_EXPORT_NAME {
                return Ok(Outcome::Close);
            }
            drain(s, u64::from(len))?;
            opt_reply(s, opt, proto::REP_ERR_TOO_BIG, b"option data too long")?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data)?;
        let next = match gate(sh, st, opt) {
            Some((_, None)) => Next::Done(Outcome::Close),
            Some((typ, Some(msg))) => {
                opt_reply(s, opt, typ, msg)?;
                Next::Continue
            }
            None => handle_option(s, sh, st, opt, &data)?,
        };
        if let Next::Done(o) = next {
            return Ok(o);
        }
    }
}

/// Options refused before looking at them: TLS required and not up; shutting down.
/// `Some((reply type, Some(message)))` to refuse, `Some((_, None))` to close.
fn gate(sh: &Shared, st: &NegState, opt: u32) -> Option<(u32, Option<&'static [u8]>)> {
    if opt == proto::OPT_ABORT {
        return None;
    }
    let (typ, msg): (u32, &'static [u8]) =
        if sh.tls_required && !st.tls_active && opt != proto::OPT_STARTTLS {
            (
                proto::REP_ERR_TLS_REQD,
                b"this server requires TLS: send NBD_OPT_STARTTLS first",
            )
        } else if sh.stopping() {
            (proto::REP_ERR_SHUTDOWN, b"server is shutting down")
        } else {
            return None;
        };
    // NBD_OPT_EXPORT_NAME has no error reply: the connection is closed.
    Some((typ, (opt != proto::OPT_EXPORT_NAME).then_some(msg)))
}

fn handle_option(
    s: &mut dyn ReadWrite,
    sh: &Shared,
    st: &mut NegState,
    opt: u32,
    data: &[u8],
) -> io::Result<Next> {
    let invalid = |s: &mut dyn ReadWrite, msg: &[u8]| -> io::Result<Next> {
        opt_reply(s, opt, proto::REP_ERR_INVALID, msg)?;
        Ok(Next::Continue)
    };
    match opt {
        proto::OPT_ABORT => {
            let _ = opt_reply(s, opt, proto::REP_ACK, &[]);
            Ok(Next::Done(Outcome::Close))
        }
        proto::OPT_LIST if !data.is_empty() => invalid(s, b"NBD_OPT_LIST takes no data"),
        proto::OPT_LIST => {
            for e in &sh.exports {
                let mut d = Vec::with_capacity(4 + e.name.len() + e.description.len());
                d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                d.extend_from_slice(e.name.as_bytes());
                d.extend_from_slice(e.description.as_bytes());
                opt_reply(s, opt, proto::REP_SERVER, &d)?;
            }
            opt_reply(s, opt, proto::REP_ACK, &[])?;
            Ok(Next::Continue)
        }
        proto::OPT_STARTTLS if !data.is_empty() => invalid(s, b"NBD_OPT_STARTTLS takes no data"),
        proto::OPT_STARTTLS if st.tls_active => invalid(s, b"TLS is already active"),
        proto::OPT_STARTTLS if sh.tls.is_none() => {
            opt_reply(s, opt, proto::REP_ERR_POLICY, b"TLS is not configured")?;
            Ok(Next::Continue)
        }
        proto::OPT_STARTTLS => {
            opt_reply(s, opt, proto::REP_ACK, &[])?;
            Ok(Next::Done(Outcome::StartTls))
        }
        proto::OPT_STRUCTURED_REPLY if !data.is_empty() => {
            invalid(s, b"NBD_OPT_STRUCTURED_REPLY takes no data")
        }
        proto::OPT_STRUCTURED_REPLY => {
            st.structured = true;
            opt_reply(s, opt, proto::REP_ACK, &[])?;
            Ok(Next::Continue)
        }
        proto::OPT_EXPORT_NAME => {
            let Some(e) = find_export(sh, data) else {
                return Ok(Next::Done(Outcome::Close));
            };
            s.write_all(&proto::export_name_reply(
                e.limits.size,
                e.flags,
                st.no_zeroes,
            ))?;
            s.flush()?;
            Ok(Next::Done(Outcome::Transmit(e)))
        }
        proto::OPT_INFO | proto::OPT_GO => info_go(s, sh, opt, data),
        _ => {
            opt_reply(s, opt, proto::REP_ERR_UNSUP, b"option not supported")?;
            Ok(Next::Continue)
        }
    }
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO`: describe the export (size and flags, block sizes
/// always; name and description when asked), and for GO enter transmission.
fn info_go(s: &mut dyn ReadWrite, sh: &Shared, opt: u32, data: &[u8]) -> io::Result<Next> {
    let Some((name, reqs)) = proto::parse_go_data(data) else {
        opt_reply(
            s,
            opt,
            proto::REP_ERR_INVALID,
            b"malformed NBD_OPT_INFO/GO data",
        )?;
        return Ok(Next::Continue);
    };
    let Some(e) = find_export(sh, name) else {
        let msg = format!("no export named {:?}", printable(name, 256));
        opt_reply(s, opt, proto::REP_ERR_UNKNOWN, msg.as_bytes())?;
        return Ok(Next::Continue);
    };
    let info = proto::info_export(e.limits.size, e.flags);
    opt_reply(s, opt, proto::REP_INFO, &info)?;
    if proto::wants_info(reqs, proto::INFO_NAME) {
        let d = proto::info_string(proto::INFO_NAME, &e.name);
        opt_reply(s, opt, proto::REP_INFO, &d)?;
    }
    if proto::wants_info(reqs, proto::INFO_DESCRIPTION) && !e.description.is_empty() {
        let d = proto::info_string(proto::INFO_DESCRIPTION, &e.description);
        opt_reply(s, opt, proto::REP_INFO, &d)?;
    }
    let (min, pref, max) = e.sizes;
    opt_reply(
        s,
        opt,
        proto::REP_INFO,
        &proto::info_block_size(min, pref, max),
    )?;
    opt_reply(s, opt, proto::REP_ACK, &[])?;
    if opt == proto::OPT_GO {
        return Ok(Next::Done(Outcome::Transmit(e)));
    }
    Ok(Next::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::get32;
    use crate::server::config::Export;
    use crate::server::ServerConfig;
    use crate::{Backend, MemBackend};

    struct Duplex {
        input: io::Cursor<Vec<u8>>,
        out: Vec<u8>,
    }
    impl Read for Duplex {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.input.read(b)
        }
    }
    impl Write for Duplex {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.out.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn shared(tls_required: bool) -> Shared {
        let b: Arc<dyn Backend> = Arc::new(MemBackend::new(1 << 20, false));
        let e = Export {
            name: "disk".into(),
            description: String::new(),
            backend: b,
        };
        let mut cfg = ServerConfig::new(vec![e]);
        cfg.tls_required = tls_required;
        cfg.workers = 1;
        Shared::new(cfg)
    }

    fn opt(o: u32, data: &[u8]) -> Vec<u8> {
        proto::option_request(o, data)
    }

    fn run(input: Vec<u8>, tls_required: bool) -> (Vec<u8>, &'static str) {
        let sh = shared(tls_required);
        let mut d = Duplex {
            input: io::Cursor::new(input),
            out: Vec::new(),
        };
        let mut st = NegState {
            tls_active: false,
            structured: false,
            no_zeroes: true,
        };
        let o = match negotiate(&mut d, &sh, &mut st) {
            Ok(Outcome::Close) => "close",
            Ok(Outcome::StartTls) => "starttls",
            Ok(Outcome::Transmit(_)) => "transmit",
            Err(_) => "eof",
        };
        (d.out, o)
    }

    fn reply_types(out: &[u8]) -> Vec<u32> {
        let mut v = Vec::new();
        let mut i = 0;
        while i + 20 <= out.len() {
            v.push(get32(out, i + 12));
            i += 20 + get32(out, i + 16) as usize;
        }
        v
    }

    #[test]
    fn options() {
        let go = proto::go_data(b"disk", &[proto::INFO_BLOCK_SIZE]);
        let mut input = opt(99, b"xyz");
        input.extend(opt(proto::OPT_LIST, &[]));
        input.extend(opt(proto::OPT_LIST, b"x"));
        input.extend(opt(proto::OPT_STARTTLS, &[]));
        input.extend(opt(proto::OPT_GO, &go[..7]));
        input.extend(opt(proto::OPT_GO, &go));
        let (out, o) = run(input, false);
        assert_eq!(o, "transmit");
        assert_eq!(
            reply_types(&out),
            vec![
                proto::REP_ERR_UNSUP,
                proto::REP_SERVER,
                proto::REP_ACK,
                proto::REP_ERR_INVALID,
                proto::REP_ERR_POLICY,
                proto::REP_ERR_INVALID,
                proto::REP_INFO,
                proto::REP_INFO,
                proto::REP_ACK
            ]
        );
        let (out, o) = run([opt(proto::OPT_LIST, &[]), opt(2, &[])].concat(), true);
        assert_eq!(o, "close");
        assert_eq!(
            reply_types(&out),
            vec![proto::REP_ERR_TLS_REQD, proto::REP_ACK]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn negotiate_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
                                  opt_no in 0u32..12, tls in proptest::prelude::any::<bool>()) {
            // Random option bodies behind a valid option header, and raw random bytes.
            let _ = run(opt(opt_no, &bytes), tls);
            let _ = run(bytes.clone(), tls);
        }
    }
}
