//! Frees in progress: one slot per thread, written by the thread around its real free call and
//! read by the writer thread when a snapshot is asked for. A free takes its sequence number
//! before the real call, which may wait on the device for as long as a kernel runs; the
//! collector applies events in sequence order, so without this a snapshot would wait for that
//! call. The writer sends a `FreePending` for each free in progress below the snapshot's
//! boundary, and the collector can go on (the memory stays live until the call returns).
//!
//! Cost on the hot path: a few relaxed stores to the thread's own slot. Slots are never freed:
//! a thread that ends gives its slot back for a later thread to take, so their number is the
//! largest number of threads that ever freed at the same time.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering::*};

use gpushim_wire::{Api, FreePending};

/// One thread's free in progress.
struct Slot {
    /// Whether a live thread holds this slot.
    owned: AtomicBool,
    /// The free's sequence number + 1; 0 when no free is in progress. Written last (release)
    /// by `begin`, so that a reader that sees it also sees the fields below.
    seq1: AtomicU64,
    addr: AtomicU64,
    stream: AtomicU64,
    api: AtomicU8,
    tid: AtomicU32,
    /// The next slot of the list of every slot.
    next: AtomicPtr<Slot>,
}

/// Every slot ever made (a lock-free list, only ever pushed to).
static ALL: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// This thread's slot: null before its first free, [`ENDED`] once the thread has given it
    /// back. No Rust destructor (`per_thread`: none may run in `exit()`); the slot is given back
    /// by `per_thread::at_thread_end`.
    static MINE: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
}

/// [`MINE`]'s value after the thread's end gave its slot back.
const ENDED: *const Slot = std::ptr::dangling::<Slot>();

/// The calling thread's slot if it holds one.
fn held() -> Option<&'static Slot> {
    let p = MINE.with(Cell::get);
    live(p)
}

/// `p` as a reference, unless it is null or [`ENDED`].
fn live(p: *const Slot) -> Option<&'static Slot> {
    if p == ENDED {
        return None;
    }
    // SAFETY: null, or a leaked Box that is never freed.
    unsafe { p.as_ref() }
}

/// The calling thread's slot, taken on its first free; `None` once the thread has ended.
fn mine() -> Option<&'static Slot> {
    let p = MINE.with(Cell::get);
    if !p.is_null() {
        return held();
    }
    let s = claim();
    MINE.with(|m| m.set(s));
    if !crate::per_thread::at_thread_end(give_back, std::ptr::null_mut()) {
        // Never given back, the slot would be lost to later threads: none for this thread.
        // SAFETY: this thread's own slot, just taken.
        unsafe { give_back(std::ptr::null_mut()) };
        return None;
    }
    Some(s)
}

/// At the end of the thread (`per_thread::at_thread_end`): gives its slot back.
unsafe fn give_back(_: *mut std::ffi::c_void) {
    let p = MINE.with(|m| m.replace(ENDED));
    if let Some(s) = live(p) {
        s.seq1.store(0, Release);
        s.owned.store(false, Release);
    }
}

/// A slot no thread holds, or a new one.
fn claim() -> &'static Slot {
    let mut p = ALL.load(Acquire);
    // SAFETY: every pointer in the list is a leaked Box that is never freed.
    while let Some(s) = unsafe { p.as_ref() } {
        if s.owned.compare_exchange(false, true, AcqRel, Relaxed).is_ok() {
            return s;
        }
        p = s.next.load(Acquire);
    }
    let s: &'static Slot = Box::leak(Box::new(Slot {
        owned: AtomicBool::new(true),
        seq1: AtomicU64::new(0),
        addr: AtomicU64::new(0),
        stream: AtomicU64::new(0),
        api: AtomicU8::new(0),
        tid: AtomicU32::new(0),
        next: AtomicPtr::new(std::ptr::null_mut()),
    }));
    let mut head = ALL.load(Acquire);
    loop {
        s.next.store(head, Relaxed);
        match ALL.compare_exchange_weak(head, s as *const Slot as *mut Slot, AcqRel, Acquire) {
            Ok(_) => return s,
            Err(h) => head = h,
        }
    }
}

/// Marks this thread's free `seq` of `addr` as in progress.
pub fn begin(seq: u64, addr: u64, api: Api, stream: u64, tid: u32) {
    if let Some(s) = mine() {
        s.addr.store(addr, Relaxed);
        s.stream.store(stream, Relaxed);
        s.api.store(api as u8, Relaxed);
        s.tid.store(tid, Relaxed);
        s.seq1.store(seq.wrapping_add(1), Release);
    }
}

/// This thread's free has returned.
pub fn end() {
    if let Some(s) = held() {
        s.seq1.store(0, Release);
    }
}

/// Calls `f` with each free in progress whose sequence number is below `boundary`; `ts_ns`
/// (monotonic, ns) is the time it was seen in progress.
pub fn each_below(boundary: u64, ts_ns: u64, mut f: impl FnMut(FreePending)) {
    let mut p = ALL.load(Acquire);
    // SAFETY: every pointer in the list is a leaked Box that is never freed.
    while let Some(s) = unsafe { p.as_ref() } {
        p = s.next.load(Acquire);
        let seq1 = s.seq1.load(Acquire);
        if seq1 == 0 || seq1 > boundary {
            continue;
        }
        let addr = s.addr.load(Relaxed);
        let stream = s.stream.load(Relaxed);
        let api = s.api.load(Relaxed);
        let tid = s.tid.load(Relaxed);
        // The fields belong to that free only if the slot still holds it (sequence numbers
        // are never reused, so an unchanged number means unchanged fields).
        std::sync::atomic::fence(Acquire);
        if s.seq1.load(Relaxed) != seq1 {
            continue;
        }
        let Some(api) = Api::ALL.iter().copied().find(|a| *a as u8 == api) else { continue };
        f(FreePending { seq: seq1 - 1, ts_ns, addr, api, stream, tid });
    }
}

/// In a forked child, where only the forking thread exists: every other thread's slot is free
/// again, and no free is in progress.
pub fn reset_after_fork() {
    let mut p = ALL.load(Acquire);
    // SAFETY: every pointer in the list is a leaked Box that is never freed.
    while let Some(s) = unsafe { p.as_ref() } {
        s.seq1.store(0, Relaxed);
        s.owned.store(false, Relaxed);
        p = s.next.load(Acquire);
    }
    if let Some(s) = held() {
        s.owned.store(true, Release);
    }
}
