//! Finding the real functions behind the ones we export or hand out.
//!
//! Each wrapped ABI variant (`cuMemAllocAsync` and `cuMemAllocAsync_ptsz` are two) has a slot
//! holding the real function's address. A slot is filled by whichever path saw it first: a
//! `dlsym(handle, name)` we answered, a `cuGetProcAddress` result we swapped, or, for the
//! symbols we export, a lookup after this library (`RTLD_NEXT`) and then in the loaded CUDA
//! libraries themselves (a `libcudart` loaded by a Python extension module is `RTLD_LOCAL`, out
//! of `RTLD_NEXT`'s reach). A slot never holds an address inside this library.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

macro_rules! hooks {
    ($($v:ident = $name:literal, $driver:literal;)*) => {
        /// One wrapped ABI variant.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Hook { $($v,)* }

        impl Hook {
            /// Every variant, in slot order.
            pub const ALL: &'static [Hook] = &[$(Hook::$v,)*];
            /// Exported symbol name of each variant, by slot.
            const NAMES: &'static [&'static CStr] = &[$($name,)*];
            /// True for driver-API variants (found in `libcuda`), by slot.
            const DRIVER: &'static [bool] = &[$($driver,)*];
        }
    };
}

hooks! {
    CudaMalloc = c"cudaMalloc", false;
    CudaFree = c"cudaFree", false;
    CudaMallocAsync = c"cudaMallocAsync", false;
    CudaMallocAsyncPtsz = c"cudaMallocAsync_ptsz", false;
    CudaFreeAsync = c"cudaFreeAsync", false;
    CudaFreeAsyncPtsz = c"cudaFreeAsync_ptsz", false;
    CudaMallocFromPoolAsync = c"cudaMallocFromPoolAsync", false;
    CudaMallocFromPoolAsyncPtsz = c"cudaMallocFromPoolAsync_ptsz", false;
    CudaMallocManaged = c"cudaMallocManaged", false;
    CudaMallocPitch = c"cudaMallocPitch", false;
    CudaMallocHost = c"cudaMallocHost", false;
    CudaHostAlloc = c"cudaHostAlloc", false;
    CudaFreeHost = c"cudaFreeHost", false;
    CuMemAllocV2 = c"cuMemAlloc_v2", true;
    CuMemFreeV2 = c"cuMemFree_v2", true;
    CuMemAllocPitchV2 = c"cuMemAllocPitch_v2", true;
    CuMemAllocManaged = c"cuMemAllocManaged", true;
    CuMemAllocAsync = c"cuMemAllocAsync", true;
    CuMemAllocAsyncPtsz = c"cuMemAllocAsync_ptsz", true;
    CuMemFreeAsync = c"cuMemFreeAsync", true;
    CuMemFreeAsyncPtsz = c"cuMemFreeAsync_ptsz", true;
    CuMemAllocFromPoolAsync = c"cuMemAllocFromPoolAsync", true;
    CuMemAllocFromPoolAsyncPtsz = c"cuMemAllocFromPoolAsync_ptsz", true;
    CuMemHostAlloc = c"cuMemHostAlloc", true;
    CuMemAllocHostV2 = c"cuMemAllocHost_v2", true;
    CuMemFreeHost = c"cuMemFreeHost", true;
    CuMemCreate = c"cuMemCreate", true;
    CuMemRelease = c"cuMemRelease", true;
    CuGetProcAddress = c"cuGetProcAddress", true;
    CuGetProcAddressV2 = c"cuGetProcAddress_v2", true;
}

const N: usize = Hook::ALL.len();

impl Hook {
    /// The exported symbol name.
    pub fn name(self) -> &'static CStr {
        Self::NAMES[self as usize]
    }

    /// The variant whose exported name is exactly `name`.
    pub fn by_name(name: &CStr) -> Option<Hook> {
        let bytes = name.to_bytes();
        // Cheap filter first: every wrapped name starts with "cu".
        if !bytes.starts_with(b"cu") {
            return None;
        }
        Hook::ALL.iter().copied().find(|h| h.name().to_bytes() == bytes)
    }

    /// Variant chosen by the CUDA driver's rules for `cuGetProcAddress(symbol, version, flags)`
    /// (CUDA Driver API, "Driver Entry Point Access"): the `_v2` ABIs from version 3020, the
    /// per-thread default stream (`_ptsz`) ones with flag `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`
    /// (2), `cuGetProcAddress_v2` from 12000. Used only when the returned pointer matches no
    /// exported variant by address.
    pub fn by_proc_request(symbol: &CStr, version: c_int, flags: u64) -> Option<Hook> {
        let ptsz = flags & 2 != 0;
        Some(match symbol.to_bytes() {
            b"cuMemAlloc" if version >= 3020 => Hook::CuMemAllocV2,
            b"cuMemFree" if version >= 3020 => Hook::CuMemFreeV2,
            b"cuMemAllocPitch" if version >= 3020 => Hook::CuMemAllocPitchV2,
            b"cuMemAllocHost" if version >= 3020 => Hook::CuMemAllocHostV2,
            b"cuMemAllocManaged" => Hook::CuMemAllocManaged,
            b"cuMemHostAlloc" => Hook::CuMemHostAlloc,
            b"cuMemFreeHost" => Hook::CuMemFreeHost,
            b"cuMemCreate" => Hook::CuMemCreate,
            b"cuMemRelease" => Hook::CuMemRelease,
            b"cuMemAllocAsync" if ptsz => Hook::CuMemAllocAsyncPtsz,
            b"cuMemAllocAsync" => Hook::CuMemAllocAsync,
            b"cuMemFreeAsync" if ptsz => Hook::CuMemFreeAsyncPtsz,
            b"cuMemFreeAsync" => Hook::CuMemFreeAsync,
            b"cuMemAllocFromPoolAsync" if ptsz => Hook::CuMemAllocFromPoolAsyncPtsz,
            b"cuMemAllocFromPoolAsync" => Hook::CuMemAllocFromPoolAsync,
            b"cuGetProcAddress" if version >= 12000 => Hook::CuGetProcAddressV2,
            b"cuGetProcAddress" => Hook::CuGetProcAddress,
            _ => return None,
        })
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
/// Real function address per slot; 0 until found.
static REAL: [AtomicUsize; N] = [ZERO; N];
/// Exported address of each driver variant in the loaded driver, for matching the pointers
/// `cuGetProcAddress` returns; 0 until the driver is seen.
static KNOWN: [AtomicUsize; N] = [ZERO; N];
/// Address of the real `dlsym` (libc's), 0 until resolved.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// `[start, end)` of this library's own mapping, for refusing our own addresses and
/// stripping our frames from backtraces.
static OWN: (AtomicUsize, AtomicUsize) = (AtomicUsize::new(0), AtomicUsize::new(0));
/// Real `cuCtxGetDevice` and `cuMemGetInfo_v2`, for the device ordinal and OOM forensics.
static CTX_GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
static MEM_GET_INFO: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Stand-in for `dlsym` if libc's cannot be found (it always can on glibc): finds nothing.
unsafe extern "C" fn no_dlsym(_: *mut c_void, _: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

/// Resolves libc's `dlsym` without going through our own export: `dlvsym` with glibc's version
/// tags (2.34 moved it into libc; 2.2.5 is the x86-64 base version).
pub fn init_real_dlsym() {
    if REAL_DLSYM.load(Relaxed) != 0 {
        return;
    }
    let mut f = 0usize;
    for ver in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
        // SAFETY: dlvsym takes NUL-terminated strings, which CStr literals are.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), ver.as_ptr()) };
        if !p.is_null() {
            f = p as usize;
            break;
        }
    }
    if f == 0 {
        f = no_dlsym as *const () as usize;
    }
    REAL_DLSYM.store(f, Relaxed);
}

/// libc's `dlsym`. Lookups through it are made on behalf of this library: never use it for
/// `RTLD_NEXT` on behalf of a caller.
pub fn dlsym(handle: *mut c_void, name: &CStr) -> usize {
    init_real_dlsym();
    // SAFETY: REAL_DLSYM holds libc's dlsym or `no_dlsym`, both of this type.
    let f: DlsymFn = unsafe { std::mem::transmute::<usize, DlsymFn>(REAL_DLSYM.load(Relaxed)) };
    // SAFETY: `name` is NUL-terminated; dlsym accepts any handle value and reports errors by NULL.
    unsafe { f(handle, name.as_ptr()) as usize }
}

/// True if and only if `addr` lies inside this library.
pub fn is_own(addr: usize) -> bool {
    let (s, e) = own_range();
    addr >= s && addr < e
}

/// `[start, end)` of this library's mapping.
pub fn own_range() -> (usize, usize) {
    let s = OWN.0.load(Relaxed);
    if s != 0 {
        return (s, OWN.1.load(Relaxed));
    }
    let me = own_range as *const () as usize;
    let mut found = (0usize, 0usize);
    for_each_module(|m| {
        if m.ranges.iter().any(|&(s, e)| me >= s && me < e) {
            let s = m.ranges.iter().map(|r| r.0).min().unwrap_or(0);
            let e = m.ranges.iter().map(|r| r.1).max().unwrap_or(0);
            found = (s, e);
        }
    });
    OWN.1.store(found.1, Relaxed);
    OWN.0.store(found.0, Relaxed);
    found
}

/// Stores `addr` as the real function of `h` unless it is one of ours.
pub fn set_real(h: Hook, addr: usize) {
    if addr != 0 && !is_own(addr) && REAL[h as usize].swap(addr, Relaxed) != addr {
        pin(addr);
    }
}

/// Keeps the library that holds `addr` loaded for the rest of the process (a reference taken
/// with `RTLD_NOLOAD` and never dropped). A slot must never point into a library the program
/// has `dlclose`d: the program may still reach our export of the same name (through
/// `RTLD_DEFAULT`, or a later `dlopen` of the library at another address), and the hook would
/// jump into unmapped memory.
fn pin(addr: usize) {
    let mut info = unsafe_zeroed_dl_info();
    // SAFETY: dladdr writes into `info` and reads nothing else; any address value is accepted.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dli_fname is the loader's NUL-terminated name of a loaded object; RTLD_NOLOAD
    // never loads anything or runs a constructor, it only adds a reference.
    unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
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
        a = lookup_in_cuda_libraries(h.name(), Hook::DRIVER[h as usize]);
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

/// A handle of an already loaded library, without loading anything.
fn noload_handle(path: &str) -> Option<*mut c_void> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: RTLD_NOLOAD never loads or runs a constructor; it only returns a handle (with a
    // reference count we never drop: CUDA libraries stay loaded anyway).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    (!h.is_null()).then_some(h)
}

/// Records the exported address of every driver variant from the driver library that holds
/// `driver_fn` (the real `cuGetProcAddress`), once.
pub fn learn_driver(driver_fn: usize) {
    if KNOWN[Hook::CuGetProcAddressV2 as usize].load(Relaxed) != 0
        || KNOWN[Hook::CuGetProcAddress as usize].load(Relaxed) != 0
    {
        return;
    }
    let mut info: libc::Dl_info = unsafe_zeroed_dl_info();
    // SAFETY: dladdr writes into `info` and reads nothing else; any address value is accepted.
    if unsafe { libc::dladdr(driver_fn as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let Some(h) = noload_handle(&path) else { return };
    for &hk in Hook::ALL.iter().filter(|h| Hook::DRIVER[**h as usize]) {
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

fn unsafe_zeroed_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

/// Resolves a driver helper (`cuCtxGetDevice`, `cuMemGetInfo_v2`) from the loaded driver.
fn driver_helper(slot: &AtomicUsize, name: &CStr) -> usize {
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

/// One loaded ELF object as `dl_iterate_phdr` reports it.
pub struct ModuleInfo {
    /// Path; the main program's is read from `/proc/self/exe`.
    pub path: String,
    /// Load bias, bytes.
    pub bias: u64,
    /// Absolute `[start, end)` of each `PT_LOAD` segment.
    pub ranges: Vec<(usize, usize)>,
}

/// Thread id of the shim thread inside `dl_iterate_phdr` (0: none); a forking thread holds it from the
/// fork's prepare handler to its end (init.rs). glibc does not reset the loader's write lock
/// (`_dl_load_write_lock`, which `dl_iterate_phdr` takes) in a forked child: had one of our
/// threads been inside it at the fork, the child's first module scan would wait forever (seen
/// with 8 threads starting to allocate while the main thread forked: 7 hangs in 40 runs).
static PHDR_OWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Times the owner has taken it (it is reentrant, as the loader's own lock is: a scan's
/// callback may scan again). Touched by the owner only.
static PHDR_DEPTH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn this_thread() -> u64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// Takes the lock, spinning while another thread holds it (for the length of one module scan).
pub fn phdr_lock() {
    let me = this_thread();
    if PHDR_OWNER.load(std::sync::atomic::Ordering::Acquire) == me {
        PHDR_DEPTH.fetch_add(1, Relaxed);
        return;
    }
    while PHDR_OWNER.compare_exchange_weak(0, me, std::sync::atomic::Ordering::Acquire, Relaxed).is_err() {
        std::thread::yield_now();
    }
    PHDR_DEPTH.store(1, Relaxed);
}

/// Releases one hold of the lock.
pub fn phdr_unlock() {
    if PHDR_DEPTH.fetch_sub(1, Relaxed) == 1 {
        PHDR_OWNER.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// In a forked child: only the forking thread exists, and it held the lock (prepare handler).
pub fn phdr_reset() {
    PHDR_DEPTH.store(0, Relaxed);
    PHDR_OWNER.store(0, std::sync::atomic::Ordering::Release);
}

/// `dl_iterate_phdr` under [`PHDR_OWNER`]; every call the shim makes goes through here.
///
/// # Safety
/// As `dl_iterate_phdr`: `cb` must be a valid callback for `data`.
pub unsafe fn iterate_phdr(
    cb: unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int,
    data: *mut c_void,
) {
    phdr_lock();
    // SAFETY: the caller's contract.
    unsafe { libc::dl_iterate_phdr(Some(cb), data) };
    phdr_unlock();
}

/// Calls `f` for every loaded object (takes the loader's lock while it runs: never call it
/// from a signal handler).
pub fn for_each_module(mut f: impl FnMut(&ModuleInfo)) {
    unsafe extern "C" fn cb(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `&mut dyn FnMut` passed below; `info` is valid for this call.
        let f = unsafe { &mut *(data as *mut &mut dyn FnMut(&libc::dl_phdr_info)) };
        // SAFETY: `info` is valid for the duration of this callback.
        let info = unsafe { &*info };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(info)));
        0
    }
    let mut each = |info: &libc::dl_phdr_info| {
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: the loader gives a NUL-terminated name.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
        };
        let path = if name.is_empty() {
            std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
        } else {
            name
        };
        let mut ranges = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD {
                let s = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
                ranges.push((s, s + ph.p_memsz as usize));
            }
        }
        f(&ModuleInfo { path, bias: info.dlpi_addr, ranges });
    };
    let mut dynf: &mut dyn FnMut(&libc::dl_phdr_info) = &mut each;
    // SAFETY: the callback only reads the loader's data for the duration of each call.
    unsafe { iterate_phdr(cb, &mut dynf as *mut _ as *mut c_void) };
}
