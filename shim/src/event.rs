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
        ctx: u64,
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
    /// A context torn down by `api`: `device`'s primary one, or `ctx` (not 0).
    Reset { seq: u64, ts_ns: u64, device: i32, api: Api, tid: u32, ctx: u64 },
    /// A context `ctx` of `device` the program created.
    ContextCreated { seq: u64, ts_ns: u64, ctx: u64, device: i32, api: Api, tid: u32 },
    /// The result of a heap walk (python/heap.rs), or a walk given up.
    HeapWalk(gpushim_wire::HeapWalk),
    /// The exit path (at `ts_ns`, monotonic ns): send `Exit`, flush, close, then answer on `done`.
    Exit { ts_ns: u64, done: Sender<()> },
    /// `_exit`, `_Exit` or `quick_exit` (no atexit handlers run): send `Exit`, flush, then set
    /// `state::QUICK_EXIT_DONE`. Nothing allocates on the exiting thread's side.
    QuickExit { ts_ns: u64 },
}
