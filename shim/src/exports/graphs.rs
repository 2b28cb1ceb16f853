//! Graph memory: allocation and free nodes of CUDA graphs.
//!
//! What CUDA documents (CUDA Programming Guide, "Graph Memory Nodes"; CUDA Driver API,
//! `cuGraphAddMemAllocNode`, `cuGraphInstantiateWithFlags`, `cuGraphLaunch`,
//! `cuDeviceGraphMemTrim`), and what the shim records for it:
//! - **Node creation** (`cudaGraphAddMemAllocNode`/`cuGraphAddMemAllocNode`, or a
//!   `cudaMallocAsync`/`cuMemAllocAsync`/`…FromPoolAsync` on a stream capturing into a graph):
//!   the virtual address is assigned then, returned in `nodeParams.dptr` (or the allocation's
//!   out-pointer), and stays fixed across instantiations and launches. No memory is allocated:
//!   the allocation's lifetime "begins when GPU execution reaches the allocating graph node".
//!   Recorded as a `GraphNode` (address, bytes, device from `poolProps.location`, the stack),
//!   which the collector keeps as known but not live.
//! - **Free nodes** (`cudaGraphAddMemFreeNode`, or a `cudaFreeAsync`/`cuMemFreeAsync` on a
//!   capturing stream) free when a launch reaches them. A captured free is therefore not a free
//!   now and is not recorded as one; free nodes are read at instantiation.
//! - **Instantiation** (`cudaGraphInstantiate*`, `cuGraphInstantiate*`): a graph with memory
//!   nodes has at most one executable graph at a time. After the call succeeded the shim reads
//!   the graph's nodes with the driver (`cuGraphGetNodes`, `cuGraphNodeGetType`,
//!   `cuGraphMemAllocNodeGetParams`, `cuGraphMemFreeNodeGetParams`, and the nodes of child
//!   graphs, `cuGraphChildGraphNodeGetGraph`, which may hold memory nodes when the child graph
//!   was moved into its parent) and, if there are memory nodes, sends the executable graph's
//!   table once (`GraphExec`), with whether it was instantiated with
//!   `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` (1).
//! - **Launch** (`cudaGraphLaunch`, `cuGraphLaunch`, `_ptsz`): the node allocations become live;
//!   free nodes free. An allocation not freed in its graph stays live after the launch until a
//!   free node of another launched graph, `cudaFreeAsync`/`cuMemFreeAsync` or
//!   `cudaFree`/`cuMemFree` frees it, or, with AUTO_FREE_ON_LAUNCH, until the next launch of the
//!   same executable graph, which frees it first; without that flag, relaunching while it is
//!   unfreed fails (`CUDA_ERROR_INVALID_VALUE`). A launch of an executable graph with memory
//!   nodes sends one small event (`GraphLaunch`); other launches send nothing (a lookup in a
//!   small lock-free table): graph launches are a hot path.
//! - **Destruction** (`cudaGraphExecDestroy`, `cuGraphExecDestroy`, and of the graph): "Graph
//!   destruction does not automatically free any live graph-allocated memory". The executable
//!   graph's table is dropped (`GraphExecDestroy`); nothing is freed. Graph (template)
//!   destruction is not intercepted: it changes nothing live.
//! - **Trim** (`cudaDeviceGraphMemTrim`, `cuDeviceGraphMemTrim`): returns the device's physical
//!   graph memory that no executing or scheduled graph uses to the system: reserved memory, not
//!   live allocations (`GraphMemTrim`, told in the report).
//!
//! Not handled: `cudaGraphUpload`/`cuGraphUpload` (maps memory ahead of a launch: reserved, not
//! live), `cuGraphExecUpdate` (documented as unable to change memory nodes), memory nodes added
//! with the generic `cudaGraphAddNode`/`cuGraphAddNode` (their creation is not seen: they take
//! the instantiation's stack as their site), device-side graph launches.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use gpushim_wire::{Api, GraphAlloc, Kind};

use crate::real::driver_helper;
use crate::record::{self, Guard};

/// `CUgraphNodeType` values (`cuda.h`).
const NODE_GRAPH: c_int = 4;
const NODE_MEM_ALLOC: c_int = 10;
const NODE_MEM_FREE: c_int = 11;
/// `CUmemLocationType` values (`cuda.h`): device, and the host kinds.
const LOCATION_DEVICE: c_int = 1;
const LOCATION_HOST_FIRST: c_int = 2;
const LOCATION_HOST_LAST: c_int = 4;
/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` / `cudaGraphInstantiateFlagAutoFreeOnLaunch`.
const AUTO_FREE_ON_LAUNCH: u64 = 1;
/// Child graphs followed at most this deep.
const MAX_DEPTH: u32 = 8;

/// Byte offsets in `CUDA_MEM_ALLOC_NODE_PARAMS` / `cudaMemAllocNodeParams` (the same layout in
/// CUDA 13.0's `cuda.h` and `driver_types.h`): `poolProps` (`CUmemPoolProps`, 88 bytes:
/// `allocType`, `handleTypes`, `location {type, id}` at 8 and 12, `win32SecurityAttributes`,
/// `maxSize`, `usage`, `reserved[54]`), then `accessDescs` (88), `accessDescCount` (96),
/// `bytesize` (104), `dptr` (112).
const PARAMS_LOCATION: usize = 8;
const PARAMS_BYTESIZE: usize = 104;
const PARAMS_DPTR: usize = 112;
/// `sizeof(CUDA_MEM_ALLOC_NODE_PARAMS)`.
const PARAMS_SIZE: usize = 120;

/// An allocation node's parameters: address, bytes, kind and device.
///
/// # Safety
/// `p` points to a `CUDA_MEM_ALLOC_NODE_PARAMS` the driver filled in.
unsafe fn read_params(p: *const u8) -> GraphAlloc {
    // SAFETY: the offsets lie inside the struct (see PARAMS_SIZE); reads are unaligned-safe.
    let (ty, id, size, addr) = unsafe {
        (
            p.add(PARAMS_LOCATION).cast::<c_int>().read_unaligned(),
            p.add(PARAMS_LOCATION + 4).cast::<c_int>().read_unaligned(),
            p.add(PARAMS_BYTESIZE).cast::<u64>().read_unaligned(),
            p.add(PARAMS_DPTR).cast::<u64>().read_unaligned(),
        )
    };
    let (kind, device) = match ty {
        LOCATION_DEVICE => (Kind::Device, id),
        LOCATION_HOST_FIRST..=LOCATION_HOST_LAST => (Kind::PinnedHost, -1),
        _ => (Kind::Device, -1),
    };
    GraphAlloc { addr, size, kind, device }
}

// ---------------------------------------------------------------------------------------------
// Executable graphs with memory nodes: a small open-addressing set of handles, lock-free, so
// that a launch of any other graph costs a few loads.

const SLOTS: usize = 1024;
/// A slot whose handle was removed (lookups go on past it).
const GONE: u64 = u64::MAX;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicU64 = AtomicU64::new(0);
static EXECS: [AtomicU64; SLOTS] = [EMPTY; SLOTS];
/// Set once the set was full: from then on every launch and destruction is recorded (the
/// collector ignores those of executable graphs it has no table for).
static OVERFLOW: AtomicBool = AtomicBool::new(false);

fn slot_of(exec: u64) -> usize {
    ((exec >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % SLOTS
}

fn remember(exec: u64) {
    if exec == 0 || exec == GONE || has_memory_nodes(exec) {
        return;
    }
    let start = slot_of(exec);
    for i in 0..SLOTS {
        let s = &EXECS[(start + i) % SLOTS];
        let v = s.load(Acquire);
        if (v == 0 || v == GONE) && s.compare_exchange(v, exec, AcqRel, Acquire).is_ok() {
            return;
        }
    }
    OVERFLOW.store(true, Release);
}

/// Whether `exec` was instantiated from a graph with memory nodes (or the set overflowed).
fn has_memory_nodes(exec: u64) -> bool {
    if OVERFLOW.load(Relaxed) {
        return true;
    }
    let start = slot_of(exec);
    for i in 0..SLOTS {
        match EXECS[(start + i) % SLOTS].load(Acquire) {
            0 => return false,
            v if v == exec => return true,
            _ => {}
        }
    }
    false
}

/// Removes `exec`; true if it was there (or the set overflowed).
fn forget(exec: u64) -> bool {
    let start = slot_of(exec);
    for i in 0..SLOTS {
        let s = &EXECS[(start + i) % SLOTS];
        match s.load(Acquire) {
            0 => break,
            v if v == exec => return s.compare_exchange(v, GONE, AcqRel, Acquire).is_ok(),
            _ => {}
        }
    }
    OVERFLOW.load(Relaxed)
}

// ---------------------------------------------------------------------------------------------
// Reading a graph's memory nodes with the driver.

static GET_NODES: AtomicUsize = AtomicUsize::new(0);
static NODE_TYPE: AtomicUsize = AtomicUsize::new(0);
static ALLOC_PARAMS: AtomicUsize = AtomicUsize::new(0);
static FREE_PARAMS: AtomicUsize = AtomicUsize::new(0);
static CHILD_GRAPH: AtomicUsize = AtomicUsize::new(0);

/// The memory nodes of a graph: allocations, and the addresses free nodes free.
#[derive(Default)]
struct MemoryNodes {
    allocs: Vec<GraphAlloc>,
    frees: Vec<u64>,
}

/// Reads the memory nodes of `graph` and its child graphs; empty when the driver lacks a query.
fn memory_nodes(graph: *mut c_void) -> MemoryNodes {
    let mut m = MemoryNodes::default();
    let fns = (
        driver_helper(&GET_NODES, c"cuGraphGetNodes"),
        driver_helper(&NODE_TYPE, c"cuGraphNodeGetType"),
        driver_helper(&ALLOC_PARAMS, c"cuGraphMemAllocNodeGetParams"),
        driver_helper(&FREE_PARAMS, c"cuGraphMemFreeNodeGetParams"),
    );
    if fns.0 == 0 || fns.1 == 0 || fns.2 == 0 || fns.3 == 0 || graph.is_null() {
        return m;
    }
    walk(graph, 0, &mut m);
    m
}

fn walk(graph: *mut c_void, depth: u32, m: &mut MemoryNodes) {
    type GetNodes = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut usize) -> c_int;
    type NodeType = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
    type AllocParams = unsafe extern "C" fn(*mut c_void, *mut u8) -> c_int;
    type FreeParams = unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int;
    type ChildGraph = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;
    // SAFETY: resolved by `memory_nodes` from the driver with these signatures (`cuda.h`):
    // cuGraphGetNodes(CUgraph, CUgraphNode *, size_t *), cuGraphNodeGetType(CUgraphNode,
    // CUgraphNodeType *), cuGraphMemAllocNodeGetParams(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *),
    // cuGraphMemFreeNodeGetParams(CUgraphNode, CUdeviceptr *).
    let (get_nodes, node_type, alloc_params, free_params) = unsafe {
        (
            std::mem::transmute::<usize, GetNodes>(GET_NODES.load(Relaxed)),
            std::mem::transmute::<usize, NodeType>(NODE_TYPE.load(Relaxed)),
            std::mem::transmute::<usize, AllocParams>(ALLOC_PARAMS.load(Relaxed)),
            std::mem::transmute::<usize, FreeParams>(FREE_PARAMS.load(Relaxed)),
        )
    };
    let mut n = 0usize;
    // SAFETY: a NULL node array asks for the count only (`cuGraphGetNodes`).
    if unsafe { get_nodes(graph, std::ptr::null_mut(), &mut n) } != 0 || n == 0 {
        return;
    }
    let mut nodes = vec![std::ptr::null_mut::<c_void>(); n];
    // SAFETY: `nodes` has room for `n` handles; the driver writes at most `n` and sets `n`.
    if unsafe { get_nodes(graph, nodes.as_mut_ptr(), &mut n) } != 0 {
        return;
    }
    nodes.truncate(n);
    for node in nodes {
        let mut ty: c_int = -1;
        // SAFETY: a node of the graph, a valid out-pointer.
        if unsafe { node_type(node, &mut ty) } != 0 {
            continue;
        }
        match ty {
            NODE_MEM_ALLOC => {
                // u64s: aligned for the struct's pointer and size fields.
                let mut p = [0u64; PARAMS_SIZE / 8 + 4];
                // SAFETY: `p` is larger than CUDA_MEM_ALLOC_NODE_PARAMS.
                if unsafe { alloc_params(node, p.as_mut_ptr().cast()) } == 0 {
                    // SAFETY: filled in by the driver.
                    let a = unsafe { read_params(p.as_ptr().cast()) };
                    if a.addr != 0 {
                        m.allocs.push(a);
                    }
                }
            }
            NODE_MEM_FREE => {
                let mut addr = 0u64;
                // SAFETY: a valid out-pointer.
                if unsafe { free_params(node, &mut addr) } == 0 && addr != 0 {
                    m.frees.push(addr);
                }
            }
            NODE_GRAPH if depth < MAX_DEPTH => {
                let f = driver_helper(&CHILD_GRAPH, c"cuGraphChildGraphNodeGetGraph");
                if f == 0 {
                    continue;
                }
                // SAFETY: the driver's cuGraphChildGraphNodeGetGraph(CUgraphNode, CUgraph *).
                let f = unsafe { std::mem::transmute::<usize, ChildGraph>(f) };
                let mut child = std::ptr::null_mut();
                // SAFETY: a child-graph node, a valid out-pointer.
                if unsafe { f(node, &mut child) } == 0 && !child.is_null() {
                    walk(child, depth + 1, m);
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers.

type AddNode = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *mut c_void) -> c_int;

/// The allocation node's handler, for both APIs (the same parameter layout).
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
unsafe fn add_alloc_node(
    api: Api,
    f: AddNode,
    node: *mut *mut c_void,
    graph: *mut c_void,
    deps: *const *mut c_void,
    n: usize,
    params: *mut c_void,
) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(node, graph, deps, n, params) };
    };
    // SAFETY: as above.
    let r = unsafe { f(node, graph, deps, n, params) };
    if r == 0 && !params.is_null() {
        // SAFETY: on success the driver wrote `dptr` into the caller's parameters, a
        // `CUDA_MEM_ALLOC_NODE_PARAMS` / `cudaMemAllocNodeParams` (the caller's contract).
        let a = unsafe { read_params(params.cast()) };
        record::graph_node(api, a.kind, a.addr, a.size, a.device, graph as u64, 0);
    }
    r
}

/// `cudaGraphAddMemAllocNode`'s handler.
///
/// # Safety
/// As [`add_alloc_node`].
pub(super) unsafe fn add_alloc_node_rt(
    f: AddNode,
    node: *mut *mut c_void,
    graph: *mut c_void,
    deps: *const *mut c_void,
    n: usize,
    params: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { add_alloc_node(Api::CudaGraphAddMemAllocNode, f, node, graph, deps, n, params) }
}

/// `cuGraphAddMemAllocNode`'s handler.
///
/// # Safety
/// As [`add_alloc_node`].
pub(super) unsafe fn add_alloc_node_drv(
    f: AddNode,
    node: *mut *mut c_void,
    graph: *mut c_void,
    deps: *const *mut c_void,
    n: usize,
    params: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { add_alloc_node(Api::CuGraphAddMemAllocNode, f, node, graph, deps, n, params) }
}

/// Every instantiation's common part: the real call (`call`), then, on success, the graph's
/// memory nodes read and sent with the new executable graph's handle.
///
/// # Safety
/// `exec` is the caller's out-pointer, `call` the real call with the caller's arguments.
unsafe fn instantiate(
    api: Api,
    exec: *mut *mut c_void,
    graph: *mut c_void,
    flags: impl FnOnce() -> u64,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let Some(_g) = Guard::enter() else { return call() };
    let r = call();
    if r == 0 && !exec.is_null() {
        // SAFETY: on success the driver wrote the new handle through the caller's out-pointer.
        let handle = unsafe { *exec } as u64;
        let m = memory_nodes(graph);
        if !m.allocs.is_empty() || !m.frees.is_empty() {
            remember(handle);
            let auto_free = flags() & AUTO_FREE_ON_LAUNCH != 0;
            record::graph_exec(api, handle, graph as u64, auto_free, m.allocs, m.frees);
        }
    }
    r
}

type InstFlags = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u64) -> c_int;
type InstParams = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_void) -> c_int;
type InstV2 = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut *mut c_void, *mut c_char, usize) -> c_int;

/// The flags of a `CUDA_GRAPH_INSTANTIATE_PARAMS` / `cudaGraphInstantiateParams`: its first
/// field, `cuuint64_t flags` (`cuda.h`, `driver_types.h`).
///
/// # Safety
/// `params` is NULL or points to such a struct.
unsafe fn params_flags(params: *mut c_void) -> u64 {
    if params.is_null() {
        0
    } else {
        // SAFETY: the caller's contract.
        unsafe { params.cast::<u64>().read_unaligned() }
    }
}

/// `cudaGraphInstantiate`'s handler.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
pub(super) unsafe fn instantiate_rt(f: InstFlags, exec: *mut *mut c_void, graph: *mut c_void, flags: u64) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function.
    unsafe { instantiate(Api::CudaGraphInstantiate, exec, graph, || flags, || f(exec, graph, flags)) }
}

/// `cudaGraphInstantiateWithFlags`'s handler.
///
/// # Safety
/// As [`instantiate_rt`].
pub(super) unsafe fn instantiate_with_flags_rt(
    f: InstFlags,
    exec: *mut *mut c_void,
    graph: *mut c_void,
    flags: u64,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function.
    unsafe { instantiate(Api::CudaGraphInstantiateWithFlags, exec, graph, || flags, || f(exec, graph, flags)) }
}

/// `cudaGraphInstantiateWithParams`'s handler (and `_ptsz`'s).
///
/// # Safety
/// As [`instantiate_rt`].
pub(super) unsafe fn instantiate_with_params_rt(
    f: InstParams,
    exec: *mut *mut c_void,
    graph: *mut c_void,
    params: *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function; the flags are read
    // after the call, from the caller's struct.
    unsafe {
        instantiate(
            Api::CudaGraphInstantiateWithParams,
            exec,
            graph,
            || params_flags(params),
            || f(exec, graph, params),
        )
    }
}

/// `cuGraphInstantiate_v2`'s handler (no flags).
///
/// # Safety
/// As [`instantiate_rt`].
pub(super) unsafe fn instantiate_v2_drv(
    f: InstV2,
    exec: *mut *mut c_void,
    graph: *mut c_void,
    err: *mut *mut c_void,
    log: *mut c_char,
    size: usize,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function.
    unsafe { instantiate(Api::CuGraphInstantiate, exec, graph, || 0, || f(exec, graph, err, log, size)) }
}

/// `cuGraphInstantiateWithFlags`'s handler.
///
/// # Safety
/// As [`instantiate_rt`].
pub(super) unsafe fn instantiate_with_flags_drv(
    f: InstFlags,
    exec: *mut *mut c_void,
    graph: *mut c_void,
    flags: u64,
) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the real function.
    unsafe { instantiate(Api::CuGraphInstantiateWithFlags, exec, graph, || flags, || f(exec, graph, flags)) }
}

/// `cuGraphInstantiateWithParams`'s handler (and `_ptsz`'s).
///
/// # Safety
/// As [`instantiate_rt`].
pub(super) unsafe fn instantiate_with_params_drv(
    f: InstParams,
    exec: *mut *mut c_void,
    graph: *mut c_void,
    params: *mut c_void,
) -> c_int {
    // SAFETY: as in `instantiate_with_params_rt`.
    unsafe {
        instantiate(Api::CuGraphInstantiateWithParams, exec, graph, || params_flags(params), || f(exec, graph, params))
    }
}

type Launch = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;

/// A launch: recorded after it succeeded, only for executable graphs with memory nodes.
///
/// # Safety
/// `f` is the real function; the arguments are the caller's.
unsafe fn launch(api: Api, f: Launch, exec: *mut c_void, stream: *mut c_void) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's arguments, unchanged, to the real function.
        return unsafe { f(exec, stream) };
    };
    // The program's activity: one step of a graph, counted once (the runtime's call reaches
    // the driver's inside the guard).
    crate::state::ACTIVITY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: as above.
    let r = unsafe { f(exec, stream) };
    if r == 0 && has_memory_nodes(exec as u64) {
        record::graph_launch(api, exec as u64, stream as u64);
    }
    r
}

/// `cudaGraphLaunch`'s handler (and `_ptsz`'s).
///
/// # Safety
/// As [`launch`].
pub(super) unsafe fn launch_rt(f: Launch, exec: *mut c_void, stream: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { launch(Api::CudaGraphLaunch, f, exec, stream) }
}

/// `cuGraphLaunch`'s handler (and `_ptsz`'s).
///
/// # Safety
/// As [`launch`].
pub(super) unsafe fn launch_drv(f: Launch, exec: *mut c_void, stream: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { launch(Api::CuGraphLaunch, f, exec, stream) }
}

type ExecDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;

/// An executable graph destroyed: its table goes; its live allocations stay live.
///
/// # Safety
/// `f` is the real function; `exec` the caller's argument.
unsafe fn exec_destroy(api: Api, f: ExecDestroy, exec: *mut c_void) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's argument, unchanged, to the real function.
        return unsafe { f(exec) };
    };
    // SAFETY: as above.
    let r = unsafe { f(exec) };
    if r == 0 && forget(exec as u64) {
        record::graph_exec_destroy(api, exec as u64);
    }
    r
}

/// `cudaGraphExecDestroy`'s handler.
///
/// # Safety
/// As [`exec_destroy`].
pub(super) unsafe fn exec_destroy_rt(f: ExecDestroy, exec: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { exec_destroy(Api::CudaGraphExecDestroy, f, exec) }
}

/// `cuGraphExecDestroy`'s handler.
///
/// # Safety
/// As [`exec_destroy`].
pub(super) unsafe fn exec_destroy_drv(f: ExecDestroy, exec: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { exec_destroy(Api::CuGraphExecDestroy, f, exec) }
}

type Trim = unsafe extern "C" fn(c_int) -> c_int;

/// A trim of `device`'s graph memory.
///
/// # Safety
/// `f` is the real function; `device` the caller's argument.
unsafe fn trim(api: Api, f: Trim, device: c_int) -> c_int {
    let Some(_g) = Guard::enter() else {
        // SAFETY: the caller's argument, unchanged, to the real function.
        return unsafe { f(device) };
    };
    // SAFETY: as above.
    let r = unsafe { f(device) };
    if r == 0 {
        record::graph_trim(api, device);
    }
    r
}

/// `cudaDeviceGraphMemTrim`'s handler.
///
/// # Safety
/// As [`trim`].
pub(super) unsafe fn trim_rt(f: Trim, device: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { trim(Api::CudaDeviceGraphMemTrim, f, device) }
}

/// `cuDeviceGraphMemTrim`'s handler.
///
/// # Safety
/// As [`trim`].
pub(super) unsafe fn trim_drv(f: Trim, device: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { trim(Api::CuDeviceGraphMemTrim, f, device) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_of_executable_graphs_remembers_and_forgets() {
        let (a, b) = (0x7f00_1230, 0x7f00_4560);
        assert!(!has_memory_nodes(a));
        remember(a);
        remember(b);
        assert!(has_memory_nodes(a) && has_memory_nodes(b));
        assert!(forget(a));
        assert!(!has_memory_nodes(a) && has_memory_nodes(b));
        assert!(!forget(a));
        assert!(forget(b));
    }

    #[test]
    fn allocation_node_parameters_are_read_at_their_offsets() {
        let mut p = [0u8; PARAMS_SIZE];
        p[8..12].copy_from_slice(&1i32.to_le_bytes());
        p[12..16].copy_from_slice(&3i32.to_le_bytes());
        p[104..112].copy_from_slice(&(64u64 << 20).to_le_bytes());
        p[112..120].copy_from_slice(&0x7f00_0000u64.to_le_bytes());
        // SAFETY: a buffer the size of the struct.
        let a = unsafe { read_params(p.as_ptr()) };
        assert_eq!(a, GraphAlloc { addr: 0x7f00_0000, size: 64 << 20, kind: Kind::Device, device: 3 });
        p[8..12].copy_from_slice(&2i32.to_le_bytes());
        // SAFETY: as above.
        assert_eq!(unsafe { read_params(p.as_ptr()) }.kind, Kind::PinnedHost);
    }
}
