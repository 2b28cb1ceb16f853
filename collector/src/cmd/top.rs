//! `gpushim top PID`: the live view of a traced program's GPU memory, read from its collector's
//! control endpoint ([`crate::control`]), never from the program. `--once` prints one text
//! frame (its words: [`super::top_text`]), `--json` one JSON frame; otherwise the full-screen
//! view ([`super::top_view`]). On the pid of `gpushim run` (or any launcher) whose traced
//! processes are several, a job: one row per process first.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::snapshot::{collectors, descendants, has_shim};
use super::top_text::{failure, job_text, text, Sort};
use crate::control::client;
use crate::control::frame::{Frame, VERSION};
use crate::error::{coded, OK, USAGE};

/// The `format` of `--json` on a job.
pub const JOB_FORMAT: &str = "gpushim-top-job";

/// What `gpushim top` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The traced program's pid, or that of `gpushim run` (or a shell) holding it, or a job's
    /// output directory.
    pub target: String,
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
    let (watched, name) = match opts.target.parse::<i64>() {
        Ok(pid) => {
            let pid = i32::try_from(pid)
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| coded(USAGE, format!("{pid} is no process id (1 or more)")))?;
            (traced(pid)?, format!("pid {pid}"))
        }
        Err(_) => {
            let dir = Path::new(&opts.target);
            (in_dir(dir)?, dir.display().to_string())
        }
    };
    match watched {
        Watched::One(pid) => one(pid, opts),
        Watched::Job(pids) => job(&name, &pids, opts),
    }
}

/// `gpushim top` of one process.
fn one(pid: u32, opts: &Options) -> Result<ExitCode> {
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
    super::top_view::run(&[pid], opts.window)
}

/// `gpushim top` of a job: `name` (`pid N`, a directory) holds the traced processes `pids`.
fn job(name: &str, pids: &[u32], opts: &Options) -> Result<ExitCode> {
    if !(opts.json || opts.once) {
        return super::top_view::run(pids, opts.window);
    }
    let frames: Vec<Result<Frame, String>> =
        pids.iter().map(|&p| client::frame(p, opts.window).map_err(|f| format!("{}", failure(p, f)))).collect();
    let mut out = std::io::stdout().lock();
    if opts.json {
        let ok: Vec<&Frame> = frames.iter().flatten().collect();
        let doc = serde_json::json!({ "format": JOB_FORMAT, "version": VERSION, "of": name, "frames": ok });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        write!(out, "{}", job_text(name, &frames))?;
    }
    Ok(ExitCode::from(OK))
}

/// What a pid given to `gpushim top` names.
enum Watched {
    /// A traced process.
    One(u32),
    /// Several, below a launcher (`gpushim run`'s pid).
    Job(Vec<u32>),
}

/// What `pid` names: itself when its collector answers, else the processes below it whose
/// collectors answer (`gpushim run`'s pid: its program, or a job's processes).
fn traced(pid: i32) -> Result<Watched> {
    let proc_dir = format!("/proc/{pid}");
    if !Path::new(&proc_dir).exists() {
        return Err(coded(USAGE, format!("no process {pid}")));
    }
    let answers = |p: i32| client::request(p as u32, "frame 1 1", Duration::from_secs(10)).is_ok();
    if answers(pid) {
        return Ok(Watched::One(pid as u32));
    }
    let below = descendants(pid);
    let traced: Vec<u32> = below.iter().copied().filter(|&p| answers(p)).map(|p| p as u32).collect();
    match traced.as_slice() {
        [one] => Ok(Watched::One(*one)),
        [] if has_shim(pid) == Some(true) => Err(coded(USAGE, no_collector(pid as u32))),
        [] if below.iter().any(|&p| has_shim(p) == Some(true)) => Err(coded(
            USAGE,
            format!(
                "pid {pid} runs processes under gpushim but no collector answers for any: they have made no CUDA \
                 allocation yet, or their collectors ended"
            ),
        )),
        [] => Err(coded(
            USAGE,
            format!("pid {pid} is not running under gpushim (libgpushim.so is not loaded), nor is any child of it"),
        )),
        _ => Ok(Watched::Job(traced)),
    }
}

/// The processes whose collectors write into `dir` and answer.
fn in_dir(dir: &Path) -> Result<Watched> {
    let want = std::fs::canonicalize(dir)
        .map_err(|e| coded(USAGE, format!("{}: neither a process id nor a directory ({e})", dir.display())))?;
    let answers = |p: i32| client::request(p as u32, "frame 1 1", Duration::from_secs(10)).is_ok();
    let mut pids: Vec<u32> = collectors()
        .into_iter()
        .filter(|(_, out)| std::fs::canonicalize(out).is_ok_and(|o| o == want))
        .map(|(p, _)| p)
        .filter(|&p| answers(p))
        .map(|p| p as u32)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    match pids.as_slice() {
        [] => Err(coded(USAGE, format!("no running collector writes reports into {}", dir.display()))),
        [one] => Ok(Watched::One(*one)),
        _ => Ok(Watched::Job(pids)),
    }
}

fn no_collector(pid: u32) -> String {
    format!(
        "pid {pid} runs under gpushim but no collector answers for it: it has made no CUDA allocation yet, \
         or its collector ended"
    )
}
