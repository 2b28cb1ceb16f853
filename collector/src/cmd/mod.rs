//! The subcommands of `gpushim`, one module each: what the command line asks for, done with the
//! rest of the library. Each returns the exit code, or an error that carries one
//! ([`crate::error`]).

pub mod collect;
pub mod demo;
pub mod diff;
pub mod kernel;
pub mod preload;
pub mod report;
pub mod run;
mod run_pipe;
mod signals;
pub mod snapshot;
pub mod top;
mod top_text;
mod top_view;

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use crate::error::file_cause;
use crate::report::Report;

/// The largest report `gpushim report` reads, bytes.
const MAX_REPORT_BYTES: u64 = 1 << 30;

/// Reads the report at `path`, or on standard input for `-`, with the heap walk's companion
/// file beside it (none for standard input). The error names the file and the real cause
/// ("is a directory", "no such file", "not a directory").
fn read_report(path: &Path) -> Result<Report> {
    let stdin = path == Path::new("-");
    let name = if stdin { "standard input".to_string() } else { path.display().to_string() };
    // At most MAX_REPORT_BYTES and one more: an endless input (`yes | gpushim report -`,
    // `/dev/zero`) grew without bound.
    let mut bytes = Vec::new();
    let read = if stdin {
        io::stdin().lock().take(MAX_REPORT_BYTES + 1).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_REPORT_BYTES + 1).read_to_end(&mut bytes))
    };
    read.map_err(|e| anyhow!("cannot read report {name}: {}", file_cause(&e)))?;
    if bytes.len() as u64 > MAX_REPORT_BYTES {
        return Err(anyhow!(
            "cannot read report {name}: it is larger than {} MiB, more than any report (an endless input?)",
            MAX_REPORT_BYTES >> 20
        ));
    }
    if stdin && bytes.is_empty() {
        return Err(anyhow!("cannot read report {name}: it is empty"));
    }
    let mut report = Report::from_slice(&bytes).with_context(|| format!("cannot read report {name}"))?;
    if !stdin {
        // A damaged companion file costs only itself: the report is shown without it.
        match crate::explain::holders::read_beside(path) {
            Ok(h) => {
                // A snapshot's report was written before its walk: its kinds of memory come from
                // the companion file.
                if let Some(h) = h.as_ref().filter(|_| report.memory_kinds.is_empty()) {
                    report.memory_kinds = crate::explain::kinds::complete(&h.kinds, &report.gpu_memory, &report.sites);
                }
                report.holders = h;
            }
            Err(e) => eprintln!("gpushim: {e:#}; the report is shown without who holds its memory"),
        }
    }
    Ok(report)
}

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
            let f = File::create(p).map_err(|e| anyhow!("cannot create {}: {}", p.display(), file_cause(&e)))?;
            let mut out = BufWriter::new(f);
            write(&mut out).and_then(|()| out.flush()).with_context(|| format!("cannot write {}", p.display()))?;
        }
    }
    Ok(())
}
