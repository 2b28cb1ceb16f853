/* Leak, reachable: a static map (map.h: std::map's layout and lifetime) keeps a 64 KiB buffer
 * per request id, and ids never repeat. Every pointer stays in the map's nodes for the run; the
 * nodes are freed among the exit handlers, as a static std::map's are.
 * Usage: c_map fast|slow   (slow: 50 ms between requests) */
#include "rt.h"
#include "map.h"

static struct map g_buffers;

static void destroy_buffers(void) { map_destroy(&g_buffers); }

__attribute__((constructor)) static void init_buffers(void) { atexit(destroy_buffers); }

NOINLINE void serve(int id)
{
    void *p = NULL;
    check(cudaMalloc(&p, 64 << 10), "cudaMalloc"); // @leak
    map_put(&g_buffers, id, p);
}

int main(int argc, char **argv)
{
    int slow = slow_variant(argc, argv);
    for (int id = 0; id < 40; id++) {
        serve(id);
        if (slow)
            usleep(50 * 1000);
    }
    printf("%zu buffers\n", g_buffers.size);
    return 0;
}
