/*
 * Reaches CUDA only through a library dlopen'ed RTLD_LOCAL that links the runtime (how Python
 * loads PyTorch's extension modules): the runtime is out of the global scope, so the shim finds
 * the real cudaMalloc inside it.  Allocates 1 MiB; prints "ok".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    /* By full path: a preloaded dlopen wrapper's call would search its own RUNPATH. */
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0)
        return 1;
    path[n] = 0;
    strcpy(strrchr(path, '/') + 1, "libcudauser.so");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "localrt: %s\n", dlerror());
        return 1;
    }
    int (*user_alloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(h, "cudauser_alloc");
    void *p = NULL;
    int rc = user_alloc(&p, 1 << 20);
    if (rc != 0) {
        fprintf(stderr, "localrt: cudauser_alloc returned %d\n", rc);
        return 1;
    }
    printf("ok\n");
    return 0;
}
