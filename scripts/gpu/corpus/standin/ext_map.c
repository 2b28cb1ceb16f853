/* A native extension for Python (ctypes), linked to the runtime stand-in, with maps of its own
 * (map.h: std::map's layout and lifetime, destroyed among the exit handlers) holding device
 * buffers:
 *   ext_acquire(key, n)  a buffer per key in g_buffers (grows with every new key)
 *   ext_workspace(n)     one workspace per size in g_workspaces (bounded by the sizes used) */
#include "rt.h"
#include "map.h"

static struct map g_buffers, g_workspaces;

static void destroy_maps(void)
{
    map_destroy(&g_buffers);
    map_destroy(&g_workspaces);
}

__attribute__((constructor)) static void init_maps(void) { atexit(destroy_maps); }

__attribute__((visibility("default"))) int ext_acquire(long key, size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != 0) // @leak
        return 1;
    map_put(&g_buffers, key, p);
    return cudaMemset(p, 0, n) != 0;
}

__attribute__((visibility("default"))) int ext_workspace(size_t n)
{
    void *p = map_find(&g_workspaces, (long)n);
    if (p == NULL) {
        if (cudaMalloc(&p, n) != 0)
            return 1;
        map_put(&g_workspaces, (long)n, p);
    }
    return cudaMemset(p, 1, n) != 0;
}

__attribute__((visibility("default"))) size_t ext_count(void) { return g_buffers.size + g_workspaces.size; }
