// A native extension for Python (ctypes), linked to the runtime stand-in: std::map globals of
// its own hold device buffers.
//   ext_acquire(key, n)  a buffer per key in g_buffers (grows with every new key)
//   ext_workspace(n)     one workspace per size in g_workspaces (bounded by the sizes used)
#include "rt.h"

#include <map>

static std::map<long, void *> g_buffers;
static std::map<size_t, void *> g_workspaces;

extern "C" int ext_acquire(long key, size_t n)
{
    void *p = nullptr;
    if (cudaMalloc(&p, n) != 0) // @leak
        return 1;
    g_buffers[key] = p;
    return 0;
}

extern "C" int ext_workspace(size_t n)
{
    if (g_workspaces.count(n))
        return 0;
    void *p = nullptr;
    if (cudaMalloc(&p, n) != 0)
        return 1;
    g_workspaces[n] = p;
    return 0;
}

extern "C" size_t ext_count() { return g_buffers.size() + g_workspaces.size(); }
