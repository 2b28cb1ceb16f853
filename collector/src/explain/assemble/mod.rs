//! Turns the collector's [`State`] into a [`Report`]: ranks suspects, picks the sites to list,
//! symbolizes their stacks and converts timestamps to seconds.
//!
//! Its rooms: `sites` (owners, the sites listed and their frames, failures, live allocations),
//! `causes` (the suspects grouped by cause), `notes` (what the live set saw besides allocations)
//! and `totals` (the report's counters).

mod causes;
mod notes;
mod sites;
mod totals;

use std::collections::{BTreeMap, HashMap};

use gpushim_wire::{Hello, MemInfo};

use crate::account::live::State;
use crate::account::rank;
use crate::explain::gpumem;
use crate::explain::symbolize::Symbolizer;
use crate::report::{Reason, Report, SCHEMA};

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
    /// The program's activity over time, `(ts_ns, GPU calls so far)`, oldest first; empty
    /// when the stream has none.
    pub activity: &'a [(u64, u64)],
}

/// Builds the report of `state`.
pub fn build(state: &State, ctx: Context<'_>, sym: &mut Symbolizer) -> Report {
    let end = ctx.end_ts_ns.max(state.last_ts_ns);
    let start = state.first_ts_ns.unwrap_or(end).min(end);
    let secs = |ts: u64| ts.saturating_sub(start) as f64 / 1e9;
    let mut notes = ctx.notes;
    let (owner_of, mut hints) = sites::owners_of_live(state, ctx.stacks, ctx.work_end_ns, sym);
    hints.activity = ctx.activity.to_vec();
    hints.accumulated = causes::accumulated(ctx.holders);
    let suspects = rank::suspects_with(state, start, end, &hints);
    let held_growth = if suspects.is_empty() {
        rank::held_growth(state, start, end, &hints).map(|h| crate::report::HeldGrowth {
            site: h.site,
            live_bytes: h.live_bytes,
            live_count: h.live_count,
            grew_s: h.grew_ns as f64 / 1e9,
            held_s: h.held_ns as f64 / 1e9,
            pool: h.pool,
            grew_calls: h.steps.map(|s| s.0),
            held_calls: h.steps.map(|s| s.1),
        })
    } else {
        None
    };
    let by_owner = sites::by_owner(state, &owner_of);
    let order = sites::listed(state, &suspects, &mut notes);
    let mut frames = sites::Frames { stacks: ctx.stacks, missing: 0 };
    let sites = sites::site_records(&order, &mut frames, sym, ctx.thread_names, &secs);
    let walked = causes::walked_sites(ctx.holders);
    let blocks = causes::block_heads(&walked, sym.python());
    let complete = ctx.holders.is_some_and(|h| h.walk.status == "complete");
    let suspects = causes::without_pool_retention(suspects, &hints.pool, complete.then_some(&walked), &mut notes);
    let (mut suspects, suppressed) = causes::by_cause(suspects, state, &sites, &blocks, &walked, &mut notes);
    // A suspect's sites, most live bytes first (then by id), wherever they are listed.
    let live_of = |id: u32| sites.iter().find(|x| x.id == id).map_or(0, |x| x.live_bytes);
    for s in &mut suspects {
        s.sites.sort_by(|&a, &b| live_of(b).cmp(&live_of(a)).then(a.cmp(&b)));
    }
    let failures = sites::failure_records(state, &mut frames, sym, &secs);
    notes::state_notes(state, frames.missing, failures.len(), &mut notes);
    notes.extend(sym.problems().iter().cloned());
    let allocations = sites::live_allocations(state, &secs, &mut notes);
    let timeline = state.timeline.to_report(start, end, &state.kinds, &state.devices);
    let ordinals: Vec<i32> = state.devices.keys().copied().collect();
    let (gpu_memory, findings) =
        gpumem::table(&by_owner, &ordinals, ctx.driver, &timeline, start, state.teardown_from_ns);
    let memory_kinds =
        ctx.holders.map(|h| crate::explain::kinds::complete(&h.kinds, &gpu_memory, &sites)).unwrap_or_default();
    Report {
        schema: SCHEMA.to_string(),
        pid: ctx.hello.pid,
        ppid: ctx.hello.ppid,
        command: ctx.hello.command.clone(),
        cwd: ctx.hello.cwd.clone(),
        reason: ctx.reason,
        signal: None,
        snapshot: ctx.snapshot,
        label: None,
        interval: None,
        oom: None,
        start_unix_ns: ctx.hello.start_unix_ns,
        duration_s: secs(end),
        shim_version: ctx.hello.shim_version.clone(),
        collector_version: env!("CARGO_PKG_VERSION").to_string(),
        totals: totals::totals(state, ctx.lost_events),
        kinds: totals::kinds(state),
        devices: totals::devices(state),
        vmm: totals::vmm(state),
        sites,
        suspects,
        suppressed,
        held_growth,
        failures,
        mem_info: totals::mem_info(ctx.mem_info, start),
        timeline,
        interpreter_teardown: match state.teardown_freed() {
            (0, _) => None,
            (count, bytes) => Some(crate::report::InterpreterTeardown { count, bytes }),
        },
        context_teardowns: totals::teardowns(state),
        gpu_memory,
        memory_kinds,
        findings,
        notes,
        allocations,
        physical_devices: Vec::new(),
        identity: None,
        holders: None,
        reachability: None,
    }
}

#[cfg(test)]
mod tests {
    use super::causes::{block_heads, top_block_head, walked_sites};
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
            kinds: vec![],
        }
    }

    fn top(h: &Holders) -> Option<String> {
        let py = crate::explain::pyframes::Python::default();
        let walked = walked_sites(Some(h));
        let blocks = block_heads(&walked, &py);
        top_block_head(h.sites.iter().filter_map(|s| s.site), &blocks, &walked).map(|h| h.text)
    }

    #[test]
    fn a_pool_keeping_freed_memory_beside_a_working_set_is_no_suspect() {
        use super::causes::without_pool_retention;
        use crate::report::Suspect;
        let sus = |site: u32, line_sites: Vec<u32>| Suspect { site, line_sites, ..Suspect::default() };
        // Site 1: 8 of 32 MiB in use (a bounded cache refilled); site 2: 30 of 32 MiB (kept
        // tensors); site 3: nothing in use (let go only at the end); site 4 is no pool's.
        let h = holders(vec![
            torch_site(1, 8 * MIB, &[]),
            torch_site(2, 30 * MIB, &[]),
            torch_site(3, 0, &[]),
            torch_site(4, 8 * MIB, &[]),
            torch_site(5, 20 * MIB, &[]),
        ]);
        let walked = walked_sites(Some(&h));
        let pool: std::collections::HashSet<u32> = [1, 2, 3, 5].into();
        let all = || vec![sus(1, vec![]), sus(2, vec![]), sus(3, vec![]), sus(4, vec![]), sus(1, vec![1, 5])];
        let mut notes = Vec::new();
        let kept: Vec<(u32, Vec<u32>)> = without_pool_retention(all(), &pool, Some(&walked), &mut notes)
            .into_iter()
            .map(|s| (s.site, s.line_sites))
            .collect();
        // The union of 1 and 5: 28 of 64 MiB in use, less than half.
        assert_eq!(kept, vec![(2, vec![]), (3, vec![]), (4, vec![])]);
        assert_eq!(notes.len(), 2);
        assert!(
            notes[0].starts_with(
                "not a suspect: site 1: 32.0 MiB in a caching pool's segments of which 8.0 MiB were in use"
            ),
            "{}",
            notes[0]
        );
        // Without a complete walk nothing is taken out.
        assert_eq!(without_pool_retention(all(), &pool, None, &mut notes).len(), 5);
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
