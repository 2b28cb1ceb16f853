/*
 * The driver stand-in's contexts (see cuda_table.h): a primary context per device ordinal
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

#define MAX_DEVICES 16
#define STACK_DEPTH 16

struct standin_ctx {
    int device;
    int primary;
    int refs; /* primary contexts: the retain count */
};

static struct standin_ctx primaries[MAX_DEVICES] = {
    {0, 1, 0}, {1, 1, 0}, {2, 1, 0},  {3, 1, 0},  {4, 1, 0},  {5, 1, 0},  {6, 1, 0},  {7, 1, 0},
    {8, 1, 0}, {9, 1, 0}, {10, 1, 0}, {11, 1, 0}, {12, 1, 0}, {13, 1, 0}, {14, 1, 0}, {15, 1, 0},
};

static __thread struct standin_ctx *stack[STACK_DEPTH];
static __thread int depth; /* stack[depth - 1] is current; none: device 0's primary context */
/* The context of the allocation in progress on this thread, when a stream or pool names it. */
static __thread struct standin_ctx *owner_override;

static struct standin_ctx *current(void) { return depth > 0 ? stack[depth - 1] : &primaries[0]; }

void *standin_primary(int device) { return device >= 0 && device < MAX_DEVICES ? &primaries[device] : NULL; }

void standin_owner(void **ctx, int *device)
{
    struct standin_ctx *c = owner_override != NULL ? owner_override : current();
    *ctx = c;
    *device = c->device;
}

void standin_set_owner(void *ctx) { owner_override = ctx; }

void *standin_stream_ctx(CUstream s)
{
    uintptr_t h = (uintptr_t)s;
    return h >= 0x5000 && h < 0x5000 + MAX_DEVICES ? &primaries[h - 0x5000] : current();
}

void *standin_pool_ctx(CUmemoryPool pool)
{
    uintptr_t h = (uintptr_t)pool;
    return h >= 0x7000 && h < 0x7000 + MAX_DEVICES ? &primaries[h - 0x7000] : NULL;
}

int standin_current_device(void) { return current()->device; }

/* The primary context of `ctx`'s device: where stream-ordered (pool) memory lives. */
void *standin_primary_of(void *ctx) { return &primaries[((struct standin_ctx *)ctx)->device & (MAX_DEVICES - 1)]; }

#define API __attribute__((visibility("default")))

API CUresult cuDeviceGet(int *device, int ordinal)
{
    if (device == NULL || ordinal < 0 || ordinal >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* The stand-in machine's GPU behind ordinal d: PCI bus id 0000:(0x10 + d):00.0, UUID of 16 bytes
 * 0xA0 + d, 1, 2, ..., 15 (a real driver gives the board's). */
API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, int dev)
{
    if (pciBusId == NULL || len <= 0 || dev < 0 || dev >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev)
{
    if (uuid == NULL || dev < 0 || dev >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 16; i++)
        uuid[i] = (unsigned char)(i == 0 ? 0xA0 + dev : i);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(void **ctx, int device)
{
    if (ctx == NULL || device < 0 || device >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    lock_table();
    primaries[device].refs++;
    unlock_table();
    *ctx = &primaries[device];
    return CUDA_SUCCESS;
}

/* The last release destroys the primary context: its allocations are freed. */
CUresult impl_cuDevicePrimaryCtxRelease_v2(int device)
{
    if (device < 0 || device >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    lock_table();
    int refs = primaries[device].refs;
    if (refs > 0)
        primaries[device].refs--;
    unlock_table();
    if (refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (refs == 1) {
        reset_ctx_entries(&primaries[device]);
        if (device == 0)
            vmm_reset_device();
    }
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(int device, unsigned int *flags, int *active)
{
    if (flags == NULL || active == NULL || device < 0 || device >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    lock_table();
    *active = primaries[device].refs > 0;
    unlock_table();
    *flags = 0;
    return CUDA_SUCCESS;
}

CUresult impl_cuDevicePrimaryCtxReset_v2(int device)
{
    if (device < 0 || device >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    reset_ctx_entries(&primaries[device]);
    if (device == 0)
        vmm_reset_device(); /* the stand-in's VMM memory is on device 0 */
    return CUDA_SUCCESS;
}

/* A new context of `dev`, made current (pushed) on the calling thread. */
CUresult standin_ctx_create(void **pctx, int dev)
{
    if (pctx == NULL || dev < 0 || dev >= MAX_DEVICES || depth == STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    struct standin_ctx *c = malloc(sizeof *c);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->device = dev;
    c->primary = 0;
    c->refs = 1;
    stack[depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult impl_cuCtxDestroy_v2(void *ctx)
{
    struct standin_ctx *c = ctx;
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    reset_ctx_entries(c);
    if (c == &primaries[0])
        vmm_reset_device();
    /* Off this thread's stack; other threads' stacks are the program's business. */
    for (int i = 0; i < depth; i++)
        if (stack[i] == c) {
            for (int j = i; j + 1 < depth; j++)
                stack[j] = stack[j + 1];
            depth--;
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
    *device = current()->device;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(void **pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current();
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(void *ctx)
{
    if (ctx == NULL) {
        depth = 0;
        return CUDA_SUCCESS;
    }
    if (depth == 0)
        depth = 1;
    stack[depth - 1] = ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(void *ctx)
{
    if (ctx == NULL || depth == STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(void **pctx)
{
    if (depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    void *c = stack[--depth];
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
        props->location.id < 0 || props->location.id >= MAX_DEVICES)
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
