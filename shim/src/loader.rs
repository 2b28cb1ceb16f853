//! Everything the shim asks of the dynamic loader: the module walk (`dl_iterate_phdr`) under
//! the shim's fork lock, libc's own `dlsym`, handles of libraries already loaded, and this
//! library's own mapping (to refuse our own addresses and strip our frames from backtraces).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

use crate::sys;

/// Address of the real `dlsym` (libc's), 0 until resolved.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// `[start, end)` of this library's own mapping, for refusing our own addresses and
/// stripping our frames from backtraces.
static OWN: (AtomicUsize, AtomicUsize) = (AtomicUsize::new(0), AtomicUsize::new(0));

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

/// A handle of an already loaded library, without loading anything.
pub fn noload_handle(path: &str) -> Option<*mut c_void> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: RTLD_NOLOAD never loads or runs a constructor; it only returns a handle (with a
    // reference count we never drop: CUDA libraries stay loaded anyway).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    (!h.is_null()).then_some(h)
}

/// Keeps the library that holds `addr` loaded for the rest of the process (a reference taken
/// with `RTLD_NOLOAD` and never dropped). A slot must never point into a library the program
/// has `dlclose`d: the program may still reach our export of the same name (through
/// `RTLD_DEFAULT`, or a later `dlopen` of the library at another address), and the hook would
/// jump into unmapped memory.
///
/// False if and only if that library cannot be pinned: a library loaded with `dlmopen` into
/// another link-map namespace is not found by `dlopen(RTLD_NOLOAD)` (or another copy of the
/// same file is), so the reference would not hold it.
pub fn pin(addr: usize) -> bool {
    let mut info = empty_dl_info();
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 writes `info` and, with RTLD_DL_LINKMAP (2 in glibc's <dlfcn.h>), the
    // `struct link_map *` of the object holding `addr`; any address value is accepted.
    let found = unsafe { libc::dladdr1(addr as *const c_void, &mut info, &mut map, RTLD_DL_LINKMAP) } != 0;
    if !found || info.dli_fname.is_null() || map.is_null() {
        return false;
    }
    // SAFETY: dli_fname is the loader's NUL-terminated name of a loaded object; RTLD_NOLOAD
    // never loads anything or runs a constructor, it only adds a reference.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return false;
    }
    let mut held: *mut c_void = std::ptr::null_mut();
    // SAFETY: `h` is a valid handle; RTLD_DI_LINKMAP writes its `struct link_map *`.
    let ok = unsafe { libc::dlinfo(h, libc::RTLD_DI_LINKMAP, (&mut held as *mut *mut c_void).cast()) } == 0;
    if ok && held == map {
        return true;
    }
    // Another copy of the same file: drop the reference just taken.
    // SAFETY: `h` came from the dlopen above; the program still holds its own references.
    unsafe { libc::dlclose(h) };
    false
}

/// `RTLD_DL_LINKMAP` in glibc's <dlfcn.h>: `dladdr1` also returns the object's `link_map`.
const RTLD_DL_LINKMAP: c_int = 2;

/// A zeroed `Dl_info`, for `dladdr` to fill.
pub fn empty_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

/// One loaded ELF object as `dl_iterate_phdr` reports it.
pub struct ModuleInfo {
    /// Path; the main program's is read from `/proc/self/exe`.
    pub path: String,
    /// Load bias, bytes.
    pub bias: u64,
    /// Absolute `[start, end)` of each `PT_LOAD` segment.
    pub ranges: Vec<(usize, usize)>,
    /// Of an object with thread-local storage (`PT_TLS`): the calling thread's block and the
    /// segment's size in memory, bytes; `None` also when the loader has not given the calling
    /// thread a block yet.
    pub tls: Option<(u64, u64)>,
}

/// The shim's fork lock: thread id of the shim thread inside `dl_iterate_phdr` or starting the
/// collector (0: none); a forking thread holds it from the fork's prepare handler to its end
/// (init.rs), so that no fork cuts either in half. A child forked while the collector's socket
/// was made but not yet known to the shim kept both ends open, and the parent's exit waited
/// for the whole `GPUSHIM_EXIT_TIMEOUT`. glibc does not reset the loader's write lock
/// (`_dl_load_write_lock`, which `dl_iterate_phdr` takes) in a forked child: had one of our
/// threads been inside it at the fork, the child's first module scan would wait forever (seen
/// with 8 threads starting to allocate while the main thread forked: 7 hangs in 40 runs).
static PHDR_OWNER: AtomicU64 = AtomicU64::new(0);
/// Times the owner has taken it (it is reentrant, as the loader's own lock is: a scan's
/// callback may scan again). Touched by the owner only.
static PHDR_DEPTH: AtomicU64 = AtomicU64::new(0);

/// Takes the lock, spinning while another thread holds it (for the length of one module scan
/// or of the collector's start).
pub fn fork_lock() {
    let me = u64::from(sys::gettid());
    if PHDR_OWNER.load(Acquire) == me {
        PHDR_DEPTH.fetch_add(1, Relaxed);
        return;
    }
    while PHDR_OWNER.compare_exchange_weak(0, me, Acquire, Relaxed).is_err() {
        std::thread::yield_now();
    }
    PHDR_DEPTH.store(1, Relaxed);
}

/// Releases one hold of the lock.
pub fn fork_unlock() {
    if PHDR_DEPTH.fetch_sub(1, Relaxed) == 1 {
        PHDR_OWNER.store(0, Release);
    }
}

/// In a forked child: only the forking thread exists, and it held the lock (prepare handler).
pub fn fork_lock_reset() {
    PHDR_DEPTH.store(0, Relaxed);
    PHDR_OWNER.store(0, Release);
}

/// `dl_iterate_phdr` under [`PHDR_OWNER`]; every call the shim makes goes through here.
///
/// # Safety
/// As `dl_iterate_phdr`: `cb` must be a valid callback for `data`.
pub unsafe fn iterate_phdr(
    cb: unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int,
    data: *mut c_void,
) {
    fork_lock();
    // SAFETY: the caller's contract.
    unsafe { libc::dl_iterate_phdr(Some(cb), data) };
    fork_unlock();
}

/// Calls `f` for every loaded object (lists them under the loader's lock: never call it from a
/// signal handler).
///
/// The objects are listed inside `dl_iterate_phdr` and `f` runs after it returned: nothing
/// `f` does (a `dlopen`, a `dlsym`) can then take the loader's locks in the order opposite to a
/// `dlopen` on another thread, which holds its load lock and then takes the lock
/// `dl_iterate_phdr` holds (seen: a first `cudaMalloc` through an `RTLD_LOCAL` runtime hung
/// beside a thread that `dlopen`ed in a loop).
pub fn for_each_module(mut f: impl FnMut(&ModuleInfo)) {
    for m in modules() {
        f(&m);
    }
}

/// Every loaded object, listed inside `dl_iterate_phdr` with no call into the loader.
pub fn modules() -> Vec<ModuleInfo> {
    let mut all = Vec::new();
    unsafe extern "C" fn cb(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `&mut dyn FnMut` passed below; `info` is valid for this call.
        let f = unsafe { &mut *(data as *mut &mut dyn FnMut(&libc::dl_phdr_info, usize)) };
        // SAFETY: `info` is valid for the duration of this callback.
        let info = unsafe { &*info };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(info, size)));
        0
    }
    let mut each = |info: &libc::dl_phdr_info, size: usize| {
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
        let mut tls = None;
        // The loader's structure is as long as `size` says (older ones end before the TLS fields).
        let has_tls_data = size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_tls_data) + 8;
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD {
                let s = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
                ranges.push((s, s + ph.p_memsz as usize));
            } else if ph.p_type == libc::PT_TLS && has_tls_data && !info.dlpi_tls_data.is_null() {
                tls = Some((info.dlpi_tls_data as u64, ph.p_memsz));
            }
        }
        all.push(ModuleInfo { path, bias: info.dlpi_addr, ranges, tls });
    };
    let mut dynf: &mut dyn FnMut(&libc::dl_phdr_info, usize) = &mut each;
    // SAFETY: the callback only reads the loader's data for the duration of each call.
    unsafe { iterate_phdr(cb, &mut dynf as *mut _ as *mut c_void) };
    all
}

/// `[start, end)` of the whole mapping of the loaded object holding `addr` (from its lowest to
/// its highest `PT_LOAD` segment: the loader reserves the gaps, so no other object lies inside).
pub fn module_span(addr: usize) -> Option<(usize, usize)> {
    let m = modules().into_iter().find(|m| m.ranges.iter().any(|&(s, e)| addr >= s && addr < e))?;
    let s = m.ranges.iter().map(|r| r.0).min()?;
    let e = m.ranges.iter().map(|r| r.1).max()?;
    Some((s, e))
}

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
struct LinkMap {
    /// Load bias, bytes.
    addr: usize,
    /// Path; empty for the main program.
    name: *const c_char,
    /// The object's dynamic section.
    ld: *const Dyn,
}

/// `ElfW(Dyn)`.
#[repr(C)]
struct Dyn {
    tag: isize,
    val: usize,
}

/// The loaded object holding `addr`: its `link_map` and file name, if any.
fn object_of(addr: usize) -> Option<(*const LinkMap, *const c_char)> {
    let mut info = empty_dl_info();
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 writes `info` and, with RTLD_DL_LINKMAP, the object's `struct link_map *`.
    let found = unsafe { libc::dladdr1(addr as *const c_void, &mut info, &mut map, RTLD_DL_LINKMAP) } != 0;
    (found && !map.is_null() && !info.dli_fname.is_null()).then_some((map as *const LinkMap, info.dli_fname))
}

/// What a call to our export of `name` from the object holding `ra` would have reached without
/// us: the definition the loader binds that object's reference to. The loader searches the
/// global scope first (relative to us, that is `RTLD_NEXT`: everything after this library),
/// then, for an object loaded `RTLD_LOCAL`, its own dependencies (`dlsym` on its handle searches
/// exactly those, never the global scope, so it does not find us); a reference with a symbol
/// version (NVIDIA's runtimes version theirs, `cudaMalloc@@libcudart.so.12`) matches only a
/// definition of that version or an unversioned one, so a library linked to runtime 12 reaches
/// runtime 12 even when runtime 13 is global. A definition inside the caller itself is never
/// its answer (an interposer calling on). `None` if neither scope defines `name`. Calls the
/// loader (never from inside `dl_iterate_phdr`).
pub fn binding_for_caller(ra: usize, name: &CStr) -> Option<usize> {
    let (map, fname) = object_of(ra)?;
    // SAFETY: `map` is the loader's link_map of an object mapped now (it holds `ra`, a return
    // address into code that is waiting for this call to return).
    let lm = unsafe { &*map };
    let version = required_version(lm, name);
    let look = |handle: *mut c_void| -> usize {
        match &version {
            // SAFETY: NUL-terminated strings; dlvsym accepts any handle and reports by NULL.
            Some(v) => unsafe { libc::dlvsym(handle, name.as_ptr(), v.as_ptr()) as usize },
            None => dlsym(handle, name),
        }
    };
    let usable = |a: usize| a != 0 && !is_own(a) && object_of(a).map(|o| o.0) != Some(map);
    let global = look(libc::RTLD_NEXT);
    if usable(global) {
        return Some(global);
    }
    // SAFETY: l_name is NULL or a NUL-terminated string owned by the loader.
    if lm.name.is_null() || unsafe { *lm.name } == 0 {
        return None; // the main program: its scope is the global one
    }
    // SAFETY: `fname` is the loader's NUL-terminated name of a loaded object; RTLD_NOLOAD
    // loads nothing and runs no constructor, it only adds a reference (dropped below).
    let h = unsafe { libc::dlopen(fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if h.is_null() {
        return None;
    }
    let mut held: *mut c_void = std::ptr::null_mut();
    // SAFETY: `h` is a valid handle; RTLD_DI_LINKMAP writes its `struct link_map *`.
    let same = unsafe { libc::dlinfo(h, libc::RTLD_DI_LINKMAP, (&mut held as *mut *mut c_void).cast()) } == 0
        && held as *const LinkMap == map;
    let local = if same { look(h) } else { 0 };
    // SAFETY: `h` came from the dlopen above; the program holds its own references.
    unsafe { libc::dlclose(h) };
    usable(local).then_some(local)
}

/// Dynamic tags (<elf.h>).
const DT_NULL: isize = 0;
const DT_HASH: isize = 4;
const DT_STRTAB: isize = 5;
const DT_SYMTAB: isize = 6;
const DT_GNU_HASH: isize = 0x6fff_fef5;
const DT_VERSYM: isize = 0x6fff_fff0;
const DT_VERNEED: isize = 0x6fff_fffe;
const DT_VERNEEDNUM: isize = 0x6fff_ffff;

/// `Elf64_Sym`.
#[repr(C)]
#[allow(dead_code)] // the layout's other fields
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// `Elf64_Verneed`: one library the object needs versions of.
#[repr(C)]
#[allow(dead_code)] // the layout's other fields
struct Verneed {
    version: u16,
    cnt: u16,
    file: u32,
    aux: u32,
    next: u32,
}

/// `Elf64_Vernaux`: one version needed from that library.
#[repr(C)]
#[allow(dead_code)] // the layout's other fields
struct Vernaux {
    hash: u32,
    flags: u16,
    other: u16,
    name: u32,
    next: u32,
}

/// The symbol version the object `lm` requires of its undefined reference to `name`
/// (`cudaMalloc@libcudart.so.12`), from its dynamic symbol table, `.gnu.version` and
/// `.gnu.version_r`; `None` if it has no such reference or the reference is unversioned.
#[cfg(target_pointer_width = "64")]
fn required_version(lm: &LinkMap, name: &CStr) -> Option<std::ffi::CString> {
    if lm.ld.is_null() {
        return None;
    }
    // glibc rewrites some of these entries to absolute addresses in place and not others:
    // a value below the load bias is still an offset.
    let abs = |v: usize| if v >= lm.addr { v } else { v + lm.addr };
    let (mut strtab, mut symtab, mut hash, mut gnu_hash, mut versym, mut verneed, mut verneednum) =
        (0, 0, 0, 0, 0, 0, 0);
    for i in 0..4096 {
        // SAFETY: the dynamic section of a loaded object, ended by DT_NULL.
        let d = unsafe { &*lm.ld.add(i) };
        match d.tag {
            DT_NULL => break,
            DT_STRTAB => strtab = abs(d.val),
            DT_SYMTAB => symtab = abs(d.val),
            DT_HASH => hash = abs(d.val),
            DT_GNU_HASH => gnu_hash = abs(d.val),
            DT_VERSYM => versym = abs(d.val),
            DT_VERNEED => verneed = abs(d.val),
            DT_VERNEEDNUM => verneednum = d.val,
            _ => {}
        }
    }
    if strtab == 0 || symtab == 0 || versym == 0 || verneed == 0 {
        return None;
    }
    // Undefined symbols are not hashed: GNU hash tables start after them (`symoffset`), and
    // SysV ones count every symbol (`nchain`).
    let count = if hash != 0 {
        // SAFETY: the second word of the SysV hash table, mapped with the object.
        unsafe { *(hash as *const u32).add(1) }
    } else if gnu_hash != 0 {
        // SAFETY: the second word of the GNU hash table, mapped with the object.
        unsafe { *(gnu_hash as *const u32).add(1) }
    } else {
        return None;
    } as usize;
    let wanted = name.to_bytes();
    let str_at = |off: u32| {
        // SAFETY: an offset into the object's string table, whose strings are NUL-terminated.
        unsafe { CStr::from_ptr((strtab as *const c_char).add(off as usize)) }
    };
    let index = (1..count.min(1 << 20)).find_map(|i| {
        // SAFETY: `i` is below the number of symbols of the dynamic symbol table.
        let s = unsafe { &*(symtab as *const Sym).add(i) };
        // SAFETY: `.gnu.version` has one entry per dynamic symbol.
        (s.shndx == 0 && str_at(s.name).to_bytes() == wanted)
            .then(|| unsafe { *(versym as *const u16).add(i) } & 0x7fff)
    })?;
    if index < 2 {
        return None; // local or global: unversioned
    }
    let mut vn = verneed;
    for _ in 0..verneednum.min(1024) {
        // SAFETY: `.gnu.version_r` entries, chained by their byte offsets.
        let need = unsafe { &*(vn as *const Verneed) };
        let mut va = vn + need.aux as usize;
        for _ in 0..need.cnt {
            // SAFETY: as above.
            let aux = unsafe { &*(va as *const Vernaux) };
            if aux.other == index {
                return Some(str_at(aux.name).to_owned());
            }
            va += aux.next as usize;
        }
        if need.next == 0 {
            break;
        }
        vn += need.next as usize;
    }
    None
}

/// Symbol versions are read on 64-bit targets only; elsewhere a reference counts as unversioned.
#[cfg(not(target_pointer_width = "64"))]
fn required_version(_: &LinkMap, _: &CStr) -> Option<std::ffi::CString> {
    None
}
