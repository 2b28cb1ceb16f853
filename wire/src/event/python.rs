//! The events of a CPython program: the interpreter, code objects, Python stacks and the heap
//! walk of who holds the memory.

use crate::WireError;

/// The target runs CPython and its Python frames are recorded (sent once, before the first
/// [`PyStack`]). Stacks sent without a [`PyStack`] then had no Python frames on their thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyRuntime {
    /// The interpreter's `PY_VERSION_HEX` (`0x030C03F0` is 3.12.3 final).
    pub version: u32,
}

/// How a [`PyCode`]'s line table is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineTableFormat {
    /// CPython 3.10's `co_linetable` (PEP 626): pairs of (unsigned byte-offset delta, signed
    /// line delta), line delta -128 meaning "no line".
    Pep626 = 1,
    /// CPython 3.11+'s location table `co_linetable` (PEP 657; `Objects/locations.md`).
    Pep657 = 2,
}

impl LineTableFormat {
    pub(crate) fn from_u8(v: u8) -> Result<LineTableFormat, WireError> {
        match v {
            1 => Ok(LineTableFormat::Pep626),
            2 => Ok(LineTableFormat::Pep657),
            _ => Err(WireError::BadValue("line table format", u64::from(v))),
        }
    }
}

/// A Python code object (one function body, class body or module), sent once per id before the
/// first [`PyStack`] that names it. Copied by the shim while the code object was alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyCode {
    /// Identifier, dense from 0 within one stream.
    pub id: u32,
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    pub name: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// Encoding of `linetable`.
    pub linetable_format: LineTableFormat,
    /// `co_linetable`'s bytes (possibly cut short: offsets past its end have no line).
    pub linetable: Vec<u8>,
}

/// One Python frame of a [`PyStack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// The [`PyCode`] id.
    pub code: u32,
    /// Byte offset of the executing instruction in the code's bytecode; [`PY_NO_OFFSET`] before
    /// the first instruction (the line is then `firstlineno`).
    pub offset: u32,
    /// True if and only if this frame is the outermost one run by its native call of the
    /// interpreter loop (`_PyEval_EvalFrameDefault`): frames from the previous entry frame (or
    /// the innermost) up to this one stand where that native frame stands.
    pub entry: bool,
}

/// [`PyFrame::offset`] of a frame that has not started its first instruction.
pub const PY_NO_OFFSET: u32 = u32::MAX;

/// The Python frames of the thread that made the allocations of stack `id`, innermost first,
/// sent right after that [`Stack`]; on a PyTorch autograd engine thread, which runs no Python of
/// its own, those of the thread that waits for its backward pass (the shim's
/// `python/borrow.rs`), outer to every native frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyStack {
    /// The stack id (of a [`Stack`] already sent).
    pub id: u32,
    /// Innermost first.
    pub frames: Vec<PyFrame>,
}

/// Which report a [`HeapWalk`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WalkReason {
    /// The snapshot of the same number (`gpushim-<pid>-snapshot-<n>.json`).
    Snapshot = 1,
    /// The out-of-memory report of the same number (`gpushim-<pid>-oom-<n>.json`), counted in
    /// the order the shim saw the failures.
    Oom = 2,
    /// The final report of a normal exit (walked from a Python `atexit` callback).
    Exit = 3,
}

impl WalkReason {
    pub(crate) fn from_u8(v: u8) -> Result<WalkReason, WireError> {
        Ok(match v {
            1 => WalkReason::Snapshot,
            2 => WalkReason::Oom,
            3 => WalkReason::Exit,
            _ => return Err(WireError::BadValue("walk reason", u64::from(v))),
        })
    }
}

/// How a [`HeapWalk`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WalkStatus {
    /// The walk visited everything reachable.
    Complete = 0,
    /// The walk stopped at its time cap (`GPUSHIM_HEAP_WALK_MS`); the result holds what was
    /// found until then.
    Cut = 1,
    /// The walk did not start within its cap: the main thread ran no Python code (blocked in
    /// native code). No result; a late start is skipped.
    Blocked = 2,
    /// The walker itself failed (an internal error, caught), or could not be scheduled; no
    /// result.
    Failed = 3,
    /// Not started: another walk was still waiting to start or running.
    Skipped = 4,
}

impl WalkStatus {
    pub(crate) fn from_u8(v: u8) -> Result<WalkStatus, WireError> {
        Ok(match v {
            0 => WalkStatus::Complete,
            1 => WalkStatus::Cut,
            2 => WalkStatus::Blocked,
            3 => WalkStatus::Failed,
            4 => WalkStatus::Skipped,
            _ => return Err(WireError::BadValue("walk status", u64::from(v))),
        })
    }
}

/// The result of a walk of the Python heap inside the target (CPython only): the objects that
/// own GPU memory and what keeps each alive. Sent once per walk, after the [`Snapshot`] (or the
/// failed allocation, or before [`Exit`]) it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapWalk {
    /// Which report it completes.
    pub reason: WalkReason,
    /// The snapshot's or out-of-memory report's number n (from 1); 0 for [`WalkReason::Exit`].
    pub number: u32,
    /// How it went.
    pub status: WalkStatus,
    /// Monotonic clock when the walk started (or was given up), ns.
    pub ts_ns: u64,
    /// How long the walk took, ns (for `Blocked`: how long the shim waited for it to start).
    pub elapsed_ns: u64,
    /// Python objects visited.
    pub visited: u64,
    /// The walker's result, JSON (`{"objects": […], "holders": […]}`, see the collector's
    /// `holders` module); empty when there is none.
    pub result: String,
}
