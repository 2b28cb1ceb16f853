//! The live set: every allocation not yet freed, keyed by address or handle, and the
//! accounting each event makes of it ([`State`]).
//!
//! Everything here is pure: no I/O, no clocks. Events must be applied in sequence order; the
//! reorder buffer ([`Tracker`](crate::account::reorder::Tracker)) puts them in that order.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use gpushim_wire::{Alloc, Api, Free, Kind};

mod graphs;
mod op;
mod teardown;

pub use graphs::{GraphStats, NodeInfo};
pub use op::Op;
pub use teardown::ContextReset;

use crate::account::gauge::{SiteSeries, SiteStats};
use crate::account::timeline::Timeline;
use crate::account::vmm::{Released, Vmm};
use crate::report::Gauge;
use crate::report::Totals;

/// At most this many failed allocations are kept individually; the rest are only counted.
pub const MAX_FAILURES: usize = 1000;

/// At most this many sites (distinct stacks) are kept when `GPUSHIM_MAX_STACKS` is not set
/// (see [`State::set_max_stacks`]). A site takes up to about 4.5 KiB (its 256-point series,
/// 4 KiB, and its counters), so 100,000 sites stay under about 450 MiB in the worst case and
/// under a few MiB for sites that allocated a few times.
pub const DEFAULT_MAX_STACKS: usize = 100_000;

/// At most this many frees of addresses that were not live are remembered while events given
/// up on by the reorder buffer may still come (see [`State::apply_late`]).
pub const MAX_EARLY_FREES: usize = 65_536;

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
    /// Its context when the program created contexts of its own, else 0 (see [`Alloc::ctx`]).
    pub ctx: u64,
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
    /// Frees applied as in progress ([`Op::FreePending`]), by sequence number, until their
    /// [`Free`] arrives: the key they free, or `None` once the address was reused (which
    /// proves the free completed).
    pending_frees: IntMap<u64, Option<(bool, u64)>>,
    /// The same frees by key.
    pending_by_key: IntMap<(bool, u64), u64>,
    /// Contexts torn down: the API, the device, and the allocations and bytes freed with them.
    pub resets: Vec<ContextReset>,
    /// Allocations a context teardown freed while they were live, kept for the leak ranking
    /// (a leak that only a `cudaDeviceReset` ended is still a leak, as compute-sanitizer's
    /// leak check reports it then).
    pub swept: Vec<Entry>,
    /// Start of the exit heap walk (monotonic ns), once it is known: a CPython program's
    /// `atexit` phase began then, and what is freed from then on is freed by the interpreter's
    /// teardown (`__del__` of objects in globals), not by the program's own work.
    pub teardown_from_ns: Option<u64>,
    /// Allocations live when the exit heap walk started that a free at or after
    /// [`State::teardown_from_ns`] released, with their keys: they stay in every gauge and in
    /// [`State::live`], so the final report's live set is the one at the walk's start (a leak
    /// held in globals is still a leak though teardown frees it).
    pub teardown: Vec<((bool, u64), Entry)>,
    /// Contexts the program created and has not destroyed, with their device. An allocation
    /// whose context is not among them is in a primary context.
    created: IntMap<u64, i32>,
    /// The virtual memory management API's handles, references and mappings.
    pub vmm: Vmm,
    /// `cuMemUnmap` calls applied as in progress (a [`FreePending`] with that API), by
    /// sequence number, until their [`Unmap`] arrives: the mappings stay meanwhile.
    pending_unmaps: IntMap<u64, ()>,
    /// Graph allocation nodes by virtual address: where each was made (see [`GraphNode`]).
    graph_nodes: IntMap<u64, NodeInfo>,
    /// Executable graphs with memory nodes, by handle.
    graph_execs: IntMap<u64, graphs::ExecTable>,
    /// Counters of graph memory, for the report.
    pub graphs: GraphStats,
    /// The most sites kept (0: [`DEFAULT_MAX_STACKS`]); see [`State::set_max_stacks`].
    max_stacks: usize,
    /// Sites evicted since the caller last took them ([`State::take_evicted`]).
    evicted: Vec<u32>,
    /// The number of sites above which the next eviction is tried: the bound, or more when
    /// the last try found too few sites without live allocations (so that a program with more
    /// live stacks than the bound does not pay a scan per new site).
    evict_at: usize,
    /// Eviction scans run so far (each reads every site).
    evict_scans: u64,
    /// Whether events given up on by the reorder buffer may still arrive: frees of addresses
    /// that are not live are remembered in `early_frees` then.
    late_expected: bool,
    /// Frees of keys that were not live, applied while `late_expected`: key → sequence number.
    early_frees: IntMap<(bool, u64), u64>,
    /// Live allocations replaced by a later one at the same key, while `late_expected`: key →
    /// the replacing allocation's sequence number.
    replaced_keys: IntMap<(bool, u64), u64>,
}

impl State {
    /// The live allocations, in no particular order. The key is (is a `cuMemCreate` handle,
    /// address or handle).
    /// Allocations only the interpreter's teardown freed ([`State::teardown`]) are among them.
    pub fn live(&self) -> impl Iterator<Item = (&(bool, u64), &Entry)> {
        self.live.iter().chain(self.teardown.iter().map(|(k, e)| (k, e)))
    }

    /// Allocations only the interpreter's teardown freed, and their bytes.
    pub fn teardown_freed(&self) -> (u64, u64) {
        self.teardown.iter().fold((0, 0), |(c, b), (_, e)| (c + 1, b.saturating_add(e.size)))
    }

    /// Keeps `e`, freed at `ts_ns`, counted as live if the interpreter's teardown freed it (see
    /// [`State::teardown`]); returns whether it did.
    fn kept_for_teardown(&mut self, key: (bool, u64), e: Entry, ts_ns: u64) -> bool {
        if self.teardown_from_ns.is_none_or(|t| ts_ns < t) {
            return false;
        }
        if let Some(site) = self.sites.get_mut(&e.site) {
            site.torn_count += 1;
        }
        self.teardown.push((key, e));
        true
    }

    /// Keeps at most `n` sites (at least 1; 0 sets [`DEFAULT_MAX_STACKS`]). Beyond it, sites
    /// with no live allocation are evicted, least recently used first, down to nine tenths of
    /// `n`: their counters and series go, and [`Totals::evicted_stacks`] counts them. A site
    /// with a live allocation, one whose allocations a context teardown or the interpreter's
    /// teardown freed (kept for the leak ranking), and one of a listed failed allocation are
    /// never evicted. The process's totals, kinds, devices and live set stay exact.
    pub fn set_max_stacks(&mut self, n: usize) {
        self.max_stacks = n;
    }

    /// The sites evicted since the last call, so that the caller drops their frames too.
    pub fn take_evicted(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.evicted)
    }

    /// Whether sites were evicted since the last [`State::take_evicted`].
    pub fn has_evicted(&self) -> bool {
        !self.evicted.is_empty()
    }

    /// Evicts sites as [`State::set_max_stacks`] says.
    fn max_stacks(&self) -> usize {
        if self.max_stacks == 0 {
            DEFAULT_MAX_STACKS
        } else {
            self.max_stacks
        }
    }

    fn evict_sites(&mut self) {
        let limit = self.max_stacks();
        let target = (limit - limit / 10).max(1);
        let keep: std::collections::HashSet<u32> = self.failures.iter().map(|f| f.site).collect();
        let mut idle: Vec<(u64, u32)> = self
            .sites
            .values()
            .filter(|s| s.gauge.live_count == 0 && s.swept_count == 0 && s.torn_count == 0 && !keep.contains(&s.id))
            .map(|s| (s.last_alloc_ns.max(s.series.points().last().map_or(0, |p| p.0)), s.id))
            .collect();
        let n = (self.sites.len().saturating_sub(target)).min(idle.len());
        if n > 0 && n < idle.len() {
            idle.select_nth_unstable(n);
        }
        for &(_, id) in &idle[..n] {
            self.sites.remove(&id);
            self.evicted.push(id);
        }
        self.totals.evicted_stacks += n as u64;
        self.evict_scans += 1;
        // The next scan when a tenth more sites came (of the bound, or of the sites now when
        // more are kept than the bound: live ones): with a bound below 10 a program with more
        // live stacks than that paid a scan of every site at each new one.
        let slack = (limit / 10).max(self.sites.len() / 10).max(1);
        self.evict_at = limit.max(self.sites.len().saturating_add(slack));
    }

    /// Tells whether events given up on by the reorder buffer may still arrive (so that frees
    /// of addresses not live are remembered for [`State::apply_late`]).
    pub fn set_late_events_expected(&mut self, on: bool) {
        self.late_expected = on;
        if !on {
            self.early_frees = IntMap::default();
            self.replaced_keys = IntMap::default();
        }
    }

    /// Applies an event that arrived after the reorder buffer gave up on its sequence number
    /// and applied later ones: as [`State::apply`], except where a later event on the same
    /// address was applied before it:
    /// - a free whose address a later allocation took (counted as replaced then): it freed the
    ///   replaced allocation, so it counts as a free instead of that replacement;
    /// - an allocation whose free was applied before it (counted as a free of an unknown
    ///   address then): it is counted as allocated and freed instead;
    /// - an allocation at an address a later allocation holds: counted as allocated and
    ///   replaced.
    pub fn apply_late(&mut self, op: &Op) {
        match op {
            Op::Free(f) if f.result == 0 => {
                let key = (f.api.is_handle(), f.addr);
                let replaced_after = self.replaced_keys.get(&key).is_some_and(|&s| s > f.seq);
                if replaced_after || self.live.get(&key).is_some_and(|e| e.seq > f.seq) {
                    self.replaced_keys.remove(&key);
                    self.totals.replaced_count = self.totals.replaced_count.saturating_sub(1);
                    self.totals.free_count += 1;
                } else {
                    self.apply(op);
                }
            }
            Op::Alloc(a) => {
                let key = (a.api.is_handle(), a.addr);
                let freed_after = self.early_frees.get(&key).is_some_and(|&s| s > a.seq);
                if freed_after {
                    self.early_frees.remove(&key);
                    self.totals.unknown_free_count = self.totals.unknown_free_count.saturating_sub(1);
                    let newer = self.live.remove(&key);
                    self.apply(op);
                    if let Some(e) = self.live.remove(&key) {
                        self.count_free(&e);
                        self.release(&e, a.ts_ns);
                    }
                    if let Some(n) = newer {
                        self.live.insert(key, n);
                    }
                } else if let Some(newer) = self.live.get(&key).map(|e| e.seq).filter(|&s| s > a.seq) {
                    self.totals.alloc_count += 1;
                    self.totals.alloc_bytes = self.totals.alloc_bytes.saturating_add(a.size);
                    self.totals.replaced_count += 1;
                    // Its free may still come late (after the newer one was freed too).
                    if self.replaced_keys.len() < MAX_EARLY_FREES {
                        self.replaced_keys.insert(key, newer);
                    }
                } else {
                    self.apply(op);
                }
            }
            _ => self.apply(op),
        }
    }

    /// Applies one event. Call in sequence order.
    pub fn apply(&mut self, op: &Op) {
        let ts = op.ts_ns();
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts, |t| t.min(ts)));
        self.last_ts_ns = self.last_ts_ns.max(ts);
        match op {
            Op::Alloc(a) => self.alloc(a),
            Op::Free(f) => self.free(f),
            Op::FreePending(p) if p.api == Api::CuMemUnmap => {
                self.pending_unmaps.insert(p.seq, ());
            }
            Op::FreePending(p) => {
                let key = (p.api.is_handle(), p.addr);
                self.pending_frees.insert(p.seq, Some(key));
                self.pending_by_key.insert(key, p.seq);
            }
            Op::Reset(r) => self.reset(r),
            Op::ContextCreated(c) => {
                self.created.insert(c.ctx, c.device);
            }
            Op::Map(m) => {
                if let Some((handle, true)) = self.vmm.map(m.addr, m.size, m.handle) {
                    self.free_handle(handle, m.ts_ns);
                }
            }
            Op::Unmap(u) => self.unmap(u),
            Op::HandleRef(h) => {
                let imported = h.api == Api::CuMemImportFromShareableHandle;
                self.vmm.add_ref(h.handle, h.addr, imported, h.device);
            }
            Op::GraphNode(n) => {
                let info = NodeInfo {
                    size: n.size,
                    kind: n.kind,
                    device: n.device,
                    site: n.stack,
                    api: n.api,
                    launched: false,
                };
                if let Some(old) = self.graph_nodes.insert(n.addr, info) {
                    if !old.launched {
                        let r = &mut self.graphs.retired_unlaunched;
                        r.count += 1;
                        r.bytes = r.bytes.saturating_add(old.size);
                    }
                }
            }
            Op::GraphExec(x) => self.graph_exec(x),
            Op::GraphLaunch(l) => self.graph_launch(l),
            Op::GraphExecDestroy(d) => {
                self.graph_execs.remove(&d.exec);
            }
            Op::GraphMemTrim(t) => *self.graphs.trims.entry((t.api, t.device)).or_default() += 1,
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
            ctx: a.ctx,
        };
        if a.api == Api::CuMemCreate {
            self.vmm.create(a.addr, a.size, device_key(&e).unwrap_or(-1));
        }
        self.insert_live(key, e, Some(a.tid));
    }

    /// Makes `e` live at `key`, replacing (and releasing) a live entry there; `tid`: the thread
    /// that allocated it, counted at its site (`None` for a graph launch's allocations).
    fn insert_live(&mut self, key: (bool, u64), e: Entry, tid: Option<u32>) {
        // One lookup: the entry goes in first, a live one it replaces is released after.
        if let Some(old) = self.live.insert(key, e) {
            match self.pending_by_key.remove(&key) {
                // Its free was in progress: the address came back, so that free completed.
                Some(seq) => {
                    self.pending_frees.insert(seq, None);
                    self.count_free(&old);
                }
                None => {
                    self.totals.replaced_count += 1;
                    if self.late_expected && self.replaced_keys.len() < MAX_EARLY_FREES {
                        self.replaced_keys.insert(key, e.seq);
                    }
                }
            }
            self.release(&old, e.ts_ns);
        }
        self.totals.alloc_count += 1;
        self.totals.alloc_bytes = self.totals.alloc_bytes.saturating_add(e.size);
        self.totals.gauge.add(e.size);
        self.kinds[e.kind as usize].add(e.size);
        if let Some(d) = device_key(&e) {
            self.devices.entry(d).or_default().add(e.size);
        }
        let site = self.sites.entry(e.site).or_insert_with(|| SiteStats {
            id: e.site,
            kind: e.kind,
            apis: Vec::new(),
            gauge: Gauge::default(),
            alloc_count: 0,
            alloc_bytes: 0,
            free_count: 0,
            first_alloc_ns: e.ts_ns,
            last_alloc_ns: e.ts_ns,
            series: SiteSeries::default(),
            swept_count: 0,
            swept_bytes: 0,
            torn_count: 0,
            threads: Default::default(),
            other_thread_allocs: 0,
        });
        if !site.apis.contains(&e.api) {
            site.apis.push(e.api);
        }
        site.gauge.add(e.size);
        site.alloc_count += 1;
        site.alloc_bytes = site.alloc_bytes.saturating_add(e.size);
        site.first_alloc_ns = site.first_alloc_ns.min(e.ts_ns);
        site.last_alloc_ns = site.last_alloc_ns.max(e.ts_ns);
        site.series.record(e.ts_ns, site.gauge.live_bytes);
        if let Some(tid) = tid {
            site.thread_alloc(tid, e.size, e.ts_ns);
        }
        self.timeline.record(e.ts_ns, &self.kinds, &self.devices);
        if self.sites.len() > self.evict_at.max(self.max_stacks()) {
            self.evict_sites();
        }
    }

    fn free(&mut self, f: &Free) {
        let key = (f.api.is_handle(), f.addr);
        // `cudaFree(NULL)` and friends are documented no-ops (often used to create the
        // context); they free nothing and are not "unknown".
        if f.addr == 0 && !key.0 {
            return;
        }
        if f.api == Api::CuMemRelease {
            match self.vmm.release(f.addr, f.result) {
                Released::Unknown => {}
                Released::Failed => {
                    self.totals.failed_free_count += 1;
                    return;
                }
                Released::Extra => {
                    self.totals.unknown_free_count += 1;
                    return;
                }
                Released::Kept | Released::Gone(false) => return,
                Released::Gone(true) => {}
            }
        }
        // A free of an address that is not live is unknown whatever CUDA answered (it usually
        // rejects it); a rejected free of a live address leaves it live.
        let e = match self.live.entry(key) {
            std::collections::hash_map::Entry::Vacant(_) => {
                self.totals.unknown_free_count += 1;
                if self.late_expected && self.early_frees.len() < MAX_EARLY_FREES {
                    self.early_frees.insert(key, f.seq);
                }
                return;
            }
            std::collections::hash_map::Entry::Occupied(_) if f.result != 0 => {
                self.totals.failed_free_count += 1;
                return;
            }
            std::collections::hash_map::Entry::Occupied(o) => o.remove(),
        };
        if self.kept_for_teardown(key, e, f.ts_ns) {
            return;
        }
        self.count_free(&e);
        self.release(&e, f.ts_ns);
    }

    fn count_free(&mut self, e: &Entry) {
        self.totals.free_count += 1;
        if let Some(site) = self.sites.get_mut(&e.site) {
            site.free_count += 1;
        }
    }

    /// Whether free `seq` was applied as in progress and waits for its [`Free`].
    pub fn is_pending_free(&self, seq: u64) -> bool {
        self.pending_frees.contains_key(&seq) || self.pending_unmaps.contains_key(&seq)
    }

    /// The [`Free`] of a free applied earlier as in progress: applied now (unless the address
    /// was reused meanwhile, which already counted it as freed).
    pub fn complete_pending_free(&mut self, f: &Free) {
        let Some(state) = self.pending_frees.remove(&f.seq) else { return };
        self.last_ts_ns = self.last_ts_ns.max(f.ts_ns);
        if let Some(key) = state {
            if self.pending_by_key.get(&key) == Some(&f.seq) {
                self.pending_by_key.remove(&key);
            }
            self.free(f);
        }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::graphs::UnlaunchedNodes;
    use super::*;
    use gpushim_testkit as kit;
    use gpushim_wire::{
        ContextCreated, GraphExec, GraphExecDestroy, GraphLaunch, GraphNode, HandleRef, Map, Reset, Unmap,
    };
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
    pub(crate) fn failed(seq: u64, ts: u64, size: u64) -> Op {
        op(kit::failed(seq, ts, size, 7, 2))
    }

    fn g(live_bytes: u64, live_count: u64, peak_live_bytes: u64) -> Gauge {
        Gauge { live_bytes, live_count, peak_live_bytes }
    }

    /// `ops` applied in order to an empty state.
    pub(crate) fn apply_all(ops: &[Op]) -> State {
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
    fn an_op_is_no_larger_than_an_allocation_needs() {
        // The reorder buffer holds up to MAX_PENDING of them.
        assert!(std::mem::size_of::<Op>() <= std::mem::size_of::<Alloc>() + 8, "{}", std::mem::size_of::<Op>());
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
            ctx: 0,
        }));
        s.apply(&free(1, 2, 5, 0)); // cudaFree(5) is a pointer, not the handle
        assert_eq!((s.totals.gauge.live_count, s.totals.unknown_free_count), (1, 1));
        s.apply(&Op::Free(Free { seq: 2, ts_ns: 3, addr: 5, api: Api::CuMemRelease, stream: 0, tid: 1, result: 0 }));
        assert_eq!((s.totals.gauge.live_count, s.totals.free_count), (0, 1));
    }

    #[test]
    fn a_reset_frees_the_device_and_managed_memory_of_its_device_only() {
        let ops = vec![
            alloc(0, 1, 0x100, 10, Kind::Device, 0, 1),
            alloc(1, 2, 0x200, 20, Kind::Managed, 0, 1),
            alloc(2, 3, 0x300, 40, Kind::Device, 1, 2),
            alloc(3, 4, 0x400, 80, Kind::PinnedHost, -1, 3),
            Op::Reset(Reset { seq: 4, ts_ns: 5, device: 0, api: Api::CudaDeviceReset, tid: 7, ctx: 0 }),
        ];
        let s = apply_all(&ops);
        assert_eq!(s.totals.gauge.live_bytes, 120);
        assert_eq!(s.totals.free_count, 2);
        assert_eq!(
            s.resets,
            vec![ContextReset { api: Api::CudaDeviceReset, device: 0, count: 2, bytes: 30, created: false }]
        );
        assert_eq!(s.devices[&0].live_bytes, 0);
        assert_eq!(s.devices[&1].live_bytes, 40);
    }

    #[test]
    fn a_context_the_program_created_frees_its_own_allocations_and_a_primary_reset_leaves_them() {
        let in_ctx = |seq, addr, size, ctx| {
            let mut op = alloc(seq, seq + 1, addr, size, Kind::Device, 0, 1);
            if let Op::Alloc(a) = &mut op {
                a.ctx = ctx;
            }
            op
        };
        let created = |seq, ctx| {
            Op::ContextCreated(ContextCreated { seq, ts_ns: seq + 1, ctx, device: 0, api: Api::CuCtxCreate, tid: 7 })
        };
        let reset = |seq, api, device, ctx| Op::Reset(Reset { seq, ts_ns: seq + 1, device, api, tid: 7, ctx });
        let ops = vec![
            in_ctx(0, 0x100, 10, 0),    // primary, before any context was created
            created(1, 0xc1),           // the program's own context on device 0
            in_ctx(2, 0x200, 20, 0xc1), // in it
            in_ctx(3, 0x300, 40, 0xc0), // in device 0's primary context (another handle)
            created(4, 0xc2),
            in_ctx(5, 0x400, 80, 0xc2),
            // Destroyed from a thread where it is not current: the device is not known.
            reset(6, Api::CuCtxDestroy, -1, 0xc1),
        ];
        let mut s = apply_all(&ops);
        assert_eq!(s.totals.gauge.live_bytes, 10 + 40 + 80);
        assert_eq!(
            s.resets,
            vec![ContextReset { api: Api::CuCtxDestroy, device: 0, count: 1, bytes: 20, created: true }]
        );
        // The last release of device 0's primary context: its allocations go, the program's
        // own context 0xc2 keeps its 80 bytes.
        s.apply(&reset(7, Api::CuDevicePrimaryCtxRelease, 0, 0));
        assert_eq!(s.totals.gauge.live_bytes, 80);
        assert_eq!(
            s.resets[1],
            ContextReset { api: Api::CuDevicePrimaryCtxRelease, device: 0, count: 2, bytes: 50, created: false }
        );
        assert_eq!((s.totals.free_count, s.totals.unknown_free_count, s.totals.replaced_count), (3, 0, 0));
    }

    /// VMM events for the tests below, numbered in order of the list by [`vmm_ops`].
    enum V {
        Create(u64, u64),
        Map(u64, u64, u64),
        Unmap(u64, u64),
        Release(u64),
        Retain(u64, u64),
        Import(u64),
    }

    fn vmm_ops(list: &[V]) -> Vec<Op> {
        list.iter()
            .enumerate()
            .map(|(i, v)| {
                let (seq, ts_ns) = (i as u64, 10 * i as u64 + 10);
                match *v {
                    V::Create(handle, size) => Op::Alloc(Alloc {
                        seq,
                        ts_ns,
                        addr: handle,
                        size,
                        kind: Kind::Device,
                        api: Api::CuMemCreate,
                        device: 0,
                        stream: 0,
                        tid: 1,
                        stack: 9,
                        ctx: 0,
                    }),
                    V::Map(addr, size, handle) => Op::Map(Map { seq, ts_ns, addr, size, handle, tid: 1 }),
                    V::Unmap(addr, size) => Op::Unmap(Unmap { seq, ts_ns, addr, size, tid: 1, result: 0 }),
                    V::Release(handle) => Op::Free(Free {
                        seq,
                        ts_ns,
                        addr: handle,
                        api: Api::CuMemRelease,
                        stream: 0,
                        tid: 1,
                        result: 0,
                    }),
                    V::Retain(handle, addr) => Op::HandleRef(HandleRef {
                        seq,
                        ts_ns,
                        handle,
                        addr,
                        api: Api::CuMemRetainAllocationHandle,
                        device: -1,
                        tid: 1,
                    }),
                    V::Import(handle) => Op::HandleRef(HandleRef {
                        seq,
                        ts_ns,
                        handle,
                        addr: 7,
                        api: Api::CuMemImportFromShareableHandle,
                        device: 0,
                        tid: 1,
                    }),
                }
            })
            .collect()
    }

    /// (live bytes, live count, frees, unknown frees) of the whole process.
    #[test]
    fn destroying_a_context_the_program_created_leaves_vmm_memory() {
        // VMM memory is the device's: a created context's destruction (device unknown, -1)
        // neither frees a handle nor forgets its mappings.
        let mut ops = vmm_ops(&[V::Create(0x10, MIB64), V::Map(VA, MIB64, 0x10), V::Release(0x10)]);
        if let Op::Alloc(a) = &mut ops[0] {
            a.ctx = 0xc1; // as an older shim recorded it: the context current at cuMemCreate
        }
        let base = ops.len() as u64;
        ops.push(Op::ContextCreated(ContextCreated {
            seq: base,
            ts_ns: 1000,
            ctx: 0xc1,
            device: 0,
            api: Api::CuCtxCreate,
            tid: 1,
        }));
        ops.push(Op::Reset(Reset {
            seq: base + 1,
            ts_ns: 1001,
            device: -1,
            api: Api::CuCtxDestroy,
            tid: 1,
            ctx: 0xc1,
        }));
        let mut s = apply_all(&ops);
        assert_eq!(counts(&s), (MIB64, 1, 0, 0), "released but mapped: still live");
        assert_eq!(s.vmm.devices[&0].mapped_bytes, MIB64);
        s.apply(&Op::Unmap(Unmap { seq: base + 2, ts_ns: 1002, addr: VA, size: MIB64, tid: 1, result: 0 }));
        assert_eq!(counts(&s), (0, 0, 1, 0));
        assert_eq!(s.vmm.unknown_unmap_count, 0);
    }

    fn counts(s: &State) -> (u64, u64, u64, u64) {
        let t = &s.totals;
        (t.gauge.live_bytes, t.gauge.live_count, t.free_count, t.unknown_free_count)
    }

    const MIB64: u64 = 64 << 20;
    const VA: u64 = 0x7f00_0000_0000;

    #[test]
    fn vmm_memory_released_while_mapped_stays_live_until_unmapped() {
        let ops = vmm_ops(&[V::Create(0x10, MIB64), V::Map(VA, MIB64, 0x10), V::Release(0x10), V::Unmap(VA, MIB64)]);
        let s = apply_all(&ops[..3]);
        assert_eq!(counts(&s), (MIB64, 1, 0, 0));
        let g = s.vmm.devices[&0];
        assert_eq!((g.handles, g.created_bytes, g.mapped_bytes, g.released_mapped_bytes), (1, MIB64, MIB64, MIB64));
        let s = apply_all(&ops);
        assert_eq!(counts(&s), (0, 0, 1, 0));
        assert_eq!(s.sites[&9].free_count, 1, "the free counts at the cuMemCreate's site");
        let g = s.vmm.devices[&0];
        assert_eq!((g.handles, g.created_bytes, g.mapped_bytes, g.peak_mapped_bytes), (0, 0, 0, MIB64));
        assert_eq!(g.released_mapped_bytes, 0);
    }

    #[test]
    fn vmm_nccl_retain_release_unmap_release_frees_once() {
        let ops = vmm_ops(&[
            V::Create(0x10, MIB64),
            V::Map(VA, MIB64, 0x10),
            V::Retain(0x10, VA + 4096),
            V::Release(0x10),
            V::Unmap(VA, MIB64),
            V::Release(0x10),
        ]);
        assert_eq!(counts(&apply_all(&ops[..5])), (MIB64, 1, 0, 0), "one reference left after the unmap");
        let s = apply_all(&ops);
        assert_eq!(counts(&s), (0, 0, 1, 0));
        assert_eq!(s.vmm.devices[&0], crate::account::vmm::VmmGauge { peak_mapped_bytes: MIB64, ..Default::default() });
    }

    #[test]
    fn vmm_unmap_then_release_and_one_unmap_over_two_handles() {
        let ops = vmm_ops(&[
            V::Create(0x10, MIB64),
            V::Create(0x11, MIB64),
            V::Map(VA, MIB64, 0x10),
            V::Map(VA + MIB64, MIB64, 0x11),
            V::Unmap(VA, 2 * MIB64),
        ]);
        let s = apply_all(&ops);
        assert_eq!(counts(&s), (2 * MIB64, 2, 0, 0));
        assert_eq!((s.vmm.devices[&0].mappings, s.vmm.devices[&0].mapped_bytes), (0, 0));
        let mut more = ops.clone();
        more.extend(vmm_ops(&[V::Release(0x10), V::Release(0x11)]).into_iter().map(|mut o| {
            o.set_seq(o.seq() + 5);
            o
        }));
        let s = apply_all(&more);
        assert_eq!(counts(&s), (0, 0, 2, 0));
        assert_eq!(s.vmm.unknown_unmap_count, 0);
    }

    #[test]
    fn vmm_imported_handles_count_no_live_bytes_and_no_unknown_frees() {
        // 0x20 is an import of memory made elsewhere; 0x10 is imported back into this process
        // under its own value, one more reference to it.
        let ops = vmm_ops(&[
            V::Create(0x10, MIB64),
            V::Import(0x20),
            V::Map(VA, MIB64, 0x20),
            V::Import(0x10),
            V::Map(VA + MIB64, MIB64, 0x10),
        ]);
        let s = apply_all(&ops);
        assert_eq!(counts(&s), (MIB64, 1, 0, 0));
        let g = s.vmm.devices[&0];
        assert_eq!((g.handles, g.imported_handles, g.mapped_bytes), (1, 1, 2 * MIB64));
        let mut more = ops.clone();
        more.extend(
            vmm_ops(&[V::Release(0x20), V::Release(0x10), V::Unmap(VA, 2 * MIB64), V::Release(0x10)]).into_iter().map(
                |mut o| {
                    o.set_seq(o.seq() + 5);
                    o
                },
            ),
        );
        let s = apply_all(&more[..7]);
        assert_eq!(counts(&s), (MIB64, 1, 0, 0), "the import's reference keeps 0x10");
        let s = apply_all(&more);
        assert_eq!(counts(&s), (0, 0, 1, 0));
        assert_eq!((s.totals.failed_free_count, s.vmm.unknown_unmap_count), (0, 0));
        let g = s.vmm.devices[&0];
        assert_eq!((g.handles, g.imported_handles, g.mapped_bytes), (0, 0, 0));
    }

    const MIB: u64 = 1 << 20;

    fn node(seq: u64, addr: u64, size: u64, api: Api, stack: u32) -> Op {
        Op::GraphNode(Box::new(GraphNode {
            seq,
            ts_ns: seq,
            addr,
            size,
            kind: Kind::Device,
            api,
            device: 0,
            graph: 0x9000,
            stream: 0,
            tid: 1,
            stack,
        }))
    }

    fn exec(seq: u64, exec: u64, allocs: &[(u64, u64)], frees: &[u64], auto_free: bool) -> Op {
        Op::GraphExec(Box::new(GraphExec {
            seq,
            ts_ns: seq,
            exec,
            graph: 0x9000,
            api: Api::CudaGraphInstantiate,
            auto_free,
            tid: 1,
            stack: 99,
            allocs: allocs
                .iter()
                .map(|&(addr, size)| gpushim_wire::GraphAlloc { addr, size, kind: Kind::Device, device: 0 })
                .collect(),
            frees: frees.to_vec(),
        }))
    }

    fn launch(seq: u64, exec: u64) -> Op {
        Op::GraphLaunch(GraphLaunch { seq, ts_ns: seq, exec, api: Api::CudaGraphLaunch, stream: 5, tid: 1 })
    }

    #[test]
    fn a_graph_allocation_is_live_from_its_launch_under_the_site_that_made_its_node() {
        let a = 0x7000_0000;
        let s = apply_all(&[
            node(0, a, 64 * MIB, Api::CudaGraphAddMemAllocNode, 3),
            exec(1, 0xe1, &[(a, 64 * MIB)], &[], false),
        ]);
        assert_eq!(s.totals.gauge.live_bytes, 0, "instantiated, not launched: nothing live");
        assert_eq!(s.unlaunched_graph_nodes(), UnlaunchedNodes { count: 1, bytes: 64 * MIB });
        let s = apply_all(&[
            node(0, a, 64 * MIB, Api::CudaGraphAddMemAllocNode, 3),
            exec(1, 0xe1, &[(a, 64 * MIB)], &[], false),
            launch(2, 0xe1),
            Op::GraphExecDestroy(GraphExecDestroy {
                seq: 3,
                ts_ns: 3,
                exec: 0xe1,
                api: Api::CudaGraphExecDestroy,
                tid: 1,
            }),
        ]);
        assert_eq!(s.totals.gauge.live_bytes, 64 * MIB, "destroying the executable graph frees nothing");
        assert_eq!(s.sites[&3].gauge.live_bytes, 64 * MIB);
        assert_eq!(s.sites[&3].apis, vec![Api::CudaGraphAddMemAllocNode]);
        assert_eq!(s.devices[&0].live_bytes, 64 * MIB);
        assert_eq!(s.live_graph_allocations(), (1, 64 * MIB));
        assert_eq!(s.unlaunched_graph_nodes().count, 0);
        assert_eq!((s.graphs.execs, s.graphs.launches), (1, 1));
    }

    #[test]
    fn a_captured_allocation_of_a_graph_destroyed_unlaunched_is_never_live() {
        let s = apply_all(&[node(0, 0x5000, 32 * MIB, Api::CudaMallocAsync, 4)]);
        assert_eq!((s.totals.gauge.live_bytes, s.totals.alloc_count, s.totals.unknown_free_count), (0, 0, 0));
        assert_eq!(s.unlaunched_graph_nodes(), UnlaunchedNodes { count: 1, bytes: 32 * MIB });
    }

    #[test]
    fn an_unlaunched_node_whose_address_a_later_node_takes_is_still_counted_unlaunched() {
        // A real driver gives the next graph's node the address of a captured node whose graph
        // was destroyed unlaunched: the unlaunched 32 MiB must still be counted.
        let a = 0x7000_0000;
        let ops = vec![
            node(0, a, 32 * MIB, Api::CudaMallocAsync, 4),
            node(1, a, 16 * MIB, Api::CuGraphAddMemAllocNode, 3),
            exec(2, 0xe1, &[(a, 16 * MIB)], &[a], false),
            launch(3, 0xe1),
        ];
        let s = apply_all(&ops);
        assert_eq!(s.unlaunched_graph_nodes(), UnlaunchedNodes { count: 1, bytes: 32 * MIB });
        assert_eq!((s.totals.gauge.live_bytes, s.totals.unknown_free_count), (0, 0));
    }

    #[test]
    fn an_allocation_freed_in_its_own_graph_is_freed_by_every_launch() {
        let a = 0x7000_0000;
        let mut ops =
            vec![node(0, a, 16 * MIB, Api::CuGraphAddMemAllocNode, 3), exec(1, 0xe1, &[(a, 16 * MIB)], &[a], false)];
        ops.extend((2..5).map(|i| launch(i, 0xe1)));
        let s = apply_all(&ops);
        assert_eq!(s.totals.gauge, g(0, 0, 16 * MIB));
        assert_eq!((s.totals.alloc_count, s.totals.free_count, s.totals.replaced_count), (3, 3, 0));
        assert_eq!(s.totals.unknown_free_count, 0);
    }

    #[test]
    fn auto_free_on_launch_frees_the_previous_launch_and_other_graphs_and_cuda_free_free_too() {
        let (a, b) = (0x7000_0000, 0x8000_0000);
        let s = apply_all(&[
            node(0, a, 8 * MIB, Api::CudaGraphAddMemAllocNode, 3),
            exec(1, 0xe1, &[(a, 8 * MIB)], &[], true),
            launch(2, 0xe1),
            launch(3, 0xe1),
            launch(4, 0xe1),
        ]);
        assert_eq!(s.totals.gauge, g(8 * MIB, 1, 8 * MIB));
        assert_eq!((s.totals.free_count, s.totals.replaced_count), (2, 0));
        // Allocated by graph A, freed by graph B's free node, then by a cudaFreeAsync outside.
        let s = apply_all(&[
            exec(0, 0xe1, &[(a, 8 * MIB), (b, 2 * MIB)], &[], false),
            exec(1, 0xe2, &[], &[a], false),
            launch(2, 0xe1),
            launch(3, 0xe2),
            free(4, 4, b, 0),
        ]);
        assert_eq!(s.totals.gauge.live_bytes, 0);
        assert_eq!((s.totals.free_count, s.totals.unknown_free_count), (2, 0));
        assert_eq!(s.sites[&99].alloc_count, 2, "nodes whose creation was not seen take the instantiation's site");
        // A launch of an executable graph never seen instantiated changes nothing.
        let s = apply_all(&[launch(0, 0xe9)]);
        assert_eq!((s.totals.gauge.live_bytes, s.graphs.unknown_launches), (0, 1));
    }

    /// 1,000 sites with a bound of 100: the ten sites whose allocation stays live are kept;
    /// the others are evicted, least recently used first, down to 90 each time the bound is
    /// passed (11 at a time, 82 times); the totals stay exact.
    #[test]
    fn sites_past_the_bound_without_live_allocations_are_evicted_and_counted() {
        let mut s = State::default();
        s.set_max_stacks(100);
        let mut seq = 0;
        for i in 0..1000u64 {
            s.apply(&alloc(seq, seq, 0x1000 + i * 0x100, 10, Kind::Device, 0, i as u32));
            seq += 1;
            if i >= 10 {
                s.apply(&free(seq, seq, 0x1000 + i * 0x100, 0));
                seq += 1;
            }
            assert!(s.sites.len() <= 101, "{} sites after {i}", s.sites.len());
        }
        assert_eq!(s.totals.evicted_stacks, 902);
        assert_eq!(s.sites.len(), 98);
        assert_eq!(s.take_evicted().len(), 902);
        assert!(!s.has_evicted());
        assert!((0..10).all(|i| s.sites[&i].gauge.live_count == 1));
        // The most recent ones are kept.
        assert!((912..1000).all(|i| s.sites.contains_key(&i)));
        let t = &s.totals;
        assert_eq!((t.alloc_count, t.free_count, t.gauge.live_count, t.gauge.live_bytes), (1000, 990, 10, 100));
        // Without a bound all 1,000 stay.
        let mut all = State::default();
        all.set_max_stacks(usize::MAX);
        for i in 0..1000u64 {
            all.apply(&alloc(i, i, 0x1000 + i * 0x100, 10, Kind::Device, 0, i as u32));
        }
        assert_eq!((all.sites.len(), all.totals.evicted_stacks), (1000, 0));
    }

    /// More live stacks than the bound: none can go, and no scan runs at every new site.
    #[test]
    fn stacks_of_live_allocations_are_never_evicted() {
        let mut s = State::default();
        s.set_max_stacks(10);
        for i in 0..50u64 {
            s.apply(&alloc(i, i, 0x1000 + i * 0x100, 10, Kind::Device, 0, i as u32));
        }
        assert_eq!((s.sites.len(), s.totals.evicted_stacks), (50, 0));
        // A bound below 10 (no tenth of it to wait for): 10,000 live stacks, a few hundred
        // scans of every site rather than one per new site.
        let mut s = State::default();
        s.set_max_stacks(1);
        for i in 0..10_000u64 {
            s.apply(&alloc(i, i, 0x1000 + i * 0x100, 10, Kind::Device, 0, i as u32));
        }
        assert_eq!((s.sites.len(), s.totals.evicted_stacks), (10_000, 0));
        assert!(s.evict_scans < 200, "{} scans", s.evict_scans);
        assert_eq!(s.totals.gauge.live_bytes, 100_000);
    }
}
