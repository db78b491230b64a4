//! What `raidkit serve` prints for clients: the URIs and commands that reach each export.

use raidkit_nbd::Listen;
use std::path::Path;

fn first_psk_user(p: &Path) -> String {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .and_then(|l| l.split_once(':'))
                .map(|(u, _)| u.to_string())
        })
        .unwrap_or_else(|| "USER".into())
}

/// The TLS mode clients must use.
pub enum Tls<'a> {
    /// No TLS.
    None,
    /// Pre-shared keys from this file.
    Psk(&'a Path),
    /// An X.509 certificate (this file).
    X509(&'a Path),
}

/// The `nbd-client` command for export `n`, with the TLS options it needs; nbd-client
/// has no TLS-PSK, which is said instead.
fn nbd_client(listen: &Listen, addr: &str, n: &str, tls: &Tls) -> String {
    let target = match listen {
        Listen::Unix(_) => format!("-unix {addr}"),
        Listen::Tcp(_) => {
            let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "10809"));
            format!("{host} {port}")
        }
    };
    match tls {
        Tls::None => format!("  nbd-client {target} -N {n} /dev/nbd0"),
        Tls::X509(cert) => format!(
            "  nbd-client {target} -N {n} -x -A CA.pem -H NAME /dev/nbd0   # CA.pem: the CA that signed {c} ({c} itself if self-signed); NAME: the name in it",
            c = cert.display()
        ),
        Tls::Psk(_) => "  # nbd-client has no TLS-PSK support: use nbdfuse or qemu as above, or serve with --tls-cert/--tls-key".to_string(),
    }
}

/// Print how to reach each export.
pub fn print_clients(listen: &Listen, addr: &str, names: &[String], tls: &Tls) {
    let tls_q = match tls {
        Tls::Psk(p) => format!("&tls-psk-file={}", p.display()),
        Tls::X509(_) => "&tls-certificates=DIR".to_string(),
        Tls::None => String::new(),
    };
    let user = match tls {
        Tls::Psk(p) => format!("{}@", first_psk_user(p)),
        _ => String::new(),
    };
    let s = if matches!(tls, Tls::None) { "" } else { "s" };
    match listen {
        Listen::Unix(_) => outln_lossy!("raidkit: listening on unix socket {addr}"),
        Listen::Tcp(_) => outln_lossy!("raidkit: listening on tcp {addr}"),
    }
    for n in names {
        let uri = match listen {
            Listen::Unix(_) => format!("nbd{s}+unix://{user}/{n}?socket={addr}{tls_q}"),
            Listen::Tcp(_) => {
                let q = tls_q
                    .strip_prefix('&')
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default();
                format!("nbd{s}://{user}{addr}/{n}{q}")
            }
        };
        outln_lossy!("  nbdinfo '{uri}'");
        outln_lossy!("  qemu-img info '{uri}'");
        outln_lossy!("  nbdfuse MOUNTPOINT '{uri}' &   # then use MOUNTPOINT/nbd");
        outln_lossy!("{}", nbd_client(listen, addr, n, tls));
    }
    outln_lossy!(
        "raidkit: serving; stop with Ctrl-C or SIGTERM (arrays are flushed and marked clean)"
    );
}
