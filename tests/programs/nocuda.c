/*
 * A program that never uses CUDA but probes for it, as libraries with optional GPU paths do:
 * an RTLD_DEFAULT lookup and a weak reference.  Prints what it found.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*malloc_fn)(void **, unsigned long);
extern int cudaMalloc(void **, unsigned long) __attribute__((weak));

int main(void)
{
    void *d = dlsym(RTLD_DEFAULT, "cudaMalloc");
    printf("dlsym %s\n", d ? "found" : "null");
    printf("cuMemAlloc_v2 %s\n", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "found" : "null");
    if (cudaMalloc) {
        void *p = 0;
        printf("weak bound %d\n", cudaMalloc(&p, 4096));
    } else {
        printf("weak null\n");
    }
    printf("ok\n");
    return 0;
}
