/* A stand-in for a vendor library: built as libcublas.so.13 in the stand-ins' directory, so that
 * its frames are classified as cuBLAS's. Its one entry point, cublasCreate_v2, allocates device
 * and pinned host memory through three internal paths (three distinct stacks under one call of
 * the user's, as the real cuBLAS 13 does on the H200: docs/gpu-matrix.md; the third is pinned host
 * memory, as NCCL's communicators keep beside their device buffers) and keeps them: a handle never
 * destroyed leaks it. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_standin.h"

#define EXPORT __attribute__((visibility("default")))

/* Each helper allocates 1 MiB; noinline keeps three distinct stacks. */
__attribute__((noinline)) static void *workspace_alloc(void) {
    void *p = NULL;
    cudaMalloc(&p, 1 << 20);
    return p;
}

__attribute__((noinline)) static void *stream_state_alloc(void) {
    void *p = NULL;
    cudaMalloc(&p, 1 << 20);
    return p;
}

/* Pinned host memory, as NCCL keeps beside a communicator's device buffers: one cause of two
 * kinds, one suspect. */
__attribute__((noinline)) static void *heuristics_cache_alloc(void) {
    void *p = NULL;
    cudaHostAlloc(&p, 1 << 20, 0);
    return p;
}

struct handle {
    void *workspace, *state, *cache;
};

static struct handle handles[4096];
static int used;

/* `cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)`: 0 on success. */
EXPORT int cublasCreate_v2(void **out) {
    int i = __atomic_fetch_add(&used, 1, __ATOMIC_RELAXED);
    if (i >= 4096) {
        return 3; /* CUBLAS_STATUS_ALLOC_FAILED */
    }
    handles[i].workspace = workspace_alloc();
    handles[i].state = stream_state_alloc();
    handles[i].cache = heuristics_cache_alloc();
    *out = &handles[i];
    return 0;
}

/* Stand-in only: the handles' state moves where the reachability scan does not read (as the
 * real library keeps part of a handle's state in device memory or the driver's mappings): the
 * library's table forgets the pointers. */
EXPORT void standin_cublas_hide_handles(void) {
    memset(handles, 0, sizeof handles);
}

/* A handle in a malloc'd block of the library's own, which the library's data also points to,
 * as the real libraries keep theirs (`cublasLtHandle_t cublasLtCreate(...)`): the program keeps
 * the handle, and the handle keeps the device workspace (1 MiB). The reachability scan's test of
 * a block that a CUDA library and the program both point to (tests/reach.rs). */
static struct handle *lt_handles[64];
static int lt_used;

EXPORT int cublasLtCreate(void **out) {
    int i = __atomic_fetch_add(&lt_used, 1, __ATOMIC_RELAXED);
    struct handle *h = i < 64 ? calloc(1, sizeof *h) : NULL;
    if (h == NULL) {
        return 3;
    }
    h->workspace = workspace_alloc();
    lt_handles[i] = h;
    *out = h;
    return 0;
}
