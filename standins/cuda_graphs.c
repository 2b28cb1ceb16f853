/*
 * The driver stand-in's CUDA graphs with memory nodes, as CUDA documents them (CUDA
 * Programming Guide, "Graph Memory Nodes"):
 * - an allocation node gets its address when it is created (a fresh address in a range no
 *   allocator uses); no memory is reserved until a launch reaches it;
 * - a stream-ordered allocation or free on a capturing stream adds an allocation or free node
 *   to the graph being captured instead of allocating or freeing;
 * - instantiation copies the graph's memory nodes into the executable graph;
 * - a launch makes each allocation live in the allocation table (counted against
 *   STANDIN_DEVICE_BYTES, freed by cuMemFree/cuMemFreeAsync like any device allocation), then
 *   frees each free node's address; relaunching with an allocation still live fails with
 *   CUDA_ERROR_INVALID_VALUE unless instantiated with AUTO_FREE_ON_LAUNCH, which frees it first;
 * - destroying a graph or an executable graph frees no live allocation; a trim does nothing here.
 * Graph objects are not thread-safe in CUDA; one mutex guards them here anyway.
 */
#define _GNU_SOURCE
#include "cuda_table.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define MAX_NODES 64
#define MAX_CAPTURES 16

struct node {
    int type;
    CUDA_MEM_ALLOC_NODE_PARAMS params; /* allocation: params.dptr and bytesize; free: params.dptr */
};

struct graph {
    int n;
    struct node *nodes[MAX_NODES];
};

struct exec {
    int nalloc, nfree;
    CUdeviceptr alloc[MAX_NODES];
    size_t bytes[MAX_NODES];
    CUdeviceptr freed[MAX_NODES];
    int auto_free;
};

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
/* Graph allocations' addresses: above anything malloc hands out, 2 MiB aligned, never reused. */
static uint64_t next_graph_address = 0x7d0000000000ull;
static struct {
    CUstream stream;
    struct graph *graph;
    int invalidated; /* a call the capture does not support was made on the stream */
    int borrowed;    /* the program's graph (cuStreamBeginCaptureToGraph): not freed here */
} captures[MAX_CAPTURES];

/* Calls of cuStreamIsCapturing, for standin_calls. */
atomic_ulong standin_is_capturing_calls;

static struct graph *capturing_locked(CUstream s)
{
    for (int i = 0; i < MAX_CAPTURES; i++)
        if (captures[i].graph != NULL && captures[i].stream == s)
            return captures[i].graph;
    return NULL;
}

static CUresult add_node_locked(struct graph *g, int type, size_t bytes, CUdeviceptr dptr, const CUmemLocation *loc,
                                struct node **out)
{
    if (g->n == MAX_NODES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct node *n = calloc(1, sizeof *n);
    if (n == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->type = type;
    n->params.bytesize = bytes;
    if (loc != NULL)
        n->params.poolProps.location = *loc;
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        n->params.dptr = next_graph_address;
        next_graph_address += (bytes + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
    } else {
        n->params.dptr = dptr;
    }
    g->nodes[g->n++] = n;
    *out = n;
    return CUDA_SUCCESS;
}

int graph_capture_alloc(CUstream stream, size_t size, CUdeviceptr *dptr, CUresult *result)
{
    pthread_mutex_lock(&graph_lock);
    struct graph *g = capturing_locked(stream);
    if (g == NULL) {
        pthread_mutex_unlock(&graph_lock);
        return 0;
    }
    struct node *n = NULL;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    *result = dptr == NULL || size == 0 ? CUDA_ERROR_INVALID_VALUE
                                        : add_node_locked(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, size, 0, &loc, &n);
    if (*result == CUDA_SUCCESS)
        *dptr = n->params.dptr;
    pthread_mutex_unlock(&graph_lock);
    return 1;
}

int graph_capture_free(CUstream stream, CUdeviceptr dptr, CUresult *result)
{
    pthread_mutex_lock(&graph_lock);
    struct graph *g = capturing_locked(stream);
    if (g == NULL) {
        pthread_mutex_unlock(&graph_lock);
        return 0;
    }
    struct node *n = NULL;
    *result = add_node_locked(g, CU_GRAPH_NODE_TYPE_MEM_FREE, 0, dptr, NULL, &n);
    pthread_mutex_unlock(&graph_lock);
    return 1;
}

CUresult impl_cuGraphCreate(CUgraph *out, unsigned int flags)
{
    if (out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct graph *g = calloc(1, sizeof *g);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = g;
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphDestroy(CUgraph hg)
{
    struct graph *g = hg;
    if (g == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < g->n; i++)
        free(g->nodes[i]);
    free(g);
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                                     CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    (void)deps;
    (void)ndeps;
    if (out == NULL || hg == NULL || p == NULL || p->bytesize == 0 ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_lock);
    struct node *n = NULL;
    CUresult r = add_node_locked(hg, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p->bytesize, 0, &p->poolProps.location, &n);
    pthread_mutex_unlock(&graph_lock);
    if (r == CUDA_SUCCESS) {
        p->dptr = n->params.dptr;
        *out = n;
    }
    return r;
}

CUresult impl_cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                                    CUdeviceptr dptr)
{
    (void)deps;
    (void)ndeps;
    if (out == NULL || hg == NULL || dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_lock);
    struct node *n = NULL;
    CUresult r = add_node_locked(hg, CU_GRAPH_NODE_TYPE_MEM_FREE, 0, dptr, NULL, &n);
    pthread_mutex_unlock(&graph_lock);
    if (r == CUDA_SUCCESS)
        *out = n;
    return r;
}

CUresult impl_cuGraphGetNodes(CUgraph hg, CUgraphNode *nodes, size_t *num)
{
    struct graph *g = hg;
    if (g == NULL || num == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes != NULL) {
        size_t k = *num < (size_t)g->n ? *num : (size_t)g->n;
        for (size_t i = 0; i < k; i++)
            nodes[i] = g->nodes[i];
    }
    *num = (size_t)g->n;
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphNodeGetType(CUgraphNode hn, int *type)
{
    struct node *n = hn;
    if (n == NULL || type == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphMemAllocNodeGetParams(CUgraphNode hn, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct node *n = hn;
    if (n == NULL || p == NULL || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    *p = n->params;
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphMemFreeNodeGetParams(CUgraphNode hn, CUdeviceptr *dptr)
{
    struct node *n = hn;
    if (n == NULL || dptr == NULL || n->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = n->params.dptr;
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph hg, unsigned long long flags)
{
    struct graph *g = hg;
    if (out == NULL || g == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct exec *e = calloc(1, sizeof *e);
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&graph_lock);
    for (int i = 0; i < g->n; i++) {
        struct node *n = g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            e->alloc[e->nalloc] = n->params.dptr;
            e->bytes[e->nalloc++] = n->params.bytesize;
        } else if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            e->freed[e->nfree++] = n->params.dptr;
        }
    }
    pthread_mutex_unlock(&graph_lock);
    e->auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
    *out = e;
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphLaunch(CUgraphExec he, CUstream s)
{
    (void)s;
    struct exec *e = he;
    if (e == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < e->nalloc; i++) {
        if (entry_size((uintptr_t)e->alloc[i], CLASS_DEVICE) == 0)
            continue;
        if (!e->auto_free)
            return CUDA_ERROR_INVALID_VALUE; /* cuGraphLaunch: an allocation of a previous launch is unfreed */
        free_backed((uintptr_t)e->alloc[i], CLASS_DEVICE);
    }
    ensure_setup();
    for (int i = 0; i < e->nalloc; i++) {
        struct entry *en = malloc(sizeof *en);
        if (en == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        lock_table();
        if (!reserve_locked(e->bytes[i])) {
            unlock_table();
            free(en);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        en->key = (uintptr_t)e->alloc[i];
        en->size = e->bytes[i];
        en->cls = CLASS_DEVICE;
        en->counts = 1;
        en->mapped = 2;
        insert_locked(en);
        unlock_table();
    }
    for (int i = 0; i < e->nfree; i++)
        free_backed((uintptr_t)e->freed[i], CLASS_DEVICE);
    return CUDA_SUCCESS;
}

CUresult impl_cuGraphLaunch_ptsz(CUgraphExec he, CUstream s) { return impl_cuGraphLaunch(he, s); }

CUresult impl_cuGraphExecDestroy(CUgraphExec he)
{
    if (he == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    free(he);
    return CUDA_SUCCESS;
}

CUresult impl_cuDeviceGraphMemTrim(int device) { return device == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* Starts capturing `s` into `into` (the program's graph) or, if NULL, a new graph. */
static CUresult begin_capture(CUstream s, struct graph *into)
{
    if ((uintptr_t)s <= 1)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    struct graph *g = into != NULL ? into : calloc(1, sizeof *g);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&graph_lock);
    if (capturing_locked(s) != NULL) {
        pthread_mutex_unlock(&graph_lock);
        if (into == NULL)
            free(g);
        return CUDA_ERROR_ILLEGAL_STATE; /* already capturing */
    }
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (captures[i].graph == NULL) {
            captures[i].stream = s;
            captures[i].graph = g;
            captures[i].invalidated = 0;
            captures[i].borrowed = into != NULL;
            pthread_mutex_unlock(&graph_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&graph_lock);
    if (into == NULL)
        free(g);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult impl_cuStreamBeginCapture_v2(CUstream s, int mode)
{
    (void)mode;
    return begin_capture(s, NULL);
}

/* The per-thread-default-stream ABI: handle 0 is CU_STREAM_PER_THREAD (2). */
#define PER_THREAD(s) ((s) == NULL ? (CUstream)(uintptr_t)2 : (s))

CUresult impl_cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { return impl_cuStreamBeginCapture_v2(PER_THREAD(s), mode); }
CUresult impl_cuStreamBeginCapture_v1(CUstream s) { return impl_cuStreamBeginCapture_v2(s, 0); }
CUresult impl_cuStreamBeginCapture_v1_ptsz(CUstream s) { return impl_cuStreamBeginCapture_v2(PER_THREAD(s), 0); }

/* cuStreamBeginCaptureToGraph(CUstream, CUgraph, const CUgraphNode *deps, const CUgraphEdgeData
 * *edgeData, size_t numDeps, CUstreamCaptureMode): dependencies are not modelled. */
CUresult impl_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const void *data, size_t n,
                                          int mode)
{
    (void)deps, (void)data, (void)n, (void)mode;
    if (g == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return begin_capture(s, g);
}

CUresult impl_cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const void *data,
                                               size_t n, int mode)
{
    return impl_cuStreamBeginCaptureToGraph(PER_THREAD(s), g, deps, data, n, mode);
}

CUresult impl_cuStreamEndCapture(CUstream s, CUgraph *out)
{
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (captures[i].graph != NULL && captures[i].stream == s) {
            int invalidated = captures[i].invalidated;
            *out = invalidated ? NULL : captures[i].graph;
            if (invalidated && !captures[i].borrowed)
                free(captures[i].graph);
            captures[i].graph = NULL;
            pthread_mutex_unlock(&graph_lock);
            return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&graph_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult impl_cuStreamEndCapture_ptsz(CUstream s, CUgraph *out) { return impl_cuStreamEndCapture(PER_THREAD(s), out); }

/* A call the driver does not support on a capturing stream (CUDA 13.0:
 * cuStreamGetDevice returns 900, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture's end
 * then fails with 901, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): 1 if `s` is capturing, which it
 * invalidates. */
int graph_capture_unsupported(CUstream s)
{
    int hit = 0;
    pthread_mutex_lock(&graph_lock);
    for (int i = 0; i < MAX_CAPTURES; i++)
        if (captures[i].graph != NULL && captures[i].stream == s) {
            captures[i].invalidated = 1;
            hit = 1;
        }
    pthread_mutex_unlock(&graph_lock);
    return hit;
}

CUresult impl_cuStreamIsCapturing(CUstream s, int *status)
{
    atomic_fetch_add_explicit(&standin_is_capturing_calls, 1, memory_order_relaxed);
    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_lock);
    *status = capturing_locked(s) != NULL ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_mutex_unlock(&graph_lock);
    return CUDA_SUCCESS;
}

API CUresult cuGraphCreate(CUgraph *g, unsigned int flags) { return impl_cuGraphCreate(g, flags); }
API CUresult cuGraphDestroy(CUgraph g) { return impl_cuGraphDestroy(g); }
API CUresult cuGraphAddMemAllocNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    return impl_cuGraphAddMemAllocNode(n, g, d, nd, p);
}
API CUresult cuGraphAddMemFreeNode(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, CUdeviceptr p)
{
    return impl_cuGraphAddMemFreeNode(n, g, d, nd, p);
}
API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *num) { return impl_cuGraphGetNodes(g, nodes, num); }
API CUresult cuGraphNodeGetType(CUgraphNode n, int *t) { return impl_cuGraphNodeGetType(n, t); }
API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode n, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    return impl_cuGraphMemAllocNodeGetParams(n, p);
}
API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode n, CUdeviceptr *p) { return impl_cuGraphMemFreeNodeGetParams(n, p); }
API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    return impl_cuGraphInstantiateWithFlags(e, g, flags);
}
API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) { return impl_cuGraphLaunch(e, s); }
API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return impl_cuGraphLaunch_ptsz(e, s); }
API CUresult cuGraphExecDestroy(CUgraphExec e) { return impl_cuGraphExecDestroy(e); }
API CUresult cuDeviceGraphMemTrim(int device) { return impl_cuDeviceGraphMemTrim(device); }
API CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { return impl_cuStreamBeginCapture_v2(s, mode); }
API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return impl_cuStreamEndCapture(s, g); }
API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return impl_cuStreamEndCapture_ptsz(s, g); }
API CUresult cuStreamBeginCapture(CUstream s) { return impl_cuStreamBeginCapture_v1(s); }
API CUresult cuStreamBeginCapture_ptsz(CUstream s) { return impl_cuStreamBeginCapture_v1_ptsz(s); }
API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode) { return impl_cuStreamBeginCapture_v2_ptsz(s, mode); }
API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *d, const void *e, size_t n, int mode)
{
    return impl_cuStreamBeginCaptureToGraph(s, g, d, e, n, mode);
}
API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *d, const void *e, size_t n,
                                              int mode)
{
    return impl_cuStreamBeginCaptureToGraph_ptsz(s, g, d, e, n, mode);
}
API CUresult cuStreamIsCapturing(CUstream s, int *status) { return impl_cuStreamIsCapturing(s, status); }
