//! `rk-pattern [--tagged] SEED LENGTH [OFFSET]` writes pattern bytes `[OFFSET, OFFSET+LENGTH)`
//! to stdout; `rk-pattern -c [--tagged] SEED LENGTH [OFFSET]` compares stdin with them.
//!
//! Without `--tagged` the pattern is mdref's splitmix64 stream (identical to
//! `mdref-run --pattern`); with it, the position-tagged pattern of
//! `raidkit_testkit::pattern::fill_tagged`. Numbers accept `0x` and the suffixes `s`
//! (×512), `K`, `M`, `G`, `T`. Compare mode exits 0 when stdin equals the pattern, else
//! prints the first differing offset and the number of differing 512-byte sectors and
//! exits 1 (short input counts as different). Usage errors exit 2.

use raidkit_testkit::pattern::{fill, parse_number, Comparer, Kind};
use std::io::{self, Read, Write};
use std::process::ExitCode;

const BUF: usize = 1 << 20;
const USAGE: &str = "usage: rk-pattern [-c] [--tagged] SEED LENGTH [OFFSET]";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("rk-pattern: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode, String> {
    let mut check = false;
    let mut kind = Kind::Mdref;
    let mut nums = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "-c" | "--check" => check = true,
            "--tagged" => kind = Kind::Tagged,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            _ => nums.push(parse_number(&arg)?),
        }
    }
    let (seed, len, off) = match nums[..] {
        [s, l] => (s, l, 0),
        [s, l, o] => (s, l, o),
        _ => return Err(USAGE.to_string()),
    };
    let end = off
        .checked_add(len)
        .ok_or_else(|| "OFFSET + LENGTH overflows".to_string())?;
    if check {
        compare_stdin(kind, seed, off, end)
    } else {
        write_stdout(kind, seed, off, end)
    }
}

fn write_stdout(kind: Kind, seed: u64, mut pos: u64, end: u64) -> Result<ExitCode, String> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut buf = vec![0u8; BUF];
    while pos < end {
        let n = (end - pos).min(BUF as u64) as usize;
        fill(kind, seed, pos, &mut buf[..n]);
        if let Err(e) = out.write_all(&buf[..n]) {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::from(1));
            }
            return Err(format!("write error: {e}"));
        }
        pos += n as u64;
    }
    out.flush().map_err(|e| format!("write error: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn compare_stdin(kind: Kind, seed: u64, off: u64, end: u64) -> Result<ExitCode, String> {
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let mut buf = vec![0u8; BUF];
    let mut cmp = Comparer::new(kind, seed, off);
    while cmp.position() < end {
        let want = (end - cmp.position()).min(BUF as u64) as usize;
        let mut got = 0;
        while got < want {
            match input.read(&mut buf[got..want]) {
                Ok(0) => break,
                Ok(r) => got += r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read error on stdin: {e}")),
            }
        }
        cmp.update(&buf[..got]);
        if got < want {
            println!(
                "rk-pattern: short input: got {} of {} bytes",
                cmp.position() - off,
                end - off
            );
            return Ok(ExitCode::from(1));
        }
    }
    if let Some(m) = cmp.mismatch() {
        println!(
            "rk-pattern: MISMATCH: first differing byte at offset {}, {} differing 512-byte sectors",
            m.first_offset, m.sectors
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
