/*
 * The few CUDA runtime calls the stand-in corpus's C and C++ programs make, with the real
 * runtime's signatures; they link against the stand-in libcudart.so.13 (build.rs).
 */
#ifndef CORPUS_STANDIN_RT_H
#define CORPUS_STANDIN_RT_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif
typedef int cudaError_t;
typedef void *cudaStream_t;
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#define NOINLINE __attribute__((noinline))

static inline void check(cudaError_t e, const char *what)
{
    if (e != 0) {
        fprintf(stderr, "%s failed: %d\n", what, (int)e);
        exit(1);
    }
}

/* "slow" as the first argument: the caller pauses between steps; "fast": no pause. */
static inline int slow_variant(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "fast") != 0 && strcmp(argv[1], "slow") != 0)) {
        fprintf(stderr, "usage: %s fast|slow\n", argv[0]);
        exit(2);
    }
    return strcmp(argv[1], "slow") == 0;
}

/* Zeroes the stack below the caller, where earlier calls' frames leave copies of the pointers
 * they handled: a program whose pointer is lost keeps no stale copy of it. */
static NOINLINE void clear_stack(void)
{
    volatile char pad[256 * 1024];
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = 0;
}
#endif
