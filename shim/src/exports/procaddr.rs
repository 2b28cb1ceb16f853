//! `cuGetProcAddress` and `cuGetProcAddress_v2`: the pointers the driver hands out for the
//! functions we intercept are swapped for our exports.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::wrapper;
use crate::hook::Hook;
use crate::{loader, real};

/// Replaces a pointer returned by the real `cuGetProcAddress` with our wrapper when it is one
/// of the functions we wrap. The match is by address against the driver's exported variants,
/// so the caller keeps the exact ABI variant (version, `_ptsz`) it asked for; the driver's
/// naming rules are the fallback when the address matches no export.
fn swap_proc(real_cgpa: usize, symbol: *const c_char, version: c_int, flags: u64, pfn: *mut *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        if pfn.is_null() {
            return;
        }
        // SAFETY: the real call succeeded and wrote *pfn.
        let p = unsafe { *pfn } as usize;
        if p == 0 || loader::is_own(p) {
            return;
        }
        real::learn_driver(real_cgpa);
        let hook = real::known_driver_fn(p).or_else(|| {
            if symbol.is_null() {
                return None;
            }
            // SAFETY: the driver accepted `symbol` as a NUL-terminated name.
            Hook::by_proc_request(unsafe { CStr::from_ptr(symbol) }, version, flags)
        });
        // A driver we could not keep loaded (another link-map namespace) keeps its own pointer.
        if let Some(h) = hook.filter(|&h| real::set_real(h, p)) {
            // SAFETY: *pfn is writable (the driver just wrote it).
            unsafe { *pfn = wrapper(h) as *mut c_void };
        }
    });
}

/// `cuGetProcAddress`'s handler (the pre-12.0 ABI).
///
/// # Safety
/// `f` is the real function; the arguments are the caller's, with CUDA's contract.
pub(super) unsafe fn get_proc_address(
    f: unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function.
    let r = unsafe { f(symbol, pfn, version, flags) };
    if r == 0 {
        swap_proc(f as *const () as usize, symbol, version, flags, pfn);
    }
    r
}

/// `cuGetProcAddress_v2`'s handler.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's, with CUDA's contract.
pub(super) unsafe fn get_proc_address_v2(
    f: unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function.
    let r = unsafe { f(symbol, pfn, version, flags, status) };
    if r == 0 {
        swap_proc(f as *const () as usize, symbol, version, flags, pfn);
    }
    r
}
