/* Leak, truly lost: each frame's 64 KiB buffer is allocated into the same pointer without
 * freeing the previous one; the last is freed at the end. 40 frames: 39 lost.
 * Usage: c_lost fast|slow   (slow: 50 ms between frames) */
#include "rt.h"

struct renderer {
    void *frame;
    size_t bytes;
};

NOINLINE void begin_frame(struct renderer *r)
{
    /* Bug: r->frame still holds the previous frame's buffer. */
    check(cudaMalloc(&r->frame, r->bytes), "cudaMalloc"); // @leak
}

int main(int argc, char **argv)
{
    int slow = slow_variant(argc, argv);
    struct renderer r = {NULL, 64 << 10};
    for (int i = 0; i < 40; i++) {
        begin_frame(&r);
        if (slow)
            usleep(50 * 1000);
    }
    check(cudaFree(r.frame), "cudaFree");
    r.frame = NULL;
    clear_stack();
    printf("40 frames\n");
    return 0;
}
