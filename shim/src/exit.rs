//! The end of the stream when the program ends: an `atexit` handler for `exit()`, an
//! `at_quick_exit` handler, and the signal-safe path of `_exit`/`_Exit` (exports/quick.rs).
//! Each asks the writer to send `Exit` and waits, bounded by `GPUSHIM_EXIT_TIMEOUT`, so that the
//! collector's report exists when the program is gone.

use std::sync::atomic::{AtomicBool, Ordering::*};

use crate::event::Msg;
use crate::state::{self, ENABLED, FINISHED, QUICK_EXIT_DONE, STATE, TRACED_PID};
use crate::{config, sys};

static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Registers the exit handlers, once per process image (a forked child inherits them).
pub fn register() {
    if !REGISTERED.swap(true, AcqRel) {
        extern "C" {
            /// C11 / glibc; not in the libc crate.
            fn at_quick_exit(f: extern "C" fn()) -> libc::c_int;
        }
        // SAFETY: registering plain extern "C" functions with no arguments.
        unsafe {
            libc::atexit(at_exit);
            at_quick_exit(at_quick);
        }
    }
}

extern "C" fn at_exit() {
    finish();
}

extern "C" fn at_quick() {
    quick_finish();
}

/// The exit path of `_exit`/`_Exit`/`quick_exit`, which may be called from a signal handler
/// (crash handlers do): only a non-blocking send of a small message and a bounded wait on an
/// atomic, no allocation and no lock; and only in the process that started tracing (a vfork
/// child shares our memory but is not that process).
pub fn quick_finish() {
    let timeout = config::exit_timeout();
    if STATE.load(Acquire) != ENABLED || TRACED_PID.load(Acquire) != sys::getpid_raw() {
        return;
    }
    let Some(tx) = state::channel() else { return };
    if tx.try_send(Msg::QuickExit { ts_ns: sys::now_ns() }).is_err() {
        return;
    }
    STATE.store(FINISHED, Release);
    let deadline = sys::now_ns().saturating_add(timeout.as_nanos() as u64);
    while !QUICK_EXIT_DONE.load(Acquire) && sys::now_ns() < deadline {
        // SAFETY: sched_yield has no arguments; async-signal-safe.
        unsafe { libc::sched_yield() };
    }
}

/// The exit path: asks the writer to send `Exit`, flush and close, and waits for it (bounded
/// by `GPUSHIM_EXIT_TIMEOUT`), so that the collector's report is complete.
pub fn finish() {
    sys::guarded(|| {
        if STATE.load(Acquire) != ENABLED {
            return;
        }
        let Some(tx) = state::channel() else { return };
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        // The whole wait, queueing included, is bounded: with a collector that stopped
        // reading, the channel may be full (other threads wait in their hooks), and a plain
        // send would keep the program from exiting.
        let deadline = std::time::Instant::now() + config::exit_timeout();
        let queued = tx.send_deadline(Msg::Exit { ts_ns: sys::now_ns(), done: done_tx }, deadline).is_ok();
        STATE.store(FINISHED, Release);
        if queued {
            let _ = done_rx.recv_deadline(deadline);
        }
    });
}
