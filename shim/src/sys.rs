//! Small wrappers of the system calls the shim makes for itself: clocks, thread and process
//! ids, and running the shim's own work with cancellation off and panics caught.

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
    let Some(fields) = std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| after_comm(&s)) else {
        return false;
    };
    match fields.get(17).and_then(|n| n.parse::<u32>().ok()) {
        Some(1) => true,
        // The other thread must be the main thread (the thread group leader, whose id is the
        // process id), ended: other threads that end are not kept as zombies.
        Some(2) => {
            let leader = format!("/proc/self/task/{}/stat", getpid_raw());
            gettid() as i32 != getpid_raw()
                && std::fs::read_to_string(leader)
                    .ok()
                    .and_then(|s| after_comm(&s))
                    .is_some_and(|f| f.first().map(String::as_str) == Some("Z"))
        }
        _ => false,
    }
}

/// The identity of the file `fd` is open on (`st_dev`, `st_ino`), or `None` if it is not open.
pub fn fd_identity(fd: std::os::fd::RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st` only; any fd value is accepted.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}
