//! glibc's main heap: its in-use blocks, walked by their boundary tags, less those freed into the
//! fastbins and the threads' caches.

use super::buf::read_word;
use super::{mark, Scan, MIN_CHUNK, WINDOW};

/// Bytes read for the boundary tags after a block larger than this.
const SMALL_WINDOW: usize = 4096;
use crate::sys::read_own as read;

/// Fastbins in glibc's `struct malloc_state` (`NFASTBINS` on 64-bit, malloc.c).
const NFASTBINS: usize = 10;
/// Bin heads (`fd`, `bk` pairs) in `struct malloc_state` (`NBINS` 128, bin 0 unused).
const NBINS: usize = 127;
/// Byte offsets in glibc's `struct malloc_state` on 64-bit (malloc.c, 2.26 and later: `mutex`,
/// `flags` and `have_fastchunks` are 4 bytes each, then `fastbinsY[10]`, `top`,
/// `last_remainder`, `bins[254]`).
const ARENA_FASTBINS: usize = 16;
const ARENA_TOP: usize = ARENA_FASTBINS + 8 * NFASTBINS;
const ARENA_BINS: usize = ARENA_TOP + 16;
const ARENA_SIZE: usize = ARENA_BINS + 16 * NBINS;

/// Whether glibc stores a free list's links mangled with their own address (`PROTECT_PTR`,
/// "safe-linking", glibc 2.32 and later: the stored value is `(&link >> 12) ^ next`).
fn safe_linking() -> bool {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    let mut parts = v.to_str().unwrap_or("").split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 32)
}

/// glibc's `tcache_key` (2.34 and later): the word a block freed into a thread's cache holds
/// right after its link (`tcache_entry.key`, malloc.c), the same random value in every thread.
/// Such a block is free although its chunk looks in use; its stale contents must not count.
/// Learnt by freeing a block of our own and reading that word back; 0 if not found.
fn tcache_key() -> u64 {
    let b = Box::new([0u64; 3]);
    let addr = Box::into_raw(b) as u64;
    // SAFETY: the block was made just above by Box; freeing it once.
    unsafe { drop(Box::from_raw(addr as *mut [u64; 3])) };
    // The freed block's second word, read with process_vm_readv (no Rust reference to freed
    // memory).
    let key = read_word(addr + 8).unwrap_or(0);
    // A key that looks like a small number or a pointer is not the random one.
    if key < 1 << 48 {
        0
    } else {
        key
    }
}

/// The base of the malloc arena the calling thread allocates from, if it is not the main one
/// (glibc's thread arenas are `HEAP_MAX_SIZE`-aligned heaps of 64 MiB, malloc/arena.c).
pub(super) fn own_arena(heap: (u64, u64)) -> Option<u64> {
    let b = Box::new(0u64);
    let addr = &*b as *const u64 as u64;
    drop(b);
    (addr < heap.0 || addr >= heap.1).then_some(addr & !((64 << 20) - 1))
}

impl Scan {
    /// Records the in-use chunks of glibc's main heap `[s, e)`; false if the boundary tags do
    /// not add up to the mapping.
    pub(super) fn walk_heap(&mut self, s: u64, e: u64) -> bool {
        let key = tcache_key();
        self.win.len = self.win.cap;
        let mut win_start = 0u64;
        let mut win_len = 0usize;
        let mut p = s;
        // After a large block the next window is small: only the boundary tags are read, not the
        // blocks' bytes (a heap of 64 KiB blocks was read whole here, as much as a pass reads).
        let mut want = WINDOW;
        loop {
            let mut word = |addr: u64, this: &mut Scan| -> Option<u64> {
                if addr < win_start || addr + 8 > win_start + win_len as u64 {
                    let len = (e - addr).min(want.min(this.win.len) as u64) as usize;
                    win_len = read(addr, &mut this.win.as_mut_slice()[..len]);
                    win_start = addr;
                    if win_len < 8 {
                        return None;
                    }
                }
                let o = (addr - win_start) as usize;
                Some(u64::from_ne_bytes(this.win.as_slice()[o..o + 8].try_into().ok()?))
            };
            // Where a walk that gives up stopped, for the scan's note.
            self.walk_failed_at = p - s;
            let Some(sz) = word(p + 8, self) else {
                return self.heap_ended_at(p, p + 8);
            };
            let size = sz & !7;
            if size == 16 {
                // A fencepost (malloc.c sysmalloc): the brk heap could not grow in place and the
                // main arena went on in memory from mmap, which is read whole as a root.
                return true;
            }
            if size < MIN_CHUNK || size % 16 != 0 {
                return false;
            }
            let next = p + size;
            // The top chunk (free) ends the heap; it may reach past the end the mapping had
            // when it was listed, if the heap grew since.
            if next + MIN_CHUNK > e {
                // The top chunk (free) ends the heap.
                self.top = p;
                return true;
            }
            let Some(nsz) = word(next + 8, self) else {
                return self.heap_ended_at(p, next + 8);
            };
            let freed_to_tcache = key != 0 && word(p + 24, self) == Some(key);
            // The heap's first block is the main thread's `tcache_perthread_struct` (0x290
            // bytes with its header): malloc's own list of freed blocks, not the program's.
            let tcache_struct = p == s && size == 0x290;
            // Free blocks are kept too, marked so: their stale words are read (without trust)
            // only if something points into them.
            if !tcache_struct {
                if !self.chunks.push((p + 16, next)) {
                    self.walk_failed_full = true;
                    return false;
                }
                let free = nsz & 1 == 0 || freed_to_tcache;
                self.init.push(if free { mark::FREE } else { mark::UNREACHED });
                // The words malloc wrote over: a cache's `next` and `key`; a bin's `fd`, `bk`,
                // and in a large bin's chunk (1 KiB or more) `fd_nextsize`, `bk_nextsize`.
                let large = nsz & 1 == 0 && size >= 1024;
                self.reused.push(if !free {
                    0
                } else if large {
                    4
                } else {
                    2
                });
            }
            want = if size > SMALL_WINDOW as u64 { SMALL_WINDOW } else { WINDOW };
            p = next;
        }
    }

    /// The read of the word at `at`, in chunk `p` or the chunk after it, failed: if the heap's
    /// end (the program break) is now below `at + 8`, malloc gave memory back to the system since
    /// the mappings were listed (a free that grew the top chunk past `M_TRIM_THRESHOLD`, by
    /// any thread, the writer's own included): the heap ends at `p`, which is the top chunk,
    /// and the blocks walked so far are whole. Else the walk gives up (`walk_failed_read`).
    fn heap_ended_at(&mut self, p: u64, at: u64) -> bool {
        // SAFETY: `brk` with an address below the heap's start changes nothing and returns the
        // current break (Linux, mm/mmap.c).
        let brk = unsafe { libc::syscall(libc::SYS_brk, 0usize) } as u64;
        if brk != 0 && brk < at + 8 {
            self.top = p;
            return true;
        }
        self.walk_failed_read = true;
        false
    }

    /// Marks as free ([`mark::FREE`]) the blocks of [`Scan::chunks`] freed into the main
    /// arena's fastbins: their chunks look in use (a fastbin chunk keeps the next chunk's `PREV_INUSE` bit, malloc.c),
    /// and their stale words would count as references from memory nothing reaches. The lists
    /// start in glibc's `main_arena` (not exported), found in libc's writable data as the one
    /// `struct malloc_state` whose `top` is the walk's top chunk and whose 127 bin heads each
    /// point at themselves (an empty bin) or into the heap. False if it was not found (then
    /// nothing is marked).
    pub(super) fn drop_fastbin_blocks(&mut self, heap: (u64, u64), libc_data: &[(u64, u64)]) -> bool {
        if self.top == 0 {
            return false;
        }
        let in_heap = |w: u64| w >= heap.0 && w < heap.1;
        let mut found: Option<[u64; NFASTBINS]> = None;
        for &(s, e) in libc_data {
            let len = ((e - s) as usize).min(self.win.cap);
            let got = read(s, &mut self.win.as_mut_slice()[..len]);
            let data = &self.win.as_slice()[..got & !7];
            let word = |o: usize| u64::from_ne_bytes(data[o..o + 8].try_into().unwrap_or([0; 8]));
            let mut o = ARENA_TOP;
            while o + ARENA_SIZE - ARENA_TOP <= data.len() {
                if word(o) == self.top {
                    let base = o - ARENA_TOP;
                    let mut empty = 0;
                    let bins_ok = (0..NBINS).all(|i| {
                        let at = base + ARENA_BINS + 16 * i;
                        let (fd, bk) = (word(at), word(at + 8));
                        let own = s + at as u64 - 16;
                        if fd == own && bk == own {
                            empty += 1;
                            true
                        } else {
                            in_heap(fd) && in_heap(bk)
                        }
                    });
                    let heads: [u64; NFASTBINS] = std::array::from_fn(|i| word(base + ARENA_FASTBINS + 8 * i));
                    let heads_ok = heads.iter().all(|&h| h == 0 || (in_heap(h) && h % 16 == 0));
                    if bins_ok && empty > 0 && heads_ok {
                        if found.is_some() {
                            return false; // two candidates: trust neither
                        }
                        found = Some(heads);
                    }
                }
                o += 8;
            }
        }
        let Some(heads) = found else { return false };
        let mangled = safe_linking();
        let mut free: Vec<u64> = Vec::new();
        for head in heads {
            let mut p = head;
            let mut steps = 0;
            while p != 0 && in_heap(p) && p % 16 == 0 && steps < 1 << 20 {
                free.push(p + 16);
                let Some(fd) = read_word(p + 16) else { break };
                p = if mangled { fd ^ ((p + 16) >> 12) } else { fd };
                steps += 1;
            }
        }
        if free.is_empty() {
            return true;
        }
        free.sort_unstable();
        for ((c, init), reused) in self.chunks.as_slice().iter().zip(self.init.iter_mut()).zip(self.reused.iter_mut()) {
            if free.binary_search(&c.0).is_ok() {
                // A fastbin's chunk: only its `fd` was written over.
                *init = mark::FREE;
                *reused = 1;
            }
        }
        true
    }

    /// Builds [`Scan::pages`] for the heap `[s, e)` from the walked blocks.
    pub(super) fn index_pages(&mut self, s: u64, e: u64) {
        // 4 KiB pages, coarser for a heap past 64 GiB (at most 16 Mi entries).
        let mut shift = 12;
        while (e - s) >> shift > 1 << 24 {
            shift += 1;
        }
        self.page_shift = shift;
        let n = ((e - s) >> shift) as usize + 1;
        let c = self.chunks.as_slice();
        let mut pages = Vec::with_capacity(n);
        let mut i = 0usize;
        for k in 0..n {
            let at = s + ((k as u64) << shift);
            while i + 1 < c.len() && c[i + 1].0 <= at {
                i += 1;
            }
            pages.push(i as u32);
        }
        self.pages = pages;
    }
}
