//! Processes other than the test's own child: finding the collector, signalling, stopping and
//! waiting for a process to end, and reading a process's state from /proc.

use std::fs;
use std::path::Path;
use std::time::Duration;

/// Pids of `gpushim collect` processes whose environment names `dir` as GPUSHIM_OUTPUT, that
/// is, the collectors of targets started by `Target` with that output directory. (The
/// collector is not the target's child: the shim starts it through an intermediate process.)
pub fn collectors_of(dir: &Path) -> Vec<i32> {
    let want = format!("GPUSHIM_OUTPUT={}", dir.display()).into_bytes();
    let mut v = Vec::new();
    for e in fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else { continue };
        if cmdline.split(|&b| b == 0).nth(1) != Some(b"collect") {
            continue;
        }
        let Ok(environ) = fs::read(e.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|kv| kv == want.as_slice()) {
            v.push(pid);
        }
    }
    v
}

/// The one collector of the target whose reports go to `dir`. It exists once the target has
/// printed anything after its first allocation (the shim starts it then, and `spawn` returns
/// after its exec).
pub fn the_collector(dir: &Path) -> i32 {
    let c = collectors_of(dir);
    assert_eq!(c.len(), 1, "expected exactly one collector for {}: {c:?}", dir.display());
    c[0]
}

/// Sends `sig` to `pid` (a process group if negative), which must succeed.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: sending a signal by pid.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

/// Waits until process `pid` (not necessarily our child) has ended; false on timeout.
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; the pidfd is readable once the process has ended.
    let n = unsafe { libc::poll(&mut p, 1, limit.as_millis().min(i32::MAX as u128) as i32) };
    // SAFETY: closing the descriptor we opened.
    unsafe { libc::close(fd) };
    n == 1
}

/// A process stopped with SIGSTOP, continued when dropped (also when a test fails, so that
/// no stopped collector outlives it).
pub struct Stopped(i32);

impl Stopped {
    pub fn new(pid: i32) -> Stopped {
        signal(pid, libc::SIGSTOP);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: sending a signal by pid.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Thread `tid` of `pid` is asleep ('S') in system call `nr`.
pub fn asleep_in(pid: i32, tid: i32, nr: libc::c_long) -> bool {
    let base = format!("/proc/{pid}/task/{tid}");
    let state = fs::read_to_string(format!("{base}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(String::from)));
    let call = fs::read_to_string(format!("{base}/syscall")).ok();
    state.as_deref() == Some("S")
        && call.and_then(|c| c.split_whitespace().next()?.parse::<libc::c_long>().ok()) == Some(nr)
}

/// The shim's writer thread of `pid` (named `gpushim-writer`).
pub fn writer_thread(pid: i32) -> Option<i32> {
    fs::read_dir(format!("/proc/{pid}/task")).ok()?.filter_map(Result::ok).find_map(|e| {
        let comm = fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "gpushim-writer").then(|| e.file_name().to_str()?.parse().ok()).flatten()
    })
}

/// A thread of `pid` that is neither the main thread nor `writer` (the shim's writer thread).
pub fn other_thread(pid: i32, writer: i32) -> Option<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|&t| t != pid && t != writer)
}

/// A field of /proc/`pid`/status given in kB (`VmRSS:`, `VmHWM:`…).
pub fn status_kb(pid: i32, field: &str) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix(" kB")?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Waits until process `pid` catches `sig` (its handler is installed: `SigCgt` in
/// /proc/PID/status), polling against [`super::DEADLINE`]; panics past it.
pub fn wait_catches(pid: i32, sig: i32) {
    let deadline = std::time::Instant::now() + super::DEADLINE;
    loop {
        let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = s
            .lines()
            .find_map(|l| u64::from_str_radix(l.strip_prefix("SigCgt:")?.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (sig - 1)) != 0);
        if caught {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "process {pid} never caught signal {sig}");
        std::thread::sleep(Duration::from_millis(2));
    }
}
