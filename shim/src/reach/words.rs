//! The words of the program's memory, read one by one: what a word refers to (a live
//! allocation, as an address or a CPython int; a block of the main heap), counted into a
//! reader's [`Acc`] through the pass's [`View`].

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::buf::Buf;
use super::{mark, Hit, Mode, PAGE};
use crate::sys;
use crate::sys::read_own as read;

/// One digit of a CPython int (`PyLong_SHIFT` 30, each digit a `uint32_t`: Include/cpython/
/// longintrepr.h). An int's digits start 8-byte aligned after its header, so an int of 31 to 60
/// bits (any device address) is one word whose two halves each have their top two bits clear:
/// how a Python program keeps a pointer it got as an int (cuda-python's `cudaMalloc`, ctypes'
/// `c_void_p.value`). Read as the address it stands for, it is a reference like any other.
const DIGIT: u64 = (1 << 30) - 1;
/// [`Mode::Root`]'s regions told apart when a block is marked.
const DATA: u8 = gpushim_wire::ReachRegion::Data as u8;
const STACK: u8 = gpushim_wire::ReachRegion::Stack as u8;
/// The bits a word of two digits has clear.
const INT_TOP_BITS: u64 = 0xc000_0000_c000_0000;

/// What a pass reads but does not change (the heap blocks' marks are atomic).
pub(super) struct View<'a> {
    /// Live allocations, sorted: `[start, end)`.
    pub(super) ranges: &'a [(u64, u64)],
    /// Never read, sorted and merged.
    pub(super) skip: &'a [(u64, u64)],
    /// The main heap's blocks (in use and free) and their [`mark`]s.
    pub(super) chunks: &'a [(u64, u64)],
    pub(super) marks: &'a [AtomicU8],
    /// Per block, the words at its start malloc wrote over when it was freed.
    pub(super) reused: &'a [u8],
    pub(super) pages: &'a [u32],
    pub(super) page_shift: u32,
    pub(super) heap: (u64, u64),
    pub(super) lo: u64,
    pub(super) hi: u64,
    pub(super) deadline: u64,
}

/// What one reader found, in memory of the scan's own (`Buf`: never read, and no copy of an
/// address in the program's heap or in a malloc arena the scan reads).
pub(super) struct Acc {
    /// Per live allocation.
    pub(super) hits: Buf<Hit>,
    /// Heap blocks this reader marked and has yet to read.
    pub(super) todo: Buf<u32>,
    pub(super) scanned: u64,
    pub(super) unreadable: u64,
    /// CPU time a helper thread spent on this pass, ns (the calling thread's is measured by
    /// `scan`).
    pub(super) cpu_ns: u64,
    /// The deadline passed.
    pub(super) cut: bool,
}

impl Acc {
    /// An accumulator for `n` live allocations; `None` without memory for it.
    pub(super) fn new(n: usize) -> Option<Acc> {
        let mut a = Acc { hits: Buf::new(n)?, todo: Buf::new(1024)?, scanned: 0, unreadable: 0, cpu_ns: 0, cut: false };
        a.clear(n);
        Some(a)
    }

    /// Empty again, for a new pass over `n` live allocations.
    pub(super) fn clear(&mut self, n: usize) {
        self.hits.len = 0;
        for _ in 0..n {
            self.hits.push(Hit { interior_only: true, ..Hit::default() });
        }
        self.todo.len = 0;
        (self.scanned, self.unreadable, self.cpu_ns, self.cut) = (0, 0, 0, false);
    }

    /// Adds what `o` found (another reader of other memory) to this one's: the counts add up,
    /// and where an allocation is held is the most telling region's reference, the lowest
    /// address among equals (the first a single reader would have met in the same regions).
    pub(super) fn merge(&mut self, o: &Acc) {
        for (h, &x) in self.hits.as_mut_slice().iter_mut().zip(o.hits.as_slice()) {
            h.possible = h.possible.saturating_add(x.possible);
            if x.refs == 0 {
                h.indirect = h.indirect.saturating_add(x.indirect);
                continue;
            }
            if h.refs == 0 || rank(x.region) > rank(h.region) || (rank(x.region) == rank(h.region) && x.from < h.from) {
                (h.region, h.tid, h.from) = (x.region, x.tid, x.from);
            }
            h.refs = h.refs.saturating_add(x.refs);
            h.interior_only &= x.interior_only;
            h.indirect = h.indirect.saturating_add(x.indirect);
        }
        for &c in o.todo.as_slice() {
            self.todo.push(c);
        }
        self.scanned += o.scanned;
        self.unreadable += o.unreadable;
        self.cpu_ns += o.cpu_ns;
        self.cut |= o.cut;
    }
}

/// How telling a reference from a region is: data, then a stack, then the heap, then other
/// anonymous memory.
fn rank(r: u8) -> u8 {
    [0u8, 4, 2, 3, 1][usize::from(r.min(4))]
}

/// Reads the heap blocks `acc` marked and has yet to read, and those they reach.
pub(super) fn drain(v: &View, acc: &mut Acc, buf: &mut [u8]) {
    while let Some(c) = acc.todo.pop() {
        read_block(v, acc, buf, c as usize);
    }
}

/// Reads heap block `c` as its mark says: the program's (from a root), a CUDA library's, or
/// without trust; of a free block only the words malloc did not write over (`View::reused`).
pub(super) fn read_block(v: &View, acc: &mut Acc, buf: &mut [u8], c: usize) {
    // A block's last word is the next chunk's `prev_size` field, which it may use.
    let (a, b) = v.chunks[c];
    let (a, mode) = match v.marks[c].load(Relaxed) {
        mark::PROGRAM => (a, Mode::Root(gpushim_wire::ReachRegion::Heap as u8, 0)),
        mark::CUDA => (a, Mode::Cuda),
        mark::FREE_READ => (a + 8 * u64::from(v.reused.get(c).copied().unwrap_or(4)), Mode::Possible),
        _ => (a, Mode::Possible),
    };
    read_range(v, acc, buf, a, b + 8, mode);
}

/// Reads `[a, b)` less the ranges never read, word by word.
pub(super) fn read_range(v: &View, acc: &mut Acc, buf: &mut [u8], a: u64, b: u64, mode: Mode) {
    let mut a = (a + 7) & !7;
    let mut k = v.skip.partition_point(|r| r.1 <= a);
    while a < b && !acc.cut {
        let (gap_end, next_a) = if k < v.skip.len() {
            let r = v.skip[k];
            if r.0 <= a {
                k += 1;
                a = (r.1 + 7) & !7;
                continue;
            }
            (r.0.min(b), r.1)
        } else {
            (b, b)
        };
        read_words(v, acc, buf, a, gap_end, mode);
        a = (next_a + 7) & !7;
        if gap_end == b {
            break;
        }
        k += 1;
    }
}

/// Reads `[a, b)` (8-byte aligned, nothing in it to leave out) through `buf` (page-aligned, a
/// multiple of 8 bytes long).
pub(super) fn read_words(v: &View, acc: &mut Acc, buf: &mut [u8], mut a: u64, b: u64, mode: Mode) {
    let (lo, span) = (v.lo, v.hi.wrapping_sub(v.lo));
    let (hlo, hspan) = match mode {
        Mode::Indirect => (0, 0),
        _ => (v.heap.0, v.heap.1.wrapping_sub(v.heap.0)),
    };
    while a + 8 <= b {
        if sys::now_ns() > v.deadline {
            acc.cut = true;
            break;
        }
        let want = ((b - a) as usize).min(buf.len()) & !7;
        let n = read(a, &mut buf[..want]) & !7;
        acc.scanned += n as u64;
        let words = buf.as_ptr() as *const u64;
        for i in 0..n / 8 {
            // SAFETY: i * 8 + 8 <= n <= the buffer's length; the buffer is page-aligned.
            let w = unsafe { words.add(i).read() };
            // The word as a CPython int of 31 to 60 bits (two 30-bit digits in 32 bits each),
            // or 0 (never in range: no allocation starts at 0); without a branch, as random
            // words pass the digits' test one time in 16.
            let d = if w & INT_TOP_BITS == 0 { (w & DIGIT) | ((w >> 2) & !DIGIT) } else { 0 };
            let (hit, hit_int) = (w.wrapping_sub(lo) < span, d.wrapping_sub(lo) < span);
            if hit | hit_int {
                device_word(v, acc, if hit { w } else { d }, a + 8 * i as u64, mode);
            }
            if w.wrapping_sub(hlo) < hspan {
                heap_word(v, acc, w, mode);
            }
        }
        if n < want {
            // An unreadable page (unmapped meanwhile, or PROT_NONE): skip it.
            let bad = (a + n as u64 + PAGE) & !(PAGE - 1);
            acc.unreadable += bad.min(b) - (a + n as u64);
            a = bad;
        } else {
            a += n as u64;
        }
    }
}

#[inline]
fn device_word(v: &View, acc: &mut Acc, w: u64, at: u64, mode: Mode) {
    let r = v.ranges;
    let i = r.partition_point(|x| x.0 <= w);
    if i == 0 || w >= r[i - 1].1 {
        return;
    }
    let start = r[i - 1].0;
    let h = &mut acc.hits.as_mut_slice()[i - 1];
    match mode {
        Mode::Cuda => {}
        Mode::Indirect => h.indirect = h.indirect.saturating_add(1),
        Mode::Possible => h.possible = h.possible.saturating_add(1),
        Mode::Root(region, tid) => {
            // Where it is held: the first reference of the most telling region.
            if h.refs == 0 || rank(region) > rank(h.region) {
                h.region = region;
                h.tid = tid;
                h.from = at;
            }
            h.refs = h.refs.saturating_add(1);
            h.interior_only &= w != start;
        }
    }
}

#[inline]
fn heap_word(v: &View, acc: &mut Acc, w: u64, mode: Mode) {
    if let Mode::Indirect = mode {
        return;
    }
    let c = v.chunks;
    // The last block starting at or before the start of w's page, then forward.
    let Some(&first) = v.pages.get(((w - v.heap.0) >> v.page_shift) as usize) else { return };
    let mut i = first as usize;
    while i + 1 < c.len() && c[i + 1].0 <= w {
        i += 1;
    }
    if i >= c.len() || w < c[i].0 || w >= c[i].1 {
        return;
    }
    // One reader marks a block: the one that reads it. A block's mark only moves towards more
    // trust, so each is read at most twice.
    for _ in 0..4 {
        let cur = v.marks[i].load(Relaxed);
        let new = match (mode, cur) {
            (Mode::Cuda, mark::UNREACHED) => mark::CUDA,
            (Mode::Root(..), mark::UNREACHED | mark::POSSIBLE) => mark::PROGRAM,
            // A library's block the program keeps (a handle) is pointed to from the program's
            // data or memory it reaches; not from a stack, where a stale copy of the address of
            // the block a library call just made (the driver's record of an allocation) is common.
            (Mode::Root(r, _), mark::CUDA) if r != STACK => mark::CUDA_SHARED,
            // A freed block pointed to from a module's data (a static container's global), and
            // the freed blocks it points to; not from a stack, the heap or other anonymous
            // memory, where stale copies of freed blocks' addresses are common (dead frames,
            // registers spilled, malloc's and the program's own structures).
            (Mode::Possible, mark::FREE) => mark::FREE_READ,
            (Mode::Root(r, _), mark::FREE) if r == DATA => mark::FREE_READ,
            (Mode::Possible, mark::UNREACHED) => mark::POSSIBLE,
            _ => return,
        };
        if v.marks[i].compare_exchange(cur, new, Relaxed, Relaxed).is_ok() {
            acc.todo.push(i as u32);
            return;
        }
    }
}
