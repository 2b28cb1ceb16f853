/*
 * Stand-in for the CUDA runtime, built both as libcudart.so.13 and as
 * libcudart_static.a, for gpushim's tests.
 *
 * Like the real runtime it never links against libcuda.  On the first API call
 * it dlopen()s libcuda.so.1, dlsym()s cuGetProcAddress_v2, asks it for "",
 * "cuInit" and "cuGetProcAddress" (11030 and 12000), and from then on loads
 * its whole driver table only through the cuGetProcAddress pointer it got back
 * for version 12000.  dlopen and dlsym are called through their ordinary
 * dynamic symbols, so an LD_PRELOADed library exporting dlsym sees the calls.
 *
 * Every exported cuda* function calls the driver only through that table and
 * never calls another exported cuda* function.
 *
 * Built twice, as two runtimes a process can hold at once (a framework's bundled runtime next to
 * the system's): libcudart.so.13 and libcudart.so.12, each with its soname as its symbol version
 * (as NVIDIA's runtimes are versioned: "cudaMalloc@@libcudart.so.12").  Each copy counts the
 * cudaMalloc and cudaFree calls it served (cudart_standin_calls), so a test can tell which
 * runtime a call reached.
 */
#define _GNU_SOURCE
#include "cuda_standin.h"
#include "cudart_standin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define API __attribute__((visibility("default")))

/* Calls this copy of the runtime served. */
static atomic_ulong served_malloc, served_free;

/* The number of calls of `name` ("cudaMalloc" or "cudaFree") this copy of the runtime served. */
API unsigned long cudart_standin_calls(const char *name)
{
    if (strcmp(name, "cudaMalloc") == 0)
        return atomic_load(&served_malloc);
    if (strcmp(name, "cudaFree") == 0)
        return atomic_load(&served_free);
    return 0;
}

static struct {
    PFN_cuGetProcAddress_v2 getProcAddress;
    PFN_cuInit init;
    PFN_cuMemAlloc_v2 memAlloc;
    PFN_cuMemFree_v2 memFree;
    PFN_cuMemAllocManaged memAllocManaged;
    PFN_cuMemAllocPitch_v2 memAllocPitch;
    PFN_cuMemHostAlloc memHostAlloc;
    PFN_cuMemAllocHost_v2 memAllocHost;
    PFN_cuMemFreeHost memFreeHost;
    PFN_cuMemGetInfo_v2 memGetInfo;
    PFN_cuMemsetD8_v2 memsetD8;
    PFN_cuMemAllocAsync memAllocAsync;
    PFN_cuMemAllocAsync memAllocAsync_ptsz;
    PFN_cuMemFreeAsync memFreeAsync;
    PFN_cuMemFreeAsync memFreeAsync_ptsz;
    PFN_cuMemAllocFromPoolAsync memAllocFromPoolAsync;
    PFN_cuMemAllocFromPoolAsync memAllocFromPoolAsync_ptsz;
    PFN_cuCtxGetDevice ctxGetDevice;
    PFN_cuGetExportTable getExportTable;
    PFN_cuArrayCreate_v2 arrayCreate;
    PFN_cuArray3DCreate_v2 array3DCreate;
    PFN_cuArrayDestroy arrayDestroy;
    PFN_cuMipmappedArrayCreate mipmappedArrayCreate;
    PFN_cuMipmappedArrayDestroy mipmappedArrayDestroy;
    CUresult (*primaryCtxReset)(int);
    PFN_cuGraphCreate graphCreate;
    PFN_cuGraphDestroy graphDestroy;
    PFN_cuGraphAddMemAllocNode graphAddMemAllocNode;
    PFN_cuGraphAddMemFreeNode graphAddMemFreeNode;
    PFN_cuGraphInstantiateWithFlags graphInstantiate;
    PFN_cuGraphLaunch graphLaunch;
    PFN_cuGraphExecDestroy graphExecDestroy;
    PFN_cuDeviceGraphMemTrim graphMemTrim;
    PFN_cuStreamBeginCapture_v2 streamBeginCapture;
    PFN_cuStreamEndCapture streamEndCapture;
} drv;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_error = cudaSuccess;

/* Load one entry through the driver's cuGetProcAddress; NULL if not found. */
static void *load(const char *name, int version, unsigned long long flags)
{
    void *fn = NULL;
    int status = -1;
    CUresult r = drv.getProcAddress(name, &fn, version, flags, &status);
    if (r != CUDA_SUCCESS || fn == NULL) {
        fprintf(stderr, "cudart stand-in: cuGetProcAddress(\"%s\", %d, %llu) failed: %d\n", name,
                version, flags, r);
        return NULL;
    }
    return fn;
}

static void runtime_init(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "cudart stand-in: cannot load libcuda.so.1: %s\n", dlerror());
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    PFN_cuGetProcAddress_v2 entry = (PFN_cuGetProcAddress_v2)dlsym(lib, "cuGetProcAddress_v2");
    if (entry == NULL) {
        fprintf(stderr, "cudart stand-in: libcuda.so.1 has no cuGetProcAddress_v2\n");
        init_error = cudaErrorInsufficientDriver;
        return;
    }

    void *fn = NULL;
    int status = 0;
    /* The real runtime probes with an empty name first; failure is expected. */
    (void)entry("", &fn, 13000, 0, &status);

    fn = NULL;
    if (entry("cuInit", &fn, 2000, 0, &status) != CUDA_SUCCESS || fn == NULL) {
        fprintf(stderr, "cudart stand-in: cuInit not found\n");
        init_error = cudaErrorInitializationError;
        return;
    }
    drv.init = (PFN_cuInit)fn;
    if (drv.init(0) != CUDA_SUCCESS) {
        init_error = cudaErrorInitializationError;
        return;
    }

    fn = NULL;
    (void)entry("cuGetProcAddress", &fn, 11030, 0, &status); /* v1; not used afterwards */
    fn = NULL;
    if (entry("cuGetProcAddress", &fn, 12000, 0, &status) != CUDA_SUCCESS || fn == NULL) {
        fprintf(stderr, "cudart stand-in: cuGetProcAddress@12000 not found\n");
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    /* From here on, only the pointer the driver handed back is used. */
    drv.getProcAddress = (PFN_cuGetProcAddress_v2)fn;

    drv.memAlloc = (PFN_cuMemAlloc_v2)load("cuMemAlloc", 3020, 0);
    drv.memFree = (PFN_cuMemFree_v2)load("cuMemFree", 3020, 0);
    drv.memAllocManaged = (PFN_cuMemAllocManaged)load("cuMemAllocManaged", 6000, 0);
    drv.memAllocPitch = (PFN_cuMemAllocPitch_v2)load("cuMemAllocPitch", 3020, 0);
    drv.memHostAlloc = (PFN_cuMemHostAlloc)load("cuMemHostAlloc", 2020, 0);
    drv.memAllocHost = (PFN_cuMemAllocHost_v2)load("cuMemAllocHost", 3020, 0);
    drv.memFreeHost = (PFN_cuMemFreeHost)load("cuMemFreeHost", 2000, 0);
    drv.memGetInfo = (PFN_cuMemGetInfo_v2)load("cuMemGetInfo", 3020, 0);
    drv.memsetD8 = (PFN_cuMemsetD8_v2)load("cuMemsetD8", 3020, 0);
    drv.memAllocAsync = (PFN_cuMemAllocAsync)load("cuMemAllocAsync", 11020, 0);
    drv.memAllocAsync_ptsz = (PFN_cuMemAllocAsync)load(
        "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    drv.memFreeAsync = (PFN_cuMemFreeAsync)load("cuMemFreeAsync", 11020, 0);
    drv.memFreeAsync_ptsz = (PFN_cuMemFreeAsync)load(
        "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    drv.memAllocFromPoolAsync =
        (PFN_cuMemAllocFromPoolAsync)load("cuMemAllocFromPoolAsync", 11020, 0);
    drv.memAllocFromPoolAsync_ptsz = (PFN_cuMemAllocFromPoolAsync)load(
        "cuMemAllocFromPoolAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    drv.ctxGetDevice = (PFN_cuCtxGetDevice)load("cuCtxGetDevice", 2000, 0);
    drv.getExportTable = (PFN_cuGetExportTable)load("cuGetExportTable", 3000, 0);
    drv.primaryCtxReset = (CUresult(*)(int))load("cuDevicePrimaryCtxReset", 11000, 0);
    drv.arrayCreate = (PFN_cuArrayCreate_v2)load("cuArrayCreate", 3020, 0);
    drv.array3DCreate = (PFN_cuArray3DCreate_v2)load("cuArray3DCreate", 3020, 0);
    drv.arrayDestroy = (PFN_cuArrayDestroy)load("cuArrayDestroy", 2000, 0);
    drv.mipmappedArrayCreate = (PFN_cuMipmappedArrayCreate)load("cuMipmappedArrayCreate", 5000, 0);
    drv.mipmappedArrayDestroy = (PFN_cuMipmappedArrayDestroy)load("cuMipmappedArrayDestroy", 5000, 0);

    drv.graphCreate = (PFN_cuGraphCreate)load("cuGraphCreate", 10000, 0);
    drv.graphDestroy = (PFN_cuGraphDestroy)load("cuGraphDestroy", 10000, 0);
    drv.graphAddMemAllocNode = (PFN_cuGraphAddMemAllocNode)load("cuGraphAddMemAllocNode", 11040, 0);
    drv.graphAddMemFreeNode = (PFN_cuGraphAddMemFreeNode)load("cuGraphAddMemFreeNode", 11040, 0);
    drv.graphInstantiate = (PFN_cuGraphInstantiateWithFlags)load("cuGraphInstantiate", 12000, 0);
    drv.graphLaunch = (PFN_cuGraphLaunch)load("cuGraphLaunch", 10000, 0);
    drv.graphExecDestroy = (PFN_cuGraphExecDestroy)load("cuGraphExecDestroy", 10000, 0);
    drv.graphMemTrim = (PFN_cuDeviceGraphMemTrim)load("cuDeviceGraphMemTrim", 11040, 0);
    drv.streamBeginCapture = (PFN_cuStreamBeginCapture_v2)load("cuStreamBeginCapture", 10010, 0);
    drv.streamEndCapture = (PFN_cuStreamEndCapture)load("cuStreamEndCapture", 10000, 0);

    /* The real runtime fetches a private table once; the result is ignored. */
    if (drv.getExportTable != NULL) {
        static const unsigned char table_id[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4,
                                                   0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39,
                                                   0x12, 0xfd, 0x9d, 0xf9};
        const void *table = NULL;
        (void)drv.getExportTable(&table, table_id);
    }
}

/* Initialise once; returns cudaSuccess or the sticky initialisation error. */
static cudaError_t ensure_init(void)
{
    pthread_once(&init_once, runtime_init);
    return init_error;
}

static cudaError_t map_error(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return cudaSuccess;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return cudaErrorMemoryAllocation;
    return cudaErrorInvalidValue;
}

/* Evaluates to an early return if the runtime or the needed entry is missing. */
#define REQUIRE(fnptr)                              \
    do {                                            \
        cudaError_t e_ = ensure_init();             \
        if (e_ != cudaSuccess)                      \
            return e_;                              \
        if ((fnptr) == NULL)                        \
            return cudaErrorInitializationError;    \
    } while (0)

static cudaError_t device_alloc(PFN_cuMemAlloc_v2 fn, void **devPtr, size_t size)
{
    CUdeviceptr d = 0;
    /* A NULL out-pointer is passed on so the driver reports the error. */
    CUresult r = fn(devPtr != NULL ? &d : NULL, size);
    if (r == CUDA_SUCCESS)
        *devPtr = (void *)(uintptr_t)d;
    return map_error(r);
}

static cudaError_t async_alloc(PFN_cuMemAllocAsync fn, void **devPtr, size_t size,
                               cudaStream_t stream)
{
    CUdeviceptr d = 0;
    CUresult r = fn(devPtr != NULL ? &d : NULL, size, (CUstream)stream);
    if (r == CUDA_SUCCESS)
        *devPtr = (void *)(uintptr_t)d;
    return map_error(r);
}

static cudaError_t pool_alloc(PFN_cuMemAllocFromPoolAsync fn, void **ptr, size_t size,
                              cudaMemPool_t pool, cudaStream_t stream)
{
    CUdeviceptr d = 0;
    CUresult r = fn(ptr != NULL ? &d : NULL, size, (CUmemoryPool)pool, (CUstream)stream);
    if (r == CUDA_SUCCESS)
        *ptr = (void *)(uintptr_t)d;
    return map_error(r);
}

API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    atomic_fetch_add(&served_malloc, 1);
    REQUIRE(drv.memAlloc);
    if (size == 0 && devPtr != NULL) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    return device_alloc(drv.memAlloc, devPtr, size);
}

API cudaError_t cudaFree(void *devPtr)
{
    atomic_fetch_add(&served_free, 1);
    if (devPtr == NULL)
        return cudaSuccess;
    REQUIRE(drv.memFree);
    return map_error(drv.memFree((CUdeviceptr)(uintptr_t)devPtr));
}

API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
    REQUIRE(drv.memAllocAsync);
    return async_alloc(drv.memAllocAsync, devPtr, size, stream);
}

API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream)
{
    REQUIRE(drv.memAllocAsync_ptsz);
    return async_alloc(drv.memAllocAsync_ptsz, devPtr, size, stream);
}

API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
    if (devPtr == NULL)
        return cudaSuccess;
    REQUIRE(drv.memFreeAsync);
    return map_error(drv.memFreeAsync((CUdeviceptr)(uintptr_t)devPtr, (CUstream)stream));
}

API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream)
{
    if (devPtr == NULL)
        return cudaSuccess;
    REQUIRE(drv.memFreeAsync_ptsz);
    return map_error(drv.memFreeAsync_ptsz((CUdeviceptr)(uintptr_t)devPtr, (CUstream)stream));
}

API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                        cudaStream_t stream)
{
    REQUIRE(drv.memAllocFromPoolAsync);
    return pool_alloc(drv.memAllocFromPoolAsync, ptr, size, memPool, stream);
}

API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                             cudaStream_t stream)
{
    REQUIRE(drv.memAllocFromPoolAsync_ptsz);
    return pool_alloc(drv.memAllocFromPoolAsync_ptsz, ptr, size, memPool, stream);
}

API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    REQUIRE(drv.memAllocManaged);
    CUdeviceptr d = 0;
    CUresult r = drv.memAllocManaged(devPtr != NULL ? &d : NULL, size, flags);
    if (r == CUDA_SUCCESS)
        *devPtr = (void *)(uintptr_t)d;
    return map_error(r);
}

API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    REQUIRE(drv.memAllocPitch);
    CUdeviceptr d = 0;
    CUresult r = drv.memAllocPitch(devPtr != NULL ? &d : NULL, pitch, width, height, 4);
    if (r == CUDA_SUCCESS)
        *devPtr = (void *)(uintptr_t)d;
    return map_error(r);
}

/* Linear 3D memory: height x depth rows of the width's pitch, one cuMemAllocPitch as the real
 * runtime's (which the shim then sees below a statically linked runtime). */
API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    REQUIRE(drv.memAllocPitch);
    if (pitchedDevPtr == NULL || (extent.height != 0 && extent.depth > SIZE_MAX / extent.height))
        return cudaErrorInvalidValue;
    CUdeviceptr d = 0;
    size_t pitch = 0;
    CUresult r = drv.memAllocPitch(&d, &pitch, extent.width, extent.height * extent.depth, 4);
    if (r == CUDA_SUCCESS) {
        pitchedDevPtr->ptr = (void *)(uintptr_t)d;
        pitchedDevPtr->pitch = pitch;
        pitchedDevPtr->xsize = extent.width;
        pitchedDevPtr->ysize = extent.height;
    }
    return map_error(r);
}

API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    REQUIRE(drv.memAllocHost);
    return map_error(drv.memAllocHost(ptr, size));
}

API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    REQUIRE(drv.memHostAlloc);
    return map_error(drv.memHostAlloc(pHost, size, flags));
}

API cudaError_t cudaFreeHost(void *ptr)
{
    if (ptr == NULL)
        return cudaSuccess;
    REQUIRE(drv.memFreeHost);
    return map_error(drv.memFreeHost(ptr));
}

API cudaError_t cudaMemGetInfo(size_t *freeBytes, size_t *totalBytes)
{
    REQUIRE(drv.memGetInfo);
    return map_error(drv.memGetInfo(freeBytes, totalBytes));
}

/* Through the driver table, as the real runtime's cudaMemset (the program's activity). */
API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    REQUIRE(drv.memsetD8);
    return map_error(drv.memsetD8((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count));
}

API cudaError_t cudaGetDevice(int *device)
{
    REQUIRE(drv.ctxGetDevice);
    return map_error(drv.ctxGetDevice(device));
}

API cudaError_t cudaDeviceSynchronize(void)
{
    return ensure_init();
}

/* ------------------------------------------------------------------------ */
/* Arrays: the runtime's channel descriptor becomes the driver's format.     */

static void channel_format(const struct cudaChannelFormatDesc *d, int *format, unsigned *channels)
{
    int bits = d->x;
    *channels = (d->x > 0) + (d->y > 0) + (d->z > 0) + (d->w > 0);
    if (d->f == cudaChannelFormatKindFloat)
        *format = bits == 16 ? 0x10 : CU_AD_FORMAT_FLOAT;
    else
        *format = bits == 8 ? CU_AD_FORMAT_UNSIGNED_INT8
                  : bits == 16 ? CU_AD_FORMAT_UNSIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT32;
}

API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
                                size_t height, unsigned int flags)
{
    (void)flags;
    REQUIRE(drv.arrayCreate);
    if (desc == NULL)
        return cudaErrorInvalidValue;
    CUDA_ARRAY_DESCRIPTOR d = {width, height, 0, 0};
    channel_format(desc, &d.Format, &d.NumChannels);
    return map_error(drv.arrayCreate((CUarray *)array, &d));
}

API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                  struct cudaExtent extent, unsigned int flags)
{
    REQUIRE(drv.array3DCreate);
    if (desc == NULL)
        return cudaErrorInvalidValue;
    CUDA_ARRAY3D_DESCRIPTOR d = {extent.width, extent.height, extent.depth, 0, 0, flags};
    channel_format(desc, &d.Format, &d.NumChannels);
    return map_error(drv.array3DCreate((CUarray *)array, &d));
}

API cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray,
                                         const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                                         unsigned int numLevels, unsigned int flags)
{
    REQUIRE(drv.mipmappedArrayCreate);
    if (desc == NULL)
        return cudaErrorInvalidValue;
    CUDA_ARRAY3D_DESCRIPTOR d = {extent.width, extent.height, extent.depth, 0, 0, flags};
    channel_format(desc, &d.Format, &d.NumChannels);
    return map_error(drv.mipmappedArrayCreate((CUmipmappedArray *)mipmappedArray, &d, numLevels));
}

API cudaError_t cudaFreeArray(cudaArray_t array)
{
    REQUIRE(drv.arrayDestroy);
    if (array == NULL)
        return cudaSuccess;
    return map_error(drv.arrayDestroy((CUarray)array));
}

API cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
    REQUIRE(drv.mipmappedArrayDestroy);
    if (mipmappedArray == NULL)
        return cudaSuccess;
    return map_error(drv.mipmappedArrayDestroy((CUmipmappedArray)mipmappedArray));
}

/* Destroys the device's primary context and every allocation in it (through the driver, as the
 * real runtime does). */
API cudaError_t cudaDeviceReset(void)
{
    REQUIRE(drv.primaryCtxReset);
    return map_error(drv.primaryCtxReset(0));
}

/* ------------------------------------------------------------------------ */
/* Graphs: each through the driver's function, as the real runtime does.      */

API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
    REQUIRE(drv.graphCreate);
    return map_error(drv.graphCreate((CUgraph *)pGraph, flags));
}

API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    REQUIRE(drv.graphDestroy);
    return map_error(drv.graphDestroy((CUgraph)graph));
}

API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                         void *nodeParams)
{
    REQUIRE(drv.graphAddMemAllocNode);
    return map_error(drv.graphAddMemAllocNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                              (const CUgraphNode *)pDependencies, numDependencies,
                                              (CUDA_MEM_ALLOC_NODE_PARAMS *)nodeParams));
}

API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dptr)
{
    REQUIRE(drv.graphAddMemFreeNode);
    return map_error(drv.graphAddMemFreeNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                             (const CUgraphNode *)pDependencies, numDependencies,
                                             (CUdeviceptr)(uintptr_t)dptr));
}

API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    REQUIRE(drv.graphInstantiate);
    return map_error(drv.graphInstantiate((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                              unsigned long long flags)
{
    REQUIRE(drv.graphInstantiate);
    return map_error(drv.graphInstantiate((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    REQUIRE(drv.graphLaunch);
    return map_error(drv.graphLaunch((CUgraphExec)graphExec, (CUstream)stream));
}

API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    REQUIRE(drv.graphExecDestroy);
    return map_error(drv.graphExecDestroy((CUgraphExec)graphExec));
}

API cudaError_t cudaDeviceGraphMemTrim(int device)
{
    REQUIRE(drv.graphMemTrim);
    return map_error(drv.graphMemTrim(device));
}

API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode)
{
    REQUIRE(drv.streamBeginCapture);
    return map_error(drv.streamBeginCapture((CUstream)stream, mode));
}

API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    REQUIRE(drv.streamEndCapture);
    return map_error(drv.streamEndCapture((CUstream)stream, (CUgraph *)pGraph));
}
