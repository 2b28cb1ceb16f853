//! The scan's own memory: arrays in mappings of their own, which the scan leaves out, and the
//! one-word read.

use super::PAGE;
use crate::sys::read_own as read;

/// A growable array in memory of its own (`mmap`), so that the scan can leave it out.
pub(super) struct Buf<T: Copy> {
    pub(super) ptr: *mut T,
    pub(super) cap: usize,
    pub(super) len: usize,
}

impl<T: Copy> Buf<T> {
    pub(super) fn new(cap: usize) -> Option<Buf<T>> {
        let cap = cap.max(512);
        let bytes = round_page(cap * std::mem::size_of::<T>());
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Buf { ptr: p.cast(), cap: bytes / std::mem::size_of::<T>(), len: 0 })
    }

    fn bytes(&self) -> usize {
        round_page(self.cap * std::mem::size_of::<T>())
    }

    pub(super) fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            let old = self.bytes();
            // SAFETY: growing our own mapping; it may move.
            let p = unsafe { libc::mremap(self.ptr.cast(), old, old * 2, libc::MREMAP_MAYMOVE) };
            if p == libc::MAP_FAILED {
                return false;
            }
            self.ptr = p.cast();
            self.cap = old * 2 / std::mem::size_of::<T>();
        }
        // SAFETY: len < cap, inside the mapping.
        unsafe { self.ptr.add(self.len).write(v) };
        self.len += 1;
        true
    }

    /// The last element, removed.
    pub(super) fn pop(&mut self) -> Option<T> {
        self.len = self.len.checked_sub(1)?;
        // SAFETY: the element at the old `len - 1` was written.
        Some(unsafe { self.ptr.add(self.len).read() })
    }

    pub(super) fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` elements were written.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The whole capacity, as written (the mapping starts zeroed).
    pub(super) fn full(&mut self) -> &mut [T] {
        self.len = self.cap;
        self.as_mut_slice()
    }

    pub(super) fn range(&self) -> (u64, u64) {
        (self.ptr as u64, self.ptr as u64 + self.bytes() as u64)
    }
}

impl<T: Copy> Drop for Buf<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes()) };
    }
}

pub(super) fn round_page(n: usize) -> usize {
    (n.max(1) + PAGE as usize - 1) & !(PAGE as usize - 1)
}

/// One word of this process at `addr`, if readable.
pub(super) fn read_word(addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    (read(addr, &mut b) == 8).then(|| u64::from_ne_bytes(b))
}
