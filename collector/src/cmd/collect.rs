//! `gpushim collect`: reads an event stream, from the socket the shim spawned it on (its
//! standard input) or from a recorded file, and writes the reports; the collection itself is
//! [`crate::collect`].

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::signals;
use crate::collect;
use crate::error::{BROKEN_STREAM, OK};

/// Collects the stream in `input` (standard input if `None` or `-`), writing the reports into
/// `output` (the directory the stream names if `None`); with `GPUSHIM_HTML=1` in the
/// environment (the shim passes the program's on) each report is also written as an HTML page.
///
/// # Errors
/// Those of [`collect::collect`], and exit code 2 if `input` cannot be opened. A stream that
/// broke after its Hello event is no error: the exit code is 1 then.
pub fn run(input: Option<PathBuf>, output: Option<PathBuf>) -> Result<ExitCode> {
    let html = std::env::var_os("GPUSHIM_HTML").is_some_and(|v| v == "1");
    let live = input.as_ref().is_none_or(|p| p.as_os_str() == "-");
    let opts = collect::Options { output_dir: output, html, sample_driver: live };
    signals::ignore_file_size_signal();
    let mut err = io::stderr().lock();
    let outcome = match input.filter(|p| p.as_os_str() != "-") {
        Some(path) => {
            let f = File::open(&path).with_context(|| format!("cannot read event stream {}", path.display()))?;
            collect::collect(f, &opts, &mut err)?
        }
        None => {
            signals::ignore_interrupts();
            super::run::tell_run_a_collector_started();
            // Snapshots asked for through the shim's C API are answered on the same socket.
            let mut answers: Box<dyn Write> = match stdin_copy() {
                Some(f) => Box::new(f),
                None => Box::new(io::sink()),
            };
            let outcome = collect::collect_answering(io::stdin().lock(), &opts, &mut err, &mut answers);
            confirm_to_shim();
            outcome?
        }
    };
    Ok(ExitCode::from(if outcome.broken.is_some() { BROKEN_STREAM } else { OK }))
}

/// Tells the shim, through the socket that is our stdin, that the whole stream was read (and
/// the report written, or its failure reported): an empty line (one byte), after any answers
/// to API snapshots. Without it the shim says on the
/// program's stderr that the collector died. Errors are ignored: the program may be gone.
fn confirm_to_shim() {
    if let Some(mut f) = stdin_copy() {
        let _ = f.write_all(b"\n");
    }
}

/// A writable copy of standard input: the socket from the shim.
fn stdin_copy() -> Option<File> {
    use std::os::fd::AsFd;
    io::stdin().as_fd().try_clone_to_owned().ok().map(File::from)
}
