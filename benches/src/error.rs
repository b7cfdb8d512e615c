//! Errors of the benchmark harness, split by who is at fault.

use std::io;

/// Why one side of a benchmark run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BenchError {
    /// The command line was wrong (the caller's fault).
    #[error("usage: {0}")]
    Usage(String),
    /// The requested backend is not compiled into this binary.
    #[error("backend `{0}` is not available in this build")]
    Unavailable(String),
    /// The peer process did not do its part before the deadline.
    #[error("timed out while {0}")]
    Timeout(&'static str),
    /// The peer sent something other than what the test expects.
    #[error("peer misbehaved: {0}")]
    Peer(String),
    /// An operating-system I/O error (raw TCP backend, stdin).
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// An error reported by a messaging library.
    #[error("{backend} error: {detail}")]
    Backend {
        /// Which backend reported it.
        backend: &'static str,
        /// The library's own description.
        detail: String,
    },
}

impl BenchError {
    /// Wraps an error value of a messaging library.
    pub(crate) fn backend(backend: &'static str, err: impl std::fmt::Display) -> Self {
        Self::Backend {
            backend,
            detail: err.to_string(),
        }
    }

    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) => 2,
            Self::Unavailable(_) => 3,
            _ => 1,
        }
    }
}
