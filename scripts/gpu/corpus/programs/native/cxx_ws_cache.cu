// Negative: a workspace cache, one buffer per size in a static std::map, asked for 4 sizes in
// turn over 300 steps: 4 allocations at the start, then reuse. The map holds them until exit.
// Built with -cudart shared.
//
// Usage: cxx_ws_cache
#include "common.h"

#include <map>

static std::map<size_t, void *> g_workspaces;

NOINLINE void *workspace(size_t n)
{
    auto it = g_workspaces.find(n);
    if (it != g_workspaces.end())
        return it->second;
    void *p = nullptr;
    check(cudaMalloc(&p, n), "cudaMalloc");
    g_workspaces.emplace(n, p);
    return p;
}

int main()
{
    const size_t sizes[] = {1u << 20, 2u << 20, 8u << 20, 16u << 20};
    for (int i = 0; i < 300; i++) {
        size_t n = sizes[i % 4];
        check(cudaMemset(workspace(n), i & 0xFF, n), "cudaMemset");
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("%zu workspaces\n", g_workspaces.size());
    return 0;
}
