/*
 * Stand-in for the CUDA driver library (built as libcuda.so.1) for gpushim's
 * tests on machines without a GPU.
 *
 * - Every allocation is backed by real host memory (malloc, or a low mmap for
 *   the 32-bit cuMemAlloc v1 ABI), so addresses are real and get reused.
 * - A small mutex-protected table records live pointers and handles; freeing
 *   something unknown returns CUDA_ERROR_INVALID_VALUE instead of crashing.
 * - STANDIN_DEVICE_BYTES (default 80 GiB) bounds live device+managed bytes;
 *   an allocation beyond it returns CUDA_ERROR_OUT_OF_MEMORY.
 * - standin_calls(name) reports how often each exported function was entered.
 * - cuDeviceGetCount says STANDIN_DEVICES (1 to 16, default 1).
 * - Virtual memory management (cuMemCreate, cuMemMap, ...) lives in cuda_vmm.c: memory is
 *   freed once every reference is released and every mapping unmapped.
 * - Streams are opaque: the handles 0x5000 + N stand for a stream of device N (N < 16), for
 *   cuStreamGetDevice; any other stream is device 0's.
 * - A device free of exactly STANDIN_SLOW_FREE_BYTES bytes waits, as cudaFree waits for a
 *   running kernel, until one byte can be read from the FIFO named by STANDIN_SLOW_FREE_FIFO.
 * - cuGetProcAddress / cuGetProcAddress_v2 resolve names through a plain C
 *   table (no dlsym) and hand out the library's internal functions, as the real
 *   driver does, so an interposer exporting the same names is not returned.
 */
#define _GNU_SOURCE
#include "cuda_standin.h"
#include "cuda_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* Call counters                                                             */

#define STANDIN_FUNCTIONS(X)        \
    X(cuInit)                       \
    X(cuDriverGetVersion)           \
    X(cuDeviceGetCount)             \
    X(cuMemAlloc)                   \
    X(cuMemAlloc_v2)                \
    X(cuMemFree_v2)                 \
    X(cuMemAllocPitch_v2)           \
    X(cuMemAllocManaged)            \
    X(cuMemAllocAsync)              \
    X(cuMemAllocAsync_ptsz)         \
    X(cuMemFreeAsync)               \
    X(cuMemFreeAsync_ptsz)          \
    X(cuMemAllocFromPoolAsync)      \
    X(cuMemAllocFromPoolAsync_ptsz) \
    X(cuMemHostAlloc)               \
    X(cuMemAllocHost_v2)            \
    X(cuMemFreeHost)                \
    X(cuMemCreate)                  \
    X(cuMemRelease)                 \
    X(cuMemGetInfo_v2)              \
    X(cuMemsetD8_v2)                \
    X(cuLaunchKernel)               \
    X(cuGetExportTable)             \
    X(cuGetProcAddress)             \
    X(cuGetProcAddress_v2)

enum fn_id {
#define X(name) FN_##name,
    STANDIN_FUNCTIONS(X)
#undef X
    FN_COUNT
};

static const char *const fn_names[FN_COUNT] = {
#define X(name) #name,
    STANDIN_FUNCTIONS(X)
#undef X
};

static atomic_ulong fn_calls[FN_COUNT];

#define COUNT(name) atomic_fetch_add_explicit(&fn_calls[FN_##name], 1, memory_order_relaxed)

API unsigned long standin_calls(const char *function_name)
{
    if (function_name == NULL)
        return 0;
    if (strcmp(function_name, "cuStreamIsCapturing") == 0)
        return atomic_load_explicit(&standin_is_capturing_calls, memory_order_relaxed);
    if (strcmp(function_name, "cuStreamGetDevice") == 0)
        return atomic_load_explicit(&standin_stream_device_calls, memory_order_relaxed);
    if (strcmp(function_name, "cuCtxGetDevice") == 0)
        return atomic_load_explicit(&standin_ctx_device_calls, memory_order_relaxed);
    for (int i = 0; i < FN_COUNT; i++)
        if (strcmp(fn_names[i], function_name) == 0)
            return atomic_load_explicit(&fn_calls[i], memory_order_relaxed);
    return 0;
}


/* ------------------------------------------------------------------------ */
/* Implementations.  These are static so that cuGetProcAddress hands out the  */
/* library's own code even if an LD_PRELOADed library exports the same names. */

static CUresult impl_cuInit(unsigned int flags)
{
    COUNT(cuInit);
    ensure_setup();
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult impl_cuDriverGetVersion(int *v)
{
    COUNT(cuDriverGetVersion);
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

static CUresult impl_cuDeviceGetCount(int *count)
{
    COUNT(cuDeviceGetCount);
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    /* STANDIN_DEVICES (1 to 16, default 1): how many devices the process sees. */
    const char *env = getenv("STANDIN_DEVICES");
    int n = env != NULL ? atoi(env) : 1;
    *count = n >= 1 && n <= 16 ? n : 1;
    return CUDA_SUCCESS;
}

static CUresult impl_cuMemAlloc_v1(unsigned int *dptr, unsigned int bytesize)
{
    COUNT(cuMemAlloc);
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult r = alloc_backed(&p, bytesize, CLASS_DEVICE, 1, 1);
    if (r == CUDA_SUCCESS)
        *dptr = (unsigned int)p;
    return r;
}

static CUresult impl_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    COUNT(cuMemAlloc_v2);
    return alloc_device(dptr, bytesize);
}


static CUresult impl_cuMemFree_v2(CUdeviceptr dptr)
{
    COUNT(cuMemFree_v2);
    slow_free_wait((uintptr_t)dptr);
    return free_backed((uintptr_t)dptr, CLASS_DEVICE);
}

static CUresult impl_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width,
                                        size_t height, unsigned int elementSize)
{
    COUNT(cuMemAllocPitch_v2);
    if (dptr == NULL || pPitch == NULL || width == 0 || height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (elementSize != 4 && elementSize != 8 && elementSize != 16)
        return CUDA_ERROR_INVALID_VALUE;
    if (width > SIZE_MAX - 511)
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (width + 511) & ~(size_t)511;
    if (height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = alloc_device(dptr, pitch * height);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

static CUresult impl_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    COUNT(cuMemAllocManaged);
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_device(dptr, bytesize);
}

/* A stream-ordered allocation: an allocation node of the graph its stream captures into, if it
 * does (cuda_graphs.c), else device memory.  The per-thread default stream's handle 0 is
 * CU_STREAM_PER_THREAD (2). */
/* A stream-ordered allocation on `s`, owned by `owner` (a pool's context; NULL: the stream's
 * device's). Pool memory belongs to a device, not to a context the program created: that
 * context's destruction leaves it. */
static CUresult async_alloc(CUdeviceptr *dptr, size_t bytesize, CUstream s, void *owner)
{
    CUresult r;
    if (graph_capture_alloc(s, bytesize, dptr, &r))
        return r;
    standin_set_owner(owner != NULL ? owner : standin_primary_of(standin_stream_ctx(s)));
    r = alloc_device(dptr, bytesize);
    standin_set_owner(NULL);
    return r;
}

static CUresult async_free(CUdeviceptr dptr, CUstream s)
{
    CUresult r;
    if (graph_capture_free(s, dptr, &r))
        return r;
    return free_backed((uintptr_t)dptr, CLASS_DEVICE);
}

#define PER_THREAD(s) ((s) == NULL ? (CUstream)(uintptr_t)2 : (s))

static CUresult impl_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    COUNT(cuMemAllocAsync);
    return async_alloc(dptr, bytesize, s, NULL);
}

static CUresult impl_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    COUNT(cuMemAllocAsync_ptsz);
    return async_alloc(dptr, bytesize, PER_THREAD(s), NULL);
}

static CUresult impl_cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    COUNT(cuMemFreeAsync);
    return async_free(dptr, s);
}

static CUresult impl_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    COUNT(cuMemFreeAsync_ptsz);
    return async_free(dptr, PER_THREAD(s));
}

static CUresult impl_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                             CUmemoryPool pool, CUstream s)
{
    COUNT(cuMemAllocFromPoolAsync);
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return async_alloc(dptr, bytesize, s, standin_pool_ctx(pool));
}

static CUresult impl_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream s)
{
    COUNT(cuMemAllocFromPoolAsync_ptsz);
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return async_alloc(dptr, bytesize, PER_THREAD(s), standin_pool_ctx(pool));
}

static CUresult impl_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    COUNT(cuMemHostAlloc);
    (void)flags;
    return alloc_host(pp, bytesize);
}

static CUresult impl_cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    COUNT(cuMemAllocHost_v2);
    return alloc_host(pp, bytesize);
}

static CUresult impl_cuMemFreeHost(void *p)
{
    COUNT(cuMemFreeHost);
    return free_backed((uintptr_t)p, CLASS_HOST);
}

/* cuMemCreate, cuMemRelease and the rest of VMM: cuda_vmm.c. */
static CUresult counted_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                    const CUmemAllocationProp *prop, unsigned long long flags)
{
    COUNT(cuMemCreate);
    return impl_cuMemCreate(handle, size, prop, flags);
}

static CUresult counted_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    COUNT(cuMemRelease);
    return impl_cuMemRelease(handle);
}

static CUresult impl_cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    (void)dst;
    (void)value;
    (void)n;
    COUNT(cuMemsetD8_v2);
    return CUDA_SUCCESS;
}

static CUresult impl_cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                    unsigned int by, unsigned int bz, unsigned int shmem, void *stream,
                                    void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)stream;
    (void)params, (void)extra;
    COUNT(cuLaunchKernel);
    return CUDA_SUCCESS;
}

static CUresult impl_cuMemGetInfo_v2(size_t *freep, size_t *totalp)
{
    COUNT(cuMemGetInfo_v2);
    if (freep == NULL || totalp == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    ensure_setup();
    lock_table();
    unlock_table();
    size_t live = live_bytes_of(standin_current_device());
    *totalp = device_limit;
    *freep = live < device_limit ? device_limit - live : 0;
    return CUDA_SUCCESS;
}

static CUresult impl_cuGetExportTable(const void **ppExportTable, const void *id)
{
    COUNT(cuGetExportTable);
    (void)id;
    if (ppExportTable != NULL)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_FOUND;
}

static CUresult impl_cuCtxCreate_v2(void **pctx, unsigned int flags, int dev)
{
    (void)flags;
    return standin_ctx_create(pctx, dev);
}

static CUresult impl_cuCtxCreate_v3(void **pctx, void *params, int count, unsigned int flags, int dev)
{
    (void)params;
    (void)count;
    (void)flags;
    return standin_ctx_create(pctx, dev);
}

static CUresult impl_cuCtxCreate_v4(void **pctx, void *params, unsigned int flags, int dev)
{
    (void)params;
    (void)flags;
    return standin_ctx_create(pctx, dev);
}

static CUresult impl_cuGetProcAddress_v1(const char *, void **, int, unsigned long long);
static CUresult impl_cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);

/* ------------------------------------------------------------------------ */
/* Name resolution for cuGetProcAddress                                      */

struct proc {
    const char *name;
    void *plain;       /* version >= split (or no split) and no ptsz flag */
    void *old;         /* version < split; NULL if no versioned variant */
    int split;         /* cudaVersion from which `plain` applies */
    void *ptsz;        /* with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
};

#define FP(f) ((void *)(f))

static const struct proc procs[] = {
    {"cuInit", FP(impl_cuInit), NULL, 0, NULL},
    {"cuDriverGetVersion", FP(impl_cuDriverGetVersion), NULL, 0, NULL},
    {"cuDeviceGetCount", FP(impl_cuDeviceGetCount), NULL, 0, NULL},
    {"cuCtxGetDevice", FP(impl_cuCtxGetDevice), NULL, 0, NULL},
    {"cuMemAlloc", FP(impl_cuMemAlloc_v2), FP(impl_cuMemAlloc_v1), 3020, NULL},
    {"cuMemFree", FP(impl_cuMemFree_v2), NULL, 3020, NULL},
    {"cuMemAllocPitch", FP(impl_cuMemAllocPitch_v2), NULL, 3020, NULL},
    {"cuMemAllocHost", FP(impl_cuMemAllocHost_v2), NULL, 3020, NULL},
    {"cuMemGetInfo", FP(impl_cuMemGetInfo_v2), NULL, 3020, NULL},
    {"cuMemsetD8", FP(impl_cuMemsetD8_v2), NULL, 3020, NULL},
    {"cuLaunchKernel", FP(impl_cuLaunchKernel), NULL, 0, NULL},
    {"cuMemAllocManaged", FP(impl_cuMemAllocManaged), NULL, 0, NULL},
    {"cuMemAllocAsync", FP(impl_cuMemAllocAsync), NULL, 0, FP(impl_cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", FP(impl_cuMemFreeAsync), NULL, 0, FP(impl_cuMemFreeAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", FP(impl_cuMemAllocFromPoolAsync), NULL, 0,
     FP(impl_cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemHostAlloc", FP(impl_cuMemHostAlloc), NULL, 0, NULL},
    {"cuMemFreeHost", FP(impl_cuMemFreeHost), NULL, 0, NULL},
    {"cuMemCreate", FP(counted_cuMemCreate), NULL, 0, NULL},
    {"cuMemRelease", FP(counted_cuMemRelease), NULL, 0, NULL},
    {"cuMemAddressReserve", FP(impl_cuMemAddressReserve), NULL, 0, NULL},
    {"cuMemAddressFree", FP(impl_cuMemAddressFree), NULL, 0, NULL},
    {"cuMemMap", FP(impl_cuMemMap), NULL, 0, NULL},
    {"cuMemUnmap", FP(impl_cuMemUnmap), NULL, 0, NULL},
    {"cuMemSetAccess", FP(impl_cuMemSetAccess), NULL, 0, NULL},
    {"cuMemRetainAllocationHandle", FP(impl_cuMemRetainAllocationHandle), NULL, 0, NULL},
    {"cuMemExportToShareableHandle", FP(impl_cuMemExportToShareableHandle), NULL, 0, NULL},
    {"cuMemImportFromShareableHandle", FP(impl_cuMemImportFromShareableHandle), NULL, 0, NULL},
    {"cuMemGetAllocationPropertiesFromHandle", FP(impl_cuMemGetAllocationPropertiesFromHandle), NULL, 0, NULL},
    {"cuGetExportTable", FP(impl_cuGetExportTable), NULL, 0, NULL},
    {"cuDevicePrimaryCtxReset", FP(impl_cuDevicePrimaryCtxReset_v2), NULL, 11000, NULL},
    {"cuCtxDestroy", FP(impl_cuCtxDestroy_v2), NULL, 4000, NULL},
    {"cuDevicePrimaryCtxRelease", FP(impl_cuDevicePrimaryCtxRelease_v2), NULL, 11000, NULL},
    {"cuCtxCreate", FP(impl_cuCtxCreate_v4), FP(impl_cuCtxCreate_v2), 12050, NULL},
    {"cuArrayCreate", FP(impl_cuArrayCreate_v2), NULL, 3020, NULL},
    {"cuArray3DCreate", FP(impl_cuArray3DCreate_v2), NULL, 3020, NULL},
    {"cuArrayDestroy", FP(impl_cuArrayDestroy), NULL, 0, NULL},
    {"cuMipmappedArrayCreate", FP(impl_cuMipmappedArrayCreate), NULL, 0, NULL},
    {"cuMipmappedArrayDestroy", FP(impl_cuMipmappedArrayDestroy), NULL, 0, NULL},
    {"cuArrayGetMemoryRequirements", FP(impl_cuArrayGetMemoryRequirements), NULL, 0, NULL},
    {"cuMipmappedArrayGetMemoryRequirements", FP(impl_cuArrayGetMemoryRequirements), NULL, 0, NULL},
    {"cuGraphCreate", FP(impl_cuGraphCreate), NULL, 0, NULL},
    {"cuGraphDestroy", FP(impl_cuGraphDestroy), NULL, 0, NULL},
    {"cuGraphAddMemAllocNode", FP(impl_cuGraphAddMemAllocNode), NULL, 0, NULL},
    {"cuGraphAddMemFreeNode", FP(impl_cuGraphAddMemFreeNode), NULL, 0, NULL},
    {"cuGraphGetNodes", FP(impl_cuGraphGetNodes), NULL, 0, NULL},
    {"cuGraphNodeGetType", FP(impl_cuGraphNodeGetType), NULL, 0, NULL},
    {"cuGraphMemAllocNodeGetParams", FP(impl_cuGraphMemAllocNodeGetParams), NULL, 0, NULL},
    {"cuGraphMemFreeNodeGetParams", FP(impl_cuGraphMemFreeNodeGetParams), NULL, 0, NULL},
    {"cuGraphInstantiate", FP(impl_cuGraphInstantiateWithFlags), NULL, 12000, NULL},
    {"cuGraphInstantiateWithFlags", FP(impl_cuGraphInstantiateWithFlags), NULL, 0, NULL},
    {"cuGraphLaunch", FP(impl_cuGraphLaunch), NULL, 0, FP(impl_cuGraphLaunch_ptsz)},
    {"cuGraphExecDestroy", FP(impl_cuGraphExecDestroy), NULL, 0, NULL},
    {"cuDeviceGraphMemTrim", FP(impl_cuDeviceGraphMemTrim), NULL, 0, NULL},
    {"cuStreamBeginCapture", FP(impl_cuStreamBeginCapture_v2), FP(impl_cuStreamBeginCapture_v1), 10010,
     FP(impl_cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamBeginCaptureToGraph", FP(impl_cuStreamBeginCaptureToGraph), NULL, 0,
     FP(impl_cuStreamBeginCaptureToGraph_ptsz)},
    {"cuStreamEndCapture", FP(impl_cuStreamEndCapture), NULL, 0, FP(impl_cuStreamEndCapture_ptsz)},
    {"cuStreamIsCapturing", FP(impl_cuStreamIsCapturing), NULL, 0, NULL},
    {"cuGetProcAddress", FP(impl_cuGetProcAddress_v2), FP(impl_cuGetProcAddress_v1), 12000, NULL},
};

/*
 * Returns the function for `symbol`, or NULL.  A name whose only variant
 * before `split` is absent from this stand-in (e.g. cuMemFree v1) is reported
 * as not found for older versions.
 */
static void *resolve(const char *symbol, int version, unsigned long long flags)
{
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->name, symbol) != 0)
            continue;
        if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && p->ptsz != NULL)
            return p->ptsz;
        if (p->split != 0 && version < p->split)
            return p->old;
        return p->plain;
    }
    return NULL;
}

static CUresult get_proc(const char *symbol, void **pfn, int version, unsigned long long flags,
                         int *status)
{
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    void *f = resolve(symbol, version, flags);
    *pfn = f;
    if (status != NULL)
        *status = f != NULL ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return f != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

static CUresult impl_cuGetProcAddress_v1(const char *symbol, void **pfn, int version,
                                         unsigned long long flags)
{
    COUNT(cuGetProcAddress);
    return get_proc(symbol, pfn, version, flags, NULL);
}

static CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                         unsigned long long flags, int *symbolStatus)
{
    COUNT(cuGetProcAddress_v2);
    return get_proc(symbol, pfn, version, flags, symbolStatus);
}

/* ------------------------------------------------------------------------ */
/* Exported entry points                                                     */

API CUresult cuInit(unsigned int flags) { return impl_cuInit(flags); }
API CUresult cuDriverGetVersion(int *v) { return impl_cuDriverGetVersion(v); }
API CUresult cuDeviceGetCount(int *c) { return impl_cuDeviceGetCount(c); }
API CUresult cuCtxGetDevice(int *d) { return impl_cuCtxGetDevice(d); }
API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    return impl_cuMemAlloc_v1(dptr, bytesize);
}
API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return impl_cuMemAlloc_v2(dptr, bytesize);
}
API CUresult cuMemFree_v2(CUdeviceptr dptr) { return impl_cuMemFree_v2(dptr); }
API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t w, size_t h,
                                unsigned int elementSize)
{
    return impl_cuMemAllocPitch_v2(dptr, pPitch, w, h, elementSize);
}
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    return impl_cuMemAllocManaged(dptr, bytesize, flags);
}
API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return impl_cuMemAllocAsync(dptr, bytesize, s);
}
API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return impl_cuMemAllocAsync_ptsz(dptr, bytesize, s);
}
API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return impl_cuMemFreeAsync(dptr, s); }
API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return impl_cuMemFreeAsync_ptsz(dptr, s);
}
API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                     CUstream s)
{
    return impl_cuMemAllocFromPoolAsync(dptr, bytesize, pool, s);
}
API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                          CUstream s)
{
    return impl_cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, s);
}
API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    return impl_cuMemHostAlloc(pp, bytesize, flags);
}
API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return impl_cuMemAllocHost_v2(pp, bytesize);
}
API CUresult cuMemFreeHost(void *p) { return impl_cuMemFreeHost(p); }
API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop, unsigned long long flags)
{
    return counted_cuMemCreate(handle, size, prop, flags);
}
API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return counted_cuMemRelease(handle); }
API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
    return impl_cuMemAddressReserve(ptr, size, alignment, addr, flags);
}
API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return impl_cuMemAddressFree(ptr, size); }
API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags)
{
    return impl_cuMemMap(ptr, size, offset, handle, flags);
}
API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { return impl_cuMemUnmap(ptr, size); }
API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count)
{
    return impl_cuMemSetAccess(ptr, size, desc, count);
}
API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    return impl_cuMemRetainAllocationHandle(handle, addr);
}
API CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle, int type,
                                          unsigned long long flags)
{
    return impl_cuMemExportToShareableHandle(shareable, handle, type, flags);
}
API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os, int type)
{
    return impl_cuMemImportFromShareableHandle(handle, os, type);
}
API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    return impl_cuMemGetAllocationPropertiesFromHandle(prop, handle);
}
API CUresult cuMemGetInfo_v2(size_t *freep, size_t *totalp)
{
    return impl_cuMemGetInfo_v2(freep, totalp);
}
API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    return impl_cuMemsetD8_v2(dst, value, n);
}
API CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                            unsigned int by, unsigned int bz, unsigned int shmem, void *stream, void **params,
                            void **extra)
{
    return impl_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}
API CUresult cuGetExportTable(const void **ppExportTable, const void *id)
{
    return impl_cuGetExportTable(ppExportTable, id);
}
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                              unsigned long long flags)
{
    return impl_cuGetProcAddress_v1(symbol, pfn, version, flags);
}
API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 unsigned long long flags, int *symbolStatus)
{
    return impl_cuGetProcAddress_v2(symbol, pfn, version, flags, symbolStatus);
}

/* Context management (the rest is in cuda_contexts.c).                     */

API CUresult cuDevicePrimaryCtxReset_v2(int device) { return impl_cuDevicePrimaryCtxReset_v2(device); }
API CUresult cuDevicePrimaryCtxRelease_v2(int device) { return impl_cuDevicePrimaryCtxRelease_v2(device); }
API CUresult cuCtxDestroy_v2(void *ctx) { return impl_cuCtxDestroy_v2(ctx); }
API CUresult cuCtxCreate_v2(void **pctx, unsigned int flags, int dev) { return impl_cuCtxCreate_v2(pctx, flags, dev); }
API CUresult cuCtxCreate_v3(void **pctx, void *params, int count, unsigned int flags, int dev)
{
    return impl_cuCtxCreate_v3(pctx, params, count, flags, dev);
}
API CUresult cuCtxCreate_v4(void **pctx, void *params, unsigned int flags, int dev)
{
    return impl_cuCtxCreate_v4(pctx, params, flags, dev);
}
