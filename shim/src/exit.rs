//! The end of the stream when the program ends: this library's destructor for `exit()`, an
//! `at_quick_exit` handler, and the signal-safe path of `_exit`/`_Exit` (exports/quick.rs).
//! Each asks the writer to send `Exit` and waits, bounded by `GPUSHIM_EXIT_TIMEOUT`, so that the
//! collector's report exists when the program is gone.
//!
//! The exit's reachability scan comes earlier, before the program's exit handlers
//! (`exit_scan.rs`): when `main` returns or the program calls `exit()` (exports/start.rs), and
//! in a Python program right after the exit heap walk. Only when none of those ran does the
//! destructor's exit path make it, after the handlers.

use std::sync::atomic::Ordering::*;

use crate::event::Msg;
use crate::state::{self, ENABLED, EXIT_DONE, FINISHED, QUICK_EXIT_DONE, STATE, TRACED_PID};
use crate::{config, exit_scan, sys};

/// Registers the `at_quick_exit` handler; called once by the library's constructor, so that
/// the program's own handlers, registered later, run before it (they run in reverse order).
pub fn register_quick_exit() {
    extern "C" {
        /// C11 / glibc; not in the libc crate.
        fn at_quick_exit(f: extern "C" fn()) -> libc::c_int;
    }
    // SAFETY: registering a plain extern "C" function with no arguments.
    unsafe { at_quick_exit(at_quick) };
}

extern "C" fn at_quick() {
    quick_finish();
}

/// Registers [`at_last`] as an exit handler; called once by the library's constructor, which
/// the loader runs before the program's start code: before `__libc_start_main` registers the
/// loader's `_dl_fini` (which runs [`DESTRUCTOR`]), so it runs after it, last of all.
pub fn register_last_handler() {
    extern "C" {
        /// The C++ ABI's exit handler registration (glibc); not in the libc crate.
        fn __cxa_atexit(
            f: extern "C" fn(*mut libc::c_void),
            arg: *mut libc::c_void,
            dso: *mut libc::c_void,
        ) -> libc::c_int;
        /// This library's handle (crtbegin.o): the handler is dropped if the library is unloaded.
        static __dso_handle: u8;
    }
    // SAFETY: registering a plain function with no argument, for this library.
    unsafe { __cxa_atexit(at_last, std::ptr::null_mut(), std::ptr::addr_of!(__dso_handle) as *mut libc::c_void) };
}

/// The end of the stream at the end of `exit()` where no destructor ran before: a program
/// without glibc's start code (`-nostartfiles`: nothing registered `_dl_fini`, so no library's
/// destructor runs at its exit, and its report said "killed"). Otherwise [`at_unload`] ran
/// already and this does nothing.
extern "C" fn at_last(_: *mut libc::c_void) {
    if STATE.load(Acquire) == ENABLED {
        at_unload();
    }
}

/// The end of `exit()`: the loader runs this library's destructor (`.fini_array`, from its
/// `_dl_fini`, itself registered before every `atexit` handler) after every `atexit` handler and
/// C++ static destructor, whenever they were registered, and after the executable's own
/// destructors: the program's last frees there are in the stream. The destructors of the
/// libraries the executable links, and of `dlopen`ed ones, run after this one (measured with
/// glibc 2.36; a documented limit in docs/guarantees.md).
#[used]
#[link_section = ".fini_array"]
static DESTRUCTOR: extern "C" fn() = at_unload;

extern "C" fn at_unload() {
    if TRACED_PID.load(Acquire) != sys::getpid_raw() {
        // A vfork child's exit shares our memory: nothing of its parent's is touched.
        return;
    }
    // Where the program's frames end on this thread: the reachability scan of the exit
    // (`reach`) reads this thread's stack from here up, not the shim's frames below (the
    // exit path's own channel, whose padding holds stale bytes).
    let here = 0u8;
    state::EXIT_SP.store(std::hint::black_box(&here) as *const u8 as u64, Release);
    state::EXIT_TID.store(sys::gettid(), Release);
    finish();
    crate::probe::probe!(report);
}

/// The exit path of `_exit`/`_Exit`/`quick_exit`, which may be called from a signal handler
/// (crash handlers do): only a non-blocking send of a small message and a bounded wait on an
/// atomic, no allocation and no lock; and only in the process that started tracing (a vfork
/// child shares our memory but is not that process).
pub fn quick_finish() {
    let timeout = exit_scan::left_to_wait();
    if STATE.load(Acquire) != ENABLED || TRACED_PID.load(Acquire) != sys::getpid_raw() {
        return;
    }
    let Some(tx) = state::channel() else { return };
    if tx.try_send(Msg::QuickExit { ts_ns: sys::now_ns() }).is_err() {
        return;
    }
    STATE.store(FINISHED, Release);
    exit_scan::wait_for_writer(sys::deadline_after(timeout), || QUICK_EXIT_DONE.load(Acquire));
}

/// The exit path: asks the writer to send `Exit`, flush and close, and waits for it (bounded
/// by `GPUSHIM_EXIT_TIMEOUT`), so that the collector's report is complete. Never inlined: its
/// frame must lie below the caller's (see `at_unload`).
#[inline(never)]
pub fn finish() {
    sys::guarded(|| {
        // Only in the process that started tracing: a child made by a raw fork system call
        // (crash handlers make them) ran no fork handler and has a copy of our channel, which
        // no writer thread reads there.
        if STATE.load(Acquire) != ENABLED || TRACED_PID.load(Acquire) != sys::getpid_raw() {
            return;
        }
        let Some(tx) = state::channel() else { return };
        // The whole wait, queueing included, is bounded: with a collector that stopped
        // reading, the channel may be full (other threads wait in their hooks), and a plain
        // send would keep the program from exiting. No allocation, no lock and no blocking
        // channel operation on this thread: `exit()` may be called from a signal handler that
        // interrupted `malloc` (per_thread).
        let deadline = sys::deadline_after(exit_scan::left_to_wait());
        let sent = state::send_until(tx, Msg::Exit { ts_ns: sys::now_ns() }, deadline);
        STATE.store(FINISHED, Release);
        // Only a wait that ran out means a late report. A writer that is gone (its channel
        // disconnected, or it ended without answering) lost the collector, which it said in
        // its own line as it stopped, and no report is coming: no second line.
        // A writer stuck on a lock this thread may hold (exit_scan::wait_for_writer) will
        // not send the rest: the report says "killed", and no line promises it.
        let timed_out = match sent {
            Ok(()) => exit_scan::wait_for_writer(deadline, || EXIT_DONE.load(Acquire)) == exit_scan::Waited::Late,
            Err(e) => e.is_timeout(),
        };
        if timed_out {
            say_the_report_is_late();
        }
    });
}

/// One line when the exit path stopped waiting for the collector: the report comes later, when
/// the collector has read the rest of the stream, and where. (Not said on the signal-safe path
/// of `_exit`, which may not format or allocate.)
fn say_the_report_is_late() {
    use std::fmt::Write;
    use std::os::unix::ffi::OsStrExt;
    // On the stack (`sys::Line`): the exit path may run where allocating would hang.
    let mut line = sys::Line::new();
    let secs = config::exit_timeout().as_secs();
    let _ = write!(
        line,
        "gpushim: the collector has not finished after {secs} s (GPUSHIM_EXIT_TIMEOUT); the report will be late: "
    );
    // The directory shortened on its own (`sys::LINE_PATH_MAX`): the file's name is whole.
    if let Some(d) = config::output_dir() {
        line.path(d.as_os_str().as_bytes());
        let _ = line.write_str("/");
    }
    let _ = write!(line, "gpushim-{}.json", sys::getpid_raw());
    let _ = line.write_str(" when it finishes (else in $TMPDIR)");
    line.emit();
}
