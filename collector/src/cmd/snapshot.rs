//! `gpushim snapshot PID`: asks a traced process for a snapshot, waits for the file and prints
//! its path.
//!
//! The shim turns the signal into a snapshot request in its event stream; the collector
//! writes `gpushim-PID-snapshot-N.json` into the target's output directory (its
//! `GPUSHIM_OUTPUT`, else its working directory). This command sends the signal, then checks
//! that directory every 50 ms until a new snapshot file appears or the timeout passes. Files
//! appear whole (they are hard-linked into place once written).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::error::{coded, USAGE};

/// How often the output directory is checked.
const POLL: Duration = Duration::from_millis(50);
/// The longest wait for the collector to say it asked the shim for a snapshot.
const ASK_WAIT: Duration = Duration::from_secs(5);
/// How long a collector whose endpoint does not listen yet is asked again before the signal.
const ASK_RETRY: Duration = Duration::from_secs(2);

/// The signals the shim can listen to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Signal {
    /// SIGUSR1 (the shim's default).
    #[value(name = "USR1", alias = "usr1", alias = "SIGUSR1")]
    Usr1,
    /// SIGUSR2.
    #[value(name = "USR2", alias = "usr2", alias = "SIGUSR2")]
    Usr2,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Usr1 => libc::SIGUSR1,
            Signal::Usr2 => libc::SIGUSR2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Signal::Usr1 => "SIGUSR1",
            Signal::Usr2 => "SIGUSR2",
        }
    }
}

/// Asks `pid` for a snapshot with `signal`, waits up to `timeout` seconds for its file and
/// prints the file's path on standard output.
///
/// # Errors
/// Exit code 2 if `timeout` is not a number of seconds >= 0; otherwise those of [`snapshot`].
pub fn run(pid: i32, signal: Option<Signal>, timeout: f64) -> Result<ExitCode> {
    let Ok(timeout) = Duration::try_from_secs_f64(timeout) else {
        return Err(coded(USAGE, format!("--timeout {timeout} is not a number of seconds from 0 to 10^19")));
    };
    // A launcher (`gpushim run`, a shell, torchrun) with several traced processes below it
    // that have collectors: a snapshot of each.
    let job = job_below(pid);
    if job.len() > 1 {
        let list: Vec<String> = job.iter().map(|p| p.to_string()).collect();
        eprintln!("gpushim: pid {pid} runs {} traced processes ({}); a snapshot of each", job.len(), list.join(", "));
    }
    let mut out = io::stdout().lock();
    for p in if job.len() > 1 { job } else { vec![pid] } {
        let path = snapshot(p, signal, timeout)?;
        writeln!(out, "{}", path.display())?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The processes below `pid` whose collectors run, when `pid` itself has none: a job's (most
/// [`MAX_DESCENDANTS`] processes looked at).
fn job_below(pid: i32) -> Vec<i32> {
    if collector_output(pid).is_some() {
        return Vec::new();
    }
    let running: HashSet<i32> = collectors().into_iter().map(|c| c.0).collect();
    descendants(pid).into_iter().filter(|p| running.contains(p)).collect()
}

/// Sends `signal` (by default the one the program's shim listens to: its `GPUSHIM_SIGNAL`) to
/// `pid` and returns the path of the snapshot file that appears within `timeout`.
///
/// # Errors
/// Exit code 2 with a one-line reason if there is no such process, it cannot be signalled, it
/// does not have the shim loaded (the signal would kill it), its snapshots are off
/// (`GPUSHIM_SIGNAL=none`), its output directory cannot be found or read, or no snapshot
/// appears in time.
pub fn snapshot(pid: i32, signal: Option<Signal>, timeout: Duration) -> Result<PathBuf> {
    send(pid, 0)?;
    let mut pid = pid;
    if !has_shim(pid).unwrap_or(true) || Inside::of(pid).collector_output().is_none() {
        // `gpushim run` (or a shell) holds the traced program below it: follow it.
        let below = job_below(pid);
        let follow = match below.as_slice() {
            [one] => Some(*one),
            [] if !has_shim(pid).unwrap_or(true) => match traced_children(pid).as_slice() {
                [child] => Some(*child),
                _ => None,
            },
            _ => None,
        };
        if let Some(child) = follow {
            eprintln!("gpushim: pid {pid} runs pid {child} under gpushim; snapshotting pid {child}");
            pid = child;
        }
    }
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    // A program in a PID namespace of its own (a container) names its files, and its collector
    // names it, by the pid it has there; its paths are under its own root.
    let inside = Inside::of(pid);
    // The shim listens to the signal its GPUSHIM_SIGNAL names (read when it loaded, so the
    // program's starting environment); any other signal would take its default action.
    let signal = match (signal, signal_setting(&proc_dir)) {
        (Some(s), _) => s,
        (None, Setting::Off) => {
            return Err(coded(
                USAGE,
                format!("pid {pid} runs with GPUSHIM_SIGNAL=none: it takes no snapshots (a signal would kill it)"),
            ))
        }
        (None, Setting::Signal(s)) => s,
    };
    if fs::read_to_string(proc_dir.join("status")).is_ok_and(|st| ignores(&st, signal.number())) {
        return Err(coded(
            USAGE,
            format!(
                "pid {pid} ignores {} (it started with it ignored, so the shim left it so): it takes no \
                 snapshots; start it with GPUSHIM_SIGNAL=USR2",
                signal.name()
            ),
        ));
    }
    if let Ok(maps) = fs::read_to_string(proc_dir.join("maps")) {
        if !maps.contains("libgpushim") {
            return Err(coded(
                USAGE,
                format!(
                    "pid {pid} is not running under gpushim (libgpushim.so is not loaded), and {} \
                     would likely kill it; start it with `gpushim run -- CMD`",
                    signal.name()
                ),
            ));
        }
    }
    // The shim starts its collector (`gpushim collect ... --pid PID`) at the first CUDA
    // allocation: without one there is nothing to take a snapshot of.
    if inside.collector_output().is_none() {
        return Err(coded(
            USAGE,
            format!(
                "pid {pid} runs under gpushim but has no collector: it has made no CUDA allocation yet \
                 (or its collector ended), so there is nothing to snapshot"
            ),
        ));
    }
    let dir = output_dir(&proc_dir, &inside)
        .map_err(|e| coded(USAGE, format!("cannot find where pid {pid} writes reports: {e:#}")))?;
    // Where the collector may write: the output directory, else (when it cannot write there)
    // the target's $TMPDIR, then /tmp, as `output.rs` falls back.
    let mut dirs = vec![dir.clone()];
    for fallback in
        [env_value(&proc_dir, b"TMPDIR").map(PathBuf::from), Some(PathBuf::from("/tmp"))].into_iter().flatten()
    {
        let fallback = inside.path(fallback);
        if fallback.is_absolute() && !dirs.contains(&fallback) {
            dirs.push(fallback);
        }
    }
    let named = inside.pid;
    let before = snapshot_names(&dir, named)
        .map_err(|e| coded(USAGE, format!("cannot read the output directory {} of pid {pid}: {e}", dir.display())))?;
    let before: Vec<HashSet<OsString>> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| if i == 0 { before.clone() } else { snapshot_names(d, pid).unwrap_or_default() })
        .collect();
    // The collector asks the shim, which takes the snapshot as its signal would: the program's
    // own handler of the signal, if it installed one after ours, never runs. A collector from
    // before that request, or none reachable here, leaves the signal.
    // The collector's endpoint may not listen yet just after the program's first allocation
    // started it: asked again for ASK_RETRY.
    let ask_until = Instant::now() + ASK_RETRY;
    let asked = loop {
        match crate::control::client::ask_snapshot(named as u32, inside.collector_pid(), ASK_WAIT) {
            Some(asked) => break asked,
            None if Instant::now() < ask_until => thread::sleep(POLL),
            None => break false,
        }
    };
    if !asked {
        send(pid, signal.number())?;
    }
    let deadline = Instant::now() + timeout;
    loop {
        for (d, seen) in dirs.iter().zip(&before) {
            if let Ok(now) = snapshot_names(d, named) {
                if let Some(new) = now.difference(seen).min() {
                    return Ok(d.join(new));
                }
            }
        }
        if Instant::now() >= deadline {
            let gone = if send(pid, 0).is_err() { " (the process has ended)" } else { "" };
            return Err(coded(
                USAGE,
                format!(
                    "no snapshot of pid {pid} appeared in {} within {:.1} s{gone}",
                    dir.display(),
                    timeout.as_secs_f64()
                ),
            ));
        }
        thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// Most processes looked at below a launcher.
pub(super) const MAX_DESCENDANTS: usize = 4096;

/// The processes below `pid` (children first), at most [`MAX_DESCENDANTS`].
pub(super) fn descendants(pid: i32) -> Vec<i32> {
    let mut out: Vec<i32> = Vec::new();
    let mut next = 0;
    let mut at = pid;
    loop {
        for c in children(at) {
            if out.len() < MAX_DESCENDANTS && c != pid && !out.contains(&c) {
                out.push(c);
            }
        }
        let Some(&p) = out.get(next) else { return out };
        next += 1;
        at = p;
    }
}

/// Whether `pid` has libgpushim.so mapped; `None` if its maps cannot be read.
pub(super) fn has_shim(pid: i32) -> Option<bool> {
    fs::read_to_string(format!("/proc/{pid}/maps")).ok().map(|m| m.contains("libgpushim"))
}

/// The direct children of `pid` (from `/proc/PID/task/*/children`) that have the shim loaded.
pub(super) fn traced_children(pid: i32) -> Vec<i32> {
    children(pid).into_iter().filter(|&c| has_shim(c) == Some(true)).collect()
}

/// The direct children of `pid` (from `/proc/PID/task/*/children`).
pub(super) fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for t in tasks.flatten() {
        let Ok(list) = fs::read_to_string(t.path().join("children")) else { continue };
        for c in list.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// `kill(pid, sig)` with errors in words (sig 0 only checks).
fn send(pid: i32, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill has no memory-safety preconditions; pid > 0 names one process.
    if unsafe { libc::kill(pid, sig) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ESRCH) => coded(USAGE, format!("no process with pid {pid}")),
        Some(libc::EPERM) => coded(USAGE, format!("not allowed to signal pid {pid} (it belongs to another user)")),
        _ => coded(USAGE, format!("cannot signal pid {pid}: {e}")),
    })
}

/// What the target's `GPUSHIM_SIGNAL` asks of its shim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setting {
    /// Snapshots on this signal.
    Signal(Signal),
    /// `none`: no signal handler.
    Off,
}

/// The target's `GPUSHIM_SIGNAL`, read from its environment as the shim reads it (case
/// insensitive, with or without `SIG`; unset, empty, unknown or unreadable: USR1).
fn signal_setting(proc_dir: &Path) -> Setting {
    let value = env_value(proc_dir, b"GPUSHIM_SIGNAL").map(|v| v.as_bytes().to_ascii_uppercase());
    match value.as_deref() {
        Some(b"USR2") | Some(b"SIGUSR2") => Setting::Signal(Signal::Usr2),
        Some(b"NONE") => Setting::Off,
        _ => Setting::Signal(Signal::Usr1),
    }
}

/// The value of `name` in the target's environment (`/proc/PID/environ`), if set and not empty.
fn env_value(proc_dir: &Path, name: &[u8]) -> Option<OsString> {
    let env = fs::read(proc_dir.join("environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        kv.strip_prefix(name)
            .and_then(|v| v.strip_prefix(b"="))
            .filter(|v| !v.is_empty())
            .map(|v| OsString::from_vec(v.to_vec()))
    })
}

/// A traced process as its collector and its files know it: by the pid it has in its own PID
/// namespace, under its own root.
struct Inside {
    /// Its pid in our PID namespace.
    ours: i32,
    /// Its pid in its own (the innermost) PID namespace: `ours` when that is ours.
    pid: i32,
    /// Whether its PID namespace is another than ours.
    other: bool,
}

impl Inside {
    /// `pid` (ours) as it knows itself: the last pid of its status's `NSpid` line, when its
    /// PID namespace (`/proc/PID/ns/pid`) is not ours.
    fn of(pid: i32) -> Inside {
        let ns = |p: &str| fs::read_link(format!("/proc/{p}/ns/pid")).ok();
        let mine = ns("self");
        let theirs = ns(&pid.to_string());
        let other = mine.is_some() && theirs.is_some() && mine != theirs;
        let inner = other
            .then(|| fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .flatten()
            .and_then(|st| nspid_innermost(&st));
        Inside { ours: pid, pid: inner.unwrap_or(pid), other: other && inner.is_some() }
    }

    /// `path` as the process sees it, as we can reach it: through `/proc/PID/root` when it
    /// lives in another PID namespace (a container has its own root as a rule).
    fn path(&self, path: PathBuf) -> PathBuf {
        if !self.other || !path.is_absolute() {
            return path;
        }
        let mut p = PathBuf::from(format!("/proc/{}/root", self.ours));
        p.extend(path.components().skip(1));
        p
    }

    /// Its collector's own pid as we see it, when it lives in another PID namespace (where
    /// the endpoint's name, which holds the pid there, is not unique).
    fn collector_pid(&self) -> Option<i32> {
        self.collector_there().map(|c| c.0)
    }

    /// The `--output` of its running collector, reachable from here: a collector that names
    /// its pid (`--pid`) and lives in its PID namespace.
    fn collector_output(&self) -> Option<PathBuf> {
        if !self.other {
            return collector_output(self.pid);
        }
        self.collector_there().map(|c| self.path(c.1))
    }

    /// When it lives in another PID namespace: the collector there that names its pid, as
    /// `(collector's pid, --output)`.
    fn collector_there(&self) -> Option<(i32, PathBuf)> {
        if !self.other {
            return None;
        }
        let ns = |p: i32| fs::read_link(format!("/proc/{p}/ns/pid")).ok();
        let theirs = ns(self.ours)?;
        collectors_named()
            .into_iter()
            .find(|c| c.1 == self.pid && ns(c.0).as_ref() == Some(&theirs))
            .map(|(own, _, dir)| (own, dir))
    }
}

/// The innermost pid of a `/proc/PID/status` text's `NSpid` line (its last field).
fn nspid_innermost(status: &str) -> Option<i32> {
    status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

/// The target's report directory, as we reach it: the one its collector was started with
/// (`gpushim collect --output DIR --pid PID` on the collector's command line), else
/// `GPUSHIM_OUTPUT` from the target's environment (relative to its working directory), else its
/// working directory. The first holds when the program changed its working directory after
/// tracing started.
fn output_dir(proc_dir: &Path, inside: &Inside) -> Result<PathBuf> {
    if let Some(dir) = inside.collector_output() {
        return Ok(dir);
    }
    let cwd = fs::read_link(proc_dir.join("cwd"));
    if let Some(dir) = env_value(proc_dir, b"GPUSHIM_OUTPUT").map(PathBuf::from) {
        if dir.is_absolute() {
            return Ok(inside.path(dir));
        }
        let cwd = cwd.with_context(|| format!("reading {}/cwd", proc_dir.display()))?;
        return Ok(inside.path(cwd.join(dir)));
    }
    cwd.map(|c| inside.path(c)).with_context(|| format!("reading {}/cwd", proc_dir.display()))
}

/// The `--output` of the running `gpushim collect` whose `--pid` is `pid`, if any.
fn collector_output(pid: i32) -> Option<PathBuf> {
    collectors().into_iter().find(|c| c.0 == pid).map(|c| c.1)
}

/// Every running `gpushim collect` that names its traced pid and output directory (`--pid PID
/// --output DIR` on its command line, as the shim starts it): `(PID, DIR)`.
pub(super) fn collectors() -> Vec<(i32, PathBuf)> {
    collectors_named().into_iter().map(|(_, pid, dir)| (pid, dir)).collect()
}

/// [`collectors`], each with the collector's own pid first: `(collector, PID, DIR)`.
fn collectors_named() -> Vec<(i32, i32, PathBuf)> {
    let mut out = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else { return out };
    for entry in procs.flatten() {
        let name = entry.file_name();
        if !name.as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if args.get(1) != Some(&&b"collect"[..]) {
            continue;
        }
        let value = |flag: &[u8]| args.windows(2).find(|w| w[0] == flag).map(|w| w[1]);
        let pid = value(b"--pid").and_then(|p| std::str::from_utf8(p).ok()?.parse::<i32>().ok());
        let own = name.to_str().and_then(|n| n.parse::<i32>().ok());
        if let (Some(own), Some(pid), Some(dir)) = (own, pid, value(b"--output")) {
            out.push((own, pid, PathBuf::from(OsString::from_vec(dir.to_vec()))));
        }
    }
    out
}

/// Whether `/proc/PID/status` text `status` says the process ignores signal `sig` (its
/// `SigIgn` mask, hexadecimal, bit `sig - 1`; proc(5)).
fn ignores(status: &str, sig: libc::c_int) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0)
}

/// Names of the snapshot files of `pid` in `dir` (`gpushim-PID-snapshot-N.json`, or
/// `gpushim-rankR-PID-snapshot-N.json` for a process with a rank: `crate::explain::identity`), not
/// their companion files (heap walk, reachability scan).
fn snapshot_names(dir: &Path, pid: i32) -> io::Result<HashSet<OsString>> {
    let tail = format!("{pid}-snapshot-");
    let mut names = HashSet::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let s = name.to_string_lossy();
        let Some(rest) = s.strip_prefix("gpushim-") else { continue };
        let rest = match rest.strip_prefix("rank") {
            Some(r) => r.trim_start_matches(|c: char| c.is_ascii_digit()).strip_prefix('-').unwrap_or(""),
            None => rest,
        };
        // Not the companion files written beside a snapshot (`….holders.json`, `….reach.json`).
        let companion = rest.strip_prefix(&tail).is_some_and(|r| r.contains(".holders") || r.contains(".reach"));
        if rest.starts_with(&tail) && s.ends_with(".json") && !companion {
            names.insert(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::output::tests::TempDir;

    #[test]
    fn finds_only_this_pids_snapshot_reports_not_their_holders_files() {
        let d = TempDir::new("snap");
        for n in [
            "gpushim-5-snapshot-1.json",
            "gpushim-5-snapshot-1.holders.json",
            "gpushim-5-snapshot-2.1.json",
            "gpushim-55-snapshot-1.json",
            "gpushim-rank00003-5-snapshot-4.json",
            "gpushim-rank00003-55-snapshot-4.json",
            "gpushim-5.json",
            ".gpushim-5-snapshot-3.json.tmp-1",
            "gpushim-5-snapshot-1.holders.json",
            "gpushim-5-snapshot-1.reach.json",
            "gpushim-5-snapshot-2.1.holders.1.json",
        ] {
            fs::write(d.0.join(n), b"{}").unwrap();
        }
        let mut got: Vec<_> = snapshot_names(&d.0, 5).unwrap().into_iter().collect();
        got.sort();
        assert_eq!(
            got,
            vec!["gpushim-5-snapshot-1.json", "gpushim-5-snapshot-2.1.json", "gpushim-rank00003-5-snapshot-4.json"]
        );
    }

    #[test]
    fn the_innermost_pid_of_a_status_file() {
        assert_eq!(nspid_innermost("Name:\tx\nNSpid:\t4242\t17\t1\nNSsid:\t1\n"), Some(1));
        assert_eq!(nspid_innermost("NSpid:\t4242\n"), Some(4242));
        assert_eq!(nspid_innermost("Name:\tx\n"), None);
        let me = Inside::of(std::process::id() as i32);
        assert_eq!((me.pid, me.other), (std::process::id() as i32, false));
        assert_eq!(me.path(PathBuf::from("/a/b")), PathBuf::from("/a/b"));
        let there = Inside { ours: 7, pid: 1, other: true };
        assert_eq!(there.path(PathBuf::from("/a/b")), PathBuf::from("/proc/7/root/a/b"));
    }

    #[test]
    fn reads_the_ignored_signals_of_a_status_file() {
        let status = "Name:\tpython3\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000200\nSigCgt:\t0\n";
        assert!(ignores(status, libc::SIGUSR1)); // 10: bit 9
        assert!(!ignores(status, libc::SIGUSR2));
        assert!(!ignores("garbage", libc::SIGUSR1));
    }

    #[test]
    fn output_dir_of_this_process() {
        let me = PathBuf::from(format!("/proc/{}", std::process::id()));
        let dir = output_dir(&me, &Inside::of(std::process::id() as i32)).unwrap();
        match std::env::var_os("GPUSHIM_OUTPUT").filter(|v| !v.is_empty()) {
            None => assert_eq!(dir, std::env::current_dir().unwrap()),
            Some(_) => assert!(dir.is_absolute()),
        }
    }

    #[test]
    fn refuses_a_process_without_the_shim_and_a_missing_one() {
        // This test process has no libgpushim loaded: the signal would kill it.
        let e = snapshot(std::process::id() as i32, Some(Signal::Usr1), Duration::from_millis(10)).unwrap_err();
        assert!(e.to_string().contains("is not running under gpushim"), "{e}");
        let e = snapshot(i32::MAX, Some(Signal::Usr1), Duration::from_millis(10)).unwrap_err();
        assert_eq!(e.to_string(), format!("no process with pid {}", i32::MAX));
    }

    #[test]
    fn the_signal_follows_the_programs_gpushim_signal() {
        let dir = std::env::temp_dir().join(format!("gpushim-signal-setting-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let with = |env: &[u8]| {
            std::fs::write(dir.join("environ"), env).unwrap();
            signal_setting(&dir)
        };
        assert_eq!(with(b"A=1\0GPUSHIM_SIGNAL=usr2\0B=2\0"), Setting::Signal(Signal::Usr2));
        assert_eq!(with(b"GPUSHIM_SIGNAL=SIGUSR2\0"), Setting::Signal(Signal::Usr2));
        assert_eq!(with(b"GPUSHIM_SIGNAL=None\0"), Setting::Off);
        assert_eq!(with(b"GPUSHIM_SIGNAL=bogus\0"), Setting::Signal(Signal::Usr1), "the shim uses USR1 then");
        assert_eq!(with(b"PATH=/bin\0"), Setting::Signal(Signal::Usr1));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(signal_setting(&dir), Setting::Signal(Signal::Usr1), "unreadable");
    }
}
