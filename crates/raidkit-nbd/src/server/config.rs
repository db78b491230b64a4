//! What a server serves and the limits it keeps: exports, TLS, resource limits, the
//! Unix socket's access mode.

use crate::proto::{self, Limits};
use crate::{Backend, NbdError, TlsConfig};
use std::sync::Arc;
use std::time::Duration;

/// Largest READ/WRITE payload the server accepts (and advertises at most): 32 MiB.
pub const DEFAULT_MAX_PAYLOAD: u32 = 32 << 20;

/// One named export.
#[derive(Clone)]
pub struct Export {
    /// Name clients ask for (the first export is also the default, empty name).
    pub name: String,
    /// Description (`NBD_INFO_DESCRIPTION`); empty: the backend's.
    pub description: String,
    /// The storage.
    pub backend: Arc<dyn Backend>,
}

/// Who may connect to a Unix socket listener. The socket file gets exactly this mode
/// whatever the umask, and is never more accessible than that, even for a moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnixAccess {
    /// Mode 0600: the server's user (and root).
    #[default]
    Owner,
    /// Mode 0660 with this group: the server's user and the group's members.
    Group(libc::gid_t),
}

impl UnixAccess {
    /// Group access by group name (looked up in the system's group database).
    pub fn group_named(name: &str) -> Result<UnixAccess, NbdError> {
        crate::server::listener::group_id(name).map(UnixAccess::Group)
    }
    /// The socket file's mode.
    pub fn mode(&self) -> u32 {
        match self {
            UnixAccess::Owner => 0o600,
            UnixAccess::Group(_) => 0o660,
        }
    }
}

/// Resource limits: what one client, one peer, or everyone together may hold.
/// [`ServerLimits::default`] suits a storage server; every field can be changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections at once, handshaking or transmitting; more are closed at once
    /// (after a short wait for a slot, and an `NBD_REP_ERR_POLICY` saying why).
    pub max_connections: usize,
    /// Connections at once from one peer: one user id on a Unix socket (`SO_PEERCRED`),
    /// one IP address on TCP.
    pub max_connections_per_peer: usize,
    /// Connections still in the handshake at once (OpenSSH's `MaxStartups`): a new
    /// connection beyond it is closed without a word.
    pub max_handshakes: usize,
    /// Time from accept to the end of the handshake (TLS included); a client that has
    /// not started transmission by then is disconnected.
    pub handshake_timeout: Duration,
    /// Time a transmitting connection may stay without a request in flight before it is
    /// closed; `None`: forever (kernel clients keep idle devices connected for days).
    pub idle_timeout: Option<Duration>,
    /// Payload bytes in flight per connection (requests read and not yet answered,
    /// replies not yet taken by the client). The server stops reading a connection's
    /// socket at this limit, so a client that does not read its replies stops being
    /// read. A single request larger than this is still served, alone.
    pub max_bytes_in_flight: u64,
    /// Requests in flight per connection (as above, counted).
    pub max_requests_in_flight: usize,
    /// Worker threads across the server beyond each connection's first (a connection
    /// starts more, up to [`ServerConfig::workers`], while it has requests waiting).
    pub max_extra_workers: usize,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            max_connections: 64,
            max_connections_per_peer: 8,
            max_handshakes: 16,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            max_bytes_in_flight: 32 << 20,
            max_requests_in_flight: 64,
            max_extra_workers: 256,
        }
    }
}

impl ServerLimits {
    pub(crate) fn check(&self) -> Result<(), NbdError> {
        let bad = |what: &str| Err(NbdError::Config(format!("{what} must be at least 1")));
        if self.max_connections == 0 {
            return bad("the connection limit");
        }
        if self.max_connections_per_peer == 0 {
            return bad("the per-peer connection limit");
        }
        if self.max_handshakes == 0 {
            return bad("the handshake limit");
        }
        if self.max_requests_in_flight == 0 {
            return bad("the requests-in-flight limit");
        }
        if self.max_bytes_in_flight == 0 {
            return bad("the bytes-in-flight limit");
        }
        if self.handshake_timeout.is_zero() {
            return Err(NbdError::Config(
                "the handshake timeout must be longer than 0".into(),
            ));
        }
        Ok(())
    }
}

/// Server configuration.
#[derive(Clone)]
pub struct ServerConfig {
    /// Exports, at least one; names must be distinct.
    pub exports: Vec<Export>,
    /// TLS credentials; `None`: `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_POLICY`.
    pub tls: Option<TlsConfig>,
    /// Refuse every option but STARTTLS and ABORT until TLS is up (`NBD_REP_ERR_TLS_REQD`).
    pub tls_required: bool,
    /// Worker threads per connection at most (requests processed concurrently). They are
    /// started as requests arrive and stop after a few idle seconds, so an idle
    /// connection costs one thread.
    pub workers: usize,
    /// Connection, handshake and in-flight limits.
    pub limits: ServerLimits,
    /// Who may connect to a Unix socket listener (default: the owner only, mode 0600).
    pub unix_access: UnixAccess,
}

impl ServerConfig {
    /// A configuration with these exports, no TLS, 16 workers per connection, default
    /// limits, and a Unix socket only its owner may use.
    pub fn new(exports: Vec<Export>) -> ServerConfig {
        ServerConfig {
            exports,
            tls: None,
            tls_required: false,
            workers: 16,
            limits: ServerLimits::default(),
            unix_access: UnixAccess::Owner,
        }
    }

    /// Check what `bind` needs: exports present and well named, TLS when required,
    /// usable limits.
    pub(crate) fn check(&self) -> Result<(), NbdError> {
        if self.exports.is_empty() {
            return Err(NbdError::Config("no exports configured".into()));
        }
        for (i, e) in self.exports.iter().enumerate() {
            if e.name.len() > proto::MAX_STRING_LEN || e.name.contains('\0') {
                return Err(NbdError::Config(format!(
                    "export name {:?} is not a valid NBD string",
                    e.name
                )));
            }
            if self.exports[..i].iter().any(|o| o.name == e.name) {
                return Err(NbdError::Config(format!(
                    "export name {:?} is used twice",
                    e.name
                )));
            }
        }
        if self.tls_required && self.tls.is_none() {
            return Err(NbdError::Config(
                "TLS is required but no certificate or PSK file was given".into(),
            ));
        }
        self.limits.check()
    }
}

/// An export as the server uses it: flags and limits worked out once.
pub(crate) struct ExportEntry {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) flags: u16,
    pub(crate) limits: Limits,
    pub(crate) sizes: (u32, u32, u32),
}

/// Make block sizes legal: minimum a power of two ≤ 64 KiB, preferred a power of two
/// between minimum and maximum, maximum a multiple of the minimum ≤ the payload cap.
pub(crate) fn legal_sizes((min, pref, max): (u32, u32, u32)) -> (u32, u32, u32) {
    let min = if min.is_power_of_two() && min <= 65536 {
        min
    } else {
        512
    };
    let mut max = max.clamp(min, DEFAULT_MAX_PAYLOAD);
    max -= max % min;
    let mut pref = if pref == 0 {
        4096
    } else if pref.is_power_of_two() {
        pref
    } else {
        1 << (31 - pref.leading_zeros())
    };
    pref = pref.max(min);
    while pref > max && pref > min {
        pref /= 2;
    }
    (min, pref, max)
}

impl ExportEntry {
    pub(crate) fn new(e: &Export) -> ExportEntry {
        let b = &e.backend;
        let ro = b.read_only();
        let sizes = legal_sizes(b.block_sizes());
        let mut flags = proto::TF_HAS_FLAGS | proto::TF_SEND_FLUSH;
        if ro {
            flags |= proto::TF_READ_ONLY;
        } else {
            flags |= proto::TF_SEND_FUA
                | proto::TF_SEND_TRIM
                | proto::TF_SEND_WRITE_ZEROES
                | proto::TF_SEND_FAST_ZERO;
        }
        if b.can_multi_conn() {
            flags |= proto::TF_CAN_MULTI_CONN;
        }
        let description = if e.description.is_empty() {
            b.description()
        } else {
            e.description.clone()
        };
        ExportEntry {
            name: e.name.clone(),
            description,
            backend: Arc::clone(b),
            flags,
            limits: Limits {
                size: b.size(),
                read_only: ro,
                max_payload: sizes.2,
                fast_zero: b.can_fast_zero(),
            },
            sizes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_made_legal() {
        assert_eq!(
            legal_sizes((512, 192 << 10, 32 << 20)),
            (512, 128 << 10, 32 << 20)
        );
        assert_eq!(legal_sizes((4096, 0, u32::MAX)), (4096, 4096, 32 << 20));
        assert_eq!(legal_sizes((3, 1 << 30, 1000)), (512, 512, 512));
        assert_eq!(legal_sizes((512, 65536, 1 << 20)), (512, 65536, 1 << 20));
    }

    #[test]
    fn zero_limits_refused() {
        let mut l = ServerLimits::default();
        assert!(l.check().is_ok());
        l.max_handshakes = 0;
        assert!(l.check().is_err());
        let l = ServerLimits {
            handshake_timeout: Duration::ZERO,
            ..ServerLimits::default()
        };
        assert!(l.check().is_err());
    }
}
