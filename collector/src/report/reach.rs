//! Reachability in a report: what the shim's scan of the program's memory found of each site's
//! live allocations.

use serde::{Deserialize, Serialize};

/// The scan's result for one report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reachability {
    /// `complete`, `cut` (stopped at `GPUSHIM_REACHABILITY_MS`: nothing is called lost) or
    /// `failed` (nothing classified).
    pub status: String,
    /// How long both passes took, milliseconds.
    pub elapsed_ms: f64,
    /// Bytes of the program's memory read, both passes together.
    pub scanned_bytes: u64,
    /// Bytes that could not be read (unmapped meanwhile) and were skipped.
    pub unreadable_bytes: u64,
    /// `scanned_bytes` per second of `elapsed_ms`.
    pub bytes_per_s: f64,
    /// CPU time the scanning thread spent, milliseconds.
    #[serde(default)]
    pub cpu_ms: f64,
    /// `scanned_bytes` per second of `cpu_ms`: the rate on one core.
    #[serde(default)]
    pub bytes_per_cpu_s: f64,
    /// What the shim said about the scan, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Live allocations no word refers to.
    pub definitely_lost_count: u64,
    /// Their bytes.
    pub definitely_lost_bytes: u64,
    /// Live allocations referred to only from unreachable host blocks.
    pub indirectly_lost_count: u64,
    /// Their bytes.
    pub indirectly_lost_bytes: u64,
    /// Live allocations referred to only from memory the scan reads without trusting it (a
    /// CUDA library's block the program also points to, a freed block the program still points
    /// to, a blocked thread's custom stack below its stack pointer): the program may hold them.
    #[serde(default)]
    pub possibly_lost_count: u64,
    /// Their bytes.
    #[serde(default)]
    pub possibly_lost_bytes: u64,
    /// Live allocations a reachable word refers to (framework allocators' segments excluded).
    pub reachable_count: u64,
    /// Their bytes.
    pub reachable_bytes: u64,
    /// Of the reachable ones, those referred to only by interior pointers.
    pub interior_count: u64,
    /// Live allocations the scan did not decide: cut before a reference was found, or made
    /// after the scan started, or not scanned (`cuMemCreate` handles).
    pub unknown_count: u64,
    /// Their bytes.
    pub unknown_bytes: u64,
    /// One line per framework allocator: its segments, reachable by the allocator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub framework_held: Vec<FrameworkHeld>,
    /// The most referenced reachable allocations, most references first (at most
    /// `crate::explain::reach::MOST_REFERENCED`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub most_referenced: Vec<Held>,
}

/// A framework's caching allocator and the live memory it holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameworkHeld {
    /// `PyTorch CUDACachingAllocator`, `CuPy memory pool` or `XLA BFC allocator`.
    pub allocator: String,
    /// Live allocations (segments).
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A reachable allocation and where it is held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Held {
    /// The allocation's address, `0x…`.
    pub address: String,
    /// Its size, bytes.
    pub size: u64,
    /// Its site (see [`crate::report::Site::id`]).
    pub site: u32,
    /// Words referring to it.
    pub refs: u32,
    /// True if every reference points inside it rather than at its start.
    pub interior: bool,
    /// Where the first reference is: `data of MODULE (SYMBOL)`, `heap`, `stack of thread N`,
    /// `anonymous memory`.
    pub from: String,
}

/// A site's allocations by class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteReach {
    /// Live allocations of the site no word refers to.
    pub definitely_lost_count: u64,
    /// Their bytes.
    pub definitely_lost_bytes: u64,
    /// Live allocations referred to only from unreachable host blocks.
    pub indirectly_lost_count: u64,
    /// Their bytes.
    pub indirectly_lost_bytes: u64,
    /// Live allocations referred to only from memory the scan does not trust.
    #[serde(default)]
    pub possibly_lost_count: u64,
    /// Their bytes.
    #[serde(default)]
    pub possibly_lost_bytes: u64,
    /// Live allocations a reachable word refers to.
    pub reachable_count: u64,
    /// Of those, the ones referred to only by interior pointers.
    pub interior_count: u64,
    /// Live allocations classified (the M of "N of M").
    pub scanned_count: u64,
    /// The framework allocator that holds the site's memory, if any (then nothing else is
    /// counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
}
