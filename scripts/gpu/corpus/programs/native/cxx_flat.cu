// Negative: weights (64 MiB) allocated at start and held in a global for the run; a 4 MiB
// temporary allocated, used and freed each of 300 steps. Built with the static and with the
// shared runtime.
//
// Usage: cxx_flat
#include "common.h"

static void *g_weights;

NOINLINE void step(int i)
{
    void *tmp = nullptr;
    check(cudaMalloc(&tmp, 4u << 20), "cudaMalloc");
    check(cudaMemset(tmp, i & 0xFF, 4u << 20), "cudaMemset");
    check(cudaFree(tmp), "cudaFree");
}

int main()
{
    check(cudaMalloc(&g_weights, 64u << 20), "cudaMalloc");
    check(cudaMemset(g_weights, 0, 64u << 20), "cudaMemset");
    for (int i = 0; i < 300; i++)
        step(i);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("300 steps\n");
    return 0;
}
