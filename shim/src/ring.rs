//! Per-thread single-producer rings: a thread's events (every event its hooks make,
//! and the heap walk's result when the walk ran on it) go to the writer through a ring that only
//! this thread writes and only the writer thread reads, instead of the shared channel, where
//! every send was a locked compare-exchange on the channel's shared tail and slot stamps that
//! the writer's core read back (docs/performance.md, "Per-thread rings", has what it saves).
//!
//! - **Order**: one thread's events reach the writer in the order it queued them, as through
//!   the one channel before (the collector's `teardown_from_ns` needs the exit heap walk's
//!   event before the interpreter's teardown frees of the same thread; the writer's live set
//!   needs a context's reset after the allocations before it). Only the exit's messages, sent
//!   after the thread's own events, and those of threads without a ring go through the channel.
//! - **Producer** (the owning thread, one push at a time: a push is never interrupted by
//!   another push of the same thread, since a hook that a signal handler runs during a push
//!   finds `busy` set and uses the channel): writes the slot at `head`, then publishes it with a
//!   release store of `head`. It
//!   keeps its own copy of the writer's `tail` and reads the writer's line only when that copy
//!   says the ring is half full: no read-modify-write on a line the writer touches.
//! - **Writer**: acquire-loads `head`, takes the messages, release-stores `tail`.
//! - **Registry**: every ring is in a lock-free list, only ever pushed to; rings are leaked,
//!   never freed. A thread that ends gives its ring back (`owned` false); a later thread takes
//!   it only once the writer has drained it, so the events of a thread that ended are never
//!   lost. Their number is the largest number of recording threads alive at once.
//! - **Storage**: the slots are on the heap (`SLOTS` × `size_of::<Msg>()`, about 384 KiB per
//!   ring); only a pointer is thread-local (see `per_thread`: never big thread-local storage).
//! - **Full ring**: the producer waits for the writer as the channel's send did (backpressure,
//!   never a dropped event), waking it if it sleeps; a child made by a raw fork system call
//!   (no fork handler ran, no writer thread) stops recording instead of waiting for ever.
//! - **Fork**: in the child every ring is empty and free again except the forking thread's
//!   (`reset_after_fork`); the parent's queued events are the parent writer's.
//! - **Signals**: nothing here runs in a signal handler; a hook that a signal handler calls
//!   while its thread is inside a hook is not recorded (the re-entrancy guard), so a ring never
//!   has two producers.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering::*};
use std::time::Duration;

use crate::event::Msg;
use crate::state::{self, DISABLED, STATE, TRACED_PID};
use crate::sys;

/// Events a thread may have queued before it waits for the writer (a power of two). The writer
/// sleeps 0.5 ms at least when it finds nothing: at 3 events a microsecond (a pool-hit loop on a
/// real GPU, docs/performance.md), 1,500 events; half the ring holds them, so a thread that
/// allocates without pause never has to wake the writer.
pub const SLOTS: u32 = 4096;
const MASK: u32 = SLOTS - 1;
/// Queued events past which the producer looks at the writer's `tail` again, and wakes the
/// writer if it is still that far behind and asleep: half the ring.
const LOOK_AT: u32 = SLOTS / 2;

/// The producer's cache line: written by the owning thread only.
#[repr(C, align(64))]
struct Producer {
    /// Next slot to write (wrapping); release-stored after the slot is written.
    head: AtomicU32,
    /// The producer's last view of `Consumer::tail`.
    seen_tail: AtomicU32,
    /// A push of the owning thread is under way (read and written by that thread only).
    busy: AtomicBool,
}

/// The writer's cache line: `tail` is written by the writer thread only.
#[repr(C, align(64))]
struct Consumer {
    /// Next slot to read (wrapping); release-stored after the slots before it were read. The
    /// futex word a producer waiting for room sleeps on.
    tail: AtomicU32,
    /// 1 while the producer waits for room (set by the producer only when its ring is full).
    waiting: AtomicU32,
}

/// One thread's ring.
pub struct Ring {
    prod: Producer,
    cons: Consumer,
    /// Whether a live thread holds this ring.
    owned: AtomicBool,
    /// The ring's number, from 0 in order of creation (the writer's per-ring state).
    id: u32,
    /// The next ring of the list of every ring.
    next: AtomicPtr<Ring>,
    slots: Box<[UnsafeCell<MaybeUninit<Msg>>]>,
}

// SAFETY: a slot is written only by the owning thread while it is outside `[tail, head)` and
// read only by the writer while it is inside (published by the release store of `head`,
// given back by the release store of `tail`); every other field is atomic.
unsafe impl Sync for Ring {}

/// Every ring ever made (a lock-free list, only ever pushed to).
static ALL: AtomicPtr<Ring> = AtomicPtr::new(std::ptr::null_mut());
/// Rings made so far: the next ring's `id`.
static MADE: AtomicU32 = AtomicU32::new(0);
/// Set by the writer just before it sleeps and cleared when it wakes (or by the producer that
/// wakes it).
static ASLEEP: AtomicBool = AtomicBool::new(false);
/// The futex word the writer sleeps on; a producer that wakes it changes it first.
static WAKE: AtomicU32 = AtomicU32::new(0);
/// Set when the writer thread has ended (for any reason): a full ring is never drained again.
static WRITER_GONE: AtomicBool = AtomicBool::new(false);

/// This thread's ring: null before its first event, [`ENDED`] once the thread has given it back
/// (its later events, from destructors run after, go through the channel). No Rust destructor
/// (`per_thread`: none may run in `exit()`); the ring is given back by `per_thread::at_thread_end`.
struct Mine(Cell<*const Ring>);

/// [`Mine`]'s value after the thread's end gave its ring back.
const ENDED: *const Ring = std::ptr::dangling::<Ring>();

thread_local! {
    static MINE: Mine = const { Mine(Cell::new(std::ptr::null())) };
}

/// The calling thread's ring, if it holds one.
fn held() -> Option<&'static Ring> {
    let p = MINE.with(|m| m.0.get());
    live(p)
}

/// `p` as a reference, unless it is null or [`ENDED`].
fn live(p: *const Ring) -> Option<&'static Ring> {
    if p == ENDED {
        return None;
    }
    // SAFETY: null, or a leaked ring, never freed.
    unsafe { p.as_ref() }
}

/// At the end of the thread (`per_thread::at_thread_end`): gives its ring back.
unsafe fn give_back(_: *mut std::ffi::c_void) {
    let p = MINE.with(|m| m.0.replace(ENDED));
    if let Some(r) = live(p) {
        r.owned.store(false, Release);
    }
}

impl Ring {
    fn drained(&self) -> bool {
        self.cons.tail.load(Acquire) == self.prod.head.load(Acquire)
    }

    /// The ring's number (0, 1, … in order of creation).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Writer side: the end of what is queued now (acquire: the slots before it are written).
    pub fn head(&self) -> u32 {
        self.prod.head.load(Acquire)
    }

    /// Writer side: the next slot to read.
    pub fn tail(&self) -> u32 {
        self.cons.tail.load(Relaxed)
    }

    /// Writer side: the message at `at` without taking it.
    ///
    /// # Safety
    /// Only the writer thread; `at` in `[tail, head)` with `head` from [`Ring::head`].
    pub unsafe fn peek(&self, at: u32) -> &Msg {
        // SAFETY: the caller's promise: the slot was written and published, and not taken.
        unsafe { (*self.slots[(at & MASK) as usize].get()).assume_init_ref() }
    }

    /// Writer side: takes the message at `at`; the slot is given back by [`Ring::release`].
    ///
    /// # Safety
    /// As [`Ring::peek`], and each slot taken once (`at` is then passed to `release`).
    pub unsafe fn take(&self, at: u32) -> Msg {
        // SAFETY: as in `peek`; the caller moves past it, so it is read once.
        unsafe { (*self.slots[(at & MASK) as usize].get()).assume_init_read() }
    }

    /// Writer side: the slot before `to` was read (a plain release store; [`Ring::release`]
    /// also wakes a producer that waits for room).
    pub fn advance(&self, to: u32) {
        self.cons.tail.store(to, Release);
    }

    /// Producer side: whether a push of the calling thread (its owner) is under way, so that a
    /// hook run by a signal handler in the middle of it must not push.
    pub fn busy(&self) -> bool {
        self.prod.busy.load(Relaxed)
    }

    /// Writer side: the slots before `to` were read; the producer may write them again, and
    /// is woken if it waits for room.
    pub fn release(&self, to: u32) {
        self.cons.tail.store(to, Release);
        // Against the producer's store of `waiting` and load of `tail` (`wait_for_room`): one
        // of the two sides sees the other's store.
        std::sync::atomic::fence(SeqCst);
        if self.cons.waiting.load(Relaxed) != 0 {
            // SAFETY: FUTEX_WAKE on the ring's word (leaked, never freed); no memory is written.
            unsafe {
                libc::syscall(libc::SYS_futex, self.cons.tail.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1)
            };
        }
    }

    /// The slots' memory, `[start, end)`: it holds copies of allocations' addresses, which the
    /// reachability scans leave out.
    pub fn buffer(&self) -> (u64, u64) {
        let s = self.slots.as_ptr() as u64;
        (s, s + std::mem::size_of_val(&*self.slots) as u64)
    }
}

/// Every ring made so far (for the writer, the reachability scan and tests).
pub fn all() -> impl Iterator<Item = &'static Ring> {
    let mut p = ALL.load(Acquire);
    std::iter::from_fn(move || {
        // SAFETY: every pointer in the list is a leaked Box that is never freed.
        let r = unsafe { p.as_ref() }?;
        p = r.next.load(Acquire);
        Some(r)
    })
}

/// A drained ring no thread holds, or a new one.
fn claim() -> &'static Ring {
    for r in all() {
        // Its owner has ended (its last `head` store happened before `owned` became false);
        // taken only once the writer has read every slot.
        if !r.owned.load(Acquire) && r.drained() && r.owned.compare_exchange(false, true, AcqRel, Relaxed).is_ok() {
            if r.drained() {
                return r;
            }
            r.owned.store(false, Release);
        }
    }
    let slots: Box<[UnsafeCell<MaybeUninit<Msg>>]> =
        (0..SLOTS).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
    let r: &'static Ring = Box::leak(Box::new(Ring {
        prod: Producer { head: AtomicU32::new(0), seen_tail: AtomicU32::new(0), busy: AtomicBool::new(false) },
        cons: Consumer { tail: AtomicU32::new(0), waiting: AtomicU32::new(0) },
        owned: AtomicBool::new(true),
        id: MADE.fetch_add(1, Relaxed),
        next: AtomicPtr::new(std::ptr::null_mut()),
        slots,
    }));
    let mut head = ALL.load(Acquire);
    loop {
        r.next.store(head, Relaxed);
        match ALL.compare_exchange_weak(head, r as *const Ring as *mut Ring, AcqRel, Acquire) {
            Ok(_) => return r,
            Err(h) => head = h,
        }
    }
}

/// The calling thread's ring, taken on first use; `None` once the thread has ended (its events
/// then go through the channel). Only inside the hooks' guard.
pub fn mine() -> Option<&'static Ring> {
    let p = MINE.with(|m| m.0.get());
    if p == ENDED {
        return None;
    }
    if p.is_null() {
        let r = claim();
        MINE.with(|m| m.0.set(r));
        if !crate::per_thread::at_thread_end(give_back, std::ptr::null_mut()) {
            // Never given back, a ring would be lost to later threads: the channel instead.
            // SAFETY: this thread's own ring, just taken.
            unsafe { give_back(std::ptr::null_mut()) };
            return None;
        }
        return Some(r);
    }
    // SAFETY: a leaked ring, never freed.
    Some(unsafe { &*p })
}

/// Queues `msg` on `r`, the calling thread's ring ([`mine`]), waiting while it is full. The
/// message is dropped only where recording has stopped (or stops here: a raw fork's child).
/// Gives it back when a push of this thread is under way (a hook run by a signal handler that
/// interrupted a push): the caller sends it through the channel.
#[inline]
pub fn push(r: &Ring, msg: Msg) -> Result<(), Msg> {
    if r.prod.busy.load(Relaxed) {
        return Err(msg);
    }
    r.prod.busy.store(true, Relaxed);
    // Against a signal handler on this thread: `busy` is set before anything else is touched.
    std::sync::atomic::compiler_fence(SeqCst);
    push_owned(r, msg);
    std::sync::atomic::compiler_fence(SeqCst);
    r.prod.busy.store(false, Relaxed);
    Ok(())
}

/// Queues `msg` on the calling thread's ring if it has one (outside the hooks: the heap walk's
/// result); gives it back otherwise.
pub fn push_if_mine(msg: Msg) -> Result<(), Msg> {
    match held() {
        Some(r) => push(r, msg),
        None => Err(msg),
    }
}

#[inline]
fn push_owned(r: &Ring, msg: Msg) {
    let h = r.prod.head.load(Relaxed);
    if h.wrapping_sub(r.prod.seen_tail.load(Relaxed)) >= LOOK_AT {
        let t = r.cons.tail.load(Acquire);
        r.prod.seen_tail.store(t, Relaxed);
        if h.wrapping_sub(t) >= LOOK_AT {
            wake_writer();
            if h.wrapping_sub(t) >= SLOTS && !wait_for_room(r, h) {
                return;
            }
        }
    }
    // SAFETY: slot `h` is outside `[tail, head)` (checked above), so the writer does not read
    // it; only this thread writes this ring (the hooks' guard). A slot given back by the writer
    // was read out (moved), so writing over it drops nothing.
    unsafe { (*r.slots[(h & MASK) as usize].get()).write(msg) };
    r.prod.head.store(h.wrapping_add(1), Release);
}

/// Waits until the writer has read slot `h - SLOTS`; false (the caller drops its message) if
/// no writer will: recording has stopped, the writer thread has ended, or this is a child of a
/// raw fork system call, which then stops recording.
/// The thread sleeps in `futex` on the ring's `tail` (the writer wakes it when it takes
/// events), for at most a millisecond at a time, to look at those conditions again.
#[cold]
fn wait_for_room(r: &Ring, h: u32) -> bool {
    crate::probe::probe!(count WAITS);
    let room = loop {
        if TRACED_PID.load(Acquire) != sys::getpid_raw() {
            STATE.store(DISABLED, Release);
            break false;
        }
        if !state::recording() || WRITER_GONE.load(Acquire) {
            break false;
        }
        wake_writer();
        r.cons.waiting.store(1, Relaxed);
        std::sync::atomic::fence(SeqCst);
        let t = r.cons.tail.load(Acquire);
        r.prod.seen_tail.store(t, Relaxed);
        if h.wrapping_sub(t) < SLOTS {
            break true;
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
        // SAFETY: FUTEX_WAIT on the ring's word with a valid relative timeout; returns at once
        // if `tail` moved since it was read.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                r.cons.tail.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                t,
                &ts as *const libc::timespec,
            )
        };
    };
    r.cons.waiting.store(0, Relaxed);
    room
}

/// Wakes the writer if it sleeps (one `futex` call, only from a ring half full).
fn wake_writer() {
    if ASLEEP.load(Relaxed) && ASLEEP.swap(false, AcqRel) {
        crate::probe::probe!(count WAKES);
        WAKE.fetch_add(1, Release);
        // SAFETY: FUTEX_WAKE on a static word; no memory is written.
        unsafe { libc::syscall(libc::SYS_futex, WAKE.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
    }
}

/// The writer's idle sleep: at most `d`, shorter if a thread's ring fills up meanwhile.
pub fn writer_sleep(d: Duration) {
    crate::probe::probe!(count SLEEPS);
    let w = WAKE.load(Acquire);
    ASLEEP.store(true, SeqCst);
    let ts = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
    // SAFETY: FUTEX_WAIT on a static word with a valid relative timeout; returns at once if
    // the word is no longer `w` (a producer woke us between the load and the wait).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WAKE.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            w,
            &ts as *const libc::timespec,
        )
    };
    ASLEEP.store(false, Relaxed);
}

/// The writer thread has ended: producers stop waiting for room.
pub fn writer_gone() {
    WRITER_GONE.store(true, Release);
}

/// The address of the futex word the writer sleeps on when idle (`writer_sleep`).
pub fn writer_sleep_word() -> u64 {
    WAKE.as_ptr() as u64
}

/// Whether the writer thread has ended (for any reason): nothing sent now is answered.
pub fn writer_has_ended() -> bool {
    WRITER_GONE.load(Acquire)
}

/// In a forked child, where only the forking thread exists: every ring is empty (the parent's
/// queued events are its own writer's; their heap blocks are left as they are) and free again,
/// except the forking thread's.
pub fn reset_after_fork() {
    for r in all() {
        r.cons.tail.store(r.prod.head.load(Relaxed), Relaxed);
        r.prod.seen_tail.store(r.prod.head.load(Relaxed), Relaxed);
        r.cons.waiting.store(0, Relaxed);
        r.prod.busy.store(false, Relaxed);
        r.owned.store(false, Relaxed);
    }
    if let Some(r) = held() {
        r.owned.store(true, Release);
    }
    ASLEEP.store(false, Relaxed);
    WRITER_GONE.store(false, Release);
}

/// The sequence number of a message, if it has one (`ThreadName`, `HeapWalk` and
/// `ApiSnapshot` have none).
pub fn seq_of(m: &Msg) -> Option<u64> {
    match m {
        Msg::Alloc { seq, .. }
        | Msg::Free { seq, .. }
        | Msg::Failed { seq, .. }
        | Msg::Reset { seq, .. }
        | Msg::ContextCreated { seq, .. }
        | Msg::Map { seq, .. }
        | Msg::Unmap { seq, .. }
        | Msg::HandleRef { seq, .. }
        | Msg::GraphNode { seq, .. }
        | Msg::GraphExec { seq, .. }
        | Msg::GraphLaunch { seq, .. }
        | Msg::GraphExecDestroy { seq, .. }
        | Msg::GraphMemTrim { seq, .. } => Some(*seq),
        Msg::ThreadName { .. }
        | Msg::HeapWalk(_)
        | Msg::ApiSnapshot(_)
        | Msg::Exit { .. }
        | Msg::ExitScan { .. }
        | Msg::QuickExit { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushim_wire::Api;

    /// The tests share the list of rings and drain all of it: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn free(seq: u64, tid: u32) -> Msg {
        Msg::Free { seq, stamp: 0, addr: seq, api: Api::CudaFree, stream: 0, tid, result: 0 }
    }

    /// Drains every ring once; returns (ring id, seq, tid) of each message taken.
    fn drain(out: &mut Vec<(u32, u64, u32)>) -> usize {
        let mut n = 0;
        for r in all() {
            let head = r.head();
            let mut t = r.tail();
            while t != head {
                // SAFETY: this test's thread is the only consumer; `t` is in `[tail, head)`.
                if let Msg::Free { seq, tid, .. } = unsafe { r.take(t) } {
                    out.push((r.id(), seq, tid));
                }
                t = t.wrapping_add(1);
                n += 1;
            }
            r.release(t);
        }
        n
    }

    /// Eight threads push 5,000 messages each (five times a ring) while one consumer drains:
    /// every message arrives once, each thread's in its order, each thread's from one ring;
    /// threads that ended hand their drained rings to later ones.
    #[test]
    fn producers_wait_for_room_and_nothing_is_lost_or_reordered() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: getpid cannot fail.
        TRACED_PID.store(unsafe { libc::getpid() }, Release);
        // The slots' size that the docs give (about 384 KiB a ring).
        assert!(std::mem::size_of::<Msg>() <= 96, "{} bytes", std::mem::size_of::<Msg>());
        const THREADS: u32 = 8;
        const EACH: u64 = 5 * SLOTS as u64;
        let done = std::sync::Arc::new(AtomicU32::new(0));
        let producers: Vec<_> = (0..THREADS)
            .map(|t| {
                let done = done.clone();
                std::thread::spawn(move || {
                    let r = mine().unwrap();
                    for i in 0..EACH {
                        push(r, free(u64::from(t) << 32 | i, t)).ok().unwrap();
                    }
                    done.fetch_add(1, Release);
                    r.id()
                })
            })
            .collect();
        let mut got = Vec::new();
        loop {
            let finished = done.load(Acquire) == THREADS;
            if drain(&mut got) == 0 && finished {
                break;
            }
            std::thread::yield_now();
        }
        let ids: Vec<u32> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        assert_eq!(got.len() as u64, u64::from(THREADS) * EACH);
        for t in 0..THREADS {
            let mine: Vec<&(u32, u64, u32)> = got.iter().filter(|g| g.2 == t).collect();
            assert_eq!(mine.len() as u64, EACH, "thread {t}");
            assert!(mine.iter().all(|g| g.0 == ids[t as usize]), "thread {t}: one ring");
            assert!(mine.iter().enumerate().all(|(i, g)| g.1 == u64::from(t) << 32 | i as u64), "thread {t}: in order");
        }
        // The rings were given back and drained: a new thread takes one of them, no new ring.
        let before = MADE.load(Relaxed);
        let id = std::thread::spawn(|| mine().unwrap().id()).join().unwrap();
        assert!(id < before, "ring {id} of {before}");
        assert_eq!(MADE.load(Relaxed), before);
    }

    /// A ring whose thread ended before the writer read it is not taken by a later thread until
    /// it is drained, and its events are still there.
    #[test]
    fn an_ended_threads_events_wait_for_the_writer() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: getpid cannot fail.
        TRACED_PID.store(unsafe { libc::getpid() }, Release);
        let id = std::thread::spawn(|| {
            let r = mine().unwrap();
            push(r, free(7, 99)).ok().unwrap();
            r.id()
        })
        .join()
        .unwrap();
        let r = all().find(|r| r.id() == id).unwrap();
        assert!(!r.owned.load(Acquire));
        let other = std::thread::spawn(|| mine().unwrap().id()).join().unwrap();
        assert_ne!(other, id, "an undrained ring was taken");
        let mut got = Vec::new();
        drain(&mut got);
        assert!(got.contains(&(id, 7, 99)), "{got:?}");
    }
}
