//! The shim's global allocator: the system's `malloc` and `free`, as without it, plus one thing.
//! While [`watch`] runs a closure, it remembers the largest block that closure's thread
//! allocates (not another thread's: a hook on a program thread may allocate meanwhile), so that the writer
//! knows where the event channel's buffer lies: the reachability scan (`reach`) must leave
//! that buffer out, since its slots hold copies of the addresses of recent allocations. (The
//! block's size in `/proc/self/maps` would not find it when `malloc` serves the buffer from a
//! heap rather than a mapping of its own.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// Passes every call to [`System`]; see the module documentation.
pub struct Watching;

/// The thread a [`watch`] runs on (its kernel thread id); 0 when none runs.
static ON: AtomicU32 = AtomicU32::new(0);
/// The largest block allocated while watching: address and size in bytes (0 if none).
static ADDR: AtomicUsize = AtomicUsize::new(0);
static SIZE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method is the system allocator's own, with the same arguments and result.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's promise, passed on.
        let p = unsafe { System.alloc(layout) };
        note(p, layout.size());
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        note(p, layout.size());
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Remembers `p` (of `size` bytes) if a watch runs on this thread and it is the largest block so
/// far. (One relaxed load when no watch runs; the thread id is asked only while one does.)
fn note(p: *mut u8, size: usize) {
    let on = ON.load(Relaxed);
    if on != 0 && !p.is_null() && size > SIZE.load(Relaxed) && crate::sys::gettid() == on {
        SIZE.store(size, Relaxed);
        ADDR.store(p as usize, Relaxed);
    }
}

/// Runs `f` and returns its result with `[start, end)` of the largest block allocated while it
/// ran (`None` if nothing was allocated). Called once, by the thread that starts the writer.
pub fn watch<T>(f: impl FnOnce() -> T) -> (T, Option<(u64, u64)>) {
    SIZE.store(0, Relaxed);
    ADDR.store(0, Relaxed);
    ON.store(crate::sys::gettid(), Relaxed);
    let r = f();
    ON.store(0, Relaxed);
    let (a, n) = (ADDR.load(Relaxed) as u64, SIZE.load(Relaxed) as u64);
    (r, (n > 0).then_some((a, a + n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_block_of_the_watch_is_found() {
        // Another thread's larger block, made while the watch runs, is not the watch's.
        let ((big, small), range) = watch(|| {
            let other = std::thread::spawn(|| vec![9u8; 8 << 20]).join().unwrap();
            drop(other);
            (vec![7u8; 3 << 20], vec![1u8; 64])
        });
        let (a, b) = range.unwrap();
        assert_eq!((a, b - a), (big.as_ptr() as u64, 3 << 20));
        assert_ne!(a, small.as_ptr() as u64);
        let (_v, none) = watch(|| 5);
        assert_eq!(none, None);
    }
}
