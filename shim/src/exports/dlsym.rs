//! Our `dlsym`: hands out our wrapper for the exact names we intercept, looked up in a
//! specific library, and is a tail jump into libc's `dlsym` for everything else.

use std::ffi::{c_char, c_void, CStr};

use super::{fixed_wrapper, wrapper};
use crate::hook::Hook;
use crate::{loader, real, route};

/// [`dlsym_decide`]'s answer that the lookup finds nothing: our `dlsym` returns NULL.
const NOT_FOUND: usize = 1;

/// Decides a `dlsym(handle, name)` call: returns our wrapper for a name we wrap looked up in a
/// specific library (remembering the real function found there: for a runtime function, in a
/// fixed copy of the export bound to it for good, `route::claim_fixed`), [`NOT_FOUND`] for an
/// `RTLD_DEFAULT` lookup of a wrapped name that only this library defines, or 0 to let libc's
/// `dlsym` answer the call itself. Other `RTLD_DEFAULT` and all `RTLD_NEXT` lookups go to
/// libc: they depend on who the caller is, and through the tail jump below libc sees the
/// original caller. Such lookups of a wrapped name find our export anyway when we come first.
extern "C" fn dlsym_decide(handle: *mut c_void, name: *const c_char) -> usize {
    std::panic::catch_unwind(|| {
        loader::init_real_dlsym();
        if name.is_null() || handle == libc::RTLD_NEXT {
            return 0;
        }
        // SAFETY: dlsym's contract: `name` is a NUL-terminated string.
        let cname = unsafe { CStr::from_ptr(name) };
        let Some(h) = Hook::by_name(cname) else { return 0 };
        if handle.is_null() {
            return default_lookup(cname);
        }
        let a = loader::dlsym(handle, cname);
        if a == 0 || loader::is_own(a) {
            return 0;
        }
        if !h.is_driver() {
            // A runtime: the pointer must call this runtime for good, whatever another handle
            // gives later (a copy bound to it); none left, or a runtime we could not keep
            // loaded: the caller gets it unwrapped.
            return route::claim_fixed(h, a).and_then(|k| fixed_wrapper(h, k)).unwrap_or(0);
        }
        if !real::set_real(h, a) {
            // A function we could not keep loaded (a runtime in another link-map namespace):
            // the caller gets it unwrapped rather than a wrapper that could outlive it.
            return 0;
        }
        wrapper(h)
    })
    .unwrap_or(0)
}

/// An `RTLD_DEFAULT` lookup of a wrapped name: libc would find our export first whenever the
/// program itself does not define the name. Without any CUDA library loaded, the lookup must
/// fail as it would without us (a program that probes for CUDA this way would otherwise take
/// its GPU path and see `cudaMalloc` fail with 3); so: [`NOT_FOUND`] when our export is the
/// only definition, else 0 (libc answers).
fn default_lookup(name: &CStr) -> usize {
    let first = loader::dlsym(libc::RTLD_DEFAULT, name);
    if first == 0 || !loader::is_own(first) {
        return 0;
    }
    // Relative to this library, RTLD_NEXT is exactly what the global scope would give without us.
    if loader::dlsym(libc::RTLD_NEXT, name) == 0 {
        NOT_FOUND
    } else {
        0
    }
}

/// `void *dlsym(void *handle, const char *symbol)`.
///
/// Written in assembly so that, when [`dlsym_decide`] leaves the call to libc, it is a tail
/// jump: libc's `dlsym` then sees the original caller's return address, which is what
/// `RTLD_NEXT` is relative to (forwarding with an ordinary call would make the lookup relative
/// to this library, and another interposer's `RTLD_NEXT` lookup could find itself).
///
/// # Safety
/// The same contract as `dlsym(3)`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        // Keep the arguments; the extra 8 bytes keep the stack 16-byte aligned for the call.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "cmp rax, 1",
        "je 3f",
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        "3:",
        "xor eax, eax",
        "ret",
        decide = sym dlsym_decide,
        real = sym loader::REAL_DLSYM,
    )
}

/// `void *dlsym(void *handle, const char *symbol)` on targets without the tail-jump version:
/// `RTLD_NEXT` lookups are made relative to this library.
///
/// # Safety
/// The same contract as `dlsym(3)`.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match dlsym_decide(handle, name) {
        0 if name.is_null() => std::ptr::null_mut(),
        NOT_FOUND => std::ptr::null_mut(),
        // SAFETY: `name` is non-NULL and NUL-terminated (dlsym's contract).
        0 => loader::dlsym(handle, unsafe { CStr::from_ptr(name) }) as *mut c_void,
        w => w as *mut c_void,
    }
}
