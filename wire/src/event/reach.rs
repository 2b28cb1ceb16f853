//! The reachability scan of the program's memory: which live allocations no pointer reaches.

use super::python::WalkReason;
use crate::WireError;

/// How a [`Reach`] scan went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReachStatus {
    /// Both passes read every mapping they meant to read.
    Complete = 0,
    /// The scan stopped at its time cap (`GPUSHIM_REACHABILITY_MS`): what it found is
    /// reachable, but nothing is called lost.
    Cut = 1,
    /// The scan could not run (`process_vm_readv` refused, `/proc/self/maps` unreadable) or
    /// another scan was running; nothing is classified.
    Failed = 2,
}

impl ReachStatus {
    pub(crate) fn from_u8(v: u8) -> Result<ReachStatus, WireError> {
        Ok(match v {
            0 => ReachStatus::Complete,
            1 => ReachStatus::Cut,
            2 => ReachStatus::Failed,
            _ => return Err(WireError::BadValue("reach status", u64::from(v))),
        })
    }
}

/// What the scan found about one live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReachClass {
    /// No word in the scanned memory held an address inside it, in either pass.
    Lost = 0,
    /// Only words inside malloc'd host blocks that nothing reachable points to held an
    /// address inside it (in both passes).
    IndirectlyLost = 1,
    /// A word in a root (data, stack, anonymous memory) or in a reachable host block held an
    /// address inside it.
    Reachable = 2,
    /// Not decided (the scan was cut before it found a reference).
    Unknown = 3,
    /// No word of the program's own memory held an address inside it, but a word of memory the
    /// scan reads without trusting it did (in either pass): a block of a CUDA library's that
    /// the program also points to, a freed heap block the program still points to, the part of
    /// a blocked thread's custom stack below its stack pointer. As valgrind's "possibly lost":
    /// the program may still hold it.
    PossiblyLost = 4,
}

impl ReachClass {
    pub(crate) fn from_u8(v: u8) -> Result<ReachClass, WireError> {
        Ok(match v {
            0 => ReachClass::Lost,
            1 => ReachClass::IndirectlyLost,
            2 => ReachClass::Reachable,
            3 => ReachClass::Unknown,
            4 => ReachClass::PossiblyLost,
            _ => return Err(WireError::BadValue("reach class", u64::from(v))),
        })
    }
}

/// Where the first reference to a reachable allocation was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReachRegion {
    /// No reference.
    None = 0,
    /// A module's data or bss (`from` is the word's address; the collector names the module
    /// and symbol).
    Data = 1,
    /// A malloc'd block of the main heap reachable from a root.
    Heap = 2,
    /// A thread's stack (`tid`).
    Stack = 3,
    /// Other anonymous memory (large malloc'd blocks, other threads' malloc arenas, the
    /// program's own mappings).
    Anon = 4,
}

impl ReachRegion {
    pub(crate) fn from_u8(v: u8) -> Result<ReachRegion, WireError> {
        Ok(match v {
            0 => ReachRegion::None,
            1 => ReachRegion::Data,
            2 => ReachRegion::Heap,
            3 => ReachRegion::Stack,
            4 => ReachRegion::Anon,
            _ => return Err(WireError::BadValue("reach region", u64::from(v))),
        })
    }
}

/// One live allocation as the reachability scan saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReachEntry {
    /// The allocation's address (as in its [`Alloc`]).
    pub addr: u64,
    /// Its class.
    pub class: ReachClass,
    /// Words referring to it found by the pass that found more (at most `u32::MAX`).
    pub refs: u32,
    /// Whether every reference found points inside it rather than at its first byte.
    pub interior: bool,
    /// Where the first reference was found.
    pub region: ReachRegion,
    /// For [`ReachRegion::Stack`], the thread's id; else 0.
    pub tid: u32,
    /// The address of the first referring word (0 when none).
    pub from: u64,
}

/// The result of a reachability scan of the target's memory (shim: reach.rs), sent after the
/// [`Snapshot`] or failed allocation it belongs to, or before [`Exit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    /// Which report it completes (the same numbering as [`HeapWalk`]).
    pub reason: WalkReason,
    /// The snapshot's or out-of-memory report's number n (from 1); 0 for the exit.
    pub number: u32,
    /// How it went.
    pub status: ReachStatus,
    /// Monotonic clock when the scan started, ns; for an exit's scan asked for when the
    /// program's work ended (`main` returned, `exit()`), when it was asked for.
    pub ts_ns: u64,
    /// How long both passes took, ns.
    pub elapsed_ns: u64,
    /// CPU time the scanning thread spent on both passes, ns (what the scan costs on one core,
    /// whatever else the machine runs).
    pub cpu_ns: u64,
    /// Bytes read by both passes together.
    pub scanned_bytes: u64,
    /// Mappings (or parts) that could not be read and were skipped, bytes.
    pub unreadable_bytes: u64,
    /// What the shim wants said about this scan (empty when nothing).
    pub note: String,
    /// One entry per allocation the shim knew as live when the scan started.
    pub entries: Vec<ReachEntry>,
}
