/*
 * The driver stand-in's live allocation table (standins/cuda.c, cuda_arrays.c): every
 * allocation is backed by real host memory, recorded under a mutex, and counted against
 * STANDIN_DEVICE_BYTES.  Also the "slow free" that imitates a free waiting for the device.
 */
#ifndef GPUSHIM_CUDA_TABLE_H
#define GPUSHIM_CUDA_TABLE_H

#include "cuda_standin.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum entry_class { CLASS_DEVICE, CLASS_HOST, CLASS_HANDLE, CLASS_ARRAY };

struct entry {
    uintptr_t key;
    size_t size;
    int cls;          /* enum entry_class */
    int counts;       /* 1 if the bytes count against STANDIN_DEVICE_BYTES */
    int mapped;       /* 1 if backed by mmap (cuMemAlloc v1), 3 if by mmap between guard pages
                       * (STANDIN_DEVICE_VA), 2 if not backed (a graph
                         allocation's reserved address), else malloc */
    void *ctx;        /* the context it belongs to (cuda_contexts.c) */
    int device;       /* that context's device */
    struct entry *next;
};

extern size_t live_device_bytes; /* device + managed + device VMM + arrays */
extern size_t device_limit;
extern atomic_ullong next_handle;

void lock_table(void);
void unlock_table(void);
void ensure_setup(void);
int reserve_locked(size_t size);
int reserve_locked_on(int device, size_t size);
void unreserve_locked_on(int device, size_t size);
void insert_locked(struct entry *e);
struct entry *remove_locked(uintptr_t key, int cls);
CUresult alloc_backed(uintptr_t *out, size_t size, int cls, int counts, int low32);
CUresult free_backed(uintptr_t key, int cls);
CUresult alloc_device(CUdeviceptr *dptr, size_t size);
CUresult alloc_host(void **pp, size_t size);
size_t entry_size(uintptr_t key, int cls);
void slow_free_wait(uintptr_t key);
void reset_ctx_entries(const void *ctx);
int entry_device(uintptr_t key);
size_t live_bytes_of(int device);

/* Contexts: their state (cuda_current.c) and their API (cuda_contexts.c). The owner is the
 * context and device an allocation made now on this thread belongs to: the one set by
 * standin_set_owner (a stream's or pool's, NULL to clear), else the current context. */
#define STANDIN_MAX_DEVICES 16
#define STANDIN_STACK_DEPTH 16
struct standin_ctx {
    int device;
    int primary;
    int refs; /* primary contexts: the retain count */
};
extern struct standin_ctx standin_primaries[STANDIN_MAX_DEVICES];
/* standin_stack[standin_depth - 1] is current; none: device 0's primary context. */
extern __thread struct standin_ctx *standin_stack[STANDIN_STACK_DEPTH];
extern __thread int standin_depth;
struct standin_ctx *standin_current(void);
void standin_owner(void **ctx, int *device);
void standin_set_owner(void *ctx);
void *standin_stream_ctx(CUstream s);
void *standin_pool_ctx(CUmemoryPool pool);
void *standin_primary(int device);
void *standin_primary_of(void *ctx);
int standin_current_device(void);
CUresult standin_ctx_create(void **pctx, int dev);
CUresult impl_cuDevicePrimaryCtxRelease_v2(int device);
CUresult impl_cuDevicePrimaryCtxReset_v2(int device);
CUresult impl_cuCtxDestroy_v2(void *ctx);
CUresult impl_cuCtxGetDevice(int *device);

/* Graphs (cuda_graphs.c): stream-ordered calls on a capturing stream add graph nodes. Each
 * returns 1 (with *result set) when `stream` is capturing and the call became a node. */
int graph_capture_alloc(CUstream stream, size_t size, CUdeviceptr *dptr, CUresult *result);
int graph_capture_unsupported(CUstream stream);
int graph_capture_free(CUstream stream, CUdeviceptr dptr, CUresult *result);
CUresult impl_cuGraphCreate(CUgraph *g, unsigned int flags);
CUresult impl_cuGraphDestroy(CUgraph g);
CUresult impl_cuGraphAddMemAllocNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                     CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult impl_cuGraphAddMemFreeNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                    CUdeviceptr dptr);
CUresult impl_cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *num);
CUresult impl_cuGraphNodeGetType(CUgraphNode n, int *type);
CUresult impl_cuGraphMemAllocNodeGetParams(CUgraphNode n, CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult impl_cuGraphMemFreeNodeGetParams(CUgraphNode n, CUdeviceptr *dptr);
CUresult impl_cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult impl_cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult impl_cuGraphLaunch_ptsz(CUgraphExec e, CUstream s);
CUresult impl_cuGraphExecDestroy(CUgraphExec e);
CUresult impl_cuDeviceGraphMemTrim(int device);
CUresult impl_cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult impl_cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult impl_cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);
CUresult impl_cuStreamBeginCapture_v2_ptsz(CUstream s, int mode);
CUresult impl_cuStreamBeginCapture_v1(CUstream s);
CUresult impl_cuStreamBeginCapture_v1_ptsz(CUstream s);
CUresult impl_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps, const void *data, size_t n,
                                          int mode);
CUresult impl_cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const void *data,
                                               size_t n, int mode);
/* Calls of cuStreamIsCapturing, cuStreamGetDevice and cuCtxGetDevice, for standin_calls. */
extern atomic_ulong standin_is_capturing_calls, standin_stream_device_calls, standin_ctx_device_calls;
CUresult impl_cuStreamIsCapturing(CUstream s, int *status);

/* The array functions (cuda_arrays.c), for cuGetProcAddress's table in cuda.c. */
CUresult impl_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d);
CUresult impl_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult impl_cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                     unsigned int levels);
CUresult impl_cuArrayDestroy(CUarray a);
CUresult impl_cuMipmappedArrayDestroy(CUmipmappedArray m);
CUresult impl_cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUarray a, int device);

/* Virtual memory management (cuda_vmm.c). */
CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags);
CUresult impl_cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult impl_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags);
CUresult impl_cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                       unsigned long long flags);
CUresult impl_cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult impl_cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count);
CUresult impl_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
CUresult impl_cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle, int type,
                                           unsigned long long flags);
CUresult impl_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os, int type);
CUresult impl_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
/* A context torn down: every device VMM allocation goes. Call without the table lock. */
void vmm_reset_device(void);

#endif
