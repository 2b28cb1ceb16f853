//! `gpushim run -- CMD ARGS…`: runs a program with `libgpushim.so` preloaded.
//!
//! The shim in the program spawns `gpushim collect` itself (found through
//! `GPUSHIM_COLLECTOR`), so this command only sets the environment, waits, and passes the
//! program's exit status on, as `timeout(1)` does: the program's exit code, or, when a signal
//! ended it, the same signal (re-raised on `gpushim run`, so a shell sees a signal death).
//! SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to `gpushim run` alone are passed
//! on to the program (a snapshot asked of the wrapper's pid, a `kill` of it), which it then
//! waits for as usual; the same signals sent by the terminal to the whole process group (a
//! Ctrl-C) are not, since the program got them already (`signals::meant_for_the_wrapper`).
//!
//! So that the report exists when `gpushim run` returns, the program inherits the write end
//! of a pipe, named in `GPUSHIM_RUN_FD`: the shim keeps it in the collector it starts and
//! marks it close-on-exec in the program (so the programs it runs do not hold it); after the
//! program exits, `run` waits until every holder has closed it, i.e. the collector has
//! finished, for at most [`COLLECTOR_WAIT`].
//!
//! So that `run` can say when the run made no CUDA allocation (no collector, no report), every
//! collector started under it, also those of the program's own children (which do not hold the
//! pipe), writes one byte into the same pipe at its start: `GPUSHIM_RUN_NOTIFY` names it as
//! `PATH:DEV:INODE`, a named pipe in a private directory (`run_pipe`; else the read end as
//! `/proc/PID/fd/N`), reopened for writing after its identity is checked
//! ([`tell_run_a_collector_started`]). The message comes from `run` alone, never from the
//! library in the program. Each collector holds that write end until its report is written, then
//! sends the report's path ([`tell_run_the_report`]): so `run` waits for the reports of the whole
//! process tree (forked workers, ranks of a launcher) and, when there are several, prints one
//! job summary (`crate::compare::job`).
//!
//! The collectors write their lines (the exit summary) on `run`'s own stderr, not on the
//! program's fd 2, which the program may have pointed elsewhere by its first allocation
//! (pytest captures it): the program inherits a copy of `run`'s stderr, named in
//! `GPUSHIM_RUN_STDERR` (`fd:dev:inode`), and the shim makes it the collector's stderr.

use std::env;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::signals::{block, die_of, forward, ignore, restore, unblock};
use crate::error::{coded, CANNOT_EXECUTE, NOT_FOUND, SIGNALLED, USAGE};

/// Longest wait, after the program exits, for its collector to finish writing the report.
pub const COLLECTOR_WAIT: Duration = Duration::from_secs(60);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Directory for reports (`GPUSHIM_OUTPUT`); the program's working directory if `None`.
    pub output: Option<std::path::PathBuf>,
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// `--fail-on-leak`: `Some(None)` fails on suspects, `Some(Some(b))` also on more than `b`
    /// live bytes at exit.
    pub fail_on_leak: Option<Option<u64>>,
}

/// A size in bytes as a person writes it: `4096`, `16MiB`, `1.5 GiB`, `64k` (binary units;
/// `B`, `K`/`KiB`/`KB`, `M`/`MiB`/`MB`, `G`/`GiB`/`GB`, `T`/`TiB`/`TB`, any case). `None`
/// if it is not one.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    let v = n * (1u64 << shift) as f64;
    (n.is_finite() && (0.0..1.8e19).contains(&v)).then_some(v as u64)
}

/// The leak check of `--fail-on-leak` on the job's final reports: every one a collector named
/// in `reports` (the program's, and those of the traced processes below it: a shell or a
/// launcher in between, `unshare`, torchrun's workers), and `gpushim-PID.json` in `dir` for the
/// program `pid` when no collector named its report. Lines saying why it failed, one per report
/// that fails, or `None` when all passed (no report: no CUDA memory, nothing leaked).
fn leak_check(dir: &Path, reports: &[std::path::PathBuf], pid: u32, limit: Option<u64>) -> Option<String> {
    let mut paths: Vec<std::path::PathBuf> = reports.to_vec();
    let named = |p: &std::path::PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(crate::explain::identity::final_report_name)
            .is_some_and(|(p, _)| p == pid)
    };
    if !paths.iter().any(named) {
        paths.push(dir.join(format!("gpushim-{pid}.json")));
    }
    let mut lines = Vec::new();
    for path in paths {
        let Ok(r) = crate::report::Report::read(&path) else { continue };
        let mut why = Vec::new();
        if !r.suspects.is_empty() {
            why.push(format!("{} leak suspect{}", r.suspects.len(), if r.suspects.len() == 1 { "" } else { "s" }));
        }
        if let Some(max) = limit.filter(|&m| r.totals.gauge.live_bytes > m) {
            why.push(format!(
                "{} live at exit, over --fail-on-leak={}",
                crate::report::words::fmt_bytes(r.totals.gauge.live_bytes),
                crate::report::words::fmt_bytes(max)
            ));
        }
        if !why.is_empty() {
            lines.push(format!("gpushim: leak check failed: {} ({})", why.join("; "), path.display()));
        }
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// Runs the program and returns its exit status as ours. If a signal ended it, this process
/// dies of the same signal once the report is written (as `timeout(1)` does); 128 + the
/// signal number is returned only if that signal does not end it.
///
/// # Errors
/// Exit code 2 if `libgpushim.so` is not found ([`super::preload::library`]) or the output directory
/// does not exist; 127 if the program is not found; 126 if it cannot be executed.
pub fn run(opts: &Options) -> Result<ExitCode> {
    let exe = env::current_exe().context("cannot find the path of the gpushim executable")?;
    let lib = super::preload::library()?;
    let Some((prog, args)) = opts.command.split_first() else {
        return Err(coded(USAGE, "no command given; usage: gpushim run [--output DIR] -- CMD ARGS..."));
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env("LD_PRELOAD", preload_value(lib.as_os_str(), env::var_os("LD_PRELOAD").as_deref()))
        .env("GPUSHIM_COLLECTOR", &exe);
    if let Some(dir) = &opts.output {
        let abs =
            std::path::absolute(dir).with_context(|| format!("cannot resolve output directory {}", dir.display()))?;
        // A directory that does not exist yet is made, as `mkdir -p` would (`-o reports` in the
        // README's commands); one that cannot be made is said in one line.
        let made = match std::fs::metadata(&abs) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir_all(&abs),
            _ => Ok(()),
        };
        match made.and_then(|()| std::fs::metadata(&abs)) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(coded(
                    USAGE,
                    format!("output directory {}: not a directory; choose another --output", dir.display()),
                ))
            }
            Err(e) => {
                return Err(coded(
                    USAGE,
                    format!(
                        "output directory {}: cannot make it: {}; choose another --output",
                        dir.display(),
                        crate::error::file_cause(&e)
                    ),
                ))
            }
        }
        cmd.env("GPUSHIM_OUTPUT", abs);
    }

    let mut run_pipe = super::run_pipe::RunPipe::new().context("cannot create a pipe")?;
    let (Some(done_read), Some(done_write)) = (run_pipe.read.take(), run_pipe.write.take()) else {
        unreachable!("a new pipe has both ends")
    };
    let write_fd = done_write.as_raw_fd();
    // The shim keeps this descriptor open in the collector it starts (which closes every other
    // one) and out of the program's own children: it names it by number and identity.
    let id = std::fs::metadata(format!("/proc/self/fd/{write_fd}")).context("cannot inspect the pipe")?;
    cmd.env("GPUSHIM_RUN_FD", format!("{write_fd}:{}:{}", id.dev(), id.ino()));
    let mut notify = run_pipe.path.clone().into_os_string();
    notify.push(format!(":{}:{}", id.dev(), id.ino()));
    cmd.env(NOTIFY_VAR, notify);
    // A copy of our stderr for the collectors (`GPUSHIM_RUN_STDERR`): the program may point its
    // own fd 2 elsewhere before its first allocation starts one (pytest captures it), and the
    // exit summary is for whoever runs us. Without a stderr, or without a copy, they use the
    // program's.
    let err_copy = io::stderr().as_fd().try_clone_to_owned().ok().filter(|f| f.as_raw_fd() >= 3);
    let err_fd = err_copy.as_ref().map_or(-1, |f| f.as_raw_fd());
    if let Some(f) = &err_copy {
        if let Ok(m) = std::fs::metadata(format!("/proc/self/fd/{}", f.as_raw_fd())) {
            cmd.env("GPUSHIM_RUN_STDERR", format!("{}:{}:{}", f.as_raw_fd(), m.dev(), m.ino()));
        }
    }
    let saved = ignore(&[libc::SIGINT, libc::SIGQUIT]);
    // Until the handlers that pass signals on are in place, the signals wait (the program may
    // run, and be sent signals through us, before `spawn` returns here). The program gets
    // the mask we had (`Command` keeps the parent's).
    let passed_on = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];
    let mask = block(&passed_on);
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe calls (sigaction, pthread_sigmask, fcntl) on values copied into it.
    unsafe {
        cmd.pre_exec(move || {
            restore(&saved);
            unblock(&mask);
            // Let the write end survive exec, so the program (and its collector) hold it.
            if libc::fcntl(write_fd, libc::F_SETFD, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The same for the copy of our stderr (a failure leaves the collector the program's).
            if err_fd >= 0 {
                libc::fcntl(err_fd, libc::F_SETFD, 0);
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    drop(done_write);
    drop(err_copy);
    if let Ok(child) = &spawned {
        forward(child.id() as i32, &passed_on);
    }
    unblock(&mask);
    let mut child = spawned.map_err(|e| {
        let name = Path::new(prog).display();
        match e.kind() {
            io::ErrorKind::NotFound => coded(NOT_FOUND, format!("cannot run {name}: command not found")),
            io::ErrorKind::PermissionDenied => coded(CANNOT_EXECUTE, format!("cannot run {name}: permission denied")),
            _ => coded(CANNOT_EXECUTE, format!("cannot run {name}: {e}")),
        }
    })?;
    // The program is waited for without being reaped until its collector is done: a program a
    // signal ended stays a zombie meanwhile, whose exit status the collector reads to say so.
    wait_unreaped(child.id());
    let waited = wait_for_eof(done_read, COLLECTOR_WAIT);
    let status = child.wait().context("waiting for the program")?;
    drop(run_pipe);
    let heard = match waited {
        Waited::Eof(h) => {
            if h.started == 0 {
                let _ = writeln!(io::stderr(), "gpushim: no CUDA allocations: no report");
            }
            h
        }
        Waited::TimedOut(h) => {
            let _ = writeln!(
                io::stderr(),
                "gpushim: a collector is still running after {} s; its report will appear when it finishes",
                COLLECTOR_WAIT.as_secs()
            );
            h
        }
    };
    if heard.reports.len() > 1 {
        let _ = crate::compare::job::print_run_summary(&heard.reports, &mut io::stderr().lock());
    }
    if let (Some(limit), Some(0)) = (opts.fail_on_leak, status.code()) {
        let dir = match &opts.output {
            Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.clone()),
            None => env::current_dir().unwrap_or_default(),
        };
        if let Some(line) = leak_check(&dir, &heard.reports, child.id(), limit) {
            let _ = writeln!(io::stderr(), "{line}");
            return Ok(ExitCode::from(crate::error::LEAKED));
        }
    }
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => {
            let _ = io::stderr().flush();
            die_of(sig);
            ExitCode::from((libc::c_int::from(SIGNALLED) + sig) as u8)
        }
        _ => ExitCode::from(1),
    })
}

/// `lib` in front of an existing `LD_PRELOAD` list, colon-separated.
fn preload_value(lib: &OsStr, existing: Option<&OsStr>) -> OsString {
    let mut v = lib.to_os_string();
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(e);
    }
    v
}

/// The environment variable that names `run`'s pipe to the collectors (see the module doc).
const NOTIFY_VAR: &str = "GPUSHIM_RUN_NOTIFY";

/// For `gpushim collect` started by the shim: one byte (`c`) into the pipe of the `gpushim run`
/// it runs under, if any (`GPUSHIM_RUN_NOTIFY`), so that `run` knows a report is coming. The
/// path is opened only if it is that very pipe (device and inode, unique while the pipe exists:
/// a reused pid names another file), without blocking; every failure is ignored. The pipe is
/// returned, to be held until the report is written ([`tell_run_the_report`]): `run` waits
/// until every collector of the process tree it started has closed it.
pub(crate) fn tell_run_a_collector_started() -> Option<File> {
    let v = env::var_os(NOTIFY_VAR)?;
    let v = v.to_string_lossy();
    let mut parts = v.rsplitn(3, ':');
    let (Some(ino), Some(dev), Some(path)) = (parts.next(), parts.next(), parts.next()) else { return None };
    let (Ok(ino), Ok(dev)) = (ino.parse::<u64>(), dev.parse::<u64>()) else { return None };
    let mut f =
        std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path).ok()?;
    if f.metadata().is_ok_and(|m| m.dev() == dev && m.ino() == ino && m.file_type().is_fifo()) {
        let _ = f.write(b"c");
        return Some(f);
    }
    None
}

/// Longest report path that [`tell_run_the_report`] sends: one write of at most `PIPE_BUF`
/// (4096) bytes is never interleaved with another collector's (POSIX, `write(2)` on a pipe).
const MAX_NOTIFIED_PATH: usize = 4096 - 2;

/// For `gpushim collect`, once its final report is written: `r`, the report's path and a NUL
/// into `run`'s pipe (from [`tell_run_a_collector_started`]), then the pipe is closed.
pub(crate) fn tell_run_the_report(mut pipe: File, report: Option<&Path>) {
    use std::os::unix::ffi::OsStrExt;
    if let Some(p) = report.and_then(|p| std::path::absolute(p).ok()) {
        let bytes = p.as_os_str().as_bytes();
        if bytes.len() <= MAX_NOTIFIED_PATH && !bytes.contains(&0) {
            let mut msg = Vec::with_capacity(bytes.len() + 2);
            msg.push(b'r');
            msg.extend_from_slice(bytes);
            msg.push(0);
            let _ = pipe.write(&msg);
        }
    }
}

/// How [`wait_for_eof`] ended.
#[derive(Debug, PartialEq, Eq)]
enum Waited {
    /// Every write end was closed: the collectors that started (one `c` each) and the final
    /// reports they wrote.
    Eof(Heard),
    /// The limit passed first; what was heard until then.
    TimedOut(Heard),
}

/// What the collectors of a run wrote into its pipe.
#[derive(Debug, Default, PartialEq, Eq)]
struct Heard {
    /// Collectors started.
    started: usize,
    /// Final reports written, in the order they were finished.
    reports: Vec<std::path::PathBuf>,
}

impl Heard {
    /// Takes the complete messages at the front of `buf` (`c`, or `r` PATH NUL), leaving an
    /// incomplete one.
    fn take(&mut self, buf: &mut Vec<u8>) {
        use std::os::unix::ffi::OsStrExt;
        loop {
            match buf.first() {
                Some(b'r') => {
                    let Some(end) = buf.iter().position(|&b| b == 0) else { return };
                    self.reports.push(std::path::PathBuf::from(OsStr::from_bytes(&buf[1..end])));
                    buf.drain(..=end);
                }
                Some(_) => {
                    self.started += 1;
                    buf.remove(0);
                }
                None => return,
            }
        }
    }
}

/// Waits until the child `pid` has ended, leaving it unreaped (`waitid` with `WNOWAIT`).
fn wait_unreaped(pid: u32) {
    loop {
        // SAFETY: a zeroed siginfo_t for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child; the status stays to be reaped by `wait`.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Waits until every write end of the pipe is closed, reading what the collectors say.
fn wait_for_eof(read: OwnedFd, limit: Duration) -> Waited {
    let deadline = Instant::now() + limit;
    let mut file = File::from(read);
    let mut chunk = [0u8; 4096];
    let mut buf = Vec::new();
    let mut heard = Heard::default();
    loop {
        heard.take(&mut buf);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Waited::TimedOut(heard);
        }
        let mut p = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            heard.started = heard.started.max(1);
            return Waited::Eof(heard);
        }
        if n == 0 {
            return Waited::TimedOut(heard);
        }
        match file.read(&mut chunk) {
            Ok(0) => return Waited::Eof(heard),
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                heard.started = heard.started.max(1);
                return Waited::Eof(heard);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::run_pipe::pipe;

    #[test]
    fn sizes_as_people_write_them() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("16MiB"), Some(16 << 20));
        assert_eq!(parse_bytes("1.5 GiB"), Some(3 << 29));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("16 parsecs"), None);
        assert_eq!(parse_bytes("99999999T"), None);
    }

    #[test]
    fn preload_goes_first() {
        assert_eq!(preload_value(OsStr::new("/a/libgpushim.so"), None), "/a/libgpushim.so");
        assert_eq!(preload_value(OsStr::new("/a/libgpushim.so"), Some(OsStr::new(""))), "/a/libgpushim.so");
        assert_eq!(
            preload_value(OsStr::new("/a/libgpushim.so"), Some(OsStr::new("/b/x.so:/c/y.so"))),
            "/a/libgpushim.so:/b/x.so:/c/y.so"
        );
    }

    #[test]
    fn eof_when_the_writer_closes_and_timeout_when_it_does_not() {
        let (r, w) = pipe().unwrap();
        drop(w);
        assert_eq!(wait_for_eof(r, Duration::from_secs(5)), Waited::Eof(Heard::default()));
        let (r, w) = pipe().unwrap();
        File::from(w).write_all(b"cc").unwrap();
        assert_eq!(wait_for_eof(r, Duration::from_secs(5)), Waited::Eof(Heard { started: 2, reports: vec![] }));
        let (r, _w) = pipe().unwrap();
        assert_eq!(wait_for_eof(r, Duration::from_millis(20)), Waited::TimedOut(Heard::default()));
        // Two collectors: both start, then each sends its report's path (one split across reads).
        let (r, w) = pipe().unwrap();
        let mut w = File::from(w);
        w.write_all(b"ccr/o/gpushim-rank00001-7.json\0r/o/gpu").unwrap();
        let t = std::thread::spawn(move || {
            w.write_all(b"shim-8.json\0").unwrap();
        });
        let got = wait_for_eof(r, Duration::from_secs(5));
        t.join().unwrap();
        assert_eq!(
            got,
            Waited::Eof(Heard {
                started: 2,
                reports: vec!["/o/gpushim-rank00001-7.json".into(), "/o/gpushim-8.json".into()]
            })
        );
    }
}
