//! The event on its way from a hook to the writer thread: private to the shim, small, and
//! turned into wire events by the writer.

use crossbeam_channel::Sender;
use gpushim_wire::{Api, Kind};

/// The Python frames of an event, innermost first; `None` when its thread had none.
pub type PyFrames = Option<Box<[gpushim_wire::PyFrame]>>;

/// An event on its way to the writer thread.
pub enum Msg {
    /// A successful allocation.
    /// `py`: the thread's Python frames, innermost first, if it has any (see `python`).
    /// `stamp`: the time as `clock::stamp` gives it (counter ticks or ns), made ns by the writer.
    Alloc {
        seq: u64,
        stamp: u64,
        addr: u64,
        size: u64,
        kind: Kind,
        api: Api,
        device: i32,
        stream: u64,
        tid: u32,
        frames: Box<[u64]>,
        py: PyFrames,
        ctx: u64,
        /// The stack is the same as the previous `Alloc` with frames from this `tid`, and
        /// `frames` and `py` are empty (see `last_stack`).
        same: bool,
        /// The program's activity when it was recorded (`state::ACTIVITY`), its low 32 bits
        /// (the message stays within its ring slot's size); the writer extends it.
        activity: u32,
    },
    /// A free call and its result; `stamp` as in `Alloc`.
    Free { seq: u64, stamp: u64, addr: u64, api: Api, stream: u64, tid: u32, result: i32 },
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
    /// A context torn down by `api`: `device`'s primary one, or `ctx` (not 0).
    Reset { seq: u64, ts_ns: u64, device: i32, api: Api, tid: u32, ctx: u64 },
    /// A context `ctx` of `device` the program created.
    ContextCreated { seq: u64, ts_ns: u64, ctx: u64, device: i32, api: Api, tid: u32 },
    /// A successful `cuMemMap` of `[addr, addr + size)` to `handle`.
    Map { seq: u64, ts_ns: u64, addr: u64, size: u64, handle: u64, tid: u32 },
    /// A `cuMemUnmap` of `[addr, addr + size)` and its result.
    Unmap { seq: u64, ts_ns: u64, addr: u64, size: u64, tid: u32, result: i32 },
    /// A handle retained (`addr`: the address asked about) or imported (`addr`: the OS handle).
    HandleRef { seq: u64, ts_ns: u64, handle: u64, addr: u64, api: Api, device: i32, tid: u32 },
    /// A graph allocation node created (explicitly, or by a stream-ordered allocation on a
    /// capturing stream): not live until a launch.
    GraphNode {
        seq: u64,
        ts_ns: u64,
        addr: u64,
        size: u64,
        kind: Kind,
        api: Api,
        device: i32,
        graph: u64,
        stream: u64,
        tid: u32,
        frames: Box<[u64]>,
        py: PyFrames,
    },
    /// A graph with memory nodes instantiated: its allocation nodes and freed addresses.
    GraphExec {
        seq: u64,
        ts_ns: u64,
        exec: u64,
        graph: u64,
        api: Api,
        auto_free: bool,
        tid: u32,
        frames: Box<[u64]>,
        py: PyFrames,
        /// The allocation nodes and the freed addresses (boxed: the channel's slots stay small).
        nodes: Box<(Vec<gpushim_wire::GraphAlloc>, Vec<u64>)>,
    },
    /// A launch of an executable graph with memory nodes.
    /// `activity`: as an `Alloc`'s (the launch makes the graph's allocations live).
    GraphLaunch { seq: u64, ts_ns: u64, exec: u64, api: Api, stream: u64, tid: u32, activity: u32 },
    /// An executable graph with memory nodes destroyed.
    GraphExecDestroy { seq: u64, ts_ns: u64, exec: u64, api: Api, tid: u32 },
    /// A device's graph memory trimmed.
    GraphMemTrim { seq: u64, ts_ns: u64, device: i32, api: Api, tid: u32 },
    /// The name of thread `tid` at its first allocation event: `len` bytes of `name`
    /// (`pthread_getname_np`), sent once per thread before that event.
    ThreadName { tid: u32, name: [u8; 16], len: u8 },
    /// The result of a heap walk (python/heap.rs), or a walk given up.
    HeapWalk(gpushim_wire::HeapWalk),
    /// A snapshot asked for through the C API (`api.rs`), answered on `reply` (boxed: the
    /// channel's slots stay small).
    ApiSnapshot(Box<ApiRequest>),
    /// The exit path (at `ts_ns`, monotonic ns): send `Exit`, flush, close, then set
    /// `state::EXIT_DONE`. Nothing allocates on the exiting thread's side.
    Exit { ts_ns: u64 },
    /// The program's own work ended at `ts_ns` (`main` returned, `exit()` was called, the
    /// Python exit walk is done): make the exit's reachability scan now, before the exit
    /// handlers or the interpreter's teardown free what it reads (the
    /// exit path then makes none), then count it in `state::EXIT_SCANS_DONE`. Nothing allocates
    /// on the asking thread's side.
    ExitScan { ts_ns: u64 },
    /// `_exit`, `_Exit` or `quick_exit` (no atexit handlers run): send `Exit`, flush, then set
    /// `state::QUICK_EXIT_DONE`. Nothing allocates on the exiting thread's side.
    QuickExit { ts_ns: u64 },
}

/// The answer to an [`ApiRequest`]: the snapshot file's path (bytes, as the collector wrote
/// it), or the collector's reason for not writing it.
pub type SnapshotReply = Result<Vec<u8>, String>;

/// A snapshot asked for through `gpushim_snapshot` (`api.rs`).
pub struct ApiRequest {
    /// The snapshot holds exactly the events with `seq < boundary`.
    pub boundary: u64,
    /// Monotonic clock at the request, ns.
    pub ts_ns: u64,
    /// The label, already sanitized (`api::sanitize_label`); empty for none.
    pub label: String,
    /// The absolute directory for the snapshot's files (`gpushim_snapshot_in`); empty for the
    /// collector's output directory.
    pub dir: String,
    /// Where the writer answers with the file's path once the collector confirmed it.
    pub reply: Sender<SnapshotReply>,
}
