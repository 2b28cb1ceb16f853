/*
 * A program linked with -nostartfiles (tests/faults/exits.rs): its own _start, so glibc's
 * __libc_start_main never runs (nor does the shim's wrapper of it, nor a `main`).  Allocates
 * 1 MiB of device memory, keeps it, prints "ok" and calls exit(0).  Linked to the stand-in
 * libcudart.so.13.
 */
#define _GNU_SOURCE
#include "cudart_standin.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The kernel enters _start with the stack 16-byte aligned and no return address pushed. */
__attribute__((force_align_arg_pointer, noreturn)) void _start(void)
{
    void *d = NULL;
    if (cudaMalloc(&d, (size_t)1 << 20) != cudaSuccess) {
        static const char msg[] = "nostart: cudaMalloc failed\n";
        write(2, msg, sizeof msg - 1);
        exit(1);
    }
    static const char ok[] = "ok\n";
    write(1, ok, sizeof ok - 1);
    exit(0);
}
