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
        // A snapshot's reachability scan ends after its report is written: its result is the
        // companion file `X.reach.json`, read as the final report carries its own.
        let reach = crate::explain::holders::beside(path, "reach");
        if report.reachability.is_none() && reach.is_file() {
            let file = std::fs::read(&reach)
                .map_err(|e| anyhow!("{}", file_cause(&e)))
                .and_then(|b| Ok(serde_json::from_slice::<crate::explain::reach::ReachFile>(&b)?));
            match file {
                Ok(f) => crate::explain::reach::apply(&mut report, f),
                Err(e) => eprintln!(
                    "gpushim: cannot read the scan's file {}: {e:#}; the report is shown without it",
                    reach.display()
                ),
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::reach::ReachFile;
    use crate::report::{Reachability, SiteReach};

    /// `gpushim report` of a snapshot reads its scan's companion file (`X.reach.json`): the
    /// scan's lines and the lost counts in the suspects' reasons, as a final report has them.
    #[test]
    fn a_snapshots_scan_is_read_from_its_companion_file() {
        let dir = std::env::temp_dir().join(format!("gpushim-reach-beside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = crate::render::tests::sample();
        r.reachability = None;
        let site = r.suspects[0].site;
        let path = dir.join("gpushim-1-snapshot-1.json");
        std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
        assert!(read_report(&path).unwrap().reachability.is_none(), "no companion: none");
        let reach = ReachFile {
            reachability: Reachability { status: "complete".into(), definitely_lost_count: 2, ..Default::default() },
            sites: [(site, SiteReach { definitely_lost_count: 2, scanned_count: 3, ..Default::default() })].into(),
        };
        std::fs::write(dir.join("gpushim-1-snapshot-1.reach.json"), serde_json::to_vec(&reach).unwrap()).unwrap();
        let got = read_report(&path).unwrap();
        assert_eq!(got.reachability.as_ref().map(|x| x.definitely_lost_count), Some(2));
        assert!(got.suspects[0].reason.starts_with("2 of 3 allocations definitely lost"), "{}", got.suspects[0].reason);
        // A damaged companion costs only itself.
        std::fs::write(dir.join("gpushim-1-snapshot-1.reach.json"), b"{garbage").unwrap();
        assert!(read_report(&path).unwrap().reachability.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
