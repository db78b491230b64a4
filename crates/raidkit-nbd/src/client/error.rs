//! The client's errors: each says which of timeout, disconnection, server error or
//! protocol violation happened, since a caller treats them differently.

use crate::proto::errno;
use std::io;
use std::time::Duration;

/// Errors of the NBD client.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The URI is not an NBD URI we can use.
    #[error("invalid NBD URI {0}")]
    InvalidUri(String),
    /// The socket could not be connected.
    #[error("connecting to {addr}: {message}")]
    Connect {
        /// The address tried.
        addr: String,
        /// The OS error, as text.
        message: String,
        /// The OS error kind.
        kind: io::ErrorKind,
    },
    /// A deadline passed: connecting, the handshake, or a request.
    #[error("{what}: no answer within {after:?}")]
    Timeout {
        /// What timed out.
        what: String,
        /// The time allowed.
        after: Duration,
    },
    /// The connection is gone: closed by the server, reset, or dropped by this side
    /// after another request timed out or the server broke the protocol. Requests in
    /// flight may or may not have been carried out.
    #[error("NBD connection lost: {0}")]
    Disconnected(String),
    /// The server answered the request with an error.
    #[error("server error {} ({}){}", .errno, errno::name(*.errno), if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Server {
        /// NBD error value (`proto::errno`).
        errno: u32,
        /// The server's message (structured replies only).
        message: String,
    },
    /// The server refused an option during the handshake.
    #[error("server refused {option}: {reply}{}", if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Refused {
        /// The option.
        option: &'static str,
        /// The reply type (e.g. `NBD_REP_ERR_UNKNOWN`).
        reply: &'static str,
        /// The server's message.
        message: String,
    },
    /// TLS could not be set up or negotiated.
    #[error("TLS: {0}")]
    Tls(String),
    /// The server broke the protocol (lying lengths, unknown handles, overlapping or
    /// missing data...). The connection is closed.
    #[error("NBD protocol violation by the server: {0}")]
    Protocol(String),
    /// The export does not offer this request (e.g. TRIM, FUA, writes).
    #[error("the export does not support {0}")]
    Unsupported(&'static str),
    /// The request is not valid for the export (past its end, for example).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl ClientError {
    /// The NBD error value of a server error.
    pub fn errno(&self) -> Option<u32> {
        match self {
            ClientError::Server { errno, .. } => Some(*errno),
            _ => None,
        }
    }
    /// True for [`ClientError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Timeout { .. })
    }
    /// True if the connection cannot be used any more (reconnect to go on). A server's
    /// `ESHUTDOWN` is one: it is going away, and the connection is closed.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            ClientError::Timeout { .. }
                | ClientError::Disconnected(_)
                | ClientError::Protocol(_)
                | ClientError::Connect { .. }
                | ClientError::Tls(_)
                | ClientError::Server {
                    errno: errno::ESHUTDOWN,
                    ..
                }
        )
    }
    /// An `io::Error` for callers that speak io (errno values map to OS errors).
    pub fn to_io(&self) -> io::Error {
        let code = match self {
            ClientError::Server { errno: e, .. } => match *e {
                errno::EPERM => libc::EPERM,
                errno::ENOMEM => libc::ENOMEM,
                errno::EINVAL => libc::EINVAL,
                errno::ENOSPC => libc::ENOSPC,
                errno::EOVERFLOW => libc::EOVERFLOW,
                errno::ENOTSUP => libc::ENOTSUP,
                errno::ESHUTDOWN => libc::ESHUTDOWN,
                _ => libc::EIO,
            },
            ClientError::Timeout { .. } => libc::ETIMEDOUT,
            ClientError::Disconnected(_) | ClientError::Connect { .. } => libc::ENOTCONN,
            ClientError::Unsupported(_) => libc::EOPNOTSUPP,
            ClientError::InvalidRequest(_) => libc::EINVAL,
            _ => libc::EIO,
        };
        io::Error::new(io::Error::from_raw_os_error(code).kind(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        let e = ClientError::Server {
            errno: errno::EIO,
            message: "bad sector".into(),
        };
        assert_eq!(e.to_string(), "server error 5 (EIO): bad sector");
        assert_eq!(e.errno(), Some(5));
        assert!(!e.is_fatal());
        let t = ClientError::Timeout {
            what: "read of 4096 bytes at offset 0".into(),
            after: Duration::from_secs(2),
        };
        assert!(t.is_timeout() && t.is_fatal());
        assert_eq!(t.to_io().kind(), io::ErrorKind::TimedOut);
    }
}
