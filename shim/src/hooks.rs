//! Every symbol this library exports: the inventory of what we intercept.
//!
//! Each hook has the same shape: find the real function (or return the error CUDA gives when
//! the library is missing, `3`, not initialized), enter the re-entrancy guard (or forward at
//! once if this thread is already inside an intercepted call), call the real function with the
//! caller's arguments unchanged, record a small event, and return the real result unchanged.
//!
//! Signatures are those of CUDA 13.0's `cuda_runtime_api.h` and `cuda.h`; the `_ptsz` variants
//! are the per-thread-default-stream ABIs of the same functions.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use gpushim_wire::{Api, Kind};

use crate::real::{self, Hook};
use crate::record::{self, Guard, DEV_CURRENT};

/// `CUdeviceptr`.
type DevPtr = u64;
/// `CUresult` / `cudaError_t`: 3 is `CUDA_ERROR_NOT_INITIALIZED` / `cudaErrorInitializationError`.
const NOT_INITIALIZED: c_int = 3;
/// `CUDA_ERROR_NOT_FOUND`.
const NOT_FOUND: c_int = 500;

/// An out-pointer an allocation function writes its result through.
trait OutPtr: Copy {
    /// The value written, as an address; 0 for a NULL out-pointer.
    ///
    /// # Safety
    /// Call only after the real function returned success, which means it wrote the target.
    unsafe fn value(self) -> u64;
}

impl OutPtr for *mut *mut c_void {
    unsafe fn value(self) -> u64 {
        if self.is_null() {
            0
        } else {
            // SAFETY: non-NULL and written by the real call (the caller's contract).
            unsafe { *self as u64 }
        }
    }
}

impl OutPtr for *mut DevPtr {
    unsafe fn value(self) -> u64 {
        if self.is_null() {
            0
        } else {
            // SAFETY: non-NULL and written by the real call (the caller's contract).
            unsafe { *self }
        }
    }
}

/// The real function of `$hook` as type `$ty`, or return `$err` from the hook.
macro_rules! real_fn {
    ($hook:ident, $ty:ty, $err:expr) => {{
        let Some(a) = real::real(Hook::$hook) else { return $err };
        // SAFETY: the slot holds the real function of exactly this ABI variant.
        unsafe { std::mem::transmute::<usize, $ty>(a) }
    }};
}

/// Bytes of a pitched allocation, `row × height`; saturates instead of overflowing, because
/// the caller may pass any sizes (the real function rejects those that overflow) and an
/// overflow would panic inside the hook in a debug build.
fn pitched(row: usize, height: usize) -> u64 {
    (row as u64).saturating_mul(height as u64)
}

/// A hook for an allocation function that returns its result through `$out`.
/// `size` is evaluated after success (it may read other out-parameters); `req` is the size
/// requested, recorded on failure.
macro_rules! alloc_hook {
    (
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),*) via $hook:ident as $api:ident, $kind:ident;
        out = $out:ident; size = $size:expr; req = $req:expr; device = $dev:expr; stream = $stream:expr;
    ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The same contract as the CUDA function of this name; arguments are forwarded unchanged.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            type F = unsafe extern "C" fn($($ty),*) -> c_int;
            let f: F = real_fn!($hook, F, NOT_INITIALIZED);
            let Some(_g) = Guard::enter() else {
                // SAFETY: the caller's arguments, unchanged, to the real function.
                return unsafe { f($($arg),*) };
            };
            // SAFETY: as above.
            let r = unsafe { f($($arg),*) };
            if r == 0 {
                // SAFETY: the real call succeeded, so it wrote its out-parameters.
                let (addr, size) = unsafe { ($out.value(), $size) };
                record::alloc(Api::$api, Kind::$kind, r, addr, size, $dev, $stream as u64);
            } else {
                record::alloc(Api::$api, Kind::$kind, r, 0, $req, $dev, $stream as u64);
            }
            r
        }
    };
}

/// A hook for a free function.
macro_rules! free_hook {
    (
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),*) via $hook:ident as $api:ident;
        addr = $addr:expr; stream = $stream:expr;
    ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The same contract as the CUDA function of this name; arguments are forwarded unchanged.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            type F = unsafe extern "C" fn($($ty),*) -> c_int;
            let f: F = real_fn!($hook, F, NOT_INITIALIZED);
            let Some(_g) = Guard::enter() else {
                // SAFETY: the caller's arguments, unchanged, to the real function.
                return unsafe { f($($arg),*) };
            };
            let addr = $addr as u64;
            let ticket = record::free_begin(addr);
            // SAFETY: as above.
            let r = unsafe { f($($arg),*) };
            record::free_end(ticket, Api::$api, addr, $stream as u64, r);
            r
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Runtime API (libcudart), reached by symbol interposition or by dlsym.

alloc_hook! {
    /// `cudaError_t cudaMalloc(void **devPtr, size_t size)`: device memory.
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize) via CudaMalloc as CudaMalloc, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = 0;
}
free_hook! {
    /// `cudaError_t cudaFree(void *devPtr)`; `cudaFree(NULL)` is not recorded.
    fn cudaFree(ptr: *mut c_void) via CudaFree as CudaFree; addr = ptr; stream = 0;
}
alloc_hook! {
    /// `cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)`: stream-ordered.
    fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) via CudaMallocAsync as CudaMallocAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
alloc_hook! {
    /// `cudaMallocAsync`, per-thread default stream ABI.
    fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) via CudaMallocAsyncPtsz as CudaMallocAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
free_hook! {
    /// `cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)`.
    fn cudaFreeAsync(ptr: *mut c_void, stream: *mut c_void) via CudaFreeAsync as CudaFreeAsync; addr = ptr; stream = stream;
}
free_hook! {
    /// `cudaFreeAsync`, per-thread default stream ABI.
    fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: *mut c_void) via CudaFreeAsyncPtsz as CudaFreeAsync; addr = ptr; stream = stream;
}
alloc_hook! {
    /// `cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)`.
    fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void)
        via CudaMallocFromPoolAsync as CudaMallocFromPoolAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
alloc_hook! {
    /// `cudaMallocFromPoolAsync`, per-thread default stream ABI.
    fn cudaMallocFromPoolAsync_ptsz(ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void)
        via CudaMallocFromPoolAsyncPtsz as CudaMallocFromPoolAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
alloc_hook! {
    /// `cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)`: managed memory.
    fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: c_uint) via CudaMallocManaged as CudaMallocManaged, Managed;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = 0;
}
alloc_hook! {
    /// `cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)`:
    /// recorded size is pitch × height bytes.
    fn cudaMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize)
        via CudaMallocPitch as CudaMallocPitch, Device;
    out = ptr; size = pitched(if pitch.is_null() { width } else { *pitch }, height);
    req = pitched(width, height); device = DEV_CURRENT; stream = 0;
}
alloc_hook! {
    /// `cudaError_t cudaMallocHost(void **ptr, size_t size)`: pinned host memory.
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) via CudaMallocHost as CudaMallocHost, PinnedHost;
    out = ptr; size = size as u64; req = size as u64; device = -1; stream = 0;
}
alloc_hook! {
    /// `cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)`: pinned host memory.
    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) via CudaHostAlloc as CudaHostAlloc, PinnedHost;
    out = ptr; size = size as u64; req = size as u64; device = -1; stream = 0;
}
free_hook! {
    /// `cudaError_t cudaFreeHost(void *ptr)`.
    fn cudaFreeHost(ptr: *mut c_void) via CudaFreeHost as CudaFreeHost; addr = ptr; stream = 0;
}

// ---------------------------------------------------------------------------------------------
// Driver API (libcuda), reached by symbol, by dlsym, and by cuGetProcAddress.

alloc_hook! {
    /// `CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)`.
    fn cuMemAlloc_v2(ptr: *mut DevPtr, size: usize) via CuMemAllocV2 as CuMemAlloc, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = 0;
}
free_hook! {
    /// `CUresult cuMemFree_v2(CUdeviceptr dptr)`.
    fn cuMemFree_v2(ptr: DevPtr) via CuMemFreeV2 as CuMemFree; addr = ptr; stream = 0;
}
alloc_hook! {
    /// `CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
    /// size_t Height, unsigned int ElementSizeBytes)`: recorded size is pitch × height bytes.
    fn cuMemAllocPitch_v2(ptr: *mut DevPtr, pitch: *mut usize, width: usize, height: usize, elem: c_uint)
        via CuMemAllocPitchV2 as CuMemAllocPitch, Device;
    out = ptr; size = pitched(if pitch.is_null() { width } else { *pitch }, height);
    req = pitched(width, height); device = DEV_CURRENT; stream = 0;
}
alloc_hook! {
    /// `CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)`.
    fn cuMemAllocManaged(ptr: *mut DevPtr, size: usize, flags: c_uint) via CuMemAllocManaged as CuMemAllocManaged, Managed;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = 0;
}
alloc_hook! {
    /// `CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)`.
    fn cuMemAllocAsync(ptr: *mut DevPtr, size: usize, stream: *mut c_void) via CuMemAllocAsync as CuMemAllocAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
alloc_hook! {
    /// `cuMemAllocAsync`, per-thread default stream ABI.
    fn cuMemAllocAsync_ptsz(ptr: *mut DevPtr, size: usize, stream: *mut c_void) via CuMemAllocAsyncPtsz as CuMemAllocAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
free_hook! {
    /// `CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)`.
    fn cuMemFreeAsync(ptr: DevPtr, stream: *mut c_void) via CuMemFreeAsync as CuMemFreeAsync; addr = ptr; stream = stream;
}
free_hook! {
    /// `cuMemFreeAsync`, per-thread default stream ABI.
    fn cuMemFreeAsync_ptsz(ptr: DevPtr, stream: *mut c_void) via CuMemFreeAsyncPtsz as CuMemFreeAsync; addr = ptr; stream = stream;
}
alloc_hook! {
    /// `CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)`.
    fn cuMemAllocFromPoolAsync(ptr: *mut DevPtr, size: usize, pool: *mut c_void, stream: *mut c_void)
        via CuMemAllocFromPoolAsync as CuMemAllocFromPoolAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
alloc_hook! {
    /// `cuMemAllocFromPoolAsync`, per-thread default stream ABI.
    fn cuMemAllocFromPoolAsync_ptsz(ptr: *mut DevPtr, size: usize, pool: *mut c_void, stream: *mut c_void)
        via CuMemAllocFromPoolAsyncPtsz as CuMemAllocFromPoolAsync, Device;
    out = ptr; size = size as u64; req = size as u64; device = DEV_CURRENT; stream = stream;
}
alloc_hook! {
    /// `CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)`: pinned host memory.
    fn cuMemHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) via CuMemHostAlloc as CuMemHostAlloc, PinnedHost;
    out = ptr; size = size as u64; req = size as u64; device = -1; stream = 0;
}
alloc_hook! {
    /// `CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)`: pinned host memory.
    fn cuMemAllocHost_v2(ptr: *mut *mut c_void, size: usize) via CuMemAllocHostV2 as CuMemAllocHost, PinnedHost;
    out = ptr; size = size as u64; req = size as u64; device = -1; stream = 0;
}
free_hook! {
    /// `CUresult cuMemFreeHost(void *p)`.
    fn cuMemFreeHost(ptr: *mut c_void) via CuMemFreeHost as CuMemFreeHost; addr = ptr; stream = 0;
}
free_hook! {
    /// `CUresult cuMemRelease(CUmemGenericAllocationHandle handle)`: ends a `cuMemCreate`
    /// allocation (the physical memory goes once it is also unmapped; we count it at release).
    fn cuMemRelease(handle: u64) via CuMemRelease as CuMemRelease; addr = handle; stream = 0;
}

/// `CUmemLocationType` values (`cuda.h`): device, and the three host kinds.
const LOCATION_DEVICE: c_int = 1;
const LOCATION_HOST_FIRST: c_int = 2;
const LOCATION_HOST_LAST: c_int = 4;

/// `CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
/// const CUmemAllocationProp *prop, unsigned long long flags)`: physical memory for the driver's
/// virtual memory management (PyTorch's expandable segments, JAX). The device comes from
/// `prop->location` (offset 8: type, offset 12: id, per `CUmemAllocationProp` in `cuda.h`), not
/// from the current context, which the calling thread may not have; a host location is
/// recorded as pinned host memory.
///
/// # Safety
/// The same contract as CUDA's `cuMemCreate`; arguments are forwarded unchanged.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) -> c_int {
    type F = unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> c_int;
    let f: F = real_fn!(CuMemCreate, F, NOT_INITIALIZED);
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
        if p == 0 || real::is_own(p) {
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
        if let Some(h) = hook {
            real::set_real(h, p);
            // SAFETY: *pfn is writable (the driver just wrote it).
            unsafe { *pfn = wrapper(h) as *mut c_void };
        }
    });
}

/// `CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)`
/// (the pre-12.0 ABI).
///
/// # Safety
/// The same contract as CUDA's function; arguments are forwarded unchanged.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
    let f: F = real_fn!(CuGetProcAddress, F, NOT_FOUND);
    // SAFETY: the caller's arguments, unchanged, to the real function.
    let r = unsafe { f(symbol, pfn, version, flags) };
    if r == 0 {
        swap_proc(f as *const () as usize, symbol, version, flags, pfn);
    }
    r
}

/// `CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
/// cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)`, the ABI from CUDA 12.0,
/// which the runtime asks for and then loads the whole driver table through.
///
/// # Safety
/// The same contract as CUDA's function; arguments are forwarded unchanged.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
    let f: F = real_fn!(CuGetProcAddressV2, F, NOT_FOUND);
    // SAFETY: the caller's arguments, unchanged, to the real function.
    let r = unsafe { f(symbol, pfn, version, flags, status) };
    if r == 0 {
        swap_proc(f as *const () as usize, symbol, version, flags, pfn);
    }
    r
}

/// Our exported function for `h`.
fn wrapper(h: Hook) -> usize {
    match h {
        Hook::CudaMalloc => cudaMalloc as *const () as usize,
        Hook::CudaFree => cudaFree as *const () as usize,
        Hook::CudaMallocAsync => cudaMallocAsync as *const () as usize,
        Hook::CudaMallocAsyncPtsz => cudaMallocAsync_ptsz as *const () as usize,
        Hook::CudaFreeAsync => cudaFreeAsync as *const () as usize,
        Hook::CudaFreeAsyncPtsz => cudaFreeAsync_ptsz as *const () as usize,
        Hook::CudaMallocFromPoolAsync => cudaMallocFromPoolAsync as *const () as usize,
        Hook::CudaMallocFromPoolAsyncPtsz => cudaMallocFromPoolAsync_ptsz as *const () as usize,
        Hook::CudaMallocManaged => cudaMallocManaged as *const () as usize,
        Hook::CudaMallocPitch => cudaMallocPitch as *const () as usize,
        Hook::CudaMallocHost => cudaMallocHost as *const () as usize,
        Hook::CudaHostAlloc => cudaHostAlloc as *const () as usize,
        Hook::CudaFreeHost => cudaFreeHost as *const () as usize,
        Hook::CuMemAllocV2 => cuMemAlloc_v2 as *const () as usize,
        Hook::CuMemFreeV2 => cuMemFree_v2 as *const () as usize,
        Hook::CuMemAllocPitchV2 => cuMemAllocPitch_v2 as *const () as usize,
        Hook::CuMemAllocManaged => cuMemAllocManaged as *const () as usize,
        Hook::CuMemAllocAsync => cuMemAllocAsync as *const () as usize,
        Hook::CuMemAllocAsyncPtsz => cuMemAllocAsync_ptsz as *const () as usize,
        Hook::CuMemFreeAsync => cuMemFreeAsync as *const () as usize,
        Hook::CuMemFreeAsyncPtsz => cuMemFreeAsync_ptsz as *const () as usize,
        Hook::CuMemAllocFromPoolAsync => cuMemAllocFromPoolAsync as *const () as usize,
        Hook::CuMemAllocFromPoolAsyncPtsz => cuMemAllocFromPoolAsync_ptsz as *const () as usize,
        Hook::CuMemHostAlloc => cuMemHostAlloc as *const () as usize,
        Hook::CuMemAllocHostV2 => cuMemAllocHost_v2 as *const () as usize,
        Hook::CuMemFreeHost => cuMemFreeHost as *const () as usize,
        Hook::CuMemCreate => cuMemCreate as *const () as usize,
        Hook::CuMemRelease => cuMemRelease as *const () as usize,
        Hook::CuGetProcAddress => cuGetProcAddress as *const () as usize,
        Hook::CuGetProcAddressV2 => cuGetProcAddress_v2 as *const () as usize,
    }
}

// ---------------------------------------------------------------------------------------------
// Process exit without atexit handlers

/// `void _exit(int status)` (Python's `os._exit`, forked workers): no atexit handler runs, so
/// the stream is ended here, then the process exits with the status unchanged through the
/// system call glibc's `_exit` makes (`exit_group`). What runs first is safe in a signal
/// handler (`record::quick_finish`): crash handlers call `_exit`.
///
/// # Safety
/// The same contract as `_exit(2)`.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    let _ = std::panic::catch_unwind(|| record::quick_finish(crate::writer::exit_timeout()));
    loop {
        // SAFETY: exit_group ends every thread of the process and does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, libc::c_long::from(status)) };
    }
}

/// `void _Exit(int status)`, C99's name for [`_exit`].
///
/// # Safety
/// The same contract as `_Exit(3)`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: the same contract.
    unsafe { _exit(status) }
}

// ---------------------------------------------------------------------------------------------
// dlsym

/// Decides a `dlsym(handle, name)` call: returns our wrapper for a name we wrap looked up in a
/// specific library (remembering the real function found there), or 0 to let libc's `dlsym`
/// answer the call itself. `RTLD_DEFAULT` and `RTLD_NEXT` lookups always go to libc: they
/// depend on who the caller is, and through the tail jump below libc sees the original caller.
/// Such lookups of a wrapped name find our export anyway when we come first.
extern "C" fn dlsym_decide(handle: *mut c_void, name: *const c_char) -> usize {
    std::panic::catch_unwind(|| {
        real::init_real_dlsym();
        if name.is_null() || handle.is_null() || handle == libc::RTLD_NEXT {
            return 0;
        }
        // SAFETY: dlsym's contract: `name` is a NUL-terminated string.
        let cname = unsafe { CStr::from_ptr(name) };
        let Some(h) = Hook::by_name(cname) else { return 0 };
        let a = real::dlsym(handle, cname);
        if a == 0 || real::is_own(a) {
            return 0;
        }
        real::set_real(h, a);
        wrapper(h)
    })
    .unwrap_or(0)
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
        "ret",
        "2:",
        "jmp qword ptr [rip + {real}]",
        decide = sym dlsym_decide,
        real = sym real::REAL_DLSYM,
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
        // SAFETY: `name` is non-NULL and NUL-terminated (dlsym's contract).
        0 => real::dlsym(handle, unsafe { CStr::from_ptr(name) }) as *mut c_void,
        w => w as *mut c_void,
    }
}
