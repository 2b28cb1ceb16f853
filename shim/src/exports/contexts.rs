//! Contexts: `cudaDeviceReset`, `cuDevicePrimaryCtxReset`, the last `cuDevicePrimaryCtxRelease`
//! and `cuCtxDestroy` free every allocation of the context they destroy, which no free call
//! reports; `cuCtxCreate` makes a context beside the device's primary one, whose allocations
//! only its own destruction frees. (CUDA Driver API, "Primary Context Management" and "Context
//! Management".) After a real call succeeds the shim records the reset or the new context.

use std::ffi::{c_int, c_uint, c_void};

use gpushim_wire::Api;

use crate::real;
use crate::record::{self, Guard};

/// `cudaDeviceReset`'s handler: the device is the calling thread's current one, read before the
/// call destroys its context.
///
/// # Safety
/// `f` is the real function.
pub(super) unsafe fn device_reset(f: unsafe extern "C" fn() -> c_int) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the real function, no arguments.
        return unsafe { f() };
    };
    let device = real::current_device();
    // SAFETY: as above.
    let r = unsafe { f() };
    if r == 0 && device >= 0 {
        record::reset(Api::CudaDeviceReset, device, 0);
    }
    r
}

/// `cuDevicePrimaryCtxReset_v2`'s handler: the device is its argument.
///
/// # Safety
/// `f` is the real function; `dev` the caller's argument.
pub(super) unsafe fn primary_reset(f: unsafe extern "C" fn(c_int) -> c_int, dev: c_int) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's argument, unchanged, to the real function.
        return unsafe { f(dev) };
    };
    // SAFETY: as above.
    let r = unsafe { f(dev) };
    if r == 0 && dev >= 0 {
        record::reset(Api::CuDevicePrimaryCtxReset, dev, 0);
    }
    r
}

/// `cuDevicePrimaryCtxRelease_v2`'s handler. "If the usage drops to 0 the primary context of
/// device `dev` will be destroyed" (its documentation): after a successful release the shim
/// asks whether the context is still active (`cuDevicePrimaryCtxGetState`) and records a reset
/// when it is not. (A retain by another thread between the two calls makes a new context; its
/// allocations come after the reset in sequence order and stay live.)
///
/// # Safety
/// `f` is the real function; `dev` the caller's argument.
pub(super) unsafe fn primary_release(f: unsafe extern "C" fn(c_int) -> c_int, dev: c_int) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's argument, unchanged, to the real function.
        return unsafe { f(dev) };
    };
    // SAFETY: as above.
    let r = unsafe { f(dev) };
    if r == 0 && dev >= 0 && real::primary_context_active(dev) == Some(false) {
        record::reset(Api::CuDevicePrimaryCtxRelease, dev, 0);
    }
    r
}

/// `cuCtxDestroy_v2`'s handler. The context itself is recorded, so that a context the program
/// created frees its own allocations whichever thread destroys it; the device is known only
/// when it is the calling thread's current context (`cuCtxGetDevice`), which matters only for
/// a primary context destroyed this way.
///
/// # Safety
/// `f` is the real function; `ctx` the caller's argument.
pub(super) unsafe fn ctx_destroy(f: unsafe extern "C" fn(*mut c_void) -> c_int, ctx: *mut c_void) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's argument, unchanged, to the real function.
        return unsafe { f(ctx) };
    };
    let device =
        if !ctx.is_null() && real::current_context() == Some(ctx as usize) { real::current_device() } else { -1 };
    // SAFETY: as above.
    let r = unsafe { f(ctx) };
    if r == 0 && !ctx.is_null() {
        record::reset(Api::CuCtxDestroy, device, ctx as u64);
    }
    r
}

/// Records a context the program created, once the call succeeded.
fn created(r: c_int, out: *mut *mut c_void, dev: c_int) {
    if r != 0 || out.is_null() {
        return;
    }
    // SAFETY: the call succeeded, so it wrote the new context through the non-NULL `out`.
    let ctx = unsafe { out.read() } as u64;
    if ctx != 0 {
        record::context_created(Api::CuCtxCreate, ctx, dev);
    }
}

/// `cuCtxCreate_v2`'s handler.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
pub(super) unsafe fn ctx_create_v2(
    f: unsafe extern "C" fn(*mut *mut c_void, c_uint, c_int) -> c_int,
    ctx: *mut *mut c_void,
    flags: c_uint,
    dev: c_int,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(ctx, flags, dev) };
    };
    // SAFETY: as above.
    let r = unsafe { f(ctx, flags, dev) };
    created(r, ctx, dev);
    r
}

/// `cuCtxCreate_v3`'s handler.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
pub(super) unsafe fn ctx_create_v3(
    f: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_int, c_uint, c_int) -> c_int,
    ctx: *mut *mut c_void,
    params: *mut c_void,
    count: c_int,
    flags: c_uint,
    dev: c_int,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(ctx, params, count, flags, dev) };
    };
    // SAFETY: as above.
    let r = unsafe { f(ctx, params, count, flags, dev) };
    created(r, ctx, dev);
    r
}

/// `cuCtxCreate_v4`'s handler.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
pub(super) unsafe fn ctx_create_v4(
    f: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint, c_int) -> c_int,
    ctx: *mut *mut c_void,
    params: *mut c_void,
    flags: c_uint,
    dev: c_int,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(ctx, params, flags, dev) };
    };
    // SAFETY: as above.
    let r = unsafe { f(ctx, params, flags, dev) };
    created(r, ctx, dev);
    r
}
