//! The events of the sequence order: allocations, frees and failures, contexts, the virtual
//! memory management calls and graph memory.

use super::{Api, Kind};

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
