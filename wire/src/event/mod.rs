//! What the stream carries: the [`Event`] enum, one struct per event type, and the enums its
//! fields use ([`Kind`], [`Api`], [`LineTableFormat`]), with the wire value of each variant.
//! The byte layout of each event is that of [`encode`](crate::encode) and
//! [`decode_body`](crate::decode_body).

mod memory;
mod python;
mod reach;

pub use memory::{
    Alloc, ContextCreated, Failed, Free, FreePending, GraphAlloc, GraphExec, GraphExecDestroy, GraphLaunch,
    GraphMemTrim, GraphNode, HandleRef, Map, Reset, Unmap,
};
pub use python::{
    HeapWalk, LineTableFormat, PyCode, PyFrame, PyRuntime, PyStack, WalkReason, WalkStatus, PY_NO_OFFSET,
};
pub use reach::{Reach, ReachClass, ReachEntry, ReachRegion, ReachStatus};

use crate::WireError;

/// What kind of memory an allocation is, as the report groups it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Device memory: `cudaMalloc*`, `cuMemAlloc*`, stream-ordered and pool allocations,
    /// `cuMemCreate` on a device location, CUDA arrays (`cudaMallocArray`, `cuArrayCreate`, …;
    /// their address is the array's handle, which no pointer can equal).
    Device = 0,
    /// Managed (unified) memory: `cudaMallocManaged`, `cuMemAllocManaged`.
    Managed = 1,
    /// Pinned (page-locked) host memory: `cudaMallocHost`, `cudaHostAlloc`, `cuMemHostAlloc`,
    /// `cuMemAllocHost`, `cuMemCreate` on a host location.
    PinnedHost = 2,
}

impl Kind {
    /// All kinds, in report order.
    pub const ALL: [Kind; 3] = [Kind::Device, Kind::Managed, Kind::PinnedHost];

    /// The name used in reports: `device`, `managed` or `pinned_host`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Managed => "managed",
            Kind::PinnedHost => "pinned_host",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Result<Kind, WireError> {
        Ok(match v {
            0 => Kind::Device,
            1 => Kind::Managed,
            2 => Kind::PinnedHost,
            _ => return Err(WireError::BadValue("kind", u64::from(v))),
        })
    }
}

macro_rules! apis {
    ($($variant:ident = $n:literal, $name:literal, $free:literal;)*) => {
        /// The CUDA entry point that made an allocation or free. The outermost intercepted call
        /// is the one recorded: a `cudaMalloc` that calls `cuMemAlloc_v2` inside is `CudaMalloc`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Api { $(#[doc = concat!("`", $name, "`")] $variant = $n,)* }

        impl Api {
            /// Every API, in wire order.
            pub const ALL: &'static [Api] = &[$(Api::$variant,)*];

            /// The function's name as a user knows it (no `_v2`/`_ptsz` suffix).
            pub fn name(self) -> &'static str {
                match self { $(Api::$variant => $name,)* }
            }

            /// True if and only if this API releases memory.
            pub fn is_free(self) -> bool {
                match self { $(Api::$variant => $free,)* }
            }

            pub(crate) fn from_u8(v: u8) -> Result<Api, WireError> {
                match v {
                    $($n => Ok(Api::$variant),)*
                    _ => Err(WireError::BadValue("api", u64::from(v))),
                }
            }
        }
    };
}

apis! {
    CudaMalloc = 1, "cudaMalloc", false;
    CudaFree = 2, "cudaFree", true;
    CudaMallocAsync = 3, "cudaMallocAsync", false;
    CudaFreeAsync = 4, "cudaFreeAsync", true;
    CudaMallocFromPoolAsync = 5, "cudaMallocFromPoolAsync", false;
    CudaMallocManaged = 6, "cudaMallocManaged", false;
    CudaMallocPitch = 7, "cudaMallocPitch", false;
    CudaMallocHost = 8, "cudaMallocHost", false;
    CudaHostAlloc = 9, "cudaHostAlloc", false;
    CudaFreeHost = 10, "cudaFreeHost", true;
    CuMemAlloc = 11, "cuMemAlloc", false;
    CuMemFree = 12, "cuMemFree", true;
    CuMemAllocPitch = 13, "cuMemAllocPitch", false;
    CuMemAllocManaged = 14, "cuMemAllocManaged", false;
    CuMemAllocAsync = 15, "cuMemAllocAsync", false;
    CuMemFreeAsync = 16, "cuMemFreeAsync", true;
    CuMemAllocFromPoolAsync = 17, "cuMemAllocFromPoolAsync", false;
    CuMemHostAlloc = 18, "cuMemHostAlloc", false;
    CuMemAllocHost = 19, "cuMemAllocHost", false;
    CuMemFreeHost = 20, "cuMemFreeHost", true;
    CuMemCreate = 21, "cuMemCreate", false;
    CuMemRelease = 22, "cuMemRelease", true;
    CudaMallocArray = 23, "cudaMallocArray", false;
    CudaMalloc3DArray = 24, "cudaMalloc3DArray", false;
    CudaMallocMipmappedArray = 25, "cudaMallocMipmappedArray", false;
    CudaFreeArray = 26, "cudaFreeArray", true;
    CudaFreeMipmappedArray = 27, "cudaFreeMipmappedArray", true;
    CuArrayCreate = 28, "cuArrayCreate", false;
    CuArray3DCreate = 29, "cuArray3DCreate", false;
    CuMipmappedArrayCreate = 30, "cuMipmappedArrayCreate", false;
    CuArrayDestroy = 31, "cuArrayDestroy", true;
    CuMipmappedArrayDestroy = 32, "cuMipmappedArrayDestroy", true;
    CudaDeviceReset = 33, "cudaDeviceReset", true;
    CuDevicePrimaryCtxReset = 34, "cuDevicePrimaryCtxReset", true;
    CuCtxDestroy = 35, "cuCtxDestroy", true;
    CuMemMap = 36, "cuMemMap", false;
    CuMemUnmap = 37, "cuMemUnmap", false;
    CuMemRetainAllocationHandle = 38, "cuMemRetainAllocationHandle", false;
    CuMemImportFromShareableHandle = 39, "cuMemImportFromShareableHandle", false;
    CuDevicePrimaryCtxRelease = 60, "cuDevicePrimaryCtxRelease", true;
    CuCtxCreate = 61, "cuCtxCreate", false;
    CudaMalloc3D = 62, "cudaMalloc3D", false;
    CudaGraphAddMemAllocNode = 46, "cudaGraphAddMemAllocNode", false;
    CuGraphAddMemAllocNode = 47, "cuGraphAddMemAllocNode", false;
    CudaGraphInstantiate = 48, "cudaGraphInstantiate", false;
    CudaGraphInstantiateWithFlags = 49, "cudaGraphInstantiateWithFlags", false;
    CudaGraphInstantiateWithParams = 50, "cudaGraphInstantiateWithParams", false;
    CuGraphInstantiate = 51, "cuGraphInstantiate", false;
    CuGraphInstantiateWithFlags = 52, "cuGraphInstantiateWithFlags", false;
    CuGraphInstantiateWithParams = 53, "cuGraphInstantiateWithParams", false;
    CudaGraphLaunch = 54, "cudaGraphLaunch", false;
    CuGraphLaunch = 55, "cuGraphLaunch", false;
    CudaGraphExecDestroy = 56, "cudaGraphExecDestroy", false;
    CuGraphExecDestroy = 57, "cuGraphExecDestroy", false;
    CudaDeviceGraphMemTrim = 58, "cudaDeviceGraphMemTrim", false;
    CuDeviceGraphMemTrim = 59, "cuDeviceGraphMemTrim", false;
}

impl Api {
    /// True if and only if the address this API returns or takes is a `cuMemCreate` handle
    /// (`CUmemGenericAllocationHandle`) rather than a pointer. Handles and pointers live in
    /// separate key spaces of the live set.
    pub fn is_handle(self) -> bool {
        matches!(self, Api::CuMemCreate | Api::CuMemRelease)
    }
}

/// First frame of every stream: who is being traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Process id of the target.
    pub pid: u32,
    /// Its parent's process id.
    pub ppid: u32,
    /// Wall-clock time at which tracing started, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The target's command line (`/proc/self/cmdline`).
    pub command: Vec<String>,
    /// The target's working directory when tracing started.
    pub cwd: String,
    /// Where reports go (`$GPUSHIM_OUTPUT`, else `cwd`).
    pub output_dir: String,
    /// Version of the shim that wrote the stream.
    pub shim_version: String,
}

/// One loaded ELF module, from `dl_iterate_phdr`. An address `a` belongs to the module if some
/// range holds it; its address in the file's own virtual address space is `a - bias`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Path of the file as the loader knows it (the main program's is resolved through
    /// `/proc/self/exe`).
    pub path: String,
    /// Load bias (`dlpi_addr`), bytes.
    pub bias: u64,
    /// Absolute `[start, end)` address ranges of its `PT_LOAD` segments.
    pub ranges: Vec<(u64, u64)>,
}

/// A distinct native backtrace, sent once, before the first event that uses its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Identifier, dense from 0 within one stream.
    pub id: u32,
    /// Return addresses, innermost first, with the shim's own frames already removed.
    pub frames: Vec<u64>,
}

/// A request for a snapshot (SIGUSR1 or `gpushim snapshot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The snapshot holds exactly the events with `seq < boundary`.
    pub boundary: u64,
    /// Monotonic clock when the request was seen, ns.
    pub ts_ns: u64,
}

/// A snapshot asked for through the shim's C entry point `gpushim_snapshot` (the Python API's
/// `gpushim.snapshot(label)`): a [`Snapshot`] with a label, which the collector confirms back
/// on the socket once its file is written (one line, `snapshot N PATH`), so that the caller
/// can wait for the file and learn its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiSnapshot {
    /// The snapshot holds exactly the events with `seq < boundary`.
    pub boundary: u64,
    /// Monotonic clock when the request was made, ns.
    pub ts_ns: u64,
    /// The caller's label, already reduced by the shim to at most 64 characters from
    /// `[A-Za-z0-9._-]`; empty for none.
    pub label: String,
    /// The absolute directory the caller wants this snapshot's files in (the Jupyter
    /// extension's per-kernel directory); empty for the collector's output directory. Sent
    /// with tag 61 when set, so that a stream without it is what it always was.
    pub dir: String,
}

/// The target ran its exit path (`exit()` or a return from `main`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Monotonic clock, ns.
    pub ts_ns: u64,
}

/// Device memory as the driver saw it (`cuMemGetInfo`), sent with out-of-memory failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Device ordinal.
    pub device: i32,
    /// Free device memory, bytes.
    pub free: u64,
    /// Total device memory, bytes.
    pub total: u64,
}

/// A thread's name, sent once per thread before its first allocation event (tags 50 to 52 are
/// kept for threads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadName {
    /// The kernel thread id, as in the events' `tid`.
    pub tid: u32,
    /// The name `pthread_getname_np` gave at the thread's first event (at most 15 bytes on
    /// Linux, `prctl(PR_GET_NAME)`), lossily UTF-8; empty when it could not be read.
    pub name: String,
}

/// How much the program has done: the number of kernel launches, graph launches and memsets
/// the shim had seen when the event after this one (an allocation) was recorded, or, with no
/// event after it, at `ts_ns`. The program's own steps, counted in its calls to the GPU, tell a
/// site that grew and then held still while the program went on working (a warm-up) from one
/// that grew to the end. Sent only when the count changed (tags 70 to 74 are kept for activity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    /// Monotonic clock (`CLOCK_MONOTONIC`), ns: the time of the allocation it precedes, or when
    /// it was read.
    pub ts_ns: u64,
    /// Calls counted since tracing started.
    pub count: u64,
}

/// Who the process is in a multi-process job: the launcher's variables (`RANK`, `LOCAL_RANK`,
/// `WORLD_SIZE`, `TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID`, `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`,
/// …) and `CUDA_VISIBLE_DEVICES`, as the shim read them from its environment when tracing
/// started. Sent once, right after [`Hello`], and only when at least one is set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// `(name, value)` of each variable that was set, in the shim's fixed order.
    pub vars: Vec<(String, String)>,
}

/// The machine's GPU behind a device ordinal the process used, asked of the driver once per
/// ordinal (`cuDeviceGetPCIBusId`, `cuDeviceGetUuid_v2`; CUDA Driver API, "Device
/// Management"), so that reports of processes with different `CUDA_VISIBLE_DEVICES` can be
/// compared. Sent before the first event that names the ordinal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The ordinal the process saw.
    pub ordinal: i32,
    /// `domain:bus:device.function` in hex (`0000:3b:00.0`); empty when the driver did not say.
    pub pci_bus_id: String,
    /// The device's 16-byte UUID (its MIG instance's under MIG); all zero when unknown.
    pub uuid: [u8; 16],
}

/// One frame of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Tag 1.
    Hello(Hello),
    /// Tag 2.
    Module(Module),
    /// Tag 3.
    Stack(Stack),
    /// Tag 4.
    Alloc(Alloc),
    /// Tag 5.
    Free(Free),
    /// Tag 6.
    Failed(Failed),
    /// Tag 7.
    Snapshot(Snapshot),
    /// Tag 8.
    Exit(Exit),
    /// Tag 9.
    MemInfo(MemInfo),
    /// Tag 10: a line the shim wants the user to see in the report (e.g. events it lost).
    Note(String),
    /// Tag 11: a free still in progress (it takes the free's place in sequence order).
    FreePending(FreePending),
    /// Tag 12: a context torn down, with every allocation in it.
    Reset(Reset),
    /// Tag 34: a context the program created.
    ContextCreated(ContextCreated),
    /// Tag 13: a virtual address range mapped to a VMM handle.
    Map(Map),
    /// Tag 14: a `cuMemUnmap` call.
    Unmap(Unmap),
    /// Tag 15: a VMM handle retained or imported.
    HandleRef(HandleRef),
    /// Tag 16: a graph allocation node created (not live).
    GraphNode(GraphNode),
    /// Tag 17: a graph with memory nodes instantiated.
    GraphExec(GraphExec),
    /// Tag 18: an executable graph with memory nodes launched.
    GraphLaunch(GraphLaunch),
    /// Tag 19: an executable graph with memory nodes destroyed.
    GraphExecDestroy(GraphExecDestroy),
    /// Tag 30: a device's graph memory trimmed.
    GraphMemTrim(GraphMemTrim),
    /// Tag 20 (tags 20 to 29 are kept for Python frames).
    PyRuntime(PyRuntime),
    /// Tag 21.
    PyCode(PyCode),
    /// Tag 22.
    PyStack(PyStack),
    /// Tag 40 (tags 40 to 49 are kept for heap walks).
    HeapWalk(HeapWalk),
    /// Tag 60 (tags 60 to 64 are kept for the Python API): a snapshot asked for through the
    /// API, with a label, confirmed back to the shim; tag 61 when it names a directory.
    ApiSnapshot(ApiSnapshot),
    /// Tag 50: a thread's name.
    ThreadName(ThreadName),
    /// Tag 55 (tags 55 to 59 are kept for multi-process jobs): the process's launcher identity.
    Identity(Identity),
    /// Tag 56: the machine's GPU behind a device ordinal.
    DeviceInfo(DeviceInfo),
    /// Tag 65 (tags 65 to 69 are kept for reachability).
    Reach(Reach),
    /// Tag 70: the program's activity so far.
    Activity(Activity),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_names_and_free_flags() {
        for &a in Api::ALL {
            assert_eq!(Api::from_u8(a as u8).unwrap(), a);
        }
        assert!(Api::CuMemRelease.is_free() && Api::CuMemRelease.is_handle());
        assert!(!Api::CudaMallocHost.is_free());
        assert_eq!(Api::CuMemAllocAsync.name(), "cuMemAllocAsync");
    }
}
