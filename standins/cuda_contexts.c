/*
 * The driver stand-in's context API (see cuda_table.h; the state itself is cuda_current.c's): a
 * primary context per device ordinal
 * (0 to 15) with its retain count, contexts the program creates (cuCtxCreate), each thread's
 * current context with a push/pop stack, streams 0x5000 + N of device N's primary context, and
 * memory pools 0x7000 + N located on device N.  Every allocation belongs to a context and a
 * device: those of the stream or pool it was made on, else the calling thread's current
 * context (device 0's primary context until the thread sets another).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include "cuda_table.h"

#include <stdint.h>
#include <stdlib.h>

#define API __attribute__((visibility("default")))

API CUresult cuDeviceGet(int *device, int ordinal)
{
    if (device == NULL || ordinal < 0 || ordinal >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* The stand-in machine's GPU behind ordinal d: PCI bus id 0000:(0x10 + d):00.0, UUID of 16 bytes
 * 0xA0 + d, 1, 2, ..., 15 (a real driver gives the board's). */
API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, int dev)
{
    if (pciBusId == NULL || len <= 0 || dev < 0 || dev >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev)
{
    if (uuid == NULL || dev < 0 || dev >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 16; i++)
        uuid[i] = (unsigned char)(i == 0 ? 0xA0 + dev : i);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(void **ctx, int device)
{
    if (ctx == NULL || device < 0 || device >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    lock_table();
    standin_primaries[device].refs++;
    unlock_table();
    *ctx = &standin_primaries[device];
    return CUDA_SUCCESS;
}

/* The last release destroys the primary context: its allocations are freed. */
CUresult impl_cuDevicePrimaryCtxRelease_v2(int device)
{
    if (device < 0 || device >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    lock_table();
    int refs = standin_primaries[device].refs;
    if (refs > 0)
        standin_primaries[device].refs--;
    unlock_table();
    if (refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (refs == 1) {
        reset_ctx_entries(&standin_primaries[device]);
        if (device == 0)
            vmm_reset_device();
    }
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(int device, unsigned int *flags, int *active)
{
    if (flags == NULL || active == NULL || device < 0 || device >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    lock_table();
    *active = standin_primaries[device].refs > 0;
    unlock_table();
    *flags = 0;
    return CUDA_SUCCESS;
}

CUresult impl_cuDevicePrimaryCtxReset_v2(int device)
{
    if (device < 0 || device >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    reset_ctx_entries(&standin_primaries[device]);
    if (device == 0)
        vmm_reset_device(); /* the stand-in's VMM memory is on device 0 */
    return CUDA_SUCCESS;
}

/* A new context of `dev`, made current (pushed) on the calling thread. */
CUresult standin_ctx_create(void **pctx, int dev)
{
    if (pctx == NULL || dev < 0 || dev >= STANDIN_MAX_DEVICES || standin_depth == STANDIN_STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    struct standin_ctx *c = malloc(sizeof *c);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->device = dev;
    c->primary = 0;
    c->refs = 1;
    standin_stack[standin_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult impl_cuCtxDestroy_v2(void *ctx)
{
    struct standin_ctx *c = ctx;
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    reset_ctx_entries(c);
    if (c == &standin_primaries[0])
        vmm_reset_device();
    /* Off this thread's stack; other threads' stacks are the program's business. */
    for (int i = 0; i < standin_depth; i++)
        if (standin_stack[i] == c) {
            for (int j = i; j + 1 < standin_depth; j++)
                standin_stack[j] = standin_stack[j + 1];
            standin_depth--;
            break;
        }
    if (!c->primary)
        free(c);
    return CUDA_SUCCESS;
}

atomic_ulong standin_stream_device_calls, standin_ctx_device_calls;

CUresult impl_cuCtxGetDevice(int *device)
{
    atomic_fetch_add_explicit(&standin_ctx_device_calls, 1, memory_order_relaxed);
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *device = standin_current()->device;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(void **pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = standin_current();
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(void *ctx)
{
    if (ctx == NULL) {
        standin_depth = 0;
        return CUDA_SUCCESS;
    }
    if (standin_depth == 0)
        standin_depth = 1;
    standin_stack[standin_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(void *ctx)
{
    if (ctx == NULL || standin_depth == STANDIN_STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    standin_stack[standin_depth++] = ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(void **pctx)
{
    if (standin_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    void *c = standin_stack[--standin_depth];
    if (pctx != NULL)
        *pctx = c;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetDevice(CUstream stream, int *device)
{
    atomic_fetch_add_explicit(&standin_stream_device_calls, 1, memory_order_relaxed);
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (graph_capture_unsupported(stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    *device = ((struct standin_ctx *)standin_stream_ctx(stream))->device;
    return CUDA_SUCCESS;
}

API CUresult cuStreamGetCtx(CUstream stream, void **pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = standin_stream_ctx(stream);
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (pool == NULL || props == NULL || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        props->location.id < 0 || props->location.id >= STANDIN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *pool = (CUmemoryPool)(uintptr_t)(0x7000 + props->location.id);
    return CUDA_SUCCESS;
}

API CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr)
{
    enum { DEVICE_ORDINAL = 9 };
    if (data == NULL || attribute != DEVICE_ORDINAL)
        return CUDA_ERROR_INVALID_VALUE;
    int device = entry_device((uintptr_t)ptr);
    if (device < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)data = device;
    return CUDA_SUCCESS;
}
