//! Turns the collector's [`State`] into a [`Report`]: ranks suspects, picks the sites to list,
//! symbolizes their stacks and converts timestamps to seconds.

use std::collections::{BTreeMap, HashMap, HashSet};

use gpushim_wire::{Hello, Kind, MemInfo, NO_STACK};

use crate::account::gauge::Gauge;
use crate::account::live::{State, MAX_FAILURES};
use crate::account::rank;
use crate::explain::frames::{headline, Headline};
use crate::explain::suppress::Suppressions;
use crate::explain::symbolize::Symbolizer;
use crate::explain::{gpumem, owners};
use crate::report::{
    DeviceTotals, FailureRecord, KindTotals, Kinds, LiveAllocation, MemInfoRecord, Reason, Report, Site, Suppressed,
    Suspect, TeardownRecord, Totals, VmmTotals, MAX_ALLOCATIONS, SCHEMA,
};

/// At most this many sites are listed (those with most live bytes, plus every suspect).
pub const MAX_SITES: usize = 1000;

/// At most this many threads are listed per site (those with most allocations there).
pub const MAX_LISTED_THREADS: usize = 256;

/// What a report needs besides the state.
pub struct Context<'a> {
    /// The stream's first event.
    pub hello: &'a Hello,
    /// Why the report is written.
    pub reason: Reason,
    /// The snapshot number, for snapshots.
    pub snapshot: Option<u32>,
    /// The latest monotonic time the report covers, ns (the state's own latest is used if
    /// later).
    pub end_ts_ns: u64,
    /// Sequence numbers that never arrived.
    pub lost_events: u64,
    /// Notes so far (the shim's and the collector's); symbolization problems are added.
    pub notes: Vec<String>,
    /// The latest memory information per device.
    pub mem_info: &'a BTreeMap<i32, MemInfo>,
    /// Stacks by id, return addresses innermost first.
    pub stacks: &'a HashMap<u32, Vec<u64>>,
    /// The driver's view of the process's device memory over the run (NVML); `None` when it
    /// was not sampled.
    pub driver: Option<&'a crate::explain::nvml::DriverView>,
    /// When the program's own work ended (the exit heap walk's start), if known.
    pub work_end_ns: Option<u64>,
    /// Each thread's name from its first event, by kernel thread id.
    pub thread_names: &'a HashMap<u32, String>,
    /// Who holds the memory, from the heap walk at exit (for the final report), whose PyTorch
    /// blocks name the suspects made of the caching allocator's segments.
    pub holders: Option<&'a crate::report::Holders>,
}

fn kind_totals(g: &Gauge) -> KindTotals {
    KindTotals { live_bytes: g.live_bytes, live_count: g.live_count, peak_live_bytes: g.peak_live_bytes }
}

/// The report's lines on graph memory (CUDA Programming Guide, "Graph Memory Nodes"): what
/// launches made live, what allocation nodes never held memory, and the trims.
fn graph_notes(state: &State, notes: &mut Vec<String>) {
    let g = &state.graphs;
    let unlaunched = state.unlaunched_graph_nodes();
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    if g.launches > 0 || g.execs > 0 {
        let (count, bytes) = state.live_graph_allocations();
        notes.push(format!(
            "graph memory: {} launch{} of {} executable graph{} with memory nodes; {} live at the end in {} graph allocation{}, under the sites that made their nodes",
            g.launches,
            if g.launches == 1 { "" } else { "es" },
            g.execs,
            plural(g.execs),
            crate::report::words::fmt_bytes(bytes),
            count,
            plural(count)
        ));
    }
    if unlaunched.count > 0 {
        notes.push(format!(
            "{} in {} graph allocation node{} that no launch reached: never allocated, not counted as live",
            crate::report::words::fmt_bytes(unlaunched.bytes),
            unlaunched.count,
            plural(unlaunched.count)
        ));
    }
    if g.unknown_launches > 0 {
        notes.push(format!(
            "{} graph launch{} of an executable graph whose instantiation was not seen: its memory nodes are not counted",
            g.unknown_launches,
            if g.unknown_launches == 1 { "" } else { "es" }
        ));
    }
    for ((api, device), n) in &g.trims {
        notes.push(format!(
            "{} returned GPU {device}'s unused graph memory to the system ({n} call{}): reserved memory only, no allocation was freed",
            api.name(),
            plural(*n)
        ));
    }
}

/// The threads of site `s`, most allocations first (then lowest tid), at most
/// [`MAX_LISTED_THREADS`], named from `names`; `secs` converts a monotonic time to the report's.
fn site_threads(
    s: &crate::account::gauge::SiteStats,
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

/// The suspects by cause: each suspect site's headline (`frames::headline`), the sites a
/// suppression hides taken out (grouped the same way, by suppression), the others grouped
/// (`rank::group`) by headline key, each group with its headline, its number of distinct
/// threads, and its live bytes per kind in its reason when it holds more than one kind (a NCCL
/// communicator's device buffers and pinned host buffers are one cause: one suspect, measured
/// on the H200, docs/gpu-matrix.md `fault_nccl_cycles`).
fn by_cause(
    suspects: Vec<Suspect>,
    state: &State,
    sites: &[Site],
    blocks: &HashMap<u32, Vec<(Headline, u64)>>,
    walked: &Walked<'_>,
    notes: &mut Vec<String>,
) -> (Vec<Suspect>, Vec<Suppressed>) {
    let site_of: HashMap<u32, &Site> = sites.iter().map(|s| (s.id, s)).collect();
    let mut heads: HashMap<u32, (Headline, String)> = suspects
        .iter()
        .filter_map(|x| {
            let site = site_of.get(&x.site)?;
            let name = site.threads.first().map(|t| t.name.as_str()).filter(|n| !n.is_empty());
            Some((x.site, (headline(&site.frames, name)?, site.kind.clone())))
        })
        .collect();
    // A suspect whose segments hold PyTorch blocks mostly allocated at one line of user code is
    // named by that line: a caching allocator's segment is made by whichever call found the
    // pool full, while the blocks inside it say whose memory it holds (issue 13, the kept
    // logits: three suspects, each named by the call that made its segments, become one at the
    // model's line).
    let mut by_blocks: HashSet<u32> = HashSet::new();
    for x in &suspects {
        let members = std::iter::once(x.site).chain(x.line_sites.iter().copied());
        if let Some(top) = top_block_head(members, blocks, walked) {
            if let Some(h) = heads.get_mut(&x.site) {
                h.0 = top;
                by_blocks.insert(x.site);
            }
        }
    }
    let key = |id: u32| heads.get(&id).map(|(h, _)| h.key.clone());
    let supp = Suppressions::global();
    notes.extend(supp.problems.iter().cloned());
    let mut hidden: Vec<(String, Suspect)> = Vec::new();
    let mut kept = Vec::new();
    for x in suspects {
        match site_of.get(&x.site).and_then(|s| supp.matching(&s.frames)) {
            Some(m) => hidden.push((m.name.clone(), x)),
            None => kept.push(x),
        }
    }
    let mut out = rank::group(kept, key);
    for x in &mut out {
        x.headline = heads.get(&x.site).map(|(h, _)| h.text.clone()).unwrap_or_default();
        if by_blocks.contains(&x.site) {
            let key = heads.get(&x.site).map(|(h, _)| h.key.as_str()).unwrap_or_default();
            let (mut here, mut all) = (0u64, 0u64);
            for (h, b) in x.sites.iter().filter_map(|id| blocks.get(id)).flatten() {
                all = all.saturating_add(*b);
                if h.key == key {
                    here = here.saturating_add(*b);
                }
            }
            x.reason = format!(
                "{}; named by PyTorch's blocks: {} of the {} in live blocks of its segments were allocated at this line",
                x.reason,
                crate::report::words::fmt_bytes(here),
                crate::report::words::fmt_bytes(all)
            );
        }
        let tids: HashSet<u32> =
            x.sites.iter().filter_map(|id| state.sites.get(id)).flat_map(|s| s.threads.keys().copied()).collect();
        x.threads = tids.len() as u64;
        let mut by_kind: Vec<(String, u64)> = Vec::new();
        for site in x.sites.iter().filter_map(|id| site_of.get(id)) {
            match by_kind.iter_mut().find(|(k, _)| *k == site.kind) {
                Some(k) => k.1 = k.1.saturating_add(site.live_bytes),
                None => by_kind.push((site.kind.clone(), site.live_bytes)),
            }
        }
        if by_kind.len() > 1 {
            by_kind.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let parts: Vec<String> = by_kind
                .iter()
                .map(|(k, b)| format!("{} {}", k.replace('_', " "), crate::report::words::fmt_bytes(*b)))
                .collect();
            x.reason = format!("{}; by kind: {}", x.reason, parts.join(", "));
        }
    }
    // A suspect whose segments of PyTorch's caching allocator are mostly free blocks at exit,
    // beside a suspect whose segments hold tensors, is the pool growing around memory held
    // elsewhere (measured on the H200: kept logits fragment the pool, whose new segments, made
    // by the backward pass and the optimizer, end up free), not a cause of its own. Alone, it
    // stays: the program may have let go of what it held only at the end (a loop inside
    // `main()` whose list is gone at exit).
    let shares: Vec<Option<(u64, u64, u64)>> = out.iter().map(|x| torch_share(x, walked)).collect();
    let held = |s: &Option<(u64, u64, u64)>| s.is_some_and(|(live, in_use, _)| in_use.saturating_mul(2) >= live);
    let pool_only = |s: &Option<(u64, u64, u64)>| {
        s.is_some_and(|(live, in_use, other)| in_use.saturating_mul(2) < live && other <= live)
    };
    if shares.iter().any(held) {
        let mut share = shares.iter();
        out.retain(|x| {
            let s = share.next().copied().flatten();
            let k = !pool_only(&s);
            if !k {
                let (live, in_use, _) = s.unwrap_or_default();
                notes.push(format!(
                    "not a suspect: {}, {} in segments of PyTorch's caching allocator of which {} were in tensors at exit, \
                     beside a suspect whose segments hold tensors (the rest is free memory the allocator keeps for reuse)",
                    x.headline,
                    crate::report::words::fmt_bytes(live),
                    crate::report::words::fmt_bytes(in_use)
                ));
            }
            k
        });
    }
    let mut suppressed: Vec<Suppressed> = Vec::new();
    for (name, x) in hidden {
        // A union of the sites of one line hides all of them.
        let ids = std::iter::once(x.site).chain(x.line_sites.iter().copied());
        match suppressed.iter_mut().find(|s| s.suppression == name) {
            Some(s) => {
                for id in ids {
                    if !s.sites.contains(&id) {
                        s.sites.push(id);
                    }
                }
                s.live_bytes = s.live_bytes.saturating_add(x.live_bytes);
            }
            None => {
                let mut sites: Vec<u32> = Vec::new();
                for id in ids {
                    if !sites.contains(&id) {
                        sites.push(id);
                    }
                }
                suppressed.push(Suppressed { suppression: name, sites, live_bytes: x.live_bytes })
            }
        }
    }
    (out, suppressed)
}

/// The exit heap walk's sites by id (empty without a walk), read by the suspects' grouping.
type Walked<'a> = HashMap<u32, &'a crate::report::SiteHolders>;

/// The sites of `holders` by id.
fn walked_sites(holders: Option<&crate::report::Holders>) -> Walked<'_> {
    holders.map_or(&[][..], |h| h.sites.as_slice()).iter().filter_map(|s| Some((s.site?, s))).collect()
}

/// Per site, the headlines of the PyTorch blocks inside its segments that were allocated from a
/// line of user code, with their bytes (`walked`: the exit heap walk's sites and their `blocks`), each block
/// frame classed and named as the site's own Python frames are (`Python::block_frame`).
fn block_heads(walked: &Walked<'_>, py: &crate::explain::pyframes::Python) -> HashMap<u32, Vec<(Headline, u64)>> {
    let mut out: HashMap<u32, Vec<(Headline, u64)>> = HashMap::new();
    for (&site, s) in walked {
        for b in s.blocks.iter().chain(&s.more_blocks) {
            let frames: Vec<crate::report::Frame> =
                b.frames.iter().map(|f| py.block_frame(&f.file, f.line, &f.function)).collect();
            if let Some(h) = headline(&frames, None).filter(|h| h.key.starts_with("user ")) {
                out.entry(site).or_default().push((h, b.bytes));
            }
        }
    }
    out
}

/// The headline holding most of the block bytes of `sites` (`block_heads`), if it holds at
/// least half of their bytes in use (PyTorch's allocated bytes in their segments, at least the
/// blocks found: blocks without a recorded stack or without a user frame count against it).
fn top_block_head(
    sites: impl Iterator<Item = u32>,
    blocks: &HashMap<u32, Vec<(Headline, u64)>>,
    walked: &Walked<'_>,
) -> Option<Headline> {
    let mut tally: Vec<(Headline, u64)> = Vec::new();
    let (mut total, mut in_use) = (0u64, 0u64);
    let mut seen = HashSet::new();
    for id in sites.filter(|id| seen.insert(*id)) {
        if let Some(s) = walked.get(&id) {
            if s.in_use_from == "torch" {
                in_use = in_use.saturating_add(s.in_use_bytes);
            }
        }
        for (h, b) in blocks.get(&id).into_iter().flatten() {
            total = total.saturating_add(*b);
            match tally.iter_mut().find(|(t, _)| t.key == h.key) {
                Some(t) => t.1 = t.1.saturating_add(*b),
                None => tally.push((h.clone(), *b)),
            }
        }
    }
    let (h, b) = tally.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.key.cmp(&a.0.key)))?;
    (b > 0 && b.saturating_mul(2) >= total.max(in_use)).then_some(h)
}

/// A suspect's memory by PyTorch's own word in the exit heap walk: the live bytes of its sites
/// that are segments of PyTorch's caching allocator (`in_use_from` `torch`), the bytes in use
/// in them (allocated blocks), and the live bytes of its other sites; `None` without a walk
/// or without such sites.
fn torch_share(x: &Suspect, walked: &Walked<'_>) -> Option<(u64, u64, u64)> {
    let (mut live, mut in_use, mut other) = (0u64, 0u64, 0u64);
    for s in x.sites.iter().filter_map(|id| walked.get(id)) {
        if s.in_use_from == "torch" {
            live = live.saturating_add(s.live_bytes);
            in_use = in_use.saturating_add(s.in_use_bytes.min(s.live_bytes));
        } else {
            other = other.saturating_add(s.live_bytes);
        }
    }
    (live > 0).then_some((live, in_use, other))
}

/// Builds the report of `state`.
pub fn build(state: &State, ctx: Context<'_>, sym: &mut Symbolizer) -> Report {
    let end = ctx.end_ts_ns.max(state.last_ts_ns);
    let start = state.first_ts_ns.unwrap_or(end).min(end);
    let secs = |ts: u64| ts.saturating_sub(start) as f64 / 1e9;
    let mut notes = ctx.notes;
    // Owners and lines of user code of every site with live memory (symbolized once; cached).
    let mut owner_of: HashMap<u32, owners::Owner> = HashMap::new();
    let mut hints = rank::Hints { work_end_ns: ctx.work_end_ns, ..rank::Hints::default() };
    let live_sites: HashSet<u32> =
        state.live().map(|(_, e)| e.site).chain(state.swept.iter().map(|e| e.site)).collect();
    for &id in &live_sites {
        let frames = ctx.stacks.get(&id).map(|a| sym.stack_of(id, a)).unwrap_or_default();
        let o = owners::owner_of(&frames);
        if o.pool {
            hints.pool.insert(id);
        }
        if let Some(line) = owners::user_line(&frames) {
            hints.line.insert(id, line);
        }
        owner_of.insert(id, o);
    }
    let suspects = rank::suspects_with(state, start, end, &hints);
    let mut by_owner: BTreeMap<(i32, String), (u64, u64)> = BTreeMap::new();
    for (_, e) in state.live().filter(|(_, e)| e.kind != Kind::PinnedHost) {
        let name = owner_of.get(&e.site).map_or(owners::USER_OWNER, |o| o.name.as_str());
        let v = by_owner.entry((e.device, name.to_string())).or_default();
        v.0 = v.0.saturating_add(e.size);
        v.1 += 1;
    }

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
    let mut missing_stacks = 0;
    let mut frames_of = |id: u32, sym: &mut Symbolizer| match ctx.stacks.get(&id) {
        Some(addrs) => sym.stack_of(id, addrs),
        None => {
            if id != NO_STACK {
                missing_stacks += 1;
            }
            Vec::new()
        }
    };
    let sites: Vec<Site> = order
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
            frames: frames_of(s.id, sym),
            owner: String::new(),
            python: sym.python().site_flag(s.id),
            thread_count: s.threads.len() as u64,
            threads: site_threads(s, ctx.thread_names, secs),
            reach: None,
        })
        .map(|mut s: Site| {
            s.owner = owners::owner_of(&s.frames).name;
            s
        })
        .collect();
    let walked = walked_sites(ctx.holders);
    let blocks = block_heads(&walked, sym.python());
    let (suspects, suppressed) = by_cause(suspects, state, &sites, &blocks, &walked, &mut notes);
    let failures: Vec<FailureRecord> = state
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
            frames: frames_of(f.site, sym),
        })
        .collect();
    if missing_stacks > 0 {
        notes.push(format!(
            "{} a stack the stream never described; they show no frames",
            if missing_stacks == 1 { "1 site names".to_string() } else { format!("{missing_stacks} sites name") }
        ));
    }
    if state.totals.failed_count > failures.len() as u64 {
        notes.push(format!("{} failed allocations; the first {MAX_FAILURES} are listed", state.totals.failed_count));
    }
    for r in &state.resets {
        notes.push(format!(
            "{} tore down {} and freed {} live allocation{} ({}) with it",
            r.api.name(),
            if r.created {
                format!("a context the program created on GPU {}", r.device)
            } else {
                format!("GPU {}'s context", r.device)
            },
            r.count,
            if r.count == 1 { "" } else { "s" },
            crate::report::words::fmt_bytes(r.bytes)
        ));
    }
    if let (count @ 1.., bytes) = state.teardown_freed() {
        notes.push(format!(
            "{} ({}) {} freed only by the interpreter's teardown, after the exit heap walk; they count as live here",
            crate::report::words::count(count, "allocation"),
            crate::report::words::fmt_bytes(bytes),
            if count == 1 { "was" } else { "were" }
        ));
    }
    graph_notes(state, &mut notes);
    notes.extend(sym.problems().iter().cloned());
    let allocations = live_allocations(state, &secs, &mut notes);

    let timeline = state.timeline.to_report(start, end, &state.kinds, &state.devices);
    let ordinals: Vec<i32> = state.devices.keys().copied().collect();
    let (gpu_memory, findings) =
        gpumem::table(&by_owner, &ordinals, ctx.driver, &timeline, start, state.teardown_from_ns);
    let t = &state.totals;
    let k = &state.kinds;
    Report {
        schema: SCHEMA.to_string(),
        pid: ctx.hello.pid,
        ppid: ctx.hello.ppid,
        command: ctx.hello.command.clone(),
        cwd: ctx.hello.cwd.clone(),
        reason: ctx.reason,
        snapshot: ctx.snapshot,
        label: None,
        interval: None,
        oom: None,
        start_unix_ns: ctx.hello.start_unix_ns,
        duration_s: secs(end),
        shim_version: ctx.hello.shim_version.clone(),
        collector_version: env!("CARGO_PKG_VERSION").to_string(),
        totals: Totals {
            live_bytes: t.gauge.live_bytes,
            live_count: t.gauge.live_count,
            peak_live_bytes: t.gauge.peak_live_bytes,
            alloc_count: t.alloc_count,
            alloc_bytes: t.alloc_bytes,
            free_count: t.free_count,
            failed_count: t.failed_count,
            unknown_free_count: t.unknown_free_count,
            failed_free_count: t.failed_free_count,
            replaced_count: t.replaced_count,
            lost_events: ctx.lost_events,
            unknown_unmap_count: state.vmm.unknown_unmap_count,
            reorder_overflow: t.reorder_overflow,
            late_events: t.late_count,
            evicted_stacks: t.evicted_stacks,
        },
        kinds: Kinds {
            device: kind_totals(&k[Kind::Device as usize]),
            managed: kind_totals(&k[Kind::Managed as usize]),
            pinned_host: kind_totals(&k[Kind::PinnedHost as usize]),
        },
        devices: state
            .devices
            .iter()
            .map(|(&ordinal, g)| DeviceTotals {
                ordinal,
                live_bytes: g.live_bytes,
                live_count: g.live_count,
                peak_live_bytes: g.peak_live_bytes,
            })
            .collect(),
        vmm: state
            .vmm
            .devices
            .iter()
            .map(|(&ordinal, g)| VmmTotals {
                ordinal,
                handles: g.handles,
                created_bytes: g.created_bytes,
                released_mapped: g.released_mapped,
                released_mapped_bytes: g.released_mapped_bytes,
                imported_handles: g.imported_handles,
                mappings: g.mappings,
                mapped_bytes: g.mapped_bytes,
                peak_mapped_bytes: g.peak_mapped_bytes,
            })
            .collect(),
        sites,
        suspects,
        suppressed,
        failures,
        mem_info: ctx
            .mem_info
            .values()
            .map(|m| MemInfoRecord {
                device: m.device,
                free_bytes: m.free,
                total_bytes: m.total,
                ts_s: (m.ts_ns as f64 - start as f64) / 1e9,
            })
            .collect(),
        timeline,
        interpreter_teardown: match state.teardown_freed() {
            (0, _) => None,
            (count, bytes) => Some(crate::report::InterpreterTeardown { count, bytes }),
        },
        context_teardowns: state
            .resets
            .iter()
            .map(|r| TeardownRecord {
                api: r.api.name().to_string(),
                device: r.device,
                created: r.created,
                count: r.count,
                bytes: r.bytes,
            })
            .collect(),
        gpu_memory,
        findings,
        notes,
        allocations,
        physical_devices: Vec::new(),
        identity: None,
        holders: None,
        reachability: None,
    }
}

/// The live pointer allocations of `state`, by address: the largest [`MAX_ALLOCATIONS`] (a note
/// says when more were live). `cuMemCreate` handles are left out: they have no address until
/// mapped, and their mappings are not allocations.
fn live_allocations(state: &State, secs: &dyn Fn(u64) -> f64, notes: &mut Vec<String>) -> Vec<LiveAllocation> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{BlockFrame, BlockStack, Holders, SiteHolders};
    use gpushim_testkit::MIB;

    /// A site of PyTorch's caching allocator with `in_use` bytes in use by PyTorch's count and
    /// blocks of `bytes` each allocated at line `line` of a user's file.
    fn torch_site(site: u32, in_use: u64, blocks: &[(u32, u64)]) -> SiteHolders {
        SiteHolders {
            site: Some(site),
            live_bytes: 32 * MIB,
            in_use_bytes: in_use,
            in_use_from: "torch".to_string(),
            blocks: blocks
                .iter()
                .map(|&(line, bytes)| BlockStack {
                    blocks: 1,
                    bytes,
                    frames: vec![BlockFrame { file: "/home/u/train.py".into(), line, function: "step".into() }],
                })
                .collect(),
            ..SiteHolders::default()
        }
    }

    fn holders(sites: Vec<SiteHolders>) -> Holders {
        Holders {
            schema: String::new(),
            pid: 1,
            reason: "exit".into(),
            number: None,
            walk: Default::default(),
            sites,
            unattributed: SiteHolders::default(),
        }
    }

    fn top(h: &Holders) -> Option<String> {
        let py = crate::explain::pyframes::Python::default();
        let walked = walked_sites(Some(h));
        let blocks = block_heads(&walked, &py);
        top_block_head(h.sites.iter().filter_map(|s| s.site), &blocks, &walked).map(|h| h.text)
    }

    #[test]
    fn blocks_name_a_suspect_only_when_they_hold_half_of_its_bytes_in_use() {
        // 20 of the 29 MiB in use came from line 7: named by it.
        let h = holders(vec![torch_site(1, 29 * MIB, &[(7, 20 * MIB), (9, 2 * MIB)])]);
        assert_eq!(top(&h).as_deref(), Some("step (u/train.py:7)"));
        // 1 MiB found of 29 MiB in use (the rest allocated before the record, or without a
        // user frame): not enough to name it.
        let h = holders(vec![torch_site(1, 29 * MIB, &[(7, MIB)])]);
        assert_eq!(top(&h), None);
        // Counted over the sites of the suspect and over every stack, not only those written.
        let h = holders(vec![
            torch_site(1, 10 * MIB, &[(7, 6 * MIB)]),
            torch_site(2, 10 * MIB, &[(9, 4 * MIB), (7, 4 * MIB)]),
        ]);
        assert_eq!(top(&h).as_deref(), Some("step (u/train.py:7)"));
    }
}
