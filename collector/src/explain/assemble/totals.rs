//! The report's counters, made from the live set's: totals, per kind, per device, the virtual
//! memory management API's, the driver's memory information and the contexts torn down.

use std::collections::BTreeMap;

use gpushim_wire::{Kind, MemInfo};

use crate::account::live::State;
use crate::report::{DeviceTotals, Kinds, MemInfoRecord, TeardownRecord, Totals, VmmTotals};

/// The process-wide counters; `lost_events`: sequence numbers that never arrived.
pub(super) fn totals(state: &State, lost_events: u64) -> Totals {
    Totals { lost_events, unknown_unmap_count: state.vmm.unknown_unmap_count, ..state.totals }
}

/// Live bytes per kind of memory.
pub(super) fn kinds(state: &State) -> Kinds {
    let k = &state.kinds;
    Kinds {
        device: k[Kind::Device as usize],
        managed: k[Kind::Managed as usize],
        pinned_host: k[Kind::PinnedHost as usize],
    }
}

/// Live bytes per device.
pub(super) fn devices(state: &State) -> Vec<DeviceTotals> {
    state
        .devices
        .iter()
        .map(|(&ordinal, g)| DeviceTotals {
            ordinal,
            live_bytes: g.live_bytes,
            live_count: g.live_count,
            peak_live_bytes: g.peak_live_bytes,
        })
        .collect()
}

/// The virtual memory management API's handles and mappings per device.
pub(super) fn vmm(state: &State) -> Vec<VmmTotals> {
    state
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
        .collect()
}

/// The latest memory information per device, its time from `start`.
pub(super) fn mem_info(mem_info: &BTreeMap<i32, MemInfo>, start: u64) -> Vec<MemInfoRecord> {
    mem_info
        .values()
        .map(|m| MemInfoRecord {
            device: m.device,
            free_bytes: m.free,
            total_bytes: m.total,
            ts_s: (m.ts_ns as f64 - start as f64) / 1e9,
        })
        .collect()
}

/// The contexts torn down.
pub(super) fn teardowns(state: &State) -> Vec<TeardownRecord> {
    state
        .resets
        .iter()
        .map(|r| TeardownRecord {
            api: r.api.name().to_string(),
            device: r.device,
            created: r.created,
            count: r.count,
            bytes: r.bytes,
        })
        .collect()
}
