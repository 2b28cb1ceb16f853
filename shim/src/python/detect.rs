//! Finding the interpreter: libpython's symbols (the global scope, or a `libpython3*` loaded
//! `RTLD_LOCAL`), its version, the self-check of the object header, and the layout that fits.

use std::ffi::{c_char, c_void, CStr};

use gpushim_wire::LineTableFormat;

use super::layout::{
    rd, table_from_debug_offsets, Layout, Model, BYTES_SVAL, OB_SIZE, OB_TYPE, OWNED_BY_CSTACK, PY310, PY311, PY312,
    STR_LENGTH, STR_STATE,
};
use super::CodeRange;
use crate::loader;

/// Symbols of the interpreter, looked up through one handle.
pub(crate) struct Syms(*mut c_void);

impl Syms {
    /// The address of `name`, 0 if absent.
    pub(crate) fn get(&self, name: &CStr) -> usize {
        loader::dlsym(self.0, name)
    }
}

/// The handle libpython's symbols are found through: the global scope (a `python` executable or
/// one linked to libpython), else a loaded `libpython3*` (dlopened with `RTLD_LOCAL`).
pub(crate) fn python_symbols() -> Option<Syms> {
    let global = Syms(libc::RTLD_DEFAULT);
    if global.get(c"PyGILState_GetThisThreadState") != 0 {
        return Some(global);
    }
    let mut found = None;
    loader::for_each_module(|m| {
        let base = m.path.rsplit('/').next().unwrap_or("");
        if found.is_none() && base.starts_with("libpython3") {
            if let Ok(c) = std::ffi::CString::new(m.path.as_str()) {
                // SAFETY: RTLD_NOLOAD only returns a handle of an already loaded object.
                let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
                if !h.is_null() && loader::dlsym(h, c"PyGILState_GetThisThreadState") != 0 {
                    found = Some(Syms(h));
                }
            }
        }
    });
    found
}

/// `Ok(None)`: no libpython. `Err(minor)`: a Python 3.minor whose layout we do not support.
/// With the layout, the code range of `_PyEval_EvalFrameDefault` if the loader knows its size.
pub(crate) fn detect() -> Result<Option<(Layout, Option<CodeRange>)>, u32> {
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

/// `PY_VERSION_HEX`: the exported `Py_Version` (3.11+), else parsed from `Py_GetVersion()`
/// ("3.10.13 (main, …)"; the release level is taken as final).
pub(crate) fn python_version(sym: &Syms) -> Option<u32> {
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
}
