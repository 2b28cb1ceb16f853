//! A value computed once and kept for the process's life, never waited for: a thread that
//! finds it missing computes it, and the first to store it wins (the others' copies are
//! dropped). `std::sync::OnceLock` makes a second thread wait while the first computes; a
//! program that forks while a shim thread is inside that computation leaves the child with a
//! lock no thread will ever release, and the child's first use waits for ever (seen: a child
//! whose writer thread waited in `python::heap::api` at exit, 1 run in 244 of the fork-start
//! scenario under load). Only for values that are cheap enough to compute twice and that are
//! the same whoever computes them (symbol lookups, settings read once).

use std::sync::atomic::{AtomicPtr, Ordering::*};

/// A lazily computed `T` that is never freed.
pub struct RaceOnce<T>(AtomicPtr<T>);

impl<T> RaceOnce<T> {
    /// Empty.
    pub const fn new() -> RaceOnce<T> {
        RaceOnce(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The value, if it was stored.
    pub fn get(&self) -> Option<&T> {
        // SAFETY: the pointer is null or a leaked Box stored once and never freed.
        unsafe { self.0.load(Acquire).as_ref() }
    }

    /// The value, computed by `f` here if it was not stored yet (another thread's value wins
    /// if it is stored first). Never waits for another thread.
    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        if let Some(v) = self.get() {
            return v;
        }
        self.store(f())
    }

    /// Stores `v` unless a value is there already. Never waits for another thread.
    pub fn set(&self, v: T) {
        if self.get().is_none() {
            self.store(v);
        }
    }

    fn store(&self, v: T) -> &T {
        let mine = Box::into_raw(Box::new(v));
        match self.0.compare_exchange(std::ptr::null_mut(), mine, AcqRel, Acquire) {
            // SAFETY: `mine` was just leaked and is never freed once stored.
            Ok(_) => unsafe { &*mine },
            Err(theirs) => {
                // SAFETY: `mine` was not stored: this is its only owner. `theirs` is a stored
                // leaked Box, never freed.
                unsafe {
                    drop(Box::from_raw(mine));
                    &*theirs
                }
            }
        }
    }
}

impl<T> Default for RaceOnce<T> {
    fn default() -> Self {
        RaceOnce::new()
    }
}

// SAFETY: shared access hands out `&T` only (so `T: Sync`), and a `T` made on one thread may
// be dropped on another when it loses the race (so `T: Send`).
unsafe impl<T: Send + Sync> Sync for RaceOnce<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_first_value_stored_wins_and_is_kept() {
        let o = RaceOnce::new();
        assert_eq!(o.get(), None);
        assert_eq!(*o.get_or_init(|| 7), 7);
        assert_eq!(*o.get_or_init(|| 8), 7);
        o.set(9);
        assert_eq!(o.get(), Some(&7));
    }

    /// A child forked while another thread is inside `get_or_init` (it never returns there,
    /// as in a child, where that thread does not exist) gets the value at once; with
    /// `OnceLock` it waited for ever.
    #[test]
    fn a_child_forked_during_another_threads_computation_does_not_wait() {
        static O: RaceOnce<u64> = RaceOnce::new();
        static INSIDE: AtomicBool = AtomicBool::new(false);
        static RELEASE: AtomicBool = AtomicBool::new(false);
        let t = std::thread::spawn(|| {
            O.get_or_init(|| {
                INSIDE.store(true, Release);
                while !RELEASE.load(Acquire) {
                    std::thread::yield_now();
                }
                1
            });
        });
        while !INSIDE.load(Acquire) {
            std::thread::yield_now();
        }
        // SAFETY: the child only reads and writes atomics, allocates, and calls `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let v = *O.get_or_init(|| 2);
            // SAFETY: ends the child without running the parent's handlers.
            unsafe { libc::_exit(if v == 2 { 0 } else { 1 }) };
        }
        assert!(pid > 0);
        let mut status = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            // SAFETY: waits for our own child without blocking.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: our own child, stuck.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child waited for a computation no thread of it runs");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status:#x}");
        RELEASE.store(true, Release);
        t.join().unwrap();
        assert_eq!(O.get(), Some(&1));
    }
}
