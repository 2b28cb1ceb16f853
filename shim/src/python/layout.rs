//! The interpreter's layouts: byte offsets into CPython's thread state, frames, code objects,
//! `str` and `bytes`, per version (3.10 to 3.12 written by hand from each version's headers,
//! 3.13 read from the interpreter's own `_Py_DebugOffsets`), and the checked reads that follow
//! them.

use std::ffi::c_void;

use gpushim_wire::LineTableFormat;

/// How frames are chained, by version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Model {
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
pub(crate) struct Layout {
    /// `PY_VERSION_HEX`.
    pub(crate) version: u32,
    pub(crate) linetable_format: LineTableFormat,
    /// `PyGILState_GetThisThreadState`.
    pub(crate) get_tstate: unsafe extern "C" fn() -> *mut c_void,
    pub(crate) code_type: usize,
    pub(crate) unicode_type: usize,
    pub(crate) bytes_type: usize,
    /// `PyFrame_Type` (3.10 only; 0 otherwise).
    pub(crate) frame_type: usize,
    /// `PyVarObject.ob_size`.
    pub(crate) ob_size: usize,
    /// `PyBytesObject.ob_sval`.
    pub(crate) bytes_sval: usize,
    /// `PyASCIIObject.length` and `.state`.
    pub(crate) str_length: usize,
    pub(crate) str_state: usize,
    /// `FRAME_OWNED_BY_CSTACK`.
    pub(crate) owned_by_cstack: u8,
    /// Offsets from the version's headers, or from 3.13's `_Py_DebugOffsets`.
    pub(crate) off: Table,
}

/// The offsets of one version known from its headers (everything but the symbol addresses).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Table {
    pub(crate) model: Model,
    /// 3.10 `PyThreadState.frame`; 3.11/3.12 `PyThreadState.cframe`; 3.13
    /// `PyThreadState.current_frame`.
    pub(crate) ts_frame: usize,
    /// `_PyCFrame.current_frame` (3.11, 3.12).
    pub(crate) cframe_current: usize,
    /// The frame's code object: `f_code` (3.10 to 3.12), `f_executable` (3.13).
    pub(crate) fr_code: usize,
    /// `f_back` (3.10) or `previous`.
    pub(crate) fr_previous: usize,
    /// `f_lasti` (3.10, int, code units), `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13).
    pub(crate) fr_instr: usize,
    /// `owner` (char; 3.12, 3.13).
    pub(crate) fr_owner: usize,
    /// `is_entry` (bool; 3.11).
    pub(crate) fr_is_entry: usize,
    pub(crate) co_firstlineno: usize,
    pub(crate) co_filename: usize,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    pub(crate) co_name: usize,
    pub(crate) co_linetable: usize,
    /// 3.11+: `co_code_adaptive` (the bytecode, inline in the code object).
    pub(crate) co_code_adaptive: usize,
    /// `sizeof(PyASCIIObject)` and `sizeof(PyCompactUnicodeObject)`: where string data starts.
    pub(crate) ascii_data: usize,
    pub(crate) compact_data: usize,
}

/// Facts shared by 3.10 to 3.13 on LP64 without `Py_TRACE_REFS` (checked at start-up by the
/// `None` self-check):
/// - `PyObject.ob_type` = 8 (Include/object.h, struct _object: ob_refcnt, ob_type);
/// - `PyVarObject.ob_size` = 16 (Include/object.h, PyVarObject);
/// - `PyBytesObject.ob_sval` = 32 (Include/cpython/bytesobject.h: PyObject_VAR_HEAD, ob_shash);
/// - `PyASCIIObject.length` = 16, `.state` = 32, with `kind` in bits 2..4, `compact` bit 5,
///   `ascii` bit 6 (Include/cpython/unicodeobject.h, PyASCIIObject's state bit-field; GCC
///   allocates bit-fields from the least significant bit on x86-64).
pub(crate) const OB_TYPE: usize = 8;
pub(crate) const OB_SIZE: usize = 16;
pub(crate) const BYTES_SVAL: usize = 32;
pub(crate) const STR_LENGTH: usize = 16;
pub(crate) const STR_STATE: usize = 32;
/// `FRAME_OWNED_BY_CSTACK` = 3 in 3.12 and 3.13 (Include/internal/pycore_frame.h, enum
/// _frameowner).
pub(crate) const OWNED_BY_CSTACK: u8 = 3;

/// CPython 3.10 (headers of 3.10.13).
pub(crate) const PY310: Table = Table {
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
pub(crate) const PY311: Table = Table {
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
pub(crate) const PY312: Table = Table {
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

/// True if and only if `p` may be the address of an object: non-null, 8-byte aligned, in the
/// user half of the address space and not in the first page.
#[inline]
pub(crate) fn plausible(p: usize) -> bool {
    // One mask for "below 1 << 47 and 8-byte aligned" (the frame walk runs it on every frame).
    p & !((1 << 47) - 8) == 0 && p >= 4096
}

/// Reads a `T` at `addr`.
///
/// # Safety
/// `addr` must be readable for `size_of::<T>()` bytes.
#[inline]
pub(crate) unsafe fn rd<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's promise; unaligned reads are fine for every T used here.
    unsafe { (addr as *const T).read_unaligned() }
}

/// True if and only if `p` is an object whose type is `ty`.
///
/// # Safety
/// `p`, if plausible, must be readable (an object, or memory of the interpreter's).
#[inline]
pub(crate) unsafe fn has_type(p: usize, ty: usize) -> bool {
    // SAFETY: `p` is plausible and, by the caller's promise, readable.
    plausible(p) && unsafe { rd::<usize>(p + OB_TYPE) } == ty
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
pub(crate) unsafe fn table_from_debug_offsets(rt: usize, version: u32) -> Option<Table> {
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
    fn plausible_pointers() {
        assert!(!plausible(0));
        assert!(!plausible(8));
        assert!(!plausible(0x7f00_0000_0004));
        assert!(!plausible(1 << 47));
        assert!(plausible(0x7f00_0000_0008));
        assert!(plausible(4096) && !plausible(4088));
        assert!(plausible((1 << 47) - 8) && !plausible(usize::MAX - 7));
    }
}
