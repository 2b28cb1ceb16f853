//! Starting the collector: a socketpair, and `gpushim collect` started through a short-lived
//! intermediate process, so that the collector is not the program's child, with no side effect
//! on the program:
//! - both processes are made by a raw `clone` system call, not glibc's `fork()`, so none of the
//!   program's `pthread_atfork` handlers run (an allocator that holds its own lock around
//!   `cudaMalloc` and takes it in its prepare handler would deadlock in its first allocation);
//! - the intermediate has no exit signal: the program gets no SIGCHLD, and its `wait()` (which
//!   waits only for children with one, wait(2) `__WCLONE`) never sees it; the shim reaps it
//!   with `__WALL`;
//! - the collector starts with only its socket as standard input, `/dev/null` as stdout and
//!   the program's stderr (for its one-line summary; under `gpushim run`, run's own stderr,
//!   `GPUSHIM_RUN_STDERR`): every other descriptor is closed before
//!   `exec` (a program that closes its pipe's write end, or its stdout, to give a reader EOF
//!   must not find a copy kept open in the collector);
//! - the collector gets an empty signal mask and its own process group.
//!
//! Between `clone` and `exec` the children make system calls only, with memory prepared
//! before: no allocation, no lock, nothing that reads the thread's cached id.

use std::ffi::{c_char, c_int, CString};
use std::os::fd::RawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::config::{self, Config};

/// Everything the children need, prepared before `clone`.
struct Exec {
    path: CString,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    /// `gpushim run`'s stderr ([`config::run_stderr`]) for the collector's, or -1: the
    /// program's own.
    stderr: RawFd,
    /// Owners of the strings `argv` and `envp` point to.
    _strings: Vec<CString>,
}

impl Exec {
    /// `program collect --output DIR --pid PID` with this process's environment but
    /// `LD_PRELOAD`. The directory (absolute, resolved when tracing started) and the pid are
    /// on the command line so that `gpushim snapshot PID` finds where the reports go even
    /// after the program changed its working directory.
    fn new(program: &Path, output_dir: &Path) -> Option<Exec> {
        let path = CString::new(resolve(program).into_os_string().into_vec()).ok()?;
        let mut strings = vec![
            CString::new(program.as_os_str().as_bytes()).ok()?,
            CString::new("collect").ok()?,
            CString::new("--output").ok()?,
            CString::new(output_dir.as_os_str().as_bytes()).ok()?,
            CString::new("--pid").ok()?,
            CString::new(crate::sys::getpid_raw().to_string()).ok()?,
        ];
        let hold = cannot_outlive_the_program();
        HOLDS_EXIT.store(hold, std::sync::atomic::Ordering::Release);
        if hold {
            strings.push(CString::new("--hold-exit").ok()?);
        }
        let args = strings.len();
        for (k, v) in std::env::vars_os() {
            if k == "LD_PRELOAD" {
                continue;
            }
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            if let Ok(c) = CString::new(kv) {
                strings.push(c);
            }
        }
        let mut argv: Vec<*const c_char> = strings[..args].iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const c_char> = strings[args..].iter().map(|s| s.as_ptr()).collect();
        envp.push(std::ptr::null());
        Some(Exec { path, argv, envp, stderr: config::run_stderr(), _strings: strings })
    }
}

/// Whether the collector dies with the program: the program is PID 1 of its PID namespace
/// (`docker run` without `--init`, a Kubernetes container's entrypoint), or its parent is PID 1
/// of a namespace that is not the machine's, an init that exits when its child does (tini,
/// `docker run --init`, `sh -c 'prog; …'`). When PID 1 of a namespace exits, the kernel kills
/// every other process of it, the collector included: the collector then confirms the end of
/// the stream only once the report is written (`--hold-exit`), so that the program's exit waits
/// for the report, bounded by `GPUSHIM_EXIT_TIMEOUT`. Elsewhere the exit waits only until the
/// stream is read.
fn cannot_outlive_the_program() -> bool {
    // SAFETY: getpid and getppid have no arguments and cannot fail.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    pid == 1 || (ppid == 1 && in_a_child_pid_namespace())
}

/// This process's collector was started with `--hold-exit` (see [`cannot_outlive_the_program`]).
static HOLDS_EXIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process's collector cannot outlive it (it was started with `--hold-exit`): every
/// exit, `_exit` and `_Exit` included, then waits until the collector confirms the report.
pub fn holds_exit() -> bool {
    HOLDS_EXIT.load(std::sync::atomic::Ordering::Acquire)
}

/// Whether this process's PID namespace is not the machine's: the inode of
/// `/proc/self/ns/pid` is not the initial namespace's, which the kernel fixes
/// (`PROC_PID_INIT_INO`). (`NSpid` in /proc/self/status does not tell: a container's own
/// /proc lists only its own pids.) Unreadable: taken as the machine's.
fn in_a_child_pid_namespace() -> bool {
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() != PROC_PID_INIT_INO)
}

/// `program` itself when it names a path, else the first executable file of that name in
/// `PATH` (as `execvp` would find it), else `program` (whose `exec` then fails).
fn resolve(program: &Path) -> PathBuf {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return program.to_path_buf();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return candidate;
        }
    }
    program.to_path_buf()
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else { return false };
    let regular = std::fs::metadata(p).is_ok_and(|m| m.is_file());
    // SAFETY: access reads a NUL-terminated path.
    regular && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// Starts the collector; our end of the socket to it. `None`, with one line on stderr, if it
/// cannot be started.
pub fn collector(cfg: &Config) -> Option<RawFd> {
    let say = |e: std::io::Error| {
        eprintln!(
            "gpushim: cannot start the collector '{}': {e}; recording is off (set GPUSHIM_COLLECTOR to the gpushim binary)",
            cfg.collector.display()
        );
    };
    let Some(exec) = Exec::new(&cfg.collector, &cfg.output_dir) else {
        say(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        return None;
    };
    let mut sv = [0 as c_int; 2];
    // SAFETY: `sv` has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr()) } != 0 {
        eprintln!(
            "gpushim: cannot create a socket for the collector: {}; recording is off",
            std::io::Error::last_os_error()
        );
        return None;
    }
    // Our end must not take the number of a standard stream the program closed (0, 1 or 2):
    // its reads, writes and prints would go to the collector.
    let (ours, theirs) = (above_stdio(sv[0]), above_stdio(sv[1]));
    // The children report a failed clone or exec through this pipe: 4 bytes of errno. Its end
    // closes at a successful exec (close-on-exec) and when the intermediate exits.
    let mut ep = [0 as c_int; 2];
    // SAFETY: `ep` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(ep.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let e = std::io::Error::last_os_error();
        close(ours);
        close(theirs);
        say(e);
        return None;
    }
    let (err_r, err_w) = (ep[0], ep[1]);
    // A child subreaper (supervisors, systemd user services) gets every orphan of its
    // descendants, the collector too: its `wait()` until ECHILD would wait for it. There the
    // collector is started as the program's sibling (`CLONE_PARENT`: a child of the program's
    // parent, which reaps it after the program); elsewhere through the intermediate, which
    // exits so that the collector is reparented away. (PID 1 of a namespace may not use
    // `CLONE_PARENT`; every orphan of its namespace is its own.)
    let sibling = is_a_subreaper_not_pid_1();
    let flags = if sibling { libc::CLONE_PARENT as libc::c_long } else { 0 };
    // SAFETY: a raw clone with no exit signal (or the program's own, as a sibling) duplicates
    // this process as fork() does, without running fork handlers; the child runs
    // `intermediate` or `collector_child`, which make system calls only and never return.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
    if pid == 0 {
        // SAFETY: in the new child; see `intermediate` and `collector_child`.
        unsafe {
            if sibling {
                collector_child(&exec, theirs, err_w)
            } else {
                intermediate(&exec, theirs, err_w)
            }
        };
    }
    let clone_error = (pid < 0).then(std::io::Error::last_os_error);
    close(theirs);
    close(err_w);
    let mut failure = clone_error;
    if pid > 0 {
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            // SAFETY: reading into the rest of a valid buffer.
            let n = unsafe { libc::read(err_r, buf[got..].as_mut_ptr().cast(), 4 - got) };
            if n > 0 {
                got += n as usize;
            } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            } else {
                break;
            }
        }
        if got == 4 {
            failure = Some(std::io::Error::from_raw_os_error(i32::from_ne_bytes(buf)));
        }
        // The intermediate has exited or is about to; reap it (it has no exit signal, so
        // only __WALL or __WCLONE waits for it). A sibling collector is not ours to reap.
        if !sibling {
            loop {
                let mut status = 0;
                // SAFETY: waiting for our own child; `status` is a valid out-pointer.
                let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::__WALL) };
                if r >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                    break;
                }
            }
        }
    }
    close(err_r);
    match failure {
        None => Some(ours),
        Some(e) => {
            close(ours);
            say(e);
            None
        }
    }
}

/// Whether the program is a child subreaper (`PR_SET_CHILD_SUBREAPER`) and not PID 1 of its
/// PID namespace.
fn is_a_subreaper_not_pid_1() -> bool {
    let mut subreaper: c_int = 0;
    // SAFETY: getpid has no arguments; PR_GET_CHILD_SUBREAPER writes one int.
    unsafe {
        libc::getpid() != 1
            && libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut subreaper as *mut c_int) == 0
            && subreaper != 0
    }
}

/// `fd` itself if it is 3 or more, else a close-on-exec copy numbered 3 or more (and `fd`
/// closed), so that a program started with a standard stream closed keeps it closed.
fn above_stdio(fd: RawFd) -> RawFd {
    if fd > 2 {
        return fd;
    }
    // SAFETY: duplicating a descriptor this function's caller owns.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return fd;
    }
    close(fd);
    dup
}

fn close(fd: RawFd) {
    // SAFETY: closing a descriptor this function created and still owns.
    unsafe { libc::close(fd) };
}

/// Writes `errno` to `fd` (4 bytes). System calls only.
///
/// # Safety
/// Only between `clone` and `exec` or `_exit`, on the child's own descriptors.
unsafe fn report(fd: RawFd, errno: c_int) {
    let b = errno.to_ne_bytes();
    // SAFETY: writing a small buffer to our pipe; a failure cannot be reported anyway.
    unsafe { libc::syscall(libc::SYS_write, fd as libc::c_long, b.as_ptr(), 4usize) };
}

fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot; the clone child is one thread
    // whose TLS block is its own copy of the parent's.
    unsafe { *libc::__errno_location() }
}

/// The intermediate process: starts the collector as its own child, then exits at once, so
/// that the collector is reparented to init (or a subreaper) and is never the program's child.
///
/// # Safety
/// Only in the child of the raw clone in [`collector`]: system calls only, memory prepared
/// before the clone.
unsafe fn intermediate(exec: &Exec, theirs: RawFd, err_w: RawFd) -> ! {
    // SAFETY: as `collector`'s clone: a copy of this one-thread process, fork handlers not run.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::c_long::from(libc::SIGCHLD), 0, 0, 0, 0) };
    if pid == 0 {
        // SAFETY: in the collector's process, before exec.
        unsafe { collector_child(exec, theirs, err_w) };
    }
    if pid < 0 {
        // SAFETY: our own pipe.
        unsafe { report(err_w, errno()) };
    }
    loop {
        // SAFETY: exit_group ends this process.
        unsafe { libc::syscall(libc::SYS_exit_group, 0 as libc::c_long) };
    }
}

/// The collector's process before `exec`: the socket as standard input, every descriptor but
/// 0, 1, 2 and the error pipe closed, an empty signal mask, its own process group.
///
/// # Safety
/// Only in the child made by [`intermediate`], or by [`collector`] itself as the program's
/// sibling: system calls only.
unsafe fn collector_child(exec: &Exec, theirs: RawFd, err_w: RawFd) -> ! {
    // SAFETY: system calls on this process's own descriptors and attributes; the pointers in
    // `exec` were prepared before the clone and stay valid in this copy of the memory.
    unsafe {
        if libc::dup2(theirs, 0) < 0 {
            report(err_w, errno());
            libc::syscall(libc::SYS_exit_group, 127 as libc::c_long);
        }
        // The collector writes nothing on stdout; holding the program's would keep a reader
        // of it (`prog | head`) from seeing EOF when the program closes it. /dev/null instead
        // (where it cannot be opened, stdout is closed: close_from below spares only 0 to 2).
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null < 0 {
            libc::close(1);
        } else if null != 1 {
            libc::dup2(null, 1); // dup2 clears close-on-exec on the copy
        } else {
            libc::fcntl(1, libc::F_SETFD, 0);
        }
        if exec.stderr >= 0 {
            // `gpushim run`'s own stderr rather than the program's fd 2, which pytest and the
            // like point at a capture file (dup2 clears close-on-exec on the copy).
            libc::dup2(exec.stderr, 2);
        }
        let run_fd = config::run_fd();
        if run_fd >= 0 {
            // Open across exec in the collector only: `gpushim run` waits for its close.
            libc::fcntl(run_fd, libc::F_SETFD, 0);
        }
        close_from(3, [err_w, run_fd]);
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as libc::c_long,
            &empty as *const libc::sigset_t,
            std::ptr::null_mut::<libc::sigset_t>(),
            8usize,
        );
        libc::setpgid(0, 0);
        libc::execve(exec.path.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr());
        report(err_w, errno());
        loop {
            libc::syscall(libc::SYS_exit_group, 127 as libc::c_long);
        }
    }
}

/// Closes every descriptor from `first` up, except those in `keep` (-1: none):
/// `close_range(2)` where the kernel has it (5.9 and later), else one `close` per number below
/// the descriptor limit.
///
/// # Safety
/// Only in the collector's process before `exec`.
unsafe fn close_from(first: RawFd, keep: [RawFd; 2]) {
    // The kept numbers in order; those below `first` (a pipe end numbered 0 to 2 when the
    // program closed those) need no gap.
    let [a, b] = if keep[0] <= keep[1] { keep } else { [keep[1], keep[0]] };
    let mut ranges = [(0u32, 0u32); 3];
    let mut n = 0;
    let mut lo = first as u32;
    for k in [a, b] {
        if k >= first && k as u32 >= lo {
            ranges[n] = (lo, k as u32 - 1);
            n += 1;
            lo = k as u32 + 1;
        }
    }
    ranges[n] = (lo, u32::MAX);
    n += 1;
    for &(lo, hi) in &ranges[..n] {
        if lo > hi {
            continue;
        }
        // SAFETY: close_range only closes descriptors of this process.
        let r = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0u32) };
        if r != 0 {
            let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: getrlimit writes `lim`.
            let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
                lim.rlim_cur.min(1 << 20) as u32
            } else {
                1024
            };
            for fd in lo..hi.min(max.saturating_sub(1)).saturating_add(1) {
                // SAFETY: closing a descriptor number of this process; EBADF is harmless.
                unsafe { libc::close(fd as c_int) };
            }
        }
    }
}
