/*
 * librtldnext.so: a second, independent interposer of cudaMalloc, of the kind
 * that finds the real function with dlsym(RTLD_NEXT, ...).  Preloaded after
 * libgpushim.so ("libgpushim.so:librtldnext.so"), its RTLD_NEXT lookup must
 * still find the next cudaMalloc after *this* library, never itself.
 *
 * Recursion is detected and reported (abort with a message) rather than left
 * to overflow the stack.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define API __attribute__((visibility("default")))

typedef int (*cudaMalloc_fn)(void **, size_t);

static _Atomic(cudaMalloc_fn) next_cudaMalloc;
static atomic_int calls;
static __thread int depth;

API int cudaMalloc(void **devPtr, size_t size);

API int rtldnext_calls(void) { return atomic_load(&calls); }

/* This library's own cudaMalloc, bound locally (immune to interposition). */
extern int rtldnext_self(void **, size_t)
    __attribute__((alias("cudaMalloc"), visibility("hidden")));

API int cudaMalloc(void **devPtr, size_t size)
{
    if (depth > 0) {
        fprintf(stderr, "librtldnext: cudaMalloc re-entered itself: the RTLD_NEXT lookup "
                        "resolved back into this library\n");
        abort();
    }
    cudaMalloc_fn next = atomic_load(&next_cudaMalloc);
    if (next == NULL) {
        next = (cudaMalloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
        if (next == NULL) {
            fprintf(stderr, "librtldnext: dlsym(RTLD_NEXT, cudaMalloc) found nothing\n");
            abort();
        }
        if (next == rtldnext_self) {
            fprintf(stderr, "librtldnext: dlsym(RTLD_NEXT, cudaMalloc) returned this "
                            "library's own cudaMalloc\n");
            abort();
        }
        atomic_store(&next_cudaMalloc, next);
    }
    atomic_fetch_add(&calls, 1);
    depth++;
    int r = next(devPtr, size);
    depth--;
    return r;
}
