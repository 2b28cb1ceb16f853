/* Threads and vendor libraries (issue 13): `threads cublas-per-thread N` starts N threads one
 * after another, each named `gemm-<i>`, each creating a cuBLAS handle (the fake libcublas.so.13
 * beside it) in worker_gemm and never destroying it: one cause, three stacks per thread.
 * `threads cublas-hidden N` then moves the handles' state out of the reachability scan's sight. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cublasCreate_v2(void **handle);
/* The stand-in's: its handles' state out of the scan's sight (fakecublas.c). */
void standin_cublas_hide_handles(void);

__attribute__((noinline)) static void worker_gemm(void) {
    void *handle = NULL;
    if (cublasCreate_v2(&handle) != 0) { /* worker_gemm: the handle's line */
        abort();
    }
}

/* Zeroes 64 KiB of stack below the caller. */
__attribute__((noinline)) static void clear_stack(void) {
    volatile char buf[64 << 10];
    memset((char *)buf, 0, sizeof buf);
}

static void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "gemm-%d", (int)(long)arg);
    pthread_setname_np(pthread_self(), name);
    worker_gemm();
    return NULL;
}

int main(int argc, char **argv) {
    int hidden = argc >= 2 && strcmp(argv[1], "cublas-hidden") == 0;
    if (argc < 2 || (!hidden && strcmp(argv[1], "cublas-per-thread") != 0)) {
        fprintf(stderr, "usage: threads cublas-per-thread|cublas-hidden [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 100;
    if (hidden) {
        /* On this thread, whose stack is then cleared of the handles' stale copies. */
        for (int i = 0; i < n; i++) {
            worker_gemm();
        }
        standin_cublas_hide_handles();
        clear_stack();
        printf("ok\n");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)(long)i) != 0 || pthread_join(t, NULL) != 0) {
            return 1;
        }
    }
    printf("ok\n");
    return 0;
}
