//! One pass of the scan: the CUDA libraries' data, the program's roots (`roots`), the shim's own
//! memory and the blocks nothing reached, each read word by word (`words`).

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::buf::Buf;
use super::maps::Role;
use super::roots::{read_regions, read_unreached};
use super::words::{drain, read_block, read_range, View};
use super::{mark, Hit, Mode, Scan};

impl Scan {
    /// One pass over everything: CUDA libraries' data first (marking their heap blocks), then
    /// the program's roots and the blocks they reach, then the shim's own memory (marking what
    /// is left of the blocks it reaches as not the program's), then the blocks nothing reached.
    pub(super) fn pass(&mut self) -> Vec<Hit> {
        self.marks = self.init.iter().map(|&m| AtomicU8::new(m)).collect();
        self.acc.clear(self.ranges.len);
        let regions = self.regions.clone();
        let exit = self.exit;
        let roots: Vec<_> =
            regions.iter().filter(|g| matches!(g.role, Role::Root(..) | Role::Possible)).copied().collect();
        let cuda: Vec<_> = regions.iter().filter(|g| g.role == Role::Cuda).copied().collect();
        let Scan { rbuf, acc, helpers, entries, pagemap, work, shared, .. } = self;
        let rbuf = rbuf.full();
        // The view borrows only what the readers do not change, field by field.
        let view = view_of(
            &self.ranges,
            &self.skip,
            &self.chunks,
            &self.marks,
            &self.reused,
            &self.pages,
            self.page_shift,
            self.heap,
            (self.lo, self.hi),
            self.deadline,
        );
        read_regions(&view, acc, rbuf, helpers, &cuda, pagemap.as_ref(), entries, work, shared);
        drain(&view, acc, rbuf);
        read_regions(&view, acc, rbuf, helpers, &roots, pagemap.as_ref(), entries, work, shared);
        drain(&view, acc, rbuf);
        for g in regions.iter().filter(|g| g.role == Role::Own) {
            read_range(&view, acc, rbuf, g.start, g.end, Mode::Cuda);
        }
        drain(&view, acc, rbuf);
        // At an exit whose scan came after the program's exit handlers, its static containers
        // have been torn down (C++ static destructors and atexit handlers ran before the scan):
        // what freed blocks still hold may be pointers the program kept for its whole run, read
        // without trust.
        if exit && view.heap.1 > view.heap.0 && !acc.cut {
            for c in 0..view.chunks.len() {
                if view.marks[c].compare_exchange(mark::FREE, mark::FREE_READ, Relaxed, Relaxed).is_ok() {
                    read_block(&view, acc, rbuf, c);
                    drain(&view, acc, rbuf);
                }
            }
        }
        // Indirectly lost: referred to from blocks nothing reached.
        if !acc.cut {
            read_unreached(&view, acc, rbuf, helpers, shared);
        }
        let (scanned, unreadable, cut) = (acc.scanned, acc.unreadable, acc.cut);
        let hits = acc.hits.as_slice().to_vec();
        self.helpers_cpu_ns += acc.cpu_ns;
        self.scanned += scanned;
        self.unreadable += unreadable;
        self.cut |= cut;
        hits
    }
}

/// What a pass reads, from the scan's fields.
#[allow(clippy::too_many_arguments)]
fn view_of<'a>(
    ranges: &'a Buf<(u64, u64)>,
    skip: &'a Buf<(u64, u64)>,
    chunks: &'a Buf<(u64, u64)>,
    marks: &'a [AtomicU8],
    reused: &'a [u8],
    pages: &'a [u32],
    page_shift: u32,
    heap: (u64, u64),
    (lo, hi): (u64, u64),
    deadline: u64,
) -> View<'a> {
    View {
        ranges: ranges.as_slice(),
        skip: skip.as_slice(),
        chunks: chunks.as_slice(),
        marks,
        reused,
        pages,
        page_shift,
        heap,
        lo,
        hi,
        deadline,
    }
}
