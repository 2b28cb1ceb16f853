//! Finding the real functions behind the ones we export or hand out.
//!
//! Each wrapped ABI variant (`cuMemAllocAsync` and `cuMemAllocAsync_ptsz` are two) has a slot
//! holding the real function's address. A slot is filled by whichever path saw it first: a
//! driver `dlsym(handle, name)` we answered, a `cuGetProcAddress` result we swapped, or, for the
//! symbols we export, a lookup after this library (`RTLD_NEXT`) and then in the loaded CUDA
//! libraries themselves (a `libcudart` loaded by a Python extension module is `RTLD_LOCAL`, out
//! of `RTLD_NEXT`'s reach). A slot never holds an address inside this library.
//!
//! For the runtime's functions this slot is only the fallback: a process may hold several
//! runtimes, and `route.rs` sends each call to the one its caller reaches; `dlsym` fills it no
//! more (a pointer from `dlsym` in one runtime must not change what the program's own calls run).

use crate::hook::{Hook, N};
use crate::loader::{self, dlsym, empty_dl_info, for_each_module, is_own, noload_handle};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::Relaxed};

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
/// Real function address per slot; 0 until found.
static REAL: [AtomicUsize; N] = [ZERO; N];
/// Exported address of each driver variant in the loaded driver, for matching the pointers
/// `cuGetProcAddress` returns; 0 until the driver is seen.
static KNOWN: [AtomicUsize; N] = [ZERO; N];
/// Real `cuCtxGetDevice` and `cuMemGetInfo_v2`, for the device ordinal and OOM forensics.
static CTX_GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
static MEM_GET_INFO: AtomicUsize = AtomicUsize::new(0);
static DEVICE_GET: AtomicUsize = AtomicUsize::new(0);
static DEVICE_GET_PCI_BUS_ID: AtomicUsize = AtomicUsize::new(0);
static DEVICE_GET_UUID: AtomicUsize = AtomicUsize::new(0);
static DEVICE_GET_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Real `cuArrayGetMemoryRequirements` and `cuMipmappedArrayGetMemoryRequirements`, for the
/// footprint of CUDA arrays.
static ARRAY_REQUIREMENTS: AtomicUsize = AtomicUsize::new(0);
static MIPMAP_REQUIREMENTS: AtomicUsize = AtomicUsize::new(0);
/// Device ordinal placeholder: ask the driver for the current context's device.
pub const DEV_CURRENT: i32 = i32::MIN;

/// Real `cuStreamGetDevice` (CUDA 12.8+).
static STREAM_GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
/// Real `cuCtxGetCurrent`.
static CTX_GET_CURRENT: AtomicUsize = AtomicUsize::new(0);
/// Real `cuStreamGetCtx`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
/// `cuDevicePrimaryCtxGetState`, `cuDevicePrimaryCtxRetain`, `cuDevicePrimaryCtxRelease_v2`
/// and `cuPointerGetAttribute`.
static STREAM_GET_CTX: AtomicUsize = AtomicUsize::new(0);
static CTX_PUSH: AtomicUsize = AtomicUsize::new(0);
static CTX_POP: AtomicUsize = AtomicUsize::new(0);
static PRIMARY_GET_STATE: AtomicUsize = AtomicUsize::new(0);
static PRIMARY_RETAIN: AtomicUsize = AtomicUsize::new(0);
static PRIMARY_RELEASE: AtomicUsize = AtomicUsize::new(0);
static POINTER_GET_ATTRIBUTE: AtomicUsize = AtomicUsize::new(0);
/// Whether the program has created a context of its own (`cuCtxCreate`).
static CONTEXTS_CREATED: AtomicBool = AtomicBool::new(false);
/// Real `cuMemGetAllocationPropertiesFromHandle`, for the device of an imported VMM handle.
static HANDLE_PROPERTIES: AtomicUsize = AtomicUsize::new(0);
/// Real `cuStreamIsCapturing`.
static STREAM_IS_CAPTURING: AtomicUsize = AtomicUsize::new(0);

/// Stores `addr` as the real function of `h` unless it is one of ours or the library that holds
/// it cannot be kept loaded (see `loader::pin`). True if and only if the slot now holds `addr`.
pub fn set_real(h: Hook, addr: usize) -> bool {
    if addr == 0 || is_own(addr) {
        return false;
    }
    if REAL[h as usize].load(Relaxed) == addr {
        return true;
    }
    if !loader::pin(addr) {
        return false;
    }
    REAL[h as usize].store(addr, Relaxed);
    true
}

/// The real function of `h`, looked up on first use; `None` if no CUDA library defines it.
/// Never panics (the lookup runs under `catch_unwind`): hooks call it outside their guard.
pub fn real(h: Hook) -> Option<usize> {
    let a = REAL[h as usize].load(Relaxed);
    if a != 0 {
        return Some(a);
    }
    std::panic::catch_unwind(|| look_up(h)).ok().flatten()
}

fn look_up(h: Hook) -> Option<usize> {
    let mut a = dlsym(libc::RTLD_NEXT, h.name());
    if a == 0 || is_own(a) {
        a = lookup_in_cuda_libraries(h.name(), h.is_driver());
    }
    if a == 0 || is_own(a) {
        return None;
    }
    set_real(h, a);
    Some(a)
}

/// Looks `name` up in each loaded library whose file name is the CUDA driver's (`libcuda.so*`)
/// or runtime's (`libcudart*`), through a handle of its own (`RTLD_NOLOAD`), so that libraries
/// loaded with `RTLD_LOCAL` are found too.
fn lookup_in_cuda_libraries(name: &CStr, driver: bool) -> usize {
    let mut found = 0usize;
    for_each_module(|m| {
        if found != 0 {
            return;
        }
        let base = m.path.rsplit('/').next().unwrap_or("");
        let wanted = if driver { base.starts_with("libcuda.so") } else { base.starts_with("libcudart") };
        if wanted {
            if let Some(h) = noload_handle(&m.path) {
                let a = dlsym(h, name);
                if a != 0 && !is_own(a) {
                    found = a;
                }
            }
        }
    });
    found
}

/// Whether a loaded CUDA driver library exports `name`.
pub fn driver_has(name: &CStr) -> bool {
    lookup_in_cuda_libraries(name, true) != 0
}

/// Records the exported address of every driver variant from the driver library that holds
/// `driver_fn` (the real `cuGetProcAddress`), once.
pub fn learn_driver(driver_fn: usize) {
    if KNOWN[Hook::CuGetProcAddressV2 as usize].load(Relaxed) != 0
        || KNOWN[Hook::CuGetProcAddress as usize].load(Relaxed) != 0
    {
        return;
    }
    let mut info: libc::Dl_info = empty_dl_info();
    // SAFETY: dladdr writes into `info` and reads nothing else; any address value is accepted.
    if unsafe { libc::dladdr(driver_fn as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let Some(h) = noload_handle(&path) else { return };
    for &hk in Hook::ALL.iter().filter(|h| h.is_driver()) {
        let a = dlsym(h, hk.name());
        if a != 0 && !is_own(a) {
            KNOWN[hk as usize].store(a, Relaxed);
        }
    }
    CTX_GET_DEVICE.store(dlsym(h, c"cuCtxGetDevice"), Relaxed);
    MEM_GET_INFO.store(dlsym(h, c"cuMemGetInfo_v2"), Relaxed);
}

/// The driver variant whose exported address is `addr`, if any.
pub fn known_driver_fn(addr: usize) -> Option<Hook> {
    Hook::ALL.iter().copied().find(|h| KNOWN[*h as usize].load(Relaxed) == addr)
}

/// Resolves a driver helper (`cuCtxGetDevice`, `cuMemGetInfo_v2`, the graph queries of
/// `exports::graphs`) from the loaded driver, caching it in `slot`; 0 if there is none.
pub(crate) fn driver_helper(slot: &AtomicUsize, name: &CStr) -> usize {
    let a = slot.load(Relaxed);
    if a != 0 {
        return a;
    }
    let a = lookup_in_cuda_libraries(name, true);
    slot.store(a, Relaxed);
    a
}

/// The calling thread's current device ordinal (`cuCtxGetDevice`), or -1 without a context.
pub fn current_device() -> i32 {
    let f = driver_helper(&CTX_GET_DEVICE, c"cuCtxGetDevice");
    if f == 0 {
        return -1;
    }
    let mut dev: c_int = -1;
    // SAFETY: f is the driver's `CUresult cuCtxGetDevice(CUdevice *device)`.
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: `dev` is a valid out-pointer.
    if unsafe { f(&mut dev) } == 0 {
        dev
    } else {
        -1
    }
}

/// How many devices the driver shows this process (`cuDeviceGetCount`, CUDA Driver API,
/// "Device Management"; no current context needed), 0 if it cannot say. Called by the writer
/// thread, after the program's first allocation (the driver is initialized by then).
pub fn device_count() -> i32 {
    let f = driver_helper(&DEVICE_GET_COUNT, c"cuDeviceGetCount");
    if f == 0 {
        return 0;
    }
    // SAFETY: f is the driver's `CUresult cuDeviceGetCount(int *count)`.
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer.
    if unsafe { f(&mut n) } == 0 {
        n.max(0)
    } else {
        0
    }
}

/// The machine's GPU behind device `ordinal`: its PCI bus id (`cuDeviceGetPCIBusId`, empty if
/// the driver did not say) and UUID (`cuDeviceGetUuid_v2`, else `cuDeviceGetUuid`; zeros if
/// unknown), asked of the driver (CUDA Driver API, "Device Management"; neither needs a
/// current context nor touches a stream). `None` when the driver has no such device. Called by
/// the writer thread once per ordinal, never on the program's threads.
pub fn device_identity(ordinal: i32) -> Option<(String, [u8; 16])> {
    let get = driver_helper(&DEVICE_GET, c"cuDeviceGet");
    if get == 0 {
        return None;
    }
    // SAFETY: `get` is the driver's `CUresult cuDeviceGet(CUdevice *device, int ordinal)`.
    let get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int = unsafe { std::mem::transmute(get) };
    let mut dev: c_int = -1;
    // SAFETY: `dev` is a valid out-pointer.
    if unsafe { get(&mut dev, ordinal) } != 0 {
        return None;
    }
    let mut pci = String::new();
    let f = driver_helper(&DEVICE_GET_PCI_BUS_ID, c"cuDeviceGetPCIBusId");
    if f != 0 {
        // SAFETY: f is the driver's `CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)`.
        let f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int = unsafe { std::mem::transmute(f) };
        let mut buf = [0 as c_char; 64];
        // SAFETY: `buf` holds `len` bytes; the driver writes a NUL-terminated string into it.
        if unsafe { f(buf.as_mut_ptr(), buf.len() as c_int - 1, dev) } == 0 {
            // SAFETY: NUL-terminated within `buf` (its last byte stays 0).
            pci = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        }
    }
    let mut uuid = [0u8; 16];
    let mut f = driver_helper(&DEVICE_GET_UUID, c"cuDeviceGetUuid_v2");
    if f == 0 {
        f = lookup_in_cuda_libraries(c"cuDeviceGetUuid", true);
    }
    if f != 0 {
        // SAFETY: f is the driver's `CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)`
        // (`CUuuid` is 16 bytes), or its first version of the same signature.
        let f: unsafe extern "C" fn(*mut u8, c_int) -> c_int = unsafe { std::mem::transmute(f) };
        let mut out = [0u8; 16];
        // SAFETY: `out` holds the 16 bytes of a CUuuid.
        if unsafe { f(out.as_mut_ptr(), dev) } == 0 {
            uuid = out;
        }
    }
    Some((pci, uuid))
}

/// `(free, total)` device memory from `cuMemGetInfo_v2` for the current context, bytes.
pub fn mem_info() -> Option<(u64, u64)> {
    let f = driver_helper(&MEM_GET_INFO, c"cuMemGetInfo_v2");
    if f == 0 {
        return None;
    }
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: f is the driver's `CUresult cuMemGetInfo_v2(size_t *free, size_t *total)`.
    let f: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: both are valid out-pointers.
    (unsafe { f(&mut free, &mut total) } == 0).then_some((free as u64, total as u64))
}

/// The device memory a CUDA array (or, if `mipmapped`, a mipmapped array) takes, bytes, as the
/// driver tells it (`cuArrayGetMemoryRequirements`, CUDA 11.6+: `CUDA_ARRAY_MEMORY_REQUIREMENTS`
/// is `{size_t size; size_t alignment; unsigned reserved[4]}`); `None` if it cannot.
pub fn array_footprint(handle: u64, mipmapped: bool) -> Option<u64> {
    let (slot, name) = if mipmapped {
        (&MIPMAP_REQUIREMENTS, c"cuMipmappedArrayGetMemoryRequirements")
    } else {
        (&ARRAY_REQUIREMENTS, c"cuArrayGetMemoryRequirements")
    };
    let f = driver_helper(slot, name);
    let device = current_device();
    if f == 0 || handle == 0 || device < 0 {
        return None;
    }
    #[repr(C)]
    struct Requirements {
        size: usize,
        alignment: usize,
        reserved: [u32; 4],
    }
    let mut req = Requirements { size: 0, alignment: 0, reserved: [0; 4] };
    // SAFETY: f is the driver's `CUresult (CUDA_ARRAY_MEMORY_REQUIREMENTS *, CUarray, CUdevice)`
    // (the mipmapped one takes a `CUmipmappedArray`, also a pointer).
    let f: unsafe extern "C" fn(*mut Requirements, *mut c_void, c_int) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: `req` is a valid out-pointer; the handle came from the driver's own create call.
    let r = unsafe { f(&mut req, handle as *mut c_void, device) };
    (r == 0 && req.size > 0).then_some(req.size as u64)
}

/// The calling thread's current context (`cuCtxGetCurrent`), if it has one.
pub fn current_context() -> Option<usize> {
    let f = driver_helper(&CTX_GET_CURRENT, c"cuCtxGetCurrent");
    if f == 0 {
        return None;
    }
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: f is the driver's `CUresult cuCtxGetCurrent(CUcontext *pctx)`.
    let f: unsafe extern "C" fn(*mut *mut c_void) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: `ctx` is a valid out-pointer.
    (unsafe { f(&mut ctx) } == 0 && !ctx.is_null()).then_some(ctx as usize)
}

/// How many devices the driver shows, once known ([`one_device`]); 0 until then.
static DEVICES: AtomicI32 = AtomicI32::new(0);

/// Whether the process sees exactly one device, whose ordinal is then 0 for every stream and
/// context. `cuDeviceGetCount` (CUDA Driver API, "Device Management": no context needed, no
/// stream touched) is asked once, at the first call after a successful allocation (the driver
/// is initialized by then) while no stream capture is in progress; the count cannot change in
/// a process (`CUDA_VISIBLE_DEVICES` is read once, at `cuInit`). False until known.
pub fn one_device() -> bool {
    match DEVICES.load(Relaxed) {
        1 => true,
        0 if !crate::capture::any(driver_has) => {
            let n = device_count();
            if n > 0 {
                DEVICES.store(n, Relaxed);
            }
            n == 1
        }
        _ => false,
    }
}

/// The ordinal a successful allocation's `device` stands for: `device` itself, or for
/// [`DEV_CURRENT`] the current device, 0 without asking when the process sees one device.
/// `ok` is false for a failed call (which may have had no context: then asked).
pub fn device_of(device: i32, ok: bool) -> i32 {
    if device != DEV_CURRENT {
        device
    } else if ok && one_device() {
        0
    } else {
        current_device()
    }
}

/// The device of a stream-ordered allocation: the device of `stream` (`cuStreamGetDevice`,
/// CUDA 12.8 and later), which need not be the calling thread's current one; for the legacy and
/// per-thread default streams (handles 0, 1 and 2, `cuda.h`), or without that function,
/// `DEV_CURRENT` (the current device). 0 without asking when the process sees one device: every
/// stream is then device 0's.
pub fn stream_device(stream: *mut c_void) -> i32 {
    if (stream as usize) <= 2 {
        return DEV_CURRENT;
    }
    if one_device() {
        return 0;
    }
    let f = driver_helper(&STREAM_GET_DEVICE, c"cuStreamGetDevice");
    if f == 0 {
        return DEV_CURRENT;
    }
    let mut dev: c_int = -1;
    // SAFETY: f is the driver's `CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)`.
    let f: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: the stream is the one the caller passed to the allocation that just succeeded;
    // `dev` is a valid out-pointer.
    if unsafe { f(stream, &mut dev) } == 0 && dev >= 0 {
        dev
    } else {
        DEV_CURRENT
    }
}

/// Notes that the program created a context of its own; from then on [`contexts_created`] is
/// true and allocations record their context.
pub fn note_context_created() {
    CONTEXTS_CREATED.store(true, Relaxed);
}

/// Whether the program has created a context of its own (one relaxed load).
pub fn contexts_created() -> bool {
    CONTEXTS_CREATED.load(Relaxed)
}

/// The context of `stream` (`CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)`).
fn stream_context(stream: u64) -> Option<u64> {
    let f = driver_helper(&STREAM_GET_CTX, c"cuStreamGetCtx");
    if f == 0 {
        return None;
    }
    // SAFETY: f is the driver's `cuStreamGetCtx`.
    let f: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int = unsafe { std::mem::transmute(f) };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: the stream is the caller's, passed to an allocation that just succeeded or
    // failed; `ctx` is a valid out-pointer.
    (unsafe { f(stream as *mut c_void, &mut ctx) } == 0 && !ctx.is_null()).then_some(ctx as u64)
}

/// The device ordinal of the memory at `ptr` (`cuPointerGetAttribute` with
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`, 9 in `cuda.h`); `None` if the driver cannot tell.
pub fn pointer_device(ptr: u64) -> Option<i32> {
    const DEVICE_ORDINAL: c_int = 9;
    let f = driver_helper(&POINTER_GET_ATTRIBUTE, c"cuPointerGetAttribute");
    if f == 0 || ptr == 0 {
        return None;
    }
    // SAFETY: f is the driver's `CUresult cuPointerGetAttribute(void *data,
    // CUpointer_attribute attribute, CUdeviceptr ptr)`; this attribute writes an int.
    let f: unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int = unsafe { std::mem::transmute(f) };
    let mut dev: c_int = -1;
    // SAFETY: `dev` is a valid out-pointer of the attribute's type.
    (unsafe { f((&mut dev as *mut c_int).cast(), DEVICE_ORDINAL, ptr) } == 0 && dev >= 0).then_some(dev)
}

/// Whether `dev`'s primary context is active (`cuDevicePrimaryCtxGetState`); `None` if the
/// driver cannot tell.
pub fn primary_context_active(dev: c_int) -> Option<bool> {
    let f = driver_helper(&PRIMARY_GET_STATE, c"cuDevicePrimaryCtxGetState");
    if f == 0 {
        return None;
    }
    // SAFETY: f is the driver's `CUresult cuDevicePrimaryCtxGetState(CUdevice dev,
    // unsigned int *flags, int *active)`.
    let f: unsafe extern "C" fn(c_int, *mut u32, *mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    let (mut flags, mut active) = (0u32, 0 as c_int);
    // SAFETY: valid out-pointers.
    (unsafe { f(dev, &mut flags, &mut active) } == 0).then_some(active != 0)
}

/// `(free, total)` device memory of the device an allocation was for, bytes: the current
/// context's (`cuMemGetInfo_v2`) when that is the device; else, made current for the question
/// and restored after, the context of `stream` or the device's primary context if it is already
/// active (`cuDevicePrimaryCtxRetain`, whose matching release leaves its count as it was).
/// Only called after an out-of-memory failure.
pub fn mem_info_of(device: i32, stream: u64) -> Option<(u64, u64)> {
    if device < 0 || device == current_device() {
        return mem_info();
    }
    let push = driver_helper(&CTX_PUSH, c"cuCtxPushCurrent_v2");
    let pop = driver_helper(&CTX_POP, c"cuCtxPopCurrent_v2");
    if push == 0 || pop == 0 {
        return None;
    }
    // SAFETY: the driver's `CUresult cuCtxPushCurrent_v2(CUcontext)` and
    // `CUresult cuCtxPopCurrent_v2(CUcontext *)`.
    let push: unsafe extern "C" fn(*mut c_void) -> c_int = unsafe { std::mem::transmute(push) };
    // SAFETY: as above.
    let pop: unsafe extern "C" fn(*mut *mut c_void) -> c_int = unsafe { std::mem::transmute(pop) };
    let in_ctx = |ctx: *mut c_void| {
        // SAFETY: ctx is a live context (the stream's, or a primary context we hold a
        // reference to); the push is undone by the pop before returning.
        if unsafe { push(ctx) } != 0 {
            return None;
        }
        let info = mem_info();
        let mut popped: *mut c_void = std::ptr::null_mut();
        // SAFETY: pops what we pushed.
        unsafe { pop(&mut popped) };
        info
    };
    if stream > 2 {
        if let Some(ctx) = stream_context(stream) {
            return in_ctx(ctx as *mut c_void);
        }
    }
    if primary_context_active(device) != Some(true) {
        return None; // retaining would create the context
    }
    let retain = driver_helper(&PRIMARY_RETAIN, c"cuDevicePrimaryCtxRetain");
    let release = driver_helper(&PRIMARY_RELEASE, c"cuDevicePrimaryCtxRelease_v2");
    if retain == 0 || release == 0 {
        return None;
    }
    // SAFETY: the driver's `CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice)` and
    // `CUresult cuDevicePrimaryCtxRelease_v2(CUdevice)`.
    let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int = unsafe { std::mem::transmute(retain) };
    // SAFETY: as above.
    let release: unsafe extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(release) };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the context is active, so this only counts a reference.
    if unsafe { retain(&mut ctx, device) } != 0 {
        return None;
    }
    let info = in_ctx(ctx);
    // SAFETY: drops the reference taken above.
    unsafe { release(device) };
    info
}

/// The device ordinal of VMM handle `handle`'s memory, from
/// `cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, handle)` (CUDA Driver
/// API, "Virtual Memory Management"; `CUmemAllocationProp` is 32 bytes in CUDA 13.0's `cuda.h`,
/// with its `CUmemLocation {int type; int id;}` at byte offset 8); -1 for host memory or when
/// the driver cannot tell.
pub fn handle_device(handle: u64) -> i32 {
    let f = driver_helper(&HANDLE_PROPERTIES, c"cuMemGetAllocationPropertiesFromHandle");
    if f == 0 || handle == 0 {
        return -1;
    }
    // Twice the size the header gives, zeroed, so that a larger struct of a later driver
    // still fits.
    let mut prop = [0u64; 8];
    // SAFETY: f is the driver's `CUresult (CUmemAllocationProp *, CUmemGenericAllocationHandle)`.
    let f: unsafe extern "C" fn(*mut u64, u64) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: `prop` is a valid, aligned out-buffer of 64 bytes; the handle came from the
    // driver's own import call that just succeeded.
    if unsafe { f(prop.as_mut_ptr(), handle) } != 0 {
        return -1;
    }
    let (ty, id) = ((prop[1] & 0xffff_ffff) as c_int, (prop[1] >> 32) as c_int);
    // CU_MEM_LOCATION_TYPE_DEVICE = 1.
    if ty == 1 && id >= 0 {
        id
    } else {
        -1
    }
}

/// The stream a per-thread-default-stream (`_ptsz`) entry point means by `stream`: its handle 0
/// is the calling thread's per-thread default stream, `CU_STREAM_PER_THREAD` (2, `cuda.h`).
pub fn per_thread(stream: *mut c_void) -> *mut c_void {
    if stream.is_null() {
        2 as *mut c_void
    } else {
        stream
    }
}

/// Whether `stream` is capturing into a graph (`cuStreamIsCapturing` says
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`, 1): a stream-ordered allocation or free on it then adds a
/// node to the graph being captured instead of allocating or freeing (CUDA Programming Guide,
/// "Graph Memory Nodes", stream capture). Not asked while no capture is in progress in the
/// process (`capture.rs`: no stream captures then; one load instead of a driver call).
#[inline]
pub fn capturing(stream: *mut c_void) -> bool {
    crate::capture::any(driver_has) && capturing_now(stream)
}

/// [`capturing`], asked of the driver whatever the captures seen. The legacy default stream
/// (handles 0 and 1, `cuda.h`) cannot capture and is not asked: asking about it while another
/// stream captures is an error (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`). The runtime's
/// `cudaStream_t` and the driver's `CUstream` are the same handle. False without the function.
pub fn capturing_now(stream: *mut c_void) -> bool {
    if (stream as usize) <= 1 {
        return false;
    }
    let f = driver_helper(&STREAM_IS_CAPTURING, c"cuStreamIsCapturing");
    if f == 0 {
        return false;
    }
    let mut status: c_int = 0;
    // SAFETY: f is the driver's `CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus *)`.
    let f: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    // SAFETY: the stream is the caller's, just used by a call that succeeded (or about to be
    // used by a free); `status` is a valid out-pointer.
    unsafe { f(stream, &mut status) == 0 && status == 1 }
}
