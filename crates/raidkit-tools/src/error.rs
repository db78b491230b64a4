//! Typed errors of the tools library.

use std::io;

/// Result with [`ToolsError`].
pub type Result<T> = std::result::Result<T, ToolsError>;

/// Everything that can go wrong in the tools.
#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    /// An argument or combination of arguments that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// A line of a trace that could not be understood.
    #[error("{file}:{line}: {why}")]
    Parse {
        /// File (or `-`) being parsed.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        why: String,
    },
    /// An operating-system error on a path.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file or device.
        path: String,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The engine refused or failed (assembly, create, array IO).
    #[error(transparent)]
    Engine(#[from] raidkit_engine::EngineError),
    /// Drawing a chart failed.
    #[error("plot: {0}")]
    Plot(String),
}

impl ToolsError {
    /// Shorthand for [`ToolsError::Io`].
    pub fn io(path: impl Into<String>, op: &'static str, source: io::Error) -> ToolsError {
        ToolsError::Io {
            path: path.into(),
            op,
            source,
        }
    }
}
