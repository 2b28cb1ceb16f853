//! Python frames: when the target runs CPython (3.10 to 3.13), the allocating thread's Python
//! frames are read straight from the interpreter's structures and sent with its native stack.
//!
//! How, and why it is safe without the GIL:
//! - The thread state comes from `PyGILState_GetThisThreadState()`, which only reads a
//!   thread-specific key (`pthread_getspecific`): it never blocks, never allocates, and stays set
//!   while the thread has released the GIL (PyTorch and ctypes release it around native calls;
//!   the "current thread state" TLS is NULL then).
//! - The allocating thread is inside native code called from its own innermost Python frame, so
//!   its own frame chain cannot change under us: only that thread pushes and pops its frames, and
//!   each frame holds a strong reference to its code object. We read nothing else of the
//!   interpreter, take no lock of it and call nothing else in it.
//! - Every pointer is checked cheaply before it is followed (non-null, 8-byte aligned, in the
//!   user half of the address space; code objects and strings by their type pointer against the
//!   addresses of `PyCode_Type`/`PyUnicode_Type`/`PyBytes_Type`). When anything looks wrong the
//!   event gets no Python frames.
//! - The raw capture is small: per frame a code id and the byte offset of the executing
//!   instruction. A code object may be freed by the time the writer thread runs, so on first
//!   sight (cache keyed by its address, checked against its `co_firstlineno` and its name,
//!   file name and line table pointers) what the report needs is copied into a cache owned by
//!   this library: file name, qualified name, first line and the line table bytes. The collector
//!   decodes line numbers.
//! - A process without libpython pays one relaxed atomic load per allocation.
//!
//! Layouts: 3.10, 3.11 and 3.12 from per-version tables (each offset names its header and
//! struct; `scripts/python-layouts/probe.sh` prints them from a version's own headers); 3.13
//! from the interpreter's published `_PyRuntime.debug_offsets` (`_Py_DebugOffsets`). Any other
//! version, a free-threaded or debug build, or a failed self-check: native frames only, said once
//! on stderr and in the report's notes.

mod bfs;
mod borrow;
mod cache;
mod detect;
mod fast;
pub mod heap;
mod layout;
mod walk;

use crate::race_once::RaceOnce;
use std::sync::atomic::{AtomicU8, Ordering::*};

use gpushim_wire::{LineTableFormat, PyFrame};

pub use cache::code_info;
use layout::Layout;
use walk::Raw;
pub(crate) use walk::MAX_PY_FRAMES;

/// Not looked for yet.
const UNPROBED: u8 = 0;
/// No libpython in the process (looked for again when a new `libpython*` module appears).
const ABSENT: u8 = 1;
/// Python frames are captured.
const READY: u8 = 2;
/// libpython is there but its layout is not one we know (said once).
const UNSUPPORTED: u8 = 3;
/// Switched off (`GPUSHIM_PYTHON=0` or backtraces off).
const OFF: u8 = 4;

/// Where Python frame capture stands; the hot path reads only this until it is `READY`.
static MODE: AtomicU8 = AtomicU8::new(UNPROBED);
/// The interpreter's layout; set once, before `MODE` becomes `READY`.
static LAYOUT: RaceOnce<Layout> = RaceOnce::new();
/// The line said once when the layout is not supported.
static UNSUPPORTED_NOTE: RaceOnce<String> = RaceOnce::new();
/// `[start, end)` of a function's code, bytes.
pub(crate) type CodeRange = (u64, u64);
/// The code of the interpreter loop (`_PyEval_EvalFrameDefault`), when known.
static EVAL_RANGE: RaceOnce<CodeRange> = RaceOnce::new();

/// The Python frames of the calling thread, innermost first, or `None` if it has none (or they
/// could not be read, or no supported Python runs here). Costs one relaxed load without Python.
#[inline]
pub fn capture() -> Option<Box<[PyFrame]>> {
    if MODE.load(Relaxed) != READY {
        return None;
    }
    capture_slow()
}

#[inline(never)]
fn capture_slow() -> Option<Box<[PyFrame]>> {
    let mut out = [PyFrame { code: 0, offset: 0, entry: false }; MAX_PY_FRAMES];
    let n = capture_into_slow(&mut out, false)?;
    Some(out[..n].into())
}

/// Whether Python frames are captured (one relaxed load).
#[inline]
pub fn ready() -> bool {
    MODE.load(Relaxed) == READY
}

/// [`capture`] into `out`, without a heap allocation: the number of frames written, or `None`.
/// `memo`: use this thread's memos of its previous capture (`fast`, `cache::MEMO`;
/// `GPUSHIM_UNWIND_CACHE`). Only inside the hooks' guard.
#[inline]
pub fn capture_into(out: &mut [PyFrame; MAX_PY_FRAMES], memo: bool) -> Option<usize> {
    if MODE.load(Relaxed) != READY {
        return None;
    }
    capture_into_slow(out, memo)
}

#[inline(never)]
fn capture_into_slow(out: &mut [PyFrame; MAX_PY_FRAMES], memo: bool) -> Option<usize> {
    let l = LAYOUT.get()?;
    // SAFETY: `get_tstate` is the interpreter's `PyGILState_GetThisThreadState`, which takes no
    // lock, allocates nothing and may be called without the GIL (it reads a TSS key).
    let ts = unsafe { (l.get_tstate)() } as usize;
    // On a PyTorch autograd engine thread with no Python frames of its own, the frames of the
    // thread waiting for its backward pass stand for the thread's (borrow.rs), remembered while
    // that thread waits. Asked only of a thread with no frames of its own.
    let mut engine = false;
    if ts != 0 && memo {
        // SAFETY: as below; inside the hooks' guard (`memo`). Every pointer is checked as `walk`
        // checks it.
        match unsafe { fast::capture(l, ts, out) } {
            fast::Outcome::Done(Some(n)) if n > 0 => return Some(n),
            // No frames of its own (or none readable): an engine thread borrows below.
            fast::Outcome::Done(None | Some(_)) if borrow::engine_thread() => engine = true,
            fast::Outcome::Done(None | Some(_)) | fast::Outcome::TooLong => fast::changed(),
        }
    } else if ts == 0 {
        engine = memo && borrow::engine_thread();
    }
    let mut raw = [Raw::default(); MAX_PY_FRAMES];
    let n = if ts == 0 {
        0
    } else {
        // SAFETY: `ts` is this thread's live thread state and `l` matches the running
        // interpreter (version and self-check at start-up); every further pointer is checked
        // by `walk`.
        unsafe { walk::walk(l, ts, &mut raw) }?
    };
    if engine && n == 0 {
        let b = borrow::borrowed_into(l, out, fast::gen(), |raw, out| cache::intern_into(l, raw, out, true))?;
        if b.changed {
            fast::changed();
            borrow::given_at(fast::gen());
        }
        return Some(b.n);
    }
    if engine {
        fast::changed();
    }
    // A PyTorch autograd engine thread runs no Python: the frames of the thread waiting for
    // its backward pass stand for them (borrow.rs).
    let n = if n == 0 { borrow::backward_frames(l, &mut raw, &mut |_| {})? } else { n };
    cache::intern_into(l, &raw[..n], out, memo)
}

/// A number that changes whenever the calling thread's Python frames may differ from those its
/// previous capture inside the hooks gave: while it stays the same, every such capture gave the
/// same frames (`fast`; 0 when nothing was captured). `last_stack` compares it before comparing
/// the frames.
pub fn capture_gen() -> u64 {
    fast::gen()
}

/// `PY_VERSION_HEX` of the interpreter whose frames are captured, if any.
pub fn version() -> Option<u32> {
    (MODE.load(Acquire) == READY).then(|| LAYOUT.get().map(|l| l.version)).flatten()
}

/// The encoding of the line tables copied.
pub fn linetable_format() -> LineTableFormat {
    LAYOUT.get().map_or(LineTableFormat::Pep657, |l| l.linetable_format)
}

/// The line said once when Python runs here but its layout is not supported.
pub fn unsupported_note() -> Option<&'static str> {
    UNSUPPORTED_NOTE.get().map(String::as_str)
}

/// True if and only if the process had no libpython when last looked for.
pub fn absent() -> bool {
    MODE.load(Acquire) == ABSENT
}

/// In a forked child: a fresh code cache (a thread of the parent may have held its lock).
/// Ids restart from 0; the child's writer sends every code it uses anew.
pub fn reset_after_fork() {
    cache::reset();
    borrow::reset_after_fork();
    fast::reset();
    heap::reset_after_fork();
}

/// Looks for libpython and works out its layout, once (again after `ABSENT` when a new module
/// appears). `enabled` is false when backtraces are off. Says once on stderr if the version is
/// not supported.
pub fn init(enabled: bool) {
    let m = MODE.load(Acquire);
    if m != UNPROBED && m != ABSENT {
        return;
    }
    if !enabled {
        MODE.store(OFF, Release);
        return;
    }
    match detect::detect() {
        Ok(Some((l, eval))) => {
            if let Some(r) = eval {
                EVAL_RANGE.set(r);
            }
            LAYOUT.set(l);
            borrow::init();
            MODE.store(READY, Release);
        }
        Ok(None) => MODE.store(ABSENT, Release),
        Err(minor) => {
            let line = format!("Python 3.{minor} frame layout not supported; stacks show native frames only");
            eprintln!("gpushim: {line}");
            UNSUPPORTED_NOTE.set(line);
            MODE.store(UNSUPPORTED, Release);
        }
    }
}

/// Native frames of a stack that has Python frames, with every return address inside the
/// interpreter loop replaced by the loop's start + 1: the Python frames say where the
/// interpreter was, while the loop's own return address also depends on which specialized
/// form of an instruction ran (the first calls of a line take the generic one), and would
/// split one Python call site into several.
pub fn canonical_native(mut frames: Box<[u64]>) -> Box<[u64]> {
    if let Some(&(s, e)) = EVAL_RANGE.get() {
        for a in frames.iter_mut() {
            if *a > s && *a <= e {
                *a = s + 1;
            }
        }
    }
    frames
}
