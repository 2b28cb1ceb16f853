//! The C API of the interpreter the walker runs in: the few functions used, looked up once in
//! the process's symbols (the shim does not link libpython), and the helpers built on them.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::PY_FILE_INPUT;
use crate::config;
use crate::python::detect;
use crate::python::layout::{rd, OB_TYPE};
use crate::race_once::RaceOnce;

pub(super) type Obj = *mut c_void;

/// The C API functions used, looked up once in the interpreter's symbols. Each signature is
/// that of the CPython 3.10–3.13 headers named.
pub(super) struct CApi {
    /// `int Py_IsInitialized(void)` (Include/pylifecycle.h).
    pub(super) is_initialized: unsafe extern "C" fn() -> c_int,
    /// `int Py_AddPendingCall(int (*func)(void *), void *arg)` (Include/ceval.h).
    pub(super) add_pending_call: unsafe extern "C" fn(extern "C" fn(*mut c_void) -> c_int, *mut c_void) -> c_int,
    /// `void PyErr_Fetch(PyObject **, PyObject **, PyObject **)` (Include/pyerrors.h).
    pub(super) err_fetch: unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj),
    /// `void PyErr_Restore(PyObject *, PyObject *, PyObject *)`.
    pub(super) err_restore: unsafe extern "C" fn(Obj, Obj, Obj),
    /// `void PyErr_Clear(void)`.
    pub(super) err_clear: unsafe extern "C" fn(),
    /// `void PyErr_SetInterrupt(void)`: SIGINT as if it had arrived (Python's handler runs at
    /// the next check, unless SIGINT is ignored or at its default).
    pub(super) err_set_interrupt: unsafe extern "C" fn(),
    /// `int PyErr_ExceptionMatches(PyObject *)`, and the address of `PyExc_KeyboardInterrupt`
    /// (a `PyObject *` variable).
    pub(super) err_exception_matches: unsafe extern "C" fn(Obj) -> c_int,
    pub(super) exc_keyboard_interrupt: *const Obj,
    /// `PyObject *PyDict_New(void)` (Include/dictobject.h).
    pub(super) dict_new: unsafe extern "C" fn() -> Obj,
    /// `int PyDict_SetItemString(PyObject *, const char *, PyObject *)`.
    pub(super) dict_set_item_string: unsafe extern "C" fn(Obj, *const c_char, Obj) -> c_int,
    /// `PyObject *PyDict_GetItemString(PyObject *, const char *)` (borrowed).
    pub(super) dict_get_item_string: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    /// `PyObject *PyEval_GetBuiltins(void)` (Include/ceval.h; borrowed).
    pub(super) eval_get_builtins: unsafe extern "C" fn() -> Obj,
    /// `PyObject *Py_CompileString(const char *, const char *, int)` (Include/pythonrun.h).
    pub(super) compile_string: unsafe extern "C" fn(*const c_char, *const c_char, c_int) -> Obj,
    /// `PyObject *PyEval_EvalCode(PyObject *, PyObject *, PyObject *)` (Include/ceval.h).
    pub(super) eval_code: unsafe extern "C" fn(Obj, Obj, Obj) -> Obj,
    /// `PyObject *PyCFunction_NewEx(PyMethodDef *, PyObject *, PyObject *)`
    /// (Include/methodobject.h; exported for the stable ABI).
    pub(super) cfunction_new_ex: unsafe extern "C" fn(*const MethodDef, Obj, Obj) -> Obj,
    /// `PyObject *PyObject_CallObject(PyObject *, PyObject *)` (Include/abstract.h).
    pub(super) call_object: unsafe extern "C" fn(Obj, Obj) -> Obj,
    /// `PyObject *PyTuple_New(Py_ssize_t)` and `int PyTuple_SetItem(PyObject *, Py_ssize_t,
    /// PyObject *)` (steals) (Include/tupleobject.h).
    pub(super) tuple_new: unsafe extern "C" fn(isize) -> Obj,
    pub(super) tuple_set_item: unsafe extern "C" fn(Obj, isize, Obj) -> c_int,
    /// `PyObject *PyTuple_GetItem(PyObject *, Py_ssize_t)` (borrowed) and `Py_ssize_t
    /// PyTuple_Size(PyObject *)`.
    pub(super) tuple_get_item: unsafe extern "C" fn(Obj, isize) -> Obj,
    pub(super) tuple_size: unsafe extern "C" fn(Obj) -> isize,
    /// `PyObject *PyBytes_FromStringAndSize(const char *, Py_ssize_t)` (Include/bytesobject.h).
    pub(super) bytes_from_string_and_size: unsafe extern "C" fn(*const c_char, isize) -> Obj,
    /// `PyThreadState *PyEval_SaveThread(void)` and `void PyEval_RestoreThread(PyThreadState *)`
    /// (Include/ceval.h): the GIL let go of, and taken again.
    pub(super) eval_save_thread: unsafe extern "C" fn() -> Obj,
    pub(super) eval_restore_thread: unsafe extern "C" fn(Obj),
    /// `PyObject *PyLong_FromLongLong(long long)` (Include/longobject.h).
    pub(super) long_from_long_long: unsafe extern "C" fn(i64) -> Obj,
    /// `int PyBytes_AsStringAndSize(PyObject *, char **, Py_ssize_t *)`
    /// (Include/bytesobject.h).
    pub(super) bytes_as_string_and_size: unsafe extern "C" fn(Obj, *mut *mut c_char, *mut isize) -> c_int,
    /// `long PyLong_AsLong(PyObject *)` (Include/longobject.h).
    pub(super) long_as_long: unsafe extern "C" fn(Obj) -> std::ffi::c_long,
    /// `PyObject *PyImport_GetModuleDict(void)` (Include/import.h): `sys.modules`, borrowed.
    pub(super) import_get_module_dict: unsafe extern "C" fn() -> Obj,
    /// `PyObject *PyImport_ImportModuleLevel(const char *name, PyObject *globals, PyObject
    /// *locals, PyObject *fromlist, int level)` (Include/import.h): the import machinery itself
    /// (what the builtin `__import__` calls), not `builtins.__import__`, which a program may
    /// have replaced.
    pub(super) import_module_level: unsafe extern "C" fn(*const c_char, Obj, Obj, Obj, c_int) -> Obj,
    /// `int PyDict_DelItemString(PyObject *, const char *)` (Include/dictobject.h).
    pub(super) dict_del_item_string: unsafe extern "C" fn(Obj, *const c_char) -> c_int,
    /// `PyModuleDef *PyModule_GetDef(PyObject *)` (Include/moduleobject.h): the definition a
    /// builtin or extension module was made from (NULL, no error, for a module made in Python).
    pub(super) module_get_def: unsafe extern "C" fn(Obj) -> *const c_void,
    /// `PyObject *PyModule_GetDict(PyObject *)` (borrowed) and `PyObject
    /// *PyModule_GetNameObject(PyObject *)` (new reference) (Include/moduleobject.h).
    pub(super) module_get_dict: unsafe extern "C" fn(Obj) -> Obj,
    pub(super) module_get_name_object: unsafe extern "C" fn(Obj) -> Obj,
    /// `const char *PyUnicode_AsUTF8(PyObject *)` (Include/unicodeobject.h; the str's own
    /// buffer, valid while the str lives).
    pub(super) unicode_as_utf8: unsafe extern "C" fn(Obj) -> *const c_char,
    /// `void PyErr_SetString(PyObject *, const char *)` (Include/pyerrors.h), and the address
    /// of `PyExc_AttributeError` (a `PyObject *` variable).
    pub(super) err_set_string: unsafe extern "C" fn(Obj, *const c_char),
    pub(super) exc_attribute_error: *const Obj,
    /// The interpreter's objects start with the standard header (`ob_refcnt`, `ob_type`: two
    /// words): not a free-threaded or `Py_TRACE_REFS` build. Where they do not, the offset of
    /// `PyModuleDef.m_methods` ([`MODULE_DEF_METHODS`]) is not known and module functions are
    /// read from the module's dictionary.
    pub(super) standard_header: bool,
    /// `void Py_IncRef(PyObject *)`, `void Py_DecRef(PyObject *)` (Include/object.h).
    pub(super) incref: unsafe extern "C" fn(Obj),
    pub(super) decref: unsafe extern "C" fn(Obj),
    /// `_Py_NoneStruct`: `None`.
    pub(super) none: Obj,
    /// `PyThreadState *PyThreadState_Get(void)` (Include/pystate.h).
    pub(super) thread_state_get: unsafe extern "C" fn() -> Obj,
    /// `void PyThreadState_EnterTracing(PyThreadState *)` and `PyThreadState_LeaveTracing`
    /// (Include/cpython/pystate.h, 3.11 and later): the walk runs with tracing, profiling and
    /// (3.12) `sys.monitoring` suspended, so that no trace function of the program (a debugger,
    /// coverage) runs for each line of the walker.
    pub(super) enter_tracing: Option<unsafe extern "C" fn(Obj)>,
    pub(super) leave_tracing: Option<unsafe extern "C" fn(Obj)>,
}

// SAFETY: function pointers and the address of the static `None`; used with the GIL held.
unsafe impl Send for CApi {}

// SAFETY: as above.
unsafe impl Sync for CApi {}

/// `PyMethodDef` (Include/methodobject.h): name, function, flags, doc.
#[repr(C)]
pub(super) struct MethodDef {
    pub(super) name: *const c_char,
    pub(super) meth: extern "C" fn(Obj, Obj) -> Obj,
    pub(super) flags: c_int,
    pub(super) doc: *const c_char,
}

// SAFETY: immutable statics pointing at static strings and functions.
unsafe impl Sync for MethodDef {}

/// The byte offset of `m_methods` (`PyMethodDef *`) in `PyModuleDef` (Include/moduleobject.h),
/// the same in CPython 3.8 to 3.13 on a 64-bit build with the standard object header:
/// `PyModuleDef_Base m_base` (`PyObject_HEAD` = `ob_refcnt`, `ob_type`: 16; `m_init`,
/// `m_index`, `m_copy`: 24), then `m_name` (40), `m_doc` (48), `m_size` (56), `m_methods` (64).
/// A free-threaded 3.13 build (a 32-byte header) or a `Py_TRACE_REFS` one (two more pointers)
/// moves it: [`CApi::standard_header`] says whether it holds.
pub(super) const MODULE_DEF_METHODS: usize = 8 * std::mem::size_of::<usize>();
/// The byte offset of `m_name` (`const char *`) in `PyModuleDef`, as above: read to check the
/// layout against the module's name before its methods are trusted.
pub(super) const MODULE_DEF_NAME: usize = 5 * std::mem::size_of::<usize>();

static API: RaceOnce<Option<CApi>> = RaceOnce::new();

pub(super) fn api() -> Option<&'static CApi> {
    API.get_or_init(|| {
        if !config::heap_walk() {
            return None;
        }
        let sym = detect::python_symbols()?;
        let f = |n: &CStr| -> Option<usize> { Some(sym.get(n)).filter(|&a| a != 0) };
        // SAFETY: each address is the interpreter's exported function (or object) of that
        // name, whose C signature is the field's (see CApi).
        // Each transmute's target type is the field's, written once in `CApi`.
        #[allow(clippy::missing_transmute_annotations)]
        unsafe {
            use std::mem::transmute as t;
            Some(CApi {
                is_initialized: t(f(c"Py_IsInitialized")?),
                add_pending_call: t(f(c"Py_AddPendingCall")?),
                err_fetch: t(f(c"PyErr_Fetch")?),
                err_restore: t(f(c"PyErr_Restore")?),
                err_clear: t(f(c"PyErr_Clear")?),
                err_set_interrupt: t(f(c"PyErr_SetInterrupt")?),
                err_exception_matches: t(f(c"PyErr_ExceptionMatches")?),
                exc_keyboard_interrupt: f(c"PyExc_KeyboardInterrupt")? as *const Obj,
                dict_new: t(f(c"PyDict_New")?),
                dict_set_item_string: t(f(c"PyDict_SetItemString")?),
                dict_get_item_string: t(f(c"PyDict_GetItemString")?),
                eval_get_builtins: t(f(c"PyEval_GetBuiltins")?),
                compile_string: t(f(c"Py_CompileString")?),
                eval_code: t(f(c"PyEval_EvalCode")?),
                cfunction_new_ex: t(f(c"PyCFunction_NewEx")?),
                call_object: t(f(c"PyObject_CallObject")?),
                tuple_new: t(f(c"PyTuple_New")?),
                tuple_set_item: t(f(c"PyTuple_SetItem")?),
                tuple_get_item: t(f(c"PyTuple_GetItem")?),
                tuple_size: t(f(c"PyTuple_Size")?),
                bytes_from_string_and_size: t(f(c"PyBytes_FromStringAndSize")?),
                eval_save_thread: t(f(c"PyEval_SaveThread")?),
                eval_restore_thread: t(f(c"PyEval_RestoreThread")?),
                long_from_long_long: t(f(c"PyLong_FromLongLong")?),
                bytes_as_string_and_size: t(f(c"PyBytes_AsStringAndSize")?),
                long_as_long: t(f(c"PyLong_AsLong")?),
                import_get_module_dict: t(f(c"PyImport_GetModuleDict")?),
                import_module_level: t(f(c"PyImport_ImportModuleLevel")?),
                dict_del_item_string: t(f(c"PyDict_DelItemString")?),
                module_get_def: t(f(c"PyModule_GetDef")?),
                module_get_dict: t(f(c"PyModule_GetDict")?),
                module_get_name_object: t(f(c"PyModule_GetNameObject")?),
                unicode_as_utf8: t(f(c"PyUnicode_AsUTF8")?),
                err_set_string: t(f(c"PyErr_SetString")?),
                exc_attribute_error: f(c"PyExc_AttributeError")? as *const Obj,
                // SAFETY (the read): `_Py_NoneStruct` is the interpreter's static `None`.
                standard_header: match (f(c"_Py_NoneStruct"), f(c"_PyNone_Type")) {
                    (Some(none), Some(none_type)) => rd::<usize>(none + OB_TYPE) == none_type,
                    _ => false,
                },
                incref: t(f(c"Py_IncRef")?),
                decref: t(f(c"Py_DecRef")?),
                none: f(c"_Py_NoneStruct")? as Obj,
                thread_state_get: t(f(c"PyThreadState_Get")?),
                enter_tracing: f(c"PyThreadState_EnterTracing").map(|a| t(a)),
                leave_tracing: f(c"PyThreadState_LeaveTracing").map(|a| t(a)),
            })
        }
    })
    .as_ref()
}

pub(super) fn new_none(a: &CApi) -> Obj {
    // SAFETY: the GIL is held; `None` is immortal or static.
    unsafe { (a.incref)(a.none) };
    a.none
}

/// Compiles `src` into a fresh namespace (with `__builtins__` and `names`) and runs it; the
/// result of `PyEval_EvalCode` (a new reference), or `None` with the error cleared.
///
/// # Safety
/// The GIL must be held; `names` are live objects.
pub(super) unsafe fn exec(a: &CApi, src: &CStr, file: &CStr, names: &[(&CStr, Obj)]) -> Option<Obj> {
    // SAFETY: the caller's promise; each reference is released on every path.
    unsafe {
        let ns = (a.dict_new)();
        if ns.is_null() {
            (a.err_clear)();
            return None;
        }
        let r = exec_in(a, ns, src, file, names);
        (a.decref)(ns);
        r
    }
}

/// As [`exec`], in the namespace `ns`.
///
/// # Safety
/// As [`exec`]; `ns` is a dict.
pub(super) unsafe fn exec_in(a: &CApi, ns: Obj, src: &CStr, file: &CStr, names: &[(&CStr, Obj)]) -> Option<Obj> {
    // SAFETY: the caller's promise; PyEval_GetBuiltins returns a borrowed reference.
    unsafe {
        let mut ok = (a.dict_set_item_string)(ns, c"__builtins__".as_ptr(), (a.eval_get_builtins)()) == 0;
        for (k, v) in names {
            ok &= (a.dict_set_item_string)(ns, k.as_ptr(), *v) == 0;
        }
        let code =
            if ok { (a.compile_string)(src.as_ptr(), file.as_ptr(), PY_FILE_INPUT) } else { std::ptr::null_mut() };
        if code.is_null() {
            (a.err_clear)();
            return None;
        }
        let r = (a.eval_code)(code, ns, ns);
        (a.decref)(code);
        if r.is_null() {
            (a.err_clear)();
            return None;
        }
        Some(r)
    }
}

/// Tracing and profiling suspended on this thread while it lives (3.11 and later).
pub(super) struct NoTracing(Option<(unsafe extern "C" fn(Obj), Obj)>);

impl NoTracing {
    /// # Safety
    /// The GIL is held.
    pub(super) unsafe fn new(a: &CApi) -> Self {
        match (a.enter_tracing, a.leave_tracing) {
            // SAFETY: the caller's promise; PyThreadState_Get returns this thread's state, which
            // outlives the guard (it is dropped before the call from Python returns).
            (Some(enter), Some(leave)) => unsafe {
                let ts = (a.thread_state_get)();
                enter(ts);
                NoTracing(Some((leave, ts)))
            },
            _ => NoTracing(None),
        }
    }
}

impl Drop for NoTracing {
    fn drop(&mut self) {
        if let Some((leave, ts)) = self.0 {
            // SAFETY: balances the PyThreadState_EnterTracing of `new`, on the same thread, GIL
            // held.
            unsafe { leave(ts) };
        }
    }
}
