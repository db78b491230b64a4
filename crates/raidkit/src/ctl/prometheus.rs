//! `raidkit stats --prometheus HOST:PORT`: every running array's counters in the
//! Prometheus text format, over HTTP.
//!
//! The server is small on purpose and bounded: at most [`MAX_CONNECTIONS`] connections are
//! served at once, each on its own thread (so one slow or silent client delays nobody);
//! a client has [`REQUEST_TIME`] in total to send a request head of at most
//! [`MAX_HEAD_BYTES`], which `httparse` parses; every reply closes the connection.
//! (`tiny_http` was considered: it serves each connection on its own thread too, but has no
//! read timeouts and no bound on connections, so silent clients would pile up threads.)

use super::health::esc;
use super::stats::stats_now;
use super::wire;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// Time a client has to send its request head.
pub const REQUEST_TIME: Duration = Duration::from_secs(10);
/// Largest request head read.
pub const MAX_HEAD_BYTES: usize = 16 << 10;

/// Serve the metrics on `addr` until the process is stopped.
pub fn serve(addr: &str) -> Result<()> {
    let l = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    eprintln!(
        "raidkit: Prometheus metrics on http://{}/metrics",
        l.local_addr()?
    );
    let live = Arc::new(AtomicUsize::new(0));
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            turn_away(&mut c);
            continue;
        }
        let spawned = std::thread::Builder::new()
            .name("raidkit-metrics".into())
            .spawn({
                let live = Arc::clone(&live);
                move || {
                    let _ = handle(c);
                    live.fetch_sub(1, Ordering::AcqRel);
                }
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::AcqRel);
        }
    }
    Ok(())
}

/// Answer 503 without serving: on the accept loop, so nothing here may block for long.
/// What the client has already sent is read first and the reply is followed by a FIN:
/// closing a socket with unread bytes sends a reset instead, and a client may then lose
/// the reply and see only "connection reset".
fn turn_away(c: &mut TcpStream) {
    let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
    if c.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 2048];
        let mut drained = 0;
        while drained < MAX_HEAD_BYTES {
            match c.read(&mut sink) {
                Ok(n) if n > 0 => drained += n,
                _ => break,
            }
        }
        let _ = c.set_nonblocking(false);
    }
    let _ = reply(c, "503 Service Unavailable", "too many connections\n");
    let _ = c.shutdown(std::net::Shutdown::Write);
}

/// Read the request head within the deadline; None if the client was too slow, sent too
/// much, or went away.
fn read_head(c: &mut TcpStream) -> Option<Vec<u8>> {
    let deadline = Instant::now() + REQUEST_TIME;
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.checked_duration_since(Instant::now())?;
        c.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        let n = c.read(&mut buf).ok().filter(|&n| n > 0)?;
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD_BYTES {
            return None;
        }
    }
    Some(head)
}

fn handle(mut c: TcpStream) -> std::io::Result<()> {
    c.set_write_timeout(Some(REQUEST_TIME))?;
    let Some(head) = read_head(&mut c) else {
        return Ok(());
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return reply(&mut c, "400 Bad Request", "bad request\n"),
    }
    let path = req.path.unwrap_or("");
    match (
        req.method.unwrap_or(""),
        path.split('?').next().unwrap_or(""),
    ) {
        ("GET", "/metrics" | "/") => reply(&mut c, "200 OK", &prometheus_text()),
        ("GET", _) => reply(&mut c, "404 Not Found", "not found: try /metrics\n"),
        _ => reply(&mut c, "405 Method Not Allowed", "only GET\n"),
    }
}

fn reply(c: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    c.flush()
}

/// Prometheus text exposition of every running array's health (see [`super::health`])
/// and IO counters.
pub fn prometheus_text() -> String {
    let status = crate::control::client::all_status()
        .map(|(s, _)| s)
        .unwrap_or_default();
    let mut o = super::health::health_text(&status);
    o.push_str(&io_text());
    o
}

/// The IO counters of every running array.
fn io_text() -> String {
    let mut arrays: Vec<wire::Stats> = stats_now(None)
        .map(|(v, _)| v)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    for a in &mut arrays {
        a.name = esc(&a.name);
    }
    let mut o = String::new();
    o.push_str("# HELP raidkit_requests_total Client requests by operation.\n# TYPE raidkit_requests_total counter\n");
    for a in &arrays {
        for (op, d) in [
            ("read", &a.io.read),
            ("write", &a.io.write),
            ("flush", &a.io.flush),
        ] {
            let _ = writeln!(
                o,
                "raidkit_requests_total{{array=\"{}\",op=\"{op}\"}} {}",
                a.name, d.count
            );
        }
    }
    o.push_str("# HELP raidkit_bytes_total Client bytes by operation.\n# TYPE raidkit_bytes_total counter\n");
    for a in &arrays {
        for (op, d) in [("read", &a.io.read), ("write", &a.io.write)] {
            let _ = writeln!(
                o,
                "raidkit_bytes_total{{array=\"{}\",op=\"{op}\"}} {}",
                a.name, d.bytes
            );
        }
    }
    o.push_str("# HELP raidkit_request_size_bytes Client request sizes.\n# TYPE raidkit_request_size_bytes histogram\n");
    for a in &arrays {
        for (op, d) in [("read", &a.io.read), ("write", &a.io.write)] {
            size_histogram(&mut o, &a.name, op, d);
        }
    }
    o.push_str("# HELP raidkit_member_ios_total Member IOs by role.\n# TYPE raidkit_member_ios_total counter\n");
    for a in &arrays {
        for m in &a.members {
            for (op, n) in [("read", m.reads), ("write", m.writes)] {
                let _ = writeln!(
                    o,
                    "raidkit_member_ios_total{{array=\"{}\",role=\"{}\",op=\"{op}\"}} {n}",
                    a.name, m.role
                );
            }
        }
    }
    o
}

/// The cumulative buckets of a request-size histogram (bucket `i` counts sizes below
/// `1024 << i`).
fn size_histogram(o: &mut String, name: &str, op: &str, d: &wire::Dir) {
    let mut acc = 0;
    for (i, c) in d.size_hist.iter().enumerate() {
        acc += c;
        if i + 1 < d.size_hist.len() {
            let _ = writeln!(
                o,
                "raidkit_request_size_bytes_bucket{{array=\"{name}\",op=\"{op}\",le=\"{}\"}} {acc}",
                (1024u64 << i) - 1
            );
        }
    }
    let _ = writeln!(
        o,
        "raidkit_request_size_bytes_bucket{{array=\"{name}\",op=\"{op}\",le=\"+Inf\"}} {acc}"
    );
    let _ = writeln!(
        o,
        "raidkit_request_size_bytes_sum{{array=\"{name}\",op=\"{op}\"}} {}",
        d.bytes
    );
    let _ = writeln!(
        o,
        "raidkit_request_size_bytes_count{{array=\"{name}\",op=\"{op}\"}} {acc}"
    );
}
