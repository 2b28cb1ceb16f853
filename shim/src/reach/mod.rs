//! The reachability scan: which live allocations no pointer in the program's own memory refers
//! to any more ("definitely lost", as LeakSanitizer and valgrind say of heap blocks).
//!
//! **Who runs it, when.** Only the writer thread (a shim thread with every asynchronous signal
//! blocked, with helper threads of its own that inherit that and end before it goes on), at a snapshot, after an out-of-memory failure and when the exit path asks for the
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
//! of every module, the heap, anonymous mappings and thread stacks, of each only the pages in
//! memory or swapped out (`/proc/self/pagemap`; a page never touched holds no pointer), by up
//! to 16 threads at once (`roots`; `GPUSHIM_REACHABILITY_THREADS`), read with
//! `process_vm_readv` on this process, which fails cleanly (`EFAULT`) on a page unmapped
//! meanwhile: no SIGSEGV handler is installed and nothing faults. It leaves out:
//! - device-file mappings (`/dev/…` other than `/dev/shm` and `/dev/zero`, the name of shared
//!   anonymous memory; e.g. `/dev/nvidia*`), `[vvar]`,
//!   `[vsyscall]`;
//! - the bytes of live device and managed allocations (reading managed memory migrates pages;
//!   device memory is not host memory, although the stand-ins back it with host memory);
//! - the shim's own memory: its module's data and bss, the writer thread's stack, the event
//!   channel's buffer (found at the writer's first event by the timestamp of that event, see
//!   `alloc_watch::watch`), the writer's wire buffer (zeroed before a scan) and the scan's own
//!   buffers; its thread-local storage in each thread that ran its code (`own_tls`) is read as
//!   the shim's, like the writer thread's stack;
//! - the stacks of threads blocked in a system call below their stack pointer
//!   (`/proc/self/task/N/syscall` gives it; 128 bytes of red zone are kept): dead frames hold
//!   stale copies of pointers. A running thread's stack is read whole. Only in a stack glibc
//!   made (a guard page below it) or the main thread's: in memory the program gave a thread as
//!   its stack (`pthread_attr_setstack`, a fiber arena, malloc'd blocks the kernel merged into
//!   one mapping) the part below is read without trust (see "Possibly lost").
//!
//! **The CUDA libraries' own bookkeeping.** By mapping origin: the data and bss of the CUDA
//! libraries ([`is_cuda_library`]) are not roots, and the main heap's blocks reachable from
//! them are the libraries' own (their allocation tables): those blocks are neither roots nor
//! followed from the program's roots. Without this, the driver's record of every allocation
//! makes everything look reachable (the stand-in driver keeps one `malloc`ed entry per
//! allocation, as the real driver keeps its own: docs/gpu-matrix.md).
//! `GPUSHIM_REACHABILITY_CUDA_DATA=1` reads them as roots instead, to measure that.
//!
//! **Possibly lost.** Memory that may hold the program's pointers but cannot be trusted to is
//! read too, and what only it refers to is "possibly lost" (valgrind's word), never "definitely
//! lost": a CUDA library's heap block that the program's data or memory it reaches (not a stack)
//! also points to (a library handle the program keeps, such as a cuBLAS handle holding its
//! workspace; one level: the blocks it points to stay the library's); a freed block of the main
//! heap that a module's data still points to, and the freed blocks it points to (a static C++
//! container whose destructor ran before the exit's scan); at an exit's scan made after the
//! program's exit handlers (neither the end of `main` nor `exit()` was seen), every freed block
//! of the main heap (the program's static containers were torn down just before it, by C++
//! static destructors and atexit handlers, whatever the globals still say); of a freed block
//! the words malloc wrote over for its lists (one to four) are not read; the part of a blocked thread's given stack below
//! its stack pointer. A stale copy of the address of such a block (the driver's record of a
//! recent allocation, left in a block the program reaches) makes what it holds possibly lost:
//! the safe side. Each heap block carries a mark per pass (`mark`) that only moves towards
//! more trust.
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
//! device, managed or pinned allocation, or whose two halves are the 30-bit digits of a CPython
//! int with such a value (`pass`); interior pointers count and are reported as such.
//! The index is sorted by address and searched by binary search, behind one range compare.
//!
//! **Racy, so twice.** Other threads are not stopped (a signal would interrupt their system
//! calls), so a pointer moving from one place to another during a pass can be missed. The scan
//! runs a second pass when the first found anything lost or indirectly lost (not for what is only
//! possibly lost), and calls lost only what both passes call lost. A scan cut by its time cap calls nothing lost.

mod buf;
mod heap;
mod maps;
mod new;
mod pass;
mod roots;
mod words;

use std::collections::HashMap;

use gpushim_wire::{self as wire, Api, Kind, ReachClass, ReachEntry, ReachRegion, ReachStatus, WalkReason};

use crate::hash::FastHash;
use crate::{config, sys};

use buf::{read_word, Buf};
use maps::Region;

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
    /// Words in memory read without trust (`Mode::Possible`).
    possible: u32,
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
    /// Per chunk, its [`mark`] in this pass.
    marks: Vec<std::sync::atomic::AtomicU8>,
    /// Per chunk, its mark at the start of a pass ([`mark::UNREACHED`] or [`mark::FREE`]).
    init: Vec<u8>,
    /// Per chunk, the words at its start malloc wrote over when it was freed (0 in use).
    reused: Vec<u8>,
    /// The heap walk's window.
    win: Buf<u8>,
    /// The scan of an exit after the program's exit handlers: every freed block of the main
    /// heap is read without trust.
    exit: bool,
    /// Where a heap walk that did not add up stopped, bytes from the heap's start.
    walk_failed_at: u64,
    /// The heap walk gave up because a read failed (the heap shrank meanwhile, or a page was
    /// unreadable), or because its list of blocks was full.
    walk_failed_read: bool,
    walk_failed_full: bool,
    /// The main heap's top chunk (free), found by the walk; 0 before it.
    top: u64,
    /// Per page of the heap (`1 << page_shift` bytes), the index of the last block starting at
    /// or before the page's start: a block is found in a few steps instead of a binary search.
    pages: Vec<u32>,
    page_shift: u32,
    regions: Vec<Region>,
    lo: u64,
    hi: u64,
    heap: (u64, u64),
    deadline: u64,
    scanned: u64,
    unreadable: u64,
    /// CPU time of the helper threads, both passes, ns.
    helpers_cpu_ns: u64,
    cut: bool,
    /// What `process_vm_readv` reads into.
    rbuf: Buf<u8>,
    /// What the calling thread finds in a pass, and the helper threads' memory (`roots`).
    acc: words::Acc,
    helpers: Vec<roots::Helper>,
    /// Pagemap entries (`roots`), and the pagemap, if it can be read.
    entries: Buf<u64>,
    pagemap: Option<std::fs::File>,
    /// The slices of the roots to read (`roots`), and the readers' shared queue of heap blocks.
    work: Buf<(u64, u64, Mode)>,
    shared: roots::Shared,
}

/// Runs a scan for the report `reason`/`number` against `table`. Returns the event to send.
/// `after_handlers`: an exit's scan made after the program's atexit handlers and static
/// destructors ran, which then reads every freed block of the main heap without trust.
pub fn scan(table: &Table, own: Own, reason: WalkReason, number: u32, after_handlers: bool) -> wire::Reach {
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
        // the whole process (docs/performance.md, "Reachability scan").
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
    s.exit = reason == WalkReason::Exit && after_handlers;
    let first = s.pass();
    // Lost or indirectly lost; what is only possibly lost needs no second look.
    let any_lost = first.iter().any(|h| h.refs == 0 && h.possible == 0);
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
        } else if a.possible > 0 || b.possible > 0 {
            ReachClass::PossiblyLost
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
    r.cpu_ns = thread_cpu_ns().saturating_sub(cpu0) + s.helpers_cpu_ns;
    r
}

/// CPU time of the calling thread, ns (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
    /// Read from memory the scan does not trust (`marks`): what it finds is "possibly lost".
    Possible,
}

/// A heap block's mark in a pass ([`Scan::marks`]): who reached it, and so how it is read.
mod mark {
    /// Not reached (yet): read as indirect at the end of the pass.
    pub const UNREACHED: u8 = 0;
    /// Reached from the program's roots: read as the program's.
    pub const PROGRAM: u8 = 1;
    /// Reached from a CUDA library's data (or the shim's own memory) only: not read again.
    pub const CUDA: u8 = 2;
    /// In use, reached only from memory read without trust: read as such.
    pub const POSSIBLE: u8 = 3;
    /// Free (a free chunk, or one freed into a thread's cache or a fastbin), not reached.
    pub const FREE: u8 = 4;
    /// Free, and a word the scan reads points into it (a container the program tore down, such
    /// as a static C++ map whose destructor ran before the exit's scan): its stale words, less
    /// those malloc reuses, are read without trust.
    pub const FREE_READ: u8 = 5;
    /// A CUDA library's block the program also points to (a library handle the program keeps):
    /// read without trust, one level (the blocks it points to stay the library's).
    pub const CUDA_SHARED: u8 = 6;
}

#[cfg(test)]
mod tests {
    use super::maps::{is_cuda_library, parse_maps_line};
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
