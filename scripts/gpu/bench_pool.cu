// Issue 18's pool-hit loop on a GPU, for scripts/bench-gpu.sh: N pairs of cudaMallocAsync +
// cudaFreeAsync of 4 KiB on one stream, from a 40-frame stack. A block freed on a stream is
// reused by the next allocation on that stream without waiting (CUDA Programming Guide,
// "Stream Ordered Memory Allocator", memory reuse policies: same-stream reuse), so after the
// warm-up every allocation is a hit in the default pool. The warm-up starts the shim's writer
// thread and the collector (they inherit the affinity the program started with, e.g.
// `taskset -c 3-15`); then the measuring thread pins itself to CPU `PIN` (as `taskset -c PIN`
// would, but for this thread only). The measured loop is timed in CHUNKS chunks of N / CHUNKS
// pairs: the host alternates between quiet and noisy periods, and the median chunk is the quiet
// periods' cost. Prints the mean ns per pair on stderr and, as its last line on stdout, the
// median chunk's ns per pair (scripts/bench-gpu.sh takes the last line).
// Usage: bench_pool N [PIN=2] [DEPTH=40]
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHUNKS 100

static long n_pairs;
static cudaStream_t stream;
static double elapsed;
/* Seconds per chunk of the measured loop (filled when `chunked`). */
static double chunk_s[CHUNKS];
static int chunked;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void check(cudaError_t e) {
    if (e != cudaSuccess) { fprintf(stderr, "cuda error %d\n", (int)e); exit(1); }
}

__attribute__((noinline)) static void leaf(void) {
    int chunks = chunked ? CHUNKS : 1;
    long per = n_pairs / chunks;
    double t0 = now();
    for (int c = 0; c < chunks; c++) {
        double c0 = now();
        for (long i = 0; i < per; i++) {
            void *p;
            check(cudaMallocAsync(&p, 4096, stream));
            check(cudaFreeAsync(p, stream));
        }
        chunk_s[c] = now() - c0;
    }
    elapsed = now() - t0;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) static void recurse(int depth) {
    if (depth <= 0) leaf(); else recurse(depth - 1);
    __asm__ volatile("" ::: "memory"); // not a tail call: each level is a real frame
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int pin = argc > 2 ? atoi(argv[2]) : 2;
    int depth = argc > 3 ? atoi(argv[3]) : 40;
    check(cudaFree(0));
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    n_pairs = 20000; // warm-up: the shim starts, the pool grows once, first-use costs are paid
    recurse(depth);
    check(cudaStreamSynchronize(stream));
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pin, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) { fprintf(stderr, "cannot pin to CPU %d\n", pin); return 1; }
    if (n < CHUNKS) n = CHUNKS;
    n -= n % CHUNKS; // whole chunks: every pair is in one
    n_pairs = n;
    chunked = 1;
    recurse(depth);
    check(cudaStreamSynchronize(stream));
    fprintf(stderr, "mean %.1f ns per pair over %ld pairs\n", elapsed * 1e9 / n, n);
    qsort(chunk_s, CHUNKS, sizeof chunk_s[0], by_value);
    // The median of an even number of chunks: the mean of the two middle ones.
    double med = (chunk_s[CHUNKS / 2 - 1] + chunk_s[CHUNKS / 2]) / 2;
    printf("%.1f\n", med * 1e9 / (n / CHUNKS));
    check(cudaStreamDestroy(stream));
    return 0;
}
