//! The modules and module functions the walker (`holders.py`) and the exit walk's registration
//! (`ARM`) use, as the interpreter made them rather than as the program may have replaced them:
//! a program that replaced `builtins.__import__` or wrapped `gc.disable` must not see its
//! replacement called by the shim.
//!
//! - `_gpushim_module(name)`: the module `sys.modules[name]`, read with the C API
//!   (`PyImport_GetModuleDict`, `PyDict_GetItemString`: no Python code runs); when absent,
//!   imported with `PyImport_ImportModuleLevel` (the import machinery, not the `__import__`
//!   hook) and at once removed from `sys.modules` again, so that nothing the program did not
//!   import is left imported.
//! - `_gpushim_original(module, name)`: a fresh function object made from the module's own
//!   method table (`PyModule_GetDef(module)->m_methods`), the way CPython made the module's
//!   function (`PyCFunction_NewEx(def, module, module name)`, as `PyModule_AddFunctions` does,
//!   so `__self__` and `__module__` are the original's), whatever the module's attribute now
//!   holds. A module without a definition, or a name not in its table (a type such as
//!   `itertools.repeat`), falls back to the module's dictionary.
//!
//! Both are `PyCFunction_NewEx` builtins over static `PyMethodDef`s, put by name into the
//! namespace the code runs in. Neither panics across the boundary (`catch_unwind`); on failure
//! each returns NULL with a Python exception set, which the walker's code handles (or which
//! fails its compilation: `exec_in` clears it).

use std::ffi::{c_char, CStr};

use super::capi::{api, CApi, MethodDef, Obj, MODULE_DEF_METHODS, MODULE_DEF_NAME};
use super::{METH_O, METH_VARARGS};
use crate::python::layout::rd;

pub(super) static MODULE_DEF: MethodDef =
    MethodDef { name: c"_gpushim_module".as_ptr(), meth: module, flags: METH_O, doc: std::ptr::null() };
pub(super) static ORIGINAL_DEF: MethodDef =
    MethodDef { name: c"_gpushim_original".as_ptr(), meth: original, flags: METH_VARARGS, doc: std::ptr::null() };

/// Makes the two builtins: `[(name, new reference)]`, those that could not be made left out
/// (their error cleared).
///
/// # Safety
/// The GIL is held.
pub(super) unsafe fn make(a: &CApi) -> Vec<(&'static CStr, Obj)> {
    let mut out = Vec::with_capacity(2);
    for (name, def) in [(c"_gpushim_module", &MODULE_DEF), (c"_gpushim_original", &ORIGINAL_DEF)] {
        // SAFETY: the caller's promise; `def` is a static PyMethodDef that outlives the function.
        let f = unsafe { (a.cfunction_new_ex)(def, std::ptr::null_mut(), std::ptr::null_mut()) };
        if f.is_null() {
            // SAFETY: as above.
            unsafe { (a.err_clear)() };
        } else {
            out.push((name, f));
        }
    }
    out
}

/// Runs `f` under `catch_unwind`: a panic (none is expected) returns NULL with an
/// AttributeError set rather than unwinding into the interpreter.
fn guarded(f: impl FnOnce(&CApi) -> Obj) -> Obj {
    let Some(a) = api() else { return std::ptr::null_mut() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(a))) {
        Ok(r) => r,
        Err(_) => {
            // SAFETY: called from Python, so the GIL is held.
            unsafe { fail(a, c"gpushim: internal error") };
            std::ptr::null_mut()
        }
    }
}

/// Sets an AttributeError with `msg` (replacing any error set).
///
/// # Safety
/// The GIL is held.
unsafe fn fail(a: &CApi, msg: &CStr) {
    // SAFETY: the caller's promise; the variable holds the interpreter's exception type.
    unsafe {
        (a.err_clear)();
        (a.err_set_string)(*a.exc_attribute_error, msg.as_ptr());
    }
}

/// `_gpushim_module(name)` (`METH_O`, `name` a str): the module, a new reference.
extern "C" fn module(_self: Obj, arg: Obj) -> Obj {
    guarded(|a| {
        // SAFETY: the GIL is held (called from Python); `arg` is a live object; PyUnicode_AsUTF8
        // returns the str's own buffer (alive while `arg` is) or NULL with a TypeError set.
        unsafe {
            let name = (a.unicode_as_utf8)(arg);
            if name.is_null() {
                return std::ptr::null_mut();
            }
            import_quietly(a, name)
        }
    })
}

/// `sys.modules[name]` (a new reference) when present; otherwise the module imported by the
/// import machinery and removed from `sys.modules` again. NULL with an error set on failure.
///
/// # Safety
/// The GIL is held; `name` is a NUL-terminated string.
unsafe fn import_quietly(a: &CApi, name: *const c_char) -> Obj {
    // SAFETY: the caller's promise; PyImport_GetModuleDict and PyDict_GetItemString return
    // borrowed references (or NULL) and run no Python code (the keys are strs).
    unsafe {
        let modules = (a.import_get_module_dict)();
        if !modules.is_null() {
            let m = (a.dict_get_item_string)(modules, name);
            if !m.is_null() {
                (a.incref)(m);
                return m;
            }
        }
        (a.err_clear)();
        // Level 0, no globals, no fromlist: the top-level module `name`, found and loaded by the
        // import system (its finders), without calling `builtins.__import__`.
        let m = (a.import_module_level)(name, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0);
        if m.is_null() {
            return m;
        }
        // The program did not import it: it leaves again (the reference returned keeps it).
        let modules = (a.import_get_module_dict)();
        if modules.is_null() || (a.dict_del_item_string)(modules, name) != 0 {
            (a.err_clear)();
        }
        m
    }
}

/// `_gpushim_original(module, name)` (`METH_VARARGS`): the module's function `name` as the
/// module defined it, a new reference.
extern "C" fn original(_self: Obj, args: Obj) -> Obj {
    guarded(|a| {
        // SAFETY: the GIL is held (called from Python); `args` is the argument tuple;
        // PyTuple_GetItem returns borrowed references; the name's buffer lives with `args`.
        unsafe {
            if (a.tuple_size)(args) != 2 {
                fail(a, c"_gpushim_original(module, name)");
                return std::ptr::null_mut();
            }
            let (m, n) = ((a.tuple_get_item)(args, 0), (a.tuple_get_item)(args, 1));
            if m.is_null() || n.is_null() {
                return std::ptr::null_mut();
            }
            let name = (a.unicode_as_utf8)(n);
            if name.is_null() {
                return std::ptr::null_mut();
            }
            let f = from_def(a, m, CStr::from_ptr(name));
            if !f.is_null() {
                return f;
            }
            (a.err_clear)();
            from_dict(a, m, name)
        }
    })
}

/// A fresh function over the entry `name` of the method table of `m`'s `PyModuleDef`, or NULL
/// (an error may be set) when `m` has no definition, the layout is not the one known, or the
/// table has no such entry.
///
/// # Safety
/// The GIL is held; `m` is a live object.
unsafe fn from_def(a: &CApi, m: Obj, name: &CStr) -> Obj {
    if !a.standard_header {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's promise. PyModule_GetDef returns the module's PyModuleDef (static or
    // owned by the extension, alive as long as the module) or NULL; a non-module sets an error.
    unsafe {
        let def = (a.module_get_def)(m) as usize;
        if def == 0 {
            return std::ptr::null_mut();
        }
        // The layout checked: the definition's m_name is the module's name (which is how
        // CPython names the module it creates from it).
        let mod_name = (a.module_get_name_object)(m);
        if mod_name.is_null() {
            return std::ptr::null_mut();
        }
        let own = (a.unicode_as_utf8)(mod_name);
        let def_name: *const c_char = rd(def + MODULE_DEF_NAME);
        let named = !own.is_null() && !def_name.is_null() && CStr::from_ptr(own) == CStr::from_ptr(def_name);
        let methods: usize = rd(def + MODULE_DEF_METHODS);
        let mut f = std::ptr::null_mut();
        if named && methods != 0 {
            // PyMethodDef entries up to the one with a NULL name.
            let mut p = methods;
            loop {
                let n: *const c_char = rd(p);
                if n.is_null() {
                    break;
                }
                if CStr::from_ptr(n) == name {
                    // As PyModule_AddFunctions makes a module's functions: self the module,
                    // `__module__` its name.
                    f = (a.cfunction_new_ex)(p as *const MethodDef, m, mod_name);
                    break;
                }
                p += std::mem::size_of::<MethodDef>();
            }
        }
        (a.decref)(mod_name);
        f
    }
}

/// `m.__dict__[name]` (a new reference), or NULL with an AttributeError. Here a replacement the
/// program put into the module (`gc.disable = wrapper`) would be returned, and would run when
/// called: only for what the module's method table does not hold (types such as
/// `itertools.repeat`), or in an interpreter whose `PyModuleDef` layout is not the known one.
///
/// # Safety
/// The GIL is held; `m` is a live object; `name` a NUL-terminated string.
unsafe fn from_dict(a: &CApi, m: Obj, name: *const c_char) -> Obj {
    // SAFETY: the caller's promise; both calls return borrowed references (or NULL), and a
    // lookup by str key runs no Python code.
    unsafe {
        let d = (a.module_get_dict)(m);
        let v = if d.is_null() { std::ptr::null_mut() } else { (a.dict_get_item_string)(d, name) };
        if v.is_null() {
            fail(a, c"module has no such attribute");
            return v;
        }
        (a.incref)(v);
        v
    }
}
