//! The reorder buffer: events applied to the live set strictly in sequence order.
//!
//! Everything here is pure: no I/O, no clocks. [`Tracker`] takes [`Op`]s in whatever order they
//! arrive, applies them to a [`State`] strictly in `seq` order, and calls back when a snapshot
//! boundary is reached, so that a snapshot holds exactly the events with `seq < boundary`.

use std::collections::{BTreeMap, VecDeque};

use gpushim_wire::Failed;

use crate::account::live::{Op, State};

/// The reorder buffer's bound when `GPUSHIM_REORDER_MIB` is not set: 64 MiB, bytes.
///
/// The buffer is a window of slots, one per sequence number from the next one to apply on
/// (`size_of::<Option<Op>>()` bytes each, 72 on x86-64: about 930,000 slots). While the stream
/// lasts the shim drops no numbered event, but one can be very late: a free takes its number
/// before the real call, which may wait on the device or a driver lock, and any thread may be
/// preempted between taking a number and queueing its event. With 64 threads allocating on 2
/// cores, events arrived up to 700,000 places late (measured with the stand-ins;
/// `faults::threads_and_signals::sixty_four_threads_give_exact_totals_without_deadlock`), past
/// a bound of 2^18 events, which would turn late events into "lost" ones and wrong totals.
pub const DEFAULT_REORDER_BYTES: usize = 64 << 20;

/// At most this many ranges of sequence numbers given up on because the buffer was full are
/// remembered (an event of a range forgotten counts as a duplicate when it arrives).
pub const MAX_OVERFLOW_RANGES: usize = 4096;

/// The result code of an out-of-memory failure (`CUDA_ERROR_OUT_OF_MEMORY` in the driver API,
/// `cudaErrorMemoryAllocation` in the runtime API: both are 2).
pub const OUT_OF_MEMORY: i32 = 2;

/// A snapshot that became ready: the state passed with it holds exactly the events with
/// `seq < boundary` that were received (see `late_by` and `missing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPoint {
    /// 1 for the stream's first snapshot request, then 2, 3, … in arrival order.
    pub number: u32,
    /// The requested boundary sequence number.
    pub boundary: u64,
    /// Monotonic time of the request, ns.
    pub ts_ns: u64,
    /// How many events at or past the boundary were already applied when the request arrived
    /// (0 normally; non-zero only if the writer sent the request after later events).
    pub late_by: u64,
    /// How many sequence numbers below the boundary were never received.
    pub missing: u64,
}

/// What a [`Tracker`] tells its caller while it applies events.
///
/// Any `FnMut(&SnapshotPoint, &State)` is an observer that only cares about snapshots.
pub trait Observer {
    /// A snapshot's boundary was reached: `state` holds exactly the events before it.
    fn snapshot(&mut self, point: &SnapshotPoint, state: &State);

    /// An allocation failed with [`OUT_OF_MEMORY`]; `state` holds every event up to and
    /// including `failed`, and none after it.
    fn out_of_memory(&mut self, failed: &Failed, state: &State) {
        let _ = (failed, state);
    }
}

impl<F: FnMut(&SnapshotPoint, &State)> Observer for F {
    fn snapshot(&mut self, point: &SnapshotPoint, state: &State) {
        self(point, state)
    }
}

/// Puts events back in sequence order and applies them to a [`State`], in bounded memory.
///
/// Events wait in a window of slots, slot `i` for sequence number `next_seq + i`. An event
/// that would need a slot past the bound (`bytes / size_of::<Option<Op>>()` slots) makes the
/// tracker release the oldest in order: the waiting events below it are applied in sequence
/// order, skipping the numbers that have not arrived. Those numbers are counted
/// (`reorder_overflow` in the report's totals) and remembered; if one of their events arrives
/// later it is applied then, out of order ([`State::apply_late`]), and no longer counted as
/// lost. So a live allocation's accounting is never dropped: a late free still frees it.
#[derive(Debug)]
pub struct Tracker {
    state: State,
    next_seq: u64,
    /// Slot `i` holds the event numbered `next_seq + i` once it has arrived.
    pending: VecDeque<Option<Op>>,
    /// Events held in `pending`.
    waiting: usize,
    /// The most slots `pending` may hold.
    max_slots: usize,
    /// Sequence numbers given up on because the buffer was full, not arrived yet: start → end
    /// (exclusive).
    overflowed: BTreeMap<u64, u64>,
    /// Waiting snapshot requests, sorted by (boundary, number).
    snapshots: Vec<SnapshotPoint>,
    requested: u32,
    lost: u64,
    duplicates: u64,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker::with_bound(DEFAULT_REORDER_BYTES)
    }
}

impl Tracker {
    #[cfg(test)]
    /// An empty tracker expecting sequence number 0 first, its buffer bounded to
    /// [`DEFAULT_REORDER_BYTES`].
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// An empty tracker whose buffer holds at most `bytes` bytes of waiting events (at least
    /// one slot).
    pub fn with_bound(bytes: usize) -> Tracker {
        Tracker {
            state: State::default(),
            next_seq: 0,
            pending: VecDeque::new(),
            waiting: 0,
            max_slots: (bytes / std::mem::size_of::<Option<Op>>()).max(1),
            overflowed: BTreeMap::new(),
            snapshots: Vec::new(),
            requested: 0,
            lost: 0,
            duplicates: 0,
        }
    }

    /// The state as of every event applied so far.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The state, to set what the stream tells outside the sequence (the start of the
    /// interpreter's teardown, [`State::teardown_from_ns`]).
    pub fn state_mut(&mut self) -> &mut State {
        &mut self.state
    }

    /// The sequence number to be applied next.
    #[cfg(test)]
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Snapshot requests taken so far: the next one is numbered one more.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// Sequence numbers skipped because they never arrived (as of now: a number given up on
    /// when the buffer was full stops counting if its event comes later).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Events ignored because their sequence number had been seen already, or had been given
    /// up as lost before they arrived.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Events received but not yet applied (waiting for an earlier sequence number).
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.waiting
    }

    #[cfg(test)]
    /// Bytes the buffer's slots take now (its allocated capacity).
    pub fn buffer_bytes(&self) -> usize {
        self.pending.capacity() * std::mem::size_of::<Option<Op>>()
    }

    /// The waiting event numbered `seq`, if it is in the window.
    fn slot(&self, seq: u64) -> Option<&Op> {
        let i = usize::try_from(seq.checked_sub(self.next_seq)?).ok()?;
        self.pending.get(i)?.as_ref()
    }

    /// Takes one event; applies it and every waiting event that follows it in sequence, and
    /// tells `obs` of each snapshot boundary reached and each out-of-memory failure applied.
    pub fn push(&mut self, op: Op, obs: &mut dyn Observer) {
        let seq = op.seq();
        match &op {
            // The free's call returned after it was applied as in progress.
            Op::Free(f) if seq < self.next_seq && self.state.is_pending_free(seq) => {
                self.state.complete_pending_free(f);
                return;
            }
            // The same for a `cuMemUnmap`.
            Op::Unmap(u) if seq < self.next_seq && self.state.is_pending_free(seq) => {
                self.state.complete_pending_unmap(u);
                return;
            }
            // The free's call returned before its in-progress mark was applied: the Free
            // (or Unmap) replaces the mark.
            Op::Free(_) | Op::Unmap(_) if matches!(self.slot(seq), Some(Op::FreePending(_))) => {
                let i = (seq - self.next_seq) as usize;
                self.pending[i] = Some(op);
                return;
            }
            // A free in progress whose Free came first (the writer saw the call still running
            // after it had sent the Free), or one given up on when the buffer was full (its Free
            // is applied late when it comes): nothing to do.
            Op::FreePending(_) if seq < self.next_seq || self.slot(seq).is_some() => return,
            _ => {}
        }
        if seq < self.next_seq {
            if self.take_overflowed(seq) {
                self.lost = self.lost.saturating_sub(1);
                self.state.totals.late_events += 1;
                self.state.apply_late(&op);
                if self.overflowed.is_empty() {
                    self.state.set_late_events_expected(false);
                }
            } else {
                self.duplicates += 1;
            }
            return;
        }
        if self.slot(seq).is_some() {
            self.duplicates += 1;
            return;
        }
        // No waiting snapshot has a boundary <= next_seq (they are emitted as soon as it is
        // reached), so the next event in order can be applied without waiting.
        if seq == self.next_seq {
            self.pending.pop_front();
            self.apply(&op, obs);
        } else {
            let mut i = seq - self.next_seq;
            if i >= self.max_slots as u64 {
                self.overflow(seq - (self.max_slots as u64 - 1), obs);
                i = seq - self.next_seq;
            }
            let i = i as usize;
            if self.pending.len() <= i {
                self.grow(i + 1);
            }
            self.pending[i] = Some(op);
            self.waiting += 1;
        }
        self.drain(obs);
    }

    /// Makes the window `len` slots long (at most `max_slots`), allocating no more than that.
    fn grow(&mut self, len: usize) {
        if len > self.pending.capacity() {
            let want = (self.pending.capacity() * 2).clamp(len, self.max_slots.max(len));
            self.pending.reserve_exact(want - self.pending.len());
        }
        self.pending.resize(len, None);
    }

    /// Applies the next event in order and tells `obs` of an out-of-memory failure.
    fn apply(&mut self, op: &Op, obs: &mut dyn Observer) {
        self.state.apply(op);
        // Saturating: a corrupt stream can carry sequence number u64::MAX.
        self.next_seq = self.next_seq.saturating_add(1);
        if let Op::Failed(f) = op {
            if f.result == OUT_OF_MEMORY {
                obs.out_of_memory(f, &self.state);
            }
        }
    }

    /// Takes a snapshot request; `obs` hears of it as soon as every event before `boundary`
    /// has been applied (at once if that is already so).
    pub fn request_snapshot(&mut self, boundary: u64, ts_ns: u64, obs: &mut dyn Observer) {
        self.requested += 1;
        let point = SnapshotPoint {
            number: self.requested,
            boundary,
            ts_ns,
            late_by: self.next_seq.saturating_sub(boundary),
            missing: 0,
        };
        let at = self.snapshots.partition_point(|s| (s.boundary, s.number) <= (boundary, point.number));
        self.snapshots.insert(at, point);
        self.emit_ready(obs);
    }

    /// At the end of the stream: applies every waiting event in sequence order, skipping
    /// numbers that never came, then emits the snapshots still waiting.
    pub fn finish(&mut self, obs: &mut dyn Observer) {
        while self.waiting > 0 {
            self.skip_gap(obs);
        }
        self.pending = VecDeque::new();
        for mut s in std::mem::take(&mut self.snapshots) {
            s.missing = s.missing.saturating_add(s.boundary.saturating_sub(self.next_seq));
            obs.snapshot(&s, &self.state);
        }
    }

    fn drain(&mut self, obs: &mut dyn Observer) {
        loop {
            self.emit_ready(obs);
            match self.pending.front() {
                Some(Some(_)) => {
                    let op = self.pending.pop_front().flatten().expect("checked above");
                    self.waiting -= 1;
                    self.apply(&op, obs);
                }
                _ => break,
            }
        }
    }

    /// Gives up on the sequence numbers before the lowest waiting event.
    fn skip_gap(&mut self, obs: &mut dyn Observer) {
        let gap = self.pending.iter().take_while(|s| s.is_none()).count();
        let from = self.next_seq;
        let first = from.saturating_add(gap as u64);
        for s in &mut self.snapshots {
            s.missing = s.missing.saturating_add(s.boundary.min(first).saturating_sub(from));
        }
        self.pending.drain(..gap);
        self.lost = self.lost.saturating_add(gap as u64);
        self.next_seq = first;
        self.drain(obs);
    }

    /// The buffer is full: releases the oldest waiting events in order, giving up on the
    /// numbers missing among them, until the next number to apply is at least `to`. The numbers
    /// given up on are counted in [`crate::report::Totals::reorder_overflow`] and remembered, so
    /// that their events are applied if they come later.
    fn overflow(&mut self, to: u64, obs: &mut dyn Observer) {
        while self.next_seq < to {
            if self.waiting == 0 {
                // Nothing waits: the whole window up to `to` is missing.
                let n = to - self.next_seq;
                self.remember_overflowed(self.next_seq, n);
                for s in &mut self.snapshots {
                    s.missing = s.missing.saturating_add(s.boundary.min(to).saturating_sub(self.next_seq));
                }
                self.lost = self.lost.saturating_add(n);
                self.pending.clear();
                self.next_seq = to;
                self.drain(obs);
                break;
            }
            // Remembered before the events after the gap are applied, so that the live set
            // notes what a late event would change (frees of addresses not live, replacements).
            let gap = self.pending.iter().take_while(|s| s.is_none()).count() as u64;
            self.remember_overflowed(self.next_seq, gap);
            self.skip_gap(obs);
        }
    }

    /// Counts and remembers `n` numbers from `from` given up on because the buffer was full.
    fn remember_overflowed(&mut self, from: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.state.totals.reorder_overflow = self.state.totals.reorder_overflow.saturating_add(n);
        self.overflowed.insert(from, from.saturating_add(n));
        if self.overflowed.len() > MAX_OVERFLOW_RANGES {
            self.overflowed.pop_first();
        }
        self.state.set_late_events_expected(true);
    }

    /// Whether `seq` was given up on when the buffer was full (and has not arrived since);
    /// forgets it if so.
    fn take_overflowed(&mut self, seq: u64) -> bool {
        let Some((&start, &end)) = self.overflowed.range(..=seq).next_back() else {
            return false;
        };
        if seq >= end {
            return false;
        }
        self.overflowed.remove(&start);
        if start < seq {
            self.overflowed.insert(start, seq);
        }
        if seq + 1 < end {
            self.overflowed.insert(seq + 1, end);
        }
        true
    }

    fn emit_ready(&mut self, obs: &mut dyn Observer) {
        let n = self.snapshots.partition_point(|s| s.boundary <= self.next_seq);
        for s in self.snapshots.drain(..n) {
            obs.snapshot(&s, &self.state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::live::tests::{alloc, apply_all, failed, free};
    use crate::report::Gauge;
    use crate::report::Totals;
    use gpushim_wire::Kind;

    fn scenario() -> Vec<Op> {
        let mut ops = Vec::new();
        for i in 0..40u64 {
            let seq = ops.len() as u64;
            ops.push(alloc(seq, 1000 + seq, 0x1000 + i * 0x100, 10 + i, Kind::Device, (i % 2) as i32, (i % 3) as u32));
            if i % 4 == 1 {
                let seq = ops.len() as u64;
                ops.push(free(seq, 1000 + seq, 0x1000 + (i - 1) * 0x100, 0));
            }
        }
        ops
    }

    /// Totals, kinds, devices, and (id, gauge, allocs, frees) per site, sorted.
    type Summary = (Totals, [Gauge; 3], Vec<(i32, Gauge)>, Vec<(u32, Gauge, u64, u64)>);

    fn summary(s: &State) -> Summary {
        let mut sites: Vec<_> = s.sites.values().map(|x| (x.id, x.gauge, x.alloc_count, x.free_count)).collect();
        sites.sort_by_key(|x| x.0);
        (s.totals, s.kinds, s.devices.iter().map(|(&k, &v)| (k, v)).collect(), sites)
    }

    /// Shuffles deterministically within windows of `w` events (the shim's threads race by a
    /// few events at most).
    fn shuffled(ops: &[Op], w: usize) -> Vec<Op> {
        let mut out = Vec::new();
        for chunk in ops.chunks(w) {
            let mut c = chunk.to_vec();
            c.reverse();
            if c.len() > 2 {
                c.swap(0, 2);
            }
            out.extend(c);
        }
        out
    }

    #[test]
    fn reordering_gives_the_same_result() {
        let ops = scenario();
        let want = apply_all(&ops);
        let mut t = Tracker::new();
        let mut none = |_: &SnapshotPoint, _: &State| panic!("no snapshot requested");
        for op in shuffled(&ops, 5) {
            t.push(op, &mut none);
        }
        t.finish(&mut none);
        assert_eq!(summary(t.state()), summary(&want));
        assert_eq!((t.lost(), t.duplicates(), t.pending()), (0, 0, 0));
    }

    #[test]
    fn snapshot_is_exactly_the_prefix() {
        let ops = scenario();
        let boundary = 23;
        let want = apply_all(&ops[..boundary]);
        let mut t = Tracker::new();
        let mut got = Vec::new();
        let mut on = |p: &SnapshotPoint, s: &State| got.push((*p, summary(s)));
        let order = shuffled(&ops, 7);
        for (i, op) in order.into_iter().enumerate() {
            if i == 15 {
                t.request_snapshot(boundary as u64, 5, &mut on);
            }
            t.push(op, &mut on);
        }
        t.finish(&mut on);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, SnapshotPoint { number: 1, boundary: 23, ts_ns: 5, late_by: 0, missing: 0 });
        assert_eq!(got[0].1, summary(&want));
    }

    #[test]
    fn snapshot_past_the_end_and_gaps() {
        let ops = scenario();
        let mut t = Tracker::new();
        let mut got = Vec::new();
        let mut on = |p: &SnapshotPoint, s: &State| got.push((*p, s.totals.alloc_count + s.totals.free_count));
        t.request_snapshot(3, 1, &mut on);
        t.request_snapshot(1000, 2, &mut on);
        // Drop seq 2 (lost): nothing after it can be applied until the end.
        for op in ops.iter().filter(|o| o.seq() != 2) {
            t.push(op.clone(), &mut on);
        }
        assert_eq!(t.next_seq(), 2);
        assert_eq!(t.pending(), ops.len() - 3);
        t.push(ops[0].clone(), &mut on); // a duplicate
        t.finish(&mut on);
        let n = ops.len() as u64;
        assert_eq!(got.len(), 2);
        // Snapshot 1 (boundary 3) holds seqs 0 and 1; seq 2 is missing.
        assert_eq!(got[0], (SnapshotPoint { number: 1, boundary: 3, ts_ns: 1, late_by: 0, missing: 1 }, 2));
        assert_eq!(got[1].0.missing, 1 + 1000 - n);
        assert_eq!(got[1].1, n - 1);
        assert_eq!((t.lost(), t.duplicates()), (1, 1));
    }

    #[test]
    fn out_of_memory_is_told_when_applied_in_sequence_order() {
        #[derive(Default)]
        struct Seen(Vec<(u64, u64, u64)>);
        impl Observer for Seen {
            fn snapshot(&mut self, _: &SnapshotPoint, _: &State) {}
            fn out_of_memory(&mut self, f: &Failed, s: &State) {
                self.0.push((f.seq, s.totals.alloc_count, s.totals.failed_count));
            }
        }
        let mut not_oom = failed(4, 40, 10);
        if let Op::Failed(f) = &mut not_oom {
            f.result = 1;
        }
        let ops = [
            alloc(0, 0, 0x100, 1, Kind::Device, 0, 1),
            alloc(1, 10, 0x200, 1, Kind::Device, 0, 1),
            failed(2, 20, 1 << 40),
            alloc(3, 30, 0x300, 1, Kind::Device, 0, 1),
            not_oom,
            failed(5, 50, 1 << 40),
        ];
        let mut t = Tracker::new();
        let mut seen = Seen::default();
        for i in [2, 3, 0, 5, 1, 4] {
            t.push(ops[i].clone(), &mut seen);
        }
        t.finish(&mut seen);
        // Each failure sees exactly the events before it, and itself.
        assert_eq!(seen.0, vec![(2, 2, 1), (5, 3, 3)]);
    }

    #[test]
    fn late_snapshot_request_says_so() {
        let mut t = Tracker::new();
        let mut got = Vec::new();
        let mut on = |p: &SnapshotPoint, _: &State| got.push(*p);
        for op in scenario().into_iter().take(5) {
            t.push(op, &mut on);
        }
        t.request_snapshot(3, 9, &mut on);
        assert_eq!(got, vec![SnapshotPoint { number: 1, boundary: 3, ts_ns: 9, late_by: 2, missing: 0 }]);
    }

    /// A free still inside its call when the snapshot was asked for (the writer's
    /// `FreePending`) of `addr`.
    fn in_progress(seq: u64, ts: u64, addr: u64) -> Op {
        Op::FreePending(gpushim_wire::FreePending {
            seq,
            ts_ns: ts,
            addr,
            api: gpushim_wire::Api::CudaFree,
            stream: 0,
            tid: 7,
        })
    }

    /// (live bytes, allocations, frees, unknown frees, failed frees, replaced) of a state.
    fn counts(s: &State) -> (u64, u64, u64, u64, u64, u64) {
        let t = &s.totals;
        (t.gauge.live_bytes, t.alloc_count, t.free_count, t.unknown_free_count, t.failed_free_count, t.replaced_count)
    }

    #[test]
    fn a_free_in_progress_does_not_hold_a_snapshot_back_and_stays_live_in_it() {
        let mut t = Tracker::new();
        let mut got = Vec::new();
        let mut on = |p: &SnapshotPoint, s: &State| got.push((p.boundary, counts(s)));
        t.push(alloc(0, 0, 0x100, 7, Kind::Device, 0, 1), &mut on);
        t.request_snapshot(3, 5, &mut on);
        t.push(alloc(2, 2, 0x200, 1, Kind::Device, 0, 1), &mut on);
        assert_eq!(t.pending(), 1, "seq 1 (the free) has not arrived: no snapshot yet");
        t.push(in_progress(1, 1, 0x100), &mut on);
        t.push(free(1, 9, 0x100, 0), &mut on);
        // The snapshot was out as soon as the free in progress arrived, with its memory live.
        assert_eq!(got, vec![(3, (8, 2, 0, 0, 0, 0))]);
        assert_eq!(counts(t.state()), (1, 2, 1, 0, 0, 0));
        assert_eq!((t.lost(), t.duplicates(), t.pending()), (0, 0, 0));
    }

    #[test]
    fn a_free_in_progress_that_fails_leaves_the_memory_live() {
        let mut t = Tracker::new();
        let mut none = |_: &SnapshotPoint, _: &State| {};
        t.push(alloc(0, 0, 0x100, 7, Kind::Device, 0, 1), &mut none);
        t.push(in_progress(1, 1, 0x100), &mut none);
        t.push(free(1, 9, 0x100, 700), &mut none);
        assert_eq!(counts(t.state()), (7, 1, 0, 0, 1, 0));
    }

    #[test]
    fn an_address_reused_while_its_free_was_in_progress_counts_that_free_once() {
        let mut t = Tracker::new();
        let mut none = |_: &SnapshotPoint, _: &State| {};
        t.push(alloc(0, 0, 0x100, 7, Kind::Device, 0, 1), &mut none);
        t.push(in_progress(1, 1, 0x100), &mut none);
        // Another thread got the same address back: the free had completed.
        t.push(alloc(2, 2, 0x100, 3, Kind::Device, 0, 2), &mut none);
        assert_eq!(counts(t.state()), (3, 2, 1, 0, 0, 0));
        t.push(free(1, 9, 0x100, 0), &mut none);
        assert_eq!(counts(t.state()), (3, 2, 1, 0, 0, 0));
        assert_eq!(t.duplicates(), 0);
    }

    #[test]
    fn a_free_that_arrives_before_its_in_progress_mark_is_applied_once() {
        for order in [[0, 1, 2, 3], [0, 2, 1, 3], [2, 3, 1, 0], [3, 2, 0, 1]] {
            let ops = [
                alloc(0, 0, 0x100, 7, Kind::Device, 0, 1),
                free(1, 9, 0x100, 0),
                in_progress(1, 1, 0x100),
                alloc(2, 10, 0x300, 1, Kind::Device, 0, 1),
            ];
            let mut t = Tracker::new();
            let mut none = |_: &SnapshotPoint, _: &State| {};
            for i in order {
                t.push(ops[i].clone(), &mut none);
            }
            t.finish(&mut none);
            assert_eq!(counts(t.state()), (1, 2, 1, 0, 0, 0), "order {order:?}");
            assert_eq!((t.lost(), t.duplicates(), t.pending()), (0, 0, 0), "order {order:?}");
        }
    }

    #[test]
    fn an_unmap_in_progress_keeps_the_mapping_and_its_released_memory_until_it_returns() {
        use gpushim_wire::{Alloc, Api, Free, FreePending, Map, Unmap};
        let create = Op::Alloc(Alloc {
            seq: 0,
            ts_ns: 0,
            addr: 0x10,
            size: 64,
            kind: Kind::Device,
            api: Api::CuMemCreate,
            device: 0,
            stream: 0,
            tid: 7,
            stack: 1,
            ctx: 0,
        });
        let map = Op::Map(Map { seq: 1, ts_ns: 1, addr: 0x9000, size: 64, handle: 0x10, tid: 7 });
        let release =
            Op::Free(Free { seq: 2, ts_ns: 2, addr: 0x10, api: Api::CuMemRelease, stream: 0, tid: 7, result: 0 });
        let pending =
            Op::FreePending(FreePending { seq: 3, ts_ns: 3, addr: 0x9000, api: Api::CuMemUnmap, stream: 64, tid: 7 });
        let unmap = Op::Unmap(Unmap { seq: 3, ts_ns: 9, addr: 0x9000, size: 64, tid: 7, result: 0 });
        let mut t = Tracker::new();
        let mut got = Vec::new();
        let mut on = |p: &SnapshotPoint, s: &State| got.push((p.boundary, counts(s), s.vmm.devices[&0].mapped_bytes));
        t.request_snapshot(4, 5, &mut on);
        for op in [create, map, release, pending] {
            t.push(op, &mut on);
        }
        assert_eq!(got, vec![(4, (64, 1, 0, 0, 0, 0), 64)], "released but mapped: still live in the snapshot");
        let mut none = |_: &SnapshotPoint, _: &State| {};
        t.push(unmap.clone(), &mut none);
        assert_eq!((counts(t.state()), t.state().vmm.devices[&0].mapped_bytes), ((0, 1, 1, 0, 0, 0), 0));
        t.push(unmap, &mut none);
        assert_eq!((t.duplicates(), t.state().totals.free_count), (1, 1));
    }

    /// The same address allocated and freed 100 times (a caching allocator's pattern), with a
    /// window of 8 slots: the free numbered 1 and the allocation numbered 4 come after
    /// everything else. The buffer gives up on them when full (counted), keeps within its 8
    /// slots, and applies them when they come: the totals are exact, nothing is lost.
    #[test]
    fn a_full_buffer_releases_the_oldest_and_applies_late_events_when_they_come() {
        let slot = std::mem::size_of::<Option<Op>>();
        let mut ops = Vec::new();
        for i in 0..100u64 {
            ops.push(alloc(2 * i, 10 * i, 0xa000, 64, Kind::Device, 0, 1));
            ops.push(free(2 * i + 1, 10 * i + 5, 0xa000, 0));
        }
        let mut t = Tracker::with_bound(8 * slot);
        let mut none = |_: &SnapshotPoint, _: &State| {};
        let mut most = 0;
        for op in ops.iter().filter(|o| o.seq() != 1 && o.seq() != 4) {
            t.push(op.clone(), &mut none);
            most = most.max(t.buffer_bytes());
        }
        assert!(most <= 8 * slot, "{most} bytes");
        assert_eq!(t.pending(), 0);
        assert_eq!((t.state().totals.reorder_overflow, t.lost()), (2, 2));
        t.push(ops[1].clone(), &mut none);
        t.push(ops[4].clone(), &mut none);
        t.finish(&mut none);
        let tot = &t.state().totals;
        assert_eq!((tot.alloc_count, tot.free_count, tot.gauge.live_bytes, tot.gauge.live_count), (100, 100, 0, 0));
        assert_eq!((tot.replaced_count, tot.unknown_free_count), (0, 0));
        assert_eq!((tot.reorder_overflow, tot.late_events), (2, 2));
        assert_eq!((t.lost(), t.duplicates()), (0, 0));
        // Without a bound on the window all 197 events after the missing one waited.
        let mut big = Tracker::new();
        for op in ops.iter().filter(|o| o.seq() != 1) {
            big.push(op.clone(), &mut none);
        }
        assert_eq!(big.pending(), 198);
        assert_eq!(big.state().totals.reorder_overflow, 0);
    }

    /// An event far past the window (a corrupt sequence number) does not allocate a window to
    /// it: the numbers before it are given up on, counted, and the buffer stays within bound.
    #[test]
    fn a_far_sequence_number_does_not_grow_the_buffer() {
        let slot = std::mem::size_of::<Option<Op>>();
        let mut t = Tracker::with_bound(4 * slot);
        let mut none = |_: &SnapshotPoint, _: &State| {};
        t.push(alloc(0, 0, 0x100, 1, Kind::Device, 0, 1), &mut none);
        t.push(alloc(1 << 40, 1, 0x200, 1, Kind::Device, 0, 1), &mut none);
        assert!(t.buffer_bytes() <= 4 * slot);
        // It waits at the window's far end for the three numbers before it.
        assert_eq!((t.state().totals.alloc_count, t.pending()), (1, 1));
        assert_eq!(t.state().totals.reorder_overflow, (1 << 40) - 4);
        t.finish(&mut none);
        assert_eq!((t.lost(), t.state().totals.alloc_count), ((1 << 40) - 1, 2));
    }

    /// An allocation and its free both given up on, the address taken and freed again before
    /// they come (a caching allocator under 64 threads): counted as allocated and freed once.
    #[test]
    fn a_late_allocation_and_its_late_free_around_a_reuse_count_once() {
        let slot = std::mem::size_of::<Option<Op>>();
        let a = 0xa000;
        // 0: alloc A (late), 1: free A (late), 2: alloc A, 3..: other addresses, then free A.
        let mut ops =
            vec![alloc(0, 0, a, 8, Kind::Device, 0, 1), free(1, 1, a, 0), alloc(2, 2, a, 16, Kind::Device, 0, 1)];
        for i in 3..20u64 {
            ops.push(alloc(i, i, 0x10_0000 + i * 0x100, 1, Kind::Device, 0, 2));
        }
        ops.push(free(20, 20, a, 0));
        let mut t = Tracker::with_bound(4 * slot);
        let mut none = |_: &SnapshotPoint, _: &State| {};
        for op in &ops[2..20] {
            t.push(op.clone(), &mut none);
        }
        // The late allocation comes while the address is live again; the late free after
        // that allocation was freed too.
        t.push(ops[0].clone(), &mut none);
        t.push(ops[20].clone(), &mut none);
        t.push(ops[1].clone(), &mut none);
        t.finish(&mut none);
        let tot = &t.state().totals;
        assert_eq!((tot.alloc_count, tot.free_count, tot.gauge.live_count), (19, 2, 17));
        assert_eq!((tot.replaced_count, tot.unknown_free_count, tot.late_events), (0, 0, 2));
        assert_eq!(t.lost(), 0);
    }
}
