// Negative: a model's 8 layers (8 MiB each) allocated at start into a static std::vector and
// used for 300 steps; held until exit (the vector is destroyed among the static destructors).
// nvcc's default (static) runtime.
//
// Usage: cxx_layers
#include "common.h"

#include <vector>

static std::vector<float *> g_layers;

NOINLINE void load_layers()
{
    for (int i = 0; i < 8; i++) {
        float *p = nullptr;
        check(cudaMalloc(&p, 8u << 20), "cudaMalloc");
        g_layers.push_back(p);
    }
}

int main()
{
    load_layers();
    for (int i = 0; i < 300; i++)
        check(cudaMemset(g_layers[i % g_layers.size()], i & 0xFF, 8u << 20), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("%zu layers\n", g_layers.size());
    return 0;
}
