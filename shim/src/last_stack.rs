//! Each thread's previous allocation stack: an allocation whose native and Python
//! frames are the same as its thread's previous recorded allocation's sends no frames, only
//! "the same stack as this thread's previous allocation" (`Msg::Alloc::same`); the writer keeps
//! each thread's previous stack id and uses it. A loop that allocates from one place then pays
//! one compare of its frames instead of a heap allocation for them on its thread, a cross-thread
//! free and a hash of the frames on the writer's.
//!
//! Why the reports stay the same: the frames are still captured in full on every allocation and
//! compared in full with the thread's previous ones, so "same" means equal frames, never a guess.
//! The writer applies a thread's messages in the order that thread sent them (one channel, in
//! order per sender), and the previous stack it keeps per thread id is the one of the last
//! allocation message from that thread that carried frames: the one remembered here. A new
//! thread (even one given a dead thread's id) starts with nothing remembered, so its first
//! allocation carries its frames; a forked child forgets (`reset_after_fork`) because its writer
//! is a new one. `GPUSHIM_UNWIND_CACHE=0` turns it off.
//!
//! Cost in memory: the writer's map has one entry (about 16 bytes) per thread id that ever
//! allocated, so at most the kernel's `pid_max` entries; entries are not removed when a thread
//! ends (a later thread with the same id replaces its entry with its first allocation).

use gpushim_wire::PyFrame;

use crate::python::MAX_PY_FRAMES;

/// Most native frames kept per stack (`GPUSHIM_MAX_FRAMES` is at most 256).
const MAX_NATIVE: usize = 256;

struct Last {
    /// Whether a stack is remembered.
    valid: bool,
    n: usize,
    frames: [u64; MAX_NATIVE],
    /// Whether the stack had Python frames, and how many.
    has_py: bool,
    npy: usize,
    py: [PyFrame; MAX_PY_FRAMES],
    /// `python::capture_gen()` when `py` was captured: the same number now means the same frames.
    py_gen: u64,
    /// The fast unwinder's generation of the walk `frames` came from (`unwind::Walk::gen`):
    /// the same number now means the same frames.
    native_gen: Option<u64>,
}

fn new_last() -> Box<Last> {
    // Zeroed on the heap, never built on the stack: nothing remembered.
    // SAFETY: all-zero bytes are a valid `Last` (integers, `bool` false, `PyFrame`s of zeros).
    unsafe { crate::per_thread::zeroed_box::<Last>() }
}

thread_local! {
    /// On the heap (`per_thread`). Used only inside the hooks' re-entrancy guard: one use at a
    /// time per thread.
    static LAST: crate::per_thread::PerThread<Last> = const { crate::per_thread::PerThread::new() };
}

/// True if and only if `frames` and `py` are the calling thread's remembered stack; otherwise
/// remembers them and returns false. Always false for an empty stack (nothing to spare) and when
/// the caches are off. `gen`: the fast unwinder's generation of the walk that found `frames`,
/// if it used its memo; the frames of a walk of the remembered generation are not compared
/// again (the unwinder found them equal, frame by frame, to the walk before it).
pub fn same_as_last(frames: &[u64], gen: Option<u64>, py: Option<&[PyFrame]>) -> bool {
    if (frames.is_empty() && py.is_none()) || frames.len() > MAX_NATIVE || py.is_some_and(|p| p.len() > MAX_PY_FRAMES) {
        return false;
    }
    LAST.try_with(|l| {
        // SAFETY: this thread's own block, used by one call at a time (inside the guard).
        let l = unsafe { l.get(new_last) };
        let pgen = if py.is_some() { crate::python::capture_gen() } else { 0 };
        let same_py = match py {
            None => !l.has_py,
            Some(p) => l.has_py && ((pgen != 0 && pgen == l.py_gen) || l.py[..l.npy] == *p),
        };
        let same_native = match gen {
            Some(g) if l.native_gen == Some(g) => true,
            _ => l.frames[..l.n] == *frames,
        };
        if l.valid && same_py && same_native {
            l.native_gen = gen;
            return true;
        }
        l.frames[..frames.len()].copy_from_slice(frames);
        l.n = frames.len();
        l.has_py = py.is_some();
        l.npy = py.map_or(0, |p| {
            l.py[..p.len()].copy_from_slice(p);
            p.len()
        });
        l.py_gen = pgen;
        l.native_gen = gen;
        l.valid = true;
        false
    })
    .unwrap_or(false)
}

/// Forgets the calling thread's stack: the next allocation carries its frames. For a message
/// that carried frames but was not delivered, and in a forked child (whose writer is new).
pub fn forget() {
    let _ = LAST.try_with(|l| {
        // SAFETY: as above; the forked child's only thread, or the calling thread's own block.
        if let Some(l) = unsafe { l.existing() } {
            l.valid = false;
        }
    });
}
