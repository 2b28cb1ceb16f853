//! The reachability scan: which live allocations no pointer in the program's own memory refers
//! to any more ("definitely lost", as LeakSanitizer and valgrind say of heap blocks).
//!
//! **Who runs it, when.** Only the writer thread (a shim thread with every asynchronous signal
//! blocked), at a snapshot, after an out-of-memory failure and when the exit path asks for the
//! end of the stream; never in a signal handler, never inside a hook, and it takes no lock:
//! the program's threads go on running (see "racy" below). `GPUSHIM_REACHABILITY=0` turns it
//! off; `GPUSHIM_REACHABILITY_MS` (default 3000) caps both passes together.
//!
//! **The live set it tests against.** The writer keeps its own [`Table`] of the allocations it
//! has passed on (address, size, kind; frees and context teardowns remove them), updated on the
//! writer thread only, so no hook pays for it. Its keys are stored XOR-ed with a constant and
//! the index built for a scan lives in the scan's own `mmap`ed memory, so that the shim's own
//! copies of the addresses are never found as references.
//!
//! **What it reads.** Every readable and writable mapping in `/proc/self/maps`: the data and bss
//! of every module, the heap, anonymous mappings and thread stacks, read with
//! `process_vm_readv` on this process, which fails cleanly (`EFAULT`) on a page unmapped
//! meanwhile: no SIGSEGV handler is installed and nothing faults. It leaves out:
//! - device-file mappings (`/dev/…` other than `/dev/shm`, e.g. `/dev/nvidia*`), `[vvar]`,
//!   `[vsyscall]`;
//! - the bytes of live device and managed allocations (reading managed memory migrates pages;
//!   device memory is not host memory, although the stand-ins back it with host memory);
//! - the shim's own memory: its module's data and bss, the writer thread's stack, the event
//!   channel's buffer (found at the writer's first event by the timestamp of that event, see
//!   `alloc_watch::watch`), the writer's wire buffer (zeroed before a scan) and the scan's own
//!   buffers;
//! - the stacks of threads blocked in a system call below their stack pointer
//!   (`/proc/self/task/N/syscall` gives it; 128 bytes of red zone are kept): dead frames hold
//!   stale copies of pointers. A running thread's stack is read whole.
//!
//! **The CUDA libraries' own bookkeeping.** By mapping origin: the data and bss of the CUDA
//! libraries ([`is_cuda_library`]) are not roots, and the main heap's blocks reachable from
//! them are the libraries' own (their allocation tables): those blocks are neither roots nor
//! followed from the program's roots. Without this, the driver's record of every allocation
//! makes everything look reachable (the stand-in driver keeps one `malloc`ed entry per
//! allocation, as the real driver keeps its own; what the real driver does is measured on the
//! H200, docs/gpu-matrix.md). `GPUSHIM_REACHABILITY_CUDA_DATA=1` reads them as roots instead,
//! to measure that.
//!
//! **The main heap.** glibc's main arena (the `[heap]` mapping) is walked chunk by chunk
//! (`malloc.c`'s boundary tags: size with flags in the word before a block, in use if the next
//! chunk's `PREV_INUSE` bit is set; blocks freed into a thread's cache or the main arena's
//! fastbins keep that bit and are told apart by `tcache_key` and the arena's fastbin lists).
//! Its blocks are not roots: a block is scanned only when a
//! root (or a scanned block) holds an address inside it, as LeakSanitizer does. An allocation
//! referred to only from blocks nothing reaches is "indirectly lost". A heap whose walk does not
//! add up is read whole as a root instead (the scan's note says so). Other threads' arenas and
//! blocks `malloc` got from `mmap` are anonymous mappings, read whole as roots.
//!
//! **References.** An 8-byte aligned word whose value lies in `[ptr, ptr + size)` of a live
//! device, managed or pinned allocation; interior pointers count and are reported as such.
//! The index is sorted by address and searched by binary search, behind one range compare.
//!
//! **Racy, so twice.** Other threads are not stopped (a signal would interrupt their system
//! calls), so a pointer moving from one place to another during a pass can be missed. The scan
//! runs a second pass when the first found anything lost, and calls lost only what both passes
//! call lost. A scan cut by its time cap calls nothing lost.

use std::collections::HashMap;
use std::ffi::c_void;

use gpushim_wire::{self as wire, Api, Kind, ReachClass, ReachEntry, ReachRegion, ReachStatus, WalkReason};

use crate::hash::FastHash;
use std::sync::atomic::Ordering::Acquire;

use crate::sys::read_own as read;
use crate::{config, loader, state, sys};

/// What keys of [`Table`] are XOR-ed with, so that the table holds no copy of an address.
const HIDE: u64 = 0xa5c3_96e1_5b2d_f00d;
/// Bytes kept below a blocked thread's stack pointer (the x86-64 System V red zone).
const RED_ZONE: u64 = 128;
/// Bytes read per `process_vm_readv` call.
const READ_BYTES: usize = 1 << 20;
/// Page size assumed when skipping an unreadable page, bytes.
const PAGE: u64 = 4096;
/// Bytes of the heap walk's window.
const WINDOW: usize = 64 * 1024;
/// glibc's smallest chunk on 64-bit, bytes (`MINSIZE`, malloc.c).
const MIN_CHUNK: u64 = 32;

/// An allocation the writer has passed on and not seen freed.
#[derive(Clone, Copy)]
struct Live {
    size: u64,
    seq: u64,
    device: i32,
    kind: Kind,
}

/// The writer's own live set, for scans: allocations by address (XOR-ed with [`HIDE`]).
/// A free removes an entry only if it came after the allocation in sequence order, so the
/// order in which the writer receives events from different threads does not matter.
#[derive(Default)]
pub struct Table {
    map: HashMap<u64, Live, FastHash>,
}

impl Table {
    /// A successful allocation of `size` bytes at `addr` (sequence number `seq`). `cuMemCreate`
    /// handles are not pointers and are left out; a CUDA array's handle counts as a 1-byte
    /// range (the program holds the handle itself).
    pub fn alloc(&mut self, seq: u64, addr: u64, size: u64, kind: Kind, api: Api, device: i32) {
        if api.is_handle() || addr == 0 {
            return;
        }
        let size = if api.name().contains("Array") { 1 } else { size.max(1) };
        let key = addr ^ HIDE;
        if self.map.get(&key).is_some_and(|e| e.seq > seq) {
            return;
        }
        self.map.insert(key, Live { size, seq, device, kind });
    }

    /// A free of `addr` numbered `seq`.
    pub fn free(&mut self, seq: u64, addr: u64) {
        let key = addr ^ HIDE;
        if self.map.get(&key).is_some_and(|e| e.seq < seq) {
            self.map.remove(&key);
        }
    }

    /// A context of `device` torn down: its device and managed memory is gone.
    pub fn reset(&mut self, device: i32) {
        self.map.retain(|_, e| e.kind == Kind::PinnedHost || e.device != device);
    }

    /// Allocations held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if and only if nothing is live.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A growable array in memory of its own (`mmap`), so that the scan can leave it out.
struct Buf<T: Copy> {
    ptr: *mut T,
    cap: usize,
    len: usize,
}

impl<T: Copy> Buf<T> {
    fn new(cap: usize) -> Option<Buf<T>> {
        let cap = cap.max(512);
        let bytes = round_page(cap * std::mem::size_of::<T>());
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Buf { ptr: p.cast(), cap: bytes / std::mem::size_of::<T>(), len: 0 })
    }

    fn bytes(&self) -> usize {
        round_page(self.cap * std::mem::size_of::<T>())
    }

    fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            let old = self.bytes();
            // SAFETY: growing our own mapping; it may move.
            let p = unsafe { libc::mremap(self.ptr.cast(), old, old * 2, libc::MREMAP_MAYMOVE) };
            if p == libc::MAP_FAILED {
                return false;
            }
            self.ptr = p.cast();
            self.cap = old * 2 / std::mem::size_of::<T>();
        }
        // SAFETY: len < cap, inside the mapping.
        unsafe { self.ptr.add(self.len).write(v) };
        self.len += 1;
        true
    }

    fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` elements were written.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn range(&self) -> (u64, u64) {
        (self.ptr as u64, self.ptr as u64 + self.bytes() as u64)
    }
}

impl<T: Copy> Drop for Buf<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes()) };
    }
}

fn round_page(n: usize) -> usize {
    (n.max(1) + PAGE as usize - 1) & !(PAGE as usize - 1)
}

/// One word of this process at `addr`, if readable.
fn read_word(addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    (read(addr, &mut b) == 8).then(|| u64::from_ne_bytes(b))
}

/// True for the file name of a CUDA library whose data and heap blocks are the library's own
/// bookkeeping, not the program's: the driver (`libcuda`, `libnvidia-*`), the runtime
/// (`libcudart`) and the math and communication libraries that keep device pointers of their own
/// (`libcublas`, `libcublasLt`, `libcudnn*`, `libcufft`, `libcurand`, `libcusparse`,
/// `libcusolver`, `libnccl`, `libnvrtc`, `libnvJitLink`).
pub fn is_cuda_library(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    [
        "libcuda.so",
        "libcudart.so",
        "libnvidia-",
        "libcublas",
        "libcudnn",
        "libcufft",
        "libcurand",
        "libcusparse",
        "libcusolver",
        "libnccl",
        "libnvrtc",
        "libnvJitLink",
    ]
    .iter()
    .any(|p| base.starts_with(p))
}

/// One mapping, or part of one, to read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// A root of the program's: its references count.
    Root(ReachRegion, u32),
    /// Not the program's: a CUDA library's data. What it reaches in the main heap is theirs
    /// too, and is not read.
    Cuda,
    /// The shim's own memory: its module's data, the writer thread's stack and malloc arena, the
    /// exit path's frames. Read after the program's roots, so that a stale copy of the address
    /// of a block the program now owns (memory the shim freed and the program's next `malloc`
    /// got) never takes that block from the program; what only the shim reaches is the shim's.
    Own,
    /// glibc's main heap, walked chunk by chunk.
    Heap,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    start: u64,
    end: u64,
    role: Role,
}

/// A line of `/proc/self/maps`: start, end, readable and writable, path.
fn parse_maps_line(line: &str) -> Option<(u64, u64, bool, &str)> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let (_off, _dev, _inode) = (it.next()?, it.next()?, it.next()?);
    let path = it.next().unwrap_or("").trim_start();
    let (s, e) = range.split_once('-')?;
    let s = u64::from_str_radix(s, 16).ok()?;
    let e = u64::from_str_radix(e, 16).ok()?;
    let rw = perms.as_bytes().first() == Some(&b'r') && perms.as_bytes().get(1) == Some(&b'w');
    Some((s, e, rw, path))
}

/// Thread ids of this process with the stack pointer of each one blocked in a system call.
fn blocked_threads() -> Vec<(u32, Option<u64>)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return out };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // "nr a1 … a6 sp pc" in a system call, "-1 sp pc" blocked outside one, "running".
        let sp = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok().and_then(|s| {
            let f: Vec<&str> = s.split_whitespace().collect();
            if f.len() < 3 || f[0] == "running" {
                return None;
            }
            u64::from_str_radix(f[f.len() - 2].trim_start_matches("0x"), 16).ok()
        });
        out.push((tid, sp));
    }
    out
}

/// The calling thread's stack, `[start, end)`.
fn own_stack() -> Option<(u64, u64)> {
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread; destroyed after use.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        ok.then(|| (addr as u64, addr as u64 + size as u64))
    }
}

/// Fastbins in glibc's `struct malloc_state` (`NFASTBINS` on 64-bit, malloc.c).
const NFASTBINS: usize = 10;
/// Bin heads (`fd`, `bk` pairs) in `struct malloc_state` (`NBINS` 128, bin 0 unused).
const NBINS: usize = 127;
/// Byte offsets in glibc's `struct malloc_state` on 64-bit (malloc.c, 2.26 and later: `mutex`,
/// `flags` and `have_fastchunks` are 4 bytes each, then `fastbinsY[10]`, `top`,
/// `last_remainder`, `bins[254]`).
const ARENA_FASTBINS: usize = 16;
const ARENA_TOP: usize = ARENA_FASTBINS + 8 * NFASTBINS;
const ARENA_BINS: usize = ARENA_TOP + 16;
const ARENA_SIZE: usize = ARENA_BINS + 16 * NBINS;

/// Whether glibc stores a free list's links mangled with their own address (`PROTECT_PTR`,
/// "safe-linking", glibc 2.32 and later: the stored value is `(&link >> 12) ^ next`).
fn safe_linking() -> bool {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let mut parts = v.to_str().unwrap_or("").split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 32)
}

/// glibc's `tcache_key` (2.34 and later): the word a block freed into a thread's cache holds
/// right after its link (`tcache_entry.key`, malloc.c), the same random value in every thread.
/// Such a block is free although its chunk looks in use; its stale contents must not count.
/// Learnt by freeing a block of our own and reading that word back; 0 if not found.
fn tcache_key() -> u64 {
    let b = Box::new([0u64; 3]);
    let addr = Box::into_raw(b) as u64;
    // SAFETY: the block was made just above by Box; freeing it once.
    unsafe { drop(Box::from_raw(addr as *mut [u64; 3])) };
    // The freed block's second word, read with process_vm_readv (no Rust reference to freed
    // memory).
    let key = read_word(addr + 8).unwrap_or(0);
    // A key that looks like a small number or a pointer is not the random one.
    if key < 1 << 48 {
        0
    } else {
        key
    }
}

/// The base of the malloc arena the calling thread allocates from, if it is not the main one
/// (glibc's thread arenas are `HEAP_MAX_SIZE`-aligned heaps of 64 MiB, malloc/arena.c).
fn own_arena(heap: (u64, u64)) -> Option<u64> {
    let b = Box::new(0u64);
    let addr = &*b as *const u64 as u64;
    drop(b);
    (addr < heap.0 || addr >= heap.1).then_some(addr & !((64 << 20) - 1))
}

/// What the shim itself holds that a scan must not read.
#[derive(Clone, Copy, Default)]
pub struct Own {
    /// The event channel's buffer (`alloc_watch::watch`), if found.
    pub channel: Option<(u64, u64)>,
}

/// Per-allocation result of one pass.
#[derive(Clone, Copy, Default)]
struct Hit {
    refs: u32,
    interior_only: bool,
    indirect: u32,
    region: u8,
    tid: u32,
    from: u64,
}

/// One scan: the index, the regions and the heap's chunks.
struct Scan {
    /// Live allocations sorted by start: `[start, end)` pairs (in memory of our own).
    ranges: Buf<(u64, u64)>,
    /// Device and managed ranges plus the shim's own, sorted and merged: never read.
    skip: Buf<(u64, u64)>,
    /// In-use chunks of the main heap: `[start, end)` of each block's bytes.
    chunks: Buf<(u64, u64)>,
    /// Per chunk: 0 not reached, 1 reached from the program, 2 the CUDA libraries' own.
    marks: Vec<u8>,
    /// Chunks to scan.
    todo: Vec<u32>,
    /// The heap walk's window.
    win: Buf<u8>,
    /// Where a heap walk that did not add up stopped, bytes from the heap's start.
    walk_failed_at: u64,
    /// The main heap's top chunk (free), found by the walk; 0 before it.
    top: u64,
    /// Per page of the heap (`1 << page_shift` bytes), the index of the last block starting at
    /// or before the page's start: a block is found in a few steps instead of a binary search.
    pages: Vec<u32>,
    page_shift: u32,
    hits: Vec<Hit>,
    regions: Vec<Region>,
    lo: u64,
    hi: u64,
    heap: (u64, u64),
    deadline: u64,
    scanned: u64,
    unreadable: u64,
    cut: bool,
    /// What `process_vm_readv` reads into.
    rbuf: Buf<u8>,
}

/// Runs a scan for the report `reason`/`number` against `table`. Returns the event to send.
pub fn scan(table: &Table, own: Own, reason: WalkReason, number: u32) -> wire::Reach {
    let t0 = sys::now_ns();
    let cpu0 = thread_cpu_ns();
    let ms = config::reachability_ms();
    let deadline = t0.saturating_add(ms.saturating_mul(1_000_000));
    let mut r = wire::Reach {
        reason,
        number,
        status: ReachStatus::Failed,
        ts_ns: t0,
        elapsed_ns: 0,
        cpu_ns: 0,
        scanned_bytes: 0,
        unreadable_bytes: 0,
        note: String::new(),
        entries: Vec::new(),
    };
    if table.is_empty() {
        // Nothing live: no word can refer to anything, and the exit need not wait for a read of
        // the whole process (43 MB in 50 to 83 ms for a CUDA program on the H200).
        r.status = ReachStatus::Complete;
        r.note = "nothing was live: nothing to scan for".into();
        r.elapsed_ns = sys::now_ns().saturating_sub(t0);
        return r;
    }
    let Some(mut s) = Scan::new(table, own, deadline, &mut r.note) else {
        if r.note.is_empty() {
            r.note = "the reachability scan could not start (no memory for its index)".into();
        }
        r.elapsed_ns = sys::now_ns().saturating_sub(t0);
        return r;
    };
    if read_word(s.regions.first().map_or(0, |g| g.start)).is_none() && !s.regions.is_empty() {
        r.note = "process_vm_readv cannot read this process's memory; no reachability scan".into();
        r.elapsed_ns = sys::now_ns().saturating_sub(t0);
        return r;
    }
    let first = s.pass();
    let any_lost = first.iter().any(|h| h.refs == 0);
    let second = if any_lost && !s.cut { Some(s.pass()) } else { None };
    r.status = if s.cut { ReachStatus::Cut } else { ReachStatus::Complete };
    let ranges = s.ranges.as_slice();
    for (i, &(start, _)) in ranges.iter().enumerate() {
        let a = first[i];
        let b = second.as_ref().map_or(a, |v| v[i]);
        let best = if b.refs > a.refs { b } else { a };
        let class = if a.refs > 0 || b.refs > 0 {
            ReachClass::Reachable
        } else if s.cut {
            ReachClass::Unknown
        } else if a.indirect > 0 || b.indirect > 0 {
            ReachClass::IndirectlyLost
        } else {
            ReachClass::Lost
        };
        let region = match best.region {
            1 => ReachRegion::Data,
            2 => ReachRegion::Heap,
            3 => ReachRegion::Stack,
            4 => ReachRegion::Anon,
            _ => ReachRegion::None,
        };
        r.entries.push(ReachEntry {
            addr: start,
            class,
            refs: best.refs,
            interior: best.refs > 0 && best.interior_only,
            region,
            tid: best.tid,
            from: best.from,
        });
    }
    if s.cut {
        let msg = format!("the reachability scan was cut at its cap of {ms} ms (GPUSHIM_REACHABILITY_MS)");
        r.note = if r.note.is_empty() { msg } else { format!("{}; {msg}", r.note) };
    }
    r.scanned_bytes = s.scanned;
    r.unreadable_bytes = s.unreadable;
    r.elapsed_ns = sys::now_ns().saturating_sub(t0);
    r.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
    r
}

/// CPU time of the calling thread, ns (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Scan {
    fn new(table: &Table, own: Own, deadline: u64, note: &mut String) -> Option<Scan> {
        let mut ranges: Buf<(u64, u64)> = Buf::new(table.len())?;
        let mut devmask: Buf<(u64, u64)> = Buf::new(table.len())?;
        let mut all: Vec<(u64, u64, u64, Kind)> = Vec::with_capacity(table.len());
        for (&k, e) in &table.map {
            all.push((k ^ HIDE, e.size, e.seq, e.kind));
        }
        all.sort_unstable_by_key(|a| a.0);
        // Overlaps (an entry whose free was missed): the later allocation wins.
        let mut kept: Vec<(u64, u64, u64, Kind)> = Vec::with_capacity(all.len());
        for a in all.iter().copied() {
            if let Some(last) = kept.last_mut() {
                if a.0 < last.0.saturating_add(last.1) {
                    if a.2 > last.2 {
                        *last = a;
                    }
                    continue;
                }
            }
            kept.push(a);
        }
        for &(start, size, _, kind) in &kept {
            let end = start.saturating_add(size);
            if !ranges.push((start, end)) {
                return None;
            }
            if kind != Kind::PinnedHost && !devmask.push((start, end)) {
                return None;
            }
        }
        // Scrub the plain copies (volatile: stores just before a free are otherwise dropped).
        for a in all.iter_mut().chain(kept.iter_mut()) {
            // SAFETY: a valid, aligned element of our own vector.
            unsafe { std::ptr::write_volatile(&mut a.0, 0) };
        }
        drop((all, kept));
        let (lo, hi) = match (ranges.as_slice().first(), ranges.as_slice().last()) {
            (Some(f), Some(l)) => (f.0, l.1),
            _ => (1, 0),
        };
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let modules = loader::modules();
        let (own_s, own_e) = loader::own_range();
        let own_s = own_s as u64;
        let own_e = own_e as u64;
        let threads = blocked_threads();
        let writer_stack = own_stack();
        // Every module's segments with what their bytes are: the shim's own (never read), a
        // CUDA library's, or the program's data.
        let mut pieces: Vec<(u64, u64, Option<Role>)> = Vec::new();
        for m in &modules {
            let own = m.ranges.iter().any(|&(ms, me)| (ms as u64) < own_e && (me as u64) > own_s);
            let theirs = is_cuda_library(&m.path) && !config::reachability_cuda_data();
            let role = if own {
                Some(Role::Own)
            } else if theirs {
                Some(Role::Cuda)
            } else {
                Some(Role::Root(ReachRegion::Data, 0))
            };
            pieces.extend(m.ranges.iter().map(|&(ms, me)| (ms as u64, me as u64, role)));
        }
        let mut regions = Vec::new();
        let mut heap = (0u64, 0u64);
        let mut libc_data: Vec<(u64, u64)> = Vec::new();
        for line in maps.lines() {
            let Some((s, e, rw, path)) = parse_maps_line(line) else { continue };
            if !rw
                || path.starts_with("[vvar")
                || path.starts_with("[vsyscall")
                || path.starts_with("[vdso")
                || (path.starts_with("/dev/") && !path.starts_with("/dev/shm/"))
            {
                continue;
            }
            if path.ends_with("/libc.so.6") {
                libc_data.push((s, e));
            }
            if path == "[heap]" {
                heap = (s, e);
                regions.push(Region { start: s, end: e, role: Role::Heap });
                continue;
            }
            // Cut the mapping at module boundaries: the kernel merges a module's bss with
            // anonymous memory mapped next to it.
            let mut at = s;
            while at < e {
                let inside = pieces.iter().find(|p| p.0 <= at && at < p.1);
                let (end, role) = match inside {
                    Some(&(_, pe, r)) => (pe.min(e), r),
                    None => {
                        let next = pieces.iter().filter(|p| p.0 > at).map(|p| p.0).min().unwrap_or(e).min(e);
                        let role = if path == "[stack]" {
                            Some(Role::Root(ReachRegion::Stack, sys::getpid_raw() as u32))
                        } else {
                            Some(Role::Root(ReachRegion::Anon, 0))
                        };
                        (next, role)
                    }
                };
                if let Some(mut role) = role {
                    let mut start = at;
                    if let Role::Root(ReachRegion::Anon | ReachRegion::Stack, _) = role {
                        let sp = threads.iter().find(|(_, sp)| sp.is_some_and(|sp| sp >= at && sp < end));
                        if let Some(&(tid, Some(sp))) = sp {
                            role = Role::Root(ReachRegion::Stack, tid);
                            start = sp.saturating_sub(RED_ZONE).max(at) & !7;
                        }
                        // The exiting thread waits inside the shim until this scan is done
                        // (running, as it spins before it sleeps, or blocked): its frames
                        // below the exit path's entry are the shim's and dead ones.
                        let exit_sp = state::EXIT_SP.load(Acquire);
                        if exit_sp > start && exit_sp < end {
                            role = Role::Root(ReachRegion::Stack, state::EXIT_TID.load(Acquire));
                            // The shim's frames: what they reach is the shim's.
                            regions.push(Region { start, end: exit_sp & !7, role: Role::Own });
                            start = exit_sp & !7;
                        }
                    }
                    regions.push(Region { start, end, role });
                }
                at = end;
            }
        }
        // The writer thread's own malloc arena holds only the shim's blocks, unless a program
        // thread shares it (glibc gives each thread an arena of its own up to 8 per core).
        if let Some(base) = own_arena(heap) {
            for g in regions.iter_mut().filter(|g| g.start >= base && g.start < base + (64 << 20)) {
                g.role = Role::Own;
            }
        }
        // The writer thread's own stack (this thread's): read as the shim's, so that the
        // blocks it reaches are the shim's too.
        if let Some((ws, we)) = writer_stack {
            let mut out = Vec::with_capacity(regions.len() + 2);
            for g in regions.drain(..) {
                if g.end <= ws || g.start >= we {
                    out.push(g);
                    continue;
                }
                if g.start < ws {
                    out.push(Region { end: ws, ..g });
                }
                if g.end > we {
                    out.push(Region { start: we, ..g });
                }
            }
            out.push(Region { start: ws, end: we, role: Role::Own });
            regions = out;
        }
        let rbuf: Buf<u8> = Buf::new(READ_BYTES)?;
        let mut scan = Scan {
            ranges,
            skip: Buf::new(devmask.len + 32)?,
            chunks: Buf::new(4096)?,
            win: Buf::new(WINDOW)?,
            walk_failed_at: 0,
            top: 0,
            pages: Vec::new(),
            page_shift: 12,
            marks: Vec::new(),
            todo: Vec::new(),
            hits: Vec::new(),
            regions,
            lo,
            hi,
            heap: (1, 0),
            deadline,
            scanned: 0,
            unreadable: 0,
            cut: false,
            rbuf,
        };
        if heap.1 > heap.0 {
            if scan.walk_heap(heap.0, heap.1) {
                scan.heap = heap;
                if !scan.drop_fastbin_blocks(heap, &libc_data) {
                    if !note.is_empty() {
                        note.push_str("; ");
                    }
                    note.push_str(
                        "glibc's main arena was not found: blocks freed into its fastbins were read as in use",
                    );
                }
                scan.index_pages(heap.0, heap.1);
            } else {
                for g in scan.regions.iter_mut().filter(|g| g.role == Role::Heap) {
                    g.role = Role::Root(ReachRegion::Anon, 0);
                }
                let at = scan.walk_failed_at;
                note.push_str(&format!(
                    "the main heap's chunks did not add up (at byte {at}); it was read whole as a root"
                ));
            }
        }
        // Never read: device and managed memory, and the shim's own (every buffer of this scan
        // is made by now and does not move any more).
        let mut extra: Vec<(u64, u64)> =
            vec![scan.ranges.range(), scan.skip.range(), scan.chunks.range(), scan.win.range(), scan.rbuf.range()];

        // The threads' rings (`ring`): their slots hold copies of recent addresses too.
        extra.extend(crate::ring::all().map(|r| r.buffer()));
        if let Some(c) = own.channel {
            extra.push(c);
        } else {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str("the shim's event channel was not located: recently made allocations may look reachable");
        }
        extra.sort_unstable();
        let (mut i, mut j) = (0, 0);
        let dm = devmask.as_slice();
        while i < dm.len() || j < extra.len() {
            let next = if j >= extra.len() || (i < dm.len() && dm[i].0 <= extra[j].0) {
                i += 1;
                dm[i - 1]
            } else {
                j += 1;
                extra[j - 1]
            };
            match scan.skip.as_slice().last().copied() {
                Some(last) if next.0 <= last.1 => {
                    let n = scan.skip.len;
                    scan.skip.as_mut_slice()[n - 1].1 = last.1.max(next.1);
                }
                _ => {
                    if !scan.skip.push(next) {
                        return None;
                    }
                }
            }
        }
        drop(devmask);
        Some(scan)
    }

    /// Records the in-use chunks of glibc's main heap `[s, e)`; false if the boundary tags do
    /// not add up to the mapping.
    fn walk_heap(&mut self, s: u64, e: u64) -> bool {
        let key = tcache_key();
        self.win.len = self.win.cap;
        let mut win_start = 0u64;
        let mut win_len = 0usize;
        let mut p = s;
        loop {
            let mut word = |addr: u64, this: &mut Scan| -> Option<u64> {
                if addr < win_start || addr + 8 > win_start + win_len as u64 {
                    let len = (e - addr).min(this.win.len as u64) as usize;
                    win_len = read(addr, &mut this.win.as_mut_slice()[..len]);
                    win_start = addr;
                    if win_len < 8 {
                        return None;
                    }
                }
                let o = (addr - win_start) as usize;
                Some(u64::from_ne_bytes(this.win.as_slice()[o..o + 8].try_into().ok()?))
            };
            let Some(sz) = word(p + 8, self) else { return false };
            let size = sz & !7;
            if size == 16 {
                // A fencepost (malloc.c sysmalloc): the brk heap could not grow in place and the
                // main arena went on in memory from mmap, which is read whole as a root.
                return true;
            }
            if size < MIN_CHUNK || size % 16 != 0 {
                self.walk_failed_at = p - s;
                return false;
            }
            let next = p + size;
            // The top chunk (free) ends the heap; it may reach past the end the mapping had
            // when it was listed, if the heap grew since.
            if next + MIN_CHUNK > e {
                // The top chunk (free) ends the heap.
                self.top = p;
                return true;
            }
            let Some(nsz) = word(next + 8, self) else { return false };
            let freed_to_tcache = key != 0 && word(p + 24, self) == Some(key);
            // The heap's first block is the main thread's `tcache_perthread_struct` (0x290
            // bytes with its header): malloc's own list of freed blocks, not the program's.
            let tcache_struct = p == s && size == 0x290;
            if nsz & 1 == 1 && !freed_to_tcache && !tcache_struct && !self.chunks.push((p + 16, next)) {
                return false;
            }
            p = next;
        }
    }

    /// Leaves out of [`Scan::chunks`] the blocks freed into the main arena's fastbins: their
    /// chunks look in use (a fastbin chunk keeps the next chunk's `PREV_INUSE` bit, malloc.c),
    /// and their stale words would count as references from memory nothing reaches. The lists
    /// start in glibc's `main_arena` (not exported), found in libc's writable data as the one
    /// `struct malloc_state` whose `top` is the walk's top chunk and whose 127 bin heads each
    /// point at themselves (an empty bin) or into the heap. False if it was not found (then
    /// nothing is left out).
    fn drop_fastbin_blocks(&mut self, heap: (u64, u64), libc_data: &[(u64, u64)]) -> bool {
        if self.top == 0 {
            return false;
        }
        let in_heap = |w: u64| w >= heap.0 && w < heap.1;
        let mut found: Option<[u64; NFASTBINS]> = None;
        for &(s, e) in libc_data {
            let len = ((e - s) as usize).min(self.win.cap);
            let got = read(s, &mut self.win.as_mut_slice()[..len]);
            let data = &self.win.as_slice()[..got & !7];
            let word = |o: usize| u64::from_ne_bytes(data[o..o + 8].try_into().unwrap_or([0; 8]));
            let mut o = ARENA_TOP;
            while o + ARENA_SIZE - ARENA_TOP <= data.len() {
                if word(o) == self.top {
                    let base = o - ARENA_TOP;
                    let mut empty = 0;
                    let bins_ok = (0..NBINS).all(|i| {
                        let at = base + ARENA_BINS + 16 * i;
                        let (fd, bk) = (word(at), word(at + 8));
                        let own = s + at as u64 - 16;
                        if fd == own && bk == own {
                            empty += 1;
                            true
                        } else {
                            in_heap(fd) && in_heap(bk)
                        }
                    });
                    let heads: [u64; NFASTBINS] = std::array::from_fn(|i| word(base + ARENA_FASTBINS + 8 * i));
                    let heads_ok = heads.iter().all(|&h| h == 0 || (in_heap(h) && h % 16 == 0));
                    if bins_ok && empty > 0 && heads_ok {
                        if found.is_some() {
                            return false; // two candidates: trust neither
                        }
                        found = Some(heads);
                    }
                }
                o += 8;
            }
        }
        let Some(heads) = found else { return false };
        let mangled = safe_linking();
        let mut free: Vec<u64> = Vec::new();
        for head in heads {
            let mut p = head;
            let mut steps = 0;
            while p != 0 && in_heap(p) && p % 16 == 0 && steps < 1 << 20 {
                free.push(p + 16);
                let Some(fd) = read_word(p + 16) else { break };
                p = if mangled { fd ^ ((p + 16) >> 12) } else { fd };
                steps += 1;
            }
        }
        if free.is_empty() {
            return true;
        }
        free.sort_unstable();
        let mut kept = 0;
        for i in 0..self.chunks.len {
            let c = self.chunks.as_slice()[i];
            if free.binary_search(&c.0).is_err() {
                self.chunks.as_mut_slice()[kept] = c;
                kept += 1;
            }
        }
        self.chunks.len = kept;
        true
    }

    /// One pass over everything: CUDA libraries' data first (marking their heap blocks), then
    /// the program's roots and the blocks they reach, then the shim's own memory (marking what
    /// is left of the blocks it reaches as not the program's), then the blocks nothing reached.
    fn pass(&mut self) -> Vec<Hit> {
        self.hits = vec![Hit { interior_only: true, ..Hit::default() }; self.ranges.len];
        self.marks = vec![0u8; self.chunks.len];
        self.todo.clear();
        let regions = self.regions.clone();
        for g in regions.iter().filter(|g| g.role == Role::Cuda) {
            self.read_range(g.start, g.end, Mode::Cuda);
        }
        self.drain(Mode::Cuda);
        for g in &regions {
            if let Role::Root(region, tid) = g.role {
                self.read_range(g.start, g.end, Mode::Root(region as u8, tid));
                self.drain(Mode::Root(ReachRegion::Heap as u8, 0));
            }
        }
        for g in regions.iter().filter(|g| g.role == Role::Own) {
            self.read_range(g.start, g.end, Mode::Cuda);
        }
        self.drain(Mode::Cuda);
        // Indirectly lost: referred to from blocks nothing reached.
        for c in 0..self.chunks.len {
            if self.marks[c] == 0 && !self.cut {
                let (a, b) = self.chunks.as_slice()[c];
                self.read_range(a, b + 8, Mode::Indirect);
            }
        }
        std::mem::take(&mut self.hits)
    }

    fn drain(&mut self, mode: Mode) {
        while let Some(c) = self.todo.pop() {
            // A block's last word is the next chunk's `prev_size` field, which it may use.
            let (a, b) = self.chunks.as_slice()[c as usize];
            self.read_range(a, b + 8, mode);
        }
    }

    /// Reads `[a, b)` less the ranges never read, word by word.
    fn read_range(&mut self, a: u64, b: u64, mode: Mode) {
        let mut a = (a + 7) & !7;
        let skip_len = self.skip.len;
        let mut k = self.skip.as_slice().partition_point(|r| r.1 <= a);
        while a < b && !self.cut {
            let (gap_end, next_a) = if k < skip_len {
                let r = self.skip.as_slice()[k];
                if r.0 <= a {
                    k += 1;
                    a = (r.1 + 7) & !7;
                    continue;
                }
                (r.0.min(b), r.1)
            } else {
                (b, b)
            };
            self.read_words(a, gap_end, mode);
            a = (next_a + 7) & !7;
            if gap_end == b {
                break;
            }
            k += 1;
        }
    }

    fn read_words(&mut self, mut a: u64, b: u64, mode: Mode) {
        self.rbuf.len = self.rbuf.cap;
        while a + 8 <= b {
            if sys::now_ns() > self.deadline {
                self.cut = true;
                break;
            }
            let want = ((b - a) as usize).min(self.rbuf.len) & !7;
            let n = read(a, &mut self.rbuf.as_mut_slice()[..want]) & !7;
            self.scanned += n as u64;
            // The bounds in registers: the calls below take `self` mutably, so fields would be
            // reloaded for every word.
            let (lo, span) = (self.lo, self.hi.wrapping_sub(self.lo));
            let (hlo, hspan) = match mode {
                Mode::Indirect => (0, 0),
                _ => (self.heap.0, self.heap.1.wrapping_sub(self.heap.0)),
            };
            let words = self.rbuf.ptr as *const u64;
            for i in 0..n / 8 {
                // SAFETY: i * 8 + 8 <= n <= the buffer's length; the buffer is page-aligned.
                let w = unsafe { words.add(i).read() };
                if w.wrapping_sub(lo) < span {
                    self.device_word(w, a + 8 * i as u64, mode);
                }
                if w.wrapping_sub(hlo) < hspan {
                    self.heap_word(w, mode);
                }
            }
            if n < want {
                // An unreadable page (unmapped meanwhile, or PROT_NONE): skip it.
                let bad = (a + n as u64 + PAGE) & !(PAGE - 1);
                self.unreadable += bad.min(b) - (a + n as u64);
                a = bad;
            } else {
                a += n as u64;
            }
        }
    }

    #[inline]
    fn device_word(&mut self, w: u64, at: u64, mode: Mode) {
        let r = self.ranges.as_slice();
        let i = r.partition_point(|x| x.0 <= w);
        if i == 0 || w >= r[i - 1].1 {
            return;
        }
        let start = r[i - 1].0;
        let h = &mut self.hits[i - 1];
        match mode {
            Mode::Cuda => {}
            Mode::Indirect => h.indirect = h.indirect.saturating_add(1),
            Mode::Root(region, tid) => {
                // Where it is held: the first reference of the most telling region (data,
                // then a stack, then the heap, then other anonymous memory).
                let rank = |r: u8| [0u8, 4, 2, 3, 1][usize::from(r.min(4))];
                if h.refs > 0 && rank(region) > rank(h.region) {
                    h.region = region;
                    h.tid = tid;
                    h.from = at;
                }
                if h.refs == 0 {
                    h.region = region;
                    h.tid = tid;
                    h.from = at;
                }
                h.refs = h.refs.saturating_add(1);
                h.interior_only &= w != start;
            }
        }
    }

    #[inline]
    fn heap_word(&mut self, w: u64, mode: Mode) {
        let mark = match mode {
            Mode::Cuda => 2,
            Mode::Root(..) => 1,
            Mode::Indirect => return,
        };
        let c = self.chunks.as_slice();
        // The last block starting at or before the start of w's page, then forward.
        let Some(&first) = self.pages.get(((w - self.heap.0) >> self.page_shift) as usize) else { return };
        let mut i = first as usize;
        while i + 1 < c.len() && c[i + 1].0 <= w {
            i += 1;
        }
        if i >= c.len() || w < c[i].0 || w >= c[i].1 || self.marks[i] != 0 {
            return;
        }
        self.marks[i] = mark;
        self.todo.push(i as u32);
    }

    /// Builds [`Scan::pages`] for the heap `[s, e)` from the walked blocks.
    fn index_pages(&mut self, s: u64, e: u64) {
        // 4 KiB pages, coarser for a heap past 64 GiB (at most 16 Mi entries).
        let mut shift = 12;
        while (e - s) >> shift > 1 << 24 {
            shift += 1;
        }
        self.page_shift = shift;
        let n = ((e - s) >> shift) as usize + 1;
        let c = self.chunks.as_slice();
        let mut pages = Vec::with_capacity(n);
        let mut i = 0usize;
        for k in 0..n {
            let at = s + ((k as u64) << shift);
            while i + 1 < c.len() && c[i + 1].0 <= at {
                i += 1;
            }
            pages.push(i as u32);
        }
        self.pages = pages;
    }
}

/// What a word found while reading counts for.
#[derive(Clone, Copy)]
enum Mode {
    /// Read from a CUDA library's data or its blocks.
    Cuda,
    /// Read from a root of the program's (region, thread) or a block it reached.
    Root(u8, u32),
    /// Read from a block nothing reached.
    Indirect,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let l = "7f0000000000-7f0000021000 rw-p 00000000 00:00 0                          [heap]";
        assert_eq!(parse_maps_line(l), Some((0x7f00_0000_0000, 0x7f00_0002_1000, true, "[heap]")));
        let l = "55d0c0a00000-55d0c0a01000 r--p 00002000 08:01 1234 /usr/bin/x y";
        assert_eq!(parse_maps_line(l), Some((0x55d0_c0a0_0000, 0x55d0_c0a0_1000, false, "/usr/bin/x y")));
    }

    #[test]
    fn cuda_libraries_are_told_by_name() {
        assert!(is_cuda_library("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
        assert!(is_cuda_library("/x/libcublasLt.so.13"));
        assert!(!is_cuda_library("/x/libc10_cuda.so"));
        assert!(!is_cuda_library("/x/libc.so.6"));
    }

    #[test]
    fn the_table_keeps_frees_in_sequence_order() {
        let mut t = Table::default();
        t.alloc(1, 0x1000, 64, Kind::Device, Api::CudaMalloc, 0);
        // A reuse of the address arrives before the free of the first allocation.
        t.alloc(3, 0x1000, 32, Kind::Device, Api::CudaMalloc, 0);
        t.free(2, 0x1000);
        assert_eq!(t.len(), 1);
        assert!(t.map.values().all(|e| e.size == 32));
        t.free(4, 0x1000);
        assert_eq!(t.len(), 0);
    }
}
