//! Client TLS credentials (OpenSSL): a pre-shared key, or X.509 with a CA and an
//! optional client certificate, as the URI's `tls-psk-file` / `tls-certificates` say.

use super::uri::{Endpoint, NbdUri};
use super::wire::{handshake_want, Sock, Wire, WireError};
use super::ClientError;
use openssl::ssl::{
    HandshakeError, Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslStream,
    SslVerifyMode, SslVersion,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How the client authenticates the server (and itself) over TLS.
#[derive(Clone)]
pub enum ClientTls {
    /// A pre-shared key: the identity (user name) and the key.
    Psk {
        /// PSK identity.
        identity: String,
        /// The key bytes.
        key: Vec<u8>,
    },
    /// X.509 certificates.
    X509 {
        /// CA certificate(s) (PEM) to verify the server with; None: the system's.
        ca_file: Option<PathBuf>,
        /// A client certificate chain and key (PEM), for servers that ask for one.
        client_cert: Option<(PathBuf, PathBuf)>,
        /// Verify the server's certificate (chain, and host name when known).
        verify_peer: bool,
        /// The name the server's certificate must carry.
        hostname: Option<String>,
    },
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientTls::Psk { identity, .. } => write!(f, "ClientTls::Psk({identity})"),
            ClientTls::X509 { ca_file, .. } => write!(f, "ClientTls::X509({ca_file:?})"),
        }
    }
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Tls(format!("{what}: {e}"))
}

/// The local user's name (the default PSK identity, as libnbd's).
fn local_user() -> Option<String> {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
}

impl ClientTls {
    /// The credentials a TLS URI names; None for a URI without TLS.
    pub fn from_uri(u: &NbdUri) -> Result<Option<ClientTls>, ClientError> {
        if !u.tls {
            return Ok(None);
        }
        if let Some(file) = &u.tls_psk_file {
            return match &u.tls_username {
                Some(identity) => Self::psk_from_file(file, identity),
                None => Self::psk_for_local_user(file),
            }
            .map(Some);
        }
        let dir = u.tls_certificates.as_deref();
        let existing = |name: &str| dir.map(|d| d.join(name)).filter(|p| p.exists());
        let client_cert = existing("client-cert.pem").zip(existing("client-key.pem"));
        let hostname = u.tls_hostname.clone().or(match &u.endpoint {
            Endpoint::Tcp { host, .. } => Some(host.clone()),
            Endpoint::Unix(_) => None,
        });
        Ok(Some(ClientTls::X509 {
            ca_file: existing("ca-cert.pem"),
            client_cert,
            verify_peer: u.tls_verify_peer,
            hostname,
        }))
    }

    /// A PSK from a `username:hexkey` file (psktool's format) when no user name was
    /// given: the local user's key (as libnbd), else the file's only key.
    pub fn psk_for_local_user(file: &Path) -> Result<ClientTls, ClientError> {
        let keys = read_psk_file(file)?;
        if let Some(user) = local_user().filter(|u| keys.contains_key(u.as_bytes())) {
            return Self::psk_from_file(file, &user);
        }
        match keys.into_iter().collect::<Vec<_>>().as_slice() {
            [(id, key)] => Ok(ClientTls::Psk {
                identity: String::from_utf8_lossy(id).into_owned(),
                key: key.clone(),
            }),
            _ => Err(ClientError::Tls(format!(
                "{} has no key for the local user {:?} and more than one key: name the user (user@ in the URI, or tls-username=)",
                file.display(),
                local_user().unwrap_or_default()
            ))),
        }
    }

    /// A PSK from a `username:hexkey` file (psktool's format), for `identity`.
    pub fn psk_from_file(file: &Path, identity: &str) -> Result<ClientTls, ClientError> {
        let keys = read_psk_file(file)?;
        let key = keys.get(identity.as_bytes()).cloned().ok_or_else(|| {
            ClientError::Tls(format!(
                "{} has no key for user {identity:?}",
                file.display()
            ))
        })?;
        Ok(ClientTls::Psk {
            identity: identity.to_string(),
            key,
        })
    }

    fn context(&self) -> Result<SslContext, ClientError> {
        let mut b =
            SslContext::builder(SslMethod::tls_client()).map_err(|e| tls_err("setup", e))?;
        b.set_min_proto_version(Some(SslVersion::TLS1_2))
            .map_err(|e| tls_err("setup", e))?;
        match self {
            ClientTls::Psk { identity, key } => psk(&mut b, identity, key)?,
            ClientTls::X509 {
                ca_file,
                client_cert,
                verify_peer,
                ..
            } => {
                match ca_file {
                    Some(ca) => b
                        .set_ca_file(ca)
                        .map_err(|e| tls_err(&format!("loading CA {}", ca.display()), e))?,
                    None => b
                        .set_default_verify_paths()
                        .map_err(|e| tls_err("loading the system's CAs", e))?,
                }
                if let Some((cert, key)) = client_cert {
                    b.set_certificate_chain_file(cert)
                        .map_err(|e| tls_err(&format!("loading {}", cert.display()), e))?;
                    b.set_private_key_file(key, SslFiletype::PEM)
                        .map_err(|e| tls_err(&format!("loading {}", key.display()), e))?;
                }
                let mode = if *verify_peer {
                    SslVerifyMode::PEER
                } else {
                    SslVerifyMode::NONE
                };
                b.set_verify(mode);
            }
        }
        Ok(b.build())
    }

    /// The error of a handshake the server or this side broke off, saying what it
    /// usually means for these credentials.
    fn refused(&self, e: &openssl::ssl::Error) -> ClientError {
        let verify = e
            .ssl_error()
            .and_then(|s| s.errors().first())
            .and_then(|x| x.reason())
            .filter(|r| r.contains("certificate verify failed"));
        let hint = match self {
            ClientTls::Psk { identity, .. } => format!(
                "the server refused the pre-shared key of user {identity:?} (a wrong key, or a user the server does not know)"
            ),
            ClientTls::X509 { .. } if verify.is_some() => {
                "the server's certificate is not trusted: it does not chain to the CA (ca-cert.pem), or does not name the host".to_string()
            }
            ClientTls::X509 { .. } => {
                "the server refused the connection (does it want a client certificate, or a pre-shared key?)".to_string()
            }
        };
        ClientError::Tls(format!("handshake failed ({e}): {hint}"))
    }

    /// Run the TLS handshake over `wire` (after `NBD_OPT_STARTTLS` was acknowledged),
    /// by `until`.
    pub(crate) fn start(&self, wire: &mut Wire, until: Instant) -> Result<(), ClientError> {
        let ctx = self.context()?;
        let mut ssl = Ssl::new(&ctx).map_err(|e| tls_err("setup", e))?;
        if let ClientTls::X509 {
            hostname: Some(h),
            verify_peer,
            ..
        } = self
        {
            // An address is checked against the certificate's IP names, and is never sent
            // as the server name (SNI carries host names only).
            let ip = h
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .ok();
            if ip.is_none() {
                ssl.set_hostname(h).map_err(|e| tls_err("server name", e))?;
            }
            if *verify_peer {
                let p = ssl.param_mut();
                match ip {
                    Some(ip) => p.set_ip(ip),
                    None => p.set_host(h),
                }
                .map_err(|e| tls_err("server name", e))?;
            }
        }
        let sock = wire.raw_clone().map_err(|e| tls_err("socket", e))?;
        let mut step = ssl.connect(sock);
        let stream: SslStream<Sock> = loop {
            match step {
                Ok(s) => break s,
                Err(HandshakeError::WouldBlock(mid)) => {
                    let want = handshake_want(mid.error())
                        .ok_or_else(|| tls_err("handshake", mid.error()))?;
                    wire.wait(want, Some(until)).map_err(|e| match e {
                        WireError::Timeout => ClientError::Timeout {
                            what: "TLS handshake".into(),
                            after: Default::default(),
                        },
                        WireError::Closed(m) => ClientError::Tls(m),
                    })?;
                    step = mid.handshake();
                }
                Err(HandshakeError::Failure(mid)) => return Err(self.refused(mid.error())),
                Err(HandshakeError::SetupFailure(e)) => return Err(tls_err("setup", e)),
            }
        };
        wire.set_tls(stream);
        Ok(())
    }
}

/// The keys of a `username:hexkey` file.
fn read_psk_file(file: &Path) -> Result<std::collections::HashMap<Vec<u8>, Vec<u8>>, ClientError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| tls_err(&format!("reading PSK file {}", file.display()), e))?;
    crate::tls::parse_psk(&text).map_err(|e| tls_err(&file.display().to_string(), e))
}

fn psk(b: &mut SslContextBuilder, identity: &str, key: &[u8]) -> Result<(), ClientError> {
    b.set_cipher_list("ECDHEPSK:DHEPSK:PSK:!eNULL:!aNULL@SECLEVEL=0")
        .or_else(|_| b.set_cipher_list("PSK"))
        .map_err(|e| tls_err("selecting PSK ciphers", e))?;
    let id = identity.as_bytes().to_vec();
    let key = key.to_vec();
    b.set_psk_client_callback(move |_ssl, _hint, id_out, key_out| {
        // The identity is NUL-terminated; 0 (no key) fails the handshake.
        if id.len() >= id_out.len() || key.len() > key_out.len() {
            return Ok(0);
        }
        id_out[..id.len()].copy_from_slice(&id);
        id_out[id.len()] = 0;
        key_out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    Ok(())
}
