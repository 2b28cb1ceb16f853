//! Per-thread caches of the hot path live on the heap, not in thread-local storage:
//! a library loaded at start-up (`LD_PRELOAD`) has its thread-local storage carved out of every
//! thread's stack (glibc's static TLS), and the caches take kilobytes, which a program's small
//! thread stacks must not lose. Each thread gets its block on first use (one heap allocation)
//! and frees it when the thread ends; only a pointer is thread-local.

use std::cell::Cell;

/// A thread's lazily allocated `T`, freed when the thread ends.
pub struct PerThread<T: 'static>(Cell<*mut T>);

impl<T> PerThread<T> {
    /// An empty holder (for a `const` thread-local initializer).
    pub const fn new() -> PerThread<T> {
        PerThread(Cell::new(std::ptr::null_mut()))
    }

    /// The thread's `T`, made by `init` on first use.
    ///
    /// # Safety
    /// The caller must not hold two references from it at once: the hot path uses it only inside
    /// the hooks' re-entrancy guard, one use at a time.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self, init: fn() -> Box<T>) -> &mut T {
        if self.0.get().is_null() {
            self.0.set(Box::into_raw(init()));
        }
        // SAFETY: a leaked Box owned by this holder, freed only by its Drop; no other reference
        // lives (the caller's promise).
        unsafe { &mut *self.0.get() }
    }

    /// The thread's `T` if it was made.
    ///
    /// # Safety
    /// As [`PerThread::get`].
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn existing(&self) -> Option<&mut T> {
        // SAFETY: as in `get`.
        unsafe { self.0.get().as_mut() }
    }
}

impl<T> Drop for PerThread<T> {
    fn drop(&mut self) {
        let p = self.0.replace(std::ptr::null_mut());
        if !p.is_null() {
            // SAFETY: made by Box::into_raw in `get`, freed once here.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// A `T` of zero bytes on the heap, never built on the stack (a debug build would build a
/// `Box::new` argument there first: kilobytes, on threads whose stacks may be 16 KiB).
///
/// # Safety
/// All-zero bytes must be a valid `T`.
pub unsafe fn zeroed_box<T>() -> Box<T> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: `T` is not zero-sized where this is used (checked), and the allocation is made
    // for `T`'s layout; the caller promises zero bytes are a valid `T`.
    unsafe {
        assert!(layout.size() > 0);
        let p = std::alloc::alloc_zeroed(layout) as *mut T;
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(p)
    }
}
