//! The report's notes on what the live set saw besides allocations and frees: stacks never
//! described, failures past the bound, contexts torn down, the interpreter's teardown and graph
//! memory.

use crate::account::live::{State, MAX_FAILURES};
use crate::report::words::{count, fmt_bytes};

/// The notes on `state`: `missing_stacks` sites and failures name a stack the stream never
/// described, `listed_failures` failures are listed.
pub(super) fn state_notes(state: &State, missing_stacks: u64, listed_failures: usize, notes: &mut Vec<String>) {
    if missing_stacks > 0 {
        notes.push(format!(
            "{} a stack the stream never described; they show no frames",
            if missing_stacks == 1 { "1 site names".to_string() } else { format!("{missing_stacks} sites name") }
        ));
    }
    if state.totals.failed_count > listed_failures as u64 {
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
            fmt_bytes(r.bytes)
        ));
    }
    if let (n @ 1.., bytes) = state.teardown_freed() {
        notes.push(format!(
            "{} ({}) {} freed only by the interpreter's teardown, after the exit heap walk; they count as live here",
            count(n, "allocation"),
            fmt_bytes(bytes),
            if n == 1 { "was" } else { "were" }
        ));
    }
    graph_notes(state, notes);
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
            fmt_bytes(bytes),
            count,
            plural(count)
        ));
    }
    if unlaunched.count > 0 {
        notes.push(format!(
            "{} in {} graph allocation node{} that no launch reached: never allocated, not counted as live",
            fmt_bytes(unlaunched.bytes),
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
