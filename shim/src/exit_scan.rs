//! The exit's reachability scan before the program's exit handlers: asked for when `main`
//! returns and when the program calls `exit()` (exports/start.rs), and in a Python program right
//! after the exit heap walk (python/heap), while the containers that hold the program's pointers
//! for its whole run are still whole. The writer makes the exit's scan once.

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Duration;

use crate::event::Msg;
use crate::state::{self, ENABLED, EXIT_SCANS_ASKED, EXIT_SCANS_DONE, STATE, TRACED_PID};
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
        if STATE.load(Acquire) != ENABLED || TRACED_PID.load(Acquire) != sys::getpid_raw() || !config::reachability() {
            return;
        }
        let Some(tx) = state::channel() else { return };
        // When the program's own work ended: the collector measures growth up to here.
        let ts_ns = sys::now_ns();
        state::EXIT_SP.store(std::hint::black_box(&here) as *const u8 as u64, Release);
        state::EXIT_TID.store(sys::gettid(), Release);
        // What is left of the exit's one budget (`GPUSHIM_EXIT_TIMEOUT`), which the exit path
        // then shares: the time waited here is taken from it.
        let wait = left_to_wait().min(Duration::from_millis(config::reachability_ms()) + Duration::from_secs(5));
        let deadline = sys::deadline_after(wait);
        // No allocation, no lock and no blocking channel operation on this thread: `exit()`
        // may be called from a signal handler that interrupted `malloc` (per_thread).
        let mine = EXIT_SCANS_ASKED.fetch_add(1, AcqRel) + 1;
        if state::send_until(tx, Msg::ExitScan { ts_ns }, deadline).is_ok() {
            wait_for_writer(deadline, || EXIT_SCANS_DONE.load(Acquire) >= mine);
        }
        let waited = sys::now_ns().saturating_sub(ts_ns);
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

/// How the exit path's wait for the writer ended ([`wait_for_writer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// What was waited for happened, or the writer thread has ended (nothing more will).
    Done,
    /// The deadline passed.
    Late,
    /// The writer thread waits on a lock, not on the collector ([`STUCK_NS`]).
    Stuck,
}

/// How long the writer thread may wait in one `futex` on the same word, other than its idle
/// sleep's, before the exit path stops waiting for it: it waits for a lock the exiting thread
/// may hold itself. An `exit()` called from a signal handler that interrupted `malloc` holds
/// that arena's lock for ever, and the writer's next allocation or free of a block of that arena
/// (its thread cache mixes blocks of every arena) waits for it: the exit then waited for the
/// whole `GPUSHIM_EXIT_TIMEOUT`.
pub const STUCK_NS: u64 = 2_000_000_000;

/// The futex word the writer was seen stuck on (0: none), kept so that a later wait of the
/// same exit gives up at once if the writer still waits there.
static STUCK_ON: AtomicU64 = AtomicU64::new(0);

/// Waits (polling, `sys::poll_until`) until `done()`, the writer thread's end, the deadline,
/// or the writer stuck on a lock ([`STUCK_NS`]). No allocation, no lock: the exit path, signal
/// handlers included, waits here.
pub fn wait_for_writer(deadline_ns: u64, done: impl Fn() -> bool) -> Waited {
    // (the futex word the writer waits on, since when)
    let mut seen: (u64, u64) = (0, 0);
    let stuck_on = STUCK_ON.load(Acquire);
    let got = sys::poll_until(deadline_ns, || {
        if done() || crate::ring::writer_has_ended() {
            return Some(Waited::Done);
        }
        let word = writer_waits_on();
        if word == 0 {
            seen = (0, 0);
            return None;
        }
        if word == stuck_on {
            return Some(Waited::Stuck);
        }
        let now = sys::now_ns();
        if seen.0 != word {
            seen = (word, now);
        } else if now.saturating_sub(seen.1) >= STUCK_NS {
            STUCK_ON.store(word, Release);
            return Some(Waited::Stuck);
        }
        None
    });
    got.unwrap_or(Waited::Late)
}

/// The futex word the writer thread waits on now, other than its idle sleep's: from
/// `/proc/self/task/<tid>/syscall` (`202 0x<address> …` while in `futex`), read with raw system
/// calls into a buffer on the stack. 0 if it waits on none, or it cannot be read.
fn writer_waits_on() -> u64 {
    let tid = state::WRITER_TID.load(Acquire);
    if tid == 0 {
        return 0;
    }
    let mut path = sys::Line::new();
    let _ = std::fmt::Write::write_fmt(&mut path, format_args!("/proc/self/task/{tid}/syscall\0"));
    let mut buf = [0u8; 128];
    let n = sys::read_file_raw(path.bytes_so_far(), &mut buf);
    let mut words = buf[..n].split(|&b| b == b' ' || b == b'\n');
    let nr = words.next().and_then(|w| std::str::from_utf8(w).ok()).and_then(|w| w.parse::<i64>().ok());
    if nr != Some(libc::SYS_futex) {
        return 0;
    }
    let addr = words
        .next()
        .and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| w.strip_prefix("0x"))
        .and_then(|w| u64::from_str_radix(w, 16).ok())
        .unwrap_or(0);
    if addr == crate::ring::writer_sleep_word() {
        0
    } else {
        addr
    }
}
