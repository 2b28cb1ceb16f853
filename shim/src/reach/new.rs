//! A scan's start: the index of the live allocations, the regions to read and what is never read.

use std::sync::atomic::Ordering::Acquire;

use gpushim_wire::{Kind, ReachRegion};

use super::buf::{read_word, Buf};
use super::heap::own_arena;
use super::maps::{blocked_threads, is_cuda_library, own_stack, parse_maps_line, Region, Role};
use super::roots::{readers, Helper, Shared};
use super::words::Acc;
use super::{Mode, Own, Scan, Table, HIDE, READ_BYTES, RED_ZONE, WINDOW};
use crate::{config, loader, own_tls, state, sys};

impl Scan {
    pub(super) fn new(table: &Table, own: Own, deadline: u64, note: &mut String) -> Option<Scan> {
        let mut ranges: Buf<(u64, u64)> = Buf::new(table.len())?;
        let mut devmask: Buf<(u64, u64)> = Buf::new(table.len())?;
        let mut all: Vec<(u64, u64, u64, Kind)> = Vec::with_capacity(table.len());
        for (&k, e) in &table.map {
            all.push((k ^ HIDE, e.size, e.seq, e.kind));
        }
        all.sort_unstable_by_key(|a| a.0);
        // Overlaps (an entry whose free was missed): the later allocation wins.
        let mut kept: Vec<(u64, u64, u64, Kind)> = Vec::with_capacity(all.len());
        for a in all.iter().copied() {
            if let Some(last) = kept.last_mut() {
                if a.0 < last.0.saturating_add(last.1) {
                    if a.2 > last.2 {
                        *last = a;
                    }
                    continue;
                }
            }
            kept.push(a);
        }
        for &(start, size, _, kind) in &kept {
            let end = start.saturating_add(size);
            if !ranges.push((start, end)) {
                return None;
            }
            if kind != Kind::PinnedHost && !devmask.push((start, end)) {
                return None;
            }
        }
        // Scrub the plain copies (volatile: stores just before a free are otherwise dropped).
        for a in all.iter_mut().chain(kept.iter_mut()) {
            // SAFETY: a valid, aligned element of our own vector.
            unsafe { std::ptr::write_volatile(&mut a.0, 0) };
        }
        drop((all, kept));
        let (lo, hi) = match (ranges.as_slice().first(), ranges.as_slice().last()) {
            (Some(f), Some(l)) => (f.0, l.1),
            _ => (1, 0),
        };
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let modules = loader::modules();
        let (own_s, own_e) = loader::own_range();
        let own_s = own_s as u64;
        let own_e = own_e as u64;
        let threads = blocked_threads();
        let writer_stack = own_stack();
        // Every module's segments with what their bytes are: the shim's own (never read), a
        // CUDA library's, or the program's data.
        let mut pieces: Vec<(u64, u64, Option<Role>)> = Vec::new();
        for m in &modules {
            let own = m.ranges.iter().any(|&(ms, me)| (ms as u64) < own_e && (me as u64) > own_s);
            let theirs = is_cuda_library(&m.path) && !config::reachability_cuda_data();
            let role = if own {
                Some(Role::Own)
            } else if theirs {
                Some(Role::Cuda)
            } else {
                Some(Role::Root(ReachRegion::Data, 0))
            };
            pieces.extend(m.ranges.iter().map(|&(ms, me)| (ms as u64, me as u64, role)));
        }
        let mut regions = Vec::new();
        let mut heap = (0u64, 0u64);
        let mut libc_data: Vec<(u64, u64)> = Vec::new();
        // The end of the previous mapping if it could be a guard page (no access), as glibc puts
        // below every thread stack it makes.
        let mut guard_end = 0u64;
        for line in maps.lines() {
            let Some((s, e, rw, path)) = parse_maps_line(line) else { continue };
            let guarded = guard_end == s;
            guard_end = if line.split(' ').nth(1).is_some_and(|p| p.starts_with("---")) { e } else { 0 };
            if !rw
                || path.starts_with("[vvar")
                || path.starts_with("[vsyscall")
                || path.starts_with("[vdso")
                || (path.starts_with("/dev/") && !path.starts_with("/dev/shm/") && !path.starts_with("/dev/zero"))
            {
                continue;
            }
            if path.ends_with("/libc.so.6") {
                libc_data.push((s, e));
            }
            if path == "[heap]" {
                heap = (s, e);
                regions.push(Region { start: s, end: e, role: Role::Heap });
                continue;
            }
            // Cut the mapping at module boundaries: the kernel merges a module's bss with
            // anonymous memory mapped next to it.
            let mut at = s;
            while at < e {
                let inside = pieces.iter().find(|p| p.0 <= at && at < p.1);
                let (end, role) = match inside {
                    Some(&(_, pe, r)) => (pe.min(e), r),
                    None => {
                        let next = pieces.iter().filter(|p| p.0 > at).map(|p| p.0).min().unwrap_or(e).min(e);
                        let role = if path == "[stack]" {
                            Some(Role::Root(ReachRegion::Stack, sys::getpid_raw() as u32))
                        } else {
                            Some(Role::Root(ReachRegion::Anon, 0))
                        };
                        (next, role)
                    }
                };
                if let Some(mut role) = role {
                    let mut start = at;
                    if let Role::Root(ReachRegion::Anon | ReachRegion::Stack, _) = role {
                        let sp = threads.iter().find(|(_, sp)| sp.is_some_and(|sp| sp >= at && sp < end));
                        if let Some(&(tid, Some(sp))) = sp {
                            role = Role::Root(ReachRegion::Stack, tid);
                            start = sp.saturating_sub(RED_ZONE).max(at) & !7;
                            // Below the stack pointer of a stack glibc made (a guard page below
                            // it) or the main thread's are dead frames. In other memory (a stack
                            // the program gave the thread: a fiber arena, malloc'd blocks the
                            // kernel merged into one mapping) it may be the program's data.
                            if path != "[stack]" && !(guarded && at == s) && start > at {
                                regions.push(Region { start: at, end: start, role: Role::Possible });
                            }
                        }
                        // The exiting thread waits inside the shim until this scan is done
                        // (running, as it spins before it sleeps, or blocked): its frames
                        // below the exit path's entry are the shim's and dead ones.
                        let exit_sp = state::EXIT_SP.load(Acquire);
                        if exit_sp > start && exit_sp < end {
                            role = Role::Root(ReachRegion::Stack, state::EXIT_TID.load(Acquire));
                            // The shim's frames: what they reach is the shim's.
                            regions.push(Region { start, end: exit_sp & !7, role: Role::Own });
                            start = exit_sp & !7;
                        }
                    }
                    regions.push(Region { start, end, role });
                }
                at = end;
            }
        }
        // The writer thread's own malloc arena holds only the shim's blocks, unless a program
        // thread shares it (glibc gives each thread an arena of its own up to 8 per core).
        if let Some(base) = own_arena(heap) {
            for g in regions.iter_mut().filter(|g| g.start >= base && g.start < base + (64 << 20)) {
                g.role = Role::Own;
            }
        }
        // The writer thread's own stack (this thread's), and the shim's thread-local storage in
        // every thread that ran its code (`own_tls`): read as the shim's, so that the blocks
        // they reach are the shim's too.
        let mut mine: Vec<(u64, u64)> = writer_stack.into_iter().collect();
        mine.extend(own_tls_blocks(&modules, (own_s, own_e), heap));
        for (s, e) in mine {
            regions = carve_own(regions, s, e);
        }
        let rbuf: Buf<u8> = Buf::new(READ_BYTES)?;
        let acc = Acc::new(ranges.len)?;
        let helpers: Vec<Helper> = (1..readers()).map_while(|_| Helper::new(ranges.len)).collect();
        let entries: Buf<u64> = Buf::new(READ_BYTES / 8)?;
        let work: Buf<(u64, u64, Mode)> = Buf::new(4096)?;
        let shared = Shared::new()?;
        let mut scan = Scan {
            ranges,
            skip: Buf::new(devmask.len + 32)?,
            chunks: Buf::new(4096)?,
            win: Buf::new(WINDOW)?,
            walk_failed_at: 0,
            walk_failed_read: false,
            walk_failed_full: false,
            exit: false,
            top: 0,
            pages: Vec::new(),
            page_shift: 12,
            marks: Vec::new(),
            init: Vec::new(),
            reused: Vec::new(),
            regions,
            lo,
            hi,
            heap: (1, 0),
            deadline,
            scanned: 0,
            unreadable: 0,
            helpers_cpu_ns: 0,
            cut: false,
            rbuf,
            acc,
            helpers,
            entries,
            pagemap: std::fs::File::open("/proc/self/pagemap").ok(),
            work,
            shared,
        };
        if heap.1 > heap.0 {
            if scan.walk_heap(heap.0, heap.1) {
                scan.heap = heap;
                if !scan.drop_fastbin_blocks(heap, &libc_data) {
                    if !note.is_empty() {
                        note.push_str("; ");
                    }
                    note.push_str(
                        "glibc's main arena was not found: blocks freed into its fastbins were read as in use",
                    );
                }
                scan.index_pages(heap.0, heap.1);
            } else {
                for g in scan.regions.iter_mut().filter(|g| g.role == Role::Heap) {
                    g.role = Role::Root(ReachRegion::Anon, 0);
                }
                let at = scan.walk_failed_at;
                let why = if scan.walk_failed_read {
                    format!("could not be read at byte {at} (it shrank or was unmapped meanwhile)")
                } else if scan.walk_failed_full {
                    format!("has more blocks than the scan's list holds (stopped at byte {at})")
                } else {
                    format!("did not add up (at byte {at})")
                };
                note.push_str(&format!("the main heap's chunks {why}; it was read whole as a root"));
            }
        }
        // Never read: device and managed memory, and the shim's own (every buffer of this scan
        // is made by now and does not move any more).
        let mut extra: Vec<(u64, u64)> =
            vec![scan.ranges.range(), scan.skip.range(), scan.chunks.range(), scan.win.range(), scan.rbuf.range()];
        extra.extend([scan.entries.range(), scan.work.range(), scan.shared.range()]);
        extra.extend([scan.acc.hits.range(), scan.acc.todo.range()]);
        extra.extend(scan.helpers.iter().flat_map(Helper::ranges));

        // The threads' rings (`ring`): their slots hold copies of recent addresses too.
        extra.extend(crate::ring::all().map(|r| r.buffer()));
        if let Some(c) = own.channel {
            extra.push(c);
        } else {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str("the shim's event channel was not located: recently made allocations may look reachable");
        }
        extra.sort_unstable();
        let (mut i, mut j) = (0, 0);
        let dm = devmask.as_slice();
        while i < dm.len() || j < extra.len() {
            let next = if j >= extra.len() || (i < dm.len() && dm[i].0 <= extra[j].0) {
                i += 1;
                dm[i - 1]
            } else {
                j += 1;
                extra[j - 1]
            };
            match scan.skip.as_slice().last().copied() {
                Some(last) if next.0 <= last.1 => {
                    let n = scan.skip.len;
                    scan.skip.as_mut_slice()[n - 1].1 = last.1.max(next.1);
                }
                _ => {
                    if !scan.skip.push(next) {
                        return None;
                    }
                }
            }
        }
        drop(devmask);
        Some(scan)
    }
}

/// `regions` with `[s, e)` taken out of every region and added as the shim's own.
fn carve_own(regions: Vec<Region>, s: u64, e: u64) -> Vec<Region> {
    let mut out = Vec::with_capacity(regions.len() + 2);
    for g in regions {
        if g.end <= s || g.start >= e {
            out.push(g);
            continue;
        }
        if g.start < s {
            out.push(Region { end: s, ..g });
        }
        if g.end > e {
            out.push(Region { start: e, ..g });
        }
    }
    out.push(Region { start: s, end: e, role: Role::Own });
    out
}

/// `[start, end)` of the shim's thread-local block of each thread registered in `own_tls` whose
/// mark still holds its value, outside the main heap `heap` (whose chunks are walked, not cut).
/// The mark's offset in the block is the writer thread's (the same in every thread).
fn own_tls_blocks(modules: &[loader::ModuleInfo], (own_s, own_e): (u64, u64), heap: (u64, u64)) -> Vec<(u64, u64)> {
    let mine = modules
        .iter()
        .find(|m| m.ranges.iter().any(|&(ms, me)| (ms as u64) < own_e && (me as u64) > own_s))
        .and_then(|m| m.tls);
    let (Some((data, size)), Some(mark)) = (mine, own_tls::mine()) else { return Vec::new() };
    let Some(off) = mark.checked_sub(data).filter(|&o| o + 8 <= size) else { return Vec::new() };
    own_tls::marks()
        .into_iter()
        .filter(|&m| read_word(m) == Some(own_tls::MAGIC))
        .map(|m| (m - off, m - off + size))
        .filter(|&(s, e)| e <= heap.0 || s >= heap.1)
        .collect()
}
