//! Virtual memory management: `cuMemCreate`, whose device comes from its properties rather
//! than the current context.

use std::ffi::{c_int, c_void};

use gpushim_wire::{Api, Kind};

use super::OutPtr;
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
