//! What the stream carries: the [`Event`] enum, one struct per event type, and the enums its
//! fields use ([`Kind`], [`Api`], [`LineTableFormat`]), with the wire value of each variant.
//! The byte layout of each event is that of [`encode`](crate::encode) and
//! [`decode_body`](crate::decode_body).

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

/// A successful allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// Global sequence number (see the crate docs).
    pub seq: u64,
    /// Monotonic clock (`CLOCK_MONOTONIC`), ns.
    pub ts_ns: u64,
    /// The pointer returned, or the `cuMemCreate` handle.
    pub addr: u64,
    /// Size in bytes as requested (for pitched allocations: pitch × height).
    pub size: u64,
    /// What kind of memory.
    pub kind: Kind,
    /// The outermost intercepted entry point.
    pub api: Api,
    /// Device ordinal, or -1 where it is not known or is the host.
    pub device: i32,
    /// The stream handle for stream-ordered calls, else 0.
    pub stream: u64,
    /// Kernel thread id of the allocating thread.
    pub tid: u32,
    /// Stack id, or [`NO_STACK`](crate::NO_STACK).
    pub stack: u32,
    /// The context the allocation belongs to (the calling thread's current one), once the
    /// process has created a context of its own ([`ContextCreated`]); 0 before that, when every
    /// allocation is in a primary context, and always 0 for stream-ordered (pool) and VMM
    /// memory, which belongs to a device rather than a context.
    pub ctx: u64,
}

/// A call to a free function, successful or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Free {
    /// Global sequence number, taken before the real call.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The pointer or handle passed in.
    pub addr: u64,
    /// The entry point.
    pub api: Api,
    /// The stream for stream-ordered frees, else 0.
    pub stream: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// The CUDA result code the real call returned (0 is success).
    pub result: i32,
}

/// A free call in progress: its sequence number was taken and the real call has not returned
/// (`cudaFree` waits for the device). The writer sends it only for a snapshot whose boundary
/// lies past `seq`, so that the snapshot need not wait for the call; the [`Free`] with the same
/// `seq` follows when the call returns (unless the process dies first). Until then the memory
/// counts as live: the program has not been told it is freed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreePending {
    /// The free's global sequence number.
    pub seq: u64,
    /// Monotonic clock when the call was seen in progress (the snapshot's request), ns.
    pub ts_ns: u64,
    /// The pointer or handle passed in.
    pub addr: u64,
    /// The entry point.
    pub api: Api,
    /// The stream for stream-ordered frees, else 0.
    pub stream: u64,
    /// Kernel thread id.
    pub tid: u32,
}

/// A context torn down: the primary context of `device` (`cudaDeviceReset`,
/// `cuDevicePrimaryCtxReset`, the last `cuDevicePrimaryCtxRelease`), or the context `ctx`
/// (`cuCtxDestroy`). Every allocation of device and managed memory in it goes with it.
/// Numbered like an allocation, after the call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reset {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The device ordinal whose context went, or -1 where the shim could not tell it (a
    /// `cuCtxDestroy` of a context that is not the calling thread's current one).
    pub device: i32,
    /// The entry point.
    pub api: Api,
    /// Kernel thread id.
    pub tid: u32,
    /// The context handle for `cuCtxDestroy`, else 0 (a device's primary context).
    pub ctx: u64,
}

/// A context the program created itself (`cuCtxCreate`), as opposed to a device's primary
/// context, which the runtime and most driver programs use. From the first one on, each
/// [`Alloc`] carries its context, so that destroying one context frees its allocations only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextCreated {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The context handle (`CUcontext`).
    pub ctx: u64,
    /// Its device ordinal.
    pub device: i32,
    /// The entry point.
    pub api: Api,
    /// Kernel thread id.
    pub tid: u32,
}

/// A successful `cuMemMap`: the virtual address range `[addr, addr + size)` now maps the
/// physical memory of `handle` (from `cuMemCreate`, an import, or a retain). Numbered like an
/// allocation, after the call returned. A failed `cuMemMap` changes nothing and is not sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Start of the mapped virtual address range.
    pub addr: u64,
    /// Length of the range, bytes.
    pub size: u64,
    /// The `CUmemGenericAllocationHandle` mapped.
    pub handle: u64,
    /// Kernel thread id.
    pub tid: u32,
}

/// A `cuMemUnmap(addr, size)` call and its result: on success every mapping inside
/// `[addr, addr + size)` is gone (CUDA Driver API, "Virtual Memory Management", `cuMemUnmap`:
/// the range must cover whole mappings, and backing memory is freed once it has no mapping
/// and no unreleased handle). Numbered like a free, before the real call; while the call runs
/// a snapshot may carry it as a [`FreePending`] with api `cuMemUnmap` and the size in `stream`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmap {
    /// Global sequence number, taken before the real call.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Start of the range.
    pub addr: u64,
    /// Length of the range, bytes.
    pub size: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// The CUDA result code the real call returned (0 is success).
    pub result: i32,
}

/// One more reference to a physical allocation's handle, from a successful
/// `cuMemRetainAllocationHandle(&handle, addr)` (`addr`: the mapped address asked about) or
/// `cuMemImportFromShareableHandle(&handle, osHandle, type)` (`addr`: the OS handle, e.g. a
/// file descriptor). Each such reference is given back by one `cuMemRelease` of the handle.
/// Numbered like an allocation, after the call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandleRef {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The handle the call returned.
    pub handle: u64,
    /// The retained address, or the imported OS handle.
    pub addr: u64,
    /// `cuMemRetainAllocationHandle` or `cuMemImportFromShareableHandle`.
    pub api: Api,
    /// Device ordinal of the memory (for an import, as `cuMemGetAllocationPropertiesFromHandle`
    /// tells it), or -1 where it is not known or is the host.
    pub device: i32,
    /// Kernel thread id.
    pub tid: u32,
}

/// A graph allocation node was created (CUDA Programming Guide, "Graph Memory Nodes": the
/// virtual address is assigned at node creation and stays fixed across instantiations and
/// launches). No memory is live yet: the allocation's lifetime begins when a launch of a graph
/// holding the node reaches it ([`GraphLaunch`]). Made by `cudaGraphAddMemAllocNode` /
/// `cuGraphAddMemAllocNode`, or by a stream-ordered allocation (`cudaMallocAsync`, …) on a
/// stream that was capturing into a graph. Numbered like an allocation, after the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphNode {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The node's virtual address (`dptr`).
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Device memory, or pinned host memory for a host location.
    pub kind: Kind,
    /// The entry point that made the node.
    pub api: Api,
    /// Device ordinal, or -1.
    pub device: i32,
    /// The graph handle for an explicit node, 0 for a captured one.
    pub graph: u64,
    /// The capturing stream for a captured allocation, else 0.
    pub stream: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// Stack id of the node's creation, or [`NO_STACK`](crate::NO_STACK).
    pub stack: u32,
}

/// One allocation node of an executable graph ([`GraphExec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphAlloc {
    /// The node's virtual address.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Device memory, or pinned host memory for a host location.
    pub kind: Kind,
    /// Device ordinal, or -1.
    pub device: i32,
}

/// A graph holding memory nodes was instantiated: the executable graph's allocation nodes and
/// the addresses its free nodes free, read from the graph with the driver (`cuGraphGetNodes`,
/// `cuGraphMemAllocNodeGetParams`, `cuGraphMemFreeNodeGetParams`, child graphs included).
/// Numbered like an allocation, after the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphExec {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The executable graph's handle.
    pub exec: u64,
    /// The graph it was instantiated from.
    pub graph: u64,
    /// The entry point.
    pub api: Api,
    /// Instantiated with `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` (1): each launch
    /// first frees the allocations of the previous launch that are still unfreed.
    pub auto_free: bool,
    /// Kernel thread id.
    pub tid: u32,
    /// Stack id of the instantiation (the site of an allocation node whose creation was not
    /// seen), or [`NO_STACK`](crate::NO_STACK).
    pub stack: u32,
    /// Its allocation nodes.
    pub allocs: Vec<GraphAlloc>,
    /// The addresses its free nodes free.
    pub frees: Vec<u64>,
}

/// A launch of an executable graph with memory nodes: its allocations become live, then its
/// free nodes free their addresses. Numbered like an allocation, after the call succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphLaunch {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The executable graph's handle.
    pub exec: u64,
    /// The entry point.
    pub api: Api,
    /// The stream it was launched into.
    pub stream: u64,
    /// Kernel thread id.
    pub tid: u32,
}

/// An executable graph with memory nodes was destroyed. Its allocations that are live stay live
/// (CUDA Programming Guide, "Graph Memory Nodes": destruction does not free graph-allocated
/// memory). Numbered, after the call succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphExecDestroy {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The executable graph's handle.
    pub exec: u64,
    /// The entry point.
    pub api: Api,
    /// Kernel thread id.
    pub tid: u32,
}

/// `cudaDeviceGraphMemTrim` / `cuDeviceGraphMemTrim` returned the device's unused graph memory
/// to the system: reserved memory, no live allocation. Numbered, after the call succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphMemTrim {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Device ordinal.
    pub device: i32,
    /// The entry point.
    pub api: Api,
    /// Kernel thread id.
    pub tid: u32,
}

/// An allocation call that failed; never part of the live set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Size in bytes requested.
    pub size: u64,
    /// The kind it would have been.
    pub kind: Kind,
    /// The entry point.
    pub api: Api,
    /// Device ordinal, or -1.
    pub device: i32,
    /// Kernel thread id.
    pub tid: u32,
    /// Stack id, or [`NO_STACK`](crate::NO_STACK).
    pub stack: u32,
    /// The CUDA result code (2 is out of memory in both the runtime and the driver API).
    pub result: i32,
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

/// The target runs CPython and its Python frames are recorded (sent once, before the first
/// [`PyStack`]). Stacks sent without a [`PyStack`] then had no Python frames on their thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyRuntime {
    /// The interpreter's `PY_VERSION_HEX` (`0x030C03F0` is 3.12.3 final).
    pub version: u32,
}

/// How a [`PyCode`]'s line table is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineTableFormat {
    /// CPython 3.10's `co_linetable` (PEP 626): pairs of (unsigned byte-offset delta, signed
    /// line delta), line delta -128 meaning "no line".
    Pep626 = 1,
    /// CPython 3.11+'s location table `co_linetable` (PEP 657; `Objects/locations.md`).
    Pep657 = 2,
}

impl LineTableFormat {
    pub(crate) fn from_u8(v: u8) -> Result<LineTableFormat, WireError> {
        match v {
            1 => Ok(LineTableFormat::Pep626),
            2 => Ok(LineTableFormat::Pep657),
            _ => Err(WireError::BadValue("line table format", u64::from(v))),
        }
    }
}

/// A Python code object (one function body, class body or module), sent once per id before the
/// first [`PyStack`] that names it. Copied by the shim while the code object was alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyCode {
    /// Identifier, dense from 0 within one stream.
    pub id: u32,
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    pub name: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// Encoding of `linetable`.
    pub linetable_format: LineTableFormat,
    /// `co_linetable`'s bytes (possibly cut short: offsets past its end have no line).
    pub linetable: Vec<u8>,
}

/// One Python frame of a [`PyStack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// The [`PyCode`] id.
    pub code: u32,
    /// Byte offset of the executing instruction in the code's bytecode; [`PY_NO_OFFSET`] before
    /// the first instruction (the line is then `firstlineno`).
    pub offset: u32,
    /// True if and only if this frame is the outermost one run by its native call of the
    /// interpreter loop (`_PyEval_EvalFrameDefault`): frames from the previous entry frame (or
    /// the innermost) up to this one stand where that native frame stands.
    pub entry: bool,
}

/// [`PyFrame::offset`] of a frame that has not started its first instruction.
pub const PY_NO_OFFSET: u32 = u32::MAX;

/// The Python frames of the thread that made the allocations of stack `id`, innermost first,
/// sent right after that [`Stack`]; on a PyTorch autograd engine thread, which runs no Python of
/// its own, those of the thread that waits for its backward pass (the shim's
/// `python/borrow.rs`), outer to every native frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyStack {
    /// The stack id (of a [`Stack`] already sent).
    pub id: u32,
    /// Innermost first.
    pub frames: Vec<PyFrame>,
}

/// Which report a [`HeapWalk`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WalkReason {
    /// The snapshot of the same number (`gpushim-<pid>-snapshot-<n>.json`).
    Snapshot = 1,
    /// The out-of-memory report of the same number (`gpushim-<pid>-oom-<n>.json`), counted in
    /// the order the shim saw the failures.
    Oom = 2,
    /// The final report of a normal exit (walked from a Python `atexit` callback).
    Exit = 3,
}

impl WalkReason {
    pub(crate) fn from_u8(v: u8) -> Result<WalkReason, WireError> {
        Ok(match v {
            1 => WalkReason::Snapshot,
            2 => WalkReason::Oom,
            3 => WalkReason::Exit,
            _ => return Err(WireError::BadValue("walk reason", u64::from(v))),
        })
    }
}

/// How a [`HeapWalk`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WalkStatus {
    /// The walk visited everything reachable.
    Complete = 0,
    /// The walk stopped at its time cap (`GPUSHIM_HEAP_WALK_MS`); the result holds what was
    /// found until then.
    Cut = 1,
    /// The walk did not start within its cap: the main thread ran no Python code (blocked in
    /// native code). No result; a late start is skipped.
    Blocked = 2,
    /// The walker itself failed (an internal error, caught), or could not be scheduled; no
    /// result.
    Failed = 3,
    /// Not started: another walk was still waiting to start or running.
    Skipped = 4,
}

impl WalkStatus {
    pub(crate) fn from_u8(v: u8) -> Result<WalkStatus, WireError> {
        Ok(match v {
            0 => WalkStatus::Complete,
            1 => WalkStatus::Cut,
            2 => WalkStatus::Blocked,
            3 => WalkStatus::Failed,
            4 => WalkStatus::Skipped,
            _ => return Err(WireError::BadValue("walk status", u64::from(v))),
        })
    }
}

/// The result of a walk of the Python heap inside the target (CPython only): the objects that
/// own GPU memory and what keeps each alive. Sent once per walk, after the [`Snapshot`] (or the
/// failed allocation, or before [`Exit`]) it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapWalk {
    /// Which report it completes.
    pub reason: WalkReason,
    /// The snapshot's or out-of-memory report's number n (from 1); 0 for [`WalkReason::Exit`].
    pub number: u32,
    /// How it went.
    pub status: WalkStatus,
    /// Monotonic clock when the walk started (or was given up), ns.
    pub ts_ns: u64,
    /// How long the walk took, ns (for `Blocked`: how long the shim waited for it to start).
    pub elapsed_ns: u64,
    /// Python objects visited.
    pub visited: u64,
    /// The walker's result, JSON (`{"objects": […], "holders": […]}`, see the collector's
    /// `holders` module); empty when there is none.
    pub result: String,
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
}

impl ReachClass {
    pub(crate) fn from_u8(v: u8) -> Result<ReachClass, WireError> {
        Ok(match v {
            0 => ReachClass::Lost,
            1 => ReachClass::IndirectlyLost,
            2 => ReachClass::Reachable,
            3 => ReachClass::Unknown,
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
    /// Monotonic clock when the scan started, ns.
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
    /// API, with a label, confirmed back to the shim.
    ApiSnapshot(ApiSnapshot),
    /// Tag 50: a thread's name.
    ThreadName(ThreadName),
    /// Tag 55 (tags 55 to 59 are kept for multi-process jobs): the process's launcher identity.
    Identity(Identity),
    /// Tag 56: the machine's GPU behind a device ordinal.
    DeviceInfo(DeviceInfo),
    /// Tag 65 (tags 65 to 69 are kept for reachability).
    Reach(Reach),
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
