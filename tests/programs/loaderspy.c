/*
 * Preloaded after libgpushim.so: reports any dlopen made while the same thread is inside
 * dl_iterate_phdr (a lock-order inversion with a concurrent dlopen: it can hang the program).
 * The shim's own references to dl_iterate_phdr and dlopen bind here, ahead of libc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

static __thread int inside;

__attribute__((visibility("default"))) int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *),
                                                           void *data)
{
    static int (*real)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
    if (real == NULL)
        real = (int (*)(int (*)(struct dl_phdr_info *, size_t, void *), void *))dlsym(RTLD_NEXT, "dl_iterate_phdr");
    inside++;
    int r = real(cb, data);
    inside--;
    return r;
}

__attribute__((visibility("default"))) void *dlopen(const char *file, int flags)
{
    static void *(*real)(const char *, int);
    if (real == NULL)
        real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    if (inside)
        fprintf(stderr, "loaderspy: dlopen(%s) inside dl_iterate_phdr\n", file ? file : "NULL");
    return real(file, flags);
}
