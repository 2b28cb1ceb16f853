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

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock};

use gpushim_wire::{LineTableFormat, PyFrame, PY_NO_OFFSET};

use crate::real;

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
static LAYOUT: OnceLock<Layout> = OnceLock::new();
/// The line said once when the layout is not supported.
static UNSUPPORTED_NOTE: OnceLock<String> = OnceLock::new();
/// `[start, end)` of a function's code, bytes.
type CodeRange = (u64, u64);
/// The code of the interpreter loop (`_PyEval_EvalFrameDefault`), when known.
static EVAL_RANGE: OnceLock<CodeRange> = OnceLock::new();

/// Most Python frames kept per stack (innermost first).
pub const MAX_PY_FRAMES: usize = 64;
/// Most code objects remembered; past that, events whose stacks meet a new code object get no
/// Python frames (the copies are never freed, so this bounds memory to a few tens of MiB).
const MAX_CODES: usize = 1 << 16;
/// Longest file or function name copied, in characters; longer ones are cut.
const MAX_STR: usize = 4096;
/// Longest line table copied, bytes; offsets past a cut table have no line.
const MAX_LINETABLE: usize = 256 * 1024;

/// How frames are chained, by version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    /// 3.10: `PyThreadState.frame` → `PyFrameObject` linked by `f_back`; one native
    /// `_PyEval_EvalFrameDefault` call per frame; `f_lasti` counts code units.
    Py310,
    /// 3.11: `PyThreadState.cframe->current_frame` → `_PyInterpreterFrame` linked by `previous`;
    /// `is_entry` marks the outermost frame of each native interpreter call; `prev_instr`.
    Py311,
    /// 3.12: as 3.11, but each native interpreter call pushes a shim frame owned by the C stack
    /// (`owner == FRAME_OWNED_BY_CSTACK`) below its outermost frame.
    Py312,
    /// 3.13: `PyThreadState.current_frame`; shim frames as 3.12; `instr_ptr` (the instruction
    /// executing); offsets from `_Py_DebugOffsets`.
    Py313,
}

/// Byte offsets into the interpreter's structures, and the addresses of its type objects.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// `PY_VERSION_HEX`.
    version: u32,
    linetable_format: LineTableFormat,
    /// `PyGILState_GetThisThreadState`.
    get_tstate: unsafe extern "C" fn() -> *mut c_void,
    code_type: usize,
    unicode_type: usize,
    bytes_type: usize,
    /// `PyFrame_Type` (3.10 only; 0 otherwise).
    frame_type: usize,
    /// `PyVarObject.ob_size`.
    ob_size: usize,
    /// `PyBytesObject.ob_sval`.
    bytes_sval: usize,
    /// `PyASCIIObject.length` and `.state`.
    str_length: usize,
    str_state: usize,
    /// `FRAME_OWNED_BY_CSTACK`.
    owned_by_cstack: u8,
    /// Offsets from the version's headers, or from 3.13's `_Py_DebugOffsets`.
    off: Table,
}

/// The offsets of one version known from its headers (everything but the symbol addresses).
#[derive(Clone, Copy, Debug)]
struct Table {
    model: Model,
    /// 3.10 `PyThreadState.frame`; 3.11/3.12 `PyThreadState.cframe`; 3.13
    /// `PyThreadState.current_frame`.
    ts_frame: usize,
    /// `_PyCFrame.current_frame` (3.11, 3.12).
    cframe_current: usize,
    /// The frame's code object: `f_code` (3.10 to 3.12), `f_executable` (3.13).
    fr_code: usize,
    /// `f_back` (3.10) or `previous`.
    fr_previous: usize,
    /// `f_lasti` (3.10, int, code units), `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13).
    fr_instr: usize,
    /// `owner` (char; 3.12, 3.13).
    fr_owner: usize,
    /// `is_entry` (bool; 3.11).
    fr_is_entry: usize,
    co_firstlineno: usize,
    co_filename: usize,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    co_name: usize,
    co_linetable: usize,
    /// 3.11+: `co_code_adaptive` (the bytecode, inline in the code object).
    co_code_adaptive: usize,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where string data starts.
    ascii_data: usize,
    compact_data: usize,
}

/// Facts shared by 3.10 to 3.13 on LP64 without `Py_TRACE_REFS` (checked at start-up by the
/// `None` self-check):
/// - `PyObject.ob_type` = 8 (Include/object.h, struct _object: ob_refcnt, ob_type);
/// - `PyVarObject.ob_size` = 16 (Include/object.h, PyVarObject);
/// - `PyBytesObject.ob_sval` = 32 (Include/cpython/bytesobject.h: PyObject_VAR_HEAD, ob_shash);
/// - `PyASCIIObject.length` = 16, `.state` = 32, with `kind` in bits 2..4, `compact` bit 5,
///   `ascii` bit 6 (Include/cpython/unicodeobject.h, PyASCIIObject's state bit-field; GCC
///   allocates bit-fields from the least significant bit on x86-64).
const OB_TYPE: usize = 8;
const OB_SIZE: usize = 16;
const BYTES_SVAL: usize = 32;
const STR_LENGTH: usize = 16;
const STR_STATE: usize = 32;
/// `FRAME_OWNED_BY_CSTACK` = 3 in 3.12 and 3.13 (Include/internal/pycore_frame.h, enum
/// _frameowner).
const OWNED_BY_CSTACK: u8 = 3;

/// CPython 3.10 (headers of 3.10.13).
const PY310: Table = Table {
    model: Model::Py310,
    // Include/cpython/pystate.h, struct _ts: prev, next, interp, frame.
    ts_frame: 24,
    cframe_current: 0,
    // Include/cpython/frameobject.h, struct _frame: PyObject_VAR_HEAD (24), f_back, f_code.
    fr_previous: 24,
    fr_code: 32,
    // struct _frame: ... f_gen (88), f_lasti (int, 96).
    fr_instr: 96,
    fr_owner: 0,
    fr_is_entry: 0,
    // Include/cpython/code.h, struct PyCodeObject: PyObject_HEAD, seven ints (16..44):
    // co_firstlineno is the 7th.
    co_firstlineno: 40,
    // struct PyCodeObject: co_code (48) ... co_cell2arg (96), co_filename, co_name, co_linetable.
    co_filename: 104,
    co_name: 112,
    co_linetable: 120,
    co_code_adaptive: 0,
    // Include/cpython/unicodeobject.h: sizeof(PyASCIIObject) = 48 (with wstr),
    // sizeof(PyCompactUnicodeObject) = 72 (utf8_length, utf8, wstr_length).
    ascii_data: 48,
    compact_data: 72,
};

/// CPython 3.11 (headers of 3.11.7).
const PY311: Table = Table {
    model: Model::Py311,
    // Include/cpython/pystate.h, struct _ts: prev, next, interp, _initialized, _static,
    // recursion_remaining, recursion_limit, recursion_headroom, tracing, tracing_what, cframe.
    ts_frame: 56,
    // Include/cpython/pystate.h, struct _PyCFrame: uint8_t use_tracing, current_frame.
    cframe_current: 8,
    // Include/internal/pycore_frame.h, struct _PyInterpreterFrame: f_func, f_globals,
    // f_builtins, f_locals, f_code (32), frame_obj, previous (48), prev_instr (56), stacktop,
    // is_entry (68), owner (69).
    fr_code: 32,
    fr_previous: 48,
    fr_instr: 56,
    fr_owner: 69,
    fr_is_entry: 68,
    // Include/cpython/code.h, _PyCode_DEF: co_firstlineno (72), co_filename (112), co_name,
    // co_qualname (128), co_linetable (136), co_code_adaptive (184).
    co_firstlineno: 72,
    co_filename: 112,
    co_name: 128,
    co_linetable: 136,
    co_code_adaptive: 184,
    // As 3.10: PyASCIIObject still has wstr.
    ascii_data: 48,
    compact_data: 72,
};

/// CPython 3.12 (headers of 3.12.1; the layouts do not change within a minor version).
const PY312: Table = Table {
    model: Model::Py312,
    // Include/cpython/pystate.h, struct _ts: prev, next, interp, _status, py_recursion_remaining,
    // py_recursion_limit, c_recursion_remaining, recursion_headroom, tracing, what_event, cframe.
    ts_frame: 56,
    // Include/cpython/pystate.h, struct _PyCFrame: current_frame, previous.
    cframe_current: 0,
    // Include/internal/pycore_frame.h, struct _PyInterpreterFrame: f_code (0), previous (8),
    // f_funcobj, f_globals, f_builtins, f_locals, frame_obj, prev_instr (56), stacktop,
    // return_offset, owner (70).
    fr_code: 0,
    fr_previous: 8,
    fr_instr: 56,
    fr_owner: 70,
    fr_is_entry: 0,
    // Include/cpython/code.h, _PyCode_DEF: co_firstlineno (68), co_filename (112), co_name,
    // co_qualname (128), co_linetable (136), co_code_adaptive (192).
    co_firstlineno: 68,
    co_filename: 112,
    co_name: 128,
    co_linetable: 136,
    co_code_adaptive: 192,
    // Include/cpython/unicodeobject.h: wstr is gone: sizeof(PyASCIIObject) = 40,
    // sizeof(PyCompactUnicodeObject) = 56.
    ascii_data: 40,
    compact_data: 56,
};

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
    let l = LAYOUT.get()?;
    // SAFETY: `get_tstate` is the interpreter's `PyGILState_GetThisThreadState`, which takes no
    // lock, allocates nothing and may be called without the GIL (it reads a TSS key).
    let ts = unsafe { (l.get_tstate)() } as usize;
    if ts == 0 {
        return None;
    }
    let mut raw = [Raw::default(); MAX_PY_FRAMES];
    // SAFETY: `ts` is this thread's live thread state and `l` matches the running interpreter
    // (version and self-check at start-up); every further pointer is checked by `walk`.
    let n = unsafe { walk(l, ts, &mut raw) }?;
    if n == 0 {
        return None;
    }
    intern(l, &raw[..n])
}

/// One frame as read: the code object's address, the byte offset, the entry flag.
#[derive(Clone, Copy, Default)]
struct Raw {
    code: usize,
    offset: u32,
    entry: bool,
}

/// True if and only if `p` may be the address of an object: non-null, 8-byte aligned, in the
/// user half of the address space and not in the first page.
#[inline]
fn plausible(p: usize) -> bool {
    (4096..1 << 47).contains(&p) && p & 7 == 0
}

/// Reads a `T` at `addr`.
///
/// # Safety
/// `addr` must be readable for `size_of::<T>()` bytes.
#[inline]
unsafe fn rd<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's promise; unaligned reads are fine for every T used here.
    unsafe { (addr as *const T).read_unaligned() }
}

/// True if and only if `p` is an object whose type is `ty`.
///
/// # Safety
/// `p`, if plausible, must be readable (an object, or memory of the interpreter's).
#[inline]
unsafe fn has_type(p: usize, ty: usize) -> bool {
    // SAFETY: `p` is plausible and, by the caller's promise, readable.
    plausible(p) && unsafe { rd::<usize>(p + OB_TYPE) } == ty
}

/// Walks the thread's frame chain into `out`; the number of frames, or `None` if something
/// looked wrong.
///
/// # Safety
/// `ts` must be the calling thread's live thread state of the interpreter `l` describes.
unsafe fn walk(l: &Layout, ts: usize, out: &mut [Raw; MAX_PY_FRAMES]) -> Option<usize> {
    // SAFETY: every read below is of the calling thread's own thread state and frames (it is
    // in native code, so none of them changes while we read) or of the code objects they hold
    // references to; each pointer is checked (`plausible`, `has_type`) before it is followed.
    unsafe {
        let mut n = 0usize;
        let mut frame: usize = match l.off.model {
            Model::Py310 | Model::Py313 => rd(ts + l.off.ts_frame),
            Model::Py311 | Model::Py312 => {
                let cframe: usize = rd(ts + l.off.ts_frame);
                if cframe == 0 {
                    return Some(0);
                }
                if !plausible(cframe) {
                    return None;
                }
                rd(cframe + l.off.cframe_current)
            }
        };
        while frame != 0 {
            if !plausible(frame) {
                return None;
            }
            if n == MAX_PY_FRAMES {
                break;
            }
            match l.off.model {
                Model::Py310 => {
                    if !has_type(frame, l.frame_type) {
                        return None;
                    }
                    let code: usize = rd(frame + l.off.fr_code);
                    if !has_type(code, l.code_type) {
                        return None;
                    }
                    let lasti: i32 = rd(frame + l.off.fr_instr);
                    // f_lasti counts 2-byte code units in 3.10 (PyFrame_GetLineNumber passes
                    // f_lasti * sizeof(_Py_CODEUNIT)).
                    let offset = if lasti < 0 { PY_NO_OFFSET } else { (lasti as u32).saturating_mul(2) };
                    out[n] = Raw { code, offset, entry: true };
                    n += 1;
                }
                Model::Py311 | Model::Py312 | Model::Py313 => {
                    let owner: u8 = if l.off.model == Model::Py311 { 0 } else { rd(frame + l.off.fr_owner) };
                    if owner == l.owned_by_cstack && l.off.model != Model::Py311 {
                        // The shim frame of a native interpreter call: the frame above it is
                        // the outermost of that call.
                        if n > 0 {
                            out[n - 1].entry = true;
                        }
                    } else {
                        let code: usize = rd(frame + l.off.fr_code);
                        if !has_type(code, l.code_type) {
                            return None;
                        }
                        let instr: usize = rd(frame + l.off.fr_instr);
                        let start = code + l.off.co_code_adaptive;
                        // Py_SIZE(code) is the number of code units (Include/cpython/code.h,
                        // _PyCode_NBYTES).
                        let units: isize = rd(code + l.ob_size);
                        let offset = if instr < start {
                            // prev_instr before the first instruction (a frame not started yet).
                            PY_NO_OFFSET
                        } else if units > 0 && instr - start < units as usize * 2 {
                            (instr - start) as u32
                        } else {
                            return None;
                        };
                        let entry = l.off.model == Model::Py311 && rd::<u8>(frame + l.off.fr_is_entry) != 0;
                        out[n] = Raw { code, offset, entry };
                        n += 1;
                    }
                }
            }
            frame = rd(frame + l.off.fr_previous);
        }
        if n > 0 && frame == 0 {
            // The outermost frame of the thread is always the outermost of its native call.
            out[n - 1].entry = true;
        }
        Some(n)
    }
}

/// What the report needs of one code object, copied while it was alive.
#[derive(Debug)]
pub struct CodeInfo {
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) or `co_name`.
    pub name: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// `co_linetable`'s bytes (cut at [`MAX_LINETABLE`]).
    pub linetable: Vec<u8>,
}

/// A code object seen before: its id and the fields that tell whether the object now at that
/// address is still the same one.
struct Slot {
    id: u32,
    check: [usize; 4],
}

/// Code objects by address, and their copies by id. Owned by this library: the application never
/// takes this lock.
#[derive(Default)]
struct Cache {
    by_addr: HashMap<usize, Slot, FastHash>,
    infos: Vec<Arc<CodeInfo>>,
}

/// A fast hasher for this library's own keys (addresses, stacks): word-at-a-time multiply and
/// rotate. Not collision-resistant, which keys chosen by our own code do not need.
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

/// [`WordHasher`] as a `BuildHasher`.
pub type FastHash = BuildHasherDefault<WordHasher>;

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl WordHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // Fold the high bits down: HashMap uses the low bits for buckets and the top 7 as tags.
        self.0 ^ (self.0 >> 29)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ (rest.len() as u64) << 59);
        }
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

/// The cache; replaced by a fresh one in a forked child (a thread of the parent may have held
/// the lock at the fork). Leaked on purpose.
static CACHE: AtomicPtr<Mutex<Cache>> = AtomicPtr::new(std::ptr::null_mut());

fn cache() -> &'static Mutex<Cache> {
    let p = CACHE.load(Acquire);
    if !p.is_null() {
        // SAFETY: set below from a leaked Box, never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(Mutex::new(Cache::default())));
    match CACHE.compare_exchange(std::ptr::null_mut(), fresh, AcqRel, Acquire) {
        // SAFETY: `fresh` was just leaked and is now the cache.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `fresh` never escaped; `other` is a leaked cache.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `other` is the cache another thread leaked; it is never freed.
            unsafe { &*other }
        }
    }
}

/// The check fields of the code object at `code`: first line, name, file name and line table
/// pointers.
///
/// # Safety
/// `code` must be a live code object of the interpreter `l` describes.
unsafe fn check_of(l: &Layout, code: usize) -> [usize; 4] {
    // SAFETY: fields of a live code object.
    unsafe {
        [
            rd::<i32>(code + l.off.co_firstlineno) as u32 as usize,
            rd::<usize>(code + l.off.co_name),
            rd::<usize>(code + l.off.co_filename),
            rd::<usize>(code + l.off.co_linetable),
        ]
    }
}

/// Turns code addresses into ids, copying each code object not seen before.
fn intern(l: &Layout, raw: &[Raw]) -> Option<Box<[PyFrame]>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut c = cache().lock().unwrap_or_else(|e| e.into_inner());
    for r in raw {
        // SAFETY: `r.code` passed the code type check in `walk` and is held alive by its frame.
        let check = unsafe { check_of(l, r.code) };
        let id = match c.by_addr.get(&r.code) {
            Some(s) if s.check == check => s.id,
            _ => {
                if c.infos.len() >= MAX_CODES {
                    return None;
                }
                // SAFETY: as above.
                let info = unsafe { copy_code(l, r.code) }?;
                let id = c.infos.len() as u32;
                c.infos.push(Arc::new(info));
                c.by_addr.insert(r.code, Slot { id, check });
                id
            }
        };
        out.push(PyFrame { code: id, offset: r.offset, entry: r.entry });
    }
    Some(out.into_boxed_slice())
}

/// Copies what the report needs of the code object at `code`.
///
/// # Safety
/// `code` must be a live code object of the interpreter `l` describes.
unsafe fn copy_code(l: &Layout, code: usize) -> Option<CodeInfo> {
    // SAFETY: fields of a live code object; the strings and bytes it points to are immutable and
    // kept alive by it; each is type-checked before it is read.
    unsafe {
        let filename = read_str(l, rd(code + l.off.co_filename))?;
        let name = read_str(l, rd(code + l.off.co_name))?;
        let firstlineno: i32 = rd(code + l.off.co_firstlineno);
        let linetable = read_bytes(l, rd(code + l.off.co_linetable))?;
        Some(CodeInfo { filename, name, firstlineno, linetable })
    }
}

/// The text of a compact `str` object (every code object's names are compact).
///
/// # Safety
/// `s` must be readable if plausible (a field of a live object).
unsafe fn read_str(l: &Layout, s: usize) -> Option<String> {
    // SAFETY: checked to be a str object, whose header and (compact) data follow it in memory.
    unsafe {
        if !has_type(s, l.unicode_type) {
            return None;
        }
        let len: isize = rd(s + l.str_length);
        let state: u32 = rd(s + l.str_state);
        let (kind, compact, ascii) = ((state >> 2) & 7, state & 0x20 != 0, state & 0x40 != 0);
        if len < 0 || !compact {
            return None;
        }
        let n = (len as usize).min(MAX_STR);
        let data = s + if ascii { l.off.ascii_data } else { l.off.compact_data };
        let text = match kind {
            1 => {
                let b = std::slice::from_raw_parts(data as *const u8, n);
                // Latin-1 (ASCII included): each byte is the code point.
                b.iter().map(|&c| char::from(c)).collect()
            }
            2 => {
                let b = std::slice::from_raw_parts(data as *const u8, n * 2);
                let u: Vec<u16> = b.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]])).collect();
                String::from_utf16_lossy(&u)
            }
            4 => {
                let b = std::slice::from_raw_parts(data as *const u8, n * 4);
                b.chunks_exact(4)
                    .map(|c| char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}'))
                    .collect()
            }
            _ => return None,
        };
        Some(text)
    }
}

/// The contents of a `bytes` object.
///
/// # Safety
/// `b` must be readable if plausible (a field of a live object).
unsafe fn read_bytes(l: &Layout, b: usize) -> Option<Vec<u8>> {
    // SAFETY: checked to be a bytes object, whose ob_size bytes follow its header.
    unsafe {
        if !has_type(b, l.bytes_type) {
            return None;
        }
        let len: isize = rd(b + l.ob_size);
        if len < 0 {
            return None;
        }
        let n = (len as usize).min(MAX_LINETABLE);
        Some(std::slice::from_raw_parts((b + l.bytes_sval) as *const u8, n).to_vec())
    }
}

/// The copy of code `id`, for the writer.
pub fn code_info(id: u32) -> Option<Arc<CodeInfo>> {
    let c = cache().lock().unwrap_or_else(|e| e.into_inner());
    c.infos.get(id as usize).cloned()
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
    CACHE.store(std::ptr::null_mut(), Release);
}

/// Looks for libpython and works out its layout, once (again after `ABSENT` when a new module
/// appears). `enabled` is false when backtraces are off. Says once on stderr if the version is
/// not supported.
pub fn init(enabled: bool) {
    let m = MODE.load(Acquire);
    if m != UNPROBED && m != ABSENT {
        return;
    }
    if !enabled || std::env::var_os("GPUSHIM_PYTHON").is_some_and(|v| v == "0") {
        MODE.store(OFF, Release);
        return;
    }
    match detect() {
        Ok(Some((l, eval))) => {
            if let Some(r) = eval {
                let _ = EVAL_RANGE.set(r);
            }
            let _ = LAYOUT.set(l);
            MODE.store(READY, Release);
        }
        Ok(None) => MODE.store(ABSENT, Release),
        Err(minor) => {
            let line = format!("Python 3.{minor} frame layout not supported; stacks show native frames only");
            eprintln!("gpushim: {line}");
            let _ = UNSUPPORTED_NOTE.set(line);
            MODE.store(UNSUPPORTED, Release);
        }
    }
}

/// Symbols of the interpreter, looked up through one handle.
struct Syms(*mut c_void);

impl Syms {
    fn get(&self, name: &CStr) -> usize {
        real::dlsym(self.0, name)
    }
}

/// The handle libpython's symbols are found through: the global scope (a `python` executable or
/// one linked to libpython), else a loaded `libpython3*` (dlopened with `RTLD_LOCAL`).
fn python_symbols() -> Option<Syms> {
    let global = Syms(libc::RTLD_DEFAULT);
    if global.get(c"PyGILState_GetThisThreadState") != 0 {
        return Some(global);
    }
    let mut found = None;
    real::for_each_module(|m| {
        let base = m.path.rsplit('/').next().unwrap_or("");
        if found.is_none() && base.starts_with("libpython3") {
            if let Ok(c) = std::ffi::CString::new(m.path.as_str()) {
                // SAFETY: RTLD_NOLOAD only returns a handle of an already loaded object.
                let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
                if !h.is_null() && real::dlsym(h, c"PyGILState_GetThisThreadState") != 0 {
                    found = Some(Syms(h));
                }
            }
        }
    });
    found
}

/// `Ok(None)`: no libpython. `Err(minor)`: a Python 3.minor whose layout we do not support.
/// With the layout, the code range of `_PyEval_EvalFrameDefault` if the loader knows its size.
fn detect() -> Result<Option<(Layout, Option<CodeRange>)>, u32> {
    let Some(sym) = python_symbols() else { return Ok(None) };
    let version = python_version(&sym).ok_or(0u32)?;
    let (major, minor) = (version >> 24, (version >> 16) & 0xff);
    if major != 3 {
        return Err(minor);
    }
    let get_tstate = sym.get(c"PyGILState_GetThisThreadState");
    let types = [c"PyCode_Type", c"PyUnicode_Type", c"PyBytes_Type"].map(|n| sym.get(n));
    let (none, none_type) = (sym.get(c"_Py_NoneStruct"), sym.get(c"_PyNone_Type"));
    if types.contains(&0) || none == 0 || none_type == 0 || get_tstate == 0 {
        return Err(minor);
    }
    // Self-check of the object header: None's type pointer is where we read type pointers. A
    // Py_TRACE_REFS build (two more pointers in every header) fails here.
    // SAFETY: `_Py_NoneStruct` is the interpreter's static `None` object.
    if unsafe { rd::<usize>(none + OB_TYPE) } != none_type {
        return Err(minor);
    }
    let table = match minor {
        10 => PY310,
        11 => PY311,
        12 => PY312,
        13 => {
            let rt = sym.get(c"_PyRuntime");
            // SAFETY: `_PyRuntime` is the interpreter's runtime state, whose first field in 3.13
            // is `_Py_DebugOffsets debug_offsets`.
            unsafe { table_from_debug_offsets(rt, version) }.ok_or(minor)?
        }
        _ => return Err(minor),
    };
    let frame_type = if table.model == Model::Py310 { sym.get(c"PyFrame_Type") } else { 0 };
    if table.model == Model::Py310 && frame_type == 0 {
        return Err(minor);
    }
    let eval = symbol_range(sym.get(c"_PyEval_EvalFrameDefault"));
    let layout = Layout {
        version,
        linetable_format: if table.model == Model::Py310 { LineTableFormat::Pep626 } else { LineTableFormat::Pep657 },
        // SAFETY: the exported `PyThreadState *PyGILState_GetThisThreadState(void)`.
        get_tstate: unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(get_tstate) },
        code_type: types[0],
        unicode_type: types[1],
        bytes_type: types[2],
        frame_type,
        ob_size: OB_SIZE,
        bytes_sval: BYTES_SVAL,
        str_length: STR_LENGTH,
        str_state: STR_STATE,
        owned_by_cstack: OWNED_BY_CSTACK,
        off: table,
    };
    Ok(Some((layout, eval)))
}

/// `[start, end)` of the function at `addr`, from its ELF symbol's size (`dladdr1` with
/// `RTLD_DL_SYMENT`, which is 1 in glibc's <dlfcn.h>).
fn symbol_range(addr: usize) -> Option<CodeRange> {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    if addr == 0 {
        return None;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut sym: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 writes `info` and, with RTLD_DL_SYMENT, a pointer to the ELF symbol.
    let ok = unsafe { libc::dladdr1(addr as *const c_void, &mut info, &mut sym, RTLD_DL_SYMENT) } != 0;
    if !ok || sym.is_null() || info.dli_saddr as usize != addr {
        return None;
    }
    // SAFETY: `sym` points to the loader's `Elf64_Sym` of the symbol.
    let size = unsafe { (*(sym as *const libc::Elf64_Sym)).st_size };
    (size > 0).then_some((addr as u64, addr as u64 + size))
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

/// `PY_VERSION_HEX`: the exported `Py_Version` (3.11+), else parsed from `Py_GetVersion()`
/// ("3.10.13 (main, …)"; the release level is taken as final).
fn python_version(sym: &Syms) -> Option<u32> {
    let v = sym.get(c"Py_Version");
    if v != 0 {
        // SAFETY: `const unsigned long Py_Version` (Include/pylifecycle.h, 3.11+).
        return Some(unsafe { rd::<u64>(v) } as u32);
    }
    let f = sym.get(c"Py_GetVersion");
    if f == 0 {
        return None;
    }
    // SAFETY: `const char *Py_GetVersion(void)` formats a static buffer; it takes no lock and
    // allocates nothing, and is called once here.
    let s = unsafe {
        let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(f);
        let p = f();
        if p.is_null() {
            return None;
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    parse_version(&s)
}

/// `PY_VERSION_HEX` of a version string such as "3.10.13 (main, …)" or "3.10.0rc2+".
fn parse_version(s: &str) -> Option<u32> {
    let head = s.split_whitespace().next()?;
    let mut parts = head.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let micro: u32 = parts
        .next()
        .map_or(Some(0), |p| p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok())?;
    (major < 256 && minor < 256 && micro < 256).then_some(major << 24 | minor << 16 | micro << 8 | 0xF0)
}

/// 3.13's layout from `_PyRuntime.debug_offsets`.
///
/// Positions of the fields read inside `_Py_DebugOffsets` come from CPython 3.13's
/// Include/internal/pycore_runtime.h, struct _Py_DebugOffsets (stable within 3.13.x, its
/// comment says): cookie[8] at 0, version at 8, free_threaded at 16; then, all `uint64_t`:
/// thread_state.current_frame at 184; interpreter_frame.previous 232, .executable 240,
/// .instr_ptr 248, .owner 264; code_object.filename 280, .qualname 296, .linetable 304,
/// .firstlineno 312, .co_code_adaptive 344; pyobject.ob_type 360; bytes_object.ob_size 520,
/// .ob_sval 528; unicode_object.state 544, .length 552, .asciiobject_size 560.
///
/// # Safety
/// `rt`, if not 0, must be the address of 3.13's `_PyRuntime`.
unsafe fn table_from_debug_offsets(rt: usize, version: u32) -> Option<Table> {
    if rt == 0 {
        return None;
    }
    // SAFETY: the caller's promise: `_PyRuntime` starts with the (much larger than 568 bytes)
    // `_Py_DebugOffsets`.
    let q = |off: usize| unsafe { rd::<u64>(rt + off) } as usize;
    // SAFETY: as above.
    let cookie: [u8; 8] = unsafe { rd(rt) };
    if &cookie != b"xdebugpy" || (q(8) as u32) >> 16 != version >> 16 || q(16) != 0 {
        // Not the 3.13 structure, or a free-threaded build (another object header).
        return None;
    }
    // The object header and the str/bytes layouts must be the ones assumed elsewhere.
    if q(360) != OB_TYPE || q(520) != OB_SIZE || q(528) != BYTES_SVAL || q(544) != STR_STATE || q(552) != STR_LENGTH {
        return None;
    }
    let ascii = q(560);
    let t = Table {
        model: Model::Py313,
        ts_frame: q(184),
        cframe_current: 0,
        fr_previous: q(232),
        fr_code: q(240),
        fr_instr: q(248),
        fr_owner: q(264),
        fr_is_entry: 0,
        co_filename: q(280),
        co_name: q(296),
        co_linetable: q(304),
        co_firstlineno: q(312),
        co_code_adaptive: q(344),
        ascii_data: ascii,
        // Include/cpython/unicodeobject.h (3.13), PyCompactUnicodeObject: PyASCIIObject, then
        // utf8_length and utf8 (two more words).
        compact_data: ascii + 16,
    };
    // Sanity: every offset inside a small structure.
    let all = [
        t.ts_frame,
        t.fr_previous,
        t.fr_code,
        t.fr_instr,
        t.fr_owner,
        t.co_filename,
        t.co_name,
        t.co_linetable,
        t.co_firstlineno,
        t.co_code_adaptive,
        ascii,
    ];
    all.iter().all(|&o| o < 4096).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("3.10.13 (main, May  9 2026, 07:35:25) [GCC 12.2.0]"), Some(0x030A_0DF0));
        assert_eq!(parse_version("3.10.0rc2+ (heads/3.10:abc)"), Some(0x030A_00F0));
        assert_eq!(parse_version("3.9"), Some(0x0309_00F0));
        assert_eq!(parse_version("python"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn plausible_pointers() {
        assert!(!plausible(0));
        assert!(!plausible(8));
        assert!(!plausible(0x7f00_0000_0004));
        assert!(!plausible(1 << 47));
        assert!(plausible(0x7f00_0000_0008));
    }

    #[test]
    fn word_hasher_spreads_aligned_addresses_and_frames() {
        use std::hash::{BuildHasher, Hash};
        let h = |v: &dyn Fn(&mut WordHasher)| {
            let mut s = FastHash::default().build_hasher();
            v(&mut s);
            s.finish()
        };
        assert_ne!(h(&|s| 0x1000usize.hash(s)) & 0xff, h(&|s| 0x1008usize.hash(s)) & 0xff);
        let a = [PyFrame { code: 1, offset: 2, entry: false }];
        let b = [PyFrame { code: 1, offset: 2, entry: true }];
        assert_ne!(h(&|s| a.hash(s)), h(&|s| b.hash(s)));
        assert_ne!(h(&|s| [1u64, 2].hash(s)), h(&|s| [2u64, 1].hash(s)));
        assert_ne!(h(&|s| s.write(&[1, 2, 3])), h(&|s| s.write(&[1, 2, 3, 0])));
    }
}
