//! Where the shim's own thread-local storage lies in each thread that ran the shim's code, so
//! that the reachability scan reads it as the shim's memory, not the program's.
//!
//! A thread's thread-local storage for this library (glibc's static TLS when the library is
//! preloaded: a block beside the thread's descriptor, in the thread's stack mapping or, for the
//! main thread, in an anonymous mapping the loader made) holds the shim's per-thread pointers:
//! its caches on the heap (`per_thread`), its ring, and the Rust runtime's own thread-locals
//! (the list of thread-local destructors, the thread's handle). Heap blocks of the shim keep
//! stale words (a vector's spare room, a block reused after a free), and read as the program's
//! they once turned a stand-in driver's record of an allocation into "possibly lost" (a
//! checkout at a longer path moved the heap's blocks so that one such stale word pointed at it).
//!
//! Each thread, the first time it records (and the main thread, when the library loads), stores
//! the address of its own [`MARK`] in a fixed table; the scan turns each into the thread's block
//! by the mark's offset in the library's TLS segment (the same in every thread) and reads the
//! block as the shim's only if the mark's word still holds [`MAGIC`]: the memory of a thread that
//! ended may be someone else's by then. The table holds the last [`SLOTS`] threads; a thread
//! beyond them has its block read as the program's (as every block was before).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The value of every thread's [`MARK`] ("gpushim!").
pub const MAGIC: u64 = u64::from_le_bytes(*b"gpushim!");

/// Threads remembered, the latest ones.
const SLOTS: usize = 1024;

thread_local! {
    /// In the library's TLS segment: its address tells where the thread's block lies.
    static MARK: u64 = const { MAGIC };
}

/// The addresses of the registered threads' marks; 0 in a slot not used yet.
static AT: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// Registrations so far (the next slot, modulo [`SLOTS`]).
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The address of the calling thread's mark, if its thread-local storage is still there.
pub fn mine() -> Option<u64> {
    MARK.try_with(|m| m as *const u64 as u64).ok()
}

/// Remembers the calling thread's block. Lock-free; once per thread is enough.
pub fn register() {
    if let Some(a) = mine() {
        AT[NEXT.fetch_add(1, Relaxed) % SLOTS].store(a, Relaxed);
    }
}

/// The marks' addresses registered so far, sorted, without repeats (threads that ended
/// included: the scan checks each mark before it trusts it).
pub fn marks() -> Vec<u64> {
    let mut v: Vec<u64> = AT.iter().map(|a| a.load(Relaxed)).filter(|&a| a != 0).collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_registers_its_own_mark_holding_the_magic_value() {
        register();
        let here = mine().unwrap();
        let there = std::thread::spawn(|| {
            register();
            mine().unwrap()
        })
        .join()
        .unwrap();
        assert_ne!(here, there);
        let all = marks();
        assert!(all.contains(&here) && all.contains(&there));
        // SAFETY: the calling thread's own thread-local, alive.
        assert_eq!(unsafe { (here as *const u64).read() }, MAGIC);
    }
}
