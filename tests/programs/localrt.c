/*
 * Reaches CUDA only through libraries dlopen'ed RTLD_LOCAL that link the runtime (how Python
 * loads PyTorch's extension modules): the runtime is out of the global scope, so the shim finds
 * the real cudaMalloc inside it.
 *
 * localrt:      libcudauser.so (libcudart.so.13) allocates 1 MiB; prints "ok".
 * localrt two:  also libcudauser12.so, linked to a second runtime (libcudart.so.12), allocates
 *               2 and 4 MiB and frees the 4 MiB; each library's calls must reach its own runtime.
 *               Prints what each runtime served, then "ok".  Live at exit: 3 MiB.
 */
#define _GNU_SOURCE
#include "cudart_standin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

typedef cudaError_t (*alloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

/* dlopen's `name` RTLD_LOCAL from this program's directory.  By full path: a preloaded dlopen
 * wrapper's call would search its own RUNPATH. */
static void *open_local(const char *name)
{
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 64);
    if (n <= 0)
        return NULL;
    path[n] = 0;
    strcpy(strrchr(path, '/') + 1, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        fprintf(stderr, "localrt: %s\n", dlerror());
    return h;
}

static int alloc_through(void *h, void **p, size_t n)
{
    alloc_fn user_alloc = (alloc_fn)dlsym(h, "cudauser_alloc");
    int rc = user_alloc(p, n);
    if (rc != 0)
        fprintf(stderr, "localrt: cudauser_alloc returned %d\n", rc);
    return rc;
}

/* What the runtime `h` links served: dlsym on a library's handle searches its dependencies. */
static void print_served(const char *label, void *h)
{
    PFN_cudart_standin_calls calls = (PFN_cudart_standin_calls)dlsym(h, "cudart_standin_calls");
    printf("%s cudaMalloc=%lu cudaFree=%lu\n", label, calls("cudaMalloc"), calls("cudaFree"));
}

int main(int argc, char **argv)
{
    void *h13 = open_local("libcudauser.so");
    void *p = NULL;
    if (h13 == NULL || alloc_through(h13, &p, 1 * MiB) != 0)
        return 1;
    if (argc > 1 && strcmp(argv[1], "two") == 0) {
        void *h12 = open_local("libcudauser12.so");
        void *q = NULL, *r = NULL;
        if (h12 == NULL || alloc_through(h12, &q, 2 * MiB) != 0 || alloc_through(h12, &r, 4 * MiB) != 0)
            return 1;
        if (((free_fn)dlsym(h12, "cudauser_free"))(r) != 0) {
            fprintf(stderr, "localrt: cudauser_free failed\n");
            return 1;
        }
        print_served("runtime13", h13);
        print_served("runtime12", h12);
    }
    printf("ok\n");
    return 0;
}
