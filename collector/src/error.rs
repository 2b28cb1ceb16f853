//! The exit codes of `gpushim`, and the error that carries one ([`Coded`]).
//!
//! - 0 ([`OK`]): success. A write to a closed pipe (`gpushim report … | head`) also ends with
//!   0: the reader went away, which is a clean stop ([`is_broken_pipe`]).
//! - 1 ([`BROKEN_STREAM`]): `gpushim collect` read a broken event stream. Broken after its
//!   Hello event, the report of everything valid received before the break is still written;
//!   broken before it, there is no process to write a report for. Also [`DEMO_MISSED`]:
//!   `gpushim demo` ran an example that failed, or whose report did not name its leak.
//! - 2 ([`USAGE`]): usage or input errors: bad arguments (clap exits 2 for its own), a report
//!   that cannot be read, a process that cannot be snapshotted, a file that cannot be written.
//!   Every error that carries no code of its own ends with 2.
//! - `gpushim run` passes the program's own exit status on: if signal N ended it, `run` ends
//!   with signal N too (as `timeout(1)` does; [`SIGNALLED`] + N only if N does not end it), [`CANNOT_EXECUTE`] if it could not be executed, [`NOT_FOUND`] if it was not
//!   found (as a shell does), 1 if it ended in neither way; with `--fail-on-leak`,
//!   [`LEAKED`] when the program exited 0 and its report failed the check.

use std::fmt;
use std::io;

/// Exit code of success.
pub const OK: u8 = 0;

/// Exit code of `collect` when the event stream broke (the report is still written if the
/// stream got past its Hello event).
pub const BROKEN_STREAM: u8 = 1;

/// Exit code of `demo` when an example failed or its report did not name the example's leak.
pub const DEMO_MISSED: u8 = 1;

/// Exit code of usage and input errors, and of every error without a code of its own.
pub const USAGE: u8 = 2;

/// Exit code of `run` when the program could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;

/// Exit code of `run` when the program was not found.
pub const NOT_FOUND: u8 = 127;

/// Exit code of `run --fail-on-leak` when the program exited 0 but its report has leak suspects
/// or more live bytes at exit than allowed (pytest-memray's leak check is the model).
pub const LEAKED: u8 = 3;

/// `run` exits with this plus the signal number when a signal ended the program.
pub const SIGNALLED: u8 = 128;

/// An error that ends the program with a particular exit code.
#[derive(Debug)]
pub struct Coded {
    /// The exit code.
    pub code: u8,
    message: String,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// An error with message `message` that makes `gpushim` exit with `code`.
pub fn coded(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded { code, message: message.into() })
}

/// The exit code `err` ends `gpushim` with: that of the first [`Coded`] in its chain, else
/// [`USAGE`].
pub fn exit_code(err: &anyhow::Error) -> u8 {
    err.chain().find_map(|e| e.downcast_ref::<Coded>()).map_or(USAGE, |c| c.code)
}

/// True if and only if `err` comes from writing to a pipe whose reader has gone: a clean stop,
/// not an error to report.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

/// The cause of a failed file operation in a few plain words: "is a directory", "no such
/// file", "not a directory", "permission denied", else the system's own message. (The
/// system's message alone, e.g. "No such file or directory (os error 2)", reads the same for
/// a missing file and a missing directory above it.)
pub fn file_cause(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EISDIR) => "is a directory".into(),
        Some(libc::ENOENT) => "no such file".into(),
        Some(libc::ENOTDIR) => "not a directory".into(),
        Some(libc::EACCES) => "permission denied".into(),
        _ => e.to_string(),
    }
}
