//! Virtual memory management: `cuMemCreate`, whose device comes from its properties rather
//! than the current context, and the calls the collector needs to know when its physical
//! memory goes (collector/src/account/vmm.rs): `cuMemMap`, `cuMemUnmap`,
//! `cuMemRetainAllocationHandle` and `cuMemImportFromShareableHandle`. `cuMemRelease` is a
//! plain free in the hook list.

use std::ffi::{c_int, c_void};

use gpushim_wire::{Api, Kind};

use super::OutPtr;
use crate::real;
use crate::record::{self, Guard};

/// `CUmemLocationType` values (`cuda.h`): device, and the three host kinds.
const LOCATION_DEVICE: c_int = 1;
const LOCATION_HOST_FIRST: c_int = 2;
const LOCATION_HOST_LAST: c_int = 4;

/// `cuMemCreate`'s handler. The device comes from `prop->location` (offset 8: type, offset
/// 12: id, per `CUmemAllocationProp` in `cuda.h`), not from the current context, which the
/// calling thread may not have; a host location is recorded as pinned host memory.
///
/// # Safety
/// `f` is the real `cuMemCreate`; the arguments are the caller's, with CUDA's contract.
pub(super) unsafe fn mem_create(
    f: unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> c_int,
    handle: *mut u64,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(handle, size, prop, flags) };
    };
    // SAFETY: as above.
    let r = unsafe { f(handle, size, prop, flags) };
    let (kind, device) = if prop.is_null() {
        (Kind::Device, -1)
    } else {
        // SAFETY: a non-NULL prop points to a CUmemAllocationProp (the caller's contract),
        // whose CUmemLocation {int type; int id;} sits at byte offset 8.
        let (ty, id) = unsafe {
            let p = prop.cast::<u8>();
            (p.add(8).cast::<c_int>().read_unaligned(), p.add(12).cast::<c_int>().read_unaligned())
        };
        match ty {
            LOCATION_DEVICE => (Kind::Device, id),
            LOCATION_HOST_FIRST..=LOCATION_HOST_LAST => (Kind::PinnedHost, -1),
            _ => (Kind::Device, -1),
        }
    };
    // SAFETY: on success the driver wrote the handle.
    let value = if r == 0 { unsafe { handle.value() } } else { 0 };
    record::alloc(Api::CuMemCreate, kind, r, value, size as u64, device, 0);
    r
}

/// `cuMemMap`'s handler: a successful mapping is recorded after the call; a failed one
/// changes nothing and is not.
///
/// # Safety
/// `f` is the real `cuMemMap`; the arguments are the caller's.
pub(super) unsafe fn mem_map(
    f: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> c_int,
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(ptr, size, offset, handle, flags) };
    };
    // SAFETY: as above.
    let r = unsafe { f(ptr, size, offset, handle, flags) };
    if r == 0 {
        record::map(ptr, size as u64, handle);
    }
    r
}

/// `cuMemUnmap`'s handler: numbered before the call, like a free, and recorded with its
/// result.
///
/// # Safety
/// `f` is the real `cuMemUnmap`; the arguments are the caller's.
pub(super) unsafe fn mem_unmap(f: unsafe extern "C" fn(u64, usize) -> c_int, ptr: u64, size: usize) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(ptr, size) };
    };
    let ticket = record::unmap_begin(ptr, size as u64);
    // SAFETY: as above.
    let r = unsafe { f(ptr, size) };
    record::unmap_end(ticket, ptr, size as u64, r);
    r
}

/// `cuMemRetainAllocationHandle`'s handler: the returned handle (the same value `cuMemCreate`
/// gave, as the driver does: docs/gpu-matrix.md) gains a reference.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
pub(super) unsafe fn retain(
    f: unsafe extern "C" fn(*mut u64, *mut c_void) -> c_int,
    handle: *mut u64,
    addr: *mut c_void,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(handle, addr) };
    };
    // SAFETY: as above.
    let r = unsafe { f(handle, addr) };
    if r == 0 {
        // SAFETY: on success the driver wrote the handle (a NULL out-pointer reads as 0).
        let h = unsafe { handle.value() };
        if h != 0 {
            record::handle_ref(Api::CuMemRetainAllocationHandle, h, addr as u64, -1);
        }
    }
    r
}

/// `cuMemImportFromShareableHandle`'s handler: the imported handle is recorded with its
/// memory's device (asked of the driver after the call); the collector counts its mappings
/// but not its bytes, which belong to the exporter.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
pub(super) unsafe fn import(
    f: unsafe extern "C" fn(*mut u64, *mut c_void, c_int) -> c_int,
    handle: *mut u64,
    os: *mut c_void,
    ty: c_int,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(handle, os, ty) };
    };
    // SAFETY: as above.
    let r = unsafe { f(handle, os, ty) };
    if r == 0 {
        // SAFETY: on success the driver wrote the handle (a NULL out-pointer reads as 0).
        let h = unsafe { handle.value() };
        if h != 0 {
            let device = real::handle_device(h);
            record::handle_ref(Api::CuMemImportFromShareableHandle, h, os as u64, device);
        }
    }
    r
}
