//! `raidkit trace record`: record every client request of a running array.

use crate::control::client::{request, socket_for};
use crate::control::protocol::Request;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// `trace record`.
#[derive(Args, Debug)]
pub struct TraceRecordArgs {
    /// Array name.
    pub name: String,
    /// Where the trace goes (written by the serving process).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// How long to record.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

/// `raidkit trace record`.
pub fn record(a: TraceRecordArgs) -> Result<()> {
    let sock = socket_for(&a.name)?;
    let out = std::path::absolute(&a.output).unwrap_or(a.output.clone());
    request(
        &sock,
        &Request::TraceStart {
            array: a.name.clone(),
            file: out.clone(),
            seconds: Some(a.seconds),
        },
    )?;
    eprintln!(
        "raidkit: tracing {} for {} s into {}",
        a.name,
        a.seconds,
        out.display()
    );
    std::thread::sleep(Duration::from_secs(a.seconds));
    request(
        &sock,
        &Request::TraceStop {
            array: a.name.clone(),
        },
    )?;
    eprintln!(
        "raidkit: trace written; analyse it with `raidkit trace analyze {}`",
        out.display()
    );
    Ok(())
}
