/*
 * The driver stand-in's contexts as state (see cuda_table.h): a primary context per device
 * ordinal, each thread's stack of current contexts, and the owner of the allocation in progress,
 * which the allocation table asks for (standin_owner).  The context API that changes them is
 * cuda_contexts.c; this file calls nothing of the other files.
 */
#define _GNU_SOURCE
#include "cuda_table.h"

#include <stdint.h>

struct standin_ctx standin_primaries[STANDIN_MAX_DEVICES] = {
    {0, 1, 0}, {1, 1, 0}, {2, 1, 0},  {3, 1, 0},  {4, 1, 0},  {5, 1, 0},  {6, 1, 0},  {7, 1, 0},
    {8, 1, 0}, {9, 1, 0}, {10, 1, 0}, {11, 1, 0}, {12, 1, 0}, {13, 1, 0}, {14, 1, 0}, {15, 1, 0},
};

__thread struct standin_ctx *standin_stack[STANDIN_STACK_DEPTH];
__thread int standin_depth;
/* The context of the allocation in progress on this thread, when a stream or pool names it. */
static __thread struct standin_ctx *owner_override;

struct standin_ctx *standin_current(void)
{
    return standin_depth > 0 ? standin_stack[standin_depth - 1] : &standin_primaries[0];
}

void *standin_primary(int device)
{
    return device >= 0 && device < STANDIN_MAX_DEVICES ? &standin_primaries[device] : NULL;
}

void standin_owner(void **ctx, int *device)
{
    struct standin_ctx *c = owner_override != NULL ? owner_override : standin_current();
    *ctx = c;
    *device = c->device;
}

void standin_set_owner(void *ctx) { owner_override = ctx; }

void *standin_stream_ctx(CUstream s)
{
    uintptr_t h = (uintptr_t)s;
    if (h >= 0x5000 && h < 0x5000 + STANDIN_MAX_DEVICES)
        return &standin_primaries[h - 0x5000];
    return standin_current();
}

void *standin_pool_ctx(CUmemoryPool pool)
{
    uintptr_t h = (uintptr_t)pool;
    return h >= 0x7000 && h < 0x7000 + STANDIN_MAX_DEVICES ? &standin_primaries[h - 0x7000] : NULL;
}

int standin_current_device(void) { return standin_current()->device; }

/* The primary context of `ctx`'s device: where stream-ordered (pool) memory lives. */
void *standin_primary_of(void *ctx)
{
    return &standin_primaries[((struct standin_ctx *)ctx)->device & (STANDIN_MAX_DEVICES - 1)];
}
