//! `gpushim top PID`: the live view of a traced program's GPU memory, read from its collector's
//! control endpoint ([`crate::control`]), never from the program. `--once` prints one text
//! frame (its words: [`super::top_text`]), `--json` one JSON frame; otherwise the full-screen
//! view ([`super::top_view`]).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use super::snapshot::{has_shim, traced_children};
use super::top_text::{failure, text, Sort};
use crate::control::client;
use crate::error::{coded, OK, USAGE};

/// What `gpushim top` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The traced program's pid, or that of `gpushim run` (or a shell) holding it.
    pub pid: i32,
    /// Print one text frame and exit.
    pub once: bool,
    /// Print one JSON frame and exit.
    pub json: bool,
    /// Growth window, seconds.
    pub window: f64,
}

/// Runs `gpushim top`.
///
/// # Errors
/// Exit code 2 with one line: a window that is not a number of seconds above 0, a pid that is
/// no process or not traced, a collector that is not listening or is gone.
pub fn run(opts: &Options) -> Result<ExitCode> {
    if !(opts.window.is_finite() && opts.window > 0.0) {
        return Err(coded(USAGE, format!("--window {}: a number of seconds above 0", opts.window)));
    }
    let pid = traced(opts.pid)?;
    if opts.json || opts.once {
        let frame = client::frame(pid, opts.window).map_err(|f| failure(pid, f))?;
        let mut out = std::io::stdout().lock();
        if opts.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&frame)?)?;
        } else {
            write!(out, "{}", text(&frame, Sort::Live, usize::MAX))?;
        }
        return Ok(ExitCode::from(OK));
    }
    super::top_view::run(pid, opts.window)
}

/// The traced process that `pid` names: itself when its collector answers, else its one
/// traced child (`gpushim run`'s pid).
fn traced(pid: i32) -> Result<u32> {
    let proc_dir = format!("/proc/{pid}");
    if !Path::new(&proc_dir).exists() {
        return Err(coded(USAGE, format!("no process {pid}")));
    }
    let me = pid as u32;
    if client::request(me, "frame 1 1", std::time::Duration::from_secs(10)).is_ok() {
        return Ok(me);
    }
    match has_shim(pid) {
        Some(true) => Err(coded(USAGE, no_collector(me))),
        _ => match traced_children(pid).as_slice() {
            [] => Err(coded(
                USAGE,
                format!("pid {pid} is not running under gpushim (libgpushim.so is not loaded), nor is any child of it"),
            )),
            [child] => Ok(*child as u32),
            many => Err(coded(
                USAGE,
                format!(
                    "pid {pid} runs {} traced processes ({}): give one of their pids",
                    many.len(),
                    many.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
                ),
            )),
        },
    }
}

fn no_collector(pid: u32) -> String {
    format!(
        "pid {pid} runs under gpushim but no collector answers for it: it has made no CUDA allocation yet, \
         or its collector ended"
    )
}
