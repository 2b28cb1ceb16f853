//! Per-thread caches of the hot path live on the heap, not in thread-local storage:
//! a library loaded at start-up (`LD_PRELOAD`) has its thread-local storage carved out of every
//! thread's stack (glibc's static TLS), and the caches take kilobytes, which a program's small
//! thread stacks must not lose. Each thread gets its block on first use (one heap allocation)
//! and frees it when the thread ends; only a pointer is thread-local.
//!
//! **When a thread ends** ([`at_thread_end`]): the shim's per-thread state is given back by a
//! destructor of one pthread key, which glibc runs when a thread returns or calls
//! `pthread_exit`, never in `exit()`. None of the shim's thread-locals has a Rust destructor:
//! one would be registered with `__cxa_thread_atexit_impl`, whose list glibc's `exit()` walks on
//! the exiting thread (`__call_tls_dtors`), freeing each entry. An `exit()` from a signal handler
//! that interrupted `malloc` then waited for ever on the allocator's lock held by the interrupted
//! call (31 runs in 150), where the program without the shim had no such entry and exited.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering::*};

/// Work for the end of a thread: a function and its argument.
type Ending = (unsafe fn(*mut c_void), *mut c_void);

/// Entries a thread may have; more are not run (the rings, the slot of frees in progress and
/// the five caches make seven).
const ENDINGS: usize = 16;

thread_local! {
    /// This thread's work for its end, in order of registration.
    static AT_END: [Cell<Option<Ending>>; ENDINGS] = const { [const { Cell::new(None) }; ENDINGS] };
}

/// The pthread key whose destructor runs [`AT_END`], plus one; 0 until made.
static KEY: AtomicUsize = AtomicUsize::new(0);

/// The key, made on first use (a thread that loses the race deletes its own and uses the
/// winner's: no waiting). `None` if glibc has no key left.
fn key() -> Option<libc::pthread_key_t> {
    let k = KEY.load(Acquire);
    if k != 0 {
        return Some((k - 1) as libc::pthread_key_t);
    }
    let mut new: libc::pthread_key_t = 0;
    // SAFETY: `new` is a valid out-pointer; the destructor has the type glibc calls.
    if unsafe { libc::pthread_key_create(&mut new, Some(thread_ends)) } != 0 {
        return None;
    }
    match KEY.compare_exchange(0, new as usize + 1, AcqRel, Acquire) {
        Ok(_) => Some(new),
        Err(won) => {
            // SAFETY: our own key, never set.
            unsafe { libc::pthread_key_delete(new) };
            Some((won - 1) as libc::pthread_key_t)
        }
    }
}

/// Has `f(arg)` run on the calling thread when it ends while the process lives (not at
/// `exit()`, `_exit()` or a signal's end of the process). `f` runs on the ending thread, after
/// the program's C++ `thread_local` destructors; a hook that runs after it on that thread may
/// register again (glibc then runs the key's destructor again, up to 4 times). False if it will
/// not run (no key, or [`ENDINGS`] entries already).
pub fn at_thread_end(f: unsafe fn(*mut c_void), arg: *mut c_void) -> bool {
    let Some(k) = key() else { return false };
    let placed = AT_END.with(|e| match e.iter().find(|c| c.get().is_none()) {
        Some(c) => {
            c.set(Some((f, arg)));
            true
        }
        None => false,
    });
    // Any value but null makes glibc call the destructor (keys below 32 are stored in the
    // thread's descriptor: no allocation).
    // SAFETY: a key of ours; the value is never dereferenced.
    placed && unsafe { libc::pthread_setspecific(k, std::ptr::dangling::<c_void>()) } == 0
}

/// The key's destructor: the ending thread's entries, each once, in order of registration.
unsafe extern "C" fn thread_ends(_: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        AT_END.with(|e| {
            for c in e {
                if let Some((f, arg)) = c.take() {
                    // SAFETY: registered by `at_thread_end` for this thread, with its argument.
                    unsafe { f(arg) };
                }
            }
        })
    });
}

/// A thread's lazily allocated `T`, freed when the thread ends (not at the process's exit:
/// see the module's doc).
pub struct PerThread<T: 'static>(Cell<*mut T>);

impl<T: 'static> PerThread<T> {
    /// An empty holder (for a `const` thread-local initializer).
    pub const fn new() -> PerThread<T> {
        PerThread(Cell::new(std::ptr::null_mut()))
    }

    /// The thread's `T`, made by `init` on first use.
    ///
    /// # Safety
    /// The caller must not hold two references from it at once: the hot path uses it only inside
    /// the hooks' re-entrancy guard, one use at a time. `self` is a thread-local of the calling
    /// thread.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self, init: fn() -> Box<T>) -> &mut T {
        if self.0.get().is_null() {
            self.0.set(Box::into_raw(init()));
            at_thread_end(free_block::<T>, self as *const PerThread<T> as *mut c_void);
        }
        // SAFETY: a leaked Box owned by this holder, freed only at the thread's end; no other
        // reference lives (the caller's promise).
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

/// Frees the block of the holder at `holder` (a `PerThread<T>` of the ending thread).
///
/// # Safety
/// `holder` is the calling thread's own `PerThread<T>`, whose block no reference holds.
unsafe fn free_block<T: 'static>(holder: *mut c_void) {
    // SAFETY: the caller's promise.
    let h = unsafe { &*(holder as *const PerThread<T>) };
    let p = h.0.replace(std::ptr::null_mut());
    if !p.is_null() {
        // SAFETY: made by Box::into_raw in `get`, freed once here.
        drop(unsafe { Box::from_raw(p) });
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
