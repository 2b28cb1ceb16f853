//! The rings drained: every thread's ring read in sequence order (a merge by the rings' next
//! numbers), all of it or only what lies below a snapshot's boundary.

use super::{Writer, FLUSH_BYTES};

use crate::ring::{self, Ring};

impl Writer {
    /// Handles what every thread's ring holds now; the number of events handled.
    pub(super) fn drain_rings(&mut self) -> usize {
        // What is queued now (acquire), then the snapshot requests: an event queued before
        // these loads and numbered at or past a request's boundary goes after its marker.
        let mut active = std::mem::take(&mut self.active);
        active.clear();
        active.extend(ring::all().filter_map(|r| {
            let head = r.head();
            (r.tail() != head).then_some((r, head))
        }));
        let n = if active.is_empty() {
            0
        } else {
            self.snapshots();
            self.merge(&active, u64::MAX)
        };
        if n > 0 {
            crate::probe::probe!(count DRAINS);
            crate::probe::probe!(add DRAINED, n as u64);
        }
        self.active = active;
        n
    }

    /// Before a snapshot's marker: every event queued in a ring and numbered below `boundary`
    /// is handled, so that the writer's own state at the marker (its live set for the
    /// reachability scan, the stacks sent) holds every event below it that had been queued.
    pub(super) fn drain_below(&mut self, boundary: u64) {
        let active: Vec<(&'static Ring, u32)> = ring::all().map(|r| (r, r.head())).collect();
        self.merge(&active, boundary);
    }

    /// Handles the events of the rings in `active`, each up to its `head` (from [`Ring::head`])
    /// and up to its first event numbered `below` or more, in sequence order across the rings
    /// (an event without a number first): the writer then numbers stacks, and the collector its
    /// sites, in the order the program made them, as when one channel carried every event
    /// (`holders::the_native_core_and_the_python_loop_find_the_same_holders` compares the sites
    /// of two runs). A thread's own events are numbered in the order it queues them (it takes a
    /// number inside its hook, and a hook is never entered again on a thread while one runs).
    /// The number of events handled.
    pub(super) fn merge(&mut self, active: &[(&'static Ring, u32)], below: u64) -> usize {
        let mut heap = std::collections::BinaryHeap::new();
        for (i, &(r, head)) in active.iter().enumerate() {
            if let Some(k) = next_key(r, head, below) {
                heap.push(std::cmp::Reverse((k, i)));
            }
        }
        let mut n = 0usize;
        while let Some(std::cmp::Reverse((_, i))) = heap.pop() {
            let (r, head) = active[i];
            // Take from this ring while its next event comes before every other ring's.
            while let Some(k) = next_key(r, head, below) {
                if heap.peek().is_some_and(|std::cmp::Reverse((m, _))| *m < k) {
                    heap.push(std::cmp::Reverse((k, i)));
                    break;
                }
                let t = r.tail();
                // SAFETY: the writer is the only reader and `t` is in `[tail, head)`
                // (`next_key`); the tail moves past it before anything else reads the ring.
                let msg = unsafe { r.take(t) };
                let next = t.wrapping_add(1);
                // Room for the thread every 64 events (and a wake if it waits).
                if next.is_multiple_of(64) {
                    r.release(next);
                } else {
                    r.advance(next);
                }
                n += 1;
                // Handling an API snapshot drains the rings below its boundary (`drain_below`),
                // this one included: the tail is read again for the next event.
                self.handle(msg, Some(r.id()));
                if self.buf.len() >= FLUSH_BYTES && !self.flush() {
                    self.gone = true;
                }
                if self.gone {
                    heap.clear();
                    break;
                }
            }
        }
        for &(r, _) in active {
            r.release(r.tail());
        }
        n
    }
}

/// The order key of ring `r`'s next event, if it has one before `head` and it is numbered below
/// `below`: its sequence number, 0 for an event without one (it goes with the thread's next).
pub(super) fn next_key(r: &Ring, head: u32, below: u64) -> Option<u64> {
    let t = r.tail();
    // Signed: a nested drain may have taken the ring past the `head` loaded before it.
    if (head.wrapping_sub(t) as i32) <= 0 {
        return None;
    }
    // SAFETY: only the writer thread reads the rings, and `t` is in `[tail, head)`.
    match ring::seq_of(unsafe { r.peek(t) }) {
        Some(s) if s >= below => None,
        Some(s) => Some(s),
        None => Some(0),
    }
}
