//! The hot path: the re-entrancy guard, the tracing state machine, sequence numbers, backtrace
//! capture, and the hand-off of small events to the writer thread through a bounded channel.
//!
//! State machine (one byte, [`STATE`]):
//! `UNINIT` → (first event) `STARTING` → `ENABLED` → `FINISHED` (exit path ran) or `DISABLED`
//! (the collector could not be started or went away). A forked child goes back to `UNINIT`.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

use crossbeam_channel::Sender;
use gpushim_wire::{Api, Kind};

use crate::{real, writer};

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
/// The sender half of the channel to the writer; null unless `ENABLED`. Leaked on purpose:
/// hooks on other threads may hold a reference at any time.
static CHANNEL: AtomicPtr<Sender<Msg>> = AtomicPtr::new(std::ptr::null_mut());
/// Whether to capture backtraces (`GPUSHIM_BACKTRACE=0` turns them off).
pub static BACKTRACES: AtomicBool = AtomicBool::new(true);
/// Whether to use the cached unwinder (`GPUSHIM_UNWIND=libgcc` selects libgcc's instead).
pub static FAST_UNWIND: AtomicBool = AtomicBool::new(true);
/// Most frames kept per backtrace (`GPUSHIM_MAX_FRAMES`, 1 to 256, default 64).
pub static MAX_FRAMES: AtomicUsize = AtomicUsize::new(64);

/// Set by the writer once a [`Msg::QuickExit`] is flushed.
pub static QUICK_EXIT_DONE: AtomicBool = AtomicBool::new(false);
/// The process that started tracing (0 before); a vfork or fork child that calls `_exit`
/// is not it.
pub static TRACED_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Device ordinal placeholder: ask the driver for the current context's device.
pub const DEV_CURRENT: i32 = i32::MIN;

thread_local! {
    /// Intercepted calls in progress on this thread (0 or 1).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Cached kernel thread id; 0 until read. Reset in a forked child.
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The Python frames of an event, innermost first; `None` when its thread had none.
pub type PyFrames = Option<Box<[gpushim_wire::PyFrame]>>;

/// An event on its way to the writer thread (private to the shim; the writer turns it into
/// wire events).
pub enum Msg {
    /// A successful allocation.
    /// `py`: the thread's Python frames, innermost first, if it has any (see `python`).
    Alloc {
        seq: u64,
        ts_ns: u64,
        addr: u64,
        size: u64,
        kind: Kind,
        api: Api,
        device: i32,
        stream: u64,
        tid: u32,
        frames: Box<[u64]>,
        py: PyFrames,
    },
    /// A free call and its result.
    Free { seq: u64, ts_ns: u64, addr: u64, api: Api, stream: u64, tid: u32, result: i32 },
    /// A failed allocation, with the device's free/total memory for out-of-memory failures.
    Failed {
        seq: u64,
        ts_ns: u64,
        size: u64,
        kind: Kind,
        api: Api,
        device: i32,
        tid: u32,
        frames: Box<[u64]>,
        py: PyFrames,
        result: i32,
        mem: Option<(u64, u64)>,
    },
    /// The exit path (at `ts_ns`, monotonic ns): send `Exit`, flush, close, then answer on `done`.
    Exit { ts_ns: u64, done: Sender<()> },
    /// `_exit`, `_Exit` or `quick_exit` (no atexit handlers run): send `Exit`, flush, then set
    /// [`QUICK_EXIT_DONE`]. Nothing allocates on the exiting thread's side.
    QuickExit { ts_ns: u64 },
}

/// Proof that this thread is inside the outermost intercepted call; dropping it leaves.
pub struct Guard(());

impl Guard {
    /// `Some` if and only if this call should be recorded: no intercepted call is already in
    /// progress on this thread and recording has not stopped.
    pub fn enter() -> Option<Guard> {
        let st = STATE.load(Acquire);
        if st == DISABLED || st == FINISHED {
            return None;
        }
        DEPTH
            .try_with(|d| {
                if d.get() > 0 {
                    None
                } else {
                    d.set(1);
                    Some(Guard(()))
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}

/// Monotonic clock, ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no arguments and cannot fail.
            t.set(unsafe { libc::syscall(libc::SYS_gettid) } as u32);
        }
        t.get()
    })
    .unwrap_or(0)
}

/// Called in a forked child (single-threaded at that point): forget the parent's writer.
pub fn reset_after_fork() {
    let _ = TID.try_with(|t| t.set(0));
    let _ = DEPTH.try_with(|d| d.set(0));
    CHANNEL.store(std::ptr::null_mut(), Release);
    crate::python::reset_after_fork();
    SEQ.store(0, Relaxed);
    TRACED_PID.store(0, Relaxed);
    QUICK_EXIT_DONE.store(false, Relaxed);
    let st = STATE.load(Relaxed);
    if st != DISABLED {
        STATE.store(UNINIT, Release);
    }
}

/// The channel to the writer, starting the writer and the collector on first use; `None` if
/// recording is off.
fn sender() -> Option<&'static Sender<Msg>> {
    loop {
        match STATE.load(Acquire) {
            ENABLED => {
                // SAFETY: CHANNEL is set before STATE becomes ENABLED and never freed.
                return unsafe { CHANNEL.load(Acquire).as_ref() };
            }
            UNINIT => {
                if STATE.compare_exchange(UNINIT, STARTING, AcqRel, Acquire).is_ok() {
                    match writer::start() {
                        Some(tx) => {
                            CHANNEL.store(Box::into_raw(Box::new(tx)), Release);
                            STATE.store(ENABLED, Release);
                        }
                        None => STATE.store(DISABLED, Release),
                    }
                }
            }
            STARTING => std::thread::yield_now(),
            _ => return None,
        }
    }
}

/// Hands `msg` to the writer, waiting only while the bounded channel is full.
pub fn send(tx: &Sender<Msg>, msg: Msg) {
    // An error means the writer is gone and has already said so.
    let _ = tx.send(msg);
}

/// The calling thread's backtrace as return addresses, innermost first, without this
/// library's frames; empty when backtraces are off.
fn capture() -> Box<[u64]> {
    if !BACKTRACES.load(Relaxed) {
        return Box::new([]);
    }
    let max = MAX_FRAMES.load(Relaxed).clamp(1, 256);
    // Room for our own frames (hook, record, capture), which are stripped below.
    let mut raw = [0u64; 256 + 16];
    let got = if FAST_UNWIND.load(Relaxed) { crate::unwind::capture(&mut raw[..max + 16]) } else { 0 };
    if got > 0 {
        let own = raw[..got].iter().take_while(|&&a| real::is_own(a as usize)).count();
        let n = (got - own).min(max);
        return raw[own..own + n].into();
    }
    // No fast unwinder (other architectures, or no unwind rule for our own frame): libgcc's.
    let mut buf = [0u64; 256];
    let mut n = 0usize;
    let mut ours = true;
    // SAFETY: trace_unsynchronized only requires that no other thread unwinds through the
    // backtrace crate's own global state at the same time; it reads this thread's stack.
    // libgcc's unwinder, which it uses, is thread-safe.
    unsafe {
        backtrace::trace_unsynchronized(|f| {
            let ip = f.ip() as usize;
            if ip == 0 {
                return false;
            }
            if ours && real::is_own(ip) {
                return true;
            }
            ours = false;
            buf[n] = ip as u64;
            n += 1;
            n < max
        })
    };
    buf[..n].into()
}

fn guarded(f: impl FnOnce()) {
    no_cancel(|| {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    });
}

/// Runs `f` with this thread's cancellation disabled. The shim's own work has cancellation
/// points (starting the collector closes descriptors, the writer's exit handshake reads): a
/// `pthread_cancel` acted on there would unwind through Rust frames that cannot be unwound by
/// a foreign (forced) unwind, and glibc aborts the whole process (seen: SIGABRT when a thread
/// was cancelled during its first allocations). A pending cancel is acted on at the program's
/// next cancellation point instead.
fn no_cancel<T>(f: impl FnOnce() -> T) -> T {
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

/// Records the outcome of an allocation call: a live allocation if `result` is 0 and `addr` is
/// not 0, a failure if `result` is not 0, nothing for a zero-size success with a NULL result.
/// `device` may be [`DEV_CURRENT`].
pub fn alloc(api: Api, kind: Kind, result: i32, addr: u64, size: u64, device: i32, stream: u64) {
    guarded(|| {
        if result == 0 && addr == 0 {
            return;
        }
        let Some(tx) = sender() else { return };
        let device = if device == DEV_CURRENT { real::current_device() } else { device };
        let frames = capture();
        // One relaxed load when the process runs no (supported) Python.
        let py = crate::python::capture();
        let ts_ns = now_ns();
        let tid = tid();
        let seq = SEQ.fetch_add(1, AcqRel);
        let msg = if result == 0 {
            Msg::Alloc { seq, ts_ns, addr, size, kind, api, device, stream, tid, frames, py }
        } else {
            // CUDA_ERROR_OUT_OF_MEMORY and cudaErrorMemoryAllocation are both 2.
            let mem = if result == 2 { real::mem_info() } else { None };
            Msg::Failed { seq, ts_ns, size, kind, api, device, tid, frames, py, result, mem }
        };
        send(tx, msg);
    });
}

/// A free in progress: its sequence number is taken before the real call.
pub struct FreeTicket {
    tx: &'static Sender<Msg>,
    seq: u64,
}

/// Takes the sequence number for a free of `addr` (0 frees nothing and is not recorded).
pub fn free_begin(addr: u64) -> Option<FreeTicket> {
    if addr == 0 {
        return None;
    }
    no_cancel(|| {
        std::panic::catch_unwind(|| {
            let tx = sender()?;
            Some(FreeTicket { tx, seq: SEQ.fetch_add(1, AcqRel) })
        })
        .ok()
        .flatten()
    })
}

/// Records the free whose ticket was taken, with the real call's result.
pub fn free_end(t: Option<FreeTicket>, api: Api, addr: u64, stream: u64, result: i32) {
    let Some(t) = t else { return };
    guarded(|| {
        let msg = Msg::Free { seq: t.seq, ts_ns: now_ns(), addr, api, stream, tid: tid(), result };
        send(t.tx, msg);
    });
}

/// The exit path of `_exit`/`_Exit`/`quick_exit`, which may be called from a signal handler
/// (crash handlers do): only a non-blocking send of a small message and a bounded wait on an
/// atomic, no allocation and no lock; and only in the process that started tracing (a vfork
/// child shares our memory but is not that process).
pub fn quick_finish(timeout: std::time::Duration) {
    // SAFETY: getpid has no arguments and cannot fail.
    let me = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    if STATE.load(Acquire) != ENABLED || TRACED_PID.load(Acquire) != me {
        return;
    }
    // SAFETY: see `sender`.
    let Some(tx) = (unsafe { CHANNEL.load(Acquire).as_ref() }) else { return };
    if tx.try_send(Msg::QuickExit { ts_ns: now_ns() }).is_err() {
        return;
    }
    STATE.store(FINISHED, Release);
    let deadline = now_ns().saturating_add(timeout.as_nanos() as u64);
    while !QUICK_EXIT_DONE.load(Acquire) && now_ns() < deadline {
        // SAFETY: sched_yield has no arguments; async-signal-safe.
        unsafe { libc::sched_yield() };
    }
}

/// The exit path: asks the writer to send `Exit`, flush and close, and waits for it (bounded
/// by `timeout`), so that the collector's report is complete.
pub fn finish(timeout: std::time::Duration) {
    guarded(|| {
        if STATE.load(Acquire) != ENABLED {
            return;
        }
        // SAFETY: see `sender`.
        let Some(tx) = (unsafe { CHANNEL.load(Acquire).as_ref() }) else { return };
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        // The whole wait, queueing included, is bounded: with a collector that stopped
        // reading, the channel may be full (other threads wait in their hooks), and a plain
        // send would keep the program from exiting.
        let deadline = std::time::Instant::now() + timeout;
        let queued = tx.send_deadline(Msg::Exit { ts_ns: now_ns(), done: done_tx }, deadline).is_ok();
        STATE.store(FINISHED, Release);
        if queued {
            let _ = done_rx.recv_deadline(deadline);
        }
    });
}
