//! The hot path: the re-entrancy guard, sequence numbers, backtrace capture, and the hand-off
//! of events to the writer thread: a thread's `Alloc`, `Free`, `Failed` and `ThreadName` through
//! its own ring (`ring`), the rare others through a bounded channel. The first event starts
//! tracing (the writer thread and the collector).

use std::cell::Cell;
use std::sync::atomic::Ordering::*;

use crossbeam_channel::{Sender, TrySendError};
use gpushim_wire::{Api, Kind};

use crate::event::Msg;
use crate::ring::{self, Ring};
use crate::state::{self, DISABLED, ENABLED, FINISHED, SEQ, STARTING, STATE, UNINIT};
use crate::{clock, config, inflight, last_stack, loader, own_tls, python, real, sys, unwind, writer};

pub use crate::real::DEV_CURRENT;

thread_local! {
    /// Intercepted calls in progress on this thread (0 or 1).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Cached kernel thread id; 0 until read. Reset in a forked child.
    static TID: Cell<u32> = const { Cell::new(0) };
    /// Whether this thread's name was sent (once per thread, before its first allocation
    /// event, after that allocation's stack was taken). Reset in a forked child, whose
    /// collector has not heard it.
    static NAMED: Cell<bool> = const { Cell::new(false) };
}

/// Sends thread `tid`'s name the first time this thread records an allocation site: one
/// `pthread_getname_np` of the calling thread (glibc answers it with `prctl(PR_GET_NAME)`, no
/// file read) per thread, cached as a flag in the thread's own state.
/// `named`: whether it was already sent, as [`guarded_alloc`] read it (true also once the
/// thread's storage is being torn down).
fn announce_thread(tx: &Sender<Msg>, ring: Option<&Ring>, tid: u32, named: bool) {
    if named {
        return;
    }
    let _ = NAMED.try_with(|n| n.set(true));
    // Linux thread names are at most 15 bytes and a NUL (pthread_setname_np(3)).
    let mut buf = [0u8; 16];
    // SAFETY: `buf` is writable for its 16 bytes, the size passed; the thread is the caller.
    let rc = unsafe { libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr().cast(), buf.len()) };
    let len = if rc == 0 { buf.iter().position(|&b| b == 0).unwrap_or(buf.len()) } else { 0 };
    send_hot(tx, ring, Msg::ThreadName { tid, name: buf, len: len as u8 });
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

fn tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            t.set(sys::gettid());
            own_tls::register();
        }
        t.get()
    })
    .unwrap_or(0)
}

/// Called in a forked child (single-threaded at that point): forget the parent's writer.
pub fn reset_after_fork() {
    let _ = TID.try_with(|t| t.set(0));
    let _ = NAMED.try_with(|n| n.set(false));
    let _ = DEPTH.try_with(|d| d.set(0));
    python::reset_after_fork();
    last_stack::forget();
    inflight::reset_after_fork();
    ring::reset_after_fork();
    state::reset_after_fork();
}

/// The channel to the writer, starting the writer and the collector on first use; `None` if
/// recording is off.
fn sender() -> Option<&'static Sender<Msg>> {
    loop {
        match STATE.load(Acquire) {
            ENABLED => return state::channel(),
            UNINIT => {
                if STATE.compare_exchange(UNINIT, STARTING, AcqRel, Acquire).is_ok() {
                    match writer::start() {
                        Some(tx) => {
                            state::set_channel(tx);
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

/// For the C API (`api.rs`), outside any hook: starts tracing if it has not started, then
/// queues the message `make` builds (after the start, so that it may read the sequence
/// counter). False if recording is off.
pub fn send_starting(make: impl FnOnce() -> Msg) -> bool {
    let Some(_guard) = Guard::enter() else { return false };
    let Some(tx) = sender() else { return false };
    send(tx, make());
    true
}

/// Hands `msg` to the writer through the calling thread's ring (see [`send_hot`]).
fn send(tx: &Sender<Msg>, msg: Msg) {
    send_hot(tx, ring::mine(), msg);
}

/// Hands `msg` to the writer through the channel, waiting only while the bounded channel is
/// full.
fn send_channel(tx: &Sender<Msg>, msg: Msg) {
    // An error means the writer is gone and has already said so.
    match tx.try_send(msg) {
        Err(TrySendError::Full(msg)) => {
            // A full channel is where a child made by a raw fork system call (no fork handler
            // ran: it still has the parent's channel, and no writer thread) would block for
            // ever; such a child stops recording instead. Checked only here, off the fast path.
            if state::TRACED_PID.load(Acquire) != sys::getpid_raw() {
                STATE.store(DISABLED, Release);
                return;
            }
            let _ = state::send_until(tx, msg, u64::MAX);
        }
        Ok(()) | Err(TrySendError::Disconnected(_)) => {}
    }
}

/// Hands an event to the writer through `ring`, the calling thread's (so that the writer sees
/// the thread's events in the order it made them), or through the channel when the thread has
/// none (its thread-local storage is being torn down) or is in the middle of a push (a hook
/// run by a signal handler).
#[inline]
fn send_hot(tx: &Sender<Msg>, ring: Option<&Ring>, msg: Msg) {
    let msg = match ring {
        Some(r) => match ring::push(r, msg) {
            Ok(()) => return,
            Err(msg) => msg,
        },
        None => msg,
    };
    send_channel(tx, msg);
}

/// The calling thread's backtrace as return addresses, innermost first, without this
/// library's frames; empty when backtraces are off.
fn capture() -> Box<[u64]> {
    let mut raw = [std::mem::MaybeUninit::<u64>::uninit(); unwind::MEMO_FRAMES];
    capture_into(&mut raw).0.into()
}

/// [`capture`] into `raw` (room for the frames kept and our own), without a heap allocation,
/// and the fast unwinder's generation of the walk (`unwind::Walk::gen`; `None` from libgcc's).
fn capture_into(
    raw: &mut [std::mem::MaybeUninit<u64>; unwind::MEMO_FRAMES],
) -> (std::borrow::Cow<'_, [u64]>, Option<u64>) {
    if !config::backtraces() || !unwind::safe_to_unwind() {
        return (std::borrow::Cow::Borrowed(&[]), None);
    }
    let max = config::max_frames().clamp(1, 256);
    // Room for our own frames (hook, record, capture), which are stripped below. Not zeroed:
    // 2 KiB of memset per call was a fifth of the shim's instructions on the pool-hit loop
    // (callgrind, docs/performance.md); the unwinder initializes what it reports.
    let walk = if config::fast_unwind() {
        unwind::capture(&mut raw[..max + 16], config::unwind_cache())
    } else {
        unwind::Walk { n: 0, gen: None }
    };
    let got = walk.n;
    if got > 0 {
        // SAFETY: `unwind::capture` initialized `raw[..got]`.
        let raw = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u64>(), got) };
        let (lo, hi) = loader::own_range();
        let own = raw.iter().take_while(|&&a| (a as usize) >= lo && (a as usize) < hi).count();
        let n = (got - own).min(max);
        return (std::borrow::Cow::Borrowed(&raw[own..own + n]), walk.gen);
    }
    (std::borrow::Cow::Owned(capture_libgcc(max).into_vec()), None)
}

/// The backtrace by libgcc's unwinder: when there is no fast unwinder (other architectures, or
/// no unwind rule for our own frame), or `GPUSHIM_UNWIND=libgcc`.
#[inline(never)]
fn capture_libgcc(max: usize) -> Box<[u64]> {
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
            if ours && loader::is_own(ip) {
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

/// The stack of an allocation: native frames, Python frames, and whether they are the same as
/// the thread's previous allocation's (`last_stack`; then both are empty). Only a successful
/// allocation sent through the thread's ring (`ok`) takes part. Its buffers (3 KiB) are in
/// this function's frame, not in the caller's, which starts the writer and the collector on
/// the first event (on a thread whose stack may be 16 KiB).
#[inline(never)]
fn alloc_stack(ok: bool) -> (Box<[u64]>, crate::event::PyFrames, bool) {
    let mut raw = [std::mem::MaybeUninit::<u64>::uninit(); unwind::MEMO_FRAMES];
    let (native, gen) = capture_into(&mut raw);
    // One relaxed load when the process runs no (supported) Python.
    let cache = config::unwind_cache();
    let mut py_raw;
    let py = if python::ready() {
        py_raw = [gpushim_wire::PyFrame { code: 0, offset: 0, entry: false }; python::MAX_PY_FRAMES];
        python::capture_into(&mut py_raw, cache).map(|n| &py_raw[..n])
    } else {
        None
    };
    // The same stack as this thread's previous allocation: no frames sent (`last_stack`).
    let same = ok && cache && last_stack::same_as_last(&native, gen, py);
    if same {
        (Box::new([]), None, true)
    } else {
        (native.into(), py.map(Into::into), false)
    }
}

/// Runs the recording of a successful allocation: with cancellation left as the program has it
/// once this thread has recorded an allocation while tracing runs (the two
/// `pthread_setcancelstate` calls, each a locked compare-exchange in glibc, are left out of
/// the free path the same way, see [`free_begin`]); else, and for failures (which ask the
/// driver for its free memory), with cancellation off as everywhere ([`sys::guarded`]).
/// Panics are caught either way.
///
/// Why no cancellation point is reached then: the work done once per thread or per process
/// that may read files (the stack's bounds, read from `/proc/self/maps` for the main thread by
/// `pthread_getattr_np`; starting the writer and the collector) was done by that first
/// allocation, under [`sys::no_cancel`]; what is left is the free path's list (atomics, the
/// clock, `syscall`s, heap blocks, the loader's lock in `dladdr1` and `dl_iterate_phdr`, which
/// POSIX does not make cancellation points) and the reads of the unwinder and of the Python
/// frames.
/// `f` is given whether this thread's name was sent already (`NAMED`, read once here for both).
fn guarded_alloc(ok: bool, f: impl FnOnce(bool)) {
    let named = NAMED.try_with(Cell::get).ok();
    let warm = ok && named == Some(true) && STATE.load(Acquire) == ENABLED;
    let named = named.unwrap_or(true);
    if warm {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(named)));
    } else {
        sys::guarded(|| f(named));
    }
}

/// Records the outcome of an allocation call: a live allocation if `result` is 0 and `addr` is
/// not 0, a failure if `result` is not 0, nothing for a zero-size success with a NULL result.
/// `device` may be [`DEV_CURRENT`].
pub fn alloc(api: Api, kind: Kind, result: i32, addr: u64, size: u64, device: i32, stream: u64) {
    guarded_alloc(result == 0, |named| {
        if result == 0 && addr == 0 {
            return;
        }
        let Some(tx) = sender() else { return };
        let mut device = real::device_of(device, result == 0);
        if result == 0 && matches!(api, Api::CudaMallocFromPoolAsync | Api::CuMemAllocFromPoolAsync) {
            // A pool's memory is on the pool's location, which may be another device than
            // the stream's (`cuMemPoolCreate`'s `location`); the pointer tells it.
            if let Some(d) = real::pointer_device(addr) {
                device = d;
            }
        }
        // Which context: needed only once the program has made one of its own (see
        // `contexts`); until then every allocation is in a primary context. Stream-ordered
        // (pool) memory and VMM memory belong to a device, not to a context: 0, which the
        // collector counts with the device's primary context.
        let device_level = matches!(
            api,
            Api::CudaMallocAsync
                | Api::CudaMallocFromPoolAsync
                | Api::CuMemAllocAsync
                | Api::CuMemAllocFromPoolAsync
                | Api::CuMemCreate
        );
        let ctx = if result == 0 && !device_level && real::contexts_created() {
            real::current_context().map_or(0, |c| c as u64)
        } else {
            0
        };
        // The ring first: the writer remembers a thread's previous stack per ring, so an
        // allocation that goes through the channel (no ring) always carries its frames.
        let ring = ring::mine().filter(|r| !r.busy());
        crate::probe::probe!(Prepare);
        let (frames, py, same) = alloc_stack(result == 0 && ring.is_some());
        crate::probe::probe!(Stack);
        // Counter ticks or ns (`clock`); the writer turns it into ns.
        let stamp = clock::stamp();
        let tid = tid();
        let seq = SEQ.fetch_add(1, AcqRel);
        crate::probe::probe!(Stamp);
        let msg = if result == 0 {
            let activity = crate::state::ACTIVITY.load(std::sync::atomic::Ordering::Relaxed) as u32;
            Msg::Alloc { seq, stamp, addr, size, kind, api, device, stream, tid, frames, py, ctx, same, activity }
        } else {
            // CUDA_ERROR_OUT_OF_MEMORY and cudaErrorMemoryAllocation are both 2; the free and
            // total memory are those of the device the allocation was for. Not asked on a
            // stream capturing into a graph, where the shim makes no call the capture may not
            // support (see `exports::hook_body!`'s `async_alloc`).
            let capturing = real::capturing(stream as *mut std::ffi::c_void);
            let mem = if result == 2 && !capturing { real::mem_info_of(device, stream) } else { None };
            Msg::Failed { seq, ts_ns: sys::now_ns(), size, kind, api, device, tid, frames, py, result, mem }
        };
        announce_thread(tx, ring, tid, named);
        send_hot(tx, ring, msg);
        crate::probe::probe!(Push);
    });
}

/// Records that a context was torn down by `api` (after the call returned): the primary context
/// of `device` when `ctx` is 0, else the context `ctx` (`device` -1 where unknown).
pub fn reset(api: Api, device: i32, ctx: u64) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::Reset { seq, ts_ns: sys::now_ns(), device, api, tid: tid(), ctx });
    });
}

/// Records a context `ctx` of `device` that the program created with `api`. From now on every
/// allocation carries its context.
pub fn context_created(api: Api, ctx: u64, device: i32) {
    real::note_context_created();
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::ContextCreated { seq, ts_ns: sys::now_ns(), ctx, device, api, tid: tid() });
    });
}

/// Records a successful `cuMemMap` of `[addr, addr + size)` to `handle` (after the call).
pub fn map(addr: u64, size: u64, handle: u64) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::Map { seq, ts_ns: sys::now_ns(), addr, size, handle, tid: tid() });
    });
}

/// Records a successful retain or import (`api`) that returned `handle` (after the call);
/// `addr` is the retained address or the OS handle, `device` the memory's ordinal or -1.
pub fn handle_ref(api: Api, handle: u64, addr: u64, device: i32) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::HandleRef { seq, ts_ns: sys::now_ns(), handle, addr, api, device, tid: tid() });
    });
}

/// Takes the sequence number of a `cuMemUnmap` of `[addr, addr + size)` before the real call,
/// as a free does (a range unmapped and mapped again by another thread is then unmapped first
/// in sequence order), and marks it in progress for snapshots, the size in the mark's stream.
pub fn unmap_begin(addr: u64, size: u64) -> Option<FreeTicket> {
    free_begin(Api::CuMemUnmap, addr, size)
}

/// Records the `cuMemUnmap` whose ticket was taken, with the real call's result.
pub fn unmap_end(t: Option<FreeTicket>, addr: u64, size: u64, result: i32) {
    let Some(t) = t else { return };
    sys::guarded(|| {
        let msg = Msg::Unmap { seq: t.seq, ts_ns: sys::now_ns(), addr, size, tid: tid(), result };
        send(t.tx, msg);
        inflight::end();
    });
}

/// Records a graph allocation node made by `api` at virtual address `addr` (`size` bytes):
/// known, not live (see `exports::graphs`). `graph` is 0 for a node made by stream capture,
/// whose capturing `stream` is given instead. `device` may be [`DEV_CURRENT`].
#[allow(clippy::too_many_arguments)]
pub fn graph_node(api: Api, kind: Kind, addr: u64, size: u64, device: i32, graph: u64, stream: u64) {
    sys::guarded(|| {
        if addr == 0 {
            return;
        }
        let Some(tx) = sender() else { return };
        let device = real::device_of(device, true);
        let frames = capture();
        let py = python::capture();
        let ts_ns = sys::now_ns();
        let tid = tid();
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::GraphNode { seq, ts_ns, addr, size, kind, api, device, graph, stream, tid, frames, py });
    });
}

/// Records that `api` instantiated `graph` as `exec`, whose allocation nodes are `allocs` and
/// whose free nodes free `frees` (after the call succeeded).
pub fn graph_exec(
    api: Api,
    exec: u64,
    graph: u64,
    auto_free: bool,
    allocs: Vec<gpushim_wire::GraphAlloc>,
    frees: Vec<u64>,
) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let frames = capture();
        let py = python::capture();
        let ts_ns = sys::now_ns();
        let tid = tid();
        let seq = SEQ.fetch_add(1, AcqRel);
        let nodes = Box::new((allocs, frees));
        send(tx, Msg::GraphExec { seq, ts_ns, exec, graph, api, auto_free, tid, frames, py, nodes });
    });
}

/// Records a successful launch of the executable graph `exec` into `stream`: no backtrace,
/// one small event.
pub fn graph_launch(api: Api, exec: u64, stream: u64) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        let activity = crate::state::ACTIVITY.load(std::sync::atomic::Ordering::Relaxed) as u32;
        send(tx, Msg::GraphLaunch { seq, ts_ns: sys::now_ns(), exec, api, stream, tid: tid(), activity });
    });
}

/// Records that the executable graph `exec` was destroyed.
pub fn graph_exec_destroy(api: Api, exec: u64) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::GraphExecDestroy { seq, ts_ns: sys::now_ns(), exec, api, tid: tid() });
    });
}

/// Records that `api` trimmed `device`'s graph memory.
pub fn graph_trim(api: Api, device: i32) {
    sys::guarded(|| {
        let Some(tx) = sender() else { return };
        let seq = SEQ.fetch_add(1, AcqRel);
        send(tx, Msg::GraphMemTrim { seq, ts_ns: sys::now_ns(), device, api, tid: tid() });
    });
}

/// A free in progress: its sequence number is taken before the real call.
pub struct FreeTicket {
    tx: &'static Sender<Msg>,
    seq: u64,
}

/// Takes the sequence number for a free of `addr` by `api` (0 frees nothing and is not
/// recorded), and marks the free as in progress for the writer's snapshots (see `inflight`).
///
/// Cancellation is left as the program has it once tracing runs (no
/// `pthread_setcancelstate` calls on the free's way in or out): nothing on
/// the free path is then a cancellation point (atomics, `gettid` and `getpid` by `syscall`,
/// the clock, a heap block for the thread's ring or in-progress slot, and `futex` by `syscall`
/// when the ring or the channel is full; the panic hook's one line turns cancellation off
/// itself). Before the start, which starts the collector, it is turned off as everywhere.
pub fn free_begin(api: Api, addr: u64, stream: u64) -> Option<FreeTicket> {
    if addr == 0 {
        return None;
    }
    let take = || {
        std::panic::catch_unwind(|| {
            let tx = sender()?;
            let seq = SEQ.fetch_add(1, AcqRel);
            inflight::begin(seq, addr, api, stream, tid());
            Some(FreeTicket { tx, seq })
        })
        .ok()
        .flatten()
    };
    if STATE.load(Acquire) == ENABLED {
        take()
    } else {
        sys::no_cancel(take)
    }
}

/// Records the free whose ticket was taken, with the real call's result. A ticket means that
/// tracing had started: cancellation is left as it is (see [`free_begin`]), panics are caught.
pub fn free_end(t: Option<FreeTicket>, api: Api, addr: u64, stream: u64, result: i32) {
    let Some(t) = t else { return };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let msg = Msg::Free { seq: t.seq, stamp: clock::stamp(), addr, api, stream, tid: tid(), result };
        send_hot(t.tx, ring::mine(), msg);
        inflight::end();
    }));
}
