// Leak, reachable: every step's 4 MiB result buffer is pushed onto a static std::vector "for
// the replay" and never freed. The vector holds every pointer until the program exits (its
// destructor runs among the static destructors at exit). Built with -cudart shared.
//
// Usage: cxx_vector fast|slow   (slow: 80 ms between steps)
#include "common.h"

#include <vector>

static std::vector<void *> g_history;

NOINLINE void record_step(int i)
{
    void *p = nullptr;
    check(cudaMalloc(&p, 4u << 20), "cudaMalloc"); // @leak
    check(cudaMemset(p, i & 0xFF, 4u << 20), "cudaMemset");
    g_history.push_back(p);
}

int main(int argc, char **argv)
{
    bool slow = slow_variant(argc, argv);
    for (int i = 0; i < 60; i++) {
        record_step(i);
        if (slow)
            usleep(80 * 1000);
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("kept %zu buffers\n", g_history.size());
    return 0;
}
