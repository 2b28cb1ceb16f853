//! The process-wide state of tracing: the state machine, sequence numbers, the channel to the
//! writer, the traced process, and the snapshot requests the signal handler leaves for the
//! writer. Atomics only: every item here may be read from a signal handler.
//!
//! State machine (one byte, [`STATE`]):
//! `UNINIT` → (first event) `STARTING` → `ENABLED` → `FINISHED` (exit path ran) or `DISABLED`
//! (the collector could not be started or went away). A forked child goes back to `UNINIT`.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering::*};

use crossbeam_channel::{SendTimeoutError, Sender, TrySendError};

use crate::event::Msg;

/// No event recorded yet; nothing started.
pub const UNINIT: u8 = 0;
/// One thread is starting the writer and the collector; others wait for it.
pub const STARTING: u8 = 1;
/// Recording.
pub const ENABLED: u8 = 2;
/// Recording stopped for good (collector missing or gone); hooks only forward.
pub const DISABLED: u8 = 3;
/// The exit path sent its last event; hooks only forward.
pub const FINISHED: u8 = 4;

/// The tracing state.
pub static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Next sequence number (see the wire crate's docs for the ordering rule).
pub static SEQ: AtomicU64 = AtomicU64::new(0);
/// The program's activity: kernel launches, graph launches and memsets seen so far (the hooks
/// of `hook.rs`'s `count()` shape and the graph launches'). Each allocation's record carries
/// the count at that moment (wire's `Activity`).
pub static ACTIVITY: AtomicU64 = AtomicU64::new(0);
/// The process that started tracing (0 before); a vfork or fork child that calls `_exit`
/// is not it.
pub static TRACED_PID: AtomicI32 = AtomicI32::new(0);
/// The exiting thread's stack pointer in the exit path, and its thread id (exit.rs): the
/// reachability scan reads that thread's stack from there up only.
pub static EXIT_SP: AtomicU64 = AtomicU64::new(0);
pub static EXIT_TID: AtomicU32 = AtomicU32::new(0);
/// Set by the writer once a [`Msg::QuickExit`] is flushed.
pub static QUICK_EXIT_DONE: AtomicBool = AtomicBool::new(false);
/// Set by the writer once a [`Msg::Exit`] is flushed and the collector has read the stream.
pub static EXIT_DONE: AtomicBool = AtomicBool::new(false);
/// Exit scans asked for ([`Msg::ExitScan`] sent), and answered by the writer: an asker waits
/// until the answers reach its own number.
pub static EXIT_SCANS_ASKED: AtomicU64 = AtomicU64::new(0);
pub static EXIT_SCANS_DONE: AtomicU64 = AtomicU64::new(0);
/// This process's id as the shim knows it: set when the library loads and in a forked child
/// (fork handlers). A vfork child, which runs none, differs from it (exports/start.rs).
pub static PROCESS_PID: AtomicI32 = AtomicI32::new(0);
/// The writer thread's kernel thread id (0 before it runs), for the exit path's waits
/// (`exit_scan::wait_for_writer`).
pub static WRITER_TID: AtomicU32 = AtomicU32::new(0);
/// Nanoseconds the exit has already waited for the writer before the exit path (the exit's
/// scan at the end of `main` or at `exit()`, exit_scan.rs): the exit path waits only what is
/// left of `GPUSHIM_EXIT_TIMEOUT`, so that the whole exit waits at most that long.
pub static EXIT_WAITED_NS: AtomicU64 = AtomicU64::new(0);

/// Snapshot requests received (by the signal handler, or from the collector: [`ask_snapshot`])
/// since tracing started in this process.
pub static SNAP_REQUESTS: AtomicU64 = AtomicU64::new(0);
/// Sequence number at the latest request: the snapshot holds the events before it.
pub static SNAP_BOUNDARY: AtomicU64 = AtomicU64::new(0);
/// Monotonic time of the latest request, ns.
pub static SNAP_TS: AtomicU64 = AtomicU64::new(0);

/// Asks for a snapshot of the events numbered so far, which the writer takes at its next turn
/// (`writer::answers`). Atomics only: the signal handler calls it.
pub fn ask_snapshot() {
    if recording() {
        SNAP_BOUNDARY.store(SEQ.load(Acquire), Release);
        SNAP_TS.store(crate::sys::now_ns(), Release);
        SNAP_REQUESTS.fetch_add(1, AcqRel);
    }
}

/// The sender half of the channel to the writer; null unless `ENABLED`. Leaked on purpose:
/// hooks on other threads may hold a reference at any time.
static CHANNEL: AtomicPtr<Sender<Msg>> = AtomicPtr::new(std::ptr::null_mut());

/// The channel to the writer, if tracing has started (it is never freed).
pub fn channel() -> Option<&'static Sender<Msg>> {
    // SAFETY: CHANNEL is null or a leaked Box that is never freed.
    unsafe { CHANNEL.load(Acquire).as_ref() }
}

/// Sends `msg` to the writer, waiting while the channel is full until `deadline_ns`
/// (`sys::now_ns`'s clock; `u64::MAX`: for ever) by polling (`sys::poll_until`): never the
/// channel's blocking send, which registers a thread-local destructor on the calling thread, a
/// program thread, that its `exit()` would run (see `per_thread`). No allocation.
pub fn send_until(tx: &Sender<Msg>, msg: Msg, deadline_ns: u64) -> Result<(), SendTimeoutError<Msg>> {
    let mut msg = Some(msg);
    let sent = crate::sys::poll_until(deadline_ns, || match tx.try_send(msg.take()?) {
        Ok(()) => Some(Ok(())),
        Err(TrySendError::Disconnected(m)) => Some(Err(SendTimeoutError::Disconnected(m))),
        Err(TrySendError::Full(m)) => {
            msg = Some(m);
            None
        }
    });
    match (sent, msg) {
        (Some(r), _) => r,
        (None, Some(m)) => Err(SendTimeoutError::Timeout(m)),
        // Unreachable: a message not sent is kept.
        (None, None) => Ok(()),
    }
}

/// Publishes the channel to the writer (before `STATE` becomes `ENABLED`).
pub fn set_channel(tx: Sender<Msg>) {
    CHANNEL.store(Box::into_raw(Box::new(tx)), Release);
}

/// True while events are recorded or about to be (not `DISABLED` nor `FINISHED`).
pub fn recording() -> bool {
    let st = STATE.load(Acquire);
    st != DISABLED && st != FINISHED
}

/// In a forked child (single-threaded at that point): forget the parent's writer and counters.
/// The channel is leaked, not freed: the parent's writer thread does not exist here.
pub fn reset_after_fork() {
    CHANNEL.store(std::ptr::null_mut(), Release);
    SEQ.store(0, Relaxed);
    TRACED_PID.store(0, Relaxed);
    QUICK_EXIT_DONE.store(false, Relaxed);
    EXIT_DONE.store(false, Relaxed);
    EXIT_SCANS_ASKED.store(0, Relaxed);
    EXIT_SCANS_DONE.store(0, Relaxed);
    WRITER_TID.store(0, Relaxed);
    SNAP_REQUESTS.store(0, Relaxed);
    SNAP_BOUNDARY.store(0, Relaxed);
    SNAP_TS.store(0, Relaxed);
    if STATE.load(Relaxed) != DISABLED {
        STATE.store(UNINIT, Release);
    }
}
