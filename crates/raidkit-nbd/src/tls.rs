//! TLS credentials for `NBD_OPT_STARTTLS` (OpenSSL).

use crate::NbdError;
use openssl::ssl::{SslContext, SslContextBuilder, SslFiletype, SslMethod, SslVersion};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Server TLS credentials: an X.509 certificate chain and key, or pre-shared keys.
#[derive(Clone)]
pub struct TlsConfig {
    pub(crate) ctx: SslContext,
    kind: &'static str,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsConfig({})", self.kind)
    }
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> NbdError {
    NbdError::Tls(format!("{what}: {e}"))
}

fn base() -> Result<SslContextBuilder, NbdError> {
    let mut b = SslContext::builder(SslMethod::tls_server()).map_err(|e| tls_err("setup", e))?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))
        .map_err(|e| tls_err("setup", e))?;
    Ok(b)
}

impl TlsConfig {
    /// Certificate chain (PEM, server certificate first) and private key (PEM).
    pub fn from_x509(cert: &Path, key: &Path) -> Result<TlsConfig, NbdError> {
        let mut b = base()?;
        b.set_certificate_chain_file(cert)
            .map_err(|e| tls_err(&format!("loading certificate {}", cert.display()), e))?;
        b.set_private_key_file(key, SslFiletype::PEM)
            .map_err(|e| tls_err(&format!("loading private key {}", key.display()), e))?;
        b.check_private_key()
            .map_err(|e| tls_err("the private key does not match the certificate", e))?;
        Ok(TlsConfig {
            ctx: b.build(),
            kind: "x509",
        })
    }

    /// Pre-shared keys in the file format of qemu, nbdkit and libnbd (`psktool`):
    /// one `username:hexkey` per line.
    pub fn from_psk_file(path: &Path) -> Result<TlsConfig, NbdError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| tls_err(&format!("reading PSK file {}", path.display()), e))?;
        let keys = parse_psk(&text).map_err(|e| tls_err(&format!("{}", path.display()), e))?;
        Self::from_psk(keys)
    }

    /// Pre-shared keys: identity → key bytes.
    pub fn from_psk(keys: HashMap<Vec<u8>, Vec<u8>>) -> Result<TlsConfig, NbdError> {
        if keys.is_empty() {
            return Err(NbdError::Tls("no pre-shared keys given".into()));
        }
        let keys = Arc::new(keys);
        let mut b = base()?;
        // TLS 1.2: PSK key exchanges only (there is no certificate); TLS 1.3 uses the
        // same callback with its default (SHA-256) suites.
        b.set_cipher_list("ECDHEPSK:DHEPSK:PSK:!eNULL:!aNULL@SECLEVEL=0")
            .or_else(|_| b.set_cipher_list("PSK"))
            .map_err(|e| tls_err("selecting PSK ciphers", e))?;
        b.set_psk_server_callback(move |_ssl, identity, out| {
            let key = identity.and_then(|id| keys.get(id));
            match key {
                Some(k) if k.len() <= out.len() => {
                    if let Some(dst) = out.get_mut(..k.len()) {
                        dst.copy_from_slice(k);
                    }
                    Ok(k.len())
                }
                // Unknown identity: 0 makes the handshake fail.
                _ => Ok(0),
            }
        });
        Ok(TlsConfig {
            ctx: b.build(),
            kind: "psk",
        })
    }
}

/// Parse `username:hexkey` lines (blank lines and `#` comments ignored).
pub(crate) fn parse_psk(text: &str) -> Result<HashMap<Vec<u8>, Vec<u8>>, String> {
    let mut m = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, hex)) = line.split_once(':') else {
            return Err(format!("line {}: expected username:hexkey", i + 1));
        };
        if user.is_empty() {
            return Err(format!("line {}: empty username", i + 1));
        }
        let hex = hex.trim();
        if hex.is_empty() || hex.len() % 2 != 0 {
            return Err(format!(
                "line {}: the key must be an even number of hex digits",
                i + 1
            ));
        }
        let mut key = Vec::with_capacity(hex.len() / 2);
        for pair in hex.as_bytes().chunks(2) {
            let s = std::str::from_utf8(pair).map_err(|_| format!("line {}: bad hex", i + 1))?;
            key.push(u8::from_str_radix(s, 16).map_err(|_| format!("line {}: bad hex", i + 1))?);
        }
        m.insert(user.as_bytes().to_vec(), key);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_lines() {
        let m = parse_psk("# c\nalice:00ff10\n\nbob:ABCD\n").unwrap();
        assert_eq!(m.get(&b"alice"[..]), Some(&vec![0, 0xff, 0x10]));
        assert_eq!(m.get(&b"bob"[..]), Some(&vec![0xab, 0xcd]));
        assert!(parse_psk("alice:0").is_err());
        assert!(parse_psk("alice").is_err());
        assert!(parse_psk("alice:zz").is_err());
        assert!(parse_psk(":00").is_err());
    }
}
