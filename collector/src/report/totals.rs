//! The report's totals: process-wide counters and live bytes per kind, per device and of the
//! virtual memory management API.

use serde::{Deserialize, Serialize};

use super::is_zero;

/// Process-wide counters: the one declaration the live set counts into
/// ([`State::totals`](crate::account::live::State)), the report writes and the metrics endpoint
/// shows. `lost_events` and `unknown_unmap_count` are filled in when a report or a scrape is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Live bytes and allocations at the end, and the peak of live bytes.
    #[serde(flatten)]
    pub gauge: Gauge,
    /// Successful allocations.
    pub alloc_count: u64,
    /// Bytes of all successful allocations.
    #[serde(default)]
    pub alloc_bytes: u64,
    /// Successful frees of known allocations.
    pub free_count: u64,
    /// Failed allocation calls.
    pub failed_count: u64,
    /// Free calls (successful or not) of an address or handle that was not live.
    pub unknown_free_count: u64,
    /// Free calls of a live allocation that returned an error (it stays live).
    pub failed_free_count: u64,
    /// Allocations that returned an address still live (a free was missed).
    pub replaced_count: u64,
    /// Events the collector never received (gaps in the sequence numbers).
    #[serde(default)]
    pub lost_events: u64,
    /// Successful `cuMemUnmap` calls of a range that held no known mapping.
    #[serde(default)]
    pub unknown_unmap_count: u64,
    /// Sequence numbers the collector stopped waiting for because its reorder buffer was full
    /// (`GPUSHIM_REORDER_MIB`); absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reorder_overflow: u64,
    /// Events of those numbers that arrived afterwards and were applied then, out of order;
    /// absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late_events: u64,
    /// Sites (distinct stacks) with no live allocation that the collector forgot to stay
    /// within `GPUSHIM_MAX_STACKS`; their counts are still in every total; absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub evicted_stacks: u64,
}

/// Live bytes and count with their high-water mark: of the process, of one kind of memory, of
/// one device or of one site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gauge {
    /// Bytes live (at the end, in a report).
    pub live_bytes: u64,
    /// Allocations live.
    pub live_count: u64,
    /// Highest `live_bytes` ever reached, bytes.
    pub peak_live_bytes: u64,
}

impl Gauge {
    /// Counts a new live allocation of `size` bytes.
    pub(crate) fn add(&mut self, size: u64) {
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.live_count += 1;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    /// Takes out a live allocation of `size` bytes (freed, or replaced by a new one).
    pub(crate) fn sub(&mut self, size: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.live_count = self.live_count.saturating_sub(1);
    }
}

/// Per-kind totals; all three are always present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kinds {
    /// Device memory.
    pub device: Gauge,
    /// Managed (unified) memory.
    pub managed: Gauge,
    /// Pinned host memory.
    pub pinned_host: Gauge,
}

impl Kinds {
    /// The three kinds with their report names, in report order.
    pub fn iter(&self) -> [(&'static str, &Gauge); 3] {
        [("device", &self.device), ("managed", &self.managed), ("pinned_host", &self.pinned_host)]
    }
}

/// Live device and managed memory on one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTotals {
    /// CUDA device ordinal (>= 0).
    pub ordinal: i32,
    /// Bytes live at the end.
    pub live_bytes: u64,
    /// Allocations live at the end.
    pub live_count: u64,
    /// Highest live bytes at any moment, bytes.
    pub peak_live_bytes: u64,
}

/// Virtual memory management on one device: physical allocations, imported handles and
/// mappings at the end of the report. A physical allocation lives until every reference to
/// it is released and every mapping of it is unmapped (CUDA Driver API, `cuMemRelease`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmmTotals {
    /// CUDA device ordinal; -1 for host memory or an unknown device.
    pub ordinal: i32,
    /// Physical allocations made by `cuMemCreate` still live.
    pub handles: u64,
    /// Their bytes (part of the device's `live_bytes`).
    pub created_bytes: u64,
    /// Of those, the allocations every reference has released that live on only because
    /// they are still mapped.
    pub released_mapped: u64,
    /// Their bytes.
    pub released_mapped_bytes: u64,
    /// Imported handles (`cuMemImportFromShareableHandle`) still held: memory another
    /// process (or this one, under another handle) counts, so not in `live_bytes`.
    pub imported_handles: u64,
    /// Virtual address ranges mapped (`cuMemMap`) and not unmapped.
    pub mappings: u64,
    /// Their bytes, of created and imported handles alike.
    pub mapped_bytes: u64,
    /// Highest `mapped_bytes` at any moment, bytes.
    pub peak_mapped_bytes: u64,
}
