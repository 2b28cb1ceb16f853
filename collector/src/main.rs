//! `gpushim`: runs a program under `libgpushim.so`, collects its CUDA allocation events, and
//! reports the memory it never freed.
//!
//! Exit codes: 0 success; 1 `collect` read a broken event stream (the report is still
//! written); 2 usage or input errors; `run` exits with the program's own status (128 + signal
//! if a signal ended it, 126 if it could not be executed, 127 if it was not found).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod assemble;
mod collect;
mod diff;
mod error;
mod gauge;
mod json;
mod live;
mod oom;
mod output;
#[cfg(test)]
mod perf_tests;
mod pyframes;
mod rank;
mod render;
mod reorder;
mod report;
mod run;
mod series;
mod snapshot;
mod symbolize;
mod timeline;
mod words;

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::error::{coded, BROKEN_STREAM, OK, USAGE};
use crate::render::format::{self, Format};
use crate::render::TextOptions;
use crate::report::Report;

/// Find GPU memory leaks: trace a program's CUDA allocations and report what it never freed.
#[derive(Debug, Parser)]
#[command(name = "gpushim", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program with libgpushim.so preloaded; a report is written when it ends.
    Run {
        /// Directory for reports (default: the program's working directory).
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
        /// The program and its arguments (put them after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Print a report for a person, as JSON, as folded stacks, as a flame graph (SVG) or as a
    /// Perfetto trace.
    Report {
        /// A report file (gpushim-PID.json, a snapshot or an out-of-memory report).
        file: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Write to this file instead of standard output (replacing it if it exists).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Number of sites to show (text format).
        #[arg(long, value_name = "N", default_value_t = 10)]
        top: usize,
        /// Frames to show per stack (text format).
        #[arg(long, value_name = "N", default_value_t = 12)]
        depth: usize,
        /// Show CUDA runtime/driver/framework frames too (text, folded and svg formats).
        #[arg(long)]
        all_frames: bool,
    },
    /// Compare two reports: which sites grew from OLD to NEW.
    Diff {
        /// The earlier report.
        old: PathBuf,
        /// The later report.
        new: PathBuf,
        /// Number of sites to show.
        #[arg(long, value_name = "N", default_value_t = 20)]
        top: usize,
        /// Output format.
        #[arg(long, value_enum, default_value_t = diff::DiffFormat::Text)]
        format: diff::DiffFormat,
    },
    /// Ask a running traced process for a snapshot report, wait for it, print its path.
    Snapshot {
        /// Process id of a program started under gpushim.
        #[arg(value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
        /// The signal the shim listens to.
        #[arg(long, value_enum, default_value_t = snapshot::Signal::Usr1)]
        signal: snapshot::Signal,
        /// Seconds to wait for the snapshot file.
        #[arg(long, value_name = "SECS", default_value_t = 10.0)]
        timeout: f64,
    },
    /// Read an event stream (stdin, as spawned by the shim, or --input) and write reports.
    #[command(hide = true)]
    Collect {
        /// Read a recorded stream from this file instead of stdin (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        input: Option<PathBuf>,
        /// Write reports here instead of the directory the stream names.
        #[arg(long, value_name = "DIR")]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if error::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let code = error::exit_code(&err);
            let _ = writeln!(io::stderr(), "gpushim: {err:#}");
            ExitCode::from(code)
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run { output, command } => run::run(&run::Options { output, command }),
        Command::Report { file, format, output, top, depth, all_frames } => {
            let report = Report::read(&file).with_context(|| format!("cannot read report {}", file.display()))?;
            let renderer = format::renderer(format, TextOptions { top, depth, all_frames });
            write_output(output.as_deref(), &mut |out| renderer.render(&report, out))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Diff { old, new, top, format } => {
            let a = Report::read(&old).with_context(|| format!("cannot read report {}", old.display()))?;
            let b = Report::read(&new).with_context(|| format!("cannot read report {}", new.display()))?;
            write_output(None, &mut |out| match format {
                diff::DiffFormat::Text => diff::diff(&a, &b, top, out),
                diff::DiffFormat::Json => diff::diff_json(&a, &b, top, out),
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Snapshot { pid, signal, timeout } => {
            if !(timeout.is_finite() && timeout >= 0.0) {
                return Err(coded(USAGE, format!("--timeout {timeout} is not a number of seconds >= 0")));
            }
            let path = snapshot::snapshot(pid, signal, Duration::from_secs_f64(timeout))?;
            let mut out = io::stdout().lock();
            writeln!(out, "{}", path.display())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Collect { input, output } => {
            let opts = collect::Options { output_dir: output };
            run::ignore_file_size_signal();
            let mut err = io::stderr().lock();
            let outcome = match input.filter(|p| p.as_os_str() != "-") {
                Some(path) => {
                    let f =
                        File::open(&path).with_context(|| format!("cannot read event stream {}", path.display()))?;
                    collect::collect(f, &opts, &mut err)?
                }
                None => {
                    run::ignore_interrupts();
                    let outcome = collect::collect(io::stdin().lock(), &opts, &mut err);
                    confirm_to_shim();
                    outcome?
                }
            };
            Ok(ExitCode::from(if outcome.broken.is_some() { BROKEN_STREAM } else { OK }))
        }
    }
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

/// Runs `write` on a buffered standard output, or on `path` (created or truncated) if given;
/// a failure to write names the file.
fn write_output(path: Option<&std::path::Path>, write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_dashes() {
        let cli = Cli::try_parse_from(["gpushim", "run", "-o", "/tmp", "--", "python", "-c", "x"]).unwrap();
        match cli.command {
            Command::Run { output, command } => {
                assert_eq!(output, Some(PathBuf::from("/tmp")));
                assert_eq!(command, vec!["python", "-c", "x"]);
            }
            c => panic!("{c:?}"),
        }
        assert!(Cli::try_parse_from(["gpushim", "snapshot", "0"]).is_err(), "pid 0 would signal a group");
        assert!(Cli::try_parse_from(["gpushim", "collect"]).is_ok());
    }

    fn run_cli(args: &[&str]) -> Result<ExitCode> {
        dispatch(Cli::try_parse_from(args)?)
    }

    /// `gpushim report FILE --format F -o OUT` for every format, and `gpushim diff --format
    /// json`, in-process on a small report.
    #[test]
    fn report_formats_and_diff_write_files() {
        let d = crate::output::tests::TempDir::new("cli");
        let file = d.0.join("gpushim-1234.json");
        let r = crate::render::tests::sample();
        std::fs::write(&file, serde_json::to_vec(&r).unwrap()).unwrap();
        let f = file.to_str().unwrap();
        let out = |name: &str| d.0.join(name);
        for (format, name, want) in [
            ("text", "r.txt", "leak suspects:"),
            ("json", "r.json", "\"schema\": \"gpushim.report.v1\""),
            ("folded", "r.folded", "main;render_frame 4194304\n"),
            ("svg", "r.svg", "<svg"),
            ("perfetto", "r.trace.json", "\"traceEvents\""),
        ] {
            let o = out(name);
            run_cli(&["gpushim", "report", f, "--format", format, "-o", o.to_str().unwrap()]).unwrap();
            let text = std::fs::read_to_string(&o).unwrap();
            assert!(text.contains(want), "{format}: {text}");
        }
        let o = out("diff.json");
        let mut grown = r.clone();
        grown.sites[0].live_bytes *= 2;
        let f2 = out("gpushim-1234.2.json");
        std::fs::write(&f2, serde_json::to_vec(&grown).unwrap()).unwrap();
        // Diff writes to stdout; check its JSON through the library call instead.
        assert!(Cli::try_parse_from(["gpushim", "diff", f, f2.to_str().unwrap(), "--format", "json"]).is_ok());
        let mut buf = Vec::new();
        diff::diff_json(&r, &grown, 20, &mut buf).unwrap();
        std::fs::write(&o, &buf).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["sites"][0]["growth_bytes"], 3 << 20);
        // A file that cannot be created is an error naming it.
        let bad = d.0.join("no/such/dir/x.svg");
        let e = run_cli(&["gpushim", "report", f, "--format", "svg", "-o", bad.to_str().unwrap()]).unwrap_err();
        assert!(format!("{e:#}").starts_with(&format!("cannot create {}", bad.display())), "{e:#}");
    }

    #[test]
    fn collect_reads_stdin_for_a_dash() {
        match Cli::try_parse_from(["gpushim", "collect", "--input", "-"]).unwrap().command {
            Command::Collect { input, .. } => assert_eq!(input, Some(PathBuf::from("-"))),
            c => panic!("{c:?}"),
        }
    }
}
