//! The server's state machine over an in-memory stream: one client's side of the
//! conversation (handshake and transmission bytes) in, the server's side out. For the
//! fuzzer (`fuzz/fuzz_targets/nbd_server.rs`) and tests; no sockets, no TLS (STARTTLS is
//! refused as if unconfigured), no deadlines.

use super::handshake::{self, NegState, Outcome, ReadWrite};
use super::stream::{InReader, Transport};
use super::{transmission, ServerConfig, Shared};
use crate::util::lock;
use std::io::{self, Cursor, Read, Write};
use std::sync::{mpsc, Arc, Mutex};

/// The server's output, shared by the handshake and the transmission workers.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Duplex {
    input: Cursor<Vec<u8>>,
    out: Sink,
}

impl Read for Duplex {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.input.read(b)
    }
}

impl Write for Duplex {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.out.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Serve `input` as one client's bytes (greeting reply, options, then requests) and
/// return everything the server wrote, once it is done with the connection (the input
/// ends, the client disconnects, or the server closes). `cfg.tls` is ignored.
pub fn serve_bytes(mut cfg: ServerConfig, input: &[u8]) -> Vec<u8> {
    cfg.tls = None;
    cfg.tls_required = false;
    let sh = Arc::new(Shared::new(cfg));
    let out = Sink::default();
    let mut d = Duplex {
        input: Cursor::new(input.to_vec()),
        out: out.clone(),
    };
    if let Some((export, structured)) = handshake_in_memory(&sh, &mut d) {
        let pos = usize::try_from(d.input.position()).unwrap_or(usize::MAX);
        let rest = d.input.into_inner().get(pos..).unwrap_or(&[]).to_vec();
        let t = Transport {
            reader: InReader::Other(Box::new(Cursor::new(rest))),
            writer: Box::new(out.clone()),
            closer: None,
            tls: None,
        };
        // The last worker drops the connection, and with it this sender.
        let (done_tx, done_rx) = mpsc::channel::<()>();
        transmission::run(&sh, t, export, structured, Box::new(done_tx));
        let _ = done_rx.recv();
    }
    let v = lock(&out.0).clone();
    v
}

type Entered = (Arc<super::config::ExportEntry>, bool);

fn handshake_in_memory(sh: &Shared, d: &mut dyn ReadWrite) -> Option<Entered> {
    let no_zeroes = handshake::greet(d).ok()??;
    let mut st = NegState {
        tls_active: false,
        structured: false,
        no_zeroes,
    };
    match handshake::negotiate(d, sh, &mut st).ok()? {
        Outcome::Transmit(e) => Some((e, st.structured)),
        Outcome::Close | Outcome::StartTls => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{self, Request};
    use crate::{Backend, Export, MemBackend};

    fn cfg() -> ServerConfig {
        let b: Arc<dyn Backend> = Arc::new(MemBackend::new(1 << 20, false));
        let mut c = ServerConfig::new(vec![Export {
            name: "d".into(),
            description: String::new(),
            backend: b,
        }]);
        c.workers = 4;
        c
    }

    #[test]
    fn a_whole_conversation() {
        let mut input = 3u32.to_be_bytes().to_vec();
        input.extend(proto::option_request(proto::OPT_STRUCTURED_REPLY, &[]));
        input.extend(proto::option_request(
            proto::OPT_GO,
            &proto::go_data(b"d", &[]),
        ));
        let req = |typ, cookie, offset, len| {
            proto::encode_request(&Request {
                flags: 0,
                typ,
                cookie,
                offset,
                len,
            })
        };
        input.extend(req(proto::CMD_WRITE, 1, 512, 4));
        input.extend(b"abcd");
        input.extend(req(proto::CMD_FLUSH, 2, 0, 0));
        input.extend(req(proto::CMD_DISC, 3, 0, 0));
        let out = serve_bytes(cfg(), &input);
        // Greeting, ACK, INFO export, INFO block size, ACK, then two 16-byte replies.
        let hs = 18 + 20 + (20 + 12) + (20 + 14) + 20;
        assert_eq!(out.len(), hs + 32);
        let mut cookies: Vec<u64> = out[hs..]
            .chunks(16)
            .map(|r| {
                assert_eq!(proto::get32(r, 0), proto::SIMPLE_REPLY_MAGIC);
                assert_eq!(proto::get32(r, 4), 0);
                proto::get64(r, 8)
            })
            .collect();
        cookies.sort();
        assert_eq!(cookies, vec![1, 2]);
        // Truncated everywhere: never hangs, never panics.
        for cut in 0..input.len() {
            let _ = serve_bytes(cfg(), &input[..cut]);
        }
    }
}
