// Leak, reachable: a static std::map keeps a 64 KiB buffer per request id, and ids never
// repeat. Every pointer stays in the map until the static destructors run at exit.
// Usage: cpp_map fast|slow   (slow: 50 ms between requests)
#include "rt.h"

#include <map>

static std::map<int, void *> g_buffers;

NOINLINE void serve(int id)
{
    void *p = nullptr;
    check(cudaMalloc(&p, 64 << 10), "cudaMalloc"); // @leak
    g_buffers[id] = p;
}

int main(int argc, char **argv)
{
    int slow = slow_variant(argc, argv);
    for (int id = 0; id < 40; id++) {
        serve(id);
        if (slow)
            usleep(50 * 1000);
    }
    printf("%zu buffers\n", g_buffers.size());
    return 0;
}
