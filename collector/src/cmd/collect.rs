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
/// `output` (the directory the stream names if `None`).
///
/// # Errors
/// Those of [`collect::collect`], and exit code 2 if `input` cannot be opened. A stream that
/// broke after its Hello event is no error: the exit code is 1 then.
pub fn run(input: Option<PathBuf>, output: Option<PathBuf>) -> Result<ExitCode> {
    let opts = collect::Options { output_dir: output };
    signals::ignore_file_size_signal();
    let mut err = io::stderr().lock();
    let outcome = match input.filter(|p| p.as_os_str() != "-") {
        Some(path) => {
            let f = File::open(&path).with_context(|| format!("cannot read event stream {}", path.display()))?;
            collect::collect(f, &opts, &mut err)?
        }
        None => {
            signals::ignore_interrupts();
            let run = super::run::tell_run_a_collector_started();
            let outcome = collect::collect(io::stdin().lock(), &opts, &mut err);
            confirm_to_shim();
            if let (Some(run), Ok(o)) = (run, &outcome) {
                super::run::tell_run_the_report(run, o.report.as_deref());
            }
            outcome?
        }
    };
    Ok(ExitCode::from(if outcome.broken.is_some() { BROKEN_STREAM } else { OK }))
}

/// Tells the shim, through the socket that is our stdin, that the whole stream was read (and
/// the report written, or its failure reported): one byte. Without it the shim says on the
/// program's stderr that the collector died. Errors are ignored: the program may be gone.
fn confirm_to_shim() {
    use std::os::fd::AsFd;
    if let Ok(fd) = io::stdin().as_fd().try_clone_to_owned() {
        let _ = File::from(fd).write_all(b"\n");
    }
}
