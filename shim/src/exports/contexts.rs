//! Context teardown: `cudaDeviceReset`, `cuDevicePrimaryCtxReset` and `cuCtxDestroy` free every
//! allocation of the context they destroy, which no free call reports. After the real call
//! succeeds the shim records a reset of that context's device.

use std::ffi::{c_int, c_void};

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
        record::reset(Api::CudaDeviceReset, device);
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
        record::reset(Api::CuDevicePrimaryCtxReset, dev);
    }
    r
}

/// `cuCtxDestroy_v2`'s handler. The device of the calling thread's current context is known
/// (`cuCtxGetDevice`); another context's is not, and its destruction is not recorded.
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
    if r == 0 && device >= 0 {
        record::reset(Api::CuCtxDestroy, device);
    }
    r
}
