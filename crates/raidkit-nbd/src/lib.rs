//! `raidkit-nbd`: a Network Block Device server and client, independent of RAID.
//!
//! Server ([`Server`]):
//! * Fixed newstyle handshake with `NO_ZEROES`; options `GO`, `INFO` (export, name,
//!   description, block size), `LIST`, `ABORT`, `EXPORT_NAME`, `STRUCTURED_REPLY`,
//!   `STARTTLS` (X.509 or PSK, optionally required); anything else is `NBD_REP_ERR_UNSUP`.
//! * Transmission: READ, WRITE (+FUA), FLUSH, TRIM, WRITE_ZEROES (+NO_HOLE, FAST_ZERO),
//!   DISC. Many requests in flight per connection: the connection's workers take turns
//!   reading a request, each processes its own and writes the reply (replies possibly
//!   out of order). Every request is bounds-checked.
//! * Several named exports; listeners on a Unix socket (mode 0600, or 0660 for a group,
//!   whatever the umask) or TCP (IPv4/IPv6).
//! * Hostile clients are bounded ([`ServerLimits`]): bytes and requests in flight per
//!   connection (a client that does not read its replies stops being read), connections
//!   per server and per peer, handshakes at once and their deadline, worker threads.
//! * Graceful shutdown ([`ShutdownHandle`]): stop accepting, finish in-flight requests,
//!   flush every backend.
//!
//! Storage is supplied through the [`Backend`] trait; [`MemBackend`] is an in-memory one.
//!
//! Client ([`client::Client`]): NBD URIs, structured replies, TLS, requests from many
//! threads, a deadline on every request. [`proto`] is the wire format both share.

pub mod client;
mod mem;
mod pool;
pub mod proto;
mod server;
mod tls;
mod util;

pub use mem::MemBackend;
pub use pool::PoolBuf;
pub use server::fuzzing;
pub use server::{
    shutdown_on_signals, Export, Listen, Server, ServerConfig, ServerLimits, ShutdownHandle,
    UnixAccess, DEFAULT_MAX_PAYLOAD,
};
pub use tls::TlsConfig;

use std::io;

/// Errors of the server library (network input never produces these: a misbehaving
/// client gets an error reply or a closed connection).
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    /// Binding or accepting on the listener failed.
    #[error("{what} {addr}: {source}")]
    Listen {
        /// What was attempted.
        what: &'static str,
        /// The address or socket path.
        addr: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
    /// Loading TLS credentials failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// Flushing a backend at shutdown failed.
    #[error("flushing export {export} at shutdown: {source}")]
    Flush {
        /// Export name.
        export: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Storage behind one export. Implementations must be safe to call from many threads at
/// once; the server issues requests of one connection concurrently.
pub trait Backend: Send + Sync + 'static {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// True if writes must be refused (`EPERM`).
    fn read_only(&self) -> bool;
    /// Read `buf.len()` bytes at `offset` (already bounds-checked by the server).
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Write `buf` at `offset`; with `fua`, persist it before returning.
    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> io::Result<()>;
    /// [`Backend::write`] of the connection's own request buffer, which the backend may
    /// keep past the call (a write queued for later, without a copy): it goes back to
    /// the connection's buffer pool when dropped. By default, a plain write.
    fn write_buf(&self, offset: u64, buf: PoolBuf, fua: bool) -> io::Result<()> {
        self.write(offset, &buf, fua)
    }
    /// Persist every completed write.
    fn flush(&self) -> io::Result<()>;
    /// Discard a range (a hint; may be a no-op, after which the data reads as before).
    fn trim(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Make a range read as zeroes; with `no_hole`, keep it allocated.
    fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool) -> io::Result<()>;
    /// Block sizes: (minimum: 512 or 4096, preferred, maximum payload). The server
    /// corrects values the protocol forbids (non powers of two, maximum not a multiple
    /// of the minimum) and caps the maximum at [`DEFAULT_MAX_PAYLOAD`].
    fn block_sizes(&self) -> (u32, u32, u32);
    /// True if a flush on one connection covers writes completed on all connections.
    fn can_multi_conn(&self) -> bool;
    /// True if `write_zeroes` is fast (no data written); otherwise requests with
    /// `NBD_CMD_FLAG_FAST_ZERO` fail with `ENOTSUP` without doing anything.
    fn can_fast_zero(&self) -> bool {
        false
    }
    /// Human-readable description sent with `NBD_INFO_DESCRIPTION` when the export
    /// does not set one.
    fn description(&self) -> String {
        String::new()
    }
}
