//! NBD URIs (the NBD project's `uri.md`, with libnbd's query parameters):
//!
//! * `nbd://HOST[:PORT]/EXPORT`, `nbds://…` (TLS required);
//! * `nbd+unix:///EXPORT?socket=PATH`, `nbds+unix:///EXPORT?socket=PATH`;
//! * TLS parameters `tls-psk-file=FILE`, `tls-certificates=DIR`, `tls-username=NAME`
//!   (or a `user@` userinfo), `tls-hostname=NAME`, `tls-verify-peer=0|1|false|true`,
//!   `tls-type=psk|x509`. `x-` parameters are ignored; any other is an error.
//!
//! The export name is the path without its leading `/`, percent-decoded; an empty or
//! missing path is the empty (default) export name.

use super::ClientError;
use std::fmt;
use std::path::PathBuf;

/// Where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// TCP: host name or IP address (IPv6 without brackets), port.
    Tcp {
        /// Host name or address.
        host: String,
        /// Port (default 10809).
        port: u16,
    },
    /// A Unix socket path.
    Unix(PathBuf),
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    /// The server's address.
    pub endpoint: Endpoint,
    /// The export name (may be empty: the server's default export).
    pub export: String,
    /// TLS is required (`nbds`, `nbds+unix`).
    pub tls: bool,
    /// TLS user name (PSK identity): the URI's userinfo or `tls-username`.
    pub tls_username: Option<String>,
    /// `tls-psk-file`: pre-shared keys, `username:hexkey` lines.
    pub tls_psk_file: Option<PathBuf>,
    /// `tls-certificates`: a directory with `ca-cert.pem` and, for client
    /// authentication, `client-cert.pem` and `client-key.pem`.
    pub tls_certificates: Option<PathBuf>,
    /// `tls-hostname`: the name the server's certificate must carry (default: the host).
    pub tls_hostname: Option<String>,
    /// `tls-verify-peer` (default true).
    pub tls_verify_peer: bool,
}

fn bad(uri: &str, why: impl fmt::Display) -> ClientError {
    ClientError::InvalidUri(format!("{uri}: {why}"))
}

/// Percent-decode `s` (RFC 3986); `+` is left as is.
fn decode(uri: &str, s: &str) -> Result<String, ClientError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad(uri, format!("bad percent escape at {:?}", &s[i..])))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad(uri, "percent escapes do not make UTF-8"))
}

fn parse_bool(uri: &str, k: &str, v: &str) -> Result<bool, ClientError> {
    match v {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(bad(uri, format!("{k}={v}: expected 0/1 or false/true"))),
    }
}

/// Split an authority into (userinfo, host, port).
fn authority(uri: &str, a: &str) -> Result<(Option<String>, String, Option<u16>), ClientError> {
    let (user, hostport) = match a.rsplit_once('@') {
        Some((u, h)) => (Some(decode(uri, u)?), h),
        None => (None, a),
    };
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (h, tail) = rest
            .split_once(']')
            .ok_or_else(|| bad(uri, "unclosed '[' in the host"))?;
        match tail {
            "" => (h.to_string(), None),
            t => match t.strip_prefix(':') {
                Some(p) => (h.to_string(), Some(p)),
                None => return Err(bad(uri, "junk after ']'")),
            },
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad(uri, format!("bad port {p:?}")))?,
        ),
    };
    Ok((user, decode(uri, &host)?, port))
}

impl NbdUri {
    /// Parse an NBD URI.
    pub fn parse(uri: &str) -> Result<NbdUri, ClientError> {
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
            bad(
                uri,
                "not a URI (expected nbd://, nbds://, nbd+unix:// or nbds+unix://)",
            )
        })?;
        let (tls, unix) = match scheme.to_ascii_lowercase().as_str() {
            "nbd" => (false, false),
            "nbds" => (true, false),
            "nbd+unix" => (false, true),
            "nbds+unix" => (true, true),
            s => return Err(bad(uri, format!("unknown scheme {s:?}"))),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (user, host, port) = authority(uri, auth)?;
        let mut u = NbdUri {
            endpoint: Endpoint::Unix(PathBuf::new()),
            export: decode(uri, path)?,
            tls,
            tls_username: user,
            tls_psk_file: None,
            tls_certificates: None,
            tls_hostname: None,
            tls_verify_peer: true,
        };
        let mut socket = None;
        for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = decode(uri, v)?;
            match k {
                "socket" => socket = Some(PathBuf::from(v)),
                "tls-psk-file" => u.tls_psk_file = Some(PathBuf::from(v)),
                "tls-certificates" => u.tls_certificates = Some(PathBuf::from(v)),
                "tls-username" => u.tls_username = Some(v),
                "tls-hostname" => u.tls_hostname = Some(v),
                "tls-verify-peer" => u.tls_verify_peer = parse_bool(uri, k, &v)?,
                "tls-type" if v == "psk" || v == "x509" => {}
                "tls-type" => return Err(bad(uri, format!("tls-type={v}: expected psk or x509"))),
                k if k.starts_with("x-") => {}
                k => return Err(bad(uri, format!("unknown query parameter {k:?}"))),
            }
        }
        u.endpoint = if unix {
            if !host.is_empty() || port.is_some() {
                return Err(bad(
                    uri,
                    "a Unix socket URI has no host or port (nbd+unix:///EXPORT?socket=PATH)",
                ));
            }
            Endpoint::Unix(socket.ok_or_else(|| bad(uri, "socket=PATH is missing"))?)
        } else {
            if socket.is_some() {
                return Err(bad(uri, "socket= is for nbd+unix:// URIs"));
            }
            if host.is_empty() {
                return Err(bad(uri, "no host"));
            }
            Endpoint::Tcp {
                host,
                port: port.unwrap_or(crate::proto::DEFAULT_PORT),
            }
        };
        let tls_params = u.tls_psk_file.is_some() || u.tls_certificates.is_some();
        if tls_params && !u.tls {
            return Err(bad(
                uri,
                "TLS parameters on a URI without TLS (use nbds:// or nbds+unix://)",
            ));
        }
        if u.tls_psk_file.is_some() && u.tls_certificates.is_some() {
            return Err(bad(uri, "give tls-psk-file or tls-certificates, not both"));
        }
        Ok(u)
    }
}

impl fmt::Display for NbdUri {
    /// The URI back as text (export name percent-encoded where needed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls { "nbds" } else { "nbd" };
        let export: String = self
            .export
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~/:@".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        match &self.endpoint {
            Endpoint::Tcp { host, port } if host.contains(':') => {
                write!(f, "{s}://[{host}]:{port}/{export}")
            }
            Endpoint::Tcp { host, port } => write!(f, "{s}://{host}:{port}/{export}"),
            Endpoint::Unix(p) => write!(f, "{s}+unix:///{export}?socket={}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(h: &str, p: u16) -> Endpoint {
        Endpoint::Tcp {
            host: h.into(),
            port: p,
        }
    }

    #[test]
    fn spec_examples() {
        for (u, export) in [
            ("nbd://example.com/disk", "disk"),
            ("nbd://example.com/", ""),
            ("nbd://example.com", ""),
            ("nbd://example.com//disk", "/disk"),
            ("nbd://example.com/hello%20world", "hello world"),
        ] {
            let p = NbdUri::parse(u).unwrap();
            assert_eq!(p.export, export, "{u}");
            assert_eq!(p.endpoint, tcp("example.com", 10809));
            assert!(!p.tls);
        }
        let p = NbdUri::parse("nbd+unix:///disk?socket=/run/n%20bd.sock").unwrap();
        assert_eq!(p.endpoint, Endpoint::Unix("/run/n bd.sock".into()));
        assert_eq!(p.export, "disk");
        let p = NbdUri::parse("nbds://alice@[::1]:10810/e?tls-psk-file=/k.psk").unwrap();
        assert_eq!(p.endpoint, tcp("::1", 10810));
        assert_eq!(p.tls_username.as_deref(), Some("alice"));
        assert_eq!(p.tls_psk_file, Some("/k.psk".into()));
        assert!(p.tls);
        let p = NbdUri::parse(
            "nbds+unix:///?socket=s&tls-certificates=/c&tls-hostname=h&tls-verify-peer=false&x-y=1",
        )
        .unwrap();
        assert_eq!(p.tls_certificates, Some("/c".into()));
        assert_eq!(p.tls_hostname.as_deref(), Some("h"));
        assert!(!p.tls_verify_peer);
        assert_eq!(p.export, "");
        assert_eq!(
            NbdUri::parse("nbd://10.0.0.1:99/a%2Fb")
                .unwrap()
                .to_string(),
            "nbd://10.0.0.1:99/a/b"
        );
    }

    #[test]
    fn bad_uris_refused() {
        for u in [
            "/dev/sda",
            "http://x/y",
            "nbd+unix:///e",
            "nbd+unix://host/e?socket=s",
            "nbd://h/e?socket=s",
            "nbd://h:0/e",
            "nbd://h:99999/e",
            "nbd://h:x/e",
            "nbd:///e",
            "nbd://[::1/e",
            "nbd://h/e?frobnicate=1",
            "nbd://h/e?tls-psk-file=k",
            "nbds://h/e?tls-psk-file=k&tls-certificates=d",
            "nbds://h/e?tls-verify-peer=maybe",
            "nbd://h/%zz",
            "nbd://h/%ff",
        ] {
            assert!(
                matches!(NbdUri::parse(u), Err(ClientError::InvalidUri(_))),
                "{u} accepted"
            );
        }
    }
}
