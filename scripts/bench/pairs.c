/* Per-call cost of an intercepted cudaMalloc+cudaFree pair, against the CUDA stand-ins.
 * Loads NLIBS padding shared objects (so the unwinder and loader see a process the size of a
 * real framework's), recurses DEPTH frames, then times N pairs one by one.
 * MODE "async" (issue 18's pool-hit loop) makes each pair cudaMallocAsync + cudaFreeAsync of
 * 4 KiB on an explicit stream of device 0 (the stand-ins' handle 0x5000, cuda_contexts.c)
 * instead; "sync" (the default) cudaMalloc + cudaFree.
 * Usage: pairs N DEPTH NLIBS PADDIR [MODE]    Prints: median_ns p99_ns mean_ns
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int cudaError_t;
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, void *stream);
cudaError_t cudaFreeAsync(void *p, void *stream);

/* An explicit stream of device 0 in the stand-ins (not the legacy or per-thread default one). */
#define STREAM ((void *)0x5000)
static int async_mode;

static long n_pairs;
static long *samples;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) static void leaf(void) {
    for (long i = 0; i < n_pairs; i++) {
        void *p;
        long t0 = now_ns();
        int bad = async_mode ? cudaMallocAsync(&p, 4096, STREAM) != 0 || cudaFreeAsync(p, STREAM) != 0
                             : cudaMalloc(&p, 4096) != 0 || cudaFree(p) != 0;
        samples[i] = now_ns() - t0;
        if (bad) { fprintf(stderr, "cuda error\n"); exit(1); }
    }
}

__attribute__((noinline)) static void recurse(int depth) {
    if (depth <= 0) leaf(); else recurse(depth - 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call: each level is a real frame */
}

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: pairs N DEPTH NLIBS PADDIR [sync|async]\n"); return 2; }
    async_mode = argc == 6 && argv[5][0] == 'a';
    n_pairs = atol(argv[1]);
    int depth = atoi(argv[2]), nlibs = atoi(argv[3]);
    for (int i = 0; i < nlibs; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libpad%03d.so", argv[4], i);
        if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    }
    samples = malloc(sizeof(long) * n_pairs);
    long keep = n_pairs;
    n_pairs = keep / 10;          /* warm-up: first-use costs (stack interning, lazy binding) */
    recurse(depth);
    n_pairs = keep;
    recurse(depth);
    qsort(samples, n_pairs, sizeof(long), cmp);
    double sum = 0;
    for (long i = 0; i < n_pairs; i++) sum += samples[i];
    printf("%ld %ld %.0f\n", samples[n_pairs / 2], samples[(long)(n_pairs * 0.99)], sum / n_pairs);
    return 0;
}
