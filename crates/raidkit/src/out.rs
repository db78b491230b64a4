//! Standard output, and how the command ends when nobody reads it any more.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe (`raidkit examine m0 | head -1`)
//! returns EPIPE, and `println!` would panic. Every command prints through [`outln!`]
//! instead: on EPIPE the command ends at once, quietly, with status 141 — what a shell
//! reports for a tool killed by SIGPIPE, as `cat` or `ls` are. Output is only printed by
//! commands after their work is done (or, for `export`, while only reading), so ending
//! there loses nothing. The serving commands (`serve`, `mount`) never end because of their
//! own output: they print through [`note_out`], which ignores write errors.

use std::io::Write;

/// Exit status when stdout was closed by its reader (128 + SIGPIPE).
pub const EXIT_PIPE: i32 = 141;

/// Print a line on stdout; see the module documentation.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Print on stdout without a newline; see the module documentation.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write_out(format_args!($($arg)*)) };
}

/// Print a line on stdout for a serving process (`serve`, `mount`): write errors are
/// ignored and the service goes on.
#[macro_export]
macro_rules! outln_lossy {
    ($($arg:tt)*) => { $crate::out::note_out(format_args!($($arg)*)) };
}

/// Write to stdout; end the process on a closed pipe (status 141) or another write error
/// (status 1, with the reason).
pub fn write_out(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|_| o.flush()) {
        closed(&e);
    }
}

/// Write all of `bytes` to stdout, as [`write_out`].
pub fn write_bytes(bytes: &[u8]) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(bytes).and_then(|_| o.flush()) {
        closed(&e);
    }
}

/// End the process because stdout failed with `e`.
pub fn closed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(EXIT_PIPE);
    }
    let _ = writeln!(std::io::stderr(), "raidkit: error: writing to stdout: {e}");
    std::process::exit(1);
}

/// True if `e` (or a cause of it) is a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Print a line on stdout for a serving process: errors are ignored, the service goes on.
pub fn note_out(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    let _ = o
        .write_fmt(args)
        .and_then(|_| o.write_all(b"\n"))
        .and_then(|_| o.flush());
}

/// An error and its causes, `: `-separated, each said once: a cause whose text an outer
/// message already includes (`opening x: No such file or directory (os error 2)` over
/// the io::Error itself) is not repeated.
/// An engine error's remedy, if it has one, is said last in the CLI's words.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let t = summarise_numbers(&cause.to_string());
        if !t.is_empty() && !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
    }
    let mut text = parts.join(": ");
    // The OS refused this user: say what to do, once, after the cause.
    if e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
    }) {
        text.push_str(PERMISSION_HINT);
    }
    if let Some(r) = e
        .chain()
        .find_map(|c| c.downcast_ref::<raidkit_engine::EngineError>())
        .and_then(remedy_text)
    {
        text.push_str(&r);
    }
    text
}

/// Said after an error the OS gave because this user may not open or change a path.
pub const PERMISSION_HINT: &str =
    "; run the command as root (sudo), or as a user who may open that file or device";

/// What the user types to apply an engine error's remedy, with the separator that
/// joins it to the message (`. Use --force to overwrite it`).
pub fn remedy_text(e: &raidkit_engine::EngineError) -> Option<String> {
    use raidkit_engine::{EngineError, Remedy};
    const REMOVE_LOG: &str = "To remove the log by force: `raidkit manage NAME --update no-bbl --force` on a served array, `raidkit repair --update no-bbl --zero-lost MEMBER...` on a stopped one";
    let text = match (e, e.remedy()?) {
        (EngineError::NotBlank { .. }, _) => ". Use --force to overwrite it",
        (EngineError::DirtyDegraded { .. }, _) => ". Use --force to start it anyway",
        (_, Remedy::Force) => ". Use --force to do it anyway",
        (_, Remedy::RestoreLostData) => return Some(format!(". {REMOVE_LOG}")),
        (_, Remedy::RecomputeChecksums) => "; recompute them with `raidkit checksums init`",
        (_, Remedy::MatchMemberCount) => "; --raid-devices must equal the number of members given",
        (_, Remedy::NoChunk) => "; drop --chunk",
        (_, Remedy::BadBlockLogNeeds1x) => {
            "; use --metadata 1.2 (or 1.0/1.1) with --bbl, or drop --bbl"
        }
        (_, Remedy::GiveMemberSize) => "; pass --size SIZE to create member files (sparse)",
        (_, Remedy::FinishReshape) => {
            "; let the reshape finish first (`raidkit grow --continue MEMBER...` on a stopped array; a served one continues by itself), or revert it (`raidkit grow NAME --revert`)"
        }
        (_, Remedy::WriteBehindNeedsBitmap) => {
            "; add --bitmap internal (on a running array first `raidkit grow NAME --bitmap internal`)"
        }
        (_, Remedy::WriteBehindNeedsWriteMostly) => {
            "; mark the slow member(s) with --write-mostly MEMBER"
        }
        _ => return None,
    };
    Some(text.to_string())
}

/// Lists of this many numbers or more in a message are said as runs.
const LONG_LIST: usize = 8;

/// A message with every long `, `-separated list of numbers (roles, typically: an array
/// with 65,534 slots can list 65,531 missing ones) said as runs, `3-65533 (65531 roles)`.
pub fn summarise_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    let mut rest = text;
    while !rest.is_empty() {
        let (list, len) = number_list(rest);
        if list.len() >= LONG_LIST {
            out.push_str(&crate::units::role_list(&list));
            rest = &rest[len..];
            continue;
        }
        let skip = rest
            .char_indices()
            .skip(1)
            .find(|&(i, c)| {
                c.is_ascii_digit() && !rest[..i].ends_with(|p: char| p.is_ascii_digit())
            })
            .map_or(rest.len(), |(i, _)| i);
        out.push_str(&rest[..skip]);
        rest = &rest[skip..];
    }
    out
}

/// The numbers `a, b, c` at the start of `s` and the bytes they take (none unless `s`
/// starts with a digit).
fn number_list(s: &str) -> (Vec<usize>, usize) {
    let mut v = Vec::new();
    let mut end = 0;
    let mut pos = 0;
    loop {
        let digits = s[pos..].bytes().take_while(u8::is_ascii_digit).count();
        let Ok(n) = s[pos..pos + digits].parse::<usize>() else {
            break;
        };
        v.push(n);
        end = pos + digits;
        if !s[end..].starts_with(", ") {
            break;
        }
        pos = end + 2;
    }
    (v, end)
}
