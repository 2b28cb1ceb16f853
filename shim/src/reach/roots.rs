//! The program's roots, read by several threads at once, and of each mapping only the pages that
//! can hold a pointer.
//!
//! **Pages.** A page that is neither in memory nor swapped out (`/proc/self/pagemap`: bits 63
//! and 62) holds nothing the program wrote: an anonymous page never touched reads as zeros, and
//! a file page never touched holds the file's bytes, which no pointer to a live allocation can be
//! in. Those pages are not read. Absent runs shorter than [`GAP_PAGES`] are read through (cheaper
//! than another system call). Without a readable pagemap every page is read.
//!
//! **Threads.** The roots are cut into slices of at most [`SLICE`] bytes that up to
//! [`MAX_READERS`] threads (the calling thread and helpers it starts, which inherit its blocked
//! signals and end before the pass goes on) take in turn. Each reader counts into an `Acc` of its
//! own, marks the heap blocks it reaches with a compare-and-swap (a block is read by the one
//! reader that marked it) and then reads them; the counts are added up after (`Acc::merge`). A
//! helper that cannot be started leaves its share to the others.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

use super::buf::Buf;
use super::maps::{Region, Role};
use super::words::{read_block, read_range, Acc, View};
use super::{Mode, PAGE};

/// Bytes one reader takes at a time.
const SLICE: u64 = 4 << 20;
/// Absent pages between present ones that are read through rather than skipped.
const GAP_PAGES: u64 = 16;
/// Mappings smaller than this are read whole, without a look at their pages.
const SMALL: u64 = 256 << 10;
/// Most threads reading at once, the calling one included.
pub(super) const MAX_READERS: usize = 16;

/// How many readers to use: `GPUSHIM_REACHABILITY_THREADS`, else the CPUs this process may run
/// on; at most [`MAX_READERS`].
pub(super) fn readers() -> usize {
    match crate::config::reachability_threads() {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
    .clamp(1, MAX_READERS)
}

/// The parts of `[a, b)` worth reading, appended to `out` as slices of at most [`SLICE`] bytes
/// with `mode`. `entries` is the scan's buffer for pagemap entries.
fn slices(pagemap: Option<&File>, entries: &mut Buf<u64>, a: u64, b: u64, mode: Mode, out: &mut Buf<(u64, u64, Mode)>) {
    let mut push = |s: u64, e: u64| {
        let mut s = s;
        while s < e {
            let end = (s + SLICE).min(e);
            if !out.push((s, end, mode)) {
                return;
            }
            s = end;
        }
    };
    let Some(pm) = pagemap.filter(|_| b - a >= SMALL) else {
        push(a, b);
        return;
    };
    let first = a / PAGE;
    let last = b.div_ceil(PAGE);
    let per_read = entries.cap;
    let mut run: Option<(u64, u64)> = None;
    let mut page = first;
    while page < last {
        let n = ((last - page) as usize).min(per_read);
        let buf = entries.full();
        // SAFETY: u64 entries read as bytes into our own buffer of at least n entries.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), n * 8) };
        let Ok(got) = pm.read_at(bytes, page * 8) else {
            // The pagemap cannot be read here: read the rest whole.
            let s = run.map_or(page * PAGE, |r| r.0).max(a);
            push(s, b);
            return;
        };
        let got = got / 8;
        if got == 0 {
            push(run.map_or(page * PAGE, |r| r.0).max(a), b);
            return;
        }
        for (k, &e) in buf[..got].iter().enumerate() {
            let p = page + k as u64;
            if e & (3 << 62) == 0 {
                continue;
            }
            run = match run {
                Some((s, end)) if p <= end + GAP_PAGES => Some((s, p + 1)),
                Some((s, end)) => {
                    push((s * PAGE).max(a), (end * PAGE).min(b));
                    Some((p, p + 1))
                }
                None => Some((p, p + 1)),
            };
        }
        page += got as u64;
    }
    if let Some((s, end)) = run {
        push((s * PAGE).max(a), (end * PAGE).min(b));
    }
}

/// A helper thread's memory, made before the scan lists the mappings and left out of every read:
/// its read buffer, what it finds, and its stack (a thread of its own would otherwise take a
/// stack from glibc's cache of dead threads' stacks, which the scan reads as the program's).
pub(super) struct Helper {
    pub(super) buf: Buf<u8>,
    pub(super) acc: Acc,
    pub(super) stack: Buf<u8>,
}

/// Bytes of a helper thread's stack.
const STACK: usize = 512 << 10;

impl Helper {
    /// A helper for `n` live allocations; `None` without memory for it.
    pub(super) fn new(n: usize) -> Option<Helper> {
        Some(Helper { buf: Buf::new(super::READ_BYTES)?, acc: Acc::new(n)?, stack: Buf::new(STACK)? })
    }

    /// What the scan must not read of it.
    pub(super) fn ranges(&self) -> [(u64, u64); 4] {
        [self.buf.range(), self.acc.hits.range(), self.acc.todo.range(), self.stack.range()]
    }
}

/// One helper's work, handed to its thread.
struct Job<'a> {
    run: &'a (dyn Fn(&mut Acc, &mut [u8]) + Sync),
    acc: *mut Acc,
    buf: *mut [u8],
}

extern "C" fn helper_main(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `p` is the `Job` `read_regions` made, alive until it has joined this thread, whose
    // accumulator and buffer no other thread uses meanwhile.
    let job = unsafe { &*(p as *const Job) };
    // A panic must not cross into C; the accumulator then holds what was found.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let cpu0 = super::thread_cpu_ns();
        // SAFETY: as above.
        let acc = unsafe { &mut *job.acc };
        // SAFETY: as above.
        (job.run)(acc, unsafe { &mut *job.buf });
        acc.cpu_ns = super::thread_cpu_ns().saturating_sub(cpu0);
    }));
    std::ptr::null_mut()
}

/// Starts a thread on `stack` running `job`; its id, or `None` if it could not be started.
fn start(job: &Job, stack: &mut Buf<u8>) -> Option<libc::pthread_t> {
    // SAFETY: the attribute is initialised, given our own stack mapping (page-aligned, at least
    // PTHREAD_STACK_MIN), used once and destroyed; `job` outlives the thread (joined by the
    // caller before it returns).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_attr_init(&mut attr) != 0 {
            return None;
        }
        let stack = stack.full();
        let mut t: libc::pthread_t = 0;
        let ok = libc::pthread_attr_setstack(&mut attr, stack.as_mut_ptr().cast(), stack.len()) == 0
            && libc::pthread_create(&mut t, &attr, helper_main, job as *const Job as *mut libc::c_void) == 0;
        libc::pthread_attr_destroy(&mut attr);
        ok.then_some(t)
    }
}

/// Heap blocks handed from a reader with many to read to readers with none, and who is idle:
/// in memory of the scan's own, behind a spin lock of its own (never one the program holds).
pub(super) struct Shared {
    queue: std::cell::UnsafeCell<Buf<u32>>,
    lock: AtomicBool,
    /// Blocks in the queue (read without the lock by idle readers).
    queued: AtomicUsize,
    idle: AtomicUsize,
    readers: AtomicUsize,
    stop: AtomicBool,
}

/// Most blocks a reader keeps to itself before handing half of the rest to the others.
const KEEP: usize = 64;

impl Shared {
    pub(super) fn new() -> Option<Shared> {
        Some(Shared {
            queue: std::cell::UnsafeCell::new(Buf::new(1 << 16)?),
            lock: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            readers: AtomicUsize::new(1),
            stop: AtomicBool::new(false),
        })
    }

    pub(super) fn range(&self) -> (u64, u64) {
        // SAFETY: a read of the mapping's bounds, outside any pass (no reader runs).
        unsafe { (*self.queue.get()).range() }
    }

    /// Runs `f` with the lock held.
    fn locked<T>(&self, f: impl FnOnce(&mut Buf<u32>) -> T) -> T {
        while self.lock.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
            std::hint::spin_loop();
        }
        // SAFETY: the lock is held: no other reader touches the queue.
        let q = unsafe { &mut *self.queue.get() };
        let r = f(q);
        self.lock.store(false, Release);
        r
    }
}

// SAFETY: the queue is touched only with the lock held (`locked`); the rest is atomic.
unsafe impl Sync for Shared {}

/// Reads the heap blocks in `acc`'s list, and those they reach, handing some to idle readers
/// through `sh` and taking theirs, until every reader is idle with nothing left anywhere (or
/// the scan was cut). Only busy readers hand blocks over, so once every reader is idle and the
/// queue is empty, nothing more can come.
fn drain_shared(v: &View, acc: &mut Acc, buf: &mut [u8], sh: &Shared) {
    loop {
        while !sh.stop.load(Relaxed) {
            let Some(c) = acc.todo.pop() else { break };
            read_block(v, acc, buf, c as usize);
            if acc.cut {
                sh.stop.store(true, Relaxed);
            }
            if acc.todo.len > KEEP && sh.idle.load(SeqCst) > 0 {
                sh.locked(|q| {
                    while acc.todo.len > KEEP / 2 && q.len < q.cap {
                        if let Some(c) = acc.todo.pop() {
                            q.push(c);
                            sh.queued.fetch_add(1, SeqCst);
                        }
                    }
                });
            }
        }
        // Nothing of its own: wait for the others' blocks, or end when every reader is idle.
        sh.idle.fetch_add(1, SeqCst);
        loop {
            if sh.stop.load(Relaxed) {
                return;
            }
            if sh.queued.load(SeqCst) > 0 {
                let took = sh.locked(|q| {
                    let take = q.len.min(KEEP);
                    for c in std::iter::from_fn(|| q.pop()).take(take) {
                        acc.todo.push(c);
                    }
                    sh.queued.fetch_sub(take, SeqCst);
                    take
                });
                if took > 0 {
                    sh.idle.fetch_sub(1, SeqCst);
                    break;
                }
                continue;
            }
            if sh.idle.load(SeqCst) >= sh.readers.load(SeqCst) && sh.queued.load(SeqCst) == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// Runs `run` on the calling thread (`acc`, `rbuf`) and on up to `want` helpers at once, then
/// adds what the helpers found to `acc`. `sh.readers` is set to the number that ran.
fn together(
    acc: &mut Acc,
    rbuf: &mut [u8],
    helpers: &mut [Helper],
    want: usize,
    n: usize,
    sh: &Shared,
    run: &(dyn Fn(&mut Acc, &mut [u8]) + Sync),
) {
    let want = want.min(helpers.len());
    sh.readers.store(1 + want, Relaxed);
    let mut jobs = Vec::with_capacity(want);
    for h in helpers.iter_mut().take(want) {
        h.acc.clear(n);
        jobs.push(Job { run, acc: &mut h.acc, buf: h.buf.full() as *mut [u8] });
    }
    let mut started = Vec::with_capacity(want);
    for (job, h) in jobs.iter().zip(helpers.iter_mut()) {
        match start(job, &mut h.stack) {
            Some(t) => started.push(t),
            None => break,
        }
    }
    // Those that did not start never count as readers (the others wait for them otherwise).
    sh.readers.store(1 + started.len(), Relaxed);
    run(acc, rbuf);
    for &t in &started {
        // SAFETY: a thread started above and not joined yet.
        unsafe { libc::pthread_join(t, std::ptr::null_mut()) };
    }
    drop(jobs);
    for h in helpers.iter().take(started.len()) {
        acc.merge(&h.acc);
    }
}

/// How a region of `role` is read by [`read_regions`]: the program's roots (trusted or not), or
/// a CUDA library's data; `None` for the rest.
pub(super) fn mode_of(role: Role) -> Option<Mode> {
    match role {
        Role::Root(region, tid) => Some(Mode::Root(region as u8, tid)),
        Role::Possible => Some(Mode::Possible),
        Role::Cuda => Some(Mode::Cuda),
        _ => None,
    }
}

/// Reads `regions` into `acc`, each as [`mode_of`] its role says, and the heap blocks they
/// reach, with the calling thread (`rbuf` its buffer) and up to one thread per helper; `work` is
/// the scan's buffer for the slices.
#[allow(clippy::too_many_arguments)]
pub(super) fn read_regions(
    v: &View,
    acc: &mut Acc,
    rbuf: &mut [u8],
    helpers: &mut [Helper],
    regions: &[Region],
    pagemap: Option<&File>,
    entries: &mut Buf<u64>,
    work: &mut Buf<(u64, u64, Mode)>,
    sh: &Shared,
) {
    work.len = 0;
    for g in regions {
        if let Some(mode) = mode_of(g.role) {
            slices(pagemap, entries, g.start, g.end, mode, work);
        }
    }
    let work = work.as_slice();
    let next = AtomicUsize::new(0);
    sh.idle.store(0, SeqCst);
    sh.queued.store(0, SeqCst);
    sh.stop.store(false, Relaxed);
    // No reader runs yet: the queue starts empty.
    sh.locked(|q| q.len = 0);
    let run = |acc: &mut Acc, buf: &mut [u8]| {
        while let Some(&(a, b, mode)) = work.get(next.fetch_add(1, Relaxed)) {
            read_range(v, acc, buf, a, b, mode);
            if acc.cut {
                sh.stop.store(true, Relaxed);
                break;
            }
            // The blocks this slice reached, before the next slice (handing some to idle readers).
            while !sh.stop.load(Relaxed) {
                let Some(c) = acc.todo.pop() else { break };
                read_block(v, acc, buf, c as usize);
            }
        }
        drain_shared(v, acc, buf, sh);
    };
    together(acc, rbuf, helpers, work.len().saturating_sub(1), v.ranges.len(), sh, &run);
}

/// Reads every heap block nothing reached (`Mode::Indirect`), with the calling thread and the
/// helpers.
pub(super) fn read_unreached(v: &View, acc: &mut Acc, rbuf: &mut [u8], helpers: &mut [Helper], sh: &Shared) {
    /// Blocks one reader takes at a time.
    const BATCH: usize = 256;
    let next = AtomicUsize::new(0);
    let run = |acc: &mut Acc, buf: &mut [u8]| loop {
        let first = next.fetch_add(BATCH, Relaxed);
        if first >= v.chunks.len() || acc.cut {
            break;
        }
        for c in first..(first + BATCH).min(v.chunks.len()) {
            if v.marks[c].load(Relaxed) == 0 && !acc.cut {
                let (a, b) = v.chunks[c];
                read_range(v, acc, buf, a, b + 8, Mode::Indirect);
            }
        }
    };
    let want = (v.chunks.len() / BATCH).min(helpers.len());
    together(acc, rbuf, helpers, want, v.ranges.len(), sh, &run);
}
