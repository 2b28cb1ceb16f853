//! One pass of the scan: every region read word by word, the heap blocks reached followed.

use gpushim_wire::ReachRegion;

use super::maps::Role;
use super::{Hit, Mode, Scan, PAGE};
use crate::sys;
use crate::sys::read_own as read;

impl Scan {
    /// One pass over everything: CUDA libraries' data first (marking their heap blocks), then
    /// the program's roots and the blocks they reach, then the shim's own memory (marking what
    /// is left of the blocks it reaches as not the program's), then the blocks nothing reached.
    pub(super) fn pass(&mut self) -> Vec<Hit> {
        self.hits = vec![Hit { interior_only: true, ..Hit::default() }; self.ranges.len];
        self.marks = vec![0u8; self.chunks.len];
        self.todo.clear();
        let regions = self.regions.clone();
        for g in regions.iter().filter(|g| g.role == Role::Cuda) {
            self.read_range(g.start, g.end, Mode::Cuda);
        }
        self.drain(Mode::Cuda);
        for g in &regions {
            if let Role::Root(region, tid) = g.role {
                self.read_range(g.start, g.end, Mode::Root(region as u8, tid));
                self.drain(Mode::Root(ReachRegion::Heap as u8, 0));
            }
        }
        for g in regions.iter().filter(|g| g.role == Role::Own) {
            self.read_range(g.start, g.end, Mode::Cuda);
        }
        self.drain(Mode::Cuda);
        // Indirectly lost: referred to from blocks nothing reached.
        for c in 0..self.chunks.len {
            if self.marks[c] == 0 && !self.cut {
                let (a, b) = self.chunks.as_slice()[c];
                self.read_range(a, b + 8, Mode::Indirect);
            }
        }
        std::mem::take(&mut self.hits)
    }

    fn drain(&mut self, mode: Mode) {
        while let Some(c) = self.todo.pop() {
            // A block's last word is the next chunk's `prev_size` field, which it may use.
            let (a, b) = self.chunks.as_slice()[c as usize];
            self.read_range(a, b + 8, mode);
        }
    }

    /// Reads `[a, b)` less the ranges never read, word by word.
    fn read_range(&mut self, a: u64, b: u64, mode: Mode) {
        let mut a = (a + 7) & !7;
        let skip_len = self.skip.len;
        let mut k = self.skip.as_slice().partition_point(|r| r.1 <= a);
        while a < b && !self.cut {
            let (gap_end, next_a) = if k < skip_len {
                let r = self.skip.as_slice()[k];
                if r.0 <= a {
                    k += 1;
                    a = (r.1 + 7) & !7;
                    continue;
                }
                (r.0.min(b), r.1)
            } else {
                (b, b)
            };
            self.read_words(a, gap_end, mode);
            a = (next_a + 7) & !7;
            if gap_end == b {
                break;
            }
            k += 1;
        }
    }

    fn read_words(&mut self, mut a: u64, b: u64, mode: Mode) {
        self.rbuf.len = self.rbuf.cap;
        while a + 8 <= b {
            if sys::now_ns() > self.deadline {
                self.cut = true;
                break;
            }
            let want = ((b - a) as usize).min(self.rbuf.len) & !7;
            let n = read(a, &mut self.rbuf.as_mut_slice()[..want]) & !7;
            self.scanned += n as u64;
            // The bounds in registers: the calls below take `self` mutably, so fields would be
            // reloaded for every word.
            let (lo, span) = (self.lo, self.hi.wrapping_sub(self.lo));
            let (hlo, hspan) = match mode {
                Mode::Indirect => (0, 0),
                _ => (self.heap.0, self.heap.1.wrapping_sub(self.heap.0)),
            };
            let words = self.rbuf.ptr as *const u64;
            for i in 0..n / 8 {
                // SAFETY: i * 8 + 8 <= n <= the buffer's length; the buffer is page-aligned.
                let w = unsafe { words.add(i).read() };
                if w.wrapping_sub(lo) < span {
                    self.device_word(w, a + 8 * i as u64, mode);
                }
                if w.wrapping_sub(hlo) < hspan {
                    self.heap_word(w, mode);
                }
            }
            if n < want {
                // An unreadable page (unmapped meanwhile, or PROT_NONE): skip it.
                let bad = (a + n as u64 + PAGE) & !(PAGE - 1);
                self.unreadable += bad.min(b) - (a + n as u64);
                a = bad;
            } else {
                a += n as u64;
            }
        }
    }

    #[inline]
    fn device_word(&mut self, w: u64, at: u64, mode: Mode) {
        let r = self.ranges.as_slice();
        let i = r.partition_point(|x| x.0 <= w);
        if i == 0 || w >= r[i - 1].1 {
            return;
        }
        let start = r[i - 1].0;
        let h = &mut self.hits[i - 1];
        match mode {
            Mode::Cuda => {}
            Mode::Indirect => h.indirect = h.indirect.saturating_add(1),
            Mode::Root(region, tid) => {
                // Where it is held: the first reference of the most telling region (data,
                // then a stack, then the heap, then other anonymous memory).
                let rank = |r: u8| [0u8, 4, 2, 3, 1][usize::from(r.min(4))];
                if h.refs > 0 && rank(region) > rank(h.region) {
                    h.region = region;
                    h.tid = tid;
                    h.from = at;
                }
                if h.refs == 0 {
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
    fn heap_word(&mut self, w: u64, mode: Mode) {
        let mark = match mode {
            Mode::Cuda => 2,
            Mode::Root(..) => 1,
            Mode::Indirect => return,
        };
        let c = self.chunks.as_slice();
        // The last block starting at or before the start of w's page, then forward.
        let Some(&first) = self.pages.get(((w - self.heap.0) >> self.page_shift) as usize) else { return };
        let mut i = first as usize;
        while i + 1 < c.len() && c[i + 1].0 <= w {
            i += 1;
        }
        if i >= c.len() || w < c[i].0 || w >= c[i].1 || self.marks[i] != 0 {
            return;
        }
        self.marks[i] = mark;
        self.todo.push(i as u32);
    }
}
