/* Negative: a workspace cache in a static array, one buffer per size, 4 sizes asked for in turn
 * over 300 steps: 4 allocations at the start, then reuse; held until exit.
 * Usage: c_cache */
#include "rt.h"

static struct {
    size_t size;
    void *p;
} g_cache[8];

NOINLINE void *workspace(size_t n)
{
    for (int i = 0; i < 8; i++)
        if (g_cache[i].p && g_cache[i].size == n)
            return g_cache[i].p;
    for (int i = 0; i < 8; i++)
        if (!g_cache[i].p) {
            check(cudaMalloc(&g_cache[i].p, n), "cudaMalloc");
            g_cache[i].size = n;
            return g_cache[i].p;
        }
    return NULL;
}

int main(void)
{
    const size_t sizes[] = {16 << 10, 32 << 10, 64 << 10, 128 << 10};
    for (int i = 0; i < 300; i++)
        check(cudaMemset(workspace(sizes[i % 4]), i & 0xFF, 64), "cudaMemset");
    printf("300 steps\n");
    return 0;
}
