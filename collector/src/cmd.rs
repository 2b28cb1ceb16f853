//! The subcommands of `gpushim`, one module each: what the command line asks for, done with the
//! rest of the library. Each returns the exit code, or an error that carries one
//! ([`crate::error`]).

pub mod collect;
pub mod diff;
pub mod report;
pub mod run;
mod signals;
pub mod snapshot;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};

/// Runs `write` on a buffered standard output, or on `path` (created or truncated) if given;
/// a failure to write names the file.
fn write_output(path: Option<&Path>, write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    match path {
        None => {
            let mut out = BufWriter::new(io::stdout().lock());
            write(&mut out)?;
            out.flush()?;
        }
        Some(p) => {
            let f = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            let mut out = BufWriter::new(f);
            write(&mut out).and_then(|()| out.flush()).with_context(|| format!("cannot write {}", p.display()))?;
        }
    }
    Ok(())
}
