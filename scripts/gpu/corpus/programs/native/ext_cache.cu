// A native extension (a shared library built by nvcc with its default static runtime), loaded
// by Python with ctypes (ext_map.py, ext_scratch.py, ext_workspace.py). It keeps device
// buffers in std::map globals of its own.
//
//   ext_acquire(key, n)  a buffer per key, kept in g_buffers: grows with every new key (a leak
//                        when the keys never repeat; every pointer stays in the map)
//   ext_workspace(n)     one workspace per size, kept in g_workspaces: bounded by the sizes used
//   ext_scratch(n)       a scratch buffer per call that is never freed and whose pointer is
//                        dropped on return: truly lost
//   ext_clear_stack()    zeroes the stack below the caller (no stale copy of a dropped pointer)
#include "common.h"

#include <map>

static std::map<long, void *> g_buffers;
static std::map<size_t, void *> g_workspaces;

extern "C" int ext_acquire(long key, size_t n)
{
    void *p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) // @leak
        return 1;
    g_buffers[key] = p;
    return cudaMemset(p, 0, n) != cudaSuccess;
}

extern "C" int ext_workspace(size_t n)
{
    auto it = g_workspaces.find(n);
    if (it == g_workspaces.end()) {
        void *p = nullptr;
        if (cudaMalloc(&p, n) != cudaSuccess)
            return 1;
        it = g_workspaces.emplace(n, p).first;
    }
    return cudaMemset(it->second, 1, n) != cudaSuccess;
}

extern "C" int ext_scratch(size_t n)
{
    void *p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) // @lost
        return 1;
    // Bug: the scratch buffer is neither freed nor returned.
    return cudaMemset(p, 2, n) != cudaSuccess;
}

extern "C" size_t ext_count() { return g_buffers.size() + g_workspaces.size(); }

extern "C" void ext_clear_stack() { clear_stack(); }
