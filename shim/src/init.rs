//! What runs when the library loads: the snapshot signal handler, the fork handlers and the
//! `at_quick_exit` handler. Nothing else starts here; tracing starts lazily at the first event.
//!
//! The signal handler only touches atomics: it records the current sequence number as the
//! snapshot's boundary and bumps a request counter that the writer thread polls. Requests that
//! arrive faster than the writer polls (every 0.5 to 5 ms) are coalesced into one snapshot whose boundary
//! is the latest signal's.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering::*};

use crate::state;
use crate::{config, exit, loader, own_tls, record, socket, sys};

/// The signal's previous disposition, written once by the constructor before our handler is
/// installed and only read afterwards.
struct OldAction {
    set: AtomicBool,
    action: UnsafeCell<MaybeUninit<libc::sigaction>>,
}

// SAFETY: `action` is written once, before `set` is released and before the handler that reads
// it can run; it is never written again.
unsafe impl Sync for OldAction {}

static OLD: OldAction = OldAction { set: AtomicBool::new(false), action: UnsafeCell::new(MaybeUninit::uninit()) };

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn constructor() {
    let _ = std::panic::catch_unwind(|| {
        quiet_panics();
        state::PROCESS_PID.store(sys::getpid_raw(), Release);
        own_tls::register();
        loader::init_real_dlsym();
        // SAFETY: registering plain functions as the fork handlers.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
        exit::register_quick_exit();
        exit::register_last_handler();
        config::take_run_fd();
        config::take_run_stderr();
        if let Some(sig) = config::snapshot_signal() {
            install(sig);
        }
    });
}

/// Every panic inside the shim is caught (no panic crosses the FFI boundary); this hook makes
/// the first one print one line on stderr instead of Rust's multi-line message, and later ones
/// nothing. It is this library's own copy of std's hook: a Rust program we run in keeps its own.
fn quiet_panics() {
    static SAID: AtomicBool = AtomicBool::new(false);
    std::panic::set_hook(Box::new(|info| {
        if !SAID.swap(true, Relaxed) {
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            // Cancellation off around the `write`, a cancellation point: the free path runs
            // with the program's cancellation state (record::free_begin).
            crate::sys::no_cancel(|| {
                eprintln!("gpushim: internal error{at}; that event was not recorded, the program goes on");
            });
        }
    }));
}

/// Installs the snapshot handler for `sig`, unless the signal is ignored: a disposition
/// inherited from a parent that ignores it (`nohup`-like launchers, or a program that ignores it
/// before exec'ing children) must stay ignored, because a handler is reset to the default
/// action across `exec` while "ignored" is inherited. That process takes no snapshots.
fn install(sig: c_int) {
    // SAFETY: zeroed sigaction is a valid value to receive the current disposition.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (NULL new action) into a valid out-pointer.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) } == 0 && cur.sa_sigaction == libc::SIG_IGN {
        return;
    }
    // SAFETY: zeroed sigaction is a valid "no handler, empty mask" value; we fill what we use.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_signal as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: sa_mask is a valid sigset to empty.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: OLD.action is written here only, before OLD.set is released; `sa` is valid.
    let rc = unsafe { libc::sigaction(sig, &sa, (*OLD.action.get()).as_mut_ptr()) };
    if rc == 0 {
        OLD.set.store(true, Release);
    }
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    state::ask_snapshot();
    if !OLD.set.load(Acquire) {
        return;
    }
    // SAFETY: set once before the handler was installed (see OldAction).
    let old = unsafe { (*OLD.action.get()).assume_init_ref() };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN || h == on_signal as *const () as usize {
        return;
    }
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the earlier handler was installed with SA_SIGINFO, so it has this type.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler takes the signal number only.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// No shim thread may be inside `dl_iterate_phdr` when the process forks (see
/// `loader::fork_lock`): wait for any that is, and keep others out until the fork is done.
extern "C" fn before_fork() {
    loader::fork_lock();
}

extern "C" fn after_fork_in_parent() {
    loader::fork_unlock();
}

/// In a forked child only the forking thread exists: forget the parent's writer, channel,
/// socket and counters; the child starts its own collector at its first event.
extern "C" fn after_fork_in_child() {
    state::PROCESS_PID.store(sys::getpid_raw(), Release);
    loader::fork_lock_reset();
    socket::close_after_fork();
    record::reset_after_fork();
    // The parent's exit may have waited already; the child's exit has its own budget.
    crate::state::EXIT_WAITED_NS.store(0, std::sync::atomic::Ordering::Release);
}
