//! The report: the JSON the collector writes and `gpushim report`/`diff` read back.
//!
//! The same structs serve both directions, so what is written can always be read. Fields are
//! documented with their units in `docs/report-schema.md`; fields added after the first
//! version carry `#[serde(default)]` so older reports still read.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub mod json;
pub mod output;
pub mod words;

/// The value of [`Report::schema`] this collector writes and reads.
pub const SCHEMA: &str = "gpushim.report.v1";

/// Why a report was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The target ran its exit path.
    Exit,
    /// The stream ended without an exit event (killed, crashed, or the stream broke).
    Killed,
    /// A snapshot was requested (SIGUSR1 or `gpushim snapshot`).
    Snapshot,
    /// An allocation failed with out of memory (the report's `oom` says which).
    Oom,
    /// A rolling report of a long run (`GPUSHIM_REPORT_INTERVAL`; the report's `interval` says
    /// which).
    Interval,
}

impl Reason {
    /// The name used in the JSON and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Exit => "exit",
            Reason::Killed => "killed",
            Reason::Snapshot => "snapshot",
            Reason::Oom => "oom",
            Reason::Interval => "interval",
        }
    }
}

/// A whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Process id of the target.
    pub pid: u32,
    /// Parent process id of the target.
    #[serde(default)]
    pub ppid: u32,
    /// The target's command line.
    pub command: Vec<String>,
    /// The target's working directory when tracing started.
    #[serde(default)]
    pub cwd: String,
    /// Why the report was written.
    pub reason: Reason,
    /// The snapshot's number (1, 2, …) for snapshots; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<u32>,
    /// The label of a snapshot asked for through the Python API (`gpushim.snapshot(label)`),
    /// reduced to `[A-Za-z0-9._-]`, at most 64 characters; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The interval report's number (1, 2, …) for interval reports; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u32>,
    /// The failed allocation an out-of-memory report is about; absent in other reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<Oom>,
    /// Wall-clock time tracing started, ns since the Unix epoch.
    #[serde(default)]
    pub start_unix_ns: u64,
    /// Seconds from the first to the last event the report covers.
    pub duration_s: f64,
    /// Version of the shim that wrote the event stream.
    pub shim_version: String,
    /// Version of the collector that wrote the report.
    #[serde(default)]
    pub collector_version: String,
    /// Process-wide counters.
    pub totals: Totals,
    /// Live memory per kind.
    pub kinds: Kinds,
    /// Live device and managed memory per device ordinal, ascending.
    pub devices: Vec<DeviceTotals>,
    /// Use of the driver's virtual memory management API (`cuMemCreate`, `cuMemMap`, …) per
    /// device ordinal, ascending (-1: host memory or an unknown device); absent when the
    /// program made no such call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vmm: Vec<VmmTotals>,
    /// Allocation sites, most live bytes first.
    pub sites: Vec<Site>,
    /// Leak suspects, most likely first.
    pub suspects: Vec<Suspect>,
    /// Suspects a suppression hid; absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suppressed: Vec<Suppressed>,
    /// Failed allocations, in order.
    pub failures: Vec<FailureRecord>,
    /// Device memory as the driver last reported it (sent by the shim with out-of-memory
    /// failures), one entry per device.
    #[serde(default)]
    pub mem_info: Vec<MemInfoRecord>,
    /// Live bytes per kind and per device over time.
    #[serde(default)]
    pub timeline: Timeline,
    /// Contexts torn down, in order, with the live memory they freed; absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_teardowns: Vec<TeardownRecord>,
    /// Allocations live when a CPython program's exit heap walk started that only the
    /// interpreter's teardown freed afterwards (`__del__` of objects in globals); they are
    /// counted as live in this report. Absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter_teardown: Option<InterpreterTeardown>,
    /// Where the GPU memory is, per device ordinal (ascending): live bytes per owner, and the
    /// driver's view of the process's device memory with the untraced remainder.
    #[serde(default)]
    pub gpu_memory: Vec<GpuMemory>,
    /// Observations that are not leak suspects (untraced device memory that grew), in words.
    #[serde(default)]
    pub findings: Vec<String>,
    /// The machine's GPU behind each device ordinal the process used, as its driver said;
    /// absent when the shim sent none (older shims, no device memory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub physical_devices: Vec<PhysicalDevice>,
    /// Who the process is in a multi-process job (rank, launcher, visible GPUs); absent when
    /// no launcher variable was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// Messages from the shim and the collector about the report's completeness.
    pub notes: Vec<String>,
    /// The live pointer allocations at the end of the report, one each (at most
    /// [`MAX_ALLOCATIONS`], the largest), by address; absent in older files. Exports that need
    /// addresses (`--format torch-snapshot`) read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<LiveAllocation>,
    /// The reachability scan of the program's memory (final report of a normal exit; absent
    /// when there was none, e.g. `GPUSHIM_REACHABILITY=0` or a killed program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachability: Option<Reachability>,
    /// Who holds the memory (CPython targets): the heap walk's companion file, merged in when
    /// the report is read or rendered; never written into the report itself.
    #[serde(skip)]
    pub holders: Option<Holders>,
}

/// The machine's GPU behind one device ordinal (CUDA Driver API, "Device Management":
/// `cuDeviceGetPCIBusId`, `cuDeviceGetUuid_v2`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhysicalDevice {
    /// The ordinal the process saw (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: i32,
    /// PCI `domain:bus:device.function`, as the driver wrote it; empty when unknown.
    pub pci_bus_id: String,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, the form `nvidia-smi -L` and
    /// `CUDA_VISIBLE_DEVICES` use; empty when unknown.
    pub uuid: String,
}

/// A process's place in a multi-process job, from the launcher's environment variables as the
/// shim read them when tracing started (the `Identity` event of the stream).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Global rank: `RANK`, else `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK` or `PMI_RANK`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Rank on this host: `LOCAL_RANK`, else `SLURM_LOCALID` or `OMPI_COMM_WORLD_LOCAL_RANK`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// Number of ranks: `WORLD_SIZE`, else `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE` or `PMI_SIZE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The launcher's job id: `TORCHELASTIC_RUN_ID`, else `SLURM_JOB_ID` (with
    /// `.SLURM_STEP_ID` when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` as set, which maps device ordinals to the machine's GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    /// Every launcher variable that was set, by name.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Process-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Bytes live at the end.
    pub live_bytes: u64,
    /// Allocations live at the end.
    pub live_count: u64,
    /// Highest live bytes at any moment, bytes.
    pub peak_live_bytes: u64,
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

/// Live bytes and count with their peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindTotals {
    /// Bytes live at the end.
    pub live_bytes: u64,
    /// Allocations live at the end.
    pub live_count: u64,
    /// Highest live bytes at any moment, bytes.
    pub peak_live_bytes: u64,
}

/// Per-kind totals; all three are always present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kinds {
    /// Device memory.
    pub device: KindTotals,
    /// Managed (unified) memory.
    pub managed: KindTotals,
    /// Pinned host memory.
    pub pinned_host: KindTotals,
}

impl Kinds {
    /// The three kinds with their report names, in report order.
    pub fn iter(&self) -> [(&'static str, &KindTotals); 3] {
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

/// One allocation site: one distinct native backtrace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// The stack id from the event stream; 4294967295 means no backtrace was recorded.
    pub id: u32,
    /// Kind of the site's first allocation: `device`, `managed` or `pinned_host`.
    pub kind: String,
    /// Distinct allocating API names, in order of first use.
    pub apis: Vec<String>,
    /// Bytes live at the end.
    pub live_bytes: u64,
    /// Allocations live at the end.
    pub live_count: u64,
    /// Successful allocations made here.
    pub alloc_count: u64,
    /// Their total size, bytes.
    pub alloc_bytes: u64,
    /// Successful frees of allocations made here.
    pub free_count: u64,
    /// Highest live bytes of this site at any moment, bytes.
    pub peak_live_bytes: u64,
    /// Time of the first allocation, seconds after the report's first event.
    #[serde(default)]
    pub first_alloc_s: f64,
    /// Time of the latest allocation, seconds after the report's first event.
    #[serde(default)]
    pub last_alloc_s: f64,
    /// Live bytes over time: `[seconds after the first event, bytes]` pairs, at most 256,
    /// evenly thinned.
    #[serde(default)]
    pub series: Vec<(f64, u64)>,
    /// The backtrace, innermost first, inlined calls expanded.
    pub frames: Vec<Frame>,
    /// Who made the allocations: the allocator or library of the innermost frames
    /// (`PyTorch caching allocator (cuBLAS workspace)`), or `user code (direct calls)`
    /// (collector/src/owners.rs). Empty in reports of older collectors.
    #[serde(default)]
    pub owner: String,
    /// Present only when the target ran Python whose frames were recorded: true if and only if
    /// the site's stack has Python frames (false for threads running no Python code, such as
    /// PyTorch's autograd threads or threads started by native code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<bool>,
    /// Distinct threads that allocated here (the collector keeps at most
    /// `gauge::MAX_SITE_THREADS` per site; more are counted in `other_thread_allocs`).
    #[serde(default)]
    pub thread_count: u64,
    /// The threads that allocated here, most allocations first (at most
    /// `assemble::MAX_LISTED_THREADS`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<SiteThread>,
    /// The site's live allocations by reachability class, when the report has a scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<SiteReach>,
}

impl Site {
    /// True if and only if no backtrace was recorded for this site.
    pub fn no_backtrace(&self) -> bool {
        self.id == gpushim_wire::NO_STACK
    }
}

/// One symbolized frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Function name, demangled; `??` when unknown.
    pub function: String,
    /// Source file, when debug information had it.
    pub file: Option<String>,
    /// Source line, when debug information had it.
    pub line: Option<u32>,
    /// Path of the module (executable or shared object) holding the address; empty when the
    /// address is in no known module.
    pub module: String,
    /// The return address in the target's address space, as `0x…`.
    pub address: String,
    /// The address in the module file's own address space (address − load bias), as `0x…`;
    /// null when the module is unknown.
    #[serde(default)]
    pub offset: Option<String>,
    /// True for frames that are not the user's code: `class` is not `user`.
    pub internal: bool,
    /// Whose code it is: `user`, `framework`, `vendor` (CUDA toolkit libraries) or `runtime`
    /// (CUDA runtime and driver, libc, the Python interpreter); see `frames.rs`. Absent in
    /// older reports: `user`.
    #[serde(default)]
    pub class: Class,
    /// True if this frame is a call inlined into the next frame (same address).
    #[serde(default)]
    pub inlined: bool,
    /// True for a Python frame (module `"python"`, no address; `function` is the qualified
    /// name, `file` and `line` the Python source's). Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub python: bool,
}

impl Frame {
    /// The module's file name (the part after the last `/`).
    pub fn module_name(&self) -> &str {
        self.module.rsplit('/').next().unwrap_or(&self.module)
    }

    /// The key `diff` matches frames by: `function file:line`, else `module+offset`, else the
    /// bare address.
    pub fn match_key(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) if self.function != "??" => format!("{} {f}:{l}", self.function),
            (Some(f), None) if self.python => format!("{} {f}", self.function),
            _ if !self.module.is_empty() => {
                format!("{}+{}", self.module_name(), self.offset.as_deref().unwrap_or(&self.address))
            }
            _ => self.address.clone(),
        }
    }
}

/// A leak suspect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// The site's id (see [`Site::id`]).
    pub site: u32,
    /// How sure the ranking is, from 0 to 1.
    pub score: f64,
    /// Why, in words.
    pub reason: String,
    /// The site's live bytes.
    #[serde(default)]
    pub live_bytes: u64,
    /// The site's live allocations.
    #[serde(default)]
    pub live_count: u64,
    /// Average growth over the time the live allocations were made, bytes per second.
    #[serde(default)]
    pub growth_bytes_per_s: f64,
    /// Bytes of the live allocations made after the first live one, per second between the
    /// first and the latest live allocation: how fast the kept memory grew.
    #[serde(default)]
    pub slope_bytes_per_s: f64,
    /// Share (0 to 1) of eight equal slices of the site's active span in which its live
    /// bytes rose.
    #[serde(default)]
    pub rising_share: f64,
    /// Age of the site's oldest live allocation at the end of the report, as a share (0 to 1)
    /// of the report's duration.
    #[serde(default)]
    pub oldest_live_age_share: f64,
    /// Share (0 to 1) of the site's allocations that were never freed.
    #[serde(default)]
    pub never_freed_share: f64,
    /// When the growth was found only over the union of the sites that share one line of the
    /// program's code (each alone too small or too brief): those sites, ascending id; `site` is
    /// the one with most live bytes and the measures above are the union's. Absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub line_sites: Vec<u32>,
    /// The sites of this cause: those whose suspect had the same headline frame and kind,
    /// largest (live bytes) first; `site` is the first. `live_bytes` and `live_count` are
    /// their sums, `score` the highest of theirs; the other measures are the largest site's.
    /// Absent in older reports (then only `site`).
    #[serde(default)]
    pub sites: Vec<u32>,
    /// What the suspect is named by (see `frames::headline`): the first user frame and the
    /// library entry point it called (`worker_gemm (file.cu:7) via cublasCreate_v2`), or for a
    /// thread without user frames, its most telling framework frame
    /// (`MulBackward0 (autograd thread)`); empty when the stack has none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub headline: String,
    /// Distinct threads that allocated at its sites (0 in older reports).
    #[serde(default)]
    pub threads: u64,
    /// Live allocations of the site that the reachability scan found no pointer to.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub definitely_lost_count: u64,
    /// Their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub definitely_lost_bytes: u64,
}

/// Where the GPU memory of one device is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuMemory {
    /// CUDA device ordinal (>= 0).
    pub ordinal: i32,
    /// Live device and managed bytes per owner, most first.
    pub owners: Vec<OwnerBytes>,
    /// Live device and managed bytes traced on this device (the sum of `owners`).
    pub traced_bytes: u64,
    /// The device memory the driver counts as used by this process (NVML's per-process used
    /// memory, `nvmlDeviceGetComputeRunningProcesses_v3`), bytes, at the latest sample; null
    /// when unknown (`driver_note` says why).
    pub driver_bytes: Option<u64>,
    /// `driver_bytes - traced_bytes` (0 if negative): the context, loaded modules and other
    /// memory no allocation call made; null when unknown.
    pub untraced_bytes: Option<u64>,
    /// Untraced bytes at the first sample of the run, null when unknown.
    pub untraced_first_bytes: Option<u64>,
    /// Driver samples taken of this device over the run.
    #[serde(default)]
    pub driver_samples: u64,
    /// Why the driver's view is unknown, when it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub driver_note: String,
}

/// Live bytes of one owner on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerBytes {
    /// The owner's name (as [`Site::owner`]).
    pub owner: String,
    /// Live bytes, bytes.
    pub live_bytes: u64,
    /// Live allocations.
    pub live_count: u64,
}

/// Suspects that a suppression hid (`GPUSHIM_SUPPRESSIONS`, and the default suppressions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Suppressed {
    /// The suppression's name.
    pub suppression: String,
    /// The suspect sites it hid.
    pub sites: Vec<u32>,
    /// Their live bytes.
    pub live_bytes: u64,
}

/// A thread that allocated at a site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteThread {
    /// The kernel thread id.
    pub tid: u32,
    /// The thread's name at its first event (`pthread_getname_np`); empty when unknown.
    #[serde(default)]
    pub name: String,
    /// Allocations it made here.
    pub alloc_count: u64,
    /// Their bytes.
    pub alloc_bytes: u64,
    /// Its first allocation here, seconds after the report's first event.
    pub first_alloc_s: f64,
    /// Its latest allocation here, seconds after the report's first event.
    pub last_alloc_s: f64,
}

/// A failed allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// The API name.
    pub api: String,
    /// The kind it would have been.
    pub kind: String,
    /// Bytes requested.
    pub size: u64,
    /// The CUDA result code (2: out of memory).
    pub result: i32,
    /// The stack id (see [`Site::id`]).
    pub site: u32,
    /// Device ordinal, or -1.
    pub device: i32,
    /// Seconds after the report's first event.
    #[serde(default)]
    pub ts_s: f64,
    /// The backtrace of the failed call.
    #[serde(default)]
    pub frames: Vec<Frame>,
}

/// The allocation that failed with out of memory, in an out-of-memory report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Oom {
    /// Bytes requested.
    pub size: u64,
    /// The API name.
    pub api: String,
    /// The kind it would have been.
    pub kind: String,
    /// Device ordinal, or -1.
    pub device: i32,
    /// The CUDA result code (2).
    pub result: i32,
    /// The failed call's stack id (see [`Site::id`]).
    pub site: u32,
    /// Seconds after the report's first event.
    pub ts_s: f64,
    /// Free device memory as the driver reported it just before the failure, bytes; null
    /// when the shim could not ask.
    pub device_free_bytes: Option<u64>,
    /// Total device memory, bytes; null when unknown.
    pub device_total_bytes: Option<u64>,
    /// The failed call's backtrace.
    pub frames: Vec<Frame>,
}

/// Live bytes per kind and per device over time, at most about 2000 points.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The device ordinals that `TimelinePoint::devices` holds values for, ascending.
    pub devices: Vec<i32>,
    /// The points, oldest first.
    pub points: Vec<TimelinePoint>,
}

/// One point of the [`Timeline`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Seconds after the report's first event.
    pub t_s: f64,
    /// Live bytes of `device`, `managed` and `pinned_host` memory, in that order.
    pub kinds: [u64; 3],
    /// Live device and managed bytes per device, in the order of [`Timeline::devices`].
    pub devices: Vec<u64>,
}

/// A context torn down (`cudaDeviceReset`, `cuDevicePrimaryCtxReset`, the last
/// `cuDevicePrimaryCtxRelease`, `cuCtxDestroy`) and the live allocations it freed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TeardownRecord {
    /// The entry point.
    pub api: String,
    /// Device ordinal (-1 if unknown).
    pub device: i32,
    /// Whether it was a context the program created (`cuCtxCreate`), not a primary one.
    pub created: bool,
    /// Live allocations it freed.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What the interpreter's teardown freed of the live set at the exit heap walk's start
/// ([`Report::interpreter_teardown`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterpreterTeardown {
    /// Allocations.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Most live allocations a report lists in [`Report::allocations`] (the largest; a note says
/// when more were live).
pub const MAX_ALLOCATIONS: usize = 10_000;

/// One live allocation at the end of the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveAllocation {
    /// Its address in the target's address space, as `0x…`.
    pub address: String,
    /// Its size, bytes.
    pub size: u64,
    /// `device`, `managed` or `pinned_host`.
    pub kind: String,
    /// The allocating API's name.
    pub api: String,
    /// Device ordinal, -1 for host memory or unknown.
    pub device: i32,
    /// The site's stack id (see [`Site::id`]).
    pub site: u32,
    /// When it was made, seconds after the report's first event.
    pub t_s: f64,
}

/// Device memory as the driver reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemInfoRecord {
    /// Device ordinal.
    pub device: i32,
    /// Free device memory, bytes.
    pub free_bytes: u64,
    /// Total device memory, bytes.
    pub total_bytes: u64,
    /// Seconds after the report's first event (negative if before it).
    pub ts_s: f64,
}

impl Report {
    /// Reads and checks a report file.
    ///
    /// # Errors
    /// If the file cannot be read, is not JSON of this shape, or has another schema; the
    /// message says which, without the path (the caller adds it).
    pub fn read(path: &Path) -> Result<Report> {
        let text = fs::read(path)?;
        Report::from_slice(&text)
    }

    /// Parses and checks a report.
    ///
    /// # Errors
    /// If `bytes` is not JSON of this shape or has another schema.
    pub fn from_slice(bytes: &[u8]) -> Result<Report> {
        let value: serde_json::Value = serde_json::from_slice(bytes).context("not valid JSON")?;
        match value.get("schema").map(|s| s.as_str()) {
            Some(Some(SCHEMA)) => {}
            Some(Some(other)) => bail!("schema is {other:?}, this gpushim reads {SCHEMA:?}"),
            _ => bail!("not a gpushim report (no \"schema\" string)"),
        }
        serde_json::from_value(value).context("malformed gpushim report")
    }

    /// The site with id `id`, if the report lists it.
    pub fn site(&self, id: u32) -> Option<&Site> {
        self.sites.iter().find(|s| s.id == id)
    }
}

/// The schema of a companion file of who holds the memory (`*.holders.json`).
pub const HOLDERS_SCHEMA: &str = "gpushim.holders.v1";

/// A companion file: the heap walk of one report, attributed to its sites.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Holders {
    /// Always [`HOLDERS_SCHEMA`].
    pub schema: String,
    /// Process id of the target.
    pub pid: u32,
    /// `snapshot`, `oom` or `exit`: which report the walk completes.
    pub reason: String,
    /// The snapshot's or out-of-memory report's number; absent for the final report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    /// How the walk went.
    pub walk: Walk,
    /// Per site with live memory, most live bytes first: the objects inside its allocations.
    pub sites: Vec<SiteHolders>,
    /// Objects whose memory lies in no live allocation (allocated before tracing, by an untraced
    /// path, or freed already); `site` is absent.
    pub unattributed: SiteHolders,
}

/// How a walk went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Walk {
    /// `complete`, `cut` (stopped at `GPUSHIM_HEAP_WALK_MS`), `blocked` (did not start
    /// within the cap: the main thread ran no Python code), `failed`, or `skipped` (another walk
    /// was waiting or running).
    pub status: String,
    /// The walk's duration (for `blocked`, how long the shim waited), seconds.
    pub elapsed_s: f64,
    /// Python objects visited.
    pub objects_visited: u64,
    /// Objects found that own GPU memory.
    pub objects_found: u64,
    /// The status in words, for a person.
    pub message: String,
    /// Which core walked: `native` (the shim's breadth-first core, shim/src/python/bfs.rs) or
    /// `python` (the walker's own loop: another interpreter, or `GPUSHIM_HEAP_WALK_NATIVE=0`);
    /// absent for a walk that did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<String>,
}

/// The objects of one site (or of no site).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteHolders {
    /// The site's stack id (as in the report's `sites[].id`); absent for `unattributed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
    /// The site's live bytes when the walk's result arrived.
    pub live_bytes: u64,
    /// Objects found inside the site's live allocations.
    pub objects: u64,
    /// Their bytes, summed (views of the same memory count once each).
    pub object_bytes: u64,
    /// Bytes of the site's live allocations that some object's memory covers (overlaps count
    /// once): memory in use.
    pub in_use_bytes: u64,
    /// `live_bytes - in_use_bytes`: memory no Python object covers (a caching allocator's free
    /// blocks, or memory nothing in Python refers to).
    pub cached_bytes: u64,
    /// Where `in_use_bytes` comes from: `torch` (the allocated bytes of PyTorch's caching
    /// allocator segments inside the site, from `torch.cuda.memory_snapshot()`) or `objects`
    /// (the extents of the objects found). Absent in older files: `objects`.
    #[serde(default = "objects_word")]
    pub in_use_from: String,
    /// What holds the objects, one line per group of objects with the same path, most bytes
    /// first.
    pub holders: Vec<HolderLine>,
    /// The largest objects, at most 10 (`holders::TOP_OBJECTS`).
    pub top_objects: Vec<HeldObject>,
    /// PyTorch's live blocks inside the site's segments whose allocation PyTorch recorded a
    /// Python stack for (`torch.cuda.memory_snapshot()`'s `frames`; the shim turns the record
    /// on: `GPUSHIM_TORCH_STACKS`), grouped by stack, most bytes first, at most 10
    /// (`holders::TOP_BLOCK_STACKS`). Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockStack>,
    /// The site's other block stacks, beyond `blocks` (not written: the final report's
    /// suspects are named from all of them).
    #[serde(skip)]
    pub more_blocks: Vec<BlockStack>,
}

/// PyTorch blocks allocated from one Python stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockStack {
    /// Live blocks with this stack.
    pub blocks: u64,
    /// Their bytes (the blocks' sizes, as PyTorch rounds them).
    pub bytes: u64,
    /// The Python stack of their allocation, innermost first, at most 48 frames.
    pub frames: Vec<BlockFrame>,
}

/// One Python frame of a [`BlockStack`], as PyTorch recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockFrame {
    /// The code's file (`co_filename`).
    pub file: String,
    /// The line being run.
    pub line: u32,
    /// The function's name (`co_name`).
    pub function: String,
}

fn objects_word() -> String {
    "objects".to_string()
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A group of objects kept alive the same way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HolderLine {
    /// `path` (reachable from a root), `native` (held from native code), `autograd` (held from
    /// native code by the autograd graph of a tensor reachable from a root) or `cycle` (only by
    /// an unreachable reference cycle: the next cyclic collection frees them).
    pub how: String,
    /// The steps from the root, e.g. `["train.py global 'history'", "list[*]"]`; for
    /// `autograd`, the path of the tensor whose graph saved the objects, ending with that
    /// tensor (`Tensor() float32 grad_fn=AddBackward0`).
    pub path: Vec<String>,
    /// For `autograd`: the type of the graph node the objects are inputs of (`AbsBackward0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_for: Option<String>,
    /// For `autograd`: the graphs of the group (one per tensor at the end of `path`) ...
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graphs: u64,
    /// ... and their nodes, each node counted once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_nodes: u64,
    /// Objects in the group.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The whole line for a person.
    pub text: String,
}

/// One object that owns GPU memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldObject {
    /// Start of its memory, hex.
    pub address: String,
    /// Its extent, bytes.
    pub bytes: u64,
    /// What it is (`Tensor(1024, 1024) float32 grad_fn=MulBackward0`).
    pub desc: String,
    /// Its holder's path, as in `holders[].text`.
    pub holder: String,
}

impl Holders {
    /// The entry of site `id`, if any.
    pub fn site(&self, id: u32) -> Option<&SiteHolders> {
        self.sites.iter().find(|s| s.site == Some(id))
    }

    /// Reads and checks a companion file.
    ///
    /// # Errors
    /// If it cannot be read, is not JSON of this shape, or has another schema.
    pub fn read(path: &Path) -> Result<Holders> {
        let bytes = std::fs::read(path)?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).context("not valid JSON")?;
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(HOLDERS_SCHEMA) => {}
            Some(other) => bail!("schema is {other:?}, this gpushim reads {HOLDERS_SCHEMA:?}"),
            None => bail!("not a gpushim holders file (no \"schema\" string)"),
        }
        serde_json::from_value(value).context("malformed gpushim holders file")
    }
}

/// Whose code a frame is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// The program's own code.
    #[default]
    User,
    /// A GPU framework: PyTorch, JAX/XLA, CuPy, Numba, TensorFlow, Triton, cudarc.
    Framework,
    /// A library of NVIDIA's CUDA toolkit or Python wheels (cuBLAS, cuDNN, NCCL, …).
    Vendor,
    /// The CUDA runtime or driver, or a language runtime (libc, libstdc++, CPython).
    Runtime,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> Report {
        Report {
            schema: SCHEMA.into(),
            pid: 1,
            ppid: 0,
            command: vec!["a".into()],
            cwd: "/".into(),
            reason: Reason::Snapshot,
            snapshot: Some(2),
            label: None,
            interval: None,
            start_unix_ns: 5,
            duration_s: 0.5,
            shim_version: "0.1.0".into(),
            collector_version: "0.1.0".into(),
            totals: Totals::default(),
            kinds: Kinds::default(),
            devices: vec![DeviceTotals { ordinal: 0, live_bytes: 1, live_count: 1, peak_live_bytes: 1 }],
            vmm: vec![],
            sites: vec![Site { id: 3, frames: vec![Frame::default()], series: vec![(0.25, 7)], ..Site::default() }],
            suspects: vec![],
            suppressed: vec![],
            failures: vec![],
            mem_info: vec![],
            timeline: Timeline {
                devices: vec![0],
                points: vec![TimelinePoint { t_s: 0.5, kinds: [1, 0, 0], devices: vec![1] }],
            },
            interpreter_teardown: None,
            context_teardowns: vec![TeardownRecord {
                api: "cudaDeviceReset".into(),
                device: 0,
                created: false,
                count: 2,
                bytes: 3,
            }],
            gpu_memory: vec![],
            findings: vec![],
            notes: vec!["n".into()],
            allocations: vec![],
            physical_devices: Vec::new(),
            identity: None,
            holders: None,
            reachability: None,
            oom: None,
        }
    }

    #[test]
    fn round_trips() {
        let r = minimal();
        let text = serde_json::to_vec(&r).unwrap();
        assert_eq!(Report::from_slice(&text).unwrap(), r);
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["reason"], "snapshot");
        assert_eq!(v["sites"][0]["frames"][0]["file"], serde_json::Value::Null);
        let mut exit = r.clone();
        exit.snapshot = None;
        let v = serde_json::to_value(&exit).unwrap();
        assert!(v.get("snapshot").is_none(), "no snapshot field outside snapshots");
    }

    #[test]
    fn malformed_reports_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not valid JSON"),
            (b"{\"schema\": ", "not valid JSON"),
            (b"[1, 2]", "not a gpushim report"),
            (b"{}", "not a gpushim report"),
            (b"{\"schema\": \"other.v9\"}", "schema is \"other.v9\""),
            (b"{\"schema\": \"gpushim.report.v1\", \"pid\": -1}", "malformed gpushim report"),
            (b"{\"schema\": \"gpushim.report.v1\"}", "malformed gpushim report: missing field"),
        ];
        for (input, want) in cases {
            let e = Report::from_slice(input).unwrap_err();
            assert!(format!("{e:#}").starts_with(want), "{:?}: {e:#}", String::from_utf8_lossy(input));
        }
        let e = Report::read(Path::new("/nonexistent/gpushim-1.json")).unwrap_err();
        assert!(format!("{e:#}").contains("No such file"), "{e:#}");
    }
}

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
