//! `gpushim`: runs a program under `libgpushim.so`, collects its CUDA allocation events, and
//! reports the memory it never freed.
//!
//! This binary only reads the command line and hands each subcommand to the library
//! (`gpushim_collector`). Exit codes: 0 success; 1 `collect`
//! read a broken event stream (the report is still written), or `demo` did not find an
//! example's leak; 2 usage or input errors; `run`
//! exits with the program's own status (the same signal if a signal ended it, which a shell
//! shows as 128 + signal; 126 if it could not be executed, 127 if it was not found).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use gpushim_collector::{self as collector, DiffFormat, Format, Signal, TextOptions};

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
    ///
    /// Exit status: the program's own, as timeout(1) passes it on: its exit code; if a signal
    /// ended it, gpushim run ends with the same signal once the report is written (a shell sees
    /// 128 + N); 126 if it could not be executed, 127 if it was not found. Signals sent to
    /// gpushim run alone (kill -INT/-QUIT/-TERM/-HUP/-USR1/-USR2 PID) are passed on to the
    /// program; a Ctrl-C from the terminal reaches the program once, from the terminal.
    Run {
        /// Directory for reports (default: the program's working directory).
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
        /// Exit 3 when the program exited 0 but its final report has a leak suspect (a site
        /// whose live memory kept growing; definitely lost memory alone does not fail it), or
        /// (with BYTES: a number of bytes, or with KiB, MiB, GiB) more live bytes at exit than
        /// BYTES. For test suites and CI.
        #[arg(long, value_name = "BYTES", num_args = 0..=1, require_equals = true, default_missing_value = "")]
        fail_on_leak: Option<String>,
        /// The program and its arguments (put them after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Print a report for a person, or as JSON, folded stacks, a flame graph (SVG), a Perfetto
    /// trace, one HTML page or a PyTorch memory snapshot (`--format`).
    Report {
        /// A report file (gpushim-PID.json, a snapshot or an out-of-memory report); `-` reads
        /// it from standard input. A directory shows the job view: every process's final
        /// report side by side (text or json).
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
    /// Compare two reports: which sites grew from OLD to NEW (a warning on stderr when they are
    /// of different programs, or OLD is newer than NEW).
    Diff {
        /// The earlier report.
        old: PathBuf,
        /// The later report.
        new: PathBuf,
        /// Number of sites to show.
        #[arg(long, value_name = "N", default_value_t = 20)]
        top: usize,
        /// Output format.
        #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
        format: DiffFormat,
    },
    /// Ask a running traced process for a snapshot report, wait for it, print its path.
    Snapshot {
        /// Process id of a program started under gpushim.
        #[arg(value_parser = clap::value_parser!(i32).range(1..))]
        pid: i32,
        /// The signal the shim listens to (default: the program's own GPUSHIM_SIGNAL, else USR1).
        #[arg(long, value_enum)]
        signal: Option<Signal>,
        /// Seconds to wait for the snapshot file.
        #[arg(long, value_name = "SECS", default_value_t = 10.0)]
        timeout: f64,
    },
    /// Watch a running traced program's GPU memory live: its top allocation sites by live
    /// bytes or growth, from its collector (the program is not touched). Keys: t sort, g growth
    /// window, Enter stack (and holders), s snapshot, d diff since the last snapshot (the first
    /// d, with none yet, writes one), q quit.
    Top {
        /// Process id of a program traced by gpushim, or of `gpushim run` (its traced processes
        /// are watched), or a job's output directory (every process writing reports there).
        #[arg(value_name = "PID|DIR")]
        target: String,
        /// Print one text frame and exit (no terminal needed).
        #[arg(long)]
        once: bool,
        /// Print one JSON frame and exit (docs/report-schema.md, "The live frame").
        #[arg(long, conflicts_with = "once")]
        json: bool,
        /// Growth window, seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
        window: f64,
    },
    /// Jupyter: install a kernel that runs under gpushim (then `%load_ext gpushim` in a notebook).
    Kernel {
        #[command(subcommand)]
        action: KernelAction,
    },
    /// Try it without a GPU: run the bundled leaky examples with stand-in CUDA libraries and show their reports.
    Demo {
        /// Directory for the reports (default: a new gpushim-demo-* directory in $TMPDIR or /tmp).
        #[arg(short, long, value_name = "DIR")]
        output: Option<PathBuf>,
    },
    /// Print the absolute path of libgpushim.so, for `LD_PRELOAD=$(gpushim preload-path) CMD`.
    PreloadPath,
    /// Write reports from an event stream: a recorded one (`--input FILE`, from GPUSHIM_RECORD), or stdin as the shim spawns it.
    Collect {
        /// Read a recorded stream from this file instead of stdin (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        input: Option<PathBuf>,
        /// Write reports here instead of the directory the stream names.
        #[arg(long, value_name = "DIR")]
        output: Option<PathBuf>,
        /// The traced process's id. Not used by `collect`: the shim passes it (with
        /// `--output`) so that `gpushim snapshot PID` can find the report directory on this
        /// process's command line.
        #[arg(long, value_name = "PID")]
        pid: Option<u32>,
        /// Confirm the end of the stream to the shim only once the report is written, so that
        /// the program's exit waits for it (the shim passes it when the collector cannot
        /// outlive the program: PID 1 of a PID namespace, or a child of an init that exits
        /// with it).
        #[arg(long)]
        hold_exit: bool,
    },
}

/// What `gpushim kernel` does.
#[derive(Debug, Subcommand)]
enum KernelAction {
    /// Write a kernel spec (kernel.json) that starts ipykernel with libgpushim.so preloaded.
    Install {
        /// The kernel's name (its directory under kernels/).
        #[arg(long, default_value = "gpushim")]
        name: String,
        /// The name Jupyter shows.
        #[arg(long, value_name = "TEXT")]
        display_name: Option<String>,
        /// Install for this user (the default): $JUPYTER_DATA_DIR, else ~/.local/share/jupyter.
        #[arg(long, conflicts_with = "prefix")]
        user: bool,
        /// Install into PREFIX/share/jupyter (e.g. a virtual environment's prefix).
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<PathBuf>,
        /// The Python that runs ipykernel (default: python3 on PATH).
        #[arg(long, value_name = "PATH")]
        python: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if collector::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            let code = collector::exit_code(&err);
            let _ = writeln!(io::stderr(), "gpushim: {err:#}");
            ExitCode::from(code)
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run { output, fail_on_leak, command } => {
            let fail_on_leak = match fail_on_leak.as_deref() {
                None => None,
                Some("") => Some(None),
                Some(v) => Some(Some(collector::parse_bytes(v).ok_or_else(|| {
                    collector::coded(
                        collector::USAGE,
                        format!("--fail-on-leak={v}: not a number of bytes (like 16MiB)"),
                    )
                })?)),
            };
            collector::run(&collector::RunOptions { output, command, fail_on_leak })
        }
        Command::Report { file, format, output, top, depth, all_frames } => {
            collector::report(&file, format, output.as_deref(), TextOptions { top, depth, all_frames })
        }
        Command::Diff { old, new, top, format } => collector::diff(&old, &new, top, format),
        Command::Snapshot { pid, signal, timeout } => collector::snapshot(pid, signal, timeout),
        Command::Top { target, once, json, window } => {
            collector::top(&collector::TopOptions { target, once, json, window })
        }
        Command::Demo { output } => collector::demo(&collector::DemoOptions { output }),
        Command::PreloadPath => collector::preload_path(),
        Command::Collect { input, output, hold_exit, .. } => collector::collect(input, output, hold_exit),
        Command::Kernel { action: KernelAction::Install { name, display_name, user: _, prefix, python } } => {
            let place = prefix.map_or(collector::KernelPlace::User, collector::KernelPlace::Prefix);
            collector::install_kernel(&collector::KernelOptions { name, display_name, place, python })
        }
    }
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
            Command::Run { output, command, fail_on_leak } => {
                assert_eq!(output, Some(PathBuf::from("/tmp")));
                assert_eq!(command, vec!["python", "-c", "x"]);
                assert_eq!(fail_on_leak, None);
            }
            c => panic!("{c:?}"),
        }
        // `--fail-on-leak` alone, and with a size; the program's own options stay its own.
        for (args, want) in [(vec!["--fail-on-leak"], Some("")), (vec!["--fail-on-leak=16MiB"], Some("16MiB"))] {
            let mut all = vec!["gpushim", "run"];
            all.extend(args);
            all.extend(["--", "prog", "--fail-on-leak"]);
            match Cli::try_parse_from(all).unwrap().command {
                Command::Run { fail_on_leak, command, .. } => {
                    assert_eq!(fail_on_leak.as_deref(), want);
                    assert_eq!(command, vec!["prog", "--fail-on-leak"]);
                }
                c => panic!("{c:?}"),
            }
        }
        assert!(Cli::try_parse_from(["gpushim", "snapshot", "0"]).is_err(), "pid 0 would signal a group");
        assert!(Cli::try_parse_from(["gpushim", "collect"]).is_ok());
        assert!(matches!(Cli::try_parse_from(["gpushim", "preload-path"]).unwrap().command, Command::PreloadPath));
        match Cli::try_parse_from(["gpushim", "top", "42", "--once", "--window", "30"]).unwrap().command {
            Command::Top { target, once, json, window } => {
                assert_eq!((target.as_str(), once, json, window), ("42", true, false, 30.0))
            }
            c => panic!("{c:?}"),
        }
        assert!(Cli::try_parse_from(["gpushim", "top", "42", "--once", "--json"]).is_err());
        match Cli::try_parse_from(["gpushim", "demo", "-o", "d"]).unwrap().command {
            Command::Demo { output } => assert_eq!(output, Some(PathBuf::from("d"))),
            c => panic!("{c:?}"),
        }
    }

    /// `gpushim report FILE --format F -o OUT` for every format, and `gpushim diff --format
    /// json`, reach their commands with those values (what the commands then write is tested
    /// in the library, `cmd::report`).
    #[test]
    fn report_and_diff_take_their_format_and_output() {
        for (format, want) in [
            ("text", Format::Text),
            ("json", Format::Json),
            ("folded", Format::Folded),
            ("svg", Format::Svg),
            ("perfetto", Format::Perfetto),
            ("html", Format::Html),
            ("torch-snapshot", Format::TorchSnapshot),
        ] {
            match Cli::try_parse_from(["gpushim", "report", "r.json", "--format", format, "-o", "out"]).unwrap().command
            {
                Command::Report { file, format, output, top, depth, all_frames } => {
                    assert_eq!((file, format, output), (PathBuf::from("r.json"), want, Some(PathBuf::from("out"))));
                    assert_eq!(TextOptions { top, depth, all_frames }, TextOptions::default());
                }
                c => panic!("{c:?}"),
            }
        }
        assert!(Cli::try_parse_from(["gpushim", "diff", "a.json", "b.json", "--format", "json"]).is_ok());
        assert!(Cli::try_parse_from(["gpushim", "diff", "a.json", "b.json", "--format", "html"]).is_ok());
    }

    #[test]
    fn kernel_install_takes_user_or_prefix() {
        let cli = Cli::try_parse_from(["gpushim", "kernel", "install", "--name", "k", "--prefix", "/p"]).unwrap();
        match cli.command {
            Command::Kernel { action: KernelAction::Install { name, prefix, user, .. } } => {
                assert_eq!((name.as_str(), prefix, user), ("k", Some(PathBuf::from("/p")), false));
            }
            c => panic!("{c:?}"),
        }
        assert!(Cli::try_parse_from(["gpushim", "kernel", "install", "--user", "--prefix", "/p"]).is_err());
    }

    #[test]
    fn collect_reads_stdin_for_a_dash() {
        match Cli::try_parse_from(["gpushim", "collect", "--input", "-"]).unwrap().command {
            Command::Collect { input, .. } => assert_eq!(input, Some(PathBuf::from("-"))),
            c => panic!("{c:?}"),
        }
    }
}
