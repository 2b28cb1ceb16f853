//! Graph memory in the live set (CUDA Programming Guide, "Graph Memory Nodes"): allocation
//! nodes are only known until a launch of their executable graph makes their memory live under
//! the site that made the node, and free nodes free it.

use std::collections::BTreeMap;

use gpushim_wire::{Api, GraphExec, GraphLaunch, Kind};

use super::{Entry, State};

/// A graph allocation node, as the live set needs it when a launch makes its memory live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Size in bytes.
    pub size: u64,
    /// Kind of memory.
    pub kind: Kind,
    /// Device ordinal, or -1.
    pub device: i32,
    /// Stack id of the node's creation (or of the instantiation when the creation was not seen).
    pub site: u32,
    /// The entry point that made the node.
    pub api: Api,
    /// Whether a launch ever made its memory live.
    pub launched: bool,
}

/// What a launch of one executable graph does to the live set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ExecTable {
    allocs: Vec<(u64, NodeInfo)>,
    frees: Vec<u64>,
    auto_free: bool,
}

/// Graph memory counters (CUDA Programming Guide, "Graph Memory Nodes").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Executable graphs with memory nodes instantiated.
    pub execs: u64,
    /// Launches of them.
    pub launches: u64,
    /// Launches of an executable graph whose instantiation was not seen (nothing applied).
    pub unknown_launches: u64,
    /// Calls of `cudaDeviceGraphMemTrim`/`cuDeviceGraphMemTrim`, by API and device.
    pub trims: BTreeMap<(Api, i32), u64>,
    /// Allocation nodes no launch reached whose virtual address a later node took (the driver
    /// reuses the address of a destroyed graph's node): how many, and their bytes.
    pub retired_unlaunched: UnlaunchedNodes,
}

/// Allocation nodes whose memory no launch ever made live, as the report tells them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnlaunchedNodes {
    /// How many.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl State {
    /// Frees the live pointer `addr` (a graph's free node, or an auto-free at relaunch); a free
    /// node of an address that is not live counts as an unknown free.
    fn graph_free(&mut self, addr: u64, ts_ns: u64) {
        match self.live.remove(&(false, addr)) {
            Some(e) => {
                self.count_free(&e);
                self.release(&e, ts_ns);
            }
            None => self.totals.unknown_free_count += 1,
        }
    }

    /// An instantiation: the executable graph's allocation nodes, each with the site of its
    /// creation when that was seen, else the instantiation's.
    pub(super) fn graph_exec(&mut self, x: &GraphExec) {
        let allocs = x
            .allocs
            .iter()
            .map(|a| {
                let made = self.graph_nodes.get(&a.addr);
                let info = NodeInfo {
                    size: a.size,
                    kind: a.kind,
                    device: a.device,
                    site: made.map_or(x.stack, |n| n.site),
                    api: made.map_or(x.api, |n| n.api),
                    launched: false,
                };
                if made.is_none() {
                    self.graph_nodes.insert(a.addr, info);
                }
                (a.addr, info)
            })
            .collect();
        self.graph_execs.insert(x.exec, ExecTable { allocs, frees: x.frees.clone(), auto_free: x.auto_free });
        self.graphs.execs += 1;
    }

    /// A launch (CUDA Programming Guide, "Graph Memory Nodes"; `cuGraphLaunch`): with
    /// `AUTO_FREE_ON_LAUNCH`, the allocations of the previous launch still unfreed are freed
    /// first; then each allocation node's memory becomes live under the node's site, and each
    /// free node frees its address (a free node is ordered after the allocation it frees).
    pub(super) fn graph_launch(&mut self, l: &GraphLaunch) {
        let Some(t) = self.graph_execs.get(&l.exec) else {
            self.graphs.unknown_launches += 1;
            return;
        };
        let t = t.clone();
        self.graphs.launches += 1;
        if t.auto_free {
            for (addr, _) in &t.allocs {
                if self.live.contains_key(&(false, *addr)) {
                    self.graph_free(*addr, l.ts_ns);
                }
            }
        }
        for (addr, info) in &t.allocs {
            let e = Entry {
                size: info.size,
                kind: info.kind,
                api: info.api,
                device: info.device,
                site: info.site,
                seq: l.seq,
                ts_ns: l.ts_ns,
                // Graph memory is counted in the primary context (a context the program
                // created does not take it when destroyed).
                ctx: 0,
            };
            self.insert_live((false, *addr), e, None);
            if let Some(n) = self.graph_nodes.get_mut(addr) {
                n.launched = true;
            }
        }
        for &addr in &t.frees {
            self.graph_free(addr, l.ts_ns);
        }
    }

    /// Allocation nodes no launch ever made live (a graph destroyed unlaunched, or not
    /// launched yet): memory that is not counted as live.
    pub fn unlaunched_graph_nodes(&self) -> UnlaunchedNodes {
        let mut u = self.graphs.retired_unlaunched;
        for n in self.graph_nodes.values().filter(|n| !n.launched) {
            u.count += 1;
            u.bytes = u.bytes.saturating_add(n.size);
        }
        u
    }

    /// Live allocations made by graph launches: how many and their bytes.
    pub fn live_graph_allocations(&self) -> (u64, u64) {
        self.live
            .iter()
            .filter(|((handle, addr), _)| !handle && self.graph_nodes.get(addr).is_some_and(|n| n.launched))
            .fold((0, 0), |(c, b), (_, e)| (c + 1, b + e.size))
    }
}
