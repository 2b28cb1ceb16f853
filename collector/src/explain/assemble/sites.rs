//! The sites the report lists: the owners of the live ones (which the ranking reads as hints),
//! the order and bound of the list, each site and failure with its symbolized frames, and the
//! live allocations by address.

use std::collections::{BTreeMap, HashMap, HashSet};

use gpushim_wire::{Kind, NO_STACK};

use super::{MAX_LISTED_THREADS, MAX_SITES};
use crate::account::gauge::SiteStats;
use crate::account::live::State;
use crate::account::rank;
use crate::explain::owners;
use crate::explain::symbolize::Symbolizer;
use crate::report::{FailureRecord, Frame, LiveAllocation, Site, Suspect, MAX_ALLOCATIONS};

/// The owner of every site with live memory (symbolized once; cached), and what the ranking
/// reads from them: which sites are a pool's, and each site's line of user code.
pub(super) fn owners_of_live(
    state: &State,
    stacks: &HashMap<u32, Vec<u64>>,
    work_end_ns: Option<u64>,
    sym: &mut Symbolizer,
) -> (HashMap<u32, owners::Owner>, rank::Hints) {
    let mut owner_of: HashMap<u32, owners::Owner> = HashMap::new();
    let mut hints = rank::Hints { work_end_ns, ..rank::Hints::default() };
    let live_sites: HashSet<u32> =
        state.live().map(|(_, e)| e.site).chain(state.swept.iter().map(|e| e.site)).collect();
    for &id in &live_sites {
        let frames = stacks.get(&id).map(|a| sym.stack_of(id, a)).unwrap_or_default();
        let o = owners::owner_of(&frames);
        if o.pool {
            hints.pool.insert(id);
        }
        // A library's own state joins no line's union: alone it is judged as any site.
        if let Some(line) = owners::union_line(&frames, &o) {
            hints.line.insert(id, line);
        }
        owner_of.insert(id, o);
    }
    (owner_of, hints)
}

/// Live device and managed bytes and allocations per (device, owner).
pub(super) fn by_owner(state: &State, owner_of: &HashMap<u32, owners::Owner>) -> BTreeMap<(i32, String), (u64, u64)> {
    let mut by_owner: BTreeMap<(i32, String), (u64, u64)> = BTreeMap::new();
    for (_, e) in state.live().filter(|(_, e)| e.kind != Kind::PinnedHost) {
        let name = owner_of.get(&e.site).map_or(owners::USER_OWNER, |o| o.name.as_str());
        let v = by_owner.entry((e.device, name.to_string())).or_default();
        v.0 = v.0.saturating_add(e.size);
        v.1 += 1;
    }
    by_owner
}

/// The sites to list, most live bytes first: at most [`MAX_SITES`] and every suspect (a note
/// says when sites were left out).
pub(super) fn listed<'s>(state: &'s State, suspects: &[Suspect], notes: &mut Vec<String>) -> Vec<&'s SiteStats> {
    let mut order: Vec<_> = state.sites.values().collect();
    order.sort_by(|a, b| {
        b.gauge.live_bytes.cmp(&a.gauge.live_bytes).then(b.alloc_bytes.cmp(&a.alloc_bytes)).then(a.id.cmp(&b.id))
    });
    if order.len() > MAX_SITES {
        let keep: HashSet<u32> = suspects.iter().map(|s| s.site).collect();
        let total = order.len();
        let mut n = 0;
        order.retain(|s| {
            n += 1;
            n <= MAX_SITES || keep.contains(&s.id)
        });
        notes.push(format!(
            "the report lists {} of {total} sites (those with most live bytes, and every suspect)",
            order.len()
        ));
    }
    order
}

/// The frames of stacks by id, counting the ids the stream never described.
pub(super) struct Frames<'a> {
    pub(super) stacks: &'a HashMap<u32, Vec<u64>>,
    /// Stack ids named but never described (sites and failures; not the no-backtrace id).
    pub(super) missing: u64,
}

impl Frames<'_> {
    /// The symbolized frames of stack `id`; none for a stack never described.
    pub(super) fn of(&mut self, id: u32, sym: &mut Symbolizer) -> Vec<Frame> {
        match self.stacks.get(&id) {
            Some(addrs) => sym.stack_of(id, addrs),
            None => {
                if id != NO_STACK {
                    self.missing += 1;
                }
                Vec::new()
            }
        }
    }
}

/// The listed sites as the report shows them; `secs` converts a monotonic time to the report's.
pub(super) fn site_records(
    order: &[&SiteStats],
    frames: &mut Frames<'_>,
    sym: &mut Symbolizer,
    thread_names: &HashMap<u32, String>,
    secs: &dyn Fn(u64) -> f64,
) -> Vec<Site> {
    order
        .iter()
        .map(|s| Site {
            id: s.id,
            kind: s.kind.name().to_string(),
            apis: s.apis.iter().map(|a| a.name().to_string()).collect(),
            live_bytes: s.gauge.live_bytes,
            live_count: s.gauge.live_count,
            alloc_count: s.alloc_count,
            alloc_bytes: s.alloc_bytes,
            free_count: s.free_count,
            peak_live_bytes: s.gauge.peak_live_bytes,
            first_alloc_s: secs(s.first_alloc_ns),
            last_alloc_s: secs(s.last_alloc_ns),
            series: s.series.points().iter().map(|&(t, v)| (secs(t), v)).collect(),
            frames: frames.of(s.id, sym),
            owner: String::new(),
            python: sym.python().site_flag(s.id),
            thread_count: s.threads.len() as u64,
            threads: site_threads(s, thread_names, secs),
            reach: None,
        })
        .map(|mut s: Site| {
            s.owner = owners::owner_of(&s.frames).name;
            s
        })
        .collect()
}

/// The failed allocations kept, with their frames.
pub(super) fn failure_records(
    state: &State,
    frames: &mut Frames<'_>,
    sym: &mut Symbolizer,
    secs: &dyn Fn(u64) -> f64,
) -> Vec<FailureRecord> {
    state
        .failures
        .iter()
        .map(|f| FailureRecord {
            api: f.api.name().to_string(),
            kind: f.kind.name().to_string(),
            size: f.size,
            result: f.result,
            site: f.site,
            device: f.device,
            ts_s: secs(f.ts_ns),
            frames: frames.of(f.site, sym),
        })
        .collect()
}

/// The threads of site `s`, most allocations first (then lowest tid), at most
/// [`MAX_LISTED_THREADS`], named from `names`; `secs` converts a monotonic time to the report's.
fn site_threads(
    s: &SiteStats,
    names: &HashMap<u32, String>,
    secs: impl Fn(u64) -> f64,
) -> Vec<crate::report::SiteThread> {
    let mut v: Vec<_> = s.threads.iter().collect();
    v.sort_by(|a, b| b.1.alloc_count.cmp(&a.1.alloc_count).then(a.0.cmp(b.0)));
    v.into_iter()
        .take(MAX_LISTED_THREADS)
        .map(|(&tid, t)| crate::report::SiteThread {
            tid,
            name: names.get(&tid).cloned().unwrap_or_default(),
            alloc_count: t.alloc_count,
            alloc_bytes: t.alloc_bytes,
            first_alloc_s: secs(t.first_ns),
            last_alloc_s: secs(t.last_ns),
        })
        .collect()
}

/// The live pointer allocations of `state`, by address: the largest [`MAX_ALLOCATIONS`] (a note
/// says when more were live). `cuMemCreate` handles are left out: they have no address until
/// mapped, and their mappings are not allocations.
pub(super) fn live_allocations(
    state: &State,
    secs: &dyn Fn(u64) -> f64,
    notes: &mut Vec<String>,
) -> Vec<LiveAllocation> {
    let mut live: Vec<(u64, &crate::account::live::Entry)> =
        state.live().filter(|((handle, _), _)| !handle).map(|(&(_, addr), e)| (addr, e)).collect();
    if live.len() > MAX_ALLOCATIONS {
        notes.push(format!(
            "the report lists the {MAX_ALLOCATIONS} largest of {} live allocations by address",
            live.len()
        ));
        live.sort_by(|a, b| b.1.size.cmp(&a.1.size).then(a.0.cmp(&b.0)));
        live.truncate(MAX_ALLOCATIONS);
    }
    live.sort_by_key(|&(addr, _)| addr);
    live.into_iter()
        .map(|(addr, e)| LiveAllocation {
            address: format!("{addr:#x}"),
            size: e.size,
            kind: e.kind.name().to_string(),
            api: e.api.name().to_string(),
            device: e.device,
            site: e.site,
            t_s: secs(e.ts_ns),
        })
        .collect()
}
