/* A stand-in for PyTorch's CUDA caching allocator library: built as libc10_cuda.so in the
 * stand-ins' directory, so that the shim sees an allocation come through it (as the real
 * libc10_cuda.so's segment allocations do) and asks for PyTorch's record of its blocks' stacks.
 * Its one entry point makes a segment: one cudaMalloc of `size` bytes, its address or 0. */
#include <stddef.h>

#include "cudart_standin.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT void *c10_segment_alloc(size_t size) {
    void *p = NULL;
    if (cudaMalloc(&p, size) != cudaSuccess) return NULL;
    return p;
}
