// Helpers shared by the corpus's CUDA C++ programs.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static inline void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// "slow" as the first argument: a pause of `ms` between steps; "fast": none.
static inline bool slow_variant(int argc, char **argv)
{
    if (argc < 2 || (std::strcmp(argv[1], "fast") != 0 && std::strcmp(argv[1], "slow") != 0)) {
        std::fprintf(stderr, "usage: %s fast|slow\n", argv[0]);
        std::exit(2);
    }
    return std::strcmp(argv[1], "slow") == 0;
}

// Zeroes the stack below the caller, where the frames of earlier calls leave copies of the
// pointers they handled: a program whose pointer is lost keeps no stale copy of it anywhere.
NOINLINE static void clear_stack()
{
    volatile char pad[256 * 1024];
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = 0;
}
