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
use std::time::Duration;

use crate::event::Msg;
use crate::state::{self, ENABLED, FINISHED, QUICK_EXIT_DONE, STATE, TRACED_PID};
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
    let deadline = sys::now_ns().saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
    while !QUICK_EXIT_DONE.load(Acquire) && sys::now_ns() < deadline {
        // SAFETY: sched_yield has no arguments; async-signal-safe.
        unsafe { libc::sched_yield() };
    }
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
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        // The whole wait, queueing included, is bounded: with a collector that stopped
        // reading, the channel may be full (other threads wait in their hooks), and a plain
        // send would keep the program from exiting.
        // A timeout too large for the clock ("wait for ever") waits for ever in practice.
        let now = std::time::Instant::now();
        let deadline = now.checked_add(exit_scan::left_to_wait()).unwrap_or(now + Duration::from_secs(1 << 40));
        let sent = tx.send_deadline(Msg::Exit { ts_ns: sys::now_ns(), done: done_tx }, deadline);
        STATE.store(FINISHED, Release);
        // Only a wait that ran out means a late report. A writer that is gone (its channel
        // disconnected, the request dropped unanswered) lost the collector, which it said in
        // its own line as it stopped, and no report is coming: no second line.
        let timed_out = match sent {
            Ok(()) => matches!(done_rx.recv_deadline(deadline), Err(crossbeam_channel::RecvTimeoutError::Timeout)),
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
    let secs = config::exit_timeout().as_secs();
    let name = format!("gpushim-{}.json", sys::getpid_raw());
    let place = config::output_dir().map_or(name.clone(), |d| d.join(&name).display().to_string());
    eprintln!(
        "gpushim: the collector has not finished after {secs} s (GPUSHIM_EXIT_TIMEOUT); the report will be late: \
         {place} when it finishes (else in $TMPDIR)"
    );
}
