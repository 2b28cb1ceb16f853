//! Small wrappers of the system calls the shim makes for itself: clocks, thread and process
//! ids, and running the shim's own work with cancellation off and panics caught.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::*};

/// Monotonic clock, ns (`clock_gettime` is async-signal-safe, POSIX signal-safety(7)).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's kernel id (`gettid`, not cached: see `record` for the cached one).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The process id, by system call (glibc's `getpid` may answer from a cache that a raw
/// `clone` or `vfork` child shares with its parent).
pub fn getpid_raw() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// Copies this process's memory at `addr` into `buf` with `process_vm_readv`: the number of
/// bytes read (fewer, or 0, where a page is not mapped: the kernel reports `EFAULT` instead of
/// faulting, so memory another thread unmaps meanwhile is safe to ask for).
pub fn read_own(addr: u64, buf: &mut [u8]) -> usize {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the kernel checks the remote range; the local buffer is the caller's.
    let n = unsafe { libc::process_vm_readv(getpid_raw(), &local, 1, &remote, 1, 0) };
    usize::try_from(n).unwrap_or(0)
}

/// Reads each `(addr, len)` of `from`, in order, into consecutive bytes of `buf` with one
/// `process_vm_readv` on this process: true if and only if every byte was read. At most 8 ranges,
/// and `buf` at least their total length (else false, nothing read).
pub fn read_own_ranges(from: &[(u64, usize)], buf: &mut [u8]) -> bool {
    const MAX: usize = 8;
    let total: usize = from.iter().map(|r| r.1).sum();
    if from.is_empty() || from.len() > MAX || total > buf.len() {
        return false;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: total };
    let mut remote = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; MAX];
    for (r, &(addr, len)) in remote.iter_mut().zip(from) {
        *r = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    }
    // SAFETY: the kernel checks the remote ranges; the local buffer is the caller's, `total`
    // bytes of it.
    let n = unsafe { libc::process_vm_readv(getpid_raw(), &local, 1, remote.as_ptr(), from.len() as _, 0) };
    usize::try_from(n).is_ok_and(|n| n == total)
}

/// Runs `f` with this thread's cancellation disabled. The shim's own work has cancellation
/// points (starting the collector closes descriptors, the writer's exit handshake reads): a
/// `pthread_cancel` acted on there would unwind through Rust frames that cannot be unwound by
/// a foreign (forced) unwind, and glibc aborts the whole process (seen: SIGABRT when a thread
/// was cancelled during its first allocations). A pending cancel is acted on at the program's
/// next cancellation point instead.
pub fn no_cancel<T>(f: impl FnOnce() -> T) -> T {
    extern "C" {
        /// POSIX; not in the libc crate.
        fn pthread_setcancelstate(state: libc::c_int, oldstate: *mut libc::c_int) -> libc::c_int;
    }
    /// `PTHREAD_CANCEL_DISABLE` in glibc's pthread.h (`enum { PTHREAD_CANCEL_ENABLE,
    /// PTHREAD_CANCEL_DISABLE }`).
    const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;
    let mut old: libc::c_int = 0;
    // SAFETY: pthread_setcancelstate only sets this thread's state and writes the old one.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let r = f();
    // SAFETY: as above; restores the caller's state.
    unsafe { pthread_setcancelstate(old, &mut old) };
    r
}

/// Runs `f` with cancellation off (see [`no_cancel`]) and any panic caught: no panic crosses
/// the FFI boundary.
pub fn guarded(f: impl FnOnce()) {
    no_cancel(|| {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    });
}

/// Runs `f` with every asynchronous signal blocked on the calling thread, then restores the
/// thread's mask. A thread started inside `f` inherits the blocked mask and keeps it: the
/// shim's threads never take a signal meant for the program (a server that blocks SIGTERM in
/// all its threads and takes it with `sigwait` would otherwise see it delivered to our thread
/// and be killed by the default action). The synchronous signals a fault raises (SIGSEGV,
/// SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay unblocked: blocking them is undefined.
pub fn with_async_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset operations on local, initialised sets; pthread_sigmask changes only this
    // thread's mask and is restored below.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS] {
            libc::sigdelset(&mut all, s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// True if and only if the calling thread is the only live thread of its process. A main
/// thread that ended with `pthread_exit` stays as a zombie (counted in `num_threads`, the 20th
/// field of `/proc/self/stat`) until the process ends, so with two threads the other one's state
/// is read too. `false` when `/proc` cannot be read.
pub fn alone() -> bool {
    let after_comm = |stat: &str| {
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().map(String::from).collect::<Vec<_>>())
    };
    let Some(fields) = read_stat().and_then(|s| after_comm(&s)) else {
        return false;
    };
    match fields.get(17).and_then(|n| n.parse::<u32>().ok()) {
        Some(1) => true,
        // The other thread must be the main thread (the thread group leader, whose id is the
        // process id), ended: other threads that end are not kept as zombies.
        Some(2) => {
            let Ok(leader) = std::ffi::CString::new(format!("/proc/self/task/{}/stat", getpid_raw())) else {
                return false;
            };
            gettid() as i32 != getpid_raw()
                && read_own_file(&leader)
                    .and_then(|s| after_comm(&s))
                    .is_some_and(|f| f.first().map(String::as_str) == Some("Z"))
        }
        _ => false,
    }
}

/// The text of the file at `path`, read on a descriptor of the shim's own that the program may
/// close and reuse at any moment (a daemon closing every descriptor): each read and the close
/// are made only while the number is still the file the shim opened (same device and inode), so
/// the shim never reads from nor closes what has become the program's (a close by number, as
/// `std::fs` makes, would close the program's new file: issue 30's descriptor test).
pub fn read_own_file(path: &std::ffi::CStr) -> Option<String> {
    // SAFETY: a NUL-terminated path; the descriptor is ours until the checks below say not.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let id = fd_identity(fd)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let ok = loop {
        if fd_identity(fd) != Some(id) {
            break false;
        }
        // SAFETY: reading into a valid buffer from the descriptor just checked.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => break true,
            n if n > 0 => out.extend_from_slice(&buf[..n as usize]),
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => break false,
        }
    };
    if fd_identity(fd) == Some(id) {
        // SAFETY: still the file this function opened.
        unsafe { libc::close(fd) };
    }
    ok.then(|| String::from_utf8_lossy(&out).into_owned())
}

/// This process's `/proc/self/stat`, opened once by [`open_stat`] and then only read with
/// `pread` and never closed: the program may close every descriptor and reuse the numbers at any
/// moment (a daemon), and a descriptor the shim opened, read and closed while the program runs
/// could, between the check of its identity and the close, have become the program's. Its
/// process id, identity (`st_dev`, `st_ino`) and number; -1 while not open.
static STAT: (AtomicI32, AtomicI32, AtomicU64, AtomicU64) =
    (AtomicI32::new(-1), AtomicI32::new(-1), AtomicU64::new(0), AtomicU64::new(0));

/// Opens `/proc/self/stat` for [`alone`], on the thread that starts tracing, before the program
/// goes on (in a forked child that starts tracing again, anew).
pub fn open_stat() {
    // SAFETY: a NUL-terminated path.
    let mut fd = unsafe { libc::open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if (0..=2).contains(&fd) {
        // A program started with a standard stream closed keeps it closed: a copy numbered 3
        // or more, this one closed (the caller's thread is the program's, inside our hook).
        // SAFETY: duplicating and closing the descriptor just opened.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        fd = dup;
    }
    if let Some((dev, ino)) = (fd >= 0).then(|| fd_identity(fd)).flatten() {
        STAT.2.store(dev, Relaxed);
        STAT.3.store(ino, Relaxed);
        STAT.1.store(fd, Relaxed);
        STAT.0.store(getpid_raw(), Release);
    }
}

/// The text of this process's `/proc/self/stat`, read from [`open_stat`]'s descriptor while it
/// is still that file; `None` otherwise (the program closed it, or this is a forked child).
fn read_stat() -> Option<String> {
    if STAT.0.load(Acquire) != getpid_raw() {
        return None;
    }
    let fd = STAT.1.load(Relaxed);
    if fd_identity(fd) != Some((STAT.2.load(Relaxed), STAT.3.load(Relaxed))) {
        return None;
    }
    let mut buf = [0u8; 1024];
    // SAFETY: reading into a valid buffer; `pread` changes no offset and, should the number
    // have become the program's since the check, reads (never writes, never closes) it.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

/// The identity of the file `fd` is open on (`st_dev`, `st_ino`), or `None` if it is not open.
pub fn fd_identity(fd: std::os::fd::RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st` only; any fd value is accepted.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Calls `f` until it gives a value or the monotonic clock ([`now_ns`]) reaches `deadline_ns`,
/// sleeping between calls (20 µs, doubling up to 1 ms). It waits in nothing but the
/// `nanosleep` system call (made raw: not a cancellation point): no lock, no allocation, and no
/// thread-local destructor registered on the calling thread, as a crossbeam channel's blocking
/// send or receive registers (its waiting context), which glibc's `exit()` runs and frees on
/// the exiting thread (see `per_thread`). Async-signal-safe if `f` is.
pub fn poll_until<T>(deadline_ns: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let mut nap = 20_000u64;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = now_ns();
        if now >= deadline_ns {
            return None;
        }
        let d = nap.min(deadline_ns - now);
        let ts = libc::timespec { tv_sec: (d / 1_000_000_000) as libc::time_t, tv_nsec: (d % 1_000_000_000) as _ };
        // SAFETY: `ts` is a valid timespec; no remainder is asked for.
        unsafe {
            libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, std::ptr::null_mut::<libc::timespec>())
        };
        nap = (nap * 2).min(1_000_000);
    }
}

/// The monotonic time `d` from now, ns ([`now_ns`]'s clock), saturating ("for ever").
pub fn deadline_after(d: std::time::Duration) -> u64 {
    now_ns().saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Starts a detached thread named `name` that runs `f` (a panic in it is caught), with std's
/// default stack of 2 MiB. Through `pthread_create`, not `std::thread::Builder`, whose spawn
/// registers a thread-local destructor on the calling thread (its spawn hooks), a program
/// thread: glibc's `exit()` on that thread would run it and free its entry (see `per_thread`).
pub fn spawn(name: &'static std::ffi::CStr, f: Box<dyn FnOnce() + Send>) -> std::io::Result<()> {
    type Start = (&'static std::ffi::CStr, Box<dyn FnOnce() + Send>);
    extern "C" fn start(arg: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: the Box leaked by `spawn` for this thread, taken back once.
        let (name, f) = *unsafe { Box::from_raw(arg as *mut Start) };
        // SAFETY: a NUL-terminated name of at most 15 bytes, for the calling thread.
        unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        std::ptr::null_mut()
    }
    let arg = Box::into_raw(Box::new((name, f) as Start));
    // SAFETY: the attributes are initialised before use and destroyed after; `start` takes the
    // argument back exactly once, or it is freed here if no thread was made.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstacksize(&mut attr, 2 << 20);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut t, &attr, start, arg.cast());
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            drop(Box::from_raw(arg));
            return Err(std::io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Reads the start of the file at `path` (NUL-terminated bytes) into `buf` with raw system
/// calls (no cancellation point, no allocation, async-signal-safe): the bytes read, 0 on any
/// failure.
pub fn read_file_raw(path: &[u8], buf: &mut [u8]) -> usize {
    if path.last() != Some(&0) {
        return 0;
    }
    // SAFETY: a NUL-terminated path; reading into our own buffer; closing the descriptor opened
    // here.
    unsafe {
        let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        libc::syscall(libc::SYS_close, fd);
        usize::try_from(n).unwrap_or(0)
    }
}

/// Bytes of a path a line on stderr shows at most: a longer one is shown as `…` and its last
/// bytes, where the file's name is (the collector's lines do the same, `render/text.rs`).
pub const LINE_PATH_MAX: usize = 160;

/// One line for stderr, built on the stack ([`Line::emit`] writes it with one `write`): no
/// allocation, so that the exit path may say something from a signal handler that
/// interrupted `malloc`. Text past its 512 bytes is dropped.
pub struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    pub fn new() -> Line {
        Line { buf: [0; 512], len: 0 }
    }

    /// Appends `p` whole if it has at most [`LINE_PATH_MAX`] bytes, else `…` and its tail
    /// (from a character's start).
    pub fn path(&mut self, p: &[u8]) {
        use std::fmt::Write;
        if p.len() <= LINE_PATH_MAX {
            self.bytes(p);
            return;
        }
        let mut from = p.len() - (LINE_PATH_MAX - 3);
        while from < p.len() && p[from] & 0xC0 == 0x80 {
            from += 1;
        }
        let _ = self.write_str("…");
        self.bytes(&p[from..]);
    }

    /// The bytes written so far.
    pub fn bytes_so_far(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn bytes(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    /// Writes the line and a newline to stderr.
    pub fn emit(mut self) {
        if self.len == self.buf.len() {
            self.len -= 1;
        }
        self.buf[self.len] = b'\n';
        let mut at = 0;
        while at <= self.len {
            // SAFETY: the bytes `[at, len]` of our own buffer.
            let n = unsafe { libc::write(2, self.buf[at..].as_ptr().cast(), self.len + 1 - at) };
            if n <= 0 {
                return;
            }
            at += n as usize;
        }
    }
}

impl Default for Line {
    fn default() -> Line {
        Line::new()
    }
}

impl std::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_of_our_own_is_read_and_closed_only_while_it_is_ours() {
        let stat = read_own_file(c"/proc/self/stat").expect("/proc/self/stat");
        assert!(stat.starts_with(&format!("{} (", std::process::id())), "{stat}");
        assert_eq!(read_own_file(c"/nonexistent/file"), None);
    }

    use super::*;

    #[test]
    fn a_long_path_in_a_line_keeps_its_end_from_a_characters_start() {
        let mut l = Line::new();
        l.path(b"/tmp/r");
        assert_eq!(l.bytes_so_far(), b"/tmp/r");
        let long = format!("/{}/x", "é".repeat(1000));
        let mut l = Line::new();
        l.path(long.as_bytes());
        let s = std::str::from_utf8(l.bytes_so_far()).unwrap();
        assert!(s.starts_with('…') && s.ends_with("éé/x") && s.len() <= LINE_PATH_MAX, "{s}");
    }
}
