/*
 * Types and prototypes of the CUDA driver API subset that the stand-in
 * libcuda.so.1 (standins/cuda.c) implements.  The layouts and signatures
 * follow the real driver's ABI so that code built against these
 * declarations would also work against the real libcuda.so.1.
 *
 * Written for gpushim's tests; not derived from NVIDIA headers.
 */
#ifndef GPUSHIM_CUDA_STANDIN_H
#define GPUSHIM_CUDA_STANDIN_H

#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500

/* cuGetProcAddress flags */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* cuGetProcAddress_v2 symbolStatus values */
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1

/* cuMemAllocManaged flags */
#define CU_MEM_ATTACH_GLOBAL 1
#define CU_MEM_ATTACH_HOST 2

/* CUmemAllocationProp.type */
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
/* CUmemAllocationProp.location.type */
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_LOCATION_TYPE_HOST 2
/* CUmemAllocationHandleType */
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1

typedef struct CUmemLocation_st {
    int type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemPoolProps_st {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuCtxGetDevice(int *device);
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize); /* v1 ABI */
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
/* Work, as the program's activity: they do nothing here but count. */
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);
CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shmem, void *stream, void **params,
                        void **extra);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                            size_t Height, unsigned int ElementSizeBytes);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFreeHost(void *p);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      int handleType, unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        int shHandleType);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuGetExportTable(const void **ppExportTable, const void *pExportTableId);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                          unsigned long long flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             unsigned long long flags, int *symbolStatus);

/* CUDA arrays (cuda.h's names and layouts). */
typedef void *CUarray;
typedef void *CUmipmappedArray;
#define CU_AD_FORMAT_UNSIGNED_INT8 0x01
#define CU_AD_FORMAT_UNSIGNED_INT16 0x02
#define CU_AD_FORMAT_UNSIGNED_INT32 0x03
#define CU_AD_FORMAT_FLOAT 0x20
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    int Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
typedef struct CUDA_ARRAY_MEMORY_REQUIREMENTS_st {
    size_t size;
    size_t alignment;
    unsigned int reserved[4];
} CUDA_ARRAY_MEMORY_REQUIREMENTS;

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc);
CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc);
CUresult cuArrayDestroy(CUarray hArray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                unsigned int numMipmapLevels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);
CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUarray array, int device);
CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req,
                                               CUmipmappedArray mipmap, int device);

/* CUDA graphs with memory nodes (cuda.h's names and layouts). */
typedef void *CUgraph;
typedef void *CUgraphNode;
typedef void *CUgraphExec;
#define CU_GRAPH_NODE_TYPE_EMPTY 5
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC 10
#define CU_GRAPH_NODE_TYPE_MEM_FREE 11
#define CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH 1
#define CU_STREAM_CAPTURE_STATUS_NONE 0
#define CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define CUDA_ERROR_ILLEGAL_STATE 401
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901
/* CUmemPoolProps: above. */
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {
    CUmemPoolProps poolProps;
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
_Static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120, "CUDA_MEM_ALLOC_NODE_PARAMS layout");

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams);
CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                               size_t numDependencies, CUdeviceptr dptr);
CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes);
CUresult cuGraphNodeGetType(CUgraphNode hNode, int *type);
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out);
CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuDeviceGraphMemTrim(int device);
CUresult cuStreamBeginCapture_v2(CUstream hStream, int mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamIsCapturing(CUstream hStream, int *captureStatus);
typedef CUresult (*PFN_cuGraphCreate)(CUgraph *, unsigned int);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph);
typedef CUresult (*PFN_cuGraphAddMemAllocNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                               CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*PFN_cuGraphAddMemFreeNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec, CUstream);
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec);
typedef CUresult (*PFN_cuDeviceGraphMemTrim)(int);
typedef CUresult (*PFN_cuStreamBeginCapture_v2)(CUstream, int);
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream, CUgraph *);

/* Stand-in only: how many times the exported function `name` was entered. */
unsigned long standin_calls(const char *function_name);

/* Function-pointer types, for callers that load the driver dynamically. */
typedef CUresult (*PFN_cuInit)(unsigned int);
typedef CUresult (*PFN_cuCtxGetDevice)(int *);
typedef CUresult (*PFN_cuMemAlloc_v1)(unsigned int *, unsigned int);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr *, size_t);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr);
typedef CUresult (*PFN_cuMemAllocPitch_v2)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*PFN_cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*PFN_cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*PFN_cuMemFreeAsync)(CUdeviceptr, CUstream);
typedef CUresult (*PFN_cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*PFN_cuMemHostAlloc)(void **, size_t, unsigned int);
typedef CUresult (*PFN_cuMemAllocHost_v2)(void **, size_t);
typedef CUresult (*PFN_cuMemFreeHost)(void *);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle *, size_t,
                                    const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle);
typedef CUresult (*PFN_cuMemGetInfo_v2)(size_t *, size_t *);
typedef CUresult (*PFN_cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*PFN_cuLaunchKernel)(void *, unsigned int, unsigned int, unsigned int, unsigned int,
                                       unsigned int, unsigned int, unsigned int, void *, void **, void **);
typedef CUresult (*PFN_cuGetExportTable)(const void **, const void *);
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char *, void **, int, unsigned long long);
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char *, void **, int, unsigned long long, int *);
typedef unsigned long (*PFN_standin_calls)(const char *);
typedef CUresult (*PFN_cuArrayCreate_v2)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*PFN_cuArray3DCreate_v2)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*PFN_cuArrayDestroy)(CUarray);
typedef CUresult (*PFN_cuMipmappedArrayCreate)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *,
                                               unsigned int);
typedef CUresult (*PFN_cuMipmappedArrayDestroy)(CUmipmappedArray);

#endif
