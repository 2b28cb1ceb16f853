/*
 * Prototypes of the CUDA runtime API subset that the stand-in runtime
 * (standins/cudart.c: libcudart.so.13 and libcudart_static.a) implements,
 * with the real runtime's signatures.  Written for gpushim's tests.
 */
#ifndef GPUSHIM_CUDART_STANDIN_H
#define GPUSHIM_CUDART_STANDIN_H

#include <stddef.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;

#define cudaSuccess 0
#define cudaErrorInvalidValue 1
#define cudaErrorMemoryAllocation 2
#define cudaErrorInitializationError 3
#define cudaErrorInsufficientDriver 35

#define cudaHostAllocDefault 0
#define cudaMemAttachGlobal 1

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);

/* CUDA arrays (cuda_runtime_api.h's names and layouts). */
typedef void *cudaArray_t;
typedef void *cudaMipmappedArray_t;
enum cudaChannelFormatKind { cudaChannelFormatKindSigned, cudaChannelFormatKindUnsigned, cudaChannelFormatKindFloat };
struct cudaChannelFormatDesc {
    int x, y, z, w;
    enum cudaChannelFormatKind f;
};
struct cudaExtent {
    size_t width, height, depth;
};
/* What cudaMalloc3D writes: the address, the pitch (bytes per row), the logical width (bytes)
 * and height asked for. */
struct cudaPitchedPtr {
    void *ptr;
    size_t pitch, xsize, ysize;
};
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent);
cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
                            size_t height, unsigned int flags);
cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                              struct cudaExtent extent, unsigned int flags);
cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray, const struct cudaChannelFormatDesc *desc,
                                     struct cudaExtent extent, unsigned int numLevels, unsigned int flags);
cudaError_t cudaFreeArray(cudaArray_t array);
cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray);
/* Graphs with memory nodes (cuda_runtime_api.h's names; the node parameters' layout is the
 * driver's). */
typedef void *cudaGraph_t;
typedef void *cudaGraphNode_t;
typedef void *cudaGraphExec_t;
#define cudaGraphInstantiateFlagAutoFreeOnLaunch 1
#define cudaStreamCaptureModeGlobal 0
cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,
                                     size_t numDependencies, void *nodeParams /* cudaMemAllocNodeParams */);
cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies,
                                    size_t numDependencies, void *dptr);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaDeviceGraphMemTrim(int device);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaGetDevice(int *device);

/* Stand-in only: the cudaMalloc or cudaFree calls this copy of the runtime served. */
unsigned long cudart_standin_calls(const char *name);
typedef unsigned long (*PFN_cudart_standin_calls)(const char *name);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);

#endif
