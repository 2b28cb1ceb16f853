// Negative: a model's 8 layers (64 KiB each) allocated at start into a static std::vector and
// used for 300 steps; held until exit (the vector is destroyed among the static destructors).
// Usage: cpp_layers
#include "rt.h"

#include <vector>

static std::vector<void *> g_layers;

NOINLINE void load_layers()
{
    for (int i = 0; i < 8; i++) {
        void *p = nullptr;
        check(cudaMalloc(&p, 64 << 10), "cudaMalloc");
        g_layers.push_back(p);
    }
}

int main()
{
    load_layers();
    for (int i = 0; i < 300; i++)
        memset(g_layers[i % g_layers.size()], i & 0xFF, 64);
    printf("%zu layers\n", g_layers.size());
    return 0;
}
