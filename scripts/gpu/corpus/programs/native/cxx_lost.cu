// Leak, truly lost: a renderer allocates each frame's 4 MiB buffer into the same pointer
// without freeing the previous one; at the end it frees only the last. 60 frames: 59
// allocations have no pointer left anywhere. nvcc's default (static) runtime.
//
// Usage: cxx_lost fast|slow   (slow: 80 ms between frames)
#include "common.h"

struct Renderer {
    float *frame;
    size_t bytes;
};

NOINLINE void begin_frame(Renderer *r, int i)
{
    // Bug: r->frame still holds the previous frame's buffer.
    check(cudaMalloc(&r->frame, r->bytes), "cudaMalloc"); // @leak
    check(cudaMemset(r->frame, i & 0xFF, r->bytes), "cudaMemset");
}

NOINLINE void finish(Renderer *r)
{
    check(cudaFree(r->frame), "cudaFree");
    r->frame = nullptr;
}

int main(int argc, char **argv)
{
    bool slow = slow_variant(argc, argv);
    Renderer r{nullptr, 4u << 20};
    for (int i = 0; i < 60; i++) {
        begin_frame(&r, i);
        if (slow)
            usleep(80 * 1000);
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    finish(&r);
    clear_stack();
    std::printf("rendered 60 frames\n");
    return 0;
}
