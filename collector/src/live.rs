//! The live set and its accounting, and the reorder buffer that feeds it in sequence order.
//!
//! Everything here is pure: no I/O, no clocks. [`Tracker`] takes [`Op`]s in whatever order they
//! arrive, applies them to a [`State`] strictly in `seq` order, and calls back when a snapshot
//! boundary is reached, so that a snapshot holds exactly the events with `seq < boundary`.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use gpushim_wire::{Alloc, Api, Failed, Free, Kind};

use crate::series::Series;
use crate::timeline::Timeline;

/// At most this many points are kept in a site's [`SiteSeries`].
pub const SERIES_MAX: usize = 256;

/// If more than this many events wait for a missing sequence number, the number is given up
/// as lost and application resumes at the lowest waiting one. Bounds the reorder buffer's
/// memory (an event is under 100 bytes: at most about 400 MiB) when the shim drops events.
///
/// While the stream lasts the shim drops no numbered event, but one can be very late: a free
/// takes its number before the real call, which may wait on the device or a driver lock, and
/// any thread may be preempted between taking a number and queueing its event. With 64
/// threads allocating on 2 cores, events arrived up to 700,000 places late (measured with the
/// stand-ins; `faults::sixty_four_threads_give_exact_totals_without_deadlock`), past the
/// earlier bound of 2^18, which turned late events into "lost" ones and wrong totals.
pub const MAX_PENDING: usize = 1 << 22;

/// At most this many failed allocations are kept individually; the rest are only counted.
pub const MAX_FAILURES: usize = 1000;

/// The result code of an out-of-memory failure (`CUDA_ERROR_OUT_OF_MEMORY` in the driver API,
/// `cudaErrorMemoryAllocation` in the runtime API: both are 2).
pub const OUT_OF_MEMORY: i32 = 2;

/// A hasher for the collector's integer keys (addresses, handles, stack ids): one multiply
/// per word and a folded multiply at the end. The keys come from the traced program, not from
/// an adversary, so SipHash's flood resistance is not needed, and it was a tenth of the time
/// spent per event.
#[derive(Clone, Copy, Debug, Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        // Fold the 128-bit product so that the low bits (the bucket index) depend on every
        // bit of the key: addresses are page-aligned, their low bits are all zero.
        let p = u128::from(self.0) * 0xa076_1d64_78bd_642f;
        (p as u64) ^ ((p >> 64) as u64)
    }
}

/// A `HashMap` keyed by integers, hashed with [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// One event that takes part in the sequence order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A successful allocation.
    Alloc(Alloc),
    /// A call to a free function.
    Free(Free),
    /// A failed allocation.
    Failed(Failed),
}

impl Op {
    /// The event's global sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            Op::Alloc(a) => a.seq,
            Op::Free(f) => f.seq,
            Op::Failed(f) => f.seq,
        }
    }

    /// The event's monotonic timestamp, ns.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Op::Alloc(a) => a.ts_ns,
            Op::Free(f) => f.ts_ns,
            Op::Failed(f) => f.ts_ns,
        }
    }
}

/// Live bytes and count with their high-water mark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauge {
    /// Bytes currently allocated.
    pub live_bytes: u64,
    /// Allocations currently live.
    pub live_count: u64,
    /// Highest `live_bytes` ever reached, bytes.
    pub peak_live_bytes: u64,
}

impl Gauge {
    fn add(&mut self, size: u64) {
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.live_count += 1;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    fn sub(&mut self, size: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.live_count = self.live_count.saturating_sub(1);
    }
}

/// Process-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Live bytes, count and peak over all kinds.
    pub gauge: Gauge,
    /// Successful allocations.
    pub alloc_count: u64,
    /// Bytes of all successful allocations.
    pub alloc_bytes: u64,
    /// Successful frees of known allocations.
    pub free_count: u64,
    /// Failed allocation calls.
    pub failed_count: u64,
    /// Free calls (successful or not) of an address or handle that was not live.
    pub unknown_free_count: u64,
    /// Free calls of a live allocation that returned an error (it stays live).
    pub failed_free_count: u64,
    /// Allocations that returned an address that was still live: a free was missed.
    pub replaced_count: u64,
}

/// One live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Size in bytes.
    pub size: u64,
    /// Kind of memory.
    pub kind: Kind,
    /// The allocating entry point.
    pub api: Api,
    /// Device ordinal, -1 for host or unknown.
    pub device: i32,
    /// Stack id of the allocation (`NO_STACK` when none was recorded).
    pub site: u32,
    /// Sequence number of the allocation.
    pub seq: u64,
    /// Monotonic time of the allocation, ns.
    pub ts_ns: u64,
}

/// A site's live bytes over time (bytes, at monotonic ns), at most [`SERIES_MAX`] points,
/// evenly thinned (see [`Series`]), so memory per site is bounded.
pub type SiteSeries = Series<u64, SERIES_MAX>;

/// Everything known about one allocation site (one distinct stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteStats {
    /// The stack id, or `NO_STACK`.
    pub id: u32,
    /// Kind of the site's first allocation.
    pub kind: Kind,
    /// Distinct allocating entry points, in order of first use.
    pub apis: Vec<Api>,
    /// Live bytes, count and peak at this site.
    pub gauge: Gauge,
    /// Successful allocations made here.
    pub alloc_count: u64,
    /// Their total size, bytes.
    pub alloc_bytes: u64,
    /// Successful frees of allocations made here.
    pub free_count: u64,
    /// Monotonic time of the first allocation, ns.
    pub first_alloc_ns: u64,
    /// Monotonic time of the latest allocation, ns.
    pub last_alloc_ns: u64,
    /// Live bytes over time.
    pub series: SiteSeries,
}

/// A failed allocation, as kept for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The entry point.
    pub api: Api,
    /// The kind it would have been.
    pub kind: Kind,
    /// Bytes requested.
    pub size: u64,
    /// The CUDA result code.
    pub result: i32,
    /// Stack id, or `NO_STACK`.
    pub site: u32,
    /// Device ordinal, or -1.
    pub device: i32,
    /// Monotonic time, ns.
    pub ts_ns: u64,
}

/// The live set and all accounting, as of the events applied so far.
#[derive(Clone, Debug, Default)]
pub struct State {
    live: IntMap<(bool, u64), Entry>,
    /// Process-wide counters.
    pub totals: Totals,
    /// Per kind, indexed by `Kind as usize` (device, managed, pinned_host).
    pub kinds: [Gauge; 3],
    /// Per device ordinal (>= 0), for device and managed memory only.
    pub devices: BTreeMap<i32, Gauge>,
    /// Per site, keyed by stack id.
    pub sites: IntMap<u32, SiteStats>,
    /// The first [`MAX_FAILURES`] failed allocations, in sequence order.
    pub failures: Vec<Failure>,
    /// Earliest timestamp of an applied event, ns; `None` before the first.
    pub first_ts_ns: Option<u64>,
    /// Latest timestamp of an applied event, ns.
    pub last_ts_ns: u64,
    /// Live bytes per kind and device over time.
    pub timeline: Timeline,
}

impl State {
    /// The live allocations, in no particular order. The key is (is a `cuMemCreate` handle,
    /// address or handle).
    pub fn live(&self) -> impl Iterator<Item = (&(bool, u64), &Entry)> {
        self.live.iter()
    }

    /// Applies one event. Call in sequence order.
    pub fn apply(&mut self, op: &Op) {
        let ts = op.ts_ns();
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts, |t| t.min(ts)));
        self.last_ts_ns = self.last_ts_ns.max(ts);
        match op {
            Op::Alloc(a) => self.alloc(a),
            Op::Free(f) => self.free(f),
            Op::Failed(f) => {
                self.totals.failed_count += 1;
                if self.failures.len() < MAX_FAILURES {
                    self.failures.push(Failure {
                        api: f.api,
                        kind: f.kind,
                        size: f.size,
                        result: f.result,
                        site: f.stack,
                        device: f.device,
                        ts_ns: f.ts_ns,
                    });
                }
            }
        }
    }

    fn alloc(&mut self, a: &Alloc) {
        let key = (a.api.is_handle(), a.addr);
        let e = Entry {
            size: a.size,
            kind: a.kind,
            api: a.api,
            device: a.device,
            site: a.stack,
            seq: a.seq,
            ts_ns: a.ts_ns,
        };
        // One lookup: the entry goes in first, a live one it replaces is released after.
        if let Some(old) = self.live.insert(key, e) {
            self.totals.replaced_count += 1;
            self.release(&old, a.ts_ns);
        }
        self.totals.alloc_count += 1;
        self.totals.alloc_bytes = self.totals.alloc_bytes.saturating_add(a.size);
        self.totals.gauge.add(a.size);
        self.kinds[a.kind as usize].add(a.size);
        if let Some(d) = device_key(&e) {
            self.devices.entry(d).or_default().add(a.size);
        }
        let site = self.sites.entry(a.stack).or_insert_with(|| SiteStats {
            id: a.stack,
            kind: a.kind,
            apis: Vec::new(),
            gauge: Gauge::default(),
            alloc_count: 0,
            alloc_bytes: 0,
            free_count: 0,
            first_alloc_ns: a.ts_ns,
            last_alloc_ns: a.ts_ns,
            series: SiteSeries::default(),
        });
        if !site.apis.contains(&a.api) {
            site.apis.push(a.api);
        }
        site.gauge.add(a.size);
        site.alloc_count += 1;
        site.alloc_bytes = site.alloc_bytes.saturating_add(a.size);
        site.first_alloc_ns = site.first_alloc_ns.min(a.ts_ns);
        site.last_alloc_ns = site.last_alloc_ns.max(a.ts_ns);
        site.series.record(a.ts_ns, site.gauge.live_bytes);
        self.timeline.record(a.ts_ns, &self.kinds, &self.devices);
    }

    fn free(&mut self, f: &Free) {
        let key = (f.api.is_handle(), f.addr);
        // `cudaFree(NULL)` and friends are documented no-ops (often used to create the
        // context); they free nothing and are not "unknown".
        if f.addr == 0 && !key.0 {
            return;
        }
        // A free of an address that is not live is unknown whatever CUDA answered (it usually
        // rejects it); a rejected free of a live address leaves it live.
        let e = match self.live.entry(key) {
            std::collections::hash_map::Entry::Vacant(_) => {
                self.totals.unknown_free_count += 1;
                return;
            }
            std::collections::hash_map::Entry::Occupied(_) if f.result != 0 => {
                self.totals.failed_free_count += 1;
                return;
            }
            std::collections::hash_map::Entry::Occupied(o) => o.remove(),
        };
        self.totals.free_count += 1;
        if let Some(site) = self.sites.get_mut(&e.site) {
            site.free_count += 1;
        }
        self.release(&e, f.ts_ns);
    }

    /// Takes a live entry out of every gauge (it was freed or replaced).
    fn release(&mut self, e: &Entry, ts_ns: u64) {
        self.totals.gauge.sub(e.size);
        self.kinds[e.kind as usize].sub(e.size);
        if let Some(d) = device_key(e) {
            if let Some(g) = self.devices.get_mut(&d) {
                g.sub(e.size);
            }
        }
        if let Some(site) = self.sites.get_mut(&e.site) {
            site.gauge.sub(e.size);
            site.series.record(ts_ns, site.gauge.live_bytes);
        }
        self.timeline.record(ts_ns, &self.kinds, &self.devices);
    }
}

/// The device ordinal an entry counts against, if any: device and managed memory with a
/// known ordinal.
fn device_key(e: &Entry) -> Option<i32> {
    (e.kind != Kind::PinnedHost && e.device >= 0).then_some(e.device)
}

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

/// Puts events back in sequence order and applies them to a [`State`].
#[derive(Debug, Default)]
pub struct Tracker {
    state: State,
    next_seq: u64,
    pending: BTreeMap<u64, Op>,
    /// Waiting snapshot requests, sorted by (boundary, number).
    snapshots: Vec<SnapshotPoint>,
    requested: u32,
    lost: u64,
    duplicates: u64,
}

impl Tracker {
    /// An empty tracker expecting sequence number 0 first.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// The state as of every event applied so far.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The sequence number to be applied next.
    #[cfg(test)]
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Sequence numbers skipped because they never arrived.
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
        self.pending.len()
    }

    /// Takes one event; applies it and every waiting event that follows it in sequence, and
    /// tells `obs` of each snapshot boundary reached and each out-of-memory failure applied.
    pub fn push(&mut self, op: Op, obs: &mut dyn Observer) {
        let seq = op.seq();
        if seq < self.next_seq || self.pending.contains_key(&seq) {
            self.duplicates += 1;
            return;
        }
        // No waiting snapshot has a boundary <= next_seq (they are emitted as soon as it is
        // reached), so the next event in order can be applied without going through the map.
        if seq == self.next_seq {
            self.apply(&op, obs);
        } else {
            self.pending.insert(seq, op);
        }
        self.drain(obs);
        if self.pending.len() > MAX_PENDING {
            self.skip_gap(obs);
        }
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
        while !self.pending.is_empty() {
            self.skip_gap(obs);
        }
        for mut s in std::mem::take(&mut self.snapshots) {
            s.missing = s.missing.saturating_add(s.boundary.saturating_sub(self.next_seq));
            obs.snapshot(&s, &self.state);
        }
    }

    fn drain(&mut self, obs: &mut dyn Observer) {
        loop {
            self.emit_ready(obs);
            match self.pending.first_entry() {
                Some(e) if *e.key() == self.next_seq => {
                    let op = e.remove();
                    self.apply(&op, obs);
                }
                _ => break,
            }
        }
    }

    /// Gives up on the sequence numbers before the lowest waiting event.
    fn skip_gap(&mut self, obs: &mut dyn Observer) {
        let Some(&first) = self.pending.keys().next() else {
            return;
        };
        let gap = first - self.next_seq;
        for s in &mut self.snapshots {
            s.missing = s.missing.saturating_add(s.boundary.min(first).saturating_sub(self.next_seq));
        }
        self.lost = self.lost.saturating_add(gap);
        self.next_seq = first;
        self.drain(obs);
    }

    fn emit_ready(&mut self, obs: &mut dyn Observer) {
        let n = self.snapshots.partition_point(|s| s.boundary <= self.next_seq);
        for s in self.snapshots.drain(..n) {
            obs.snapshot(&s, &self.state);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gpushim_testkit as kit;
    use gpushim_wire::{Event, NO_STACK};

    /// The [`Op`] of an allocation, free or failure event.
    pub(crate) fn op(e: Event) -> Op {
        match e {
            Event::Alloc(a) => Op::Alloc(a),
            Event::Free(f) => Op::Free(f),
            Event::Failed(f) => Op::Failed(f),
            e => panic!("not an event in sequence order: {e:?}"),
        }
    }

    /// An allocation of `kind` memory on `device` (see [`kit::alloc_on`]).
    pub(crate) fn alloc(seq: u64, ts: u64, addr: u64, size: u64, kind: Kind, device: i32, stack: u32) -> Op {
        op(kit::alloc_on(seq, ts, addr, size, kind, device, stack))
    }

    /// A `cudaFree` of `addr` that returned `result` (0: success).
    pub(crate) fn free(seq: u64, ts: u64, addr: u64, result: i32) -> Op {
        op(kit::free_with_result(seq, ts, addr, result))
    }

    /// A `cudaMalloc` of `size` bytes from stack 7 that failed with out of memory.
    fn failed(seq: u64, ts: u64, size: u64) -> Op {
        op(kit::failed(seq, ts, size, 7, 2))
    }

    fn g(live_bytes: u64, live_count: u64, peak_live_bytes: u64) -> Gauge {
        Gauge { live_bytes, live_count, peak_live_bytes }
    }

    fn apply_all(ops: &[Op]) -> State {
        let mut s = State::default();
        for op in ops {
            s.apply(op);
        }
        s
    }

    #[test]
    fn accounting() {
        let ops = vec![
            alloc(0, 100, 0x1000, 100, Kind::Device, 0, 1),
            alloc(1, 110, 0x2000, 50, Kind::Device, 1, 1),
            alloc(2, 120, 0x3000, 30, Kind::Managed, 0, 2),
            alloc(3, 130, 0x4000, 20, Kind::PinnedHost, 0, 3),
            free(4, 140, 0x1000, 0),                        // known free
            free(5, 150, 0x9999, 0),                        // unknown
            free(11, 155, 0x8888, 1),                       // unknown and rejected by CUDA
            free(6, 160, 0x2000, 1),                        // failed free: 0x2000 stays live
            free(7, 165, 0, 0),                             // cudaFree(NULL): ignored
            alloc(8, 170, 0x3000, 70, Kind::Managed, 0, 2), // replaces the live 30 bytes
            failed(9, 180, 1 << 40),
            alloc(10, 190, 0x5000, 10, Kind::Device, -1, NO_STACK),
        ];
        let s = apply_all(&ops);
        let t = s.totals;
        assert_eq!(t.gauge, g(50 + 70 + 20 + 10, 4, 200));
        assert_eq!(t.alloc_count, 6);
        assert_eq!(t.alloc_bytes, 100 + 50 + 30 + 20 + 70 + 10);
        assert_eq!(t.free_count, 1);
        assert_eq!(t.unknown_free_count, 2);
        assert_eq!(t.failed_free_count, 1);
        assert_eq!(t.replaced_count, 1);
        assert_eq!(t.failed_count, 1);
        assert_eq!(s.kinds[Kind::Device as usize], g(60, 2, 150));
        assert_eq!(s.kinds[Kind::Managed as usize], g(70, 1, 70));
        assert_eq!(s.kinds[Kind::PinnedHost as usize], g(20, 1, 20));
        // Device 0: 100 device + 30 managed, then −100, then managed 30 → 70. Pinned host and
        // device −1 are not listed.
        assert_eq!(s.devices.len(), 2);
        assert_eq!(s.devices[&0], g(70, 1, 130));
        assert_eq!(s.devices[&1], g(50, 1, 50));
        let s1 = &s.sites[&1];
        assert_eq!((s1.gauge, s1.alloc_count, s1.alloc_bytes, s1.free_count), (g(50, 1, 150), 2, 150, 1));
        assert_eq!((s1.first_alloc_ns, s1.last_alloc_ns), (100, 110));
        assert_eq!(s1.apis, vec![Api::CudaMalloc]);
        let s2 = &s.sites[&2];
        assert_eq!((s2.gauge, s2.alloc_count, s2.free_count, s2.kind), (g(70, 1, 70), 2, 0, Kind::Managed));
        assert_eq!(s.sites[&NO_STACK].gauge, g(10, 1, 10));
        assert!(!s.sites.contains_key(&7), "a failure makes no site");
        assert_eq!(s.failures.len(), 1);
        assert_eq!((s.failures[0].size, s.failures[0].site, s.failures[0].result), (1 << 40, 7, 2));
        assert_eq!(s.live().count(), 4);
        assert_eq!((s.first_ts_ns, s.last_ts_ns), (Some(100), 190));
    }

    #[test]
    fn handles_and_pointers_are_separate() {
        let mut s = State::default();
        s.apply(&Op::Alloc(Alloc {
            seq: 0,
            ts_ns: 1,
            addr: 5,
            size: 10,
            kind: Kind::Device,
            api: Api::CuMemCreate,
            device: 0,
            stream: 0,
            tid: 1,
            stack: 0,
        }));
        s.apply(&free(1, 2, 5, 0)); // cudaFree(5) is a pointer, not the handle
        assert_eq!((s.totals.gauge.live_count, s.totals.unknown_free_count), (1, 1));
        s.apply(&Op::Free(Free { seq: 2, ts_ns: 3, addr: 5, api: Api::CuMemRelease, stream: 0, tid: 1, result: 0 }));
        assert_eq!((s.totals.gauge.live_count, s.totals.free_count), (0, 1));
    }

    #[test]
    fn series_is_bounded_and_exact_at_its_points() {
        let mut ser = SiteSeries::default();
        for i in 0..10_000u64 {
            ser.record(i * 10, i);
        }
        assert!(ser.points().len() <= SERIES_MAX);
        assert!(ser.points().len() >= SERIES_MAX / 2);
        for &(t, v) in ser.points() {
            assert_eq!(t, v * 10);
        }
        assert!(ser.points().windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(ser.value_at(0), 0);
        let (t, v) = ser.points()[10];
        assert_eq!(ser.value_at(t + 1), v);
    }

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
}
