//! The exit's reachability scan before the program's exit handlers: asked for when `main`
//! returns and when the program calls `exit()` (exports/start.rs), and in a Python program right
//! after the exit heap walk (python/heap), while the containers that hold the program's pointers
//! for its whole run are still whole. The writer makes the exit's scan once.

use std::sync::atomic::Ordering::*;
use std::time::Duration;

use crate::event::Msg;
use crate::state::{self, ENABLED, STATE, TRACED_PID};
use crate::{config, sys};

/// The exit's reachability scan, asked of the writer and waited for (bounded as the exit path
/// is), before the program's atexit handlers and C++ static destructors run: the containers
/// that hold the program's pointers for its whole run are still whole. Made once: a later call,
/// and the exit path, make no other. Only in the process that started tracing. Never inlined:
/// the scan reads the calling thread's stack from this frame up.
#[inline(never)]
pub fn now() {
    let here = 0u8;
    sys::guarded(|| {
        if !config::reachability() || STATE.load(Acquire) != ENABLED || TRACED_PID.load(Acquire) != sys::getpid_raw() {
            return;
        }
        let Some(tx) = state::channel() else { return };
        // When the program's own work ended: the collector measures growth up to here.
        let ts_ns = sys::now_ns();
        state::EXIT_SP.store(std::hint::black_box(&here) as *const u8 as u64, Release);
        state::EXIT_TID.store(sys::gettid(), Release);
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let now = std::time::Instant::now();
        // What is left of the exit's one budget (`GPUSHIM_EXIT_TIMEOUT`), which the exit path
        // then shares: the time waited here is taken from it.
        let wait = left_to_wait().min(Duration::from_millis(config::reachability_ms()) + Duration::from_secs(5));
        let deadline = now.checked_add(wait).unwrap_or(now + Duration::from_secs(60));
        if tx.send_deadline(Msg::ExitScan { done: done_tx, ts_ns }, deadline).is_ok() {
            let _ = done_rx.recv_deadline(deadline);
        }
        let waited = u64::try_from(now.elapsed().as_nanos()).unwrap_or(u64::MAX);
        state::EXIT_WAITED_NS.fetch_add(waited, AcqRel);
    });
}

/// What is left of `GPUSHIM_EXIT_TIMEOUT` for the exit's waits, after the time the exit's
/// scan already waited ([`now`]): the whole exit waits at most `GPUSHIM_EXIT_TIMEOUT`
/// (with a collector that stopped reading, the scan's wait and the exit path's each ran the
/// whole timeout). Loads atomics only: the signal-safe path calls it.
pub fn left_to_wait() -> Duration {
    config::exit_timeout().saturating_sub(Duration::from_nanos(state::EXIT_WAITED_NS.load(Acquire)))
}
