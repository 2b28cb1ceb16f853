//! What the report says about the process besides its sites: its GPUs and place in a job, where
//! the GPU memory is, its failures and out-of-memory request, live bytes over time, the
//! interpreter's teardown and the live allocations themselves.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::site::Frame;

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
